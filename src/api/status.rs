//! The error → status table is autoscaled-wire's ([`autoscaled_wire::status`], re-exported
//! here so every handler's path stays `api::status`); this module adds what only the server
//! knows: the status of each of its store's failures.

pub use autoscaled_wire::status::*;
use tonic::Status;

use crate::store::StoreError;

impl StoreFailure for StoreError {
    fn status(&self) -> Status {
        store_status(self)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError::Store(Box::new(e))
    }
}

/// The status of a store failure. Exhaustive, so a new `StoreError` variant must be placed here.
fn store_status(e: &StoreError) -> Status {
    match e {
        // A damaged record is found when it is read (start-up scans nothing): that target
        // answers DATA_LOSS naming its key (the caller's own), every other target keeps
        // working; the decoder's details stay in the server log.
        StoreError::UnknownVersion { kind, key, .. } | StoreError::Corrupt { kind, key, .. } => {
            Status::data_loss(format!(
                "the stored {kind} record of target {key:?} cannot be read (damaged, or written by a newer autoscaled); it is left in place (details in the server log)"
            ))
        }
        StoreError::Open { .. }
        | StoreError::InUse { .. }
        | StoreError::Sled(_)
        | StoreError::Flush(_) => {
            Status::internal("internal storage error (details in the server log)")
        }
        // Reopening after a storage failure: retry later.
        StoreError::Unavailable(_) => {
            Status::unavailable("storage is recovering from a failure; retry later")
        }
        // Shutting down: the client may retry on another instance or after restart.
        StoreError::FlusherStopped => Status::unavailable("the server is shutting down"),
        // etcd unreachable: another replica (or a retry once etcd is back) may succeed.
        StoreError::Etcd(_) => Status::unavailable("the history store (etcd) is unreachable"),
        // Declined before anything was read or written: a replica that forwarded the call
        // decides it itself (`api::forward`), a client may retry on another replica.
        StoreError::Lapsed => {
            let mut status = Status::unavailable(
                "this replica is cut off from etcd (its registration lapsed); another replica decides its targets",
            );
            mark_declined(&mut status);
            status
        }
        // Still conflicting after the API's retries: the target is written by another replica
        // right now; retrying the call is safe.
        StoreError::Conflict { .. } => {
            Status::aborted("the target was updated concurrently by another replica; retry")
        }
    }
}

#[cfg(test)]
mod tests {
    use tonic::Code;

    use super::*;

    #[test]
    fn store_failures_are_sanitized() {
        let status: Status = ApiError::from(StoreError::Corrupt {
            kind: "state",
            key: "secret/path".into(),
            message: "bad json at byte 7".into(),
        })
        .into();
        assert_eq!(status.code(), Code::DataLoss);
        assert!(
            status.message().contains("\"secret/path\""),
            "{}",
            status.message()
        );
        assert!(!status.message().contains("byte 7"), "{}", status.message());
        let sled: Status = ApiError::from(StoreError::Flush("disk /secret full".into())).into();
        assert_eq!(sled.code(), Code::Internal);
        assert!(!sled.message().contains("secret"), "{}", sled.message());
        let unavailable: Status = ApiError::from(StoreError::FlusherStopped).into();
        assert_eq!(unavailable.code(), Code::Unavailable);
    }
}
