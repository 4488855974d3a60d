//! The HorizontalPodAutoscaler decision: `reconcileAutoscaler` of `horizontal.go` without the
//! I/O. `evaluate(settings, spec, observation, history, now)` returns an [`Evaluation`]: the
//! [`Decision`] (with its explanation as data) and the history to store.
//!
//! The decision record is part of the engine's API: the service stores and returns it, and a
//! replay of stored history under another spec compares records.

use serde::{Deserialize, Serialize};

use super::{condition::Condition, history::History};

pub mod replicas;

/// The result of one evaluation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    pub decision: Decision,
    /// The history after this evaluation, to be stored unless the call is a dry run.
    pub history: History,
}

/// What the controller decided and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub current_replicas: i32,
    /// The count to apply. Equal to `current_replicas` when nothing changes.
    pub desired_replicas: i32,
    /// The conditions after the evaluation, one per type at most, in
    /// AbleToScale, ScalingActive, ScalingLimited order.
    pub conditions: Vec<Condition>,
    /// One entry per spec metric, in spec order (empty on the shortcuts).
    pub metrics: Vec<MetricOutcome>,
    /// Which branch of `reconcileAutoscaler` decided.
    pub path: DecisionPath,
    /// The metric proposal (max over metrics) before normalization.
    pub prenormalized_replicas: Option<i32>,
    /// The value after the stabilization step.
    pub stabilized_replicas: Option<i32>,
    /// The scale-up limit in force (behavior: `calculateScaleUpLimitWithScalingRules`;
    /// legacy: `calculateScaleUpLimit`).
    pub scale_up_limit: Option<i32>,
    /// The scale-down limit in force (behavior path only).
    pub scale_down_limit: Option<i32>,
    /// The error Kubernetes' reconciliation returns, if any (scaling may still proceed when
    /// only some metrics failed).
    pub error: Option<String>,
}

/// The branch of `reconcileAutoscaler` that produced the decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DecisionPath {
    /// Current replicas 0 with a minimum above 0: scaling is disabled.
    ScalingDisabled,
    /// Current replicas above the maximum: desired = max, no metric evaluation.
    AboveMaxReplicas,
    /// Current replicas below the minimum: desired = min, no metric evaluation.
    BelowMinReplicas,
    /// Metric evaluation failed as a whole; no scaling.
    MetricsFailed,
    /// Normalized without behavior (`normalizeDesiredReplicas`).
    Legacy,
    /// Normalized with behavior (`normalizeDesiredReplicasWithBehaviors`).
    Behavior,
}

impl DecisionPath {
    /// A stable name for the API and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            DecisionPath::ScalingDisabled => "ScalingDisabled",
            DecisionPath::AboveMaxReplicas => "AboveMaxReplicas",
            DecisionPath::BelowMinReplicas => "BelowMinReplicas",
            DecisionPath::MetricsFailed => "MetricsFailed",
            DecisionPath::Legacy => "Legacy",
            DecisionPath::Behavior => "Behavior",
        }
    }
}

/// The evaluation of one spec metric (`computeReplicasForMetric` and `computeStatusFor*Metric`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricOutcome {
    /// Index in `spec.metrics`.
    pub index: usize,
    /// The proposal, or why there is none.
    pub result: Result<MetricProposal, MetricFailure>,
    /// How `groupPods` sorted the pods (pod-based metrics that got that far).
    pub pod_groups: Option<PodGroups>,
}

/// A metric's proposal and the status Kubernetes reports for it (algorithm document, section 8).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricProposal {
    pub replicas: i32,
    /// Integer percentage of the request (Utilization targets).
    pub current_average_utilization: Option<i32>,
    /// Milli-units per pod.
    pub current_average_value: Option<i64>,
    /// Milli-units in total (Object/External Value targets).
    pub current_value: Option<i64>,
    /// The usage ratio the proposal came from (current ÷ target), for explanations.
    pub usage_ratio: Option<f64>,
}

/// Why a metric has no proposal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricFailure {
    /// The ScalingActive False reason for this metric type (e.g. `FailedGetResourceMetric`).
    pub reason: super::condition::ConditionReason,
    /// Kubernetes' error text.
    pub message: String,
}

/// `groupPods`' result for one metric; name lists sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodGroups {
    pub ready_count: i32,
    pub unready: Vec<String>,
    pub missing: Vec<String>,
    pub ignored: Vec<String>,
}
