//! What-if replay (`Simulate`): a target's past run again under another spec. Never writes.
//!
//! Two sources, one result ([`pb::SimulateResponse`]):
//!
//! * a **trace** (the `RecommendRequest`s an adapter sent, oldest first): every request goes
//!   through the same conversion ([`convert::recommend_request`]) and the same engine
//!   ([`hpa::evaluate`]) as `Recommend`, with its own history carried from step to step and
//!   pruned as the server prunes it. The "stored" run is the trace under its own specs, the
//!   simulated run the trace under the override: both exact.
//! * the **stored decision log** of a target: each logged decision keeps the per-metric
//!   readings and proposals (`MetricProposal`, `PodGroups`), so the metric proposals are taken
//!   as recorded when the target and tolerance are unchanged, or recomputed from the recorded
//!   utilization / value and ready pod count (`GetResourceReplicas`' `ceil(ratio × ready)`,
//!   exact without unready or missing pods), then normalized by [`hpa::normalize_only`]
//!   (`normalizeDesiredReplicas*`) against the simulated run's own history.
//!
//! The replay is open-loop: each step keeps the recorded current replica count and metric
//! readings; the load a different replica count would have caused is not modelled (see
//! `docs/whatif.md`).

use std::time::Duration;

use super::{
    convert::{self, Context},
    status::ApiError,
};
use crate::{
    config::Limits,
    engine::{
        error::InvalidInput,
        hpa::condition::{ConditionReason, ConditionType},
        hpa::history::History,
        hpa::settings::Settings,
        hpa::spec::{HorizontalSpec, MetricSpec, MetricTarget, MetricTargetType},
        hpa::{self, Decision, DecisionPath, MetricOutcome, MetricProposal},
        time::Time,
    },
    pb::v1 as pb,
    store::{DecisionEntry, prune},
};

/// What a replay needs from the server configuration.
#[derive(Clone, Debug)]
pub struct SimulateOptions {
    /// Server defaults of the controller flags (the trace's `spec.settings` override them).
    pub(crate) defaults: Settings,
    pub(crate) limits: Limits,
    /// Pruning horizon, as `Recommend` prunes (see `store::prune`).
    pub(crate) history_retention: Duration,
}

impl Default for SimulateOptions {
    fn default() -> Self {
        SimulateOptions {
            defaults: Settings::default(),
            limits: Limits::default(),
            history_retention: Duration::from_secs(3600),
        }
    }
}

/// The `[from, to)` window of returned steps.
#[derive(Clone, Copy, Debug, Default)]
pub struct Window {
    /// The first instant included; `None`: from the trace's (or history's) start.
    pub from: Option<Time>,
    /// The first instant excluded; `None`: to its end.
    pub to: Option<Time>,
}

impl Window {
    fn contains(&self, t: Time) -> bool {
        self.from.is_none_or(|f| t >= f) && self.to.is_none_or(|e| t < e)
    }

    /// Reads `from` / `to` of a request; `from` must not be after `to`.
    pub(crate) fn from_request(req: &pb::SimulateRequest) -> Result<Self, ApiError> {
        let from = req.from.as_ref().map(|t| time("from", t)).transpose()?;
        let to = req.to.as_ref().map(|t| time("to", t)).transpose()?;
        if let (Some(f), Some(t)) = (from, to)
            && f > t
        {
            return Err(ApiError::field("to", "must not be before from"));
        }
        Ok(Window { from, to })
    }
}

fn time(field: &str, t: &prost_types::Timestamp) -> Result<Time, ApiError> {
    // 0001-01-01 .. 9999-12-31, as every other timestamp of the API.
    if !(-62_135_596_800..=253_402_300_799).contains(&t.seconds)
        || !(0..1_000_000_000).contains(&t.nanos)
    {
        return Err(ApiError::field(
            field,
            "must be a valid timestamp (0001-01-01 to 9999-12-31)",
        ));
    }
    Ok(Time::from_unix_millis(
        t.seconds * 1000 + i64::from(t.nanos / 1_000_000),
    ))
}

/// The `Simulate` call: checks the request's shape, then replays the trace or the stored log
/// (`load_decisions` is only called for a `target_key`).
pub fn simulate(
    req: &pb::SimulateRequest,
    options: &SimulateOptions,
    load_decisions: impl FnOnce(&str) -> Result<Vec<DecisionEntry>, ApiError>,
) -> Result<pb::SimulateResponse, ApiError> {
    let window = Window::from_request(req)?;
    match (req.target_key.is_empty(), req.trace.is_empty()) {
        (true, true) => Err(ApiError::field(
            "target_key",
            "set target_key (replay stored history) or trace (replay requests)",
        )),
        (false, false) => Err(ApiError::field(
            "trace",
            "give either target_key or trace, not both",
        )),
        (true, false) => replay_trace(&req.trace, req.spec.as_ref(), window, options),
        (false, true) => {
            convert::target_key(&req.target_key, &options.limits)?;
            let decisions = load_decisions(&req.target_key)?;
            if decisions.is_empty() {
                return Err(ApiError::TargetNotFound(req.target_key.clone()));
            }
            replay_decisions(&decisions, req.spec.as_ref(), window, options)
        }
    }
}

/// Validates an override spec on its own, so that its violations are named `spec.*`.
fn override_spec(
    spec: &pb::HorizontalSpec,
    options: &SimulateOptions,
) -> Result<(HorizontalSpec, Settings), ApiError> {
    let input = convert::recommend_request(
        pb::RecommendRequest {
            target_key: "simulate".to_owned(),
            spec: Some(spec.clone()),
            ..Default::default()
        },
        &context(options, Time::from_unix_millis(0)),
    )?;
    Ok((input.spec, input.settings.apply(&options.defaults)))
}

fn context(options: &SimulateOptions, now: Time) -> Context<'_> {
    Context {
        limits: &options.limits,
        trust_request_time: true,
        server_now: now,
        history_retention: options.history_retention,
        scale_to_zero: options.defaults.scale_to_zero,
    }
}

/// Renames a step's violations `trace[i].…`.
fn in_trace(i: usize, e: ApiError) -> ApiError {
    match e {
        ApiError::InvalidArgument(v) => ApiError::InvalidArgument(
            v.into_iter()
                .map(|x| InvalidInput::new(format!("trace[{i}].{}", x.field), x.description))
                .collect(),
        ),
        ApiError::ResourceExhausted { field, message } => ApiError::ResourceExhausted {
            field: format!("trace[{i}].{field}"),
            message,
        },
        other => other,
    }
}

/// One evaluated step of one run.
#[derive(Clone, Debug)]
struct RunStep {
    desired: i32,
    /// The count this run started the step from.
    current: i32,
    /// The count the trace or log recorded.
    recorded_current: i32,
    decision: Decision,
    metrics: Vec<MetricSpec>,
}

/// The decisions of a trace under `spec` (or each request's own), history carried and pruned
/// as `Recommend` does; dry runs decide but change no history.
fn run_trace(
    trace: &[pb::RecommendRequest],
    spec: Option<&pb::HorizontalSpec>,
    options: &SimulateOptions,
    baseline: Option<&[(Time, bool, RunStep)]>,
) -> Result<Vec<(Time, bool, RunStep)>, ApiError> {
    let mut history = History::default();
    let mut out: Vec<(Time, bool, RunStep)> = Vec::with_capacity(trace.len());
    // The last applied (non-dry-run) count of the baseline and of this run.
    let mut applied: Option<(i32, i32)> = None;
    for (i, req) in trace.iter().enumerate() {
        if req.evaluation_time.is_none() {
            return Err(ApiError::field(
                format!("trace[{i}].evaluation_time"),
                "must be set (a trace step is replayed at its recorded time)",
            ));
        }
        let mut req = req.clone();
        if let Some(spec) = spec {
            req.spec = Some(spec.clone());
        }
        let recorded_current = req.current_replicas;
        if let Some((base, own)) = applied {
            req.current_replicas = closed_loop(req.current_replicas, base, own);
        }
        let input = convert::recommend_request(req, &context(options, Time::from_unix_millis(0)))
            .map_err(|e| in_trace(i, e))?;
        let settings = input.settings.apply(&options.defaults);
        let evaluation = hpa::evaluate(
            &settings,
            &input.spec,
            &input.observation,
            &history,
            input.now,
        )
        .map_err(|e| in_trace(i, convert::engine_invalid(e)))?;
        if !input.dry_run {
            history = evaluation.history;
            prune::prune(&mut history, input.now, options.history_retention);
            if let Some(base) = baseline.and_then(|b| b.get(i)) {
                applied = Some((base.2.desired, evaluation.decision.desired_replicas));
            }
        }
        out.push((
            input.now,
            input.dry_run,
            RunStep {
                desired: evaluation.decision.desired_replicas,
                current: evaluation.decision.current_replicas,
                recorded_current,
                decision: evaluation.decision,
                metrics: input.spec.metrics,
            },
        ));
    }
    Ok(out)
}

/// Replays a trace: the stored run is the trace under its own specs, the simulated run under
/// `spec` (the same run when absent). Exact.
pub fn replay_trace(
    trace: &[pb::RecommendRequest],
    spec: Option<&pb::HorizontalSpec>,
    window: Window,
    options: &SimulateOptions,
) -> Result<pb::SimulateResponse, ApiError> {
    if let Some(spec) = spec {
        override_spec(spec, options)?;
    }
    let stored = run_trace(trace, None, options, None)?;
    let simulated = match spec {
        None => stored.clone(),
        Some(spec) => run_trace(trace, Some(spec), options, Some(&stored))?,
    };
    let steps = stored
        .into_iter()
        .zip(simulated)
        .filter(|((t, _, _), _)| window.contains(*t))
        .map(|((t, dry_run, s), (_, _, m))| step(t, dry_run, &s, &m))
        .collect();
    Ok(response(steps, "exact".to_owned()))
}

/// At most this many steps are returned (the summary covers them all); see
/// `SimulateResponse.omitted_steps`.
pub(crate) const MAX_STEPS: usize = 5000;
/// A stored run of more decisions than this is replayed as this many evenly spaced steps.
pub(crate) const MAX_STEPS_PER_RUN: u64 = 1000;

/// The spec and settings one stored step is replayed under.
struct StepSpec {
    spec: HorizontalSpec,
    settings: Settings,
    defaulted: hpa::defaults::DefaultedSpec,
    tolerances: hpa::replicas::Tolerances,
}

impl StepSpec {
    fn new(spec: HorizontalSpec, settings: Settings) -> Self {
        let defaulted = hpa::defaults::set_defaults(&spec, &settings);
        let tolerances = hpa::defaults::tolerances_for_hpa(&defaulted, &settings);
        StepSpec {
            spec,
            settings,
            defaulted,
            tolerances,
        }
    }
}

/// The spec in force at a stored decision, from its recorded inputs (`None` for records
/// written before the inputs were kept).
fn recorded_spec(entry: &DecisionEntry) -> Option<StepSpec> {
    let inputs = entry.inputs.as_ref()?;
    Some(StepSpec::new(
        HorizontalSpec {
            min_replicas: inputs.min_replicas,
            max_replicas: inputs.max_replicas,
            metrics: entry.metrics.clone(),
            behavior: inputs.behavior.clone(),
            // The migration extensions are not part of the recorded inputs: a replay of
            // stored history runs the plain HPA rules (docs/whatif.md).
            extensions: None,
        },
        inputs.settings.clone(),
    ))
}

/// The decisions of a stored run: its count, evenly spaced from its first to its last time
/// (exact when the adapter called at a fixed period), at most [`MAX_STEPS_PER_RUN`].
fn expand(entry: &DecisionEntry) -> (Vec<Time>, bool) {
    let count = entry.run.count.max(1);
    let first = entry.run.first_time.unix_millis();
    let last = entry.time.unix_millis();
    let n = count.min(MAX_STEPS_PER_RUN);
    if n == 1 || first >= last {
        // One decision, or several at one instant.
        let n = usize::try_from(n).unwrap_or(1);
        return (vec![entry.time; n], count > MAX_STEPS_PER_RUN);
    }
    let span = i128::from(last - first);
    let times = (0..n)
        .map(|k| {
            let offset = span * i128::from(k) / i128::from(n - 1);
            Time::from_unix_millis(first + i64::try_from(offset).unwrap_or(0))
        })
        .collect();
    (times, count > MAX_STEPS_PER_RUN)
}

/// Replays a stored decision log (runs expanded) under `spec`, or under each decision's
/// recorded spec when `spec` is absent (see the module doc for what is exact).
pub(crate) fn replay_decisions(
    entries: &[DecisionEntry],
    pb_spec: Option<&pb::HorizontalSpec>,
    window: Window,
    options: &SimulateOptions,
) -> Result<pb::SimulateResponse, ApiError> {
    let fixed = match pb_spec {
        Some(s) => {
            let (spec, settings) = override_spec(s, options)?;
            Some(StepSpec::new(spec, settings))
        }
        None => None,
    };
    let mut history = History::default();
    let mut approximate: Vec<String> = Vec::new();
    let mut note = |s: String| {
        if !approximate.contains(&s) && approximate.len() < 8 {
            approximate.push(s);
        }
    };
    let mut steps = Vec::new();
    let mut applied: Option<(i32, i32)> = None;
    for entry in entries {
        let own = recorded_spec(entry);
        let step_spec = match (&fixed, &own) {
            (Some(f), _) => f,
            (None, Some(o)) => o,
            (None, None) => {
                return Err(ApiError::field(
                    "spec",
                    "must be set: the stored decisions predate the recorded spec (format 1)",
                ));
            }
        };
        // The per-metric proposals are reused unless the tolerance in force changes.
        let tolerance_changed = match &own {
            Some(o) => o.tolerances != step_spec.tolerances,
            None => true,
        };
        if own.is_none() {
            note("decisions stored without their spec (format 1) reuse or recompute proposals without knowing the tolerance in force".to_owned());
        }
        let (times, thinned) = expand(entry);
        if thinned {
            note(format!(
                "runs of more than {MAX_STEPS_PER_RUN} decisions are replayed as {MAX_STEPS_PER_RUN} evenly spaced steps"
            ));
        } else if entry.run.count > 2 {
            note("the decisions inside a stored run are replayed evenly spaced between its first and last time".to_owned());
        }
        for now in times {
            let recorded_current = entry.decision.current_replicas;
            let current = match applied {
                Some((base, own)) => closed_loop(recorded_current, base, own),
                None => recorded_current,
            };
            let evaluation = replay_step(
                entry,
                step_spec,
                current,
                now,
                &history,
                tolerance_changed,
                &mut note,
            )?;
            history = evaluation.history;
            prune::prune(&mut history, now, options.history_retention);
            applied = Some((
                entry.decision.desired_replicas,
                evaluation.decision.desired_replicas,
            ));
            if !window.contains(now) {
                continue;
            }
            let stored = RunStep {
                current: recorded_current,
                recorded_current,
                desired: entry.decision.desired_replicas,
                decision: entry.decision.clone(),
                metrics: entry.metrics.clone(),
            };
            let simulated = RunStep {
                current,
                recorded_current,
                desired: evaluation.decision.desired_replicas,
                decision: evaluation.decision,
                metrics: step_spec.defaulted.metrics.clone(),
            };
            steps.push(step(now, false, &stored, &simulated));
        }
    }
    // Only an exact replay's identity is promised: note that the exact words differ.
    let fidelity = if approximate.is_empty() {
        "exact: every metric proposal taken or recomputed from complete records".to_owned()
    } else {
        format!("approximate: {}", approximate.join("; "))
    };
    Ok(response(steps, fidelity))
}

/// One stored decision replayed under `s` from `current`.
fn replay_step(
    entry: &DecisionEntry,
    s: &StepSpec,
    current: i32,
    now: Time,
    history: &History,
    tolerance_changed: bool,
    note: &mut impl FnMut(String),
) -> Result<hpa::Evaluation, ApiError> {
    let min = s.defaulted.min_replicas;
    let max = s.defaulted.max_replicas;
    if (current == 0 && min != 0) || current > max || current < min {
        // The shortcuts run before any metric: the engine with no pods decides them exactly.
        let observation = crate::engine::hpa::observation::Observation {
            current_replicas: current,
            ..Default::default()
        };
        return hpa::evaluate(&s.settings, &s.spec, &observation, history, now)
            .map_err(convert::engine_invalid);
    }
    let outcomes: Vec<MetricOutcome> = s
        .defaulted
        .metrics
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let (outcome, why) =
                replay_metric(i, m, entry, current, s.tolerances, tolerance_changed);
            if let Some(why) = why {
                note(why);
            }
            outcome
        })
        .collect();
    match combine(&outcomes, current) {
        None => {
            // computeReplicasForMetrics failed: no normalization, nothing recorded but the
            // initial recommendation.
            let mut after = history.clone();
            if after.recommendations.is_none() {
                after.recommendations = Some(vec![crate::engine::hpa::history::Recommendation {
                    replicas: current,
                    time: now,
                }]);
            }
            Ok(hpa::Evaluation {
                decision: Decision {
                    current_replicas: current,
                    desired_replicas: current,
                    conditions: Vec::new(),
                    metrics: outcomes,
                    path: DecisionPath::MetricsFailed,
                    prenormalized_replicas: None,
                    stabilized_replicas: None,
                    scale_up_limit: None,
                    scale_down_limit: None,
                    error: Some("no metric could be replayed".to_owned()),
                    rescale_reason: None,
                    extensions: None,
                },
                history: after,
            })
        }
        Some(prenormalized) => {
            let mut e =
                hpa::normalize_only(&s.settings, &s.spec, current, prenormalized, history, now)
                    .map_err(convert::engine_invalid)?;
            e.decision.metrics = outcomes;
            Ok(e)
        }
    }
}

/// `computeReplicasForMetrics`' combination: the largest proposal; `None` when every metric
/// failed, or when some failed and the others would scale down.
fn combine(outcomes: &[MetricOutcome], current: i32) -> Option<i32> {
    let mut best: Option<i32> = None;
    let mut invalid = 0;
    for o in outcomes {
        match &o.result {
            Ok(p) => best = Some(best.map_or(p.replicas, |b| b.max(p.replicas))),
            Err(_) => invalid += 1,
        }
    }
    let best = best?;
    if invalid > 0 && best < current {
        return None;
    }
    Some(best.max(0))
}

/// The count a simulated step starts from: the recorded count moved by the difference between
/// the runs' last applied counts (the simulated decisions are applied; outside changes carry
/// over). Equal to the recorded count while the runs agree, so a replay under the recorded
/// spec is exact.
fn closed_loop(recorded: i32, baseline_applied: i32, simulated_applied: i32) -> i32 {
    let moved = i64::from(recorded) + i64::from(simulated_applied) - i64::from(baseline_applied);
    i32::try_from(moved.max(0)).unwrap_or(i32::MAX)
}

/// Identity of a metric for matching a simulated metric with a recorded one.
fn identity(m: &MetricSpec) -> (u8, &str, &str) {
    match m {
        MetricSpec::Resource { name, .. } => (1, name, ""),
        MetricSpec::ContainerResource {
            name, container, ..
        } => (2, name, container),
        MetricSpec::Pods { name, .. } => (3, name, ""),
        MetricSpec::Object { name, .. } => (4, name, ""),
        MetricSpec::External { name, .. } => (5, name, ""),
        MetricSpec::Unknown { type_name } => (0, type_name, ""),
    }
}

fn target_of(m: &MetricSpec) -> Option<&MetricTarget> {
    match m {
        MetricSpec::Resource { target, .. }
        | MetricSpec::ContainerResource { target, .. }
        | MetricSpec::Pods { target, .. }
        | MetricSpec::Object { target, .. }
        | MetricSpec::External { target, .. } => Some(target),
        MetricSpec::Unknown { .. } => None,
    }
}

/// The recorded outcome of the metric with `m`'s identity, with its recorded spec.
fn recorded<'a>(
    entry: &'a DecisionEntry,
    m: &MetricSpec,
) -> Option<(&'a MetricOutcome, &'a MetricSpec)> {
    let specs: Vec<MetricSpec> = if entry.metrics.is_empty() {
        vec![hpa::defaults::default_metric()]
    } else {
        entry.metrics.clone()
    };
    let index = specs.iter().position(|s| identity(s) == identity(m))?;
    let outcome = entry.decision.metrics.iter().find(|o| o.index == index)?;
    match entry.metrics.get(index) {
        Some(s) => Some((outcome, s)),
        None => {
            // An empty recorded list is Kubernetes' default metric (cpu at 80%).
            static DEFAULT: std::sync::OnceLock<MetricSpec> = std::sync::OnceLock::new();
            Some((outcome, DEFAULT.get_or_init(hpa::defaults::default_metric)))
        }
    }
}

/// One metric of a stored step under the simulated spec. The second value names why the
/// result is approximate, if it is.
fn replay_metric(
    index: usize,
    m: &MetricSpec,
    entry: &DecisionEntry,
    current: i32,
    tolerances: hpa::replicas::Tolerances,
    tolerance_changed: bool,
) -> (MetricOutcome, Option<String>) {
    let failed = |reason: ConditionReason, message: String| MetricOutcome {
        index,
        result: Err(hpa::MetricFailure { reason, message }),
        pod_groups: None,
    };
    let Some((outcome, spec)) = recorded(entry, m) else {
        return (
            failed(
                ConditionReason::InvalidMetricSourceType,
                "metric not in the recorded decision".to_owned(),
            ),
            Some(
                "a simulated metric is not in the recorded decisions (counted as failed)"
                    .to_owned(),
            ),
        );
    };
    let proposal = match &outcome.result {
        Err(_) => {
            return (
                MetricOutcome {
                    index,
                    ..outcome.clone()
                },
                None,
            );
        }
        Ok(p) => p,
    };
    let (Some(new_target), Some(old_target)) = (target_of(m), target_of(spec)) else {
        return (
            MetricOutcome {
                index,
                ..outcome.clone()
            },
            None,
        );
    };
    if new_target == old_target && !tolerance_changed {
        let mut reused = MetricOutcome {
            index,
            ..outcome.clone()
        };
        // Within tolerance the metric proposes the current count: the simulated run's own.
        if let Ok(p) = &mut reused.result
            && p.replicas == entry.decision.current_replicas
        {
            p.replicas = current;
        }
        return (reused, None);
    }
    let totals = entry
        .decision
        .metrics
        .iter()
        .position(|o| std::ptr::eq(o, outcome))
        .map(|i| entry.pod_totals(i))
        .unwrap_or_default();
    let ready = totals.ready;
    let mut why = None;
    if totals.unready > 0 || totals.missing > 0 {
        why = Some(
            "steps with unready or missing pods recompute proposals without the per-pod rebalancing".to_owned(),
        );
    }
    // The reading in the unit of the new target, and the target.
    let (reading, target, per_pod) = match new_target.target_type {
        MetricTargetType::Utilization => (
            proposal.current_average_utilization.map(i64::from),
            new_target.average_utilization.map(i64::from),
            true,
        ),
        MetricTargetType::AverageValue => (
            proposal.current_average_value,
            new_target.average_value,
            !matches!(m, MetricSpec::Object { .. } | MetricSpec::External { .. }),
        ),
        MetricTargetType::Value => (proposal.current_value, new_target.value, true),
    };
    let (Some(reading), Some(target)) = (reading, target) else {
        return (
            failed(
                ConditionReason::InvalidMetricSourceType,
                "the recorded reading has no value for the simulated target type".to_owned(),
            ),
            Some("a simulated target type has no recorded reading (counted as failed)".to_owned()),
        );
    };
    if target <= 0 {
        return (
            MetricOutcome {
                index,
                ..outcome.clone()
            },
            why,
        );
    }
    #[allow(clippy::cast_precision_loss)]
    let ratio = reading as f64 / target as f64;
    if matches!(new_target.target_type, MetricTargetType::Utilization) {
        why.get_or_insert_with(|| {
            "utilization targets recompute from the recorded whole-percent utilization".to_owned()
        });
    }
    let replicas = if per_pod {
        if tolerances.is_within(ratio) {
            current
        } else {
            ceil_i32(ratio * f64::from(ready))
        }
    } else {
        // Object / External AverageValue: ceil(total / target), total = average × current.
        #[allow(clippy::cast_precision_loss)]
        let total = reading as f64 * f64::from(current);
        if tolerances.is_within(ratio) {
            current
        } else {
            ceil_i32(total / target as f64)
        }
    };
    (
        MetricOutcome {
            index,
            result: Ok(MetricProposal {
                replicas,
                usage_ratio: Some(ratio),
                ..proposal.clone()
            }),
            pod_groups: outcome.pod_groups.clone(),
        },
        why,
    )
}

fn ceil_i32(x: f64) -> i32 {
    let c = x.ceil();
    if c.is_nan() {
        0
    } else {
        // Saturating float → int conversion.
        c as i32
    }
}

/// Which rule shaped a decision's count (see `SimulationStep.stored_limited_by`).
pub(crate) fn limited_by(d: &Decision) -> String {
    match d.path {
        DecisionPath::ScalingDisabled
        | DecisionPath::AboveMaxReplicas
        | DecisionPath::BelowMinReplicas
        | DecisionPath::MetricsFailed
        | DecisionPath::Paused
        | DecisionPath::Activation
        | DecisionPath::PausedAtZero => return d.path.as_str().to_owned(),
        DecisionPath::Legacy | DecisionPath::Behavior => {}
    }
    if let Some(c) = d
        .conditions
        .iter()
        .find(|c| c.condition_type == ConditionType::ScalingLimited && c.status)
    {
        return c.reason.as_str().to_owned();
    }
    match (d.prenormalized_replicas, d.stabilized_replicas) {
        (Some(p), Some(s)) if s > p => "ScaleDownStabilized".to_owned(),
        (Some(p), Some(s)) if s < p => "ScaleUpStabilized".to_owned(),
        _ => String::new(),
    }
}

/// The reading and target of a metric in the target's unit.
fn reading(spec: Option<&MetricSpec>, p: Option<&MetricProposal>) -> (Option<i64>, Option<i64>) {
    let Some(target) = spec.and_then(target_of) else {
        return (None, None);
    };
    let value = |p: &MetricProposal| match target.target_type {
        MetricTargetType::Utilization => p.current_average_utilization.map(i64::from),
        MetricTargetType::AverageValue => p.current_average_value,
        MetricTargetType::Value => p.current_value,
    };
    let t = match target.target_type {
        MetricTargetType::Utilization => target.average_utilization.map(i64::from),
        MetricTargetType::AverageValue => target.average_value,
        MetricTargetType::Value => target.value,
    };
    (p.and_then(value), t)
}

fn metric_specs(metrics: &[MetricSpec]) -> Vec<MetricSpec> {
    if metrics.is_empty() {
        vec![hpa::defaults::default_metric()]
    } else {
        metrics.to_vec()
    }
}

fn step(t: Time, dry_run: bool, stored: &RunStep, simulated: &RunStep) -> pb::SimulationStep {
    let sim_specs = metric_specs(&simulated.metrics);
    let stored_specs = metric_specs(&stored.metrics);
    let metrics = sim_specs
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let outcome = simulated.decision.metrics.iter().find(|o| o.index == i);
            let proposal = outcome.and_then(|o| o.result.as_ref().ok());
            let (current, target) = reading(Some(spec), proposal);
            let stored_proposal = stored_specs
                .iter()
                .position(|s| identity(s) == identity(spec))
                .and_then(|j| stored.decision.metrics.iter().find(|o| o.index == j))
                .and_then(|o| o.result.as_ref().ok())
                .map(|p| p.replicas);
            let (ty, name, container) = identity(spec);
            pb::SimulatedMetric {
                r#type: i32::from(ty),
                name: name.to_owned(),
                container: container.to_owned(),
                current,
                target,
                stored_proposal,
                simulated_proposal: proposal.map(|p| p.replicas),
            }
        })
        .collect();
    let explanation =
        convert::recommend_response(&simulated.decision, &sim_specs, t, false).explanation;
    pb::SimulationStep {
        evaluation_time: Some(convert::to_timestamp(t)),
        current_replicas: stored.recorded_current,
        simulated_current_replicas: simulated.current,
        stored_desired_replicas: stored.desired,
        simulated_desired_replicas: simulated.desired,
        stored_limited_by: limited_by(&stored.decision),
        simulated_limited_by: limited_by(&simulated.decision),
        metrics,
        dry_run,
        simulated_explanation: explanation,
    }
}

fn response(steps: Vec<pb::SimulationStep>, fidelity: String) -> pb::SimulateResponse {
    let asked = |s: &pb::SimulationStep, stored: bool| {
        s.metrics
            .iter()
            .filter_map(|m| {
                if stored {
                    m.stored_proposal
                } else {
                    m.simulated_proposal
                }
            })
            .max()
    };
    let stored = summarize(steps.iter().map(|s| {
        (
            s,
            s.current_replicas,
            s.stored_desired_replicas,
            asked(s, true),
        )
    }));
    let simulated = summarize(steps.iter().map(|s| {
        (
            s,
            s.simulated_current_replicas,
            s.simulated_desired_replicas,
            asked(s, false),
        )
    }));
    let omitted = steps.len().saturating_sub(MAX_STEPS);
    let mut steps = steps;
    steps.truncate(MAX_STEPS);
    pb::SimulateResponse {
        steps,
        summary: Some(pb::SimulationSummary {
            stored: Some(stored),
            simulated: Some(simulated),
        }),
        fidelity,
        omitted_steps: i32::try_from(omitted).unwrap_or(i32::MAX),
    }
}

fn millis(s: &pb::SimulationStep) -> i64 {
    s.evaluation_time
        .as_ref()
        .map_or(0, |t| t.seconds * 1000 + i64::from(t.nanos / 1_000_000))
}

/// The summary of one replica curve (see `RunSummary` in the proto). Dry-run steps are
/// skipped: they changed nothing.
fn summarize<'a>(
    steps: impl Iterator<Item = (&'a pb::SimulationStep, i32, i32, Option<i32>)>,
) -> pb::RunSummary {
    let steps: Vec<_> = steps.filter(|(s, _, _, _)| !s.dry_run).collect();
    let mut out = pb::RunSummary::default();
    let mut replica_ms: f64 = 0.0;
    let mut above_ms: f64 = 0.0;
    let mut previous: Option<i32> = None;
    for (i, (s, start, count, asked)) in steps.iter().enumerate() {
        let before = previous.unwrap_or(*start);
        let change = count - before;
        if change != 0 {
            out.scale_events += 1;
            if change > 0 {
                out.scale_ups += 1;
            } else {
                out.scale_downs += 1;
            }
            out.largest_step = out.largest_step.max(change.abs());
        }
        out.max_replicas = if i == 0 {
            *count
        } else {
            out.max_replicas.max(*count)
        };
        out.min_replicas = if i == 0 {
            *count
        } else {
            out.min_replicas.min(*count)
        };
        if let Some((next, _, _, _)) = steps.get(i + 1) {
            #[allow(clippy::cast_precision_loss)]
            let dt = (millis(next) - millis(s)).max(0) as f64;
            replica_ms += f64::from(*count) * dt;
            if asked.is_some_and(|a| a > *count) {
                above_ms += dt;
            }
        }
        previous = Some(*count);
    }
    out.replica_hours = replica_ms / 3_600_000.0;
    out.seconds_above_target = above_ms / 1000.0;
    out
}
