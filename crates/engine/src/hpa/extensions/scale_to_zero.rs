//! Scale to zero with Kubernetes 1.37 semantics (`HPAScaleToZero`, beta and on by default in
//! 1.37; the `ScaledToZero` condition of kubernetes PR #135118; migration document).
//!
//! * `minReplicas: 0` needs an Object or External metric: the API server rejects it otherwise.
//! * `ScaledToZero=True` when the controller takes a target with current > 0 to 0 (min 0, an
//!   Object/External metric); `False`/`NotScaledToZero` after every other HPA rescale, so
//!   also when it scales the target back up ([`track`]).
//! * A target at 0 that the controller did not scale to zero counts as paused by someone else
//!   and is not woken (the older "scaling is disabled since the replica count of the target
//!   is zero" rule). Whether zero was our decision is stored (`ExtensionState::scaled_to_zero`).
//! * A target we scaled to zero whose `min_replicas` has since been raised above 0 is woken
//!   (`shouldComputeMetricsForZeroReplicas`: `minReplicas != 0 && scaledToZeroCondition`):
//!   its metrics are computed as for any wake and the result is at least min.

use super::{ExtensionReport, ExtensionState, Extensions};
use crate::{
    error::InvalidInput,
    hpa::condition::{Condition, ConditionReason, ConditionType},
    hpa::history::History,
    hpa::settings::Settings,
    hpa::spec::{HorizontalSpec, MetricSpec},
    hpa::{DecisionPath, Evaluation, Reconciliation, messages, validate as rules},
    time::Time,
};

/// `validateHorizontalPodAutoscalerSpec` with the gate on: `minReplicas: 0` is only valid
/// with at least one Object or External metric. Checked under the controller's rules too,
/// as it was before the gate was on by default.
pub(crate) fn validate(spec: &HorizontalSpec) -> Result<(), InvalidInput> {
    match rules::min_replicas_violation(spec.min_replicas, &spec.metrics, true) {
        None => Ok(()),
        Some(v) => Err(InvalidInput::new(
            format!("spec.{}", v.field),
            v.description,
        )),
    }
}

/// A target at 0 that we did not scale to zero: left alone, as upstream's disabled rule.
pub(crate) fn paused_at_zero(
    settings: &Settings,
    spec: &HorizontalSpec,
    history: &History,
    now: Time,
    report: &mut ExtensionReport,
) -> Evaluation {
    let mut r = Reconciliation::start(settings, spec, 0, history, now);
    r.decision.path = DecisionPath::PausedAtZero;
    r.conditions.set(
        ConditionType::ScalingActive,
        false,
        ConditionReason::ScalingDisabled,
        messages::SCALING_DISABLED,
    );
    report.fire(
        "scale_to_zero.paused_at_zero",
        "the target is at 0 and zero was not our decision: treated as paused, not woken",
    );
    r.finish(0, false, None)
}

/// Records whether zero is our decision and sets `ScaledToZero` as upstream does after a
/// rescale (`reconcileAutoscaler`, with the gate on): True when the target went from above
/// zero to zero (min 0, an Object/External metric, or KEDA activation), False/
/// `NotScaledToZero` after every other HPA rescale, whatever the counts, and after a wake
/// from a zero that was ours. KEDA's own steps (activation) are not HPA rescales and set
/// nothing else. The condition is part of the HPA's status: what the last rescale set is
/// reported on every later decision, until the next rescale sets it again.
pub(crate) fn track(
    e: &mut Evaluation,
    settings: &Settings,
    ext: &Extensions,
    metrics: &[MetricSpec],
    min: i32,
    state: &mut ExtensionState,
    report: &mut ExtensionReport,
) {
    let d = &e.decision;
    let (current, desired) = (d.current_replicas, d.desired_replicas);
    // Without the gate the HPA sets no ScaledToZero condition; KEDA's steps still do.
    let hpa_sets = d.path != DecisionPath::Activation && settings.scale_to_zero;
    let eligible = min == 0 && (rules::has_object_or_external(metrics) || ext.activation.is_some());
    // The condition this evaluation sets: True, False, or nothing.
    let set = if current > 0 && desired == 0 && eligible {
        state.scaled_to_zero = true;
        report.fire("scale_to_zero", "scaled to zero");
        Some(true)
    } else if current == 0 && desired > 0 {
        let ours = std::mem::take(&mut state.scaled_to_zero);
        report.fire(
            "scale_to_zero.wake",
            format!("woken from zero to {desired}"),
        );
        (ours || hpa_sets).then_some(false)
    } else if desired != current {
        state.scaled_to_zero = false;
        hpa_sets.then_some(false)
    } else {
        None
    };
    if let Some(status) = set {
        state.not_scaled_to_zero = !status;
    }
    let condition = if state.scaled_to_zero {
        Condition::new(
            ConditionType::ScaledToZero,
            true,
            ConditionReason::ScaledToZero,
            "the HPA controller scaled the workload to zero",
        )
    } else if state.not_scaled_to_zero {
        Condition::new(
            ConditionType::ScaledToZero,
            false,
            ConditionReason::NotScaledToZero,
            "the HPA controller did not scale the workload to zero",
        )
    } else {
        return;
    };
    super::push_condition(e, condition);
}
