//! Errors of the engine. Only input that makes no sense is an error; a metric that cannot be
//! computed is part of the decision (a ScalingActive False condition), as in Kubernetes.

use thiserror::Error;

/// A spec, observation or setting that makes no sense. `field` is the path of the offending
/// field in the API's snake_case names (e.g. `spec.metrics[1].target.average_utilization`),
/// so the service can forward it as a `google.rpc.BadRequest` field violation unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{field}: {description}")]
pub struct InvalidInput {
    /// The offending field's path, e.g. `spec.metrics[1].target.average_utilization`.
    pub field: String,
    /// The rule the field breaks, e.g. `must be greater than 0`.
    pub description: String,
}

impl InvalidInput {
    /// An error for `field` breaking `description`.
    pub fn new(field: impl Into<String>, description: impl Into<String>) -> Self {
        InvalidInput {
            field: field.into(),
            description: description.into(),
        }
    }
}
