//! VPA conformance cases (`conformance/vpa/README.md`): [`VpaCase`] (tagged by `kind`) and,
//! per kind, its run through `engine::vpa`, reporting the first differing field as
//! "expected X, got Y".

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use autoscaled_engine::time::{
    Time,
    go::{NANOS_PER_SECOND, duration_nanos},
};
use autoscaled_engine::vpa::aggregate::{
    AggregateContainerState, HistogramCall, HistogramKind, HistogramOp,
};
use autoscaled_engine::vpa::amount::{self, Resource, Resources};
use autoscaled_engine::vpa::checkpoint::{AggregateCheckpoint, HistogramCheckpoint};
use autoscaled_engine::vpa::container::ContainerState;
use autoscaled_engine::vpa::decaying::DecayingHistogram;
use autoscaled_engine::vpa::estimator::{EstimatorBase, EstimatorChain, EstimatorStep, confidence};
use autoscaled_engine::vpa::histogram::HistogramOptions;
use autoscaled_engine::vpa::policy::{
    AggregationPolicy, ContainerResourcePolicy, ContainerScalingMode, PodResourcePolicy,
};
use autoscaled_engine::vpa::recommender::{
    PodEstimators, RecommendedContainerResources, RecommendedPodResources, post_process,
    round_output,
};
use autoscaled_engine::vpa::settings::VpaSettings;
use autoscaled_engine::vpa::target::{Observation, OomEvent, UsageSample, VpaTarget};

mod aggregate;
mod histogram;
mod schema;

use aggregate::*;
use histogram::*;

use schema::{
    AddStep, AggregateCase, AggregateCheckpointJson, AggregateExpect, AggregateStep, AmountCase,
    AmountExpect, CallName, ChainElement, ContainerCase, ContainerPolicyJson, Deferred, Envelope,
    EstimatorCase, ExpectedContainer, HistogramAdds, HistogramCase, HistogramCheckpointJson,
    HistogramExpect, HistogramName, HistogramSpecJson, HistogramStep, Int, LenientStr,
    ObservationStep, PodPolicyJson, PolicyCase, PostprocessCase, RecommendationJson,
    RecommenderCase, ResourcesJson, Sample, SettingsJson, no_rest, resources_of,
};

type R = Result<(), String>;

/// The kinds of VPA case (`conformance/vpa/README.md`), one per engine part they exercise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VpaKind {
    /// The decaying histogram (`util/histogram.go`, `util/decaying_histogram.go`).
    Histogram,
    /// One container's aggregate state fed with samples (`model/aggregate_container_state.go`).
    Container,
    /// Aggregation across containers and merged states (`model/aggregations_config.go`).
    Aggregate,
    /// The container resource policy applied to a recommendation (`container_policy.go`).
    Policy,
    /// The percentile, margin and confidence estimators (`logic/estimator.go`).
    Estimator,
    /// The whole recommender over a series of samples (`logic/recommender.go`).
    Recommender,
    /// The post-processors after the estimators (`routines/*_post_processor.go`).
    Postprocess,
    /// Resource amounts and their rounding (`model/types.go`).
    Amount,
}

/// A loaded VPA case: its kind, its settings and time origin (validated), and the kind's
/// steps and expectations, which the kind's runner reads.
#[derive(Clone, Debug)]
pub struct VpaCase {
    /// The case's name, as the report prints it.
    pub name: String,
    /// Which part of the engine the case exercises.
    pub kind: VpaKind,
    ctx: Ctx,
    body: Value,
}

impl VpaCase {
    /// Reads the envelope of a VPA case: `name`, `kind`, `t0_unix_s` and `settings`
    /// (validated as the server validates them).
    pub fn from_value(value: Value) -> Result<VpaCase, String> {
        let envelope: Envelope = schema::parse(&value)?;
        let ctx = Ctx::new(&envelope)?;
        let kind = envelope
            .kind
            .get("kind")
            .map_err(|_| "kind: not a string".to_owned())?;
        let kind = serde_json::from_value(Value::String(kind.to_owned()))
            .map_err(|_| format!("kind: unknown kind {kind:?}"))?;
        Ok(VpaCase {
            name: envelope.name.0.unwrap_or_default(),
            kind,
            ctx,
            body: value,
        })
    }

    /// Runs the case through the engine; the first difference is the error.
    pub fn run(&self) -> R {
        let (ctx, case) = (&self.ctx, &self.body);
        match self.kind {
            VpaKind::Histogram => run_histogram(ctx, case),
            VpaKind::Container => run_container(ctx, case),
            VpaKind::Aggregate => run_aggregate(ctx, case),
            VpaKind::Policy => run_policy(ctx, case),
            VpaKind::Estimator => run_estimator(ctx, case),
            VpaKind::Recommender => run_recommender(ctx, case),
            VpaKind::Postprocess => run_postprocess(ctx, case),
            VpaKind::Amount => run_amount(case),
        }
    }
}

// === helpers ===

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

fn check_eq<T: PartialEq + std::fmt::Debug>(what: &str, expected: T, got: T) -> R {
    if expected == got {
        Ok(())
    } else {
        Err(format!("{what}: expected {expected:?}, got {got:?}"))
    }
}

fn check_f64(what: &str, expected: f64, got: f64, tolerance: Option<f64>) -> R {
    let ok = match tolerance {
        Some(t) => (expected - got).abs() <= t * expected.abs(),
        None => expected == got,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{what}: expected {expected:?}, got {got:?}"))
    }
}

fn prefix(what: impl std::fmt::Display) -> impl FnOnce(String) -> String {
    move |e| format!("{what}: {e}")
}

// === Context: settings and time ===

#[derive(Clone, Debug)]
struct Ctx {
    settings: VpaSettings,
    t0_ns: i64,
}

impl Ctx {
    fn new(case: &Envelope) -> Result<Self, String> {
        let t0_ns = case
            .t0_unix_s
            .opt("t0_unix_s")?
            .map_or(0, |n| n.0)
            .saturating_mul(NANOS_PER_SECOND);
        let settings = case.settings.opt("settings")?;
        if let Some(s) = &settings {
            s.check_keys().map_err(prefix("settings"))?;
        }
        let settings = settings_from(settings.as_ref());
        settings.validate().map_err(|e| format!("settings: {e}"))?;
        Ok(Self { settings, t0_ns })
    }

    fn at(&self, at_s: f64) -> Time {
        Time::from_unix_nanos(self.t0_ns.saturating_add((at_s * 1e9).round() as i64))
    }

    fn aggregation_policy(&self) -> AggregationPolicy {
        AggregationPolicy::resolve(&self.settings, None)
    }
}

/// The defaults overridden by the case's settings.
fn settings_from(v: Option<&SettingsJson>) -> VpaSettings {
    let mut s = VpaSettings::default();
    let Some(v) = v else {
        return s;
    };
    let set = |field: &mut f64, x: Option<f64>| {
        if let Some(x) = x {
            *field = x;
        }
    };
    set(&mut s.target_cpu_percentile, v.target_cpu_percentile);
    set(&mut s.target_memory_percentile, v.target_memory_percentile);
    set(
        &mut s.lower_bound_cpu_percentile,
        v.lower_bound_cpu_percentile,
    );
    set(
        &mut s.lower_bound_memory_percentile,
        v.lower_bound_memory_percentile,
    );
    set(
        &mut s.upper_bound_cpu_percentile,
        v.upper_bound_cpu_percentile,
    );
    set(
        &mut s.upper_bound_memory_percentile,
        v.upper_bound_memory_percentile,
    );
    set(&mut s.safety_margin_fraction, v.safety_margin_fraction);
    set(&mut s.pod_min_cpu_millicores, v.pod_min_cpu_millicores);
    set(&mut s.pod_min_memory_mb, v.pod_min_memory_mb);
    set(&mut s.oom_bump_up_ratio, v.oom_bump_up_ratio);
    set(&mut s.oom_min_bump_up_bytes, v.oom_min_bump_up_bytes);
    let set_secs = |field: &mut Duration, x: Option<f64>| {
        if let Some(x) = x {
            *field = secs(x);
        }
    };
    set_secs(&mut s.confidence_interval_cpu, v.confidence_interval_cpu_s);
    set_secs(
        &mut s.confidence_interval_memory,
        v.confidence_interval_memory_s,
    );
    set_secs(
        &mut s.cpu_histogram_decay_half_life,
        v.cpu_histogram_decay_half_life_s,
    );
    set_secs(
        &mut s.memory_histogram_decay_half_life,
        v.memory_histogram_decay_half_life_s,
    );
    set_secs(
        &mut s.memory_aggregation_interval,
        v.memory_aggregation_interval_s,
    );
    if let Some(n) = v.memory_aggregation_interval_count {
        s.memory_aggregation_interval_count = n.0;
    }
    if let Some(n) = v.round_cpu_millicores {
        s.round_cpu_millicores = n.0;
    }
    if let Some(n) = v.round_memory_bytes {
        s.round_memory_bytes = n.0;
    }
    if let Some(r) = v.container_recommendation_max_allowed {
        s.container_recommendation_max_allowed = r.into();
    }
    if let Some(b) = v.per_vpa_config {
        s.per_vpa_config = b;
    }
    if let Some(b) = v.cpu_integer_post_processor_enabled {
        s.cpu_integer_post_processor_enabled = b;
    }
    s
}

fn container_policy(p: ContainerPolicyJson) -> Result<ContainerResourcePolicy, String> {
    let mode = match p.mode.0.as_deref() {
        None => None,
        Some("Auto") => Some(ContainerScalingMode::Auto),
        Some("Off") => Some(ContainerScalingMode::Off),
        Some(other) => return Err(format!("mode: unknown mode {other:?}")),
    };
    Ok(ContainerResourcePolicy {
        container_name: p.container_name.0.unwrap_or_default(),
        mode,
        min_allowed: resources_of(p.min_allowed),
        max_allowed: resources_of(p.max_allowed),
        controlled_resources: p
            .controlled_resources
            .map(|list| list.into_iter().map(Resource::from).collect()),
        memory_aggregation_interval: p.memory_aggregation_interval_s.map(secs),
        memory_aggregation_interval_count: p.memory_aggregation_interval_count.map(|n| n.0),
        oom_bump_up_ratio: p.oom_bump_up_ratio,
        oom_min_bump_up_bytes: p.oom_min_bump_up_bytes,
    })
}

fn pod_policy(p: Option<PodPolicyJson>) -> Result<Option<PodResourcePolicy>, String> {
    let Some(p) = p else {
        return Ok(None);
    };
    let container_policies = p
        .container_policies
        .unwrap_or_default()
        .into_iter()
        .map(container_policy)
        .collect::<Result<Vec<_>, _>>()?;
    let policy = PodResourcePolicy { container_policies };
    policy.validate().map_err(|e| format!("policy: {e}"))?;
    Ok(Some(policy))
}

// === kinds `histogram` and `container`: `histogram`; `aggregate`: `aggregate` ===

// === kind: policy ===

fn run_policy(ctx: &Ctx, case: &Value) -> R {
    let case: PolicyCase = schema::parse(case)?;
    let policy = case.policy.map(|p| container_policy(p.0)).transpose()?;
    let resolved = AggregationPolicy::resolve(&ctx.settings, policy.as_ref());
    let e = case.expect.take("expect")?;
    no_rest("expect", &e.rest)?;
    if let Some(mode) = e.scaling_mode.0.as_deref() {
        check_eq(
            "scaling_mode",
            mode,
            if resolved.scaling_mode == ContainerScalingMode::Off {
                "Off"
            } else {
                "Auto"
            },
        )?;
    }
    if let Some(list) = e.controlled_resources {
        let mut want: Vec<Resource> = list
            .ok_or("controlled_resources: not a list")?
            .into_iter()
            .map(Resource::from)
            .collect();
        want.sort();
        want.dedup();
        let got: Vec<Resource> = Resource::ALL
            .into_iter()
            .filter(|r| resolved.controls(*r))
            .collect();
        check_eq("controlled_resources", want, got)?;
    }
    if let Some(s) = e.memory_aggregation_interval_s {
        check_eq(
            "memory_aggregation_interval_s",
            duration_nanos(secs(s)),
            resolved.memory_aggregation_interval_ns,
        )?;
    }
    if let Some(r) = e.oom_bump_up_ratio {
        check_f64("oom_bump_up_ratio", r, resolved.oom_bump_up_ratio, None)?;
    }
    if let Some(b) = e.oom_min_bump_up_bytes {
        check_f64(
            "oom_min_bump_up_bytes",
            b,
            resolved.oom_min_bump_up_bytes,
            None,
        )?;
    }
    if let Some(n) = e.memory_aggregation_interval_count {
        check_eq(
            "memory_aggregation_interval_count",
            n.0,
            resolved.memory_aggregation_interval_count,
        )?;
    }
    Ok(())
}

// === kind: estimator ===

fn chain(v: &[ChainElement]) -> Result<EstimatorChain, String> {
    let (first, rest) = v.split_first().ok_or("empty estimator chain")?;
    let base = if let Some(c) = first.constant {
        EstimatorBase::Constant(c)
    } else if let Some(p) = first.percentile {
        EstimatorBase::Percentile(p)
    } else {
        return Err(format!(
            "estimator chain must start with const or percentile, got {first:?}"
        ));
    };
    let steps = rest
        .iter()
        .map(|s| {
            if let Some(m) = s.margin {
                Ok(EstimatorStep::Margin(m))
            } else if let Some(c) = &s.confidence_multiplier {
                Ok(EstimatorStep::ConfidenceMultiplier {
                    multiplier: c.multiplier,
                    exponent: c.exponent,
                    interval_ns: duration_nanos(secs(c.interval_s)),
                })
            } else if let Some(m) = s.min {
                Ok(EstimatorStep::Min(m))
            } else {
                Err(format!("unknown estimator {s:?}"))
            }
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(EstimatorChain { base, steps })
}

fn number_f64(n: Option<&serde_json::Number>, key: &str) -> Result<f64, String> {
    n.ok_or_else(|| format!("{key}: missing"))?
        .as_f64()
        .ok_or_else(|| format!("{key}: not a number"))
}

fn number_i64(n: Option<&serde_json::Number>, key: &str) -> Result<i64, String> {
    let n = n.ok_or_else(|| format!("{key}: missing"))?;
    n.as_i64()
        .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
        .ok_or_else(|| format!("{key}: not an integer"))
}

fn required<T: Copy>(v: Option<T>, key: &str) -> Result<T, String> {
    v.ok_or_else(|| format!("{key}: missing"))
}

fn run_estimator(ctx: &Ctx, case: &Value) -> R {
    let case: EstimatorCase = schema::parse(case)?;
    let plain = case.state.histograms.0.as_deref() == Some("plain");
    let mut state = if plain {
        AggregateContainerState::with_half_lives(0, 0, ctx.at(0.0))
    } else {
        AggregateContainerState::new(&ctx.settings, ctx.at(0.0))
    };
    for (i, step) in case.state.steps.iter().flatten().enumerate() {
        let at = ctx.at(step.at_s.unwrap_or(0.0));
        match step.op.as_str() {
            "histogram_add" => {
                let h = match step.histogram.get("histogram")? {
                    HistogramName::Cpu => &mut state.cpu,
                    HistogramName::Memory => &mut state.memory,
                };
                h.add_sample(
                    number_f64(Some(&step.value.get("value")?), "value")?,
                    step.weight.get("weight")?,
                    at,
                )
                .map_err(|e| format!("state.steps[{i}]: {e}"))?;
            }
            "aggregate_sample" => {
                let value = number_i64(Some(&step.value.get("value")?), "value")?;
                match Resource::from(step.resource.get("resource")?) {
                    Resource::Cpu => state.add_cpu_sample(at, value, &mut ()),
                    Resource::Memory => state.memory_peak(HistogramOp::Add, at, value, &mut ()),
                }
            }
            other => return Err(format!("state.steps[{i}]: unknown op {other:?}")),
        }
    }
    let e = case.expect.take("expect")?;
    no_rest("expect", &e.rest)?;
    let tolerance = e.tolerance;
    for (key, r, want, c) in [
        ("cpu", Resource::Cpu, e.cpu, &case.estimators.cpu),
        (
            "memory",
            Resource::Memory,
            e.memory,
            &case.estimators.memory,
        ),
    ] {
        let Some(c) = c else {
            continue;
        };
        let c = chain(c).map_err(prefix(format!("estimators.{key}")))?;
        let got = c.estimate(r, &state);
        if let Some(want) = want {
            check_f64(key, want.0 as f64, got as f64, tolerance)?;
        }
    }
    if let Some(c) = e.confidence {
        let interval = duration_nanos(secs(c.interval_s));
        check_f64(
            "confidence",
            c.value,
            confidence(&state, interval),
            c.tolerance.or(tolerance),
        )?;
    }
    Ok(())
}

// === kind: recommender ===

/// The largest `series.count` the runner expands (a month of one-minute samples is 43 200).
const MAX_SERIES_COUNT: i64 = 10_000_000;

fn observation_from_sample(ctx: &Ctx, s: &Sample) -> Result<Observation, String> {
    let pod = s.pod.or("pod-1").to_owned();
    let container = s.container.or("app").to_owned();
    let at = ctx.at(s.at_s);
    Ok(if s.oom.unwrap_or(false) {
        Observation::Oom(OomEvent {
            pod,
            container,
            at,
            memory_bytes: s.value.0,
        })
    } else {
        Observation::Usage(UsageSample {
            pod,
            container,
            resource: s.resource.get("resource")?.into(),
            usage: s.value.0,
            at,
        })
    })
}

fn expand_observations(ctx: &Ctx, case: &RecommenderCase) -> Result<Vec<Observation>, String> {
    let mut list: Vec<(f64, Observation)> = Vec::new();
    for s in case.samples.iter().flatten() {
        list.push((s.at_s, observation_from_sample(ctx, s)?));
    }
    for s in case.series.iter().flatten() {
        let (pod, container) = (s.pod.or("pod-1"), s.container.or("app"));
        let r = Resource::from(s.resource);
        let (from, step, count) = (s.from_s, s.step_s, s.count.0);
        let values = s.values.as_deref().unwrap_or_default();
        if values.is_empty() {
            return Err("series.values: empty".into());
        }
        // A bound on the samples one case expands to, so that a malformed count fails the
        // case instead of exhausting memory (the shared cases use at most 11 520).
        if count > MAX_SERIES_COUNT {
            return Err(format!(
                "series.count: {count} exceeds the runner's limit of {MAX_SERIES_COUNT}"
            ));
        }
        for i in 0..count.max(0) {
            let at_s = from + i as f64 * step;
            list.push((
                at_s,
                Observation::Usage(UsageSample {
                    pod: pod.to_owned(),
                    container: container.to_owned(),
                    resource: r,
                    usage: values[(i as usize) % values.len()],
                    at: ctx.at(at_s),
                }),
            ));
        }
    }
    list.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(list.into_iter().map(|(_, o)| o).collect())
}

fn integer_cpu_containers(list: Option<Vec<LenientStr>>) -> Vec<String> {
    list.into_iter().flatten().filter_map(|s| s.0).collect()
}

fn run_recommender(ctx: &Ctx, case: &Value) -> R {
    let case: RecommenderCase = schema::parse(case)?;
    let settings = &ctx.settings;
    let mut target = VpaTarget::default();
    let mut policy = pod_policy(case.policy.clone().map(|p| p.0))?;
    let estimators = match &case.estimators {
        Some(est) => PodEstimators::constant(
            resources_of(est.target),
            resources_of(est.lower_bound),
            resources_of(est.upper_bound),
        ),
        None => PodEstimators::from_settings(settings),
    };
    for c in case.containers.iter().flatten() {
        let name = c.name.as_str();
        target.observe_container(c.pod.or("pod-1"), name, settings, ctx.at(0.0));
        if let Some(list) = &c.controlled_resources {
            let list = list.as_ref().ok_or("controlled_resources: not a list")?;
            policy
                .get_or_insert_with(PodResourcePolicy::default)
                .container_policies
                .push(ContainerResourcePolicy {
                    container_name: name.to_owned(),
                    controlled_resources: Some(list.iter().map(|r| (*r).into()).collect()),
                    ..Default::default()
                });
        }
    }
    for o in expand_observations(ctx, &case)? {
        let at = match &o {
            Observation::Usage(s) => s.at,
            Observation::Oom(x) => x.at,
        };
        target.record_observation(&o, policy.as_ref(), settings, at, &mut ());
    }
    let integer = integer_cpu_containers(case.integer_cpu_containers);
    let rec = target.recommend_with(&estimators, policy.as_ref(), &integer, settings);
    let e = case.expect.take("expect")?;
    no_rest("expect", &e.rest)?;
    let Some(containers) = e.containers else {
        return Ok(());
    };
    for (name, x) in &containers {
        let got = rec
            .containers
            .iter()
            .find(|c| c.container_name == *name)
            .ok_or_else(|| format!("containers.{name}: expected a recommendation, got none"))?;
        if x.name.is_some() {
            return Err(format!(
                "containers.{name}: unsupported key \"name\" (runner does not check it)"
            ));
        }
        no_rest(&format!("containers.{name}"), &x.rest)?;
        check_container(name, x, got)?;
        for (want_present, list) in [(true, &x.present), (false, &x.absent)] {
            for r in list.iter().flatten() {
                let r = Resource::from(*r);
                for (bound, res) in [
                    ("target", &got.target),
                    ("lower_bound", &got.lower_bound),
                    ("upper_bound", &got.upper_bound),
                ] {
                    check_eq(
                        &format!("{name}.{bound}.{r:?} present"),
                        want_present,
                        res.get(r).is_some(),
                    )?;
                }
            }
        }
    }
    Ok(())
}

/// The four bounds of an expected container beside the ones computed.
fn bounds<'a>(
    want: &'a ExpectedContainer,
    got: &'a RecommendedContainerResources,
) -> [(
    &'static str,
    &'a Option<Option<ResourcesJson>>,
    &'a Resources,
); 4] {
    [
        ("target", &want.target, &got.target),
        ("lower_bound", &want.lower_bound, &got.lower_bound),
        ("upper_bound", &want.upper_bound, &got.upper_bound),
        (
            "uncapped_target",
            &want.uncapped_target,
            &got.uncapped_target,
        ),
    ]
}

/// Compare the resources given in the expected maps (a missing resource is not checked).
fn check_container(name: &str, want: &ExpectedContainer, got: &RecommendedContainerResources) -> R {
    for (key, w, res) in bounds(want, got) {
        let Some(w) = w else { continue };
        let w = resources_of(*w);
        for r in Resource::ALL {
            if let Some(v) = w.get(r) {
                check_eq(
                    &format!(
                        "{name}.{key}.{}",
                        if r == Resource::Cpu { "cpu" } else { "memory" }
                    ),
                    Some(v),
                    res.get(r),
                )?;
            }
        }
    }
    Ok(())
}

// === kind: postprocess ===

fn recommendation(r: Option<RecommendationJson>) -> Option<RecommendedPodResources> {
    let containers = r?
        .containers
        .unwrap_or_default()
        .into_iter()
        .map(|c| RecommendedContainerResources {
            container_name: c.name,
            target: resources_of(c.target),
            lower_bound: resources_of(c.lower_bound),
            upper_bound: resources_of(c.upper_bound),
            uncapped_target: resources_of(c.uncapped_target),
        })
        .collect();
    Some(RecommendedPodResources { containers })
}

fn run_postprocess(ctx: &Ctx, case: &Value) -> R {
    let case: PostprocessCase = schema::parse(case)?;
    let rec = recommendation(case.recommendation);
    let policy = pod_policy(case.policy.map(|p| p.0))?;
    let integer = integer_cpu_containers(case.integer_cpu_containers);
    let got = post_process(
        rec,
        policy.as_ref(),
        &integer,
        &ctx.settings.container_recommendation_max_allowed,
    );
    let e = case.expect.take("expect")?;
    no_rest("expect", &e.rest)?;
    if let Some(None) = e.recommendation {
        return match got {
            None => Ok(()),
            Some(r) => Err(format!("recommendation: expected null, got {r:?}")),
        };
    }
    let got = got.ok_or("recommendation: expected a recommendation, got null")?;
    let want = e.containers.unwrap_or_default();
    check_eq("containers.len", want.len(), got.containers.len())?;
    for (w, g) in want.iter().zip(&got.containers) {
        let name = w.name.as_deref().ok_or("name: missing")?;
        check_eq("containers[].name", name, g.container_name.as_str())?;
        check_container(name, w, g)?;
        for (key, wv, res) in bounds(w, g) {
            if let Some(wv) = wv {
                check_eq(&format!("{name}.{key}"), resources_of(*wv), *res)?;
            }
        }
    }
    Ok(())
}

// === kind: amount ===

fn run_amount(case: &Value) -> R {
    let case: AmountCase = schema::parse(case)?;
    for (i, c) in case.checks.iter().flatten().enumerate() {
        let f = c.function.as_str();
        let what = format!("checks[{i}] {f}");
        let input = || number_f64(Some(&c.input.get("input")?), "input");
        let input_int = || number_i64(Some(&c.input.get("input")?), "input");
        let expect_int = || match c.expect.get("expect")? {
            AmountExpect::Number(n) => number_i64(Some(&n), "expect"),
            AmountExpect::Resources(_) => Err("expect: not an integer".to_owned()),
        };
        let int = |v: &Deferred<Int>, key: &str| v.get(key).map(|n| n.0);
        let r: R = match f {
            "cpu_amount_from_cores" => check_eq(
                &what,
                expect_int()?,
                amount::cpu_amount_from_cores(input()?),
            ),
            "cores_from_cpu_amount" => check_f64(
                &what,
                match c.expect.get("expect")? {
                    AmountExpect::Number(n) => number_f64(Some(&n), "expect")?,
                    AmountExpect::Resources(_) => return Err("expect: not a number".into()),
                },
                amount::cores_from_cpu_amount(input_int()?),
                c.tolerance.opt("tolerance")?,
            ),
            "memory_amount_from_bytes" => check_eq(
                &what,
                expect_int()?,
                amount::memory_amount_from_bytes(input()?),
            ),
            "scale_resource" => check_eq(
                &what,
                expect_int()?,
                amount::scale_resource(int(&c.amount, "amount")?, c.factor.get("factor")?),
            ),
            "resource_amount_from_float" => check_eq(
                &what,
                expect_int()?,
                amount::resource_amount_from_float(input()?),
            ),
            "round_up_to_scale" => {
                let value = int(&c.value, "value")?;
                let got = amount::round_up_to_scale(value, int(&c.scale, "scale")?);
                let (v, err) = match got {
                    Ok(v) => (v, false),
                    Err(_) => (value, true),
                };
                check_eq(&what, expect_int()?, v)?;
                match c.error.opt("error")? {
                    Some(want) => check_eq(&format!("{what} error"), want, err),
                    None => Ok(()),
                }
            }
            "output_rounding" => {
                let input = Resources {
                    cpu: c.cpu.opt("cpu")?.map(|n| n.0),
                    memory: c.memory.opt("memory")?.map(|n| n.0),
                };
                let got = round_output(
                    input,
                    c.round_cpu_millicores
                        .opt("round_cpu_millicores")?
                        .map_or(1, |n| n.0),
                    c.round_memory_bytes
                        .opt("round_memory_bytes")?
                        .map_or(1, |n| n.0),
                );
                let want = match c.expect.get("expect") {
                    Ok(AmountExpect::Resources(r)) => r.into(),
                    _ => Resources::default(),
                };
                check_eq(&what, want, got)
            }
            "round_up_to_whole_cores" => check_eq(
                &what,
                expect_int()?,
                amount::round_up_to_whole_cores(input_int()?),
            ),
            other => Err(format!("unknown fn {other:?}")),
        };
        r?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::VpaCase;
    use serde_json::json;

    fn run(case: serde_json::Value) -> Result<(), String> {
        VpaCase::from_value(case)?.run()
    }

    fn amount(expect: serde_json::Value) -> serde_json::Value {
        json!({"kind": "amount", "checks": [
            {"fn": "round_up_to_whole_cores", "input": 1500.0, "expect": expect,
             "unused_by_this_fn": "anything"}
        ]})
    }

    #[test]
    fn integers_may_be_written_as_floats_and_unknown_step_keys_are_ignored() {
        assert_eq!(run(amount(json!(2000.0))), Ok(()));
        assert!(
            run(amount(json!(1000)))
                .unwrap_err()
                .contains("expected 1000, got 2000")
        );
    }

    #[test]
    fn unknown_expectation_keys_fail_the_case() {
        let case = json!({"kind": "policy", "expect": {"scaling_mode": "Auto", "oops": 1}});
        assert!(run(case).unwrap_err().contains("unsupported key \"oops\""));
        let case = json!({"kind": "policy", "expect": {"scaling_mode": "Auto", "notes": "x"}});
        assert_eq!(run(case), Ok(()));
    }

    #[test]
    fn fields_of_other_ops_are_checked_only_when_read() {
        // An OOM does not read `resource`; a usage sample does.
        let case = |op: &str| {
            json!({"kind": "aggregate", "steps": [
                {"op": op, "value": 1024, "resource": 7, "at_s": 1}
            ]})
        };
        assert_eq!(run(case("oom")), Ok(()));
        assert!(run(case("sample")).unwrap_err().contains("resource:"));
    }

    #[test]
    fn unknown_settings_and_malformed_input_fail_without_panicking() {
        let case = json!({"kind": "amount", "settings": {"no_such_setting": 1}});
        assert!(run(case).unwrap_err().contains("no_such_setting"));
        let case = json!({"kind": "histogram", "histogram": "linear"});
        assert!(run(case).is_err());
    }
}
