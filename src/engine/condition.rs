//! HPA status conditions (`horizontal.go` `setCondition`): reasons are data, with Kubernetes'
//! own words, so callers can act on them and humans recognise them.
#![warn(missing_docs, unreachable_pub)]

use serde::{Deserialize, Serialize};

/// The three condition types the HPA controller sets, then those of the migration
/// extensions (`hpa::extensions`): Kubernetes' `ScaledToZero` (1.36+) and
/// `ExternalMetricFallbackActive` (KEP-5679), KEDA's `Active`, `Fallback` and `Paused`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ConditionType {
    AbleToScale,
    ScalingActive,
    ScalingLimited,
    ScaledToZero,
    Active,
    Fallback,
    ExternalMetricFallbackActive,
    Paused,
}

impl ConditionType {
    /// The Kubernetes name, e.g. `AbleToScale`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ConditionType::AbleToScale => "AbleToScale",
            ConditionType::ScalingActive => "ScalingActive",
            ConditionType::ScalingLimited => "ScalingLimited",
            ConditionType::ScaledToZero => "ScaledToZero",
            ConditionType::Active => "Active",
            ConditionType::Fallback => "Fallback",
            ConditionType::ExternalMetricFallbackActive => "ExternalMetricFallbackActive",
            ConditionType::Paused => "Paused",
        }
    }
}

/// Every reason the decision can report (algorithm document, section 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConditionReason {
    SucceededGetScale,
    ReadyForNewScale,
    ScaleDownStabilized,
    ScaleUpStabilized,
    SucceededRescale,
    ValidMetricFound,
    FailedGetResourceMetric,
    FailedGetContainerResourceMetric,
    FailedGetPodsMetric,
    FailedGetObjectMetric,
    FailedGetExternalMetric,
    InvalidMetricSourceType,
    ScalingDisabled,
    DesiredWithinRange,
    TooManyReplicas,
    TooFewReplicas,
    ScaleUpLimit,
    ScaleDownLimit,
    // Extensions (`hpa::extensions`).
    ScaledToZero,
    NotScaledToZero,
    ScalerActive,
    ScalerNotActive,
    ScalerCooldown,
    FallbackExists,
    NoFallbackFound,
    FallbackActive,
    FallbackInactive,
    ScaledObjectPaused,
    ScaleInPaused,
    ScaleOutPaused,
    NotPaused,
}

impl ConditionReason {
    /// The Kubernetes reason string.
    pub const fn as_str(self) -> &'static str {
        match self {
            ConditionReason::SucceededGetScale => "SucceededGetScale",
            ConditionReason::ReadyForNewScale => "ReadyForNewScale",
            ConditionReason::ScaleDownStabilized => "ScaleDownStabilized",
            ConditionReason::ScaleUpStabilized => "ScaleUpStabilized",
            ConditionReason::SucceededRescale => "SucceededRescale",
            ConditionReason::ValidMetricFound => "ValidMetricFound",
            ConditionReason::FailedGetResourceMetric => "FailedGetResourceMetric",
            ConditionReason::FailedGetContainerResourceMetric => "FailedGetContainerResourceMetric",
            ConditionReason::FailedGetPodsMetric => "FailedGetPodsMetric",
            ConditionReason::FailedGetObjectMetric => "FailedGetObjectMetric",
            ConditionReason::FailedGetExternalMetric => "FailedGetExternalMetric",
            ConditionReason::InvalidMetricSourceType => "InvalidMetricSourceType",
            ConditionReason::ScalingDisabled => "ScalingDisabled",
            ConditionReason::DesiredWithinRange => "DesiredWithinRange",
            ConditionReason::TooManyReplicas => "TooManyReplicas",
            ConditionReason::TooFewReplicas => "TooFewReplicas",
            ConditionReason::ScaleUpLimit => "ScaleUpLimit",
            ConditionReason::ScaleDownLimit => "ScaleDownLimit",
            ConditionReason::ScaledToZero => "ScaledToZero",
            ConditionReason::NotScaledToZero => "NotScaledToZero",
            ConditionReason::ScalerActive => "ScalerActive",
            ConditionReason::ScalerNotActive => "ScalerNotActive",
            ConditionReason::ScalerCooldown => "ScalerCooldown",
            ConditionReason::FallbackExists => "FallbackExists",
            ConditionReason::NoFallbackFound => "NoFallbackFound",
            ConditionReason::FallbackActive => "FallbackActive",
            ConditionReason::FallbackInactive => "FallbackInactive",
            ConditionReason::ScaledObjectPaused => "ScaledObjectPaused",
            ConditionReason::ScaleInPaused => "ScaleInPaused",
            ConditionReason::ScaleOutPaused => "ScaleOutPaused",
            ConditionReason::NotPaused => "NotPaused",
        }
    }
}

/// One status condition. Within an evaluation the last write per type wins, as in
/// `setCondition`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Condition {
    pub condition_type: ConditionType,
    pub status: bool,
    pub reason: ConditionReason,
    /// Kubernetes' message text.
    pub message: String,
}
