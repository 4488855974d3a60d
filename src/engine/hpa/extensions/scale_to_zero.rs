//! Scale to zero with Kubernetes 1.37 semantics (`HPAScaleToZero`, beta and on by default in
//! 1.37; the `ScaledToZero` condition of kubernetes PR #135118; migration document).
//!
//! * `minReplicas: 0` needs an Object or External metric: the API server rejects it otherwise.
//! * `ScaledToZero=True` when the controller takes a target with current > 0 to 0 (min 0, an
//!   Object/External metric); `False`/`NotScaledToZero` when it scales it back up.
//! * A target at 0 that the controller did not scale to zero counts as paused by someone else
//!   and is not woken (the older "scaling is disabled since the replica count of the target
//!   is zero" rule). Whether zero was our decision is stored (`ExtensionState::scaled_to_zero`).

use super::{ExtensionReport, ExtensionState, Extensions};
use crate::engine::{
    condition::{Condition, ConditionReason, ConditionType},
    error::InvalidInput,
    history::History,
    hpa::{DecisionPath, Evaluation, Reconciliation, messages},
    settings::Settings,
    spec::{HorizontalSpec, MetricSpec},
    time::Time,
};

/// `validateHorizontalPodAutoscalerSpec` with the gate on: `minReplicas: 0` is only valid
/// with at least one Object or External metric.
pub(crate) fn validate(spec: &HorizontalSpec) -> Result<(), InvalidInput> {
    if has_object_or_external(&spec.metrics) {
        Ok(())
    } else {
        Err(InvalidInput::new(
            "spec.min_replicas",
            "may be 0 only when at least one Object or External metric is configured",
        ))
    }
}

/// Whether any metric is Object or External.
pub(crate) fn has_object_or_external(metrics: &[MetricSpec]) -> bool {
    metrics
        .iter()
        .any(|m| matches!(m, MetricSpec::Object { .. } | MetricSpec::External { .. }))
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

/// Records whether zero is our decision and sets `ScaledToZero` as upstream does.
pub(crate) fn track(
    e: &mut Evaluation,
    ext: &Extensions,
    metrics: &[MetricSpec],
    min: i32,
    state: &mut ExtensionState,
    report: &mut ExtensionReport,
) {
    let d = &e.decision;
    let (current, desired) = (d.current_replicas, d.desired_replicas);
    let eligible = min == 0 && (has_object_or_external(metrics) || ext.activation.is_some());
    let condition = if current > 0 && desired == 0 && eligible {
        state.scaled_to_zero = true;
        report.fire("scale_to_zero", "scaled to zero");
        Some(Condition {
            condition_type: ConditionType::ScaledToZero,
            status: true,
            reason: ConditionReason::ScaledToZero,
            message: "the target was scaled to zero".to_owned(),
        })
    } else if current == 0 && desired > 0 {
        let ours = state.scaled_to_zero;
        state.scaled_to_zero = false;
        report.fire(
            "scale_to_zero.wake",
            format!("woken from zero to {desired}"),
        );
        ours.then(|| Condition {
            condition_type: ConditionType::ScaledToZero,
            status: false,
            reason: ConditionReason::NotScaledToZero,
            message: format!("the target was scaled up from zero to {desired}"),
        })
    } else if current == 0 && desired == 0 && state.scaled_to_zero {
        Some(Condition {
            condition_type: ConditionType::ScaledToZero,
            status: true,
            reason: ConditionReason::ScaledToZero,
            message: "the target is scaled to zero".to_owned(),
        })
    } else {
        if desired > 0 {
            state.scaled_to_zero = false;
        }
        None
    };
    if let Some(c) = condition {
        super::push_condition(e, c);
    }
}
