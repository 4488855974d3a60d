//! The replay of a target's decision log: each logged decision's metric proposals, taken as
//! recorded or recomputed from the recorded readings, normalized against the simulated run's
//! own history. Exact for the changes `docs/whatif.md` lists, approximate otherwise.

use std::time::Duration;

use thiserror::Error;

use super::{
    Fidelity, Replay, Simulated, Stored, Window, closed_loop, identity, metric_specs, step,
};
use crate::{
    error::InvalidInput,
    hpa::{
        self, Decision, DecisionPath, MetricOutcome, MetricProposal,
        condition::ConditionReason,
        defaults::DefaultedSpec,
        history::{History, Recommendation},
        observation::Observation,
        prune::prune,
        replicas::Tolerances,
        settings::Settings,
        spec::{Behavior, HorizontalSpec, MetricSpec, MetricTargetType},
    },
    time::Time,
};

/// A logged run of more decisions than this is replayed as this many evenly spaced steps.
pub const MAX_STEPS_PER_RUN: u64 = 1000;

/// One run of a target's decision log: consecutive decisions with the same outcome, logged
/// once with their count and the times of the first and the last. Everything but the count
/// and the first time is the run's last decision's.
#[derive(Clone, Debug, PartialEq)]
pub struct LoggedRun {
    /// The evaluation instant of the run's last decision.
    pub time: Time,
    /// The evaluation instant of the run's first decision.
    pub first_time: Time,
    /// Decisions in the run (0 reads as 1).
    pub count: u64,
    /// The run's last decision as the engine made it.
    pub decision: Decision,
    /// The spec's metrics, which `decision.metrics` index.
    pub metrics: Vec<MetricSpec>,
    /// The rest of the spec and the settings in force; `None` for decisions logged before
    /// they were kept (the replay then needs a spec).
    pub inputs: Option<LoggedInputs>,
    /// Per entry of `decision.metrics` (same order): the size of each pod group. A missing
    /// entry reads as zeros.
    pub pod_totals: Vec<PodTotals>,
    /// What each of the run's last `readings.len()` decisions observed, oldest first (all
    /// of them when it is `count`; none for runs logged before readings were kept).
    pub readings: Vec<LoggedReading>,
}

/// What one logged decision observed.
#[derive(Clone, Debug, PartialEq)]
pub struct LoggedReading {
    /// The decision's evaluation instant.
    pub time: Time,
    /// Per metric of the spec (`LoggedRun::metrics`, an empty list being the default metric):
    /// the current value its target type compares, in that type's unit; `None` where the
    /// metric failed.
    pub values: Vec<Option<i64>>,
}

/// The spec (besides its metrics) and the controller settings of a logged decision.
#[derive(Clone, Debug, PartialEq)]
pub struct LoggedInputs {
    /// The spec's `min_replicas`, as given (before defaulting).
    pub min_replicas: Option<i32>,
    /// The spec's `max_replicas`.
    pub max_replicas: i32,
    /// The spec's behavior; `None` chose the legacy normalization.
    pub behavior: Option<Behavior>,
    /// The server defaults with the target's overrides applied.
    pub settings: Settings,
    /// The spec's schedules (none for decisions logged before they were recorded).
    pub schedules: Vec<crate::hpa::schedule::Schedule>,
}

/// The size of the pod groups (`groupPods`) of one logged metric outcome.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodTotals {
    /// Pods whose sample counted: the `ready` of `GetResourceReplicas`' `ceil(ratio × ready)`.
    pub ready: i32,
    /// Pods not yet ready (cpu only).
    pub unready: u32,
    /// Pods without a sample.
    pub missing: u32,
}

/// Why a decision log could not be replayed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum LogError {
    /// No spec was given and a logged decision predates the recorded spec.
    #[error("a spec must be given: the logged decisions predate the recorded spec")]
    SpecRequired,
    /// The engine refused the spec, the settings or a step.
    #[error(transparent)]
    Invalid(#[from] InvalidInput),
}

/// Replays a decision log (oldest run first, runs expanded) under `spec` and its settings, or
/// under each decision's recorded spec when `spec` is absent. The simulated history starts
/// empty and is pruned after every step with `retention`, as the server prunes it. Only the
/// steps inside `window` are returned and summarized; all of them run.
pub fn replay_log(
    runs: &[LoggedRun],
    spec: Option<(HorizontalSpec, Settings)>,
    window: Window,
    retention: Duration,
) -> Result<Replay, LogError> {
    let fixed = spec.map(|(spec, settings)| StepSpec::new(spec, settings));
    let mut notes = Notes::default();
    let mut target = TargetReplay::new(runs, &mut notes);
    let mut steps = Vec::new();
    for k in 0..target.planned.len() {
        let step = target.step(k, fixed.as_ref(), window, retention, &mut notes, None)?;
        steps.extend(step);
    }
    Ok(Replay::new(steps, Fidelity::Records(notes.0)))
}

/// One member of a group replay: its key, the units one of its replicas weighs, its log.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberLog {
    /// The member's target key.
    pub key: String,
    /// Units per replica.
    pub units: i64,
    /// Its decision log, oldest run first.
    pub runs: Vec<LoggedRun>,
}

/// A group's replay: each member's, and the units the group held along the way.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupReplay {
    /// Per member, in the order given.
    pub members: Vec<(String, Replay)>,
    /// After each replayed decision inside the window: the units the members held as stored
    /// and as simulated.
    pub held: Vec<GroupHeld>,
}

/// The units a group's members held after one decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupHeld {
    /// The decision's instant.
    pub time: Time,
    /// As stored: each member's higher of its current and desired counts at its latest
    /// decision so far.
    pub stored: i64,
    /// As simulated under the replay's capacity.
    pub simulated: i64,
}

/// What-if for a scaling group: replays its members' decision logs together, in time order
/// (ties in member order), each under its recorded spec, with the group's budget of
/// `capacity` units applied as the server applies it ([`hpa::decide_in_group`]), each member
/// starting from the count the simulated run gave it ([`closed_loop`]).
///
/// `capacity_schedules` move the capacity by each step's time as they move it live
/// ([`hpa::schedule::capacity_in_force`]); give none to replay under a fixed capacity.
pub fn replay_group(
    group: &str,
    capacity: i64,
    capacity_schedules: &[hpa::schedule::Schedule],
    members: &[MemberLog],
    window: Window,
    retention: Duration,
) -> Result<GroupReplay, LogError> {
    let schedules = hpa::schedule::compile(capacity_schedules)
        .map_err(|mut e| LogError::Invalid(e.swap_remove(0)))?;
    let mut notes = Notes::default();
    let mut targets: Vec<TargetReplay<'_>> = members
        .iter()
        .map(|m| TargetReplay::new(&m.runs, &mut notes))
        .collect();
    let mut order: Vec<(Time, usize, usize)> = targets
        .iter()
        .enumerate()
        .flat_map(|(m, t)| t.planned.iter().enumerate().map(move |(k, p)| (p.1, m, k)))
        .collect();
    order.sort_unstable();
    let mut ledger = hpa::budget::Ledger {
        capacity,
        ..Default::default()
    };
    let mut stored_held: Vec<i64> = vec![0; members.len()];
    let mut steps: Vec<Vec<super::ReplayStep>> = vec![Vec::new(); members.len()];
    let mut held = Vec::new();
    for (now, m, k) in order {
        ledger.capacity = hpa::schedule::capacity_in_force(capacity, &schedules, now).0;
        let member = &members[m];
        let step = targets[m].step(
            k,
            None,
            window,
            retention,
            &mut notes,
            Some((group, &mut ledger, &member.key, member.units)),
        )?;
        let run = &member.runs[targets[m].planned[k].0];
        stored_held[m] = i64::from(
            run.decision
                .current_replicas
                .max(run.decision.desired_replicas)
                .max(0),
        ) * member.units;
        if let Some(step) = step {
            steps[m].push(step);
            held.push(GroupHeld {
                time: now,
                stored: stored_held.iter().sum(),
                simulated: ledger.held(),
            });
        }
    }
    Ok(GroupReplay {
        members: members
            .iter()
            .zip(steps)
            .map(|(m, steps)| {
                (
                    m.key.clone(),
                    Replay::new(steps, Fidelity::Records(notes.0.clone())),
                )
            })
            .collect(),
        held,
    })
}

/// Why a replay is approximate, each reason once, at most 8.
#[derive(Default)]
struct Notes(Vec<String>);

impl Notes {
    fn add(&mut self, s: String) {
        if !self.0.contains(&s) && self.0.len() < 8 {
            self.0.push(s);
        }
    }
}

/// One target's decision log being replayed, one planned step at a time.
struct TargetReplay<'r> {
    runs: &'r [LoggedRun],
    /// Each run's recorded spec (`None`: logged before the inputs were kept).
    own: Vec<Option<StepSpec>>,
    /// The decisions to replay, in log order: the run's index, the instant, the reading.
    planned: Vec<(usize, Time, Option<&'r LoggedReading>)>,
    history: History,
    /// The last applied count of the log and of the simulated run.
    applied: Option<(i32, i32)>,
}

impl<'r> TargetReplay<'r> {
    fn new(runs: &'r [LoggedRun], notes: &mut Notes) -> Self {
        let mut own = Vec::with_capacity(runs.len());
        let mut planned = Vec::new();
        for (i, run) in runs.iter().enumerate() {
            let spec = recorded_spec(run);
            if spec.is_none() {
                notes.add("decisions stored without their spec (format 1) reuse or recompute proposals without knowing the tolerance in force".to_owned());
            }
            own.push(spec);
            let (times, thinned) = expand(run);
            if thinned {
                notes.add(format!(
                    "runs of more than {MAX_STEPS_PER_RUN} decisions are replayed as {MAX_STEPS_PER_RUN} evenly spaced steps"
                ));
            } else if times.iter().filter(|(_, r)| r.is_none()).count() > 1 {
                notes.add("the decisions of a run recorded without their readings are replayed evenly spaced, each with the run's last reading".to_owned());
            }
            planned.extend(times.into_iter().map(|(t, r)| (i, t, r)));
        }
        TargetReplay {
            runs,
            own,
            planned,
            history: History::default(),
            applied: None,
        }
    }

    /// Replays planned step `k` under `fixed` (else the run's recorded spec), as a member of
    /// a group when `member` is given (its name, ledger, key and units). Returns the step when
    /// it is inside `window`, and the member's new ledger entry.
    fn step(
        &mut self,
        k: usize,
        fixed: Option<&StepSpec>,
        window: Window,
        retention: Duration,
        notes: &mut Notes,
        member: Option<(&str, &mut hpa::budget::Ledger, &str, i64)>,
    ) -> Result<Option<super::ReplayStep>, LogError> {
        let (i, now, reading) = self.planned[k];
        let logged = &self.runs[i];
        let own = self.own[i].as_ref();
        let step_spec = fixed.or(own).ok_or(LogError::SpecRequired)?;
        // The per-metric proposals are reused unless the tolerance in force changes.
        let tolerance_changed = own.is_none_or(|o| o.tolerances != step_spec.tolerances);
        let at_reading;
        let run = match reading {
            Some(r) => {
                at_reading = with_reading(logged, r);
                &at_reading
            }
            None => logged,
        };
        let recorded_current = run.decision.current_replicas;
        let current = match self.applied {
            Some((base, own)) => closed_loop(recorded_current, base, own),
            None => recorded_current,
        };
        let history = &self.history;
        let mut replay = |budget: Option<&hpa::budget::Allocation>| {
            replay_step(
                &StepAt {
                    run,
                    spec: step_spec,
                    current,
                    now,
                    history,
                    tolerance_changed,
                },
                &mut |s| notes.add(s),
                budget,
            )
        };
        let evaluation = match member {
            None => replay(None)?,
            Some((group, ledger, key, units)) => {
                let min = step_spec.spec.min_replicas.unwrap_or(1);
                hpa::decide_in_group(ledger, group, key, units, current, min, replay)?.0
            }
        };
        self.history = evaluation.history;
        prune(&mut self.history, now, retention);
        self.applied = Some((
            run.decision.desired_replicas,
            evaluation.decision.desired_replicas,
        ));
        if !window.contains(now) {
            return Ok(None);
        }
        let stored = Stored {
            current: recorded_current,
            decision: &run.decision,
            metrics: &run.metrics,
        };
        let simulated = Simulated {
            current,
            decision: evaluation.decision,
            metrics: &step_spec.defaulted.metrics,
        };
        Ok(Some(step(now, false, stored, simulated)))
    }
}

/// The spec and settings one logged step is replayed under.
struct StepSpec {
    spec: HorizontalSpec,
    settings: Settings,
    defaulted: DefaultedSpec,
    tolerances: Tolerances,
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

/// The spec in force at a logged decision, from its recorded inputs (`None` for decisions
/// logged before the inputs were kept).
fn recorded_spec(run: &LoggedRun) -> Option<StepSpec> {
    let inputs = run.inputs.as_ref()?;
    Some(StepSpec::new(
        HorizontalSpec {
            min_replicas: inputs.min_replicas,
            max_replicas: inputs.max_replicas,
            metrics: run.metrics.clone(),
            behavior: inputs.behavior.clone(),
            // The migration extensions are not part of the recorded inputs: a replay of
            // stored history runs the plain HPA rules (docs/whatif.md).
            extensions: None,
            schedules: inputs.schedules.clone(),
            predictive: None,
        },
        inputs.settings.clone(),
    ))
}

/// The decisions of a logged run, each with its reading when the run kept it: the readings'
/// own times; the decisions before them (a run logged before readings were kept) evenly
/// spaced from the run's first time to the first reading's (or the run's last time), exact
/// when the adapter called at a fixed period; at most [`MAX_STEPS_PER_RUN`] steps. The second
/// value says whether the run was thinned.
fn expand(run: &LoggedRun) -> (Vec<(Time, Option<&LoggedReading>)>, bool) {
    let count = run.count.max(1);
    let keep = usize::try_from(count).unwrap_or(usize::MAX);
    let kept = &run.readings[run.readings.len().saturating_sub(keep)..];
    let unread = count - kept.len() as u64;
    let mut steps: Vec<(Time, Option<&LoggedReading>)> = Vec::new();
    let mut thinned = false;
    if unread > 0 {
        let first = run.first_time.unix_millis();
        // The unread decisions end where the readings begin: the grid's last point is the
        // first reading's.
        let (last, extra) = match kept.first() {
            Some(r) => (r.time.unix_millis(), 1),
            None => (run.time.unix_millis(), 0),
        };
        let n = unread.min(MAX_STEPS_PER_RUN);
        thinned = unread > MAX_STEPS_PER_RUN;
        let points = n + extra;
        if points == 1 || first >= last {
            // One decision, or several at one instant.
            let t = if kept.is_empty() {
                run.time
            } else {
                run.first_time
            };
            steps.extend((0..n).map(|_| (t, None)));
        } else {
            let span = i128::from(last - first);
            steps.extend((0..n).map(|k| {
                let offset = span * i128::from(k) / i128::from(points - 1);
                (
                    Time::from_unix_millis(first + i64::try_from(offset).unwrap_or(0)),
                    None,
                )
            }));
        }
    }
    steps.extend(kept.iter().map(|r| (r.time, Some(r))));
    (steps, thinned)
}

/// The run as its decision with `reading` saw it: each metric's current value (of the
/// recorded target type) is the reading's, and its usage ratio follows it. The proposals stay
/// the run's: every decision of a run proposed the same (`same_outcome`).
fn with_reading(run: &LoggedRun, reading: &LoggedReading) -> LoggedRun {
    let mut out = run.clone();
    let specs = metric_specs(&run.metrics);
    for outcome in &mut out.decision.metrics {
        let (Ok(p), Some(target), Some(Some(value))) = (
            &mut outcome.result,
            specs.get(outcome.index).and_then(MetricSpec::target),
            reading.values.get(outcome.index),
        ) else {
            continue;
        };
        if p.current(target.target_type) == Some(*value) {
            continue;
        }
        match target.target_type {
            MetricTargetType::Utilization => {
                p.current_average_utilization = i32::try_from(*value).ok();
            }
            MetricTargetType::AverageValue => p.current_average_value = Some(*value),
            MetricTargetType::Value => p.current_value = Some(*value),
        }
        #[allow(clippy::cast_precision_loss)]
        if let Some(t) = target.value_of_type().filter(|t| *t > 0) {
            p.usage_ratio = Some(*value as f64 / t as f64);
        }
    }
    out
}

/// What one replayed step starts from: the logged run (at the step's reading), the spec it is
/// replayed under, the simulated count and history, and whether the tolerance changed.
struct StepAt<'a> {
    run: &'a LoggedRun,
    spec: &'a StepSpec,
    current: i32,
    now: Time,
    history: &'a History,
    tolerance_changed: bool,
}

/// One logged decision replayed under `s` from `current`: the shortcuts through
/// [`hpa::evaluate`] itself, otherwise the metric proposals combined and normalized by
/// [`hpa::normalize_only`] (capped by a scaling group's `budget`, if given).
fn replay_step(
    at: &StepAt<'_>,
    note: &mut impl FnMut(String),
    budget: Option<&hpa::budget::Allocation>,
) -> Result<hpa::Evaluation, InvalidInput> {
    let &StepAt {
        run,
        spec: s,
        current,
        now,
        history,
        tolerance_changed,
    } = at;
    let min = s.defaulted.min_replicas;
    let max = s.defaulted.max_replicas;
    if (current == 0 && min != 0) || current > max || current < min {
        // The shortcuts run before any metric: the engine with no pods decides them exactly.
        let observation = Observation {
            current_replicas: current,
            ..Default::default()
        };
        return hpa::evaluate(&s.settings, &s.spec, &observation, history, now);
    }
    let outcomes: Vec<MetricOutcome> = s
        .defaulted
        .metrics
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let (outcome, why) = replay_metric(i, m, run, current, s.tolerances, tolerance_changed);
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
                after.recommendations = Some(vec![Recommendation {
                    replicas: current,
                    time: now,
                }]);
            }
            Ok(hpa::Evaluation {
                decision: Decision {
                    metrics: outcomes,
                    error: Some("no metric could be replayed".to_owned()),
                    ..Decision::keeping(current, DecisionPath::MetricsFailed)
                },
                history: after,
            })
        }
        Some(prenormalized) => {
            let mut e = hpa::normalize_only(
                &s.settings,
                &s.spec,
                current,
                prenormalized,
                history,
                now,
                hpa::Replayed {
                    budget,
                    outcomes: &outcomes,
                },
            )?;
            e.decision.metrics = outcomes;
            Ok(e)
        }
    }
}

/// `computeReplicasForMetrics`' combination (`pkg/controller/podautoscaler/horizontal.go`):
/// the largest proposal; `None` when every metric failed, or when some failed and the others
/// would scale down.
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

/// The recorded outcome of the metric with `m`'s identity, with its recorded spec and its
/// position in `run.decision.metrics`.
fn recorded<'a>(
    run: &'a LoggedRun,
    m: &MetricSpec,
) -> Option<(&'a MetricOutcome, &'a MetricSpec, usize)> {
    let index = metric_specs(&run.metrics)
        .iter()
        .position(|s| identity(s) == identity(m))?;
    let position = run.decision.metrics.iter().position(|o| o.index == index)?;
    let outcome = &run.decision.metrics[position];
    match run.metrics.get(index) {
        Some(s) => Some((outcome, s, position)),
        None => {
            // An empty recorded list is Kubernetes' default metric (cpu at 80%).
            static DEFAULT: std::sync::OnceLock<MetricSpec> = std::sync::OnceLock::new();
            Some((
                outcome,
                DEFAULT.get_or_init(hpa::defaults::default_metric),
                position,
            ))
        }
    }
}

/// One metric of a logged step under the simulated spec: the recorded outcome when the target
/// and tolerance are unchanged, otherwise the proposal recomputed from the recorded reading
/// (`GetResourceReplicas` / `GetMetricReplicas`' `ceil(ratio × ready)`, or `ceil(total /
/// target)` for an Object or External AverageValue, in
/// `pkg/controller/podautoscaler/replica_calculator.go`). The second value names why the
/// result is approximate, if it is.
fn replay_metric(
    index: usize,
    m: &MetricSpec,
    run: &LoggedRun,
    current: i32,
    tolerances: Tolerances,
    tolerance_changed: bool,
) -> (MetricOutcome, Option<String>) {
    let failed = |reason: ConditionReason, message: String| MetricOutcome {
        index,
        result: Err(hpa::MetricFailure { reason, message }),
        pod_groups: None,
    };
    let Some((outcome, spec, position)) = recorded(run, m) else {
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
    let (Some(new_target), Some(old_target)) = (m.target(), spec.target()) else {
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
            && p.replicas == run.decision.current_replicas
        {
            p.replicas = current;
        }
        return (reused, None);
    }
    let totals = run.pod_totals.get(position).copied().unwrap_or_default();
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

/// `ceil`, saturating into `i32` (NaN: 0).
fn ceil_i32(x: f64) -> i32 {
    let c = x.ceil();
    if c.is_nan() {
        0
    } else {
        // Saturating float → int conversion.
        c as i32
    }
}
