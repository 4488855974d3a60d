//! The stable numeric codes of the engine's enums in records. Explicit tables, not Rust
//! discriminants or names: reordering or renaming a variant must not change what is on disk.
//! A code this build does not know is a corrupt record (named by key), never a default.

use crate::engine::{
    hpa::condition::{ConditionReason, ConditionType},
    hpa::spec::{MetricTargetType, ScalingPolicyType, SelectPolicy},
    hpa::{DecisionPath, extensions::removal::RemovalReason},
};

/// Both directions of one enum's table.
macro_rules! codes {
    ($enc:ident, $dec:ident, $ty:ty, { $($variant:path => $code:literal),* $(,)? }) => {
        pub(crate) fn $enc(v: $ty) -> u32 {
            match v { $($variant => $code),* }
        }
        pub(crate) fn $dec(code: u32) -> Result<$ty, String> {
            match code {
                $($code => Ok($variant),)*
                other => Err(format!("unknown {} code {other}", stringify!($ty))),
            }
        }
    };
}

codes!(condition_type, condition_type_from, ConditionType, {
    ConditionType::AbleToScale => 0,
    ConditionType::ScalingActive => 1,
    ConditionType::ScalingLimited => 2,
    ConditionType::ScaledToZero => 3,
    ConditionType::Active => 4,
    ConditionType::Fallback => 5,
    ConditionType::ExternalMetricFallbackActive => 6,
    ConditionType::Paused => 7,
    ConditionType::PredictiveScaling => 8,
});

codes!(condition_reason, condition_reason_from, ConditionReason, {
    ConditionReason::SucceededGetScale => 0,
    ConditionReason::ReadyForNewScale => 1,
    ConditionReason::ScaleDownStabilized => 2,
    ConditionReason::ScaleUpStabilized => 3,
    ConditionReason::SucceededRescale => 4,
    ConditionReason::ValidMetricFound => 5,
    ConditionReason::FailedGetResourceMetric => 6,
    ConditionReason::FailedGetContainerResourceMetric => 7,
    ConditionReason::FailedGetPodsMetric => 8,
    ConditionReason::FailedGetObjectMetric => 9,
    ConditionReason::FailedGetExternalMetric => 10,
    ConditionReason::InvalidMetricSourceType => 11,
    ConditionReason::ScalingDisabled => 12,
    ConditionReason::DesiredWithinRange => 13,
    ConditionReason::TooManyReplicas => 14,
    ConditionReason::TooFewReplicas => 15,
    ConditionReason::ScaleUpLimit => 16,
    ConditionReason::ScaleDownLimit => 17,
    ConditionReason::ScaledToZero => 18,
    ConditionReason::NotScaledToZero => 19,
    ConditionReason::ScalerActive => 20,
    ConditionReason::ScalerNotActive => 21,
    ConditionReason::ScalerCooldown => 22,
    ConditionReason::FallbackExists => 23,
    ConditionReason::NoFallbackFound => 24,
    ConditionReason::FallbackActive => 25,
    ConditionReason::FallbackInactive => 26,
    ConditionReason::ScaledObjectPaused => 27,
    ConditionReason::ScaleInPaused => 28,
    ConditionReason::ScaleOutPaused => 29,
    ConditionReason::NotPaused => 30,
    ConditionReason::FailedUpdateScale => 31,
    ConditionReason::BudgetLimited => 32,
    ConditionReason::ScheduledMinimum => 33,
    ConditionReason::ScheduledMaximum => 34,
    ConditionReason::ScheduleConflict => 35,
    ConditionReason::ForecastRaised => 36,
    ConditionReason::ForecastBelowReactive => 37,
    ConditionReason::ForecastOnly => 38,
    ConditionReason::InsufficientHistory => 39,
    ConditionReason::ForecastInaccurate => 40,
    ConditionReason::ForecastNotWorthIt => 41,
    ConditionReason::LoadUnavailable => 42,
});

codes!(decision_path, decision_path_from, DecisionPath, {
    DecisionPath::ScalingDisabled => 0,
    DecisionPath::AboveMaxReplicas => 1,
    DecisionPath::BelowMinReplicas => 2,
    DecisionPath::MetricsFailed => 3,
    DecisionPath::Legacy => 4,
    DecisionPath::Behavior => 5,
    DecisionPath::Paused => 6,
    DecisionPath::Activation => 7,
    DecisionPath::PausedAtZero => 8,
});

codes!(removal_reason, removal_reason_from, RemovalReason, {
    RemovalReason::NotReady => 0,
    RemovalReason::Pending => 1,
    RemovalReason::MissingMetrics => 2,
    RemovalReason::LowestUsage => 3,
    RemovalReason::Youngest => 4,
});

codes!(target_type, target_type_from, MetricTargetType, {
    MetricTargetType::Utilization => 0,
    MetricTargetType::AverageValue => 1,
    MetricTargetType::Value => 2,
});

codes!(select_policy, select_policy_from, SelectPolicy, {
    SelectPolicy::Max => 0,
    SelectPolicy::Min => 1,
    SelectPolicy::Disabled => 2,
});

codes!(policy_type, policy_type_from, ScalingPolicyType, {
    ScalingPolicyType::Pods => 0,
    ScalingPolicyType::Percent => 1,
});

/// Metric source kinds (`MetricSpec` variants).
pub(crate) const KIND_RESOURCE: u32 = 0;
pub(crate) const KIND_CONTAINER_RESOURCE: u32 = 1;
pub(crate) const KIND_PODS: u32 = 2;
pub(crate) const KIND_OBJECT: u32 = 3;
pub(crate) const KIND_EXTERNAL: u32 = 4;
pub(crate) const KIND_UNKNOWN: u32 = 5;

/// Kubernetes' message texts (condition messages, rescale reasons), each stored as its code
/// (index + 1) with only the rest of the message after it: the texts are most of a decision's
/// bytes, and they repeat in every run. Append-only, literal: an entry's code and text are part
/// of the format (a record's message is this text followed by its stored rest), so an engine
/// message that changes does not change what old records say; a new entry needs a new record
/// version.
pub(crate) const MESSAGE_PREFIXES: &[&str] = &[
    "recommended size matches current size",
    "recent recommendations were higher than current one, applying the highest recent recommendation",
    "recent recommendations were lower than current one, applying the lowest recent recommendation",
    "the desired count is within the acceptable range",
    "the desired replica count is more than the maximum replica count",
    "the desired replica count is less than the minimum replica count",
    "the desired replica count is increasing faster than the maximum scale rate",
    "the desired replica count is decreasing faster than the maximum scale rate",
    "the HPA controller was able to get the target's current scale",
    "scaling is disabled since the replica count of the target is zero",
    "Current number of replicas above Spec.MaxReplicas",
    "Current number of replicas below Spec.MinReplicas",
    "All metrics below target",
    "the HPA controller was able to update the target scale to ",
    "the HPA was able to successfully calculate a replica count from ",
    "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)",
    "the HPA was able to successfully calculate a replica count from memory resource utilization (percentage of request)",
    "invalid metrics (",
    "the HPA was unable to compute the replica count: ",
    "the HPA controller was unable to update the target scale: ",
    "cpu resource utilization (percentage of request) above target",
    "memory resource utilization (percentage of request) above target",
    "prenormalized proposal above target",
    "no metric is using its fallback replicas",
    "fallback replicas in use for ",
    "No fallbacks are active on this scaled object",
    "At least one trigger is falling back on this scaled object: ",
    "the HPA controller scaled the workload to zero",
    "the HPA controller did not scale the workload to zero",
];

/// `message` as the code of its longest prefix in [`MESSAGE_PREFIXES`] (0: none) and the rest.
pub(crate) fn message_prefix(message: &str) -> (u32, &str) {
    MESSAGE_PREFIXES
        .iter()
        .enumerate()
        .filter(|(_, p)| message.starts_with(**p))
        .max_by_key(|(_, p)| p.len())
        .map_or((0, message), |(i, p)| (i as u32 + 1, &message[p.len()..]))
}

/// The message that `code` and `rest` stored ([`message_prefix`]).
pub(crate) fn message_from(code: u32, rest: &str) -> Result<String, String> {
    if code == 0 {
        return Ok(rest.to_owned());
    }
    let prefix = MESSAGE_PREFIXES
        .get(code as usize - 1)
        .ok_or_else(|| format!("unknown message prefix code {code}"))?;
    Ok(format!("{prefix}{rest}"))
}
