//! Which pods to remove first on a scale-down (kubernetes #45509, KEDA #6124): no upstream
//! controller offers it; the orchestrator decides, we only advise.
//!
//! Pods being deleted and pods that have terminated (Failed, Succeeded) are excluded: they
//! are going anyway. The rest are ordered: not ready, pending, missing a sample of the
//! deciding metric, then the lowest usage ratio on the deciding metric, then the youngest;
//! ties by name. Never more than `current - desired`.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use crate::{
    hpa::MetricOutcome,
    hpa::observation::{Observation, Pod, PodPhase},
    hpa::spec::MetricSpec,
};

/// One pod to remove, with why it comes at its place.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemovalCandidate {
    /// The pod's name, as the observation gave it.
    pub pod: String,
    /// The first rule that put it in the list.
    pub reason: RemovalReason,
    /// The pod's usage ratio on the deciding metric (usage ÷ request for Utilization, value ÷
    /// target otherwise), when it has one.
    pub usage_ratio: Option<f64>,
}

/// Why a pod is a candidate, in the order they are listed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RemovalReason {
    /// Running but not ready: it serves nothing, so removing it costs nothing.
    NotReady,
    /// Not yet running (`PodPending`): removing it cancels a start.
    Pending,
    /// No sample of the deciding metric: the decision could not see it.
    MissingMetrics,
    /// The lowest usage ratio on the deciding metric: the least work moves elsewhere.
    LowestUsage,
    /// The youngest pod: the ReplicaSet controller's `ActivePods` ordering also removes newer
    /// pods before older ones.
    Youngest,
}

impl RemovalReason {
    /// The name on the wire and in reports, e.g. `NotReady`.
    pub const fn as_str(self) -> &'static str {
        match self {
            RemovalReason::NotReady => "NotReady",
            RemovalReason::Pending => "Pending",
            RemovalReason::MissingMetrics => "MissingMetrics",
            RemovalReason::LowestUsage => "LowestUsage",
            RemovalReason::Youngest => "Youngest",
        }
    }
}

/// The deciding metric: the pod-based metric with the largest proposal (the one
/// `computeReplicasForMetrics` took), else the first pod-based metric.
fn deciding_metric<'a>(
    metrics: &'a [MetricSpec],
    outcomes: &[MetricOutcome],
) -> Option<&'a MetricSpec> {
    let pod_based = |m: &MetricSpec| {
        matches!(
            m,
            MetricSpec::Resource { .. }
                | MetricSpec::ContainerResource { .. }
                | MetricSpec::Pods { .. }
        )
    };
    let mut best: Option<(i32, usize)> = None;
    for o in outcomes {
        if let (Ok(p), Some(m)) = (&o.result, metrics.get(o.index))
            && pod_based(m)
            && best.is_none_or(|(r, _)| p.replicas > r)
        {
            best = Some((p.replicas, o.index));
        }
    }
    match best {
        Some((_, i)) => metrics.get(i),
        None => metrics.iter().find(|m| pod_based(m)),
    }
}

/// The pod's usage ratio on `metric`, `None` when it has no sample (or no request).
fn usage_ratio(pod: &Pod, metric: &MetricSpec) -> Option<f64> {
    match metric {
        MetricSpec::Resource { name, target } => {
            let value = pod.metrics.get(name)?.value?;
            match target.average_value {
                Some(t) if t > 0 => Some(value as f64 / t as f64),
                _ => {
                    let request = *pod.requests.get(name)?;
                    (request > 0).then(|| value as f64 / request as f64)
                }
            }
        }
        MetricSpec::ContainerResource {
            name,
            container,
            target,
        } => {
            let c = pod.containers.iter().find(|c| &c.name == container)?;
            let value = *c.usage.get(name)?;
            match target.average_value {
                Some(t) if t > 0 => Some(value as f64 / t as f64),
                _ => {
                    let request = *c.requests.get(name)?;
                    (request > 0).then(|| value as f64 / request as f64)
                }
            }
        }
        MetricSpec::Pods { name, target } => {
            let value = pod.metrics.get(name)?.value?;
            let t = target.average_value.filter(|t| *t > 0)?;
            Some(value as f64 / t as f64)
        }
        _ => None,
    }
}

/// The candidates for a scale-down from `current` to `desired` (empty otherwise).
pub(crate) fn candidates(
    metrics: &[MetricSpec],
    outcomes: &[MetricOutcome],
    observation: &Observation,
    current: i32,
    desired: i32,
) -> Vec<RemovalCandidate> {
    let Ok(limit) = usize::try_from(current.saturating_sub(desired)) else {
        return Vec::new();
    };
    if limit == 0 {
        return Vec::new();
    }
    let deciding = deciding_metric(metrics, outcomes);
    let mut pods: Vec<(RemovalCandidate, &Pod)> = observation
        .pods
        .iter()
        .filter(|p| !p.deleting && !matches!(p.phase, PodPhase::Failed | PodPhase::Succeeded))
        .map(|p| {
            let ratio = deciding.and_then(|m| usage_ratio(p, m));
            let reason = if p.phase == PodPhase::Pending {
                RemovalReason::Pending
            } else if p.ready != Some(true) {
                RemovalReason::NotReady
            } else if deciding.is_some() && ratio.is_none() {
                RemovalReason::MissingMetrics
            } else if ratio.is_some() {
                RemovalReason::LowestUsage
            } else {
                RemovalReason::Youngest
            };
            (
                RemovalCandidate {
                    pod: p.name.clone(),
                    reason,
                    usage_ratio: ratio,
                },
                p,
            )
        })
        .collect();
    pods.sort_by(|(a, pa), (b, pb)| {
        a.reason
            .cmp(&b.reason)
            .then_with(|| match (a.usage_ratio, b.usage_ratio) {
                (Some(x), Some(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
                _ => Ordering::Equal,
            })
            // Youngest first: the latest start time; a pod without one has not started.
            .then_with(|| match (pa.start_time, pb.start_time) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Less,
                (Some(_), None) => Ordering::Greater,
                (Some(x), Some(y)) => y.cmp(&x),
            })
            .then_with(|| a.pod.cmp(&b.pod))
    });
    pods.truncate(limit);
    pods.into_iter().map(|(c, _)| c).collect()
}
