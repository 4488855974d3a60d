//! What the controller keeps between reconciliations (`horizontal.go`: `recommendations`,
//! `scaleUpEvents`, `scaleDownEvents`). A value passed into `evaluate` and returned anew,
//! so that the store, not the engine, decides where it lives.

use serde::{Deserialize, Serialize};

use crate::time::Time;

/// The per-target state of the HPA controller.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// `None`: nothing recorded yet, so `recordInitialRecommendation` adds `(current, now)`.
    /// `Some(vec![])` stays empty. Kubernetes reuses expired slots instead of deleting, so
    /// the order is storage order, not time order.
    pub recommendations: Option<Vec<Recommendation>>,
    /// `scaleUpEvents`: what the scale-up rate policies count against (`getReplicasChangePerPeriod`).
    pub scale_up_events: Vec<ScaleEvent>,
    /// `scaleDownEvents`: what the scale-down rate policies count against.
    pub scale_down_events: Vec<ScaleEvent>,
    /// The state the migration extensions keep between evaluations (failure counts, first
    /// failure times, last active time, whether zero was our decision). `None` for targets
    /// without extensions; absent in records written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<super::extensions::types::ExtensionState>,
    /// Predictive scale-up's models (`hpa::predictive`), one per metric. `None` without
    /// `spec.predictive` (or with mode off); absent in records written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predictive: Option<super::predictive::State>,
}

/// `timestampedRecommendation`: a prenormalized proposal and when it was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recommendation {
    /// The replica count proposed before normalization (what stabilization compares).
    pub replicas: i32,
    /// When it was proposed: the stabilization window is measured back from `now`.
    #[serde(with = "crate::time::serde_millis")]
    pub time: Time,
}

impl Recommendation {
    /// `replicas` proposed at `time`.
    pub const fn new(replicas: i32, time: Time) -> Self {
        Recommendation { replicas, time }
    }
}

/// `timestampedScaleEvent`: the magnitude of one rescale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScaleEvent {
    /// `|desired - current|`, always positive.
    pub replica_change: i32,
    /// When the rescale happened: a policy's period is measured back from `now`.
    #[serde(with = "crate::time::serde_millis")]
    pub time: Time,
    /// Older than the longest policy period when the last event of its direction was stored.
    pub outdated: bool,
}
