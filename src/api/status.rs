//! The one table from service errors to gRPC statuses (quickwit `ServiceErrorCode`, linkerd
//! `respond.rs`): an exhaustive `match` with no catch-all, so a new variant cannot be
//! miscoded silently. Internal failures are logged here and reach clients sanitized.

use thiserror::Error;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::{engine::error::InvalidInput, store::StoreError};

/// Everything a handler can fail with.
#[derive(Debug, Error)]
pub enum ApiError {
    /// Fields of the request break a rule; each violation names its field path
    /// (`spec.metrics[1].target.average_utilization`).
    #[error("invalid request: {}", summary(.0))]
    InvalidArgument(Vec<InvalidInput>),
    /// The request is larger than a configured limit (pods, metrics).
    #[error("{field}: {message}")]
    ResourceExhausted { field: String, message: String },
    /// The target has no stored history.
    #[error("no history stored for target {0:?}")]
    TargetNotFound(String),
    /// The store failed; details are logged, not sent.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// A bug (e.g. the engine panicked); details are logged, not sent.
    #[error("internal: {0}")]
    Internal(String),
}

impl ApiError {
    /// One field violation.
    pub fn field(field: impl Into<String>, description: impl Into<String>) -> Self {
        ApiError::InvalidArgument(vec![InvalidInput::new(field, description)])
    }
}

fn summary(violations: &[InvalidInput]) -> String {
    violations
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
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
        // Shutting down: the client may retry on another instance or after restart.
        StoreError::FlusherStopped => Status::unavailable("the server is shutting down"),
        // etcd unreachable: another replica (or a retry once etcd is back) may succeed.
        StoreError::Etcd(_) => Status::unavailable("the history store (etcd) is unreachable"),
        // Still conflicting after the API's retries: the target is written by another replica
        // right now; retrying the call is safe.
        StoreError::Conflict { .. } => {
            Status::aborted("the target was updated concurrently by another replica; retry")
        }
    }
}

impl From<ApiError> for Status {
    fn from(e: ApiError) -> Status {
        match e {
            ApiError::InvalidArgument(violations) => {
                let message = format!("invalid request: {}", summary(&violations));
                let mut details = ErrorDetails::new();
                for v in violations {
                    details.add_bad_request_violation(v.field, v.description);
                }
                Status::with_error_details(Code::InvalidArgument, message, details)
            }
            ApiError::ResourceExhausted { field, message } => {
                let text = format!("{field}: {message}");
                let mut details = ErrorDetails::new();
                details.add_bad_request_violation(field, message);
                Status::with_error_details(Code::ResourceExhausted, text, details)
            }
            ApiError::TargetNotFound(key) => {
                Status::not_found(format!("no history stored for target {key:?}"))
            }
            ApiError::Internal(message) => {
                tracing::error!(error = %message, "internal error");
                Status::internal("internal error (details in the server log)")
            }
            ApiError::Store(e) => {
                tracing::error!(error = %e, "store failure");
                store_status(&e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_argument_carries_every_field_violation() {
        let status: Status = ApiError::InvalidArgument(vec![
            InvalidInput::new("target_key", "must not be empty"),
            InvalidInput::new("spec.max_replicas", "must be greater than or equal to 1"),
        ])
        .into();
        assert_eq!(status.code(), Code::InvalidArgument);
        let bad = status
            .get_details_bad_request()
            .expect("BadRequest details");
        let fields: Vec<_> = bad
            .field_violations
            .iter()
            .map(|v| v.field.as_str())
            .collect();
        assert_eq!(fields, ["target_key", "spec.max_replicas"]);
        assert!(status.message().contains("target_key: must not be empty"));
    }

    #[test]
    fn store_failures_are_sanitized() {
        let status: Status = ApiError::Store(StoreError::Corrupt {
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
        let sled: Status = ApiError::Store(StoreError::Flush("disk /secret full".into())).into();
        assert_eq!(sled.code(), Code::Internal);
        assert!(!sled.message().contains("secret"), "{}", sled.message());
        let unavailable: Status = ApiError::Store(StoreError::FlusherStopped).into();
        assert_eq!(unavailable.code(), Code::Unavailable);
    }

    #[test]
    fn unknown_target_is_not_found() {
        let status: Status = ApiError::TargetNotFound("a/b".into()).into();
        assert_eq!(status.code(), Code::NotFound);
    }
}
