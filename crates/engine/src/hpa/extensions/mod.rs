//! The migration extensions (issue 12): what users of Kubernetes 1.36/1.37 and KEDA rely on
//! beyond the HPA decision. Each is optional; a spec without `extensions` never reaches this
//! module, so its decision is exactly the HPA's.
//!
//! * scale to zero with Kubernetes 1.37 semantics ([`scale_to_zero`]);
//! * KEDA activation, cooldown and idle replicas ([`activation`]);
//! * fallback per metric (KEP-5679) and per target (KEDA) ([`fallback`]);
//! * pause of the count, of scale-in, of scale-out (KEDA's annotations);
//! * removal candidates on a scale-down ([`removal`]);
//! * stale samples counted as missing ([`stale`]).
//!
//! The state these need between evaluations is one [`ExtensionState`] stored in
//! `History::extensions`; the decision explains what fired in [`ExtensionReport`].
// Re-enabled: the crate-wide lints are allowed on `engine::hpa` until its other files are done.
#![warn(missing_docs, unreachable_pub)]

pub mod activation;
pub mod fallback;
pub mod removal;
pub mod scale_to_zero;
pub mod stale;
pub mod types;

pub use types::*;

use std::{borrow::Cow, time::Duration};

use serde::{Deserialize, Serialize};

use super::{
    DecisionPath, Evaluation, Hooks, MetricOutcome, Reconciliation, defaults, reconcile, replicas,
};
use crate::{
    error::InvalidInput,
    hpa::condition::{ConditionReason, ConditionType},
    hpa::history::History,
    hpa::observation::Observation,
    hpa::settings::Settings,
    hpa::spec::{HorizontalSpec, MetricSpec, SelectPolicy},
    time::Time,
};

/// What the extensions did in one evaluation, for `GetHistory` and the CLI.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtensionReport {
    /// Which rules fired, in order, each with a sentence saying why.
    pub rules: Vec<FiredRule>,
    /// KEDA activation: whether the target was active (`None` without activation).
    pub active: Option<bool>,
    /// Metrics (by index) whose proposal is a fallback count.
    pub fallback_metrics: Vec<usize>,
    /// Pod samples dropped as older than `max_sample_age`.
    pub stale_samples: u32,
    /// On a scale-down with `removal_candidates`: which pods to remove first.
    pub removal_candidates: Vec<removal::RemovalCandidate>,
    /// The state after this evaluation (the stored counters).
    pub state: ExtensionState,
}

/// One rule that changed or explained the decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FiredRule {
    /// A stable name, e.g. `fallback.target`, `activation.wake`, `pause.scale_in`.
    pub rule: String,
    /// Human-readable explanation for the client's report (never matched on).
    pub detail: String,
}

impl ExtensionReport {
    fn fire(&mut self, rule: &str, detail: impl Into<String>) {
        self.rules.push(FiredRule {
            rule: rule.to_owned(),
            detail: detail.into(),
        });
    }
}

/// The key a metric's health is stored under: its type and name (and container), so that
/// reordering the spec keeps it.
pub fn metric_key(metric: &MetricSpec) -> String {
    match metric {
        MetricSpec::Resource { name, .. } => format!("Resource/{name}"),
        MetricSpec::ContainerResource {
            name, container, ..
        } => format!("ContainerResource/{container}/{name}"),
        MetricSpec::Pods { name, .. } => format!("Pods/{name}"),
        MetricSpec::Object { name, .. } => format!("Object/{name}"),
        MetricSpec::External { name, .. } => format!("External/{name}"),
        MetricSpec::Unknown { type_name } => format!("Unknown/{type_name}"),
    }
}

// === validation ===

/// Rejects extension input that makes no sense, naming the field as the API does.
pub(crate) fn validate(
    settings: &Settings,
    spec: &HorizontalSpec,
    ext: &Extensions,
) -> Result<(), InvalidInput> {
    let min = spec.min_replicas.unwrap_or(1);
    if settings.scale_to_zero && min == 0 {
        scale_to_zero::validate(spec)?;
    }
    if let Some(a) = &ext.activation
        && let Some(idle) = a.idle_replicas
    {
        if idle < 0 {
            return Err(InvalidInput::new(
                "spec.activation.idle_replicas",
                "must not be negative",
            ));
        }
        // KEDA's `CheckReplicaCountBoundsAreValid` compares with `GetHPAMinReplicas`, which
        // reads a `minReplicaCount` of 0 as 1: idle 0 with min 0 is admitted.
        if idle >= min.max(1) {
            return Err(InvalidInput::new(
                "spec.activation.idle_replicas",
                "must be less than min_replicas (a min_replicas of 0 counts as 1, as in KEDA)",
            ));
        }
    }
    if let Some(f) = &ext.fallback {
        if f.replicas < 0 {
            return Err(InvalidInput::new(
                "spec.fallback.replicas",
                "must not be negative",
            ));
        }
        // KEDA's `CheckFallbackValid`: a fallback needs a trigger that is not cpu or memory.
        // Here that is an External metric, the only kind KEDA's fallback feeds.
        if !spec
            .metrics
            .iter()
            .any(|m| matches!(m, MetricSpec::External { .. }))
        {
            return Err(InvalidInput::new(
                "spec.fallback",
                "needs at least one External metric: KEDA rejects a fallback whose triggers \
                 are all cpu or memory, on which it can never fire",
            ));
        }
    }
    if let Some(p) = &ext.pause
        && let Some(r) = p.paused_replicas
        && r < 0
    {
        return Err(InvalidInput::new(
            "spec.pause.paused_replicas",
            "must not be negative",
        ));
    }
    if let Some(age) = ext.max_sample_age
        && age.is_zero()
    {
        return Err(InvalidInput::new(
            "spec.max_sample_age",
            "must be greater than 0",
        ));
    }
    for (i, m) in &ext.metrics {
        if *i >= spec.metrics.len().max(1) {
            return Err(InvalidInput::new(
                format!("spec.metrics[{i}]"),
                "extension for a metric that is not in the spec",
            ));
        }
        if let Some(f) = &m.fallback {
            if f.replicas <= 0 {
                return Err(InvalidInput::new(
                    format!("spec.metrics[{i}].fallback.replicas"),
                    "must be greater than 0",
                ));
            }
            if f.failure_duration < Duration::from_secs(MIN_FAILURE_DURATION_SECS) {
                return Err(InvalidInput::new(
                    format!("spec.metrics[{i}].fallback.failure_duration"),
                    format!("must be at least {MIN_FAILURE_DURATION_SECS} s"),
                ));
            }
        }
    }
    Ok(())
}

// === evaluation ===

/// [`super::evaluate`] for a spec with extensions, or without (`None`) under the
/// `HPAScaleToZero` gate (input already validated by the HPA rules).
///
/// Order: stale samples are dropped; `paused_replicas` short-circuits; the metrics are
/// evaluated once and fallback replaces failed metrics' proposals; then activation (KEDA)
/// or the scale-to-zero rules decide the 0↔1 step, and the HPA reconciliation the rest, on
/// a spec whose behavior disables a paused direction ([`pause_as_behavior`]).
pub(crate) fn evaluate(
    settings: &Settings,
    spec: &HorizontalSpec,
    ext: Option<&Extensions>,
    observation: &Observation,
    history: &History,
    now: Time,
    budget: Option<&crate::hpa::budget::Allocation>,
) -> Result<Evaluation, InvalidInput> {
    let gate_only = ext.is_none();
    let no_extensions;
    let ext = match ext {
        Some(ext) => ext,
        None => {
            no_extensions = Extensions::default();
            &no_extensions
        }
    };
    validate(settings, spec, ext)?;
    let mut report = ExtensionReport::default();
    let mut state = history.extensions.clone().unwrap_or_default();
    if !gate_only {
        // Only activation's initial cooldown reads it.
        state.first_seen.get_or_insert(now);
    }
    let current = observation.current_replicas;

    let observation: Cow<'_, Observation> = match ext.max_sample_age {
        Some(age) => {
            let (o, dropped) = stale::drop_stale_samples(observation, age, now);
            if dropped > 0 {
                report.stale_samples = dropped;
                report.fire(
                    "stale_samples",
                    format!(
                        "{dropped} pod samples older than {} s count as missing",
                        age.as_secs()
                    ),
                );
            }
            Cow::Owned(o)
        }
        None => Cow::Borrowed(observation),
    };

    let pause = ext.pause.clone().unwrap_or_default();
    if let Some(paused) = pause.paused_replicas.or(pause.paused.then_some(current)) {
        let mut r = Reconciliation::start(settings, spec, current, history, now);
        r.decision.path = DecisionPath::Paused;
        r.conditions.set(
            ConditionType::Paused,
            true,
            ConditionReason::ScaledObjectPaused,
            format!("autoscaling is paused at {paused} replicas"),
        );
        report.fire("pause.replicas", format!("paused at {paused} replicas"));
        if paused == 0 && current != 0 {
            // Zero by pause is the user's decision, not ours.
            state.scaled_to_zero = false;
        }
        let reason = (paused != current).then(|| format!("paused at {paused} replicas"));
        let e = r.finish(paused, paused != current, reason);
        return Ok(attach(e, state, report, gate_only));
    }

    // Pause of one direction is KEDA's HPA with that direction's select policy Disabled.
    let paused_spec = pause_as_behavior(spec, &pause, &mut report);
    let spec = paused_spec.as_ref().unwrap_or(spec);

    // The metrics, once; failures update the health and fallback replaces them.
    let defaulted = defaults::set_defaults(spec, settings);
    let tolerances = defaults::tolerances_for_hpa(&defaulted, settings);
    let mut outcomes: Vec<MetricOutcome> = defaulted
        .metrics
        .iter()
        .enumerate()
        .map(|(i, m)| replicas::replicas_for_metric(i, m, &observation, settings, tolerances, now))
        .collect();
    if !gate_only {
        // Only fallback and activation read the health; the gate alone keeps none.
        fallback::update_health(&mut state, &defaulted.metrics, &outcomes, now);
    }
    let fallback_conditions = fallback::apply(
        ext,
        &state,
        &defaulted.metrics,
        &mut outcomes,
        &observation,
        now,
        &mut report,
        |i, o| {
            replicas::replicas_for_metric(i, &defaulted.metrics[i], o, settings, tolerances, now)
        },
    );

    let min = defaulted.min_replicas;

    let mut evaluation = if let Some(act) = &ext.activation {
        activation::decide(
            activation::Input {
                settings,
                spec,
                activation: act,
                ext,
                metrics: &defaulted.metrics,
                observation: &observation,
                history,
                now,
                min,
                budget,
            },
            outcomes,
            &mut state,
            &mut report,
        )
    } else if settings.scale_to_zero && current == 0 && !state.scaled_to_zero && min == 0 {
        scale_to_zero::paused_at_zero(settings, spec, history, now, &mut report)
    } else {
        reconcile(
            settings,
            spec,
            &observation,
            history,
            now,
            Hooks {
                outcomes: Some(outcomes),
                scaled_to_zero: settings.scale_to_zero && state.scaled_to_zero,
                budget,
            },
        )
    };

    if settings.scale_to_zero || ext.activation.is_some() {
        scale_to_zero::track(
            &mut evaluation,
            settings,
            ext,
            &defaulted.metrics,
            min,
            &mut state,
            &mut report,
        );
    }
    for c in fallback_conditions {
        push_condition(&mut evaluation, c);
    }
    if pause.scale_in || pause.scale_out {
        let (reason, message) = match (pause.scale_in, pause.scale_out) {
            (true, true) => (
                ConditionReason::ScaleInPaused,
                "scale-in and scale-out are paused",
            ),
            (true, false) => (ConditionReason::ScaleInPaused, "scale-in is paused"),
            _ => (ConditionReason::ScaleOutPaused, "scale-out is paused"),
        };
        push_condition(
            &mut evaluation,
            crate::hpa::condition::Condition {
                condition_type: ConditionType::Paused,
                status: true,
                reason,
                message: message.to_owned(),
            },
        );
    }
    if ext.removal_candidates {
        let d = &evaluation.decision;
        report.removal_candidates = removal::candidates(
            &defaulted.metrics,
            &d.metrics,
            &observation,
            d.current_replicas,
            d.desired_replicas,
        );
        if !report.removal_candidates.is_empty() {
            report.fire(
                "removal_candidates",
                format!(
                    "{} pods listed to remove first",
                    report.removal_candidates.len()
                ),
            );
        }
    }
    Ok(attach(evaluation, state, report, gate_only))
}

/// KEDA's `paused-scale-in` / `paused-scale-out` as its HPA builder applies them
/// (`newHPAForScaledObject`): the spec's behavior (created empty if absent, so its other
/// fields take their defaults) gets `select_policy: Disabled` on that direction. The HPA then
/// limits the count to the current one that way (`ScalingLimited`), while its own above-max
/// and below-min corrections, which ignore behavior, still apply. `None`: nothing paused.
fn pause_as_behavior(
    spec: &HorizontalSpec,
    pause: &Pause,
    report: &mut ExtensionReport,
) -> Option<HorizontalSpec> {
    if !pause.scale_in && !pause.scale_out {
        return None;
    }
    let mut spec = spec.clone();
    let behavior = spec.behavior.get_or_insert_with(Default::default);
    if pause.scale_in {
        behavior
            .scale_down
            .get_or_insert_with(Default::default)
            .select_policy = Some(SelectPolicy::Disabled);
        report.fire(
            "pause.scale_in",
            "scale-in is paused: the scale-down select policy is Disabled",
        );
    }
    if pause.scale_out {
        behavior
            .scale_up
            .get_or_insert_with(Default::default)
            .select_policy = Some(SelectPolicy::Disabled);
        report.fire(
            "pause.scale_out",
            "scale-out is paused: the scale-up select policy is Disabled",
        );
    }
    Some(spec)
}

/// Adds or replaces a condition of an extension type, keeping the type order of
/// [`ConditionType`].
fn push_condition(e: &mut Evaluation, c: crate::hpa::condition::Condition) {
    let conditions = &mut e.decision.conditions;
    conditions.retain(|x| x.condition_type != c.condition_type);
    conditions.push(c);
    conditions.sort_by_key(|x| x.condition_type);
}

/// Stores the state in the history and the report in the decision. Under the gate alone
/// (`gate_only`: a spec without extensions) both are kept only when they say something, so
/// that a target which never meets the gate's rules stores and answers what it did before.
fn attach(
    mut e: Evaluation,
    mut state: ExtensionState,
    mut report: ExtensionReport,
    gate_only: bool,
) -> Evaluation {
    // Bounded: the health map only keeps keys of the spec (done in update_health); nothing
    // else grows.
    state
        .metric_health
        .retain(|_, h| h.consecutive_failures > 0);
    report.state = state.clone();
    e.history.extensions = (!gate_only || state != ExtensionState::default()).then_some(state);
    e.decision.extensions = (!gate_only || !report.rules.is_empty()).then(|| Box::new(report));
    e
}

#[cfg(test)]
mod tests;
