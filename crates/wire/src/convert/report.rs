//! `ReportScale`: the request as the handler uses it, and the response.

use crate::{
    engine::{hpa::Decision, time::Time},
    limits::Limits,
    pb::v1::{self as pb, ScaleOutcome},
    status::ApiError,
};

use super::wire::{Violations, check_target_key, timestamp};

/// The longest failure message kept: it goes into the stored decision's AbleToScale message.
pub(crate) const MAX_REPORT_MESSAGE_BYTES: usize = 1024;

/// A validated `ReportScaleRequest`.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleReport {
    /// The target whose newest decision is reported.
    pub target_key: String,
    /// The reported decision's evaluation time.
    pub time: Time,
    /// The decision's desired count, as the caller received it.
    pub desired_replicas: i32,
    /// `Some(the scheduler's error)` for FAILED, `None` for APPLIED.
    pub failure: Option<String>,
}

/// Checks every field (all violations at once, each named).
pub fn report_scale_request(
    req: pb::ReportScaleRequest,
    limits: &Limits,
) -> Result<ScaleReport, ApiError> {
    let mut v = Violations::default();
    check_target_key(&mut v, &req.target_key, limits);
    let time = match &req.evaluation_time {
        Some(t) => timestamp(&mut v, "evaluation_time", t),
        None => {
            v.add(
                "evaluation_time",
                "is required: the Recommend response's evaluation_time",
            );
            None
        }
    };
    if req.desired_replicas < 0 {
        v.add("desired_replicas", "must not be negative");
    }
    let failure = match ScaleOutcome::try_from(req.outcome) {
        Ok(ScaleOutcome::Applied) => {
            if !req.message.is_empty() {
                v.add("message", "is only for outcome SCALE_OUTCOME_FAILED");
            }
            None
        }
        Ok(ScaleOutcome::Failed) => {
            if req.message.len() > MAX_REPORT_MESSAGE_BYTES {
                v.add(
                    "message",
                    format!(
                        "must be at most {MAX_REPORT_MESSAGE_BYTES} bytes, got {}",
                        req.message.len()
                    ),
                );
            } else if req.message.chars().any(|c| c.is_control() && c != '\t') {
                v.add(
                    "message",
                    "must not contain control characters other than tab",
                );
            }
            Some(if req.message.is_empty() {
                "the caller reported the scale as failed".to_owned()
            } else {
                req.message
            })
        }
        Ok(ScaleOutcome::Unspecified) | Err(_) => {
            v.add(
                "outcome",
                "must be SCALE_OUTCOME_APPLIED or SCALE_OUTCOME_FAILED",
            );
            None
        }
    };
    let time = time.unwrap_or_default();
    v.into_result(ScaleReport {
        target_key: req.target_key,
        time,
        desired_replicas: req.desired_replicas,
        failure,
    })
}

/// The response: the decision's conditions as they now stand.
pub fn report_scale_response(decision: &Decision, withdrawn: bool) -> pb::ReportScaleResponse {
    pb::ReportScaleResponse {
        conditions: decision
            .conditions
            .iter()
            .map(pb::Condition::from)
            .collect(),
        scale_event_withdrawn: withdrawn,
    }
}
