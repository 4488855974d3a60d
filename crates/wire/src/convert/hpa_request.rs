//! `Recommend` (and `Simulate`'s steps) proto → engine: decoding, with the engine's one HPA
//! validator ([`validate`]) run on each engine value as it is built; the engine's paths get
//! the wire prefix (`spec.`) and names (`_milli`).
//!
//! The rules are Kubernetes' API validation (`ValidateHorizontalPodAutoscaler` and
//! `validateMetricTarget` in `pkg/apis/autoscaling/validation`, in `engine::hpa::validate`)
//! plus what the wire format adds here: enum values, required messages, timestamp and
//! duration ranges, duplicate names.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use super::{
    migration,
    wire::{FieldPath, Violations, check_target_key, duration, timestamp},
};
use crate::{
    engine::{
        hpa::observation::{Container, MetricSample, Observation, Pod, PodPhase},
        hpa::predictive::{self, PredictiveMode, PredictiveSpec},
        hpa::schedule::{self, Schedule},
        hpa::settings::Settings,
        hpa::spec::{
            Behavior, HorizontalSpec, MetricSpec, MetricTarget, MetricTargetType, ScalingPolicy,
            ScalingPolicyType, ScalingRules, SelectPolicy,
        },
        hpa::validate::{self, Rules},
        time::Time,
    },
    limits::Limits,
    pb::v1 as pb,
    status::ApiError,
};

/// The sample window Kubernetes' metrics server reports when none is given.
const DEFAULT_SAMPLE_WINDOW: Duration = Duration::from_secs(60);

/// A validated Recommend request.
#[derive(Clone, Debug, PartialEq)]
pub struct RecommendInput {
    /// The store key the history is read and written under (checked by `wire::target_key`).
    pub target_key: String,
    /// The HPA spec as sent; the engine defaults it (`engine::hpa::defaults`).
    pub spec: HorizontalSpec,
    /// Per-target overrides of the server's controller settings.
    pub settings: SettingsOverride,
    /// The pods and samples the decision reads (`replicaCalculator`'s inputs).
    pub observation: Observation,
    /// Decide without storing the new history (a what-if; nothing acknowledged changes).
    pub dry_run: bool,
    /// Shadow mode: recorded as if applied, the caller scales nothing.
    pub shadow: bool,
    /// The evaluation instant: the request's (trusted) or the server's.
    pub now: Time,
}

/// `spec.settings`: each present field replaces the server default.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SettingsOverride {
    /// `--horizontal-pod-autoscaler-tolerance`.
    pub tolerance: Option<f64>,
    /// `--horizontal-pod-autoscaler-cpu-initialization-period`.
    pub cpu_initialization_period: Option<Duration>,
    /// `--horizontal-pod-autoscaler-initial-readiness-delay`.
    pub initial_readiness_delay: Option<Duration>,
    /// `--horizontal-pod-autoscaler-downscale-stabilization`.
    pub downscale_stabilization: Option<Duration>,
    /// `scaleUpLimitFactor` of the legacy (behavior-less) normalization.
    pub scale_up_limit_factor: Option<f64>,
    /// `scaleUpLimitMinimum` of the legacy (behavior-less) normalization.
    pub scale_up_limit_minimum: Option<f64>,
    /// `spec.scale_to_zero`: the `HPAScaleToZero` gate for this target.
    pub scale_to_zero: Option<bool>,
}

impl SettingsOverride {
    /// The server defaults with this target's overrides applied.
    pub fn apply(&self, defaults: &Settings) -> Settings {
        Settings {
            tolerance: self.tolerance.unwrap_or(defaults.tolerance),
            cpu_initialization_period: self
                .cpu_initialization_period
                .unwrap_or(defaults.cpu_initialization_period),
            initial_readiness_delay: self
                .initial_readiness_delay
                .unwrap_or(defaults.initial_readiness_delay),
            downscale_stabilization: self
                .downscale_stabilization
                .unwrap_or(defaults.downscale_stabilization),
            scale_up_limit_factor: self
                .scale_up_limit_factor
                .unwrap_or(defaults.scale_up_limit_factor),
            scale_up_limit_minimum: self
                .scale_up_limit_minimum
                .unwrap_or(defaults.scale_up_limit_minimum),
            scale_to_zero: self.scale_to_zero.unwrap_or(defaults.scale_to_zero),
        }
    }
}

/// What conversion needs besides the request.
#[derive(Clone, Debug)]
pub struct Context<'a> {
    /// The wire limits (metrics, pods, sizes) a request is checked against.
    pub limits: &'a Limits,
    /// Accept `evaluation_time` from the request.
    pub trust_request_time: bool,
    /// The server clock, read once by the handler.
    pub server_now: Time,
    /// Longest legacy downscale window accepted (the pruning horizon, see `engine::hpa::prune`).
    pub history_retention: Duration,
    /// The server's `HPAScaleToZero` gate, which `spec.scale_to_zero` overrides: the
    /// admitted `min_replicas` depends on it.
    pub scale_to_zero: bool,
}

/// Converts and validates a Recommend request.
///
/// The request is taken by value and its strings, maps and lists are moved into the engine's
/// values, not copied: a Recommend of 10 pods used to clone every pod name and every map key
/// (and sort each map through a temporary `Vec`), which with the drop of both copies cost
/// about as much CPU as the engine itself. Violations are still reported in the same order
/// (request order for lists, key order for maps).
pub fn recommend_request(
    req: pb::RecommendRequest,
    ctx: &Context<'_>,
) -> Result<RecommendInput, ApiError> {
    // Size limits first: they bound the work done on the rest.
    if req.pods.len() > ctx.limits.max_pods {
        return Err(ApiError::ResourceExhausted {
            field: "pods".to_owned(),
            message: format!(
                "{} pods exceed the limit of {} per request (max_pods)",
                req.pods.len(),
                ctx.limits.max_pods
            ),
        });
    }
    if let Some(spec) = &req.spec
        && spec.schedules.len() > schedule::MAX_SCHEDULES
    {
        return Err(ApiError::ResourceExhausted {
            field: "spec.schedules".to_owned(),
            message: format!(
                "{} schedules exceed the limit of {} per spec",
                spec.schedules.len(),
                schedule::MAX_SCHEDULES
            ),
        });
    }
    if let Some(spec) = &req.spec
        && spec.metrics.len() > ctx.limits.max_metrics
    {
        return Err(ApiError::ResourceExhausted {
            field: "spec.metrics".to_owned(),
            message: format!(
                "{} metrics exceed the limit of {} per spec (max_metrics)",
                spec.metrics.len(),
                ctx.limits.max_metrics
            ),
        });
    }

    let mut v = Violations::default();
    check_target_key(&mut v, &req.target_key, ctx.limits);
    let now = match req.evaluation_time {
        Some(_) if !ctx.trust_request_time => {
            v.add(
                "evaluation_time",
                "not accepted: this server uses its own clock (start it with --trust-request-time to accept request times)",
            );
            ctx.server_now
        }
        Some(t) => timestamp(&mut v, "evaluation_time", &t).unwrap_or(ctx.server_now),
        None => ctx.server_now,
    };
    if req.current_replicas < 0 {
        v.add("current_replicas", "must not be negative");
    }
    if let Some(s) = req.status_replicas
        && s < 0
    {
        v.add("status_replicas", "must not be negative");
    }
    let (spec, settings) = match &req.spec {
        None => {
            v.add("spec", "must be set");
            (
                HorizontalSpec::new(None, 1, vec![]),
                SettingsOverride::default(),
            )
        }
        Some(spec) => horizontal_spec(&mut v, spec, ctx),
    };

    // The name checks read all names before the pods are moved: a duplicate pod name (the
    // second and later uses) and an orphan naming a listed pod, an earlier orphan, or none.
    let names = NameChecks::of(&req.pods, &req.orphan_pod_metrics);
    let mut pods = Vec::with_capacity(req.pods.len());
    let pods_path = FieldPath::Root("pods");
    for (i, p) in req.pods.into_iter().enumerate() {
        let path = pods_path.index(i);
        if names.duplicate_pods.contains(&i) {
            v.add(path.field("name").to_string(), "duplicate pod name");
        }
        pods.push(pod(&mut v, path, p, now));
    }
    let mut orphan_samples = BTreeMap::new();
    let orphans_path = FieldPath::Root("orphan_pod_metrics");
    for (i, o) in req.orphan_pod_metrics.into_iter().enumerate() {
        let path = orphans_path.index(i);
        if let Some(&(_, problem)) = names.orphans.iter().find(|(j, _)| *j == i) {
            v.add(path.field("pod_name").to_string(), problem);
        }
        let samples = samples(&mut v, path.field("metrics"), o.metrics, now);
        orphan_samples.insert(o.pod_name, samples);
    }
    let object_metrics = req.object_metrics_milli;
    if object_metrics.contains_key("") {
        v.add("object_metrics_milli", "metric names must not be empty");
    }
    let mut external_metrics = BTreeMap::new();
    for (name, values) in req.external_metrics {
        external_metrics.insert(name, values.values_milli);
    }
    if external_metrics.contains_key("") {
        v.add("external_metrics", "metric names must not be empty");
    }
    for (i, name) in req.unavailable_metrics.iter().enumerate() {
        if name.is_empty() {
            v.add(format!("unavailable_metrics[{i}]"), "must not be empty");
        }
    }
    let unavailable_metrics: BTreeSet<String> = req.unavailable_metrics.into_iter().collect();
    if req.dry_run && req.shadow {
        v.add(
            "shadow",
            "not with dry_run: a shadow decision is recorded (as if applied), a dry run records nothing",
        );
    }

    let observation = Observation {
        current_replicas: req.current_replicas,
        status_replicas: req.status_replicas,
        pods,
        orphan_samples,
        object_metrics,
        external_metrics,
        unavailable_metrics,
    };
    v.into_result(RecommendInput {
        target_key: req.target_key,
        spec,
        settings,
        observation,
        dry_run: req.dry_run,
        shadow: req.shadow,
        now,
    })
}

/// A policy's spec (`PutPolicy`), checked by the rules a Recommend's spec is held to, its
/// violations named under `policy.spec`. A policy may leave `max_replicas` unset (a
/// Recommend naming it sets it, or the policy's `min_replicas` stands in), so that one rule
/// is the only one relaxed. Returns the spec and the settings overrides it carries.
pub fn policy_spec(
    spec: &pb::HorizontalSpec,
    ctx: &Context<'_>,
) -> Result<(HorizontalSpec, SettingsOverride), ApiError> {
    if spec.metrics.len() > ctx.limits.max_metrics {
        return Err(ApiError::ResourceExhausted {
            field: "policy.spec.metrics".to_owned(),
            message: format!(
                "{} metrics exceed the limit of {} per spec (max_metrics)",
                spec.metrics.len(),
                ctx.limits.max_metrics
            ),
        });
    }
    let mut partial = spec.clone();
    if partial.max_replicas == 0 {
        partial.max_replicas = partial.min_replicas.unwrap_or(1).max(1);
    }
    let mut v = Violations::default();
    let (spec, settings) = horizontal_spec(&mut v, &partial, ctx);
    for violation in &mut v.0 {
        violation.field = format!("policy.{}", violation.field);
    }
    v.into_result((spec, settings))
}

/// The pod-name violations of a request, found before its pods are moved into the engine's
/// values (both lists are empty for a valid request, so nothing is allocated then).
struct NameChecks {
    /// Indexes of pods whose name an earlier pod already has.
    duplicate_pods: Vec<usize>,
    /// Orphans' indexes and what is wrong with their `pod_name`.
    orphans: Vec<(usize, &'static str)>,
}

impl NameChecks {
    fn of(pods: &[pb::PodSample], orphans: &[pb::OrphanPodMetrics]) -> Self {
        let mut checks = NameChecks {
            duplicate_pods: Vec::new(),
            orphans: Vec::new(),
        };
        let mut pod_names = BTreeSet::new();
        for (i, p) in pods.iter().enumerate() {
            if !p.name.is_empty() && !pod_names.insert(p.name.as_str()) {
                checks.duplicate_pods.push(i);
            }
        }
        let mut orphan_names = BTreeSet::new();
        for (i, o) in orphans.iter().enumerate() {
            let name = o.pod_name.as_str();
            if name.is_empty() {
                checks.orphans.push((i, "must not be empty"));
            } else if pod_names.contains(name) {
                checks.orphans.push((i, "names a pod listed in pods"));
            } else if orphan_names.contains(name) {
                checks.orphans.push((i, "duplicate pod name"));
            }
            // Every orphan's name is a key of the samples map, whatever was wrong with it.
            orphan_names.insert(name);
        }
        checks
    }
}

fn horizontal_spec(
    v: &mut Violations,
    spec: &pb::HorizontalSpec,
    ctx: &Context<'_>,
) -> (HorizontalSpec, SettingsOverride) {
    for e in validate::bounds_violations(spec.min_replicas, spec.max_replicas) {
        v.engine("spec.", e);
    }
    let metrics: Vec<MetricSpec> = spec
        .metrics
        .iter()
        .enumerate()
        .filter_map(|(i, m)| metric_spec(v, i, m))
        .collect();
    let scale_to_zero = spec.scale_to_zero.unwrap_or(ctx.scale_to_zero);
    if let Some(e) = validate::min_replicas_violation(spec.min_replicas, &metrics, scale_to_zero) {
        v.engine("spec.", e);
    }
    let behavior = spec.behavior.as_ref().map(|b| Behavior {
        scale_up: b
            .scale_up
            .as_ref()
            .map(|r| scaling_rules(v, "spec.behavior.scale_up", r)),
        scale_down: b
            .scale_down
            .as_ref()
            .map(|r| scaling_rules(v, "spec.behavior.scale_down", r)),
    });
    let mut settings = spec
        .settings
        .as_ref()
        .map(|s| controller_settings(v, s, ctx))
        .unwrap_or_default();
    settings.scale_to_zero = spec.scale_to_zero;
    let extensions = migration::extensions(v, spec);
    let schedules = schedules(v, &spec.schedules);
    let predictive = spec.predictive.as_ref().and_then(|p| predictive(v, p));
    (
        HorizontalSpec {
            min_replicas: spec.min_replicas,
            max_replicas: spec.max_replicas,
            metrics,
            behavior,
            extensions,
            schedules,
            predictive,
        },
        settings,
    )
}

/// A schedule's floor and ceiling (`min_replicas`, `max_replicas`).
type Bounds = (Option<i32>, Option<i32>);

/// The window a target's schedule and a group's capacity schedule share on the wire (name,
/// start, end or duration, zone), as an engine [`Schedule`] with the bounds given.
pub(crate) trait Window {
    /// The engine's schedule with `bounds` (its floor and ceiling); a bad duration is named
    /// under `path`.
    fn window(&self, v: &mut Violations, path: &str, bounds: Bounds) -> Schedule;
}

macro_rules! window {
    ($($wire:ty),*) => {$(
        impl Window for $wire {
            fn window(&self, v: &mut Violations, path: &str, bounds: Bounds) -> Schedule {
                let (min_replicas, max_replicas) = bounds;
                let at = |d| duration(v, format!("{path}.duration"), d);
                Schedule {
                    name: self.name.clone(),
                    start: self.start.clone(),
                    end: (!self.end.is_empty()).then(|| self.end.clone()),
                    duration: self.duration.as_ref().and_then(at),
                    time_zone: self.time_zone.clone(),
                    min_replicas,
                    max_replicas,
                }
            }
        }
    )*};
}

window!(pb::Schedule, pb::CapacitySchedule);

/// `spec.schedules` in the engine's values, checked by the engine's compiler
/// (`schedule::compile`: every cron expression parsed, every zone looked up), each
/// violation named by its wire path (`spec.schedules[2].time_zone`).
fn schedules(v: &mut Violations, list: &[pb::Schedule]) -> Vec<Schedule> {
    let out: Vec<Schedule> = list
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let path = format!("spec.schedules[{i}]");
            s.window(v, &path, (s.min_replicas, s.max_replicas))
        })
        .collect();
    if let Err(violations) = schedule::compile(&out) {
        for e in violations {
            v.engine("spec.", e);
        }
    }
    out
}

/// `spec.predictive` in the engine's values: the mode, and the start-up delay (300 s when
/// absent), checked by the engine (`predictive::validate`) under `spec.`.
fn predictive(v: &mut Violations, p: &pb::Predictive) -> Option<PredictiveSpec> {
    use pb::PredictiveMode as M;
    let mode = match M::try_from(p.mode) {
        Ok(M::Unspecified | M::Off) => PredictiveMode::Off,
        Ok(M::ForecastOnly) => PredictiveMode::ForecastOnly,
        Ok(M::ScaleUp) => PredictiveMode::ScaleUp,
        Err(_) => {
            v.add("spec.predictive.mode", format!("unknown mode {}", p.mode));
            return None;
        }
    };
    let startup_delay = match &p.startup_delay {
        Some(d) => duration(v, "spec.predictive.startup_delay", d)?,
        None => predictive::DEFAULT_STARTUP_DELAY,
    };
    let margin_percent = match p.margin_percent {
        None => 0,
        Some(m) => match u32::try_from(m) {
            Ok(m) => m,
            Err(_) => {
                v.add("spec.predictive.margin_percent", "must not be negative");
                return None;
            }
        },
    };
    let spec = PredictiveSpec {
        mode,
        startup_delay,
        margin_percent,
    };
    if let Err(e) = predictive::validate(&spec) {
        v.engine("spec.", e);
        return None;
    }
    Some(spec)
}

fn metric_spec(v: &mut Violations, index: usize, m: &pb::MetricSpec) -> Option<MetricSpec> {
    use pb::MetricSourceType as S;
    // Formatted only for a violation (as `FieldPath` is everywhere): most specs have none.
    let spec_path = FieldPath::Root("spec");
    let metrics_path = spec_path.field("metrics");
    let path = metrics_path.index(index);
    let source = match S::try_from(m.r#type) {
        Err(_) => {
            v.add(
                path.field("type").to_string(),
                format!("unknown value {}", m.r#type),
            );
            return None;
        }
        Ok(S::Unspecified) => {
            v.add(path.field("type").to_string(), "must be set");
            return None;
        }
        Ok(s) => s,
    };
    // Wire-only violations of the target (absent, type unknown): reported between the
    // metric's own fields and its target's values, as the engine lists them.
    let mut wire = Violations::default();
    let target_path = path.field("target");
    let (target, type_known) = match &m.target {
        None => {
            wire.add(target_path.to_string(), "must be set");
            (MetricTarget::default(), false)
        }
        Some(t) => metric_target(&mut wire, target_path, t),
    };
    let name = m.name.clone();
    let metric = match source {
        S::Resource => MetricSpec::Resource { name, target },
        S::ContainerResource => MetricSpec::ContainerResource {
            name,
            container: m.container.clone(),
            target,
        },
        S::Pods => MetricSpec::Pods { name, target },
        S::Object => MetricSpec::Object { name, target },
        S::External => MetricSpec::External { name, target },
        S::Unspecified => return None,
    };
    // A target whose type is unknown cannot be checked against its type: the values only.
    let rules = if type_known {
        Rules::Api
    } else {
        Rules::Controller
    };
    let mut wire = Some(wire);
    for e in validate::metric_violations(index, &metric, rules) {
        if e.field.contains(".target.")
            && let Some(w) = wire.take()
        {
            v.0.extend(w.0);
        }
        v.engine("spec.", e);
    }
    if let Some(w) = wire {
        v.0.extend(w.0);
    }
    Some(metric)
}

/// A target's type (which the controller reads for Object and External) and values; the
/// rules on them are the engine's ([`validate::metric_violations`]). `false`: the type is
/// unknown.
fn metric_target(
    v: &mut Violations,
    path: FieldPath<'_>,
    t: &pb::MetricTarget,
) -> (MetricTarget, bool) {
    use pb::MetricTargetType as T;
    let target_type = match T::try_from(t.r#type) {
        Err(_) => {
            v.add(
                path.field("type").to_string(),
                format!("unknown value {}", t.r#type),
            );
            None
        }
        Ok(T::Unspecified) => {
            v.add(path.field("type").to_string(), "must be set");
            None
        }
        Ok(T::Utilization) => Some(MetricTargetType::Utilization),
        Ok(T::AverageValue) => Some(MetricTargetType::AverageValue),
        Ok(T::Value) => Some(MetricTargetType::Value),
    };
    (
        MetricTarget {
            target_type: target_type.unwrap_or_default(),
            average_utilization: t.average_utilization,
            average_value: t.average_value_milli,
            value: t.value_milli,
        },
        target_type.is_some(),
    )
}

/// `validateScalingRules` / `validateScalingPolicy`.
fn scaling_rules(v: &mut Violations, path: &str, r: &pb::ScalingRules) -> ScalingRules {
    if let Some(d) = r
        .stabilization_window_seconds
        .and_then(|w| validate::window_violation(w, Rules::Api))
    {
        v.add(format!("{path}.stabilization_window_seconds"), d);
    }
    let select_policy = match pb::SelectPolicy::try_from(r.select_policy) {
        Err(_) => {
            v.add(
                format!("{path}.select_policy"),
                format!("unknown value {}", r.select_policy),
            );
            None
        }
        Ok(pb::SelectPolicy::Unspecified) => None,
        Ok(pb::SelectPolicy::Max) => Some(SelectPolicy::Max),
        Ok(pb::SelectPolicy::Min) => Some(SelectPolicy::Min),
        Ok(pb::SelectPolicy::Disabled) => Some(SelectPolicy::Disabled),
    };
    let mut policies = Vec::with_capacity(r.policies.len());
    for (i, p) in r.policies.iter().enumerate() {
        let ppath = format!("{path}.policies[{i}]");
        let policy_type = match pb::ScalingPolicyType::try_from(p.r#type) {
            Err(_) => {
                v.add(
                    format!("{ppath}.type"),
                    format!("unknown value {}", p.r#type),
                );
                ScalingPolicyType::Pods
            }
            Ok(pb::ScalingPolicyType::Unspecified) => {
                v.add(format!("{ppath}.type"), "must be set");
                ScalingPolicyType::Pods
            }
            Ok(pb::ScalingPolicyType::Pods) => ScalingPolicyType::Pods,
            Ok(pb::ScalingPolicyType::Percent) => ScalingPolicyType::Percent,
        };
        let policy = ScalingPolicy {
            policy_type,
            value: p.value,
            period_seconds: p.period_seconds,
        };
        for e in validate::policy_violations(&policy, Rules::Api) {
            v.add(format!("{ppath}.{}", e.field), e.description);
        }
        policies.push(policy);
    }
    if let Some(d) = r.tolerance.and_then(validate::tolerance_violation) {
        v.add(format!("{path}.tolerance"), d);
    }
    ScalingRules {
        stabilization_window_seconds: r.stabilization_window_seconds,
        select_policy,
        policies: (r.policies_set || !policies.is_empty()).then_some(policies),
        tolerance: r.tolerance,
    }
}

fn controller_settings(
    v: &mut Violations,
    s: &pb::ControllerSettings,
    ctx: &Context<'_>,
) -> SettingsOverride {
    // The engine's rules for each present field (`validate::settings_violations` checks the
    // same rules on the settings the overrides produce).
    let check =
        |v: &mut Violations, field: &str, x: Option<f64>, rule: fn(f64) -> Option<&'static str>| {
            if let Some(d) = x.and_then(rule) {
                v.add(format!("spec.settings.{field}"), d);
            }
            x
        };
    let downscale = s
        .downscale_stabilization
        .as_ref()
        .and_then(|d| duration(v, "spec.settings.downscale_stabilization", d));
    if let Some(d) = downscale
        && d > ctx.history_retention
    {
        v.add(
            "spec.settings.downscale_stabilization",
            format!(
                "must be at most {} s (the server's history retention)",
                ctx.history_retention.as_secs()
            ),
        );
    }
    SettingsOverride {
        tolerance: check(v, "tolerance", s.tolerance, validate::tolerance_violation),
        cpu_initialization_period: s
            .cpu_initialization_period
            .as_ref()
            .and_then(|d| duration(v, "spec.settings.cpu_initialization_period", d)),
        initial_readiness_delay: s
            .initial_readiness_delay
            .as_ref()
            .and_then(|d| duration(v, "spec.settings.initial_readiness_delay", d)),
        downscale_stabilization: downscale,
        scale_up_limit_factor: check(
            v,
            "scale_up_limit_factor",
            s.scale_up_limit_factor,
            validate::scale_up_limit_violation,
        ),
        scale_up_limit_minimum: check(
            v,
            "scale_up_limit_minimum",
            s.scale_up_limit_minimum,
            validate::scale_up_limit_violation,
        ),
        // Set by the caller from `spec.scale_to_zero`.
        scale_to_zero: None,
    }
}

fn pod(v: &mut Violations, path: FieldPath<'_>, p: pb::PodSample, now: Time) -> Pod {
    if p.name.is_empty() {
        v.add(path.field("name").to_string(), "must not be empty");
    }
    let phase = match pb::PodPhase::try_from(p.phase) {
        Err(_) => {
            v.add(
                path.field("phase").to_string(),
                format!("unknown value {}", p.phase),
            );
            PodPhase::Running
        }
        Ok(pb::PodPhase::Unspecified | pb::PodPhase::Running) => PodPhase::Running,
        Ok(pb::PodPhase::Pending) => PodPhase::Pending,
        Ok(pb::PodPhase::Succeeded) => PodPhase::Succeeded,
        Ok(pb::PodPhase::Failed) => PodPhase::Failed,
        Ok(pb::PodPhase::Unknown) => PodPhase::Unknown,
    };
    let containers_path = path.field("containers");
    let containers = p
        .containers
        .into_iter()
        .enumerate()
        .map(|(j, c)| {
            let cpath = containers_path.index(j);
            if c.name.is_empty() {
                v.add(cpath.field("name").to_string(), "must not be empty");
            }
            Container {
                name: c.name,
                requests: quantities(v, cpath.field("requests_milli"), c.requests_milli),
                usage: quantities(v, cpath.field("usage_milli"), c.usage_milli),
            }
        })
        .collect();
    let ready_transition = p
        .ready_transition_time
        .as_ref()
        .and_then(|t| timestamp(v, path.field("ready_transition_time"), t));
    let start_time = p
        .start_time
        .as_ref()
        .and_then(|t| timestamp(v, path.field("start_time"), t));
    let requests = quantities(v, path.field("requests_milli"), p.requests_milli);
    let metrics = samples(v, path.field("metrics"), p.metrics, now);
    Pod {
        name: p.name,
        phase,
        deleting: p.deleting,
        ready: p.ready,
        ready_transition,
        start_time,
        requests,
        containers,
        metrics,
    }
}

/// Requests and usage: non-negative, named. The wire's map is already the engine's (a
/// `BTreeMap`, see `build.rs`): it is checked in key order and kept as it is.
fn quantities(
    v: &mut Violations,
    path: FieldPath<'_>,
    map: BTreeMap<String, i64>,
) -> BTreeMap<String, i64> {
    for (name, value) in &map {
        if name.is_empty() {
            v.add(path.to_string(), "resource names must not be empty");
        } else if *value < 0 {
            v.add(path.key(name).to_string(), "must not be negative");
        }
    }
    map
}

/// Metric samples; an absent timestamp means "sampled now", an absent window one minute.
/// The wire's map is in key order (a `BTreeMap`), so the violations come in key order.
/// Inserted one by one: `collect` would sort through a temporary `Vec`.
fn samples(
    v: &mut Violations,
    path: FieldPath<'_>,
    map: BTreeMap<String, pb::MetricSample>,
    now: Time,
) -> BTreeMap<String, MetricSample> {
    let mut out = BTreeMap::new();
    for (name, s) in map {
        if name.is_empty() {
            v.add(path.to_string(), "metric names must not be empty");
        }
        let spath = path.key(&name);
        let timestamp = s
            .timestamp
            .as_ref()
            .and_then(|t| timestamp(v, spath.field("timestamp"), t))
            .unwrap_or(now);
        let window = s
            .window
            .as_ref()
            .and_then(|d| duration(v, spath.field("window"), d))
            .unwrap_or(DEFAULT_SAMPLE_WINDOW);
        out.insert(
            name,
            MetricSample {
                value: s.value_milli,
                timestamp,
                window,
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use prost_types::Timestamp;

    use super::*;
    use crate::engine::error::InvalidInput;

    fn ctx(limits: &Limits) -> Context<'_> {
        Context {
            limits,
            trust_request_time: false,
            server_now: Time::from_unix_secs(1_000),
            history_retention: Duration::from_secs(3600),
            scale_to_zero: true,
        }
    }

    fn cpu_metric(utilization: i32) -> pb::MetricSpec {
        pb::MetricSpec {
            r#type: pb::MetricSourceType::Resource as i32,
            name: "cpu".into(),
            container: String::new(),
            target: Some(pb::MetricTarget {
                r#type: pb::MetricTargetType::Utilization as i32,
                average_utilization: Some(utilization),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn valid() -> pb::RecommendRequest {
        pb::RecommendRequest {
            target_key: "ns/web".into(),
            current_replicas: 2,
            spec: Some(pb::HorizontalSpec {
                min_replicas: Some(1),
                max_replicas: 10,
                metrics: vec![cpu_metric(50)],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn fields(r: Result<RecommendInput, ApiError>) -> Vec<String> {
        match r {
            Err(ApiError::InvalidArgument(v)) => v.into_iter().map(|v| v.field).collect(),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn a_valid_request_converts() {
        let limits = Limits::default();
        let input = recommend_request(valid(), &ctx(&limits)).unwrap();
        assert_eq!(input.target_key, "ns/web");
        assert_eq!(input.now, Time::from_unix_secs(1_000));
        assert_eq!(input.spec.metrics.len(), 1);
        assert_eq!(input.observation.current_replicas, 2);
    }

    #[test]
    fn every_violation_is_reported_with_its_path() {
        let limits = Limits::default();
        let mut req = valid();
        req.target_key = String::new();
        req.evaluation_time = Some(Timestamp::default());
        let spec = req.spec.as_mut().unwrap();
        spec.metrics.push(cpu_metric(0));
        spec.metrics.push(pb::MetricSpec {
            r#type: 42,
            ..Default::default()
        });
        assert_eq!(
            fields(recommend_request(req, &ctx(&limits))),
            [
                "target_key",
                "evaluation_time",
                "spec.metrics[1].target.average_utilization",
                "spec.metrics[2].type"
            ]
        );
    }

    /// The engine's rule (>= 1) is the API's: 0.5 used to pass conversion and fail later,
    /// inside the engine, under another name.
    #[test]
    fn a_scale_up_limit_factor_below_one_names_the_wire_field() {
        let limits = Limits::default();
        let mut req = valid();
        req.spec.as_mut().unwrap().settings = Some(pb::ControllerSettings {
            scale_up_limit_factor: Some(0.5),
            scale_up_limit_minimum: Some(1.0),
            ..Default::default()
        });
        match recommend_request(req, &ctx(&limits)) {
            Err(ApiError::InvalidArgument(v)) => assert_eq!(
                v,
                [InvalidInput::new(
                    "spec.settings.scale_up_limit_factor",
                    "must be a finite number >= 1"
                )]
            ),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn engine_paths_get_the_wire_prefix_and_names() {
        let limits = Limits::default();
        let mut req = valid();
        let spec = req.spec.as_mut().unwrap();
        spec.metrics.push(pb::MetricSpec {
            r#type: pb::MetricSourceType::Pods as i32,
            name: String::new(),
            target: Some(pb::MetricTarget {
                r#type: pb::MetricTargetType::Value as i32,
                average_value_milli: Some(0),
                ..Default::default()
            }),
            ..Default::default()
        });
        spec.metrics.push(pb::MetricSpec {
            r#type: pb::MetricSourceType::External as i32,
            name: "queue".into(),
            target: Some(pb::MetricTarget {
                r#type: 9,
                value_milli: Some(-1),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(
            fields(recommend_request(req, &ctx(&limits))),
            [
                "spec.metrics[1].name",
                "spec.metrics[1].target.average_value_milli",
                "spec.metrics[1].target.type",
                "spec.metrics[2].target.type",
                "spec.metrics[2].target.value_milli",
            ]
        );
    }

    #[test]
    fn limits_are_resource_exhausted() {
        let limits = Limits {
            max_pods: 1,
            ..Limits::default()
        };
        let mut req = valid();
        req.pods = vec![pb::PodSample::default(), pb::PodSample::default()];
        assert!(matches!(
            recommend_request(req, &ctx(&limits)),
            Err(ApiError::ResourceExhausted { field, .. }) if field == "pods"
        ));
    }

    /// The pods and their maps are moved, not walked in order: the violations still come in
    /// request order for lists and key order for maps, every sample's own after its name's.
    #[test]
    fn violations_of_moved_pods_and_maps_keep_their_order() {
        let limits = Limits::default();
        let bad_window = || pb::MetricSample {
            value_milli: Some(1),
            window: Some(prost_types::Duration {
                seconds: -1,
                nanos: 0,
            }),
            ..Default::default()
        };
        let bad_time = || pb::MetricSample {
            timestamp: Some(Timestamp {
                seconds: 0,
                nanos: -1,
            }),
            ..bad_window()
        };
        let pod = |name: &str| pb::PodSample {
            name: name.into(),
            requests_milli: BTreeMap::from([
                ("memory".to_owned(), -1),
                ("cpu".to_owned(), -2),
                (String::new(), 3),
            ]),
            metrics: BTreeMap::from([
                ("z".to_owned(), bad_window()),
                ("a".to_owned(), bad_time()),
                (String::new(), pb::MetricSample::default()),
                ("m".to_owned(), pb::MetricSample::default()),
            ]),
            ..Default::default()
        };
        let mut req = valid();
        req.pods = vec![pod("p"), pod("q"), pod("p")];
        req.orphan_pod_metrics = vec![
            pb::OrphanPodMetrics {
                pod_name: "q".into(),
                metrics: BTreeMap::from([("b".to_owned(), bad_window())]),
            },
            pb::OrphanPodMetrics {
                pod_name: "o".into(),
                ..Default::default()
            },
            pb::OrphanPodMetrics {
                pod_name: "o".into(),
                ..Default::default()
            },
            pb::OrphanPodMetrics::default(),
        ];
        req.object_metrics_milli = BTreeMap::from([(String::new(), 1), ("x".to_owned(), 2)]);
        req.unavailable_metrics = vec!["cpu".into(), String::new()];
        let pod_fields = |i: usize| {
            [
                format!("pods[{i}].requests_milli"),
                format!("pods[{i}].requests_milli[cpu]"),
                format!("pods[{i}].requests_milli[memory]"),
                format!("pods[{i}].metrics"),
                format!("pods[{i}].metrics[a].timestamp"),
                format!("pods[{i}].metrics[a].window"),
                format!("pods[{i}].metrics[z].window"),
            ]
        };
        let mut expected = Vec::new();
        expected.extend(pod_fields(0));
        expected.extend(pod_fields(1));
        expected.push("pods[2].name".to_owned());
        expected.extend(pod_fields(2));
        expected.extend(
            [
                "orphan_pod_metrics[0].pod_name",
                "orphan_pod_metrics[0].metrics[b].window",
                "orphan_pod_metrics[2].pod_name",
                "orphan_pod_metrics[3].pod_name",
                "object_metrics_milli",
                "unavailable_metrics[1]",
            ]
            .map(str::to_owned),
        );
        assert_eq!(fields(recommend_request(req, &ctx(&limits))), expected);
    }

    #[test]
    fn trusted_request_time_is_used() {
        let limits = Limits::default();
        let mut c = ctx(&limits);
        c.trust_request_time = true;
        let mut req = valid();
        req.evaluation_time = Some(Timestamp {
            seconds: 5,
            nanos: 7_000_000,
        });
        let input = recommend_request(req, &c).unwrap();
        assert_eq!(input.now, Time::from_unix_millis(5_007));
    }
}
