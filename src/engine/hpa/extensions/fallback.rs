//! Fallback when metrics fail, in the two models users know.
//!
//! * Per metric, KEP-5679 (`HPAExternalMetricFallback`, designed, not shipped): once a metric
//!   has failed continuously for `failure_duration` (`now - firstFailureTime >= duration`),
//!   `replicas` becomes that metric's proposal, combined with the others by max, then
//!   normalized as usual. Condition `ExternalMetricFallbackActive` (here for every metric
//!   type).
//! * Per target, KEDA (`pkg/fallback/fallback.go`): a metric whose consecutive failures are
//!   strictly more than `failure_threshold` proposes `replicas` (`static`), the current count
//!   (`currentReplicas`), the larger (`currentReplicasIfHigher`) or the smaller
//!   (`currentReplicasIfLower`) of the two. Condition `Fallback` True/`FallbackExists` or
//!   False/`NoFallbackFound`.
//!
//! KEDA's known bugs are avoided by construction: the fallback replaces each failed metric's
//! proposal inside `computeReplicasForMetrics`, so it fires when every metric failed (#8056),
//! never lowers the count below a healthy metric's proposal, which wins the max (#6659), and
//! is a proposal like any other, so it wakes a target from zero (#7239). Failures are counted
//! once per evaluation.

use super::{ExtensionReport, ExtensionState, Extensions, FallbackBehavior, metric_key};
use crate::engine::{
    condition::{Condition, ConditionReason, ConditionType},
    hpa::{MetricOutcome, MetricProposal},
    spec::MetricSpec,
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

/// Replaces the proposals of failed metrics whose fallback is due; returns the conditions to
/// report.
pub(crate) fn apply(
    ext: &Extensions,
    state: &ExtensionState,
    metrics: &[MetricSpec],
    outcomes: &mut [MetricOutcome],
    current: i32,
    now: Time,
    report: &mut ExtensionReport,
) -> Vec<Condition> {
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
        let mut replacement = None;
        if let (Some(f), Some(first)) = (per_metric, health.first_failure_time) {
            let failed_for = now.unix_millis().saturating_sub(first.unix_millis());
            if failed_for >= duration_millis(f.failure_duration) {
                replacement = Some(f.replicas);
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
            }
        }
        if replacement.is_none()
            && let Some(f) = &ext.fallback
            && health.consecutive_failures > f.failure_threshold
        {
            let r = target_fallback_replicas(f.behavior, f.replicas, current);
            replacement = Some(r);
            target_active.push(key.clone());
            report.fire(
                "fallback.target",
                format!(
                    "{key} failed {} times in a row (more than {}): proposes {r} ({:?})",
                    health.consecutive_failures, f.failure_threshold, f.behavior
                ),
            );
        }
        if let Some(replicas) = replacement {
            report.fallback_metrics.push(outcome.index);
            outcome.result = Ok(MetricProposal {
                replicas,
                current_average_utilization: None,
                current_average_value: None,
                current_value: None,
                usage_ratio: None,
            });
        }
    }
    let mut conditions = Vec::new();
    if ext.metrics.values().any(|m| m.fallback.is_some()) {
        conditions.push(if per_metric_active.is_empty() {
            Condition {
                condition_type: ConditionType::ExternalMetricFallbackActive,
                status: false,
                reason: ConditionReason::FallbackInactive,
                message: "no metric is using its fallback replicas".to_owned(),
            }
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
            Condition {
                condition_type: ConditionType::Fallback,
                status: false,
                reason: ConditionReason::NoFallbackFound,
                message: "No fallbacks are active on this scaled object".to_owned(),
            }
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
