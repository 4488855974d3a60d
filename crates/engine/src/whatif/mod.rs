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
        simulated: simulated.decision,
        simulated_metrics: sim_specs,
    }
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
