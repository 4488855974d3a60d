//! HPA status conditions (`horizontal.go` `setCondition`): reasons are data, with Kubernetes'
//! own words, so callers can act on them and humans recognise them.

use serde::{Deserialize, Serialize};

/// The three condition types the HPA controller sets, then those of the migration
/// extensions (`hpa::extensions`): Kubernetes' `ScaledToZero` (1.36+) and
/// `ExternalMetricFallbackActive` (KEP-5679), KEDA's `Active`, `Fallback` and `Paused`. Their
/// order is the order a decision reports them in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ConditionType {
    /// Whether the controller could read and change the scale; its reason says what normalization did (stabilized or ready).
    AbleToScale,
    /// Whether a replica count could be computed at all: False when every metric failed or the target is at zero replicas (`computeReplicasForMetrics`).
    ScalingActive,
    /// Whether min/max or a rate policy changed the desired count (`normalizeDesiredReplicas*`).
    ScalingLimited,
    /// Kubernetes 1.36+ `HPAScaleToZero`: True while the extension keeps the target at zero replicas.
    ScaledToZero,
    /// KEDA's `Active`: whether any trigger is active, which decides the 0↔1 (or idle↔min) step.
    Active,
    /// KEDA's `Fallback`: whether the fallback replica count replaced failing metrics.
    Fallback,
    /// KEP-5679: whether a failing metric's fallback value is in use.
    ExternalMetricFallbackActive,
    /// KEDA's `Paused`: whether the paused annotations froze scaling (or one direction of it).
    Paused,
    /// Predictive scale-up (`spec.predictive`; not a Kubernetes condition): True when a
    /// forecast was acted on, False with the reason it was not.
    PredictiveScaling,
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
            ConditionType::PredictiveScaling => "PredictiveScaling",
        }
    }
}

/// Every reason the decision can report (algorithm document, section 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConditionReason {
    /// The scale subresource was read (every evaluation sets it first).
    SucceededGetScale,
    /// Normalization left the recommendation as it was: no stabilization effect.
    ReadyForNewScale,
    /// The stabilization window held the count up: a recent recommendation was higher.
    ScaleDownStabilized,
    /// The scale-up stabilization window held the count down: a recent recommendation was lower.
    ScaleUpStabilized,
    /// The controller changed the scale (overrides the AbleToScale reasons above); kept for completeness with `horizontal.go`.
    SucceededRescale,
    /// The caller could not apply the rescale it was given (`reconcileAutoscaler` when the
    /// scale update fails): AbleToScale False, no scale event stored.
    FailedUpdateScale,
    /// At least one metric produced a replica count.
    ValidMetricFound,
    /// A Resource metric could not be computed (no samples, no requests).
    FailedGetResourceMetric,
    /// A ContainerResource metric could not be computed.
    FailedGetContainerResourceMetric,
    /// A Pods metric could not be computed.
    FailedGetPodsMetric,
    /// An Object metric could not be computed.
    FailedGetObjectMetric,
    /// An External metric could not be computed.
    FailedGetExternalMetric,
    /// A metric's source type or target type is not one the controller knows.
    InvalidMetricSourceType,
    /// The target has zero replicas, so Kubernetes does not scale it (`horizontal.go` section 3).
    ScalingDisabled,
    /// No limit changed the desired count.
    DesiredWithinRange,
    /// The desired count was capped at `maxReplicas`.
    TooManyReplicas,
    /// The desired count was raised to `minReplicas`.
    TooFewReplicas,
    /// A scale-up rate policy (or the legacy scale-up limit) capped the increase.
    ScaleUpLimit,
    /// A scale-down rate policy capped the decrease.
    ScaleDownLimit,
    // Extensions (`hpa::extensions`).
    /// The scale-to-zero extension took the target to zero replicas.
    ScaledToZero,
    /// The scale-to-zero extension brought the target back above zero.
    NotScaledToZero,
    /// KEDA: a trigger is active, so the HPA rules scale in the 1↔N range.
    ScalerActive,
    /// KEDA: no trigger is active and the cooldown has passed (or never started).
    ScalerNotActive,
    /// KEDA: no trigger is active, but the target waits out `cooldownPeriod` before going to zero.
    ScalerCooldown,
    /// KEDA: failing metrics are replaced by the fallback replica count.
    FallbackExists,
    /// KEDA: metrics fail and no fallback applies.
    NoFallbackFound,
    /// KEP-5679: a failing metric uses its configured fallback value.
    FallbackActive,
    /// KEP-5679: every metric with a fallback is healthy again.
    FallbackInactive,
    /// KEDA: `autoscaling.keda.sh/paused` holds the target at its replica count.
    ScaledObjectPaused,
    /// KEDA: scale-in is paused; scale-out still happens.
    ScaleInPaused,
    /// KEDA: scale-out is paused; scale-in still happens.
    ScaleOutPaused,
    /// KEDA: no pause annotation is in force.
    NotPaused,
    /// A scaling group's budget capped the desired count (`hpa::budget`; not a Kubernetes
    /// reason: Kubernetes has no groups).
    BudgetLimited,
    /// The desired count was raised to a minimum a schedule set (`hpa::schedule`; not a
    /// Kubernetes reason: `TooFewReplicas` when the limit is the spec's own).
    ScheduledMinimum,
    /// The desired count was capped at a maximum a schedule set (else `TooManyReplicas`).
    ScheduledMaximum,
    /// A scheduled floor above a scheduled ceiling won: the count is held at the floor.
    ScheduleConflict,
    /// Predictive: the forecast raised the count above the reactive one.
    ForecastRaised,
    /// Predictive: the forecast is usable but not above the reactive count.
    ForecastBelowReactive,
    /// Predictive, forecast_only: what the forecast would have asked (nothing applied).
    ForecastOnly,
    /// Predictive: the model has not been scored long enough to be trusted.
    InsufficientHistory,
    /// Predictive: the forecasts' raises did not avoid enough shortfall for what they added.
    ForecastInaccurate,
    /// Predictive: significant forecasts exist but do not beat a plain 5 % headroom now.
    ForecastNotWorthIt,
    /// Predictive: no metric of the spec had a load in this decision.
    LoadUnavailable,
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
            ConditionReason::FailedUpdateScale => "FailedUpdateScale",
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
            ConditionReason::BudgetLimited => "BudgetLimited",
            ConditionReason::ScheduledMinimum => "ScheduledMinimum",
            ConditionReason::ScheduledMaximum => "ScheduledMaximum",
            ConditionReason::ScheduleConflict => "ScheduleConflict",
            ConditionReason::ForecastRaised => "ForecastRaised",
            ConditionReason::ForecastBelowReactive => "ForecastBelowReactive",
            ConditionReason::ForecastOnly => "ForecastOnly",
            ConditionReason::InsufficientHistory => "InsufficientHistory",
            ConditionReason::ForecastInaccurate => "ForecastInaccurate",
            ConditionReason::ForecastNotWorthIt => "ForecastNotWorthIt",
            ConditionReason::LoadUnavailable => "LoadUnavailable",
        }
    }
}

/// One status condition. Within an evaluation the last write per type wins, as in
/// `setCondition`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Condition {
    /// Which of the controller's conditions this is (one per type, last write wins).
    pub condition_type: ConditionType,
    /// `True` or `False` in Kubernetes' status; the controller never sets `Unknown`.
    pub status: bool,
    /// Why, as a value callers can match on rather than parse from the message.
    pub reason: ConditionReason,
    /// Kubernetes' message text.
    pub message: String,
}

impl Condition {
    /// A condition of `condition_type` with its status, reason and message.
    pub fn new(
        condition_type: ConditionType,
        status: bool,
        reason: ConditionReason,
        message: impl Into<String>,
    ) -> Self {
        Condition {
            condition_type,
            status,
            reason,
            message: message.into(),
        }
    }
}
