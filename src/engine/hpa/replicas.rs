//! The replica calculator: `replica_calculator.go` and `metrics/utilization.go` without the
//! metrics clients. (Work in progress: signatures first so `normalize`/`evaluate` can build.)

use crate::engine::{
    condition::ConditionReason, observation::Observation, settings::Settings, spec::MetricSpec,
    time::Time,
};

use super::{MetricFailure, MetricOutcome, PodGroups};

/// Tolerance band (`Tolerances` in replica_calculator.go): within when
/// `(1 - scale_down) <= ratio <= (1 + scale_up)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerances {
    pub scale_down: f64,
    pub scale_up: f64,
}

impl Tolerances {
    /// `Tolerances.isWithin`.
    pub fn is_within(&self, ratio: f64) -> bool {
        (1.0 - self.scale_down) <= ratio && ratio <= (1.0 + self.scale_up)
    }
}

/// `computeReplicasForMetric` for one spec metric.
pub fn replicas_for_metric(
    index: usize,
    metric: &MetricSpec,
    observation: &Observation,
    settings: &Settings,
    tolerances: Tolerances,
    now: Time,
) -> MetricOutcome {
    let _ = (metric, observation, settings, tolerances, now);
    MetricOutcome {
        index,
        result: Err(MetricFailure {
            reason: ConditionReason::InvalidMetricSourceType,
            message: "not implemented yet".to_string(),
        }),
        pod_groups: None,
    }
}

/// `groupPods` for one metric.
pub fn group_pods(
    observation: &Observation,
    metric: &MetricSpec,
    settings: &Settings,
    now: Time,
) -> PodGroups {
    let _ = (observation, metric, settings, now);
    PodGroups::default()
}
