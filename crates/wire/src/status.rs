//! The one table from service errors to gRPC statuses (quickwit `ServiceErrorCode`, linkerd
//! `respond.rs`): an exhaustive `match` with no catch-all, so a new variant cannot be
//! miscoded silently. Internal failures are logged here and reach clients sanitized. A
//! server's store failures come in as [`StoreFailure`]s: the store knows which status each
//! of its failures is (the server's `api::status`).

use thiserror::Error;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::engine::error::InvalidInput;

/// A failure of a server's store. This crate does not know the store: the store's error says
/// which status a client sees (sanitized: no paths, no decoder details); the error itself is
/// logged here.
pub trait StoreFailure: std::error::Error + Send + Sync + 'static {
    /// What the client sees.
    fn status(&self) -> Status;
}

/// Everything a handler can fail with.
#[derive(Debug, Error)]
pub enum ApiError {
    /// Fields of the request break a rule; each violation names its field path
    /// (`spec.metrics[1].target.average_utilization`).
    #[error("invalid request: {}", summary(.0))]
    InvalidArgument(Vec<InvalidInput>),
    /// The request is larger than a configured limit (pods, metrics).
    #[error("{field}: {message}")]
    ResourceExhausted {
        /// The request field over its limit, e.g. `observation.pods`.
        field: String,
        /// The limit and how to raise it.
        message: String,
    },
    /// The target has no stored history.
    #[error("no history stored for target {0:?}")]
    TargetNotFound(String),
    /// The store failed; details are logged, not sent.
    #[error("store: {0}")]
    Store(Box<dyn StoreFailure>),
    /// A bug (e.g. the engine panicked); details are logged, not sent.
    #[error("internal: {0}")]
    Internal(String),
    /// The server is at its concurrency limit and its queue is full (or the caller's deadline
    /// is shorter than the expected wait): retry after about `retry_after_ms`.
    #[error("{message}")]
    Overloaded {
        /// What the client sees in the status message.
        message: String,
        /// The expected wait, sent as gRFC A6's `grpc-retry-pushback-ms` (Connect: `Retry-After`)
        /// so clients back off by it.
        retry_after_ms: u64,
    },
    /// The caller's deadline passed before the work was done; nothing was stored.
    #[error("{0}")]
    DeadlineExceeded(String),
    /// The target is not in the state the call needs (a reported decision that is no longer
    /// the newest); the message says what to do instead.
    #[error("{0}")]
    FailedPrecondition(String),
    /// A named thing other than a target (a policy, a scaling group) does not exist; the
    /// message names it.
    #[error("{0}")]
    NotFound(String),
    /// A write lost a race with another replica's; the message says to retry.
    #[error("{0}")]
    Aborted(String),
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

/// At most this many field violations go into an error's message and details; the rest are
/// counted ("... and N more"). A request of 10,000 bad pods used to send every violation in
/// the `grpc-message` and `grpc-status-details-bin` headers (1.6 MB), which clients refuse
/// (grpcio: 16 KB of metadata), so the caller saw none of them (issue 8).
pub(crate) const MAX_VIOLATIONS: usize = 20;
/// Bound on the `grpc-message` header once percent-encoded.
pub(crate) const MAX_MESSAGE_BYTES: usize = 1000;
/// Bound on one violation's field or description in the details, in bytes.
const MAX_VIOLATION_PART_BYTES: usize = 200;
/// Bound on the violations in the details (field + description bytes): the details travel
/// base64-encoded (4/3) in `grpc-status-details-bin` with a second copy of the message, so
/// the headers stay under 8 KB: 1000 + 4/3 × (1000 + 3000 + framing) < 6.5 KB.
const MAX_DETAILS_BYTES: usize = 3000;

/// Length of `c` in a `grpc-message` header as tonic percent-encodes it (`Status::add_header`:
/// controls, non-ASCII and ` "#%<>`?{}`).
fn encoded_len(c: char) -> usize {
    if ('!'..='~').contains(&c) && !"\"#%<>`?{}".contains(c) {
        1
    } else {
        3 * c.len_utf8()
    }
}

/// `text` cut at a character boundary so that it is at most `max` bytes once percent-encoded
/// (`...` marks a cut).
fn bounded(text: &str, max: usize) -> String {
    let total: usize = text.chars().map(encoded_len).sum();
    if total <= max {
        return text.to_owned();
    }
    let mut used = 3; // the "..."
    let mut out = String::new();
    for c in text.chars() {
        used += encoded_len(c);
        if used > max {
            break;
        }
        out.push(c);
    }
    out.push_str("...");
    out
}

/// A status whose message is bounded.
fn status(code: Code, message: &str) -> Status {
    Status::new(code, bounded(message, MAX_MESSAGE_BYTES))
}

/// The INVALID_ARGUMENT status of `violations`: the first [`MAX_VIOLATIONS`] (each part at
/// most 200 bytes, 3000 in all) in the BadRequest details and in the message while it fits
/// 1000 bytes, then "... and N more".
fn invalid_argument(violations: Vec<InvalidInput>) -> Status {
    let total = violations.len();
    let mut details = ErrorDetails::new();
    let mut detailed = 0;
    let mut detail_bytes = 0;
    for v in &violations {
        let field = bounded(&v.field, MAX_VIOLATION_PART_BYTES);
        let description = bounded(&v.description, MAX_VIOLATION_PART_BYTES);
        detail_bytes += field.len() + description.len();
        if detailed == MAX_VIOLATIONS || detail_bytes > MAX_DETAILS_BYTES {
            break;
        }
        details.add_bad_request_violation(field, description);
        detailed += 1;
    }
    let more = total - detailed;
    if more > 0 {
        details.add_bad_request_violation("", format!("... and {more} more violations"));
    }
    // The message: as many of the detailed violations as fit, then the count of the rest.
    let mut message = String::from("invalid request: ");
    let mut listed = 0;
    for v in violations.iter().take(detailed) {
        let part = bounded(&v.to_string(), MAX_VIOLATION_PART_BYTES);
        // Room for "; " and the "; ... and N more" tail.
        let tail = 40;
        if message.chars().map(encoded_len).sum::<usize>()
            + part.chars().map(encoded_len).sum::<usize>()
            + tail
            > MAX_MESSAGE_BYTES
        {
            break;
        }
        if listed > 0 {
            message.push_str("; ");
        }
        message.push_str(&part);
        listed += 1;
    }
    if listed < total {
        message.push_str(&format!("; ... and {} more", total - listed));
    }
    Status::with_error_details(
        Code::InvalidArgument,
        bounded(&message, MAX_MESSAGE_BYTES),
        details,
    )
}

impl From<ApiError> for Status {
    fn from(e: ApiError) -> Status {
        match e {
            ApiError::InvalidArgument(violations) => invalid_argument(violations),
            ApiError::ResourceExhausted { field, message } => {
                let field = bounded(&field, MAX_VIOLATION_PART_BYTES);
                let message = bounded(&message, MAX_VIOLATION_PART_BYTES);
                let text = format!("{field}: {message}");
                let mut details = ErrorDetails::new();
                details.add_bad_request_violation(field, message);
                Status::with_error_details(Code::ResourceExhausted, text, details)
            }
            ApiError::TargetNotFound(key) => status(
                Code::NotFound,
                &format!("no history stored for target {key:?}"),
            ),
            // gRFC A6's `grpc-retry-pushback-ms` tells gRPC clients with retry policies when
            // to retry; the message says it to people.
            ApiError::Overloaded {
                message,
                retry_after_ms,
            } => {
                let mut status = status(Code::ResourceExhausted, &message);
                set_retry_after(&mut status, retry_after_ms);
                status
            }
            ApiError::DeadlineExceeded(message) => status(Code::DeadlineExceeded, &message),
            ApiError::FailedPrecondition(message) => status(Code::FailedPrecondition, &message),
            ApiError::NotFound(message) => status(Code::NotFound, &message),
            ApiError::Aborted(message) => status(Code::Aborted, &message),
            ApiError::Internal(message) => {
                tracing::error!(error = %message, "internal error");
                Status::internal("internal error (details in the server log)")
            }
            ApiError::Store(e) => {
                tracing::error!(error = %e, "store failure");
                e.status()
            }
        }
    }
}

/// gRFC A6's header with the time a client should wait before it retries, in milliseconds.
pub const RETRY_PUSHBACK: &str = "grpc-retry-pushback-ms";

/// On an UNAVAILABLE answer: the replica declined the call before reading or writing
/// anything (cut off from etcd: its registration lapsed), so a replica that forwarded it to
/// this one decides it itself.
pub const DECLINED: &str = "autoscaled-declined";

/// Marks `status` as declined untouched ([`DECLINED`]).
pub fn mark_declined(status: &mut Status) {
    status
        .metadata_mut()
        .insert(DECLINED, tonic::metadata::MetadataValue::from_static("1"));
}

/// Whether `status` says the call was declined untouched ([`DECLINED`]).
pub fn declined(status: &Status) -> bool {
    status.metadata().contains_key(DECLINED)
}

/// `status`'s advice to retry after `ms` milliseconds ([`RETRY_PUSHBACK`]).
fn set_retry_after(status: &mut Status, ms: u64) {
    if let Ok(value) = ms.to_string().parse() {
        status.metadata_mut().insert(RETRY_PUSHBACK, value);
    }
}

/// The milliseconds `status` advises to wait before retrying, if it says.
pub fn retry_after_ms(status: &Status) -> Option<u64> {
    status
        .metadata()
        .get(RETRY_PUSHBACK)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// A request's answer in a RecommendBatch: its response, or its error as the status its own
/// Recommend call would have carried (code, message, the BadRequest detail's fields and the
/// retry advice).
pub fn batch_result(
    result: Result<tonic::Response<crate::pb::v1::RecommendResponse>, Status>,
) -> crate::pb::v1::RecommendBatchResult {
    use crate::pb::v1::{FieldViolation, RecommendError, recommend_batch_result::Result};
    let result = match result {
        Ok(response) => Result::Response(response.into_inner()),
        Err(status) => Result::Error(RecommendError {
            code: status.code() as i32,
            message: status.message().to_owned(),
            field_violations: status
                .get_details_bad_request()
                .map(|bad| bad.field_violations)
                .unwrap_or_default()
                .into_iter()
                .map(|v| FieldViolation {
                    field: v.field,
                    description: v.description,
                })
                .collect(),
            retry_after_ms: retry_after_ms(&status).unwrap_or(0),
            declined: declined(&status),
        }),
    };
    crate::pb::v1::RecommendBatchResult {
        result: Some(result),
    }
}

/// [`batch_result`] read back by a client: the response, or the status the request's own
/// Recommend would have returned (its BadRequest fields as details). A result without either
/// (a server that left it out) is an INTERNAL error.
pub fn batch_answer(
    result: Option<crate::pb::v1::RecommendBatchResult>,
) -> Result<crate::pb::v1::RecommendResponse, Status> {
    use crate::pb::v1::recommend_batch_result::Result;
    match result.and_then(|r| r.result) {
        Some(Result::Response(response)) => Ok(response),
        Some(Result::Error(error)) => {
            let code = Code::from_i32(error.code);
            let mut status = if error.field_violations.is_empty() {
                Status::new(code, error.message)
            } else {
                let mut details = ErrorDetails::new();
                for v in error.field_violations {
                    details.add_bad_request_violation(v.field, v.description);
                }
                Status::with_error_details(code, error.message, details)
            };
            if error.retry_after_ms > 0 {
                set_retry_after(&mut status, error.retry_after_ms);
            }
            if error.declined {
                mark_declined(&mut status);
            }
            Err(status)
        }
        None => Err(Status::internal(
            "the RecommendBatch answer had no result for this request",
        )),
    }
}

/// A refusal of a whole RecommendBatch before any of it was decided, for what one of its
/// requests is (or the method's absence: a server before it): each request alone may get
/// another answer, so a client (or a replica forwarding a batch to its owner) sends them one
/// by one. A limit names its field; an overload does not, and is the same for each request.
pub fn batch_refused_untouched(status: &Status) -> bool {
    match status.code() {
        Code::Unimplemented | Code::InvalidArgument | Code::PermissionDenied => true,
        Code::ResourceExhausted => status.get_details_bad_request().is_some(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch's result carries what the request's own call would have: its response, or
    /// its code, message and field violations, read back as the same status.
    #[test]
    fn a_batch_result_reads_back_as_the_calls_own_answer() {
        let response = crate::pb::v1::RecommendResponse {
            desired_replicas: 3,
            ..Default::default()
        };
        let ok = batch_answer(Some(batch_result(Ok(tonic::Response::new(
            response.clone(),
        )))));
        assert_eq!(ok.unwrap(), response);
        let status: Status = ApiError::InvalidArgument(vec![
            InvalidInput::new("spec.max_replicas", "must be at least 1"),
            InvalidInput::new("pods[0].ready", "is required"),
        ])
        .into();
        let back = batch_answer(Some(batch_result(Err(status.clone())))).unwrap_err();
        assert_eq!(back.code(), status.code());
        assert_eq!(back.message(), status.message());
        let fields = |s: &Status| {
            s.get_details_bad_request()
                .map(|b| {
                    b.field_violations
                        .into_iter()
                        .map(|v| (v.field, v.description))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        };
        assert_eq!(fields(&back), fields(&status));
        assert_eq!(fields(&back).len(), 2);
        let plain = batch_answer(Some(batch_result(Err(Status::aborted("conflict"))))).unwrap_err();
        assert_eq!((plain.code(), plain.message()), (Code::Aborted, "conflict"));
        assert_eq!(retry_after_ms(&plain), None);
        let shed: Status = ApiError::Overloaded {
            message: "overloaded".into(),
            retry_after_ms: 250,
        }
        .into();
        let back = batch_answer(Some(batch_result(Err(shed)))).unwrap_err();
        assert_eq!(back.code(), Code::ResourceExhausted);
        assert_eq!(retry_after_ms(&back), Some(250));
        assert!(!declined(&back));
        let mut cut_off = Status::unavailable("cut off");
        mark_declined(&mut cut_off);
        let back = batch_answer(Some(batch_result(Err(cut_off)))).unwrap_err();
        assert!(back.metadata().contains_key("autoscaled-declined"));
        assert!(declined(&back));
        assert_eq!(batch_answer(None).unwrap_err().code(), Code::Internal);
    }

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

    /// Every header of the trailers-only response tonic sends for `status`, in bytes.
    fn header_bytes(status: &Status) -> usize {
        let response = status.clone().into_http::<()>();
        response
            .headers()
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len())
            .sum()
    }

    #[test]
    fn ten_thousand_violations_stay_under_the_header_bounds() {
        let violations = (0..10_000)
            .map(|i| {
                InvalidInput::new(
                    format!("pods[{i}].requests_milli[cpu]"),
                    "must be greater than or equal to 0",
                )
            })
            .collect();
        let status: Status = ApiError::InvalidArgument(violations).into();
        let bad = status
            .get_details_bad_request()
            .expect("BadRequest details");
        assert_eq!(bad.field_violations.len(), MAX_VIOLATIONS + 1);
        assert_eq!(bad.field_violations[0].field, "pods[0].requests_milli[cpu]");
        assert_eq!(
            bad.field_violations[MAX_VIOLATIONS].description,
            "... and 9980 more violations"
        );
        assert!(status.message().ends_with(" more"), "{}", status.message());
        assert!(status.message().starts_with("invalid request: pods[0]"));
        let response = status.clone().into_http::<()>();
        let message = response.headers()["grpc-message"].len();
        assert!(message < 1024, "grpc-message {message} bytes");
        let all = header_bytes(&status);
        assert!(all < 8 * 1024, "headers {all} bytes");
        eprintln!("10,000 violations: grpc-message {message} bytes, all headers {all} bytes");
    }

    #[test]
    fn long_and_non_ascii_parts_are_cut_by_their_encoded_size() {
        let long = "é".repeat(5000);
        let status: Status =
            ApiError::InvalidArgument(vec![InvalidInput::new(long.clone(), long.clone()); 50])
                .into();
        let response = status.clone().into_http::<()>();
        assert!(response.headers()["grpc-message"].len() < 1024);
        assert!(
            header_bytes(&status) < 8 * 1024,
            "{}",
            header_bytes(&status)
        );
        let not_found: Status = ApiError::TargetNotFound(long).into();
        assert!(not_found.into_http::<()>().headers()["grpc-message"].len() < 1024);
    }

    #[test]
    fn overload_carries_a_retry_pushback() {
        let status: Status = ApiError::Overloaded {
            message: "overloaded; retry in about 250 ms".into(),
            retry_after_ms: 250,
        }
        .into();
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert_eq!(
            status.metadata().get("grpc-retry-pushback-ms").unwrap(),
            "250"
        );
    }

    #[test]
    fn unknown_target_is_not_found() {
        let status: Status = ApiError::TargetNotFound("a/b".into()).into();
        assert_eq!(status.code(), Code::NotFound);
    }
}
