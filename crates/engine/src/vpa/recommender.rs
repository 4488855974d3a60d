//! Per-pod recommendation, output rounding and post-processing
//! (`recommender/logic/recommender.go`, `recommender/model/types.go` `ResourcesAsResourceList`,
//! `recommender/routines/cpu_integer_post_processor.go`, `utils/vpa/capping.go`;
//! specification sections 8–10).

use serde::{Deserialize, Serialize};

use super::aggregate::AggregateContainerState;
use super::amount::{
    Resource, Resources, cpu_amount_from_cores, memory_amount_from_bytes, round_up_to_scale,
    round_up_to_whole_cores, scale_resource,
};
use super::estimator::{EstimatorBase, EstimatorChain, EstimatorStep, apply_step};
use super::policy::{AggregationPolicy, PodResourcePolicy};
use super::settings::VpaSettings;
use crate::time::go::duration_nanos;

/// Upper-bound confidence multiplier m = 1.0, e = +1 (literals in `recommender.go`).
pub(crate) const UPPER_BOUND_MULTIPLIER: (f64, f64) = (1.0, 1.0);
/// Lower-bound confidence multiplier m = 0.001, e = −2.
pub(crate) const LOWER_BOUND_MULTIPLIER: (f64, f64) = (0.001, -2.0);

/// The recommendation for one container (upstream `RecommendedContainerResources`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecommendedContainerResources {
    /// Container name.
    pub container_name: String,
    /// Recommended request.
    pub target: Resources,
    /// Lowest request still considered adequate.
    pub lower_bound: Resources,
    /// Highest request that can still be justified.
    pub upper_bound: Resources,
    /// The target before capping (integer-CPU rounding does apply to it).
    pub uncapped_target: Resources,
}

/// The recommendation for all containers of a target, sorted by container name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecommendedPodResources {
    /// One entry per container.
    pub containers: Vec<RecommendedContainerResources>,
}

/// The estimator chains of one bound, per resource.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BoundEstimators {
    /// CPU chain.
    pub cpu: EstimatorChain,
    /// Memory chain.
    pub memory: EstimatorChain,
}

impl BoundEstimators {
    fn estimate(&self, state: &AggregateContainerState, min: Resources) -> Resources {
        let with_min = |chain: &EstimatorChain, resource: Resource| {
            let x = chain.estimate(resource, state);
            match min.get(resource) {
                Some(m) => apply_step(EstimatorStep::Min(m), x, state),
                None => x,
            }
        };
        Resources::new(
            with_min(&self.cpu, Resource::Cpu),
            with_min(&self.memory, Resource::Memory),
        )
    }
}

/// The three estimators of `CreatePodResourceRecommender` (before the pod minimum, which
/// depends on the number of containers and is added by `recommend_pod`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PodEstimators {
    /// Target: percentile + margin.
    pub target: BoundEstimators,
    /// Lower bound: percentile + margin + confidence multiplier (0.001, −2).
    pub lower_bound: BoundEstimators,
    /// Upper bound: percentile + margin + confidence multiplier (1.0, +1).
    pub upper_bound: BoundEstimators,
}

impl PodEstimators {
    /// `CreatePodResourceRecommender` with the settings' percentiles, margin and confidence
    /// intervals.
    pub fn from_settings(s: &VpaSettings) -> Self {
        let chain = |p: f64, confidence: Option<((f64, f64), i64)>| {
            let mut steps = vec![EstimatorStep::Margin(s.safety_margin_fraction)];
            if let Some(((multiplier, exponent), interval_ns)) = confidence {
                steps.push(EstimatorStep::ConfidenceMultiplier {
                    multiplier,
                    exponent,
                    interval_ns,
                });
            }
            EstimatorChain {
                base: EstimatorBase::Percentile(p),
                steps,
            }
        };
        let cpu_i = duration_nanos(s.confidence_interval_cpu);
        let mem_i = duration_nanos(s.confidence_interval_memory);
        Self {
            target: BoundEstimators {
                cpu: chain(s.target_cpu_percentile, None),
                memory: chain(s.target_memory_percentile, None),
            },
            lower_bound: BoundEstimators {
                cpu: chain(
                    s.lower_bound_cpu_percentile,
                    Some((LOWER_BOUND_MULTIPLIER, cpu_i)),
                ),
                memory: chain(
                    s.lower_bound_memory_percentile,
                    Some((LOWER_BOUND_MULTIPLIER, mem_i)),
                ),
            },
            upper_bound: BoundEstimators {
                cpu: chain(
                    s.upper_bound_cpu_percentile,
                    Some((UPPER_BOUND_MULTIPLIER, cpu_i)),
                ),
                memory: chain(
                    s.upper_bound_memory_percentile,
                    Some((UPPER_BOUND_MULTIPLIER, mem_i)),
                ),
            },
        }
    }

    /// Estimators returning fixed amounts (the translated upstream unit tests).
    pub fn constant(target: Resources, lower_bound: Resources, upper_bound: Resources) -> Self {
        let c = |r: Resources| BoundEstimators {
            cpu: EstimatorChain {
                base: EstimatorBase::Constant(r.cpu.unwrap_or(0)),
                steps: vec![],
            },
            memory: EstimatorChain {
                base: EstimatorBase::Constant(r.memory.unwrap_or(0)),
                steps: vec![],
            },
        };
        Self {
            target: c(target),
            lower_bound: c(lower_bound),
            upper_bound: c(upper_bound),
        }
    }
}

/// One container to recommend for: its name, aggregation and resolved policy.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ContainerInput<'a> {
    /// Container name.
    pub name: &'a str,
    /// Its aggregation (merged over pods).
    pub state: &'a AggregateContainerState,
    /// Scaling mode and controlled resources.
    pub policy: AggregationPolicy,
}

/// `FilterControlledResources`: keep only the controlled resources.
fn filter_controlled(r: Resources, policy: &AggregationPolicy) -> Resources {
    Resources {
        cpu: r.cpu.filter(|_| policy.controls_cpu),
        memory: r.memory.filter(|_| policy.controls_memory),
    }
}

/// `ResourcesAsResourceList` rounding: each present amount rounded up to a multiple of the
/// scale; a scale ≤ 0 leaves it unchanged (upstream logs the error).
pub fn round_output(r: Resources, round_cpu_millicores: i64, round_memory_bytes: i64) -> Resources {
    let round = |v: Option<i64>, scale: i64| v.map(|v| round_up_to_scale(v, scale).unwrap_or(v));
    Resources {
        cpu: round(r.cpu, round_cpu_millicores),
        memory: round(r.memory, round_memory_bytes),
    }
}

/// The pod minimum split over `n` containers (`GetRecommendedPodResources`).
pub(crate) fn pod_minimum(settings: &VpaSettings, n: usize) -> Resources {
    let fraction = 1.0 / n.max(1) as f64;
    Resources::new(
        scale_resource(
            cpu_amount_from_cores(settings.pod_min_cpu_millicores * 0.001),
            fraction,
        ),
        scale_resource(
            memory_amount_from_bytes(settings.pod_min_memory_mb * 1024.0 * 1024.0),
            fraction,
        ),
    )
}

/// `GetRecommendedPodResources` + `MapToListOfRecommendedContainerResources`: drop `Off`
/// containers, estimate every bound with the pod minimum split over the rest, keep the
/// controlled resources, round the output, sort by name. The uncapped target is the target.
pub(crate) fn recommend_pod(
    estimators: &PodEstimators,
    settings: &VpaSettings,
    containers: &[ContainerInput<'_>],
) -> RecommendedPodResources {
    let active: Vec<&ContainerInput<'_>> = containers
        .iter()
        .filter(|c| c.policy.scaling_mode != super::policy::ContainerScalingMode::Off)
        .collect();
    let min = pod_minimum(settings, active.len());
    let mut out: Vec<RecommendedContainerResources> = active
        .iter()
        .map(|c| {
            let bound = |b: &BoundEstimators| {
                round_output(
                    filter_controlled(b.estimate(c.state, min), &c.policy),
                    settings.round_cpu_millicores,
                    settings.round_memory_bytes,
                )
            };
            let target = bound(&estimators.target);
            RecommendedContainerResources {
                container_name: c.name.to_owned(),
                target,
                lower_bound: bound(&estimators.lower_bound),
                upper_bound: bound(&estimators.upper_bound),
                uncapped_target: target,
            }
        })
        .collect();
    out.sort_by(|a, b| a.container_name.cmp(&b.container_name));
    RecommendedPodResources { containers: out }
}

/// The integer-CPU post-processor: CPU of opted-in containers rounded up to whole cores in
/// target, bounds and uncapped target.
pub(crate) fn apply_integer_cpu(rec: &mut RecommendedPodResources, opted_in: &[String]) {
    for c in &mut rec.containers {
        if opted_in.contains(&c.container_name) {
            for r in [
                &mut c.target,
                &mut c.lower_bound,
                &mut c.upper_bound,
                &mut c.uncapped_target,
            ] {
                r.cpu = r.cpu.map(round_up_to_whole_cores);
            }
        }
    }
}

/// `applyVPAPolicyForContainer` / `ApplyVPAPolicy`: for target, lower and upper bound, raise
/// each present resource to `minAllowed`, then lower it to `maxAllowed` (the policy's, with
/// missing resources from the global maximum). Zero limits are ignored; the uncapped target
/// is untouched. `None` in, `None` out.
pub(crate) fn apply_vpa_policy(
    rec: Option<RecommendedPodResources>,
    policy: Option<&PodResourcePolicy>,
    global_max_allowed: &Resources,
) -> Option<RecommendedPodResources> {
    let mut rec = rec?;
    for c in &mut rec.containers {
        let container_policy = policy.and_then(|p| p.for_container(&c.container_name));
        let min_allowed = container_policy.map(|p| p.min_allowed).unwrap_or_default();
        let mut max_allowed = container_policy.map(|p| p.max_allowed).unwrap_or_default();
        max_allowed.cpu = max_allowed.cpu.or(global_max_allowed.cpu);
        max_allowed.memory = max_allowed.memory.or(global_max_allowed.memory);
        for r in [&mut c.target, &mut c.lower_bound, &mut c.upper_bound] {
            for resource in Resource::ALL {
                if let Some(v) = r.get_mut(resource) {
                    if let Some(min) = min_allowed.get(resource)
                        && min != 0
                        && *v < min
                    {
                        *v = min;
                    }
                    if let Some(max) = max_allowed.get(resource)
                        && max != 0
                        && *v > max
                    {
                        *v = max;
                    }
                }
            }
        }
    }
    Some(rec)
}

/// The post-processors in the recommender's order: integer CPU for the opted-in containers
/// (pass none when `--cpu-integer-post-processor-enabled` is off), then capping with the
/// policy and the global maximum.
pub fn post_process(
    rec: Option<RecommendedPodResources>,
    policy: Option<&PodResourcePolicy>,
    integer_cpu_containers: &[String],
    global_max_allowed: &Resources,
) -> Option<RecommendedPodResources> {
    let mut rec = rec;
    if let Some(r) = rec.as_mut() {
        apply_integer_cpu(r, integer_cpu_containers);
    }
    apply_vpa_policy(rec, policy, global_max_allowed)
}
