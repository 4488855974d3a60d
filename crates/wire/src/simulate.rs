//! What-if replay (`Simulate`): a target's past run again under another spec. Never writes.
//!
//! The replay itself (history carried and pruned from step to step, metric proposals
//! recomputed from recorded readings, normalization, run summaries) is the engine's
//! ([`engine::whatif`](crate::engine::whatif)); this module is its wire side:
//!
//! * a **trace** (the `RecommendRequest`s an adapter sent, oldest first): every request goes
//!   through the same conversion ([`convert::recommend_request`]) as `Recommend`, then to
//!   [`whatif::replay_trace`], which evaluates it with the same engine
//!   ([`hpa::evaluate`](crate::engine::hpa::evaluate)). Violations are named `trace[i].…`.
//! * the **stored decision log** of a target: its runs, as the engine's
//!   [`whatif::LoggedRun`]s the server loaded from its store, replayed by
//!   [`whatif::replay_log`].
//!
//! An override spec is validated on its own first, so that its violations are named `spec.*`.

use std::time::Duration;

use crate::{
    convert::{self, Context},
    engine::{
        error::InvalidInput,
        hpa::settings::Settings,
        hpa::spec::HorizontalSpec,
        time::Time,
        whatif::{self, LogError, Replay, ReplayStep, TraceError, TraceStep},
    },
    limits::Limits,
    pb::v1 as pb,
    status::ApiError,
};

/// The `[from, to)` window of returned steps.
pub use crate::engine::whatif::Window;

/// What a replay needs from the server configuration.
#[derive(Clone, Debug)]
pub struct SimulateOptions {
    /// Server defaults of the controller flags (the trace's `spec.settings` override them).
    pub defaults: Settings,
    /// The request limits a trace's requests are held to.
    pub limits: Limits,
    /// Pruning horizon, as `Recommend` prunes (see `engine::hpa::prune`).
    pub history_retention: Duration,
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

/// Reads `from` / `to` of a request; `from` must not be after `to`.
fn window(req: &pb::SimulateRequest) -> Result<Window, ApiError> {
    let from = req.from.as_ref().map(|t| time("from", t)).transpose()?;
    let to = req.to.as_ref().map(|t| time("to", t)).transpose()?;
    if let (Some(f), Some(t)) = (from, to)
        && f > t
    {
        return Err(ApiError::field("to", "must not be before from"));
    }
    Ok(Window { from, to })
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
/// (`load_runs` is only called for a `target_key`).
pub fn simulate(
    req: &pb::SimulateRequest,
    options: &SimulateOptions,
    load_runs: impl FnOnce(&str) -> Result<Vec<whatif::LoggedRun>, ApiError>,
) -> Result<pb::SimulateResponse, ApiError> {
    let window = window(req)?;
    let delay = startup_delay(req)?;
    match (req.target_key.is_empty(), req.trace.is_empty()) {
        (true, true) => Err(ApiError::field(
            "target_key",
            "set target_key (replay stored history) or trace (replay requests)",
        )),
        (false, false) => Err(ApiError::field(
            "trace",
            "give either target_key or trace, not both",
        )),
        (true, false) => replay_trace(&req.trace, req.spec.as_ref(), window, delay, options),
        (false, true) => {
            convert::target_key(&req.target_key, &options.limits)?;
            let decisions = load_runs(&req.target_key)?;
            if decisions.is_empty() {
                return Err(ApiError::TargetNotFound(req.target_key.clone()));
            }
            replay_decisions(decisions, req.spec.as_ref(), window, delay, options)
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

/// Converts trace step `i` (under `spec` when given, else its own) as `Recommend` would.
fn trace_step(
    i: usize,
    req: &pb::RecommendRequest,
    spec: Option<&pb::HorizontalSpec>,
    options: &SimulateOptions,
) -> Result<TraceStep, ApiError> {
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
    let input = convert::recommend_request(req, &context(options, Time::from_unix_millis(0)))
        .map_err(|e| in_trace(i, e))?;
    Ok(TraceStep {
        now: input.now,
        dry_run: input.dry_run,
        settings: input.settings.apply(&options.defaults),
        spec: input.spec,
        observation: input.observation,
    })
}

/// The steps of a trace, converted lazily as the engine consumes them: the first violation
/// reported is the first one met in the order the steps run.
fn trace_steps<'a>(
    trace: &'a [pb::RecommendRequest],
    spec: Option<&'a pb::HorizontalSpec>,
    options: &'a SimulateOptions,
) -> impl Iterator<Item = Result<TraceStep, ApiError>> + 'a {
    trace
        .iter()
        .enumerate()
        .map(move |(i, req)| trace_step(i, req, spec, options))
}

/// Replays a trace: the stored run is the trace under its own specs, the simulated run under
/// `spec` (the same run when absent). Exact.
pub fn replay_trace(
    trace: &[pb::RecommendRequest],
    spec: Option<&pb::HorizontalSpec>,
    window: Window,
    delay: Option<Duration>,
    options: &SimulateOptions,
) -> Result<pb::SimulateResponse, ApiError> {
    if let Some(spec) = spec {
        override_spec(spec, options)?;
    }
    let replay = whatif::replay_trace(
        trace_steps(trace, None, options),
        spec.map(|s| trace_steps(trace, Some(s), options)),
        window,
        options.history_retention,
    )
    .map_err(|e| match e {
        TraceError::Input(e) => e,
        TraceError::Invalid { step, error } => in_trace(step, convert::engine_invalid(error)),
    })?;
    Ok(response(measured(replay, delay)))
}

/// At most this many steps are returned (the summary covers them all); see
/// `SimulateResponse.omitted_steps`.
pub(crate) const MAX_STEPS: usize = 5000;

/// Replays a stored decision log (runs expanded) under `spec`, or under each decision's
/// recorded spec when `spec` is absent (see `engine::whatif` for what is exact).
pub fn replay_decisions(
    runs: Vec<whatif::LoggedRun>,
    pb_spec: Option<&pb::HorizontalSpec>,
    window: Window,
    delay: Option<Duration>,
    options: &SimulateOptions,
) -> Result<pb::SimulateResponse, ApiError> {
    let fixed = pb_spec.map(|s| override_spec(s, options)).transpose()?;
    let replay = whatif::replay_log(&runs, fixed, window, options.history_retention).map_err(
        |e| match e {
            LogError::SpecRequired => ApiError::field(
                "spec",
                "must be set: the stored decisions predate the recorded spec (format 1)",
            ),
            LogError::Invalid(e) => convert::engine_invalid(e),
        },
    )?;
    Ok(response(measured(replay, delay)))
}

/// The longest start-up delay a replay measures with.
pub const MAX_STARTUP_DELAY: Duration = Duration::from_secs(3600);

/// `startup_delay`, 0 to [`MAX_STARTUP_DELAY`].
fn startup_delay(req: &pb::SimulateRequest) -> Result<Option<Duration>, ApiError> {
    let Some(d) = &req.startup_delay else {
        return Ok(None);
    };
    if d.seconds < 0 || d.nanos < 0 || d.nanos >= 1_000_000_000 {
        return Err(ApiError::field(
            "startup_delay",
            "must not be negative (seconds and nanos 0 to 999999999)",
        ));
    }
    let delay = Duration::new(d.seconds.unsigned_abs(), d.nanos.unsigned_abs());
    if delay > MAX_STARTUP_DELAY {
        return Err(ApiError::field("startup_delay", "must be at most 1 hour"));
    }
    Ok(Some(delay))
}

/// The replay with both runs' shortfall measured, when a start-up delay was given.
fn measured(replay: Replay, delay: Option<Duration>) -> Replay {
    match delay {
        Some(d) => replay.with_startup_delay(d),
        None => replay,
    }
}

fn source_type(source: whatif::MetricSource) -> pb::MetricSourceType {
    use pb::MetricSourceType as S;
    match source {
        whatif::MetricSource::Unknown => S::Unspecified,
        whatif::MetricSource::Resource => S::Resource,
        whatif::MetricSource::ContainerResource => S::ContainerResource,
        whatif::MetricSource::Pods => S::Pods,
        whatif::MetricSource::Object => S::Object,
        whatif::MetricSource::External => S::External,
    }
}

fn step(s: ReplayStep) -> pb::SimulationStep {
    let metrics = s
        .metrics
        .into_iter()
        .map(|m| pb::SimulatedMetric {
            r#type: source_type(m.source) as i32,
            name: m.name,
            container: m.container,
            current: m.current,
            target: m.target,
            stored_proposal: m.stored_proposal,
            simulated_proposal: m.simulated_proposal,
        })
        .collect();
    let explanation =
        convert::recommend_response(&s.simulated, &s.simulated_metrics, s.time, false).explanation;
    pb::SimulationStep {
        evaluation_time: Some(convert::to_timestamp(s.time)),
        current_replicas: s.current_replicas,
        simulated_current_replicas: s.simulated_current_replicas,
        stored_desired_replicas: s.stored_desired_replicas,
        simulated_desired_replicas: s.simulated_desired_replicas,
        stored_limited_by: s.stored_limited_by.to_owned(),
        simulated_limited_by: s.simulated_limited_by.to_owned(),
        metrics,
        dry_run: s.dry_run,
        simulated_explanation: explanation,
    }
}

fn summary(s: &whatif::RunSummary) -> pb::RunSummary {
    pb::RunSummary {
        replica_hours: s.replica_hours,
        scale_events: s.scale_events,
        scale_ups: s.scale_ups,
        scale_downs: s.scale_downs,
        seconds_above_target: s.seconds_above_target,
        largest_step: s.largest_step,
        max_replicas: s.max_replicas,
        min_replicas: s.min_replicas,
        under_provisioned_replica_minutes: s.under_provisioned_replica_minutes,
        share_under_provisioned: s.share_under_provisioned,
    }
}

/// A group's members as the engine replays them: each one's key, units per replica and log.
pub type MemberDecisions = Vec<(String, i64, Vec<whatif::LoggedRun>)>;

/// Checks a group replay's request (the caller loads the group and its members' logs).
pub fn check_group_request(req: &pb::SimulateRequest) -> Result<(), ApiError> {
    convert::fleet::name("group", &req.group)?;
    if !req.target_key.is_empty() || !req.trace.is_empty() || req.spec.is_some() {
        return Err(ApiError::field(
            "group",
            "a group replay runs each member under its recorded spec: give no target_key, trace or spec",
        ));
    }
    if let Some(c) = req.group_capacity
        && !(1..=crate::engine::hpa::budget::MAX_CAPACITY).contains(&c)
    {
        return Err(ApiError::field(
            "group_capacity",
            format!(
                "must be 1 to {} units",
                crate::engine::hpa::budget::MAX_CAPACITY
            ),
        ));
    }
    window(req)?;
    startup_delay(req).map(|_| ())
}

/// Replays a group's members together under `capacity` (see `engine::whatif::replay_group`).
pub fn replay_group(
    req: &pb::SimulateRequest,
    capacity: i64,
    capacity_schedules: &[crate::engine::hpa::schedule::Schedule],
    members: MemberDecisions,
    options: &SimulateOptions,
) -> Result<pb::SimulateResponse, ApiError> {
    let window = window(req)?;
    let delay = startup_delay(req)?;
    let logs: Vec<whatif::MemberLog> = members
        .into_iter()
        .map(|(key, units, runs)| whatif::MemberLog { key, units, runs })
        .collect();
    let replay = whatif::replay_group(
        &req.group,
        capacity,
        capacity_schedules,
        &logs,
        window,
        options.history_retention,
    )
    .map_err(|e| match e {
        LogError::SpecRequired => ApiError::FailedPrecondition(
            "a member's stored decisions predate the recorded spec (format 1): replay it alone with a spec".to_owned(),
        ),
        LogError::Invalid(e) => convert::engine_invalid(e),
    })?;
    // The notes are the group's: every member's replay carries them all.
    let fidelity = replay
        .members
        .first()
        .map_or_else(String::new, |(_, r)| r.fidelity.to_string());
    let per_member = MAX_STEPS / replay.members.len().max(1);
    let mut omitted = 0usize;
    let members = replay
        .members
        .into_iter()
        .map(|(key, r)| {
            let r = measured(r, delay);
            omitted += r.steps.len().saturating_sub(per_member);
            pb::MemberSimulation {
                target_key: key,
                summary: Some(pb::SimulationSummary {
                    stored: Some(summary(&r.stored)),
                    simulated: Some(summary(&r.simulated)),
                }),
                steps: r.steps.into_iter().take(per_member).map(step).collect(),
            }
        })
        .collect();
    omitted += replay.held.len().saturating_sub(MAX_STEPS);
    Ok(pb::SimulateResponse {
        fidelity,
        omitted_steps: i32::try_from(omitted).unwrap_or(i32::MAX),
        members,
        group_held: replay
            .held
            .into_iter()
            .take(MAX_STEPS)
            .map(|h| pb::GroupHeldPoint {
                evaluation_time: Some(convert::to_timestamp(h.time)),
                stored: h.stored,
                simulated: h.simulated,
            })
            .collect(),
        ..Default::default()
    })
}

/// The response: the first [`MAX_STEPS`] steps, the summaries of all of them.
fn response(replay: Replay) -> pb::SimulateResponse {
    let omitted = replay.steps.len().saturating_sub(MAX_STEPS);
    pb::SimulateResponse {
        summary: Some(pb::SimulationSummary {
            stored: Some(summary(&replay.stored)),
            simulated: Some(summary(&replay.simulated)),
        }),
        fidelity: replay.fidelity.to_string(),
        omitted_steps: i32::try_from(omitted).unwrap_or(i32::MAX),
        steps: replay.steps.into_iter().take(MAX_STEPS).map(step).collect(),
        members: Vec::new(),
        group_held: Vec::new(),
    }
}
