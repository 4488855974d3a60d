//! HPA status conditions (`horizontal.go` `setCondition`): reasons are data, with Kubernetes'
//! own words, so callers can act on them and humans recognise them.

use serde::{Deserialize, Serialize};

/// The three condition types the HPA controller sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ConditionType {
    AbleToScale,
    ScalingActive,
    ScalingLimited,
}

impl ConditionType {
    /// The Kubernetes name, e.g. `AbleToScale`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ConditionType::AbleToScale => "AbleToScale",
            ConditionType::ScalingActive => "ScalingActive",
            ConditionType::ScalingLimited => "ScalingLimited",
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
