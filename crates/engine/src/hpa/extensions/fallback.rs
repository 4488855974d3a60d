//! Fallback when metrics fail, in the two models users know.
//!
//! * Per metric, KEP-5679 (`HPAExternalMetricFallback`, designed, not shipped): once a metric
//!   has failed continuously for `failure_duration` (`now - firstFailureTime >= duration`),
//!   `replicas` becomes that metric's proposal, combined with the others by max, then
//!   normalized as usual. Condition `ExternalMetricFallbackActive` (here for every metric
//!   type).
//! * Per target, KEDA (`pkg/fallback/fallback.go`): an External metric (KEDA's fallback is
//!   for its scalers, whose metrics are all External; never for cpu/memory) whose
//!   consecutive failures are strictly more than `failure_threshold` falls back to a count R:
//!   `replicas` (`static`), the current count (`currentReplicas`), the larger
//!   (`currentReplicasIfHigher`) or the smaller (`currentReplicasIfLower`) of the two. As in
//!   `doFallback`, R reaches the HPA as a synthetic metric value, `target × R` for an
//!   AverageValue target and `target × R / readyReplicas` for a Value target (no fallback
//!   without a ready replica), and the HPA computes that metric's proposal as for any
//!   value, tolerance included. Condition `Fallback` True/`FallbackExists` or
//!   False/`NoFallbackFound`.
//!
//! KEDA's known bugs are avoided by construction: the fallback replaces each failed metric's
//! proposal inside `computeReplicasForMetrics`, so it fires when every metric failed (#8056),
//! never lowers the count below a healthy metric's proposal, which wins the max (#6659), and
//! is a proposal like any other, so it wakes a target from zero (#7239). Failures are counted
//! once per evaluation.

use super::{ExtensionReport, ExtensionState, Extensions, FallbackBehavior, metric_key};
use crate::{
    hpa::condition::{Condition, ConditionReason, ConditionType},
    hpa::observation::Observation,
    hpa::spec::{MetricSpec, MetricTarget, MetricTargetType},
    hpa::{
        MetricOutcome, MetricProposal, defaults::canonical_quantity_float,
        replicas::ready_pods_count,
    },
    time::{Time, duration_millis},
};

/// Counts this evaluation's failures (a success resets a metric) and forgets metrics that
/// are no longer in the spec.
pub(crate) fn update_health(
    state: &mut ExtensionState,
    metrics: &[MetricSpec],
    outcomes: &[MetricOutcome],
    now: Time,
) {
    let keys: Vec<String> = metrics.iter().map(metric_key).collect();
    state.metric_health.retain(|k, _| keys.contains(k));
    for outcome in outcomes {
        let Some(key) = keys.get(outcome.index) else {
            continue;
        };
        match outcome.result {
            Ok(_) => {
                state.metric_health.remove(key);
            }
            Err(_) => {
                let h = state.metric_health.entry(key.clone()).or_default();
                h.consecutive_failures = h.consecutive_failures.saturating_add(1);
                h.first_failure_time.get_or_insert(now);
            }
        }
    }
}

/// KEDA's count for `behavior`.
pub(crate) fn target_fallback_replicas(
    behavior: FallbackBehavior,
    replicas: i32,
    current: i32,
) -> i32 {
    match behavior {
        FallbackBehavior::Static => replicas,
        FallbackBehavior::CurrentReplicas => current,
        FallbackBehavior::CurrentReplicasIfHigher => current.max(replicas),
        FallbackBehavior::CurrentReplicasIfLower => current.min(replicas),
    }
}

/// The value `doFallback` hands the HPA for a fallback count of `replicas` (milli-units):
/// `int64(target * 1000 * R)` with the target as `AsApproximateFloat64` reads it and R divided
/// by the ready replicas for a Value target. `None` where KEDA cannot fall back: a Value
/// target with no ready replica, or a target type that is neither.
fn keda_fallback_value(target: &MetricTarget, replicas: i32, ready: usize) -> Option<i64> {
    let (quantity, replicas) = match target.target_type {
        MetricTargetType::AverageValue => (target.average_value?, f64::from(replicas)),
        MetricTargetType::Value if ready > 0 => (target.value?, f64::from(replicas) / ready as f64),
        _ => return None,
    };
    let normalisation = canonical_quantity_float(quantity, 3);
    // Go's float-to-int conversion truncates; `as` does too, and saturates.
    Some((normalisation * 1000.0 * replicas) as i64)
}

/// Replaces the proposals of failed metrics whose fallback is due; returns the conditions to
/// report. `recompute` is the HPA's computation of one metric on another observation (KEDA's
/// fallback feeds it a synthetic value).
#[allow(clippy::too_many_arguments)]
pub(crate) fn apply(
    ext: &Extensions,
    state: &ExtensionState,
    metrics: &[MetricSpec],
    outcomes: &mut [MetricOutcome],
    observation: &Observation,
    now: Time,
    report: &mut ExtensionReport,
    recompute: impl Fn(usize, &Observation) -> MetricOutcome,
) -> Vec<Condition> {
    let current = observation.current_replicas;
    let mut per_metric_active = Vec::new();
    let mut target_active = Vec::new();
    for outcome in outcomes.iter_mut() {
        if outcome.result.is_ok() {
            continue;
        }
        let Some(metric) = metrics.get(outcome.index) else {
            continue;
        };
        let key = metric_key(metric);
        let Some(health) = state.metric_health.get(&key) else {
            continue;
        };
        let per_metric = ext
            .metrics
            .get(&outcome.index)
            .and_then(|m| m.fallback.as_ref());
        if let (Some(f), Some(first)) = (per_metric, health.first_failure_time) {
            let failed_for = now.unix_millis().saturating_sub(first.unix_millis());
            if failed_for >= duration_millis(f.failure_duration) {
                per_metric_active.push(key.clone());
                report.fire(
                    "fallback.metric",
                    format!(
                        "{key} has failed for {} s (at least {} s): proposes {}",
                        failed_for / 1000,
                        f.failure_duration.as_secs(),
                        f.replicas
                    ),
                );
                report.fallback_metrics.push(outcome.index);
                outcome.result = Ok(MetricProposal {
                    replicas: f.replicas,
                    current_average_utilization: None,
                    current_average_value: None,
                    current_value: None,
                    usage_ratio: None,
                });
                continue;
            }
        }
        let (Some(f), MetricSpec::External { name, target }) = (&ext.fallback, metric) else {
            continue;
        };
        if health.consecutive_failures <= f.failure_threshold {
            continue;
        }
        let r = target_fallback_replicas(f.behavior, f.replicas, current);
        // KEDA reports the fallback as in force from the health alone (`updateStatus`).
        target_active.push(key.clone());
        let ready = ready_pods_count(&observation.pods).unwrap_or(0);
        let Some(value) = keda_fallback_value(target, r, ready) else {
            report.fire(
                "fallback.target",
                format!(
                    "{key} failed {} times in a row (more than {}), but KEDA cannot fall back \
                     on it: a Value target needs a ready replica",
                    health.consecutive_failures, f.failure_threshold
                ),
            );
            continue;
        };
        let mut synthetic = observation.clone();
        synthetic.unavailable_metrics.remove(name);
        synthetic.external_metrics.insert(name.clone(), vec![value]);
        *outcome = recompute(outcome.index, &synthetic);
        report.fallback_metrics.push(outcome.index);
        report.fire(
            "fallback.target",
            format!(
                "{key} failed {} times in a row (more than {}): falls back to {r} ({:?}), \
                 fed to the HPA as the value {value}m",
                health.consecutive_failures, f.failure_threshold, f.behavior
            ),
        );
    }
    let mut conditions = Vec::new();
    if ext.metrics.values().any(|m| m.fallback.is_some()) {
        conditions.push(if per_metric_active.is_empty() {
            Condition::new(
                ConditionType::ExternalMetricFallbackActive,
                false,
                ConditionReason::FallbackInactive,
                "no metric is using its fallback replicas",
            )
        } else {
            Condition {
                condition_type: ConditionType::ExternalMetricFallbackActive,
                status: true,
                reason: ConditionReason::FallbackActive,
                message: format!(
                    "fallback replicas in use for {}",
                    per_metric_active.join(", ")
                ),
            }
        });
    }
    if ext.fallback.is_some() {
        conditions.push(if target_active.is_empty() {
            Condition::new(
                ConditionType::Fallback,
                false,
                ConditionReason::NoFallbackFound,
                "No fallbacks are active on this scaled object",
            )
        } else {
            Condition {
                condition_type: ConditionType::Fallback,
                status: true,
                reason: ConditionReason::FallbackExists,
                message: format!(
                    "At least one trigger is falling back on this scaled object: {}",
                    target_active.join(", ")
                ),
            }
        });
    }
    conditions
}
