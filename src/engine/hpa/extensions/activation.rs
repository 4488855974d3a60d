//! KEDA activation (`pkg/scaling/executor/scale_scaledobjects.go`,
//! `RequestScale` / `scaleToZeroOrIdle` / `scaleFromZeroOrIdle`): the 0↔1 (or idle↔min) step
//! is decided by activation, the 1↔N range by the HPA rules (KEDA's HPA runs with
//! `max(minReplicaCount, 1)`).
//!
//! * A metric is active when its value is strictly greater than its `activation_threshold`
//!   (default 0); a metric on fallback counts as active (KEDA 2.19, #7239). When every metric
//!   is Resource/ContainerResource the target is always active; in a mixed spec those
//!   metrics do not decide activity (inference from KEDA's CPU/memory scalers, which cannot
//!   report activity at zero).
//! * Active: at 0 (or below min with `idle_replicas`), scale to `max(min, 1)`; store
//!   `last_active_time`.
//! * Inactive, and (idle set and current > idle) or (current > 0 and min = 0): once
//!   `last_active_time + cooldown_period` has passed (`first_seen + initial_cooldown_period`
//!   when never active), scale to `idle_replicas` (else min); until then the HPA decides and
//!   `Active` is False/`ScalerCooldown`.
//! * Inactive, idle unset, current < min: scale to min.

use std::time::Duration;

use super::{Activation, ExtensionReport, ExtensionState, Extensions};
use crate::engine::{
    condition::{Condition, ConditionReason, ConditionType},
    history::History,
    hpa::{DecisionPath, Evaluation, Hooks, MetricOutcome, Reconciliation, reconcile},
    observation::Observation,
    settings::Settings,
    spec::{HorizontalSpec, MetricSpec},
    time::Time,
};

/// What activation decides with: the arguments of `evaluate` plus the defaulted values,
/// gathered so the extension pipeline passes one value (crate-internal: callers use
/// `hpa::evaluate`).
pub(crate) struct Input<'a> {
    pub(crate) settings: &'a Settings,
    pub(crate) spec: &'a HorizontalSpec,
    pub(crate) activation: &'a Activation,
    pub(crate) ext: &'a Extensions,
    /// The defaulted metrics.
    pub(crate) metrics: &'a [MetricSpec],
    pub(crate) observation: &'a Observation,
    pub(crate) history: &'a History,
    pub(crate) now: Time,
    /// The defaulted `min_replicas`.
    pub(crate) min: i32,
}

/// The value activation compares for a metric (milli-units), `None` when it has none.
fn activation_value(metric: &MetricSpec, observation: &Observation) -> Option<i64> {
    match metric {
        MetricSpec::External { name, .. } => observation
            .external_metrics
            .get(name)
            .filter(|_| !observation.unavailable_metrics.contains(name))
            .map(|v| v.iter().fold(0i64, |a, b| a.saturating_add(*b))),
        MetricSpec::Object { name, .. } => observation
            .object_metrics
            .get(name)
            .filter(|_| !observation.unavailable_metrics.contains(name))
            .copied(),
        MetricSpec::Pods { name, .. } => {
            let values: Vec<i64> = observation
                .pods
                .iter()
                .filter_map(|p| p.metrics.get(name).and_then(|s| s.value))
                .collect();
            let n = i64::try_from(values.len()).ok().filter(|n| *n > 0)?;
            Some(values.iter().fold(0i64, |a, b| a.saturating_add(*b)) / n)
        }
        _ => None,
    }
}

/// Whether the target is active, with the sentence that says why.
pub(crate) fn is_active(
    ext: &Extensions,
    metrics: &[MetricSpec],
    outcomes: &[MetricOutcome],
    observation: &Observation,
    fallback_metrics: &[usize],
) -> (bool, String) {
    let resource_only = metrics.iter().all(|m| {
        matches!(
            m,
            MetricSpec::Resource { .. } | MetricSpec::ContainerResource { .. }
        )
    });
    if resource_only {
        return (
            true,
            "every metric is a resource metric: always active".to_owned(),
        );
    }
    for (i, metric) in metrics.iter().enumerate() {
        let key = super::metric_key(metric);
        if fallback_metrics.contains(&i) {
            return (
                true,
                format!("{key} is on fallback, which counts as active"),
            );
        }
        let failed = outcomes.iter().any(|o| o.index == i && o.result.is_err());
        if failed {
            continue;
        }
        let threshold = ext
            .metrics
            .get(&i)
            .and_then(|m| m.activation_threshold)
            .unwrap_or(0);
        if let Some(value) = activation_value(metric, observation)
            && value > threshold
        {
            return (
                true,
                format!("{key} is {value}m, above its activation threshold {threshold}m"),
            );
        }
    }
    (
        false,
        "no metric is above its activation threshold".to_owned(),
    )
}

fn active_condition(status: bool, reason: ConditionReason) -> Condition {
    let message = match reason {
        ConditionReason::ScalerActive => "Scaling is performed because triggers are active",
        ConditionReason::ScalerCooldown => "Scaler cooling down because triggers are not active",
        _ => "Scaling is not performed because triggers are not active",
    };
    Condition {
        condition_type: ConditionType::Active,
        status,
        reason,
        message: message.to_owned(),
    }
}

/// One step decided by activation itself (no HPA reconciliation).
fn step(input: &Input<'_>, to: i32, clamp: Option<(i32, i32)>, reason: &str) -> Evaluation {
    let current = input.observation.current_replicas;
    let mut r = Reconciliation::start(
        input.settings,
        input.spec,
        current,
        input.history,
        input.now,
    );
    r.decision.path = DecisionPath::Activation;
    r.clamp = clamp;
    r.finish(
        to,
        to != current,
        (to != current).then(|| reason.to_owned()),
    )
}

/// Activation's decision, the HPA's inside the 1↔N range.
pub(crate) fn decide(
    input: Input<'_>,
    outcomes: Vec<MetricOutcome>,
    clamp: Option<(i32, i32)>,
    state: &mut ExtensionState,
    report: &mut ExtensionReport,
) -> Evaluation {
    let current = input.observation.current_replicas;
    let min = input.min;
    let idle = input.activation.idle_replicas;
    let (active, why) = is_active(
        input.ext,
        input.metrics,
        &outcomes,
        input.observation,
        &report.fallback_metrics,
    );
    report.active = Some(active);
    let hpa_min = min.max(1);
    let hpa = |outcomes: Vec<MetricOutcome>| {
        let mut spec = input.spec.clone();
        spec.min_replicas = Some(hpa_min);
        spec.extensions = None;
        reconcile(
            input.settings,
            &spec,
            input.observation,
            input.history,
            input.now,
            Hooks {
                outcomes: Some(outcomes),
                clamp,
            },
        )
    };
    let (mut e, condition) = if active {
        state.last_active_time = Some(input.now);
        if current == 0 || (idle.is_some() && current < min) {
            report.fire(
                "activation.wake",
                format!("active ({why}): {current} → {hpa_min}"),
            );
            (
                step(&input, hpa_min, clamp, "triggers are active"),
                active_condition(true, ConditionReason::ScalerActive),
            )
        } else {
            (
                hpa(outcomes),
                active_condition(true, ConditionReason::ScalerActive),
            )
        }
    } else if (idle.is_some_and(|i| current > i)) || (current > 0 && min == 0) {
        let (since, period) = match state.last_active_time {
            Some(t) => (t, input.activation.cooldown_period),
            None => (
                state.first_seen.unwrap_or(input.now),
                input.activation.initial_cooldown_period,
            ),
        };
        if cooled_down(since, period, input.now) {
            let to = idle.unwrap_or(min);
            report.fire(
                "activation.idle",
                format!(
                    "inactive ({why}) and the cooldown of {} s has passed: {current} → {to}",
                    period.as_secs()
                ),
            );
            (
                step(&input, to, clamp, "triggers are not active"),
                active_condition(false, ConditionReason::ScalerNotActive),
            )
        } else {
            report.fire(
                "activation.cooldown",
                format!(
                    "inactive ({why}); cooling down until {} s after {} ms",
                    period.as_secs(),
                    since.unix_millis()
                ),
            );
            (
                hpa(outcomes),
                active_condition(false, ConditionReason::ScalerCooldown),
            )
        }
    } else if idle.is_none() && current < min {
        report.fire(
            "activation.min",
            format!("inactive below min: {current} → {min}"),
        );
        (
            step(&input, min, clamp, "below min"),
            active_condition(false, ConditionReason::ScalerNotActive),
        )
    } else if current > 0 {
        (
            hpa(outcomes),
            active_condition(false, ConditionReason::ScalerNotActive),
        )
    } else {
        report.fire(
            "activation.inactive",
            format!("inactive ({why}): stays at {current}"),
        );
        (
            step(&input, current, clamp, ""),
            active_condition(false, ConditionReason::ScalerNotActive),
        )
    };
    super::push_condition(&mut e, condition);
    e
}

/// `since + period <= now`.
fn cooled_down(since: Time, period: Duration, now: Time) -> bool {
    since.plus(period) <= now
}
