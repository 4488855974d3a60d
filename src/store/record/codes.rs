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
