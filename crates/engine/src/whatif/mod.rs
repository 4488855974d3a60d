//! What-if replay: a target's past run again under another spec. Nothing is written; the
//! replay is a function of its inputs, like every decision of the engine.
//!
//! Two sources, one result ([`Replay`]: per-step stored and simulated decisions, and a
//! [`RunSummary`] of each curve):
//!
//! * a **trace** ([`replay_trace`]): the converted `RecommendRequest`s an adapter sent, oldest
//!   first. Every step goes through [`hpa::evaluate`], as `Recommend` does, with its own
//!   history carried from step to step and pruned as the server prunes it
//!   ([`hpa::prune::prune`]). The stored run is the trace under its own specs, the simulated
//!   run the trace under the override: both exact.
//! * a target's **decision log** ([`replay_log`]): each logged decision keeps the per-metric
//!   readings and proposals, so the metric proposals are taken as recorded when the target and
//!   tolerance are unchanged, or recomputed from the recorded utilization / value and ready pod
//!   count (`GetResourceReplicas`' `ceil(ratio × ready)` in kubernetes
//!   `pkg/controller/podautoscaler/replica_calculator.go`, exact without unready or missing
//!   pods), combined as `computeReplicasForMetrics` does, then normalized by
//!   [`hpa::normalize_only`] (`normalizeDesiredReplicas` /
//!   `normalizeDesiredReplicasWithBehaviors` in `pkg/controller/podautoscaler/horizontal.go`)
//!   against the simulated run's own history.
//!
//! The replay is closed-loop on the replica count ([`closed_loop`]: the simulated decisions are
//! taken as applied) and open-loop on the load: each step keeps its recorded metric readings
//! (each decision's own, [`LoggedReading`]);
//! the load a different replica count would have caused is not modelled (`docs/whatif.md`).
//!
//! The conversion from and to the wire (and the bound on how many steps a response carries)
//! is the server's (`api::simulate`).

mod log;
mod trace;

use std::fmt;

use crate::{
    hpa::{
        self, Decision, DecisionPath, MetricProposal, condition::ConditionType, spec::MetricSpec,
    },
    time::Time,
};

pub use self::log::{
    GroupHeld, GroupReplay, LogError, LoggedInputs, LoggedReading, LoggedRun, MAX_STEPS_PER_RUN,
    MemberLog, PodTotals, replay_group, replay_log,
};
pub use self::trace::{TraceError, TraceStep, replay_trace};

/// The `[from, to)` window of returned and summarized steps. Steps outside it still run, so
/// that stabilization windows and rate limits see them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// The first instant included; `None`: from the trace's (or log's) start.
    pub from: Option<Time>,
    /// The first instant excluded; `None`: to its end.
    pub to: Option<Time>,
}

impl Window {
    /// Whether a step at `t` is returned.
    pub fn contains(&self, t: Time) -> bool {
        self.from.is_none_or(|f| t >= f) && self.to.is_none_or(|e| t < e)
    }
}

/// The result of a replay: the steps inside the window, oldest first, and the summary of
/// both curves over those steps.
#[derive(Clone, Debug, PartialEq)]
pub struct Replay {
    /// One per replayed decision inside the window.
    pub steps: Vec<ReplayStep>,
    /// The curve that was decided (the log, or the trace under its own specs).
    pub stored: RunSummary,
    /// The curve under the simulated spec.
    pub simulated: RunSummary,
    /// How exact the simulated curve is.
    pub fidelity: Fidelity,
}

impl Replay {
    fn new(steps: Vec<ReplayStep>, fidelity: Fidelity) -> Self {
        // What the metrics asked for: the largest proposal of the simulated spec's metrics
        // (for the stored curve, the recorded proposals of the same metrics).
        let asked = |s: &ReplayStep, stored: bool| {
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
        let stored = summarize(steps.iter().map(|s| CurvePoint {
            time: s.time,
            dry_run: s.dry_run,
            start: s.current_replicas,
            count: s.stored_desired_replicas,
            asked: asked(s, true),
        }));
        let simulated = summarize(steps.iter().map(|s| CurvePoint {
            time: s.time,
            dry_run: s.dry_run,
            start: s.simulated_current_replicas,
            count: s.simulated_desired_replicas,
            asked: asked(s, false),
        }));
        Replay {
            steps,
            stored,
            simulated,
            fidelity,
        }
    }
}

impl Replay {
    /// Both runs measured as if each scale-up served `delay` after its decision (a
    /// scale-down takes effect at once, the replicas still starting first): the replicas
    /// serving at a step are the smallest count decided over the `delay` before it (see
    /// [`serving`]), and the load above them is under-provisioned.
    #[must_use]
    pub fn with_startup_delay(mut self, delay: std::time::Duration) -> Self {
        let delay_ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
        let (stored, simulated) = {
            let points = |stored: bool| -> Vec<(Time, i32, i32, Option<f64>)> {
                self.steps
                    .iter()
                    .filter(|s| !s.dry_run)
                    .map(|s| {
                        if stored {
                            (
                                s.time,
                                s.current_replicas,
                                s.stored_desired_replicas,
                                s.load,
                            )
                        } else {
                            (
                                s.time,
                                s.simulated_current_replicas,
                                s.simulated_desired_replicas,
                                s.load,
                            )
                        }
                    })
                    .collect()
            };
            (
                shortfall(&points(true), delay_ms),
                shortfall(&points(false), delay_ms),
            )
        };
        (
            self.stored.under_provisioned_replica_minutes,
            self.stored.share_under_provisioned,
        ) = (Some(stored.0), Some(stored.1));
        (
            self.simulated.under_provisioned_replica_minutes,
            self.simulated.share_under_provisioned,
        ) = (Some(simulated.0), Some(simulated.1));
        self
    }
}

/// The replicas serving at step `i` of a curve of `(time, start, count)` points when a
/// scale-up serves `delay_ms` after its decision and a scale-down removes the newest replicas
/// first, at once: the smallest count in force over `[t − delay, t]` (the count before the
/// first step is its start, in force since ever). A replica created at `c` still runs at `t`
/// exactly when the count never fell below its rank in between; it serves when `c ≤ t −
/// delay`. The orchestrator's side of `benches/predictive.rs` keeps the same books.
fn serving(points: &[(Time, i32, i32, Option<f64>)], i: usize, delay_ms: i64) -> i32 {
    let since = points[i].0.unix_millis().saturating_sub(delay_ms);
    let mut ready = points[i].2;
    // Step j's count is in force on [t_j, t_(j+1)).
    for j in (0..i).rev() {
        if points[j + 1].0.unix_millis() <= since {
            return ready;
        }
        ready = ready.min(points[j].2);
    }
    match points.first() {
        Some(first) if first.0.unix_millis() > since => ready.min(first.1),
        _ => ready,
    }
}

/// Under-provisioned replica-minutes and the share of the time with any, over the curve's
/// intervals (each step's state held to the next step; the last counts for nothing, as in
/// [`RunSummary::replica_hours`]).
fn shortfall(points: &[(Time, i32, i32, Option<f64>)], delay_ms: i64) -> (f64, f64) {
    let (mut short_ms, mut total_ms, mut replica_minutes) = (0.0, 0.0, 0.0);
    for i in 0..points.len().saturating_sub(1) {
        #[allow(clippy::cast_precision_loss)]
        let dt = (points[i + 1].0.unix_millis() - points[i].0.unix_millis()).max(0) as f64;
        total_ms += dt;
        let Some(load) = points[i].3 else { continue };
        let short = load - f64::from(serving(points, i, delay_ms));
        if short > 1e-9 {
            replica_minutes += short * dt / 60_000.0;
            short_ms += dt;
        }
    }
    let share = if total_ms > 0.0 {
        short_ms / total_ms
    } else {
        0.0
    };
    (replica_minutes, share)
}

/// One replayed decision: what was decided and what the simulated spec decides.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayStep {
    /// The evaluation instant.
    pub time: Time,
    /// The request was a dry run: decided, but it changed no history.
    pub dry_run: bool,
    /// The count the trace or log recorded.
    pub current_replicas: i32,
    /// The count the simulated run started this step from ([`closed_loop`]).
    pub simulated_current_replicas: i32,
    /// What was decided (the logged decision, or the trace step under its own spec).
    pub stored_desired_replicas: i32,
    /// What the simulated spec decides.
    pub simulated_desired_replicas: i32,
    /// The rule that shaped the stored count ([`limited_by`]).
    pub stored_limited_by: &'static str,
    /// The rule that shaped the simulated count ([`limited_by`]).
    pub simulated_limited_by: &'static str,
    /// One per metric of the simulated spec, in its order.
    pub metrics: Vec<StepMetric>,
    /// The simulated decision, whole (its conditions and outcomes explain the count).
    pub simulated: Decision,
    /// The simulated spec's metrics, which `simulated.metrics` index (an empty spec is
    /// Kubernetes' default metric, cpu at 80 %).
    pub simulated_metrics: Vec<MetricSpec>,
    /// The load the stored decision saw, in replicas at its targets: its largest metric's
    /// usage ratio times the count the HPA applied it to (the proposal before rounding).
    /// Both runs are measured against it (the same service, the same capacity per replica).
    pub load: Option<f64>,
}

/// One metric of the simulated spec at one step, next to the recorded metric of the same
/// source type and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepMetric {
    /// The source type.
    pub source: MetricSource,
    /// The metric or resource name (for an unknown source type, the type as given).
    pub name: String,
    /// The container (ContainerResource), empty otherwise.
    pub container: String,
    /// The reading in the unit of the simulated target: percent for Utilization, milli-units
    /// per pod for AverageValue, milli-units for Value.
    pub current: Option<i64>,
    /// The simulated target in the same unit.
    pub target: Option<i64>,
    /// The recorded proposal of the metric with the same identity.
    pub stored_proposal: Option<i32>,
    /// The simulated proposal.
    pub simulated_proposal: Option<i32>,
}

/// The source type of a metric (`MetricSourceType`), what a simulated metric is matched with
/// a recorded one by, with its name and container.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetricSource {
    /// A type Kubernetes does not know ([`MetricSpec::Unknown`]).
    Unknown,
    /// [`MetricSpec::Resource`].
    Resource,
    /// [`MetricSpec::ContainerResource`].
    ContainerResource,
    /// [`MetricSpec::Pods`].
    Pods,
    /// [`MetricSpec::Object`].
    Object,
    /// [`MetricSpec::External`].
    External,
}

/// One replica curve: the count after each step, held until the next step. Dry-run steps are
/// left out: they changed nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RunSummary {
    /// Sum of replicas × time to the next step, in hours (the last step counts for nothing).
    pub replica_hours: f64,
    /// Steps whose count differs from the previous step's (the first compares with its
    /// current count).
    pub scale_events: i32,
    /// Of those, the increases.
    pub scale_ups: i32,
    /// Of those, the decreases.
    pub scale_downs: i32,
    /// Seconds during which the count was below what the metrics asked for (the largest
    /// proposal, before stabilization and rate limits): load per pod above target.
    pub seconds_above_target: f64,
    /// The largest change between consecutive counts.
    pub largest_step: i32,
    /// The largest count.
    pub max_replicas: i32,
    /// The smallest count.
    pub min_replicas: i32,
    /// With a start-up delay ([`Replay::with_startup_delay`]): the sum over time of the load
    /// (in replicas at the recorded target) above the replicas already serving, in
    /// replica-minutes; `None` without one.
    pub under_provisioned_replica_minutes: Option<f64>,
    /// With a start-up delay: the share of the time with any load above the serving replicas.
    pub share_under_provisioned: Option<f64>,
}

/// How exact a replay is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fidelity {
    /// A trace: the same inputs through the same engine.
    Exact,
    /// A decision log: exact when the list is empty, otherwise approximate for the reasons
    /// listed (at most eight, each once).
    Records(Vec<String>),
}

impl fmt::Display for Fidelity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fidelity::Exact => f.write_str("exact"),
            // Only an exact replay's identity is promised: the exact words differ.
            Fidelity::Records(reasons) if reasons.is_empty() => f.write_str(
                "exact: every metric proposal taken or recomputed from complete records",
            ),
            Fidelity::Records(reasons) => write!(f, "approximate: {}", reasons.join("; ")),
        }
    }
}

/// The count a simulated step starts from: the recorded count moved by the difference between
/// the runs' last applied counts (the simulated decisions are applied; outside changes carry
/// over). Equal to the recorded count while the runs agree, so a replay under the recorded
/// spec is exact.
pub fn closed_loop(recorded: i32, baseline_applied: i32, simulated_applied: i32) -> i32 {
    let moved = i64::from(recorded) + i64::from(simulated_applied) - i64::from(baseline_applied);
    i32::try_from(moved.max(0)).unwrap_or(i32::MAX)
}

/// Which rule shaped a decision's count: a shortcut path (`AboveMaxReplicas`, ...,
/// `MetricsFailed`), the reason of a true ScalingLimited condition (`ScaleUpLimit`,
/// `ScaleDownLimit`, `TooManyReplicas`, `TooFewReplicas`), `ScaleUpStabilized` /
/// `ScaleDownStabilized` when stabilization moved the proposal, or empty when the metrics'
/// proposal went through unchanged.
pub fn limited_by(d: &Decision) -> &'static str {
    match d.path {
        DecisionPath::ScalingDisabled
        | DecisionPath::AboveMaxReplicas
        | DecisionPath::BelowMinReplicas
        | DecisionPath::MetricsFailed
        | DecisionPath::Paused
        | DecisionPath::Activation
        | DecisionPath::PausedAtZero => return d.path.as_str(),
        DecisionPath::Legacy | DecisionPath::Behavior => {}
    }
    if let Some(c) = d
        .conditions
        .iter()
        .find(|c| c.condition_type == ConditionType::ScalingLimited && c.status)
    {
        return c.reason.as_str();
    }
    match (d.prenormalized_replicas, d.stabilized_replicas) {
        (Some(p), Some(s)) if s > p => "ScaleDownStabilized",
        (Some(p), Some(s)) if s < p => "ScaleUpStabilized",
        _ => "",
    }
}

/// Identity of a metric for matching a simulated metric with a recorded one.
fn identity(m: &MetricSpec) -> (MetricSource, &str, &str) {
    match m {
        MetricSpec::Resource { name, .. } => (MetricSource::Resource, name, ""),
        MetricSpec::ContainerResource {
            name, container, ..
        } => (MetricSource::ContainerResource, name, container),
        MetricSpec::Pods { name, .. } => (MetricSource::Pods, name, ""),
        MetricSpec::Object { name, .. } => (MetricSource::Object, name, ""),
        MetricSpec::External { name, .. } => (MetricSource::External, name, ""),
        MetricSpec::Unknown { type_name } => (MetricSource::Unknown, type_name, ""),
    }
}

/// The reading and target of a metric in the target's unit.
fn reading(spec: &MetricSpec, p: Option<&MetricProposal>) -> (Option<i64>, Option<i64>) {
    let Some(target) = spec.target() else {
        return (None, None);
    };
    (
        p.and_then(|p| p.current(target.target_type)),
        target.value_of_type(),
    )
}

use hpa::defaults::metrics_or_default as metric_specs;

/// The stored side of a step: what was decided, under which metrics.
struct Stored<'a> {
    /// The count the trace or log recorded.
    current: i32,
    decision: &'a Decision,
    metrics: &'a [MetricSpec],
}

/// The simulated side of a step.
struct Simulated<'a> {
    /// The count the simulated run started from.
    current: i32,
    decision: Decision,
    metrics: &'a [MetricSpec],
}

/// One step of the result: both decisions, and the simulated metrics next to the recorded
/// ones of the same identity.
fn step(time: Time, dry_run: bool, stored: Stored<'_>, simulated: Simulated<'_>) -> ReplayStep {
    let sim_specs = metric_specs(simulated.metrics).into_owned();
    let stored_specs = metric_specs(stored.metrics);
    let metrics = sim_specs
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let outcome = simulated.decision.metrics.iter().find(|o| o.index == i);
            let proposal = outcome.and_then(|o| o.result.as_ref().ok());
            let (current, target) = reading(spec, proposal);
            let stored_proposal = stored_specs
                .iter()
                .position(|s| identity(s) == identity(spec))
                .and_then(|j| stored.decision.metrics.iter().find(|o| o.index == j))
                .and_then(|o| o.result.as_ref().ok())
                .map(|p| p.replicas);
            let (source, name, container) = identity(spec);
            StepMetric {
                source,
                name: name.to_owned(),
                container: container.to_owned(),
                current,
                target,
                stored_proposal,
                simulated_proposal: proposal.map(|p| p.replicas),
            }
        })
        .collect();
    ReplayStep {
        time,
        dry_run,
        current_replicas: stored.current,
        simulated_current_replicas: simulated.current,
        stored_desired_replicas: stored.decision.desired_replicas,
        simulated_desired_replicas: simulated.decision.desired_replicas,
        stored_limited_by: limited_by(stored.decision),
        simulated_limited_by: limited_by(&simulated.decision),
        metrics,
        load: stored_load(&stored),
        simulated: simulated.decision,
        simulated_metrics: sim_specs,
    }
}

/// The load of the stored decision in replicas at its targets (its largest metric's), as
/// predictive scale-up measures it (`hpa::predictive::load_of`).
fn stored_load(stored: &Stored<'_>) -> Option<f64> {
    let specs = metric_specs(stored.metrics);
    let observation = crate::hpa::observation::Observation {
        current_replicas: stored.current,
        status_replicas: Some(stored.current),
        ..Default::default()
    };
    stored
        .decision
        .metrics
        .iter()
        .filter_map(|o| crate::hpa::predictive::load_of(specs.get(o.index)?, o, &observation))
        .max_by(f64::total_cmp)
}

/// One step of one curve, as [`summarize`] reads it.
struct CurvePoint {
    time: Time,
    dry_run: bool,
    /// The count the step started from.
    start: i32,
    /// The count it decided.
    count: i32,
    /// The largest metric proposal.
    asked: Option<i32>,
}

/// The summary of one replica curve. Dry-run steps are skipped: they changed nothing.
fn summarize(points: impl Iterator<Item = CurvePoint>) -> RunSummary {
    let points: Vec<CurvePoint> = points.filter(|p| !p.dry_run).collect();
    let mut out = RunSummary::default();
    let mut replica_ms: f64 = 0.0;
    let mut above_ms: f64 = 0.0;
    let mut previous: Option<i32> = None;
    for (i, p) in points.iter().enumerate() {
        let before = previous.unwrap_or(p.start);
        let change = p.count - before;
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
            p.count
        } else {
            out.max_replicas.max(p.count)
        };
        out.min_replicas = if i == 0 {
            p.count
        } else {
            out.min_replicas.min(p.count)
        };
        if let Some(next) = points.get(i + 1) {
            #[allow(clippy::cast_precision_loss)]
            let dt = (next.time.unix_millis() - p.time.unix_millis()).max(0) as f64;
            replica_ms += f64::from(p.count) * dt;
            if p.asked.is_some_and(|a| a > p.count) {
                above_ms += dt;
            }
        }
        previous = Some(p.count);
    }
    out.replica_hours = replica_ms / 3_600_000.0;
    out.seconds_above_target = above_ms / 1000.0;
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The orchestrator's books, kept step by step (as `benches/predictive.rs` keeps them): a
    /// scale-up starts replicas that serve `delay_steps` steps later, a scale-down removes
    /// the newest starting replicas first, then serving ones.
    fn pool(start: i32, counts: &[i32], delay_steps: usize) -> Vec<i32> {
        let (mut ready, mut current) = (start, start);
        let mut pending: Vec<(usize, i32)> = Vec::new();
        let mut out = Vec::new();
        for (k, &count) in counts.iter().enumerate() {
            pending.retain(|&(at, n)| {
                if at <= k {
                    ready += n;
                    false
                } else {
                    true
                }
            });
            if count > current {
                if delay_steps == 0 {
                    ready += count - current;
                } else {
                    pending.push((k + delay_steps, count - current));
                }
            } else if count < current {
                let mut remove = current - count;
                while remove > 0 {
                    let Some(last) = pending.last_mut() else {
                        break;
                    };
                    let take = remove.min(last.1);
                    last.1 -= take;
                    remove -= take;
                    if last.1 == 0 {
                        pending.pop();
                    }
                }
                ready -= remove;
            }
            current = count;
            out.push(ready);
        }
        out
    }

    proptest! {
        #[test]
        fn serving_is_the_orchestrators_ready_count(
            start in 0..20i32,
            counts in proptest::collection::vec(0..20i32, 1..60),
            delay_steps in 0..8usize,
            period in prop_oneof![Just(15i64), Just(60)],
        ) {
            let points: Vec<(Time, i32, i32, Option<f64>)> = counts
                .iter()
                .enumerate()
                .map(|(k, &c)| (Time::from_unix_secs(1_000_000 + k as i64 * period), start, c, None))
                .collect();
            let expected = pool(start, &counts, delay_steps);
            let delay_ms = delay_steps as i64 * period * 1000;
            for (i, want) in expected.iter().enumerate() {
                prop_assert_eq!(serving(&points, i, delay_ms), *want, "step {}", i);
            }
        }
    }

    #[test]
    fn shortfall_integrates_the_load_above_the_serving_replicas() {
        // 2 serving; at t = 0 the load needs 4 and the count goes to 4; they serve 120 s
        // later. Steps every 60 s: 2 replica-minutes short at 0 and at 60, none after.
        let t = |s: i64| Time::from_unix_secs(1_000_000 + s);
        let points = [
            (t(0), 2, 4, Some(4.0)),
            (t(60), 4, 4, Some(4.0)),
            (t(120), 4, 4, Some(4.0)),
            (t(180), 4, 4, Some(4.0)),
        ];
        let (minutes, share) = shortfall(&points, 120_000);
        assert!((minutes - 4.0).abs() < 1e-9, "{minutes}");
        assert!((share - 2.0 / 3.0).abs() < 1e-9, "{share}");
        // Without a delay nothing is short.
        assert_eq!(shortfall(&points, 0), (0.0, 0.0));
    }
}
