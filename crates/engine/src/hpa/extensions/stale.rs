//! Stale samples (opt-in, `max_sample_age`): a pod sample older than the age counts as
//! missing, so `groupPods`' missing-pod rules (and, when every sample is stale, the metric's
//! failure and any fallback) apply instead of acting on old data. Kubernetes has no such
//! rule: the metrics API decides freshness there.

use std::time::Duration;

use crate::{hpa::observation::Observation, time::Time};

/// The observation without the pod and orphan samples taken before `now - max_age`
/// (strictly before: a sample exactly `max_age` old is still used), and how many were dropped.
pub(crate) fn drop_stale_samples(
    observation: &Observation,
    max_age: Duration,
    now: Time,
) -> (Observation, u32) {
    let cutoff = now.minus(max_age);
    let mut o = observation.clone();
    let mut dropped = 0u32;
    for pod in &mut o.pods {
        let before = pod.metrics.len();
        pod.metrics.retain(|_, s| s.timestamp >= cutoff);
        dropped = dropped.saturating_add(u32::try_from(before - pod.metrics.len()).unwrap_or(0));
    }
    for samples in o.orphan_samples.values_mut() {
        let before = samples.len();
        samples.retain(|_, s| s.timestamp >= cutoff);
        dropped = dropped.saturating_add(u32::try_from(before - samples.len()).unwrap_or(0));
    }
    (o, dropped)
}
