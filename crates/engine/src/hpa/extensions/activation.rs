//! KEDA activation (`pkg/scaling/executor/scale_scaledobjects.go`,
//! `RequestScale` / `scaleToZeroOrIdle` / `scaleFromZeroOrIdle`): the 0↔1 (or idle↔min) step
//! is decided by activation, the 1↔N range by the HPA rules (KEDA's HPA runs with
//! `max(minReplicaCount, 1)`).
//!
//! * `force_activation` makes the target active whatever the triggers say (KEDA 2.18's
//!   `force-activation` annotation, `NeedToForceActivation`).
//! * A metric is active when its value is strictly greater than its `activation_threshold`
//!   (default 0); a metric on fallback counts as active and not as a failed trigger (KEDA
//!   2.19, #7239 and #7244), so a fallback in force refreshes `last_active_time` and holds
//!   off the cooldown. These rules follow KEDA 2.19 and later. When every metric
//!   is Resource/ContainerResource the target is always active; in a mixed spec those
//!   metrics do not decide activity (inference from KEDA's CPU/memory scalers, which cannot
//!   report activity at zero).
//! * Active: at 0 (or below min with `idle_replicas`), scale to `max(min, 1)`; otherwise the
//!   HPA decides. `last_active_time` is stored, except while a trigger fails without a
//!   fallback in force (KEDA's `PartialTriggerError` case).
//! * Inactive while a trigger fails (KEDA's `isError`), unless a fallback with 0 replicas is
//!   set: activation does nothing, the HPA (min at least 1) decides above zero. A broken
//!   metric source never takes a target to zero or idle.
//! * Inactive, and (idle set and current > idle) or (current > 0 and min = 0): unless
//!   scale-in is paused, once `last_active_time + cooldown_period` has passed (strictly;
//!   `first_seen + initial_cooldown_period` when never active), scale to `idle_replicas`
//!   (else min); until then the HPA decides and `Active` is False/`ScalerCooldown`.
//! * Inactive, idle unset, current < min: scale to min (pause or not, as KEDA does).

use std::time::Duration;

use super::{Activation, ExtensionReport, ExtensionState, Extensions};
use crate::{
    hpa::condition::{Condition, ConditionReason, ConditionType},
    hpa::history::History,
    hpa::observation::Observation,
    hpa::settings::Settings,
    hpa::spec::{HorizontalSpec, MetricSpec},
    hpa::{DecisionPath, Evaluation, Hooks, MetricOutcome, Reconciliation, reconcile},
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
    /// A scaling group's allocation, for the HPA's part of the decision.
    pub(crate) budget: Option<&'a crate::hpa::budget::Allocation>,
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

/// A metric KEDA's scalers read. Resource and ContainerResource metrics are the HPA's own:
/// KEDA's cpu/memory scalers report neither activity nor errors.
fn read_by_scaler(metric: &MetricSpec) -> bool {
    !matches!(
        metric,
        MetricSpec::Resource { .. } | MetricSpec::ContainerResource { .. }
    )
}

/// Whether metric `i` failed in this evaluation (after fallback replaced what it could).
fn failed(outcomes: &[MetricOutcome], i: usize) -> bool {
    outcomes.iter().any(|o| o.index == i && o.result.is_err())
}

/// Whether the target is active, with the sentence that says why.
pub(crate) fn is_active(
    ext: &Extensions,
    metrics: &[MetricSpec],
    outcomes: &[MetricOutcome],
    observation: &Observation,
    fallback_metrics: &[usize],
) -> (bool, String) {
    if !metrics.iter().any(read_by_scaler) {
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
        if failed(outcomes, i) {
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
fn step(input: &Input<'_>, to: i32, reason: &str) -> Evaluation {
    let current = input.observation.current_replicas;
    let mut r = Reconciliation::start(
        input.settings,
        input.spec,
        current,
        input.history,
        input.now,
    );
    r.decision.path = DecisionPath::Activation;
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
    state: &mut ExtensionState,
    report: &mut ExtensionReport,
) -> Evaluation {
    let current = input.observation.current_replicas;
    let min = input.min;
    let idle = input.activation.idle_replicas;
    let forced = input.activation.force_activation;
    let (active, why) = if forced {
        (true, "activation is forced".to_owned())
    } else {
        is_active(
            input.ext,
            input.metrics,
            &outcomes,
            input.observation,
            &report.fallback_metrics,
        )
    };
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
                scaled_to_zero: false,
                budget: input.budget,
            },
        )
    };
    // KEDA's `isError`: a trigger failed in this evaluation and no fallback is in force for
    // it. Since KEDA 2.19 (#7244) the polling loop applies the fallback itself
    // (`getScalerState` in `scale_handler.go`: `GetMetricsWithFallback` returns no error once
    // the fallback is in force, and the trigger counts as active), so a fallback in force is
    // an active trigger, not an error, and `RequestScale`'s default branch refreshes
    // `lastActiveTime`. Before the threshold, or where KEDA cannot fall back (a Value target
    // without a ready replica), the failure is still an error. Resource metrics are read by
    // the HPA, not by KEDA's scalers, so they never count. A KEP-5679 fallback in force
    // counts the same way.
    let trigger_error = input
        .metrics
        .iter()
        .enumerate()
        .any(|(i, m)| read_by_scaler(m) && failed(&outcomes, i));
    let (scale_in_paused, scale_out_paused) = input
        .ext
        .pause
        .as_ref()
        .map_or((false, false), |p| (p.scale_in, p.scale_out));
    // `RequestScale`'s two switches, case by case.
    let (mut e, condition) = if active {
        let mut condition = active_condition(true, ConditionReason::ScalerActive);
        if forced {
            condition.message =
                "Scaling is performed because activation is being forced by annotation".to_owned();
        }
        if current == 0 || (idle.is_some() && current < min) {
            // `scaleFromZeroOrIdle`: nothing while scale-out is paused; `lastActiveTime` is
            // set by a successful scale.
            if scale_out_paused {
                (step(&input, current, ""), condition)
            } else {
                state.last_active_time = Some(input.now);
                report.fire(
                    "activation.wake",
                    format!("active ({why}): {current} → {hpa_min}"),
                );
                (step(&input, hpa_min, "triggers are active"), condition)
            }
        } else if trigger_error {
            // Ready Unknown / `PartialTriggerError`: the HPA decides, and `lastActiveTime`
            // stays, so the cooldown counts from the last activity without an error.
            report.fire(
                "activation.trigger_error",
                format!("active ({why}), but a trigger failed: last active time kept"),
            );
            (hpa(outcomes), condition)
        } else {
            state.last_active_time = Some(input.now);
            (hpa(outcomes), condition)
        }
    } else if trigger_error && input.ext.fallback.as_ref().is_none_or(|f| f.replicas != 0) {
        // A failed trigger is not an idle one: KEDA neither scales in nor to min (with a
        // fallback, the HPA takes the target to the fallback count; without, Ready False /
        // `TriggerError`). The HPA, whose min is at least 1, decides above zero.
        report.fire(
            "activation.trigger_error",
            format!("inactive ({why}), but a trigger failed: no scale-in by activation"),
        );
        (
            if current > 0 {
                hpa(outcomes)
            } else {
                step(&input, current, "")
            },
            active_condition(false, ConditionReason::ScalerNotActive),
        )
    } else if (idle.is_some_and(|i| current > i)) || (current > 0 && min == 0) {
        // `scaleToZeroOrIdle`.
        let (since, period, initial) = match state.last_active_time {
            Some(t) => (t, input.activation.cooldown_period, false),
            None => (
                state.first_seen.unwrap_or(input.now),
                input.activation.initial_cooldown_period,
                true,
            ),
        };
        if scale_in_paused {
            // Returns before the cooldown is looked at: the condition stays `ScalerNotActive`.
            (
                hpa(outcomes),
                active_condition(false, ConditionReason::ScalerNotActive),
            )
        } else if cooled_down(since, period, input.now, initial) {
            let to = idle.unwrap_or(min);
            report.fire(
                "activation.idle",
                format!(
                    "inactive ({why}) and the cooldown of {} s has passed: {current} → {to}",
                    period.as_secs()
                ),
            );
            (
                step(&input, to, "triggers are not active"),
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
        // KEDA sets min here without looking at the pause annotations.
        report.fire(
            "activation.min",
            format!("inactive below min: {current} → {min}"),
        );
        (
            step(&input, min, "below min"),
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
            step(&input, current, ""),
            active_condition(false, ConditionReason::ScalerNotActive),
        )
    };
    super::push_condition(&mut e, condition);
    e
}

/// Whether the cooldown has passed: KEDA's `LastActiveTime.Add(cooldownPeriod).Before(now)`,
/// strictly. For the initial cooldown `since` is the first evaluation, which stands for the
/// creation time that KEDA counts from and which always lies before its first poll: equal
/// counts as passed there, so an `initialCooldownPeriod` of 0 scales in at once, as in KEDA.
fn cooled_down(since: Time, period: Duration, now: Time, initial: bool) -> bool {
    let end = since.plus(period);
    if initial { end <= now } else { end < now }
}
