//! The replica calculator: what one spec metric proposes. This is `replica_calculator.go`
//! (`GetResourceReplicas`, `GetRawResourceReplicas`, `GetMetricReplicas`,
//! `calcPlainMetricReplicas`, `GetObjectMetricReplicas`, `GetObjectPerPodMetricReplicas`,
//! `getUsageRatioReplicaCount`, `getReadyPodsCount`, `GetExternalMetricReplicas`,
//! `GetExternalPerPodMetricReplicas`, `groupPods`, `calculateRequests`), the ratio helpers of
//! `metrics/utilization.go`, the sample shaping of `metrics/client.go`, and the per-type
//! dispatch of `horizontal.go` (`computeReplicasForMetric`, `computeStatusFor*Metric`), without
//! the I/O: samples come from the [`Observation`].
//!
//! # Arithmetic
//!
//! Kubernetes does these sums in `int64` and these conversions with Go's `int32(float64)`,
//! which wrap or are undefined at the edges. Here:
//!
//! * sums of samples and requests are exact (`i128`), so an average that fits `i64` is always
//!   right; a utilization percentage outside `i32` is an error, as in the current upstream
//!   `GetResourceUtilizationRatio`;
//! * the External sums saturate at `i64::MAX` exactly where upstream does;
//! * every float → integer conversion saturates (`f64 as i32` in Rust: ±inf to the bounds,
//!   NaN to 0), so no input makes the engine panic;
//! * the saturation points upstream spells out (Object/External Value proposals above
//!   `MaxInt32`, External AverageValue proposals and status) are reproduced.

use std::collections::BTreeMap;

use crate::{
    hpa::condition::ConditionReason,
    hpa::observation::{MetricSample, Observation, Pod, PodPhase},
    hpa::settings::Settings,
    hpa::spec::{MetricSpec, MetricTarget, MetricTargetType},
    time::Time,
};

use super::{MetricFailure, MetricOutcome, MetricProposal, PodGroups};

/// The resource whose samples get the CPU readiness rules of `groupPods`
/// (`v1.ResourceCPU`).
const CPU: &str = "cpu";

/// Go's zero `time.Time` (0001-01-01T00:00:00Z), in milliseconds since the Unix epoch: what
/// an unset `LastTransitionTime` compares as.
const GO_ZERO_TIME: Time = Time::from_unix_millis(-62_135_596_800_000);

/// Tolerance band (`Tolerances` in replica_calculator.go): within when
/// `(1 - scale_down) <= ratio <= (1 + scale_up)`.
///
/// The two sides differ only with KEP-4951 per-direction tolerances
/// (`spec.behavior.scale_{down,up}.tolerance`); `tolerancesForHpa` in horizontal.go builds
/// the value, the calculator only consults it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerances {
    /// How far below 1 the usage ratio may fall before a scale-down is proposed.
    pub scale_down: f64,
    /// How far above 1 the usage ratio may rise before a scale-up is proposed.
    pub scale_up: f64,
}

impl Tolerances {
    /// Both sides equal to the controller tolerance (no per-direction override).
    pub const fn uniform(tolerance: f64) -> Self {
        Tolerances {
            scale_down: tolerance,
            scale_up: tolerance,
        }
    }

    /// `Tolerances.isWithin`: the ratio is close enough to 1 that the metric proposes no
    /// change. A NaN ratio is never within.
    pub fn is_within(&self, ratio: f64) -> bool {
        (1.0 - self.scale_down) <= ratio && ratio <= (1.0 + self.scale_up)
    }
}

/// `computeReplicasForMetric` for one spec metric: the proposal with the status Kubernetes
/// reports for it, or the failure with its ScalingActive reason and error text, plus the
/// `groupPods` result when a pod-based calculation got that far.
///
/// `observation.current_replicas` is `specReplicas`; `observation.status_replicas` (default:
/// `current_replicas`) is `statusReplicas`, used by the Object AverageValue and External
/// AverageValue targets as upstream does.
///
/// `MetricFailure::message` is the error Kubernetes puts after "the HPA was unable to compute
/// the replica count: " in the ScalingActive condition.
pub fn replicas_for_metric(
    index: usize,
    metric: &MetricSpec,
    observation: &Observation,
    settings: &Settings,
    tolerances: Tolerances,
    now: Time,
) -> MetricOutcome {
    let ctx = Ctx {
        observation,
        settings,
        tolerances,
        now,
    };
    let (result, pod_groups) = match metric {
        MetricSpec::Resource { name, target } => {
            let (r, g) = ctx.resource_metric(name, None, target);
            (
                r.map_err(|m| fail(ConditionReason::FailedGetResourceMetric, m)),
                g,
            )
        }
        MetricSpec::ContainerResource {
            name,
            container,
            target,
        } => {
            let (r, g) = ctx.resource_metric(name, Some(container), target);
            (
                r.map_err(|m| fail(ConditionReason::FailedGetContainerResourceMetric, m)),
                g,
            )
        }
        MetricSpec::Pods { name, target } => {
            let (r, g) = ctx.pods_metric(name, target);
            (
                r.map_err(|m| fail(ConditionReason::FailedGetPodsMetric, m)),
                g,
            )
        }
        MetricSpec::Object { name, target } => (
            ctx.object_metric(name, target)
                .map_err(|m| fail(ConditionReason::FailedGetObjectMetric, m)),
            None,
        ),
        MetricSpec::External { name, target } => (
            ctx.external_metric(name, target)
                .map_err(|m| fail(ConditionReason::FailedGetExternalMetric, m)),
            None,
        ),
        // computeReplicasForMetric's default arm.
        MetricSpec::Unknown { type_name } => (
            Err(fail(
                ConditionReason::InvalidMetricSourceType,
                format!("unknown metric source type {type_name:?}"),
            )),
            None,
        ),
    };
    MetricOutcome {
        index,
        result,
        pod_groups,
    }
}

/// `groupPods` for one metric: how the selected pods sort into ready, unready, missing and
/// ignored given the samples the observation holds for the metric (fetch failures aside, so
/// the grouping is available even when the calculation stops earlier).
///
/// Resource and ContainerResource metrics on `cpu` get the CPU readiness rules; Pods metrics
/// never do (upstream passes no resource name). Object and External metrics have no per-pod
/// samples, so every pod that is neither ignored nor pending is missing.
pub fn group_pods(
    observation: &Observation,
    metric: &MetricSpec,
    settings: &Settings,
    now: Time,
) -> PodGroups {
    walk(observation, Source::of(metric), false, settings, now).to_pod_groups(&observation.pods)
}

/// The error `computeReplicasForMetric` returns for a failed metric: the condition's error
/// (`failure.message`) with the wrapping horizontal.go adds per type. The reconciliation
/// quotes the first one in "invalid metrics (N invalid out of M), first error is: ...".
pub fn metric_error(metric: &MetricSpec, failure: &MetricFailure) -> String {
    let message = &failure.message;
    match metric {
        // computeStatusForObjectMetric wraps only the AverageValue path, and
        // computeReplicasForMetric wraps every Object error once more.
        MetricSpec::Object { name, target } => match target.target_type {
            MetricTargetType::AverageValue if target.average_value.is_some() => {
                format!(
                    "failed to get object metric value: failed to get {name} object metric: {message}"
                )
            }
            _ => format!("failed to get object metric value: {message}"),
        },
        MetricSpec::Pods { .. } => format!("failed to get pods metric value: {message}"),
        // computeStatusForExternalMetric wraps the calculation errors of each path.
        MetricSpec::External { name, target } if target.average_value.is_some() => {
            format!("failed to get {name} external metric: {message}")
        }
        MetricSpec::External { name, target } if target.value.is_some() => {
            format!("failed to get external metric {name}: {message}")
        }
        MetricSpec::Resource { .. }
        | MetricSpec::ContainerResource { .. }
        | MetricSpec::External { .. }
        | MetricSpec::Unknown { .. } => message.clone(),
    }
}

fn fail(reason: ConditionReason, message: String) -> MetricFailure {
    MetricFailure { reason, message }
}

// ---------------------------------------------------------------------------------------------
// One walk over the pods: samples (`metrics/client.go`), `groupPods` and the sums
// ---------------------------------------------------------------------------------------------

/// Where a metric's per-pod value comes from.
#[derive(Clone, Copy)]
enum Source<'m> {
    /// `GetResourceMetric` → `getPodMetrics` / `getContainerMetrics`: the pod value is the
    /// sum over containers (absent when a container lacks the resource, which the
    /// observation gives as a `None` value); with a container name, that container's usage.
    /// Orphan samples count as items; they carry no containers, so they have no container
    /// value.
    Resource {
        name: &'m str,
        container: Option<&'m str>,
    },
    /// `GetRawMetric`: one value per pod from the custom metrics API, orphans included.
    Pods(&'m str),
    /// Object, External and unknown metrics: no per-pod samples.
    Nothing,
}

impl<'m> Source<'m> {
    fn of(metric: &'m MetricSpec) -> Self {
        match metric {
            MetricSpec::Resource { name, .. } => Source::Resource {
                name,
                container: None,
            },
            MetricSpec::ContainerResource {
                name, container, ..
            } => Source::Resource {
                name,
                container: Some(container),
            },
            MetricSpec::Pods { name, .. } => Source::Pods(name),
            MetricSpec::Object { .. }
            | MetricSpec::External { .. }
            | MetricSpec::Unknown { .. } => Source::Nothing,
        }
    }

    /// The resource whose name decides the CPU rules of `groupPods` (Pods metrics never get
    /// them: upstream passes no resource name).
    fn resource(self) -> &'m str {
        match self {
            Source::Resource { name, .. } => name,
            Source::Pods(_) | Source::Nothing => "",
        }
    }

    /// A listed pod's item of the metrics API (`None`: no item) and its usable value.
    fn read(self, pod: &Pod) -> Option<(&MetricSample, Option<i64>)> {
        match self {
            Source::Resource { name, container } => {
                let sample = pod.metrics.get(name)?;
                let value = match container {
                    None => sample.value,
                    Some(c) => pod
                        .containers
                        .iter()
                        .find(|k| k.name == c)
                        .and_then(|k| k.usage.get(name).copied()),
                };
                Some((sample, value))
            }
            Source::Pods(name) => pod.metrics.get(name).map(|s| (s, s.value)),
            Source::Nothing => None,
        }
    }

    /// An orphan's item (`None`: no item) and its usable value.
    fn read_orphan(self, metrics: &BTreeMap<String, MetricSample>) -> Option<Option<i64>> {
        match self {
            Source::Resource { name, container } => {
                let sample = metrics.get(name)?;
                Some(if container.is_none() {
                    sample.value
                } else {
                    None
                })
            }
            Source::Pods(name) => metrics.get(name).map(|s| s.value),
            Source::Nothing => None,
        }
    }
}

/// One metric's walk over the observation: what the metrics API answered (`items`), how
/// `groupPods` sorted the listed pods, and the sums the ratios take over what is left once
/// `removeMetricsForPods` dropped the ignored and unready pods (the ready pods and the
/// samples of unlisted pods).
///
/// Upstream keys samples and requests by pod name, builds `PodMetricsInfo`, groups it, deletes
/// from it and sums it: four passes and a map per metric. Every sum is exact (`i128`), so the
/// order of the terms does not matter, and the ready pods are exactly the listed pods whose
/// sample survives the removal (pod names are unique and no orphan names a listed pod, which
/// `validate_observation` guarantees). So one pass that sums as it groups gives the same
/// figures without an allocation or a string comparison per pod; the pods that are not ready
/// are kept as indices for the rare second step (missing and unready pods filled in).
#[derive(Debug, Default)]
struct Walk {
    /// Items of the metrics API: listed pods and orphans with an entry for the metric.
    items: usize,
    ready_count: usize,
    /// `groupPods`' other sets, as indices into `observation.pods` in pod order.
    unready: Vec<usize>,
    missing: Vec<usize>,
    ignored: Vec<usize>,
    /// Σ sample over the ready pods.
    ready_sum: i128,
    /// Σ request over the ready pods (when requests were asked for).
    ready_requests: i128,
    /// `calculateRequests`' error: the first listed pod (ignored pods included) without a
    /// request, when requests were asked for.
    request_error: Option<String>,
    /// Samples of unlisted pods with a usable value, and their sum.
    orphan_count: usize,
    orphan_sum: i128,
}

/// Walks the pods once for one metric; with `requests` (the utilization path) it also reads
/// every pod's request as `calculateRequests` does and sums those of the ready pods.
///
/// `groupPods`: in this order, a pod is ignored (deleting or Failed), unready (Pending),
/// missing (no sample), unready by the CPU rules (cpu only), else ready.
///
/// The CPU rules distrust samples taken while a pod starts: CPU usage during start-up says
/// little about steady load. While `start + cpu_initialization_period` is after `now`, the
/// pod counts only if Ready and its sample covers a full window after the last readiness
/// change; after that, it is unready only if it is not Ready and turned so within
/// `initial_readiness_delay` of starting (it has never been ready). All comparisons are
/// strict (`After`/`Before`).
fn walk(
    observation: &Observation,
    source: Source<'_>,
    requests: bool,
    settings: &Settings,
    now: Time,
) -> Walk {
    let mut w = Walk::default();
    let resource = source.resource();
    let cpu = resource == CPU;
    let container = match source {
        Source::Resource { container, .. } => container,
        Source::Pods(_) | Source::Nothing => None,
    };
    for (i, pod) in observation.pods.iter().enumerate() {
        let read = source.read(pod);
        if read.is_some() {
            w.items += 1;
        }
        let request = if requests {
            match pod_request(pod, container, resource) {
                Ok(r) => r,
                Err(e) => {
                    w.request_error.get_or_insert(e);
                    0
                }
            }
        } else {
            0
        };
        if pod.deleting || pod.phase == PodPhase::Failed {
            w.ignored.push(i);
            continue;
        }
        if pod.phase == PodPhase::Pending {
            w.unready.push(i);
            continue;
        }
        let Some((sample, Some(value))) = read else {
            w.missing.push(i);
            continue;
        };
        if cpu && cpu_unready(pod, sample, settings, now) {
            w.unready.push(i);
            continue;
        }
        w.ready_count += 1;
        w.ready_sum += i128::from(value);
        w.ready_requests += i128::from(request);
    }
    for metrics in observation.orphan_samples.values() {
        let Some(value) = source.read_orphan(metrics) else {
            continue;
        };
        w.items += 1;
        if let Some(value) = value {
            w.orphan_count += 1;
            w.orphan_sum += i128::from(value);
        }
    }
    w
}

impl Walk {
    /// The number of samples left after `removeMetricsForPods`: ready pods and orphans.
    fn sample_count(&self) -> usize {
        self.ready_count + self.orphan_count
    }

    /// The decision's copy: names sorted (upstream's sets print sorted). Only the pods that
    /// are not ready are copied, so a steady target copies nothing.
    fn to_pod_groups(&self, pods: &[Pod]) -> PodGroups {
        let names = |set: &[usize]| {
            let mut v: Vec<String> = set.iter().map(|&i| pods[i].name.clone()).collect();
            v.sort_unstable();
            v
        };
        PodGroups {
            ready_count: i32::try_from(self.ready_count).unwrap_or(i32::MAX),
            unready: names(&self.unready),
            missing: names(&self.missing),
            ignored: names(&self.ignored),
        }
    }
}

/// The CPU branch of `groupPods`.
fn cpu_unready(pod: &Pod, sample: &MetricSample, settings: &Settings, now: Time) -> bool {
    let (Some(ready), Some(start)) = (pod.ready, pod.start_time) else {
        return true;
    };
    let transition = pod.ready_transition.unwrap_or(GO_ZERO_TIME);
    if start.plus(settings.cpu_initialization_period) > now {
        !ready || sample.timestamp < transition.plus(sample.window)
    } else {
        !ready && start.plus(settings.initial_readiness_delay) > transition
    }
}

/// `getReadyPodsCount`: pods Running with condition Ready = True.
pub(crate) fn ready_pods_count(pods: &[Pod]) -> Result<usize, String> {
    if pods.is_empty() {
        return Err(NO_PODS.to_string());
    }
    Ok(pods
        .iter()
        .filter(|p| p.phase == PodPhase::Running && p.ready == Some(true))
        .count())
}

const NO_PODS: &str = "no pods returned by selector while calculating replica count";
const NO_TARGETED_METRICS: &str =
    "did not receive metrics for targeted pods (pods might be unready)";

// ---------------------------------------------------------------------------------------------
// Ratios (`metrics/utilization.go`)
// ---------------------------------------------------------------------------------------------

/// `GetResourceUtilizationRatio` on the sums over the pods with both a sample and a request
/// (samples of unlisted pods are skipped): `utilization = (Σ sample × 100) ÷ Σ request`
/// truncated to an integer percentage, `ratio = utilization ÷ target` (from the truncated
/// percentage), and the raw average `Σ sample ÷ count` (integer division).
fn utilization_ratio(
    sample_sum: i128,
    request_sum: i128,
    count: usize,
    target: i32,
) -> Result<(f64, i32, i64), String> {
    if request_sum == 0 {
        return Err("no metrics returned matched known pods".to_string());
    }
    let percentage = sample_sum * 100 / request_sum;
    let utilization = i32::try_from(percentage)
        .map_err(|_| format!("resource utilization {percentage} is outside the int32 range"))?;
    // count > 0 because request_sum != 0; an average of i64 values fits i64.
    let count = i128::try_from(count).unwrap_or(i128::MAX).max(1);
    let raw_average = saturate_i64(sample_sum / count);
    Ok((
        f64::from(utilization) / f64::from(target),
        utilization,
        raw_average,
    ))
}

/// `GetMetricUsageRatio` on the sum and count of every sample, unlisted pods included:
/// `usage = Σ sample ÷ count` (integer division), `ratio = usage ÷ target`.
fn usage_ratio(sum: i128, count: usize, target: i64) -> (f64, i64) {
    let count = i128::try_from(count).unwrap_or(i128::MAX).max(1);
    let usage = saturate_i64(sum / count);
    (usage as f64 / target as f64, usage)
}

fn saturate_i64(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// `int32(math.Ceil(x))` without Go's undefined out-of-range conversion: saturating, NaN → 0.
fn ceil_i32(x: f64) -> i32 {
    // `as` from f64 saturates at the bounds and maps NaN to 0.
    x.ceil() as i32
}

/// `int64(math.Ceil(x))`, saturating, NaN → 0.
fn ceil_i64(x: f64) -> i64 {
    x.ceil() as i64
}

fn count_f64(n: usize) -> f64 {
    n as f64
}

// ---------------------------------------------------------------------------------------------
// The calculations
// ---------------------------------------------------------------------------------------------

/// What one calculation produced.
struct Computed {
    replicas: i32,
    ratio: f64,
    utilization: Option<i32>,
    average_value: Option<i64>,
    value: Option<i64>,
}

impl Computed {
    /// A per-pod calculation's result: its utilization (Resource targets) and average value.
    fn per_pod(replicas: i32, ratio: f64, utilization: Option<i32>, average_value: i64) -> Self {
        Computed {
            replicas,
            ratio,
            utilization,
            average_value: Some(average_value),
            value: None,
        }
    }

    fn into_proposal(self) -> MetricProposal {
        MetricProposal {
            replicas: self.replicas,
            current_average_utilization: self.utilization,
            current_average_value: self.average_value,
            current_value: self.value,
            usage_ratio: Some(self.ratio),
        }
    }
}

type Calc = (Result<MetricProposal, String>, Option<PodGroups>);

struct Ctx<'a> {
    observation: &'a Observation,
    settings: &'a Settings,
    tolerances: Tolerances,
    now: Time,
}

impl<'a> Ctx<'a> {
    fn spec_replicas(&self) -> i32 {
        self.observation.current_replicas
    }

    fn status_replicas(&self) -> i32 {
        self.observation
            .status_replicas
            .unwrap_or(self.observation.current_replicas)
    }

    fn unavailable(&self, name: &str) -> bool {
        self.observation.unavailable_metrics.contains(name)
    }

    /// `computeStatusForResourceMetricGeneric`: an `average_value` target takes the raw path
    /// (`GetRawResourceReplicas`), else `average_utilization` the utilization path
    /// (`GetResourceReplicas`); neither is an error. Errors of the calculation are wrapped
    /// as "failed to get <resource> utilization: ...", as upstream does for both paths.
    fn resource_metric(
        &self,
        resource: &str,
        container: Option<&str>,
        target: &MetricTarget,
    ) -> Calc {
        enum Kind {
            Average(i64),
            Utilization(i32),
        }
        let kind = match (target.average_value, target.average_utilization) {
            (Some(average), _) => Kind::Average(average),
            (None, Some(utilization)) => Kind::Utilization(utilization),
            (None, None) => {
                return (
                    Err("invalid resource metric source: neither a utilization target nor a value target was set"
                        .to_string()),
                    None,
                );
            }
        };
        let fetched = if self.unavailable(resource) {
            Err(
                "unable to fetch metrics from resource metrics API: the metric is unavailable"
                    .to_string(),
            )
        } else {
            // Only the utilization path reads requests (`calculateRequests`).
            let requests = matches!(kind, Kind::Utilization(_));
            let source = Source::Resource {
                name: resource,
                container,
            };
            let w = walk(self.observation, source, requests, self.settings, self.now);
            if w.items == 0 {
                Err("no metrics returned from resource metrics API".to_string())
            } else {
                Ok(w)
            }
        };
        let walked = match fetched {
            Ok(s) => s,
            Err(e) => {
                return (
                    Err(format!(
                        "failed to get {resource} utilization: unable to get metrics for resource {resource}: {e}"
                    )),
                    None,
                );
            }
        };
        let (result, groups) = match kind {
            Kind::Average(average) => self.plain_metric_replicas(walked, average),
            Kind::Utilization(utilization) => {
                self.utilization_replicas(walked, utilization, resource, container)
            }
        };
        (
            result
                .map(Computed::into_proposal)
                .map_err(|e| format!("failed to get {resource} utilization: {e}")),
            groups,
        )
    }

    /// `GetResourceReplicas` after the fetch.
    fn utilization_replicas(
        &self,
        w: Walk,
        target: i32,
        resource: &str,
        container: Option<&str>,
    ) -> (Result<Computed, String>, Option<PodGroups>) {
        let pods = &self.observation.pods;
        let current = self.spec_replicas();
        if pods.is_empty() {
            return (Err(NO_PODS.to_string()), None);
        }
        let groups = Some(w.to_pod_groups(pods));
        if w.sample_count() == 0 {
            return (Err(NO_TARGETED_METRICS.to_string()), groups);
        }
        if let Some(e) = w.request_error {
            return (Err(e), groups);
        }
        let (ratio, utilization, raw_average) =
            match utilization_ratio(w.ready_sum, w.ready_requests, w.ready_count, target) {
                Ok(v) => v,
                Err(e) => return (Err(e), groups),
            };
        let done = |replicas| {
            Ok(Computed::per_pod(
                replicas,
                ratio,
                Some(utilization),
                raw_average,
            ))
        };
        if let Some(replicas) = self.unfilled(&w, ratio, current) {
            return (done(replicas), groups);
        }
        let scale_up_with_unready = !w.unready.is_empty() && ratio > 1.0;

        // The pods filled in join the sums with their requests (every listed pod has one:
        // `request_error` is unset).
        let request = |pod: usize| pod_request(&pods[pod], container, resource).unwrap_or(0);
        let (mut sample_sum, mut request_sum) = (w.ready_sum, w.ready_requests);
        let mut filled = 0usize;
        if !w.missing.is_empty() {
            if ratio < 1.0 {
                // On a scale-down a missing pod is taken at its full request, or at the
                // target when that is above 100 %, so that it never pushes further down.
                let fallback = i128::from(target.max(100));
                for &pod in &w.missing {
                    let request = request(pod);
                    sample_sum += i128::from(saturate_i64(i128::from(request) * fallback / 100));
                    request_sum += i128::from(request);
                    filled += 1;
                }
            } else if ratio > 1.0 {
                // On a scale-up it is taken as idle, so that it never pushes further up.
                for &pod in &w.missing {
                    request_sum += i128::from(request(pod));
                    filled += 1;
                }
            }
        }
        if scale_up_with_unready {
            for &pod in &w.unready {
                request_sum += i128::from(request(pod));
                filled += 1;
            }
        }

        let new_ratio =
            match utilization_ratio(sample_sum, request_sum, w.ready_count + filled, target) {
                Ok((r, _, _)) => r,
                Err(e) => return (Err(e), groups),
            };
        (
            done(self.rebalanced(current, ratio, new_ratio, w.sample_count() + filled)),
            groups,
        )
    }

    /// The answer of `GetResourceReplicas` and `calcPlainMetricReplicas` when no pod is to be
    /// filled in (none missing, and no unready pod on a scale-up): the current count within
    /// the tolerance, else `ceil(ratio × ready pods)`; `None` when pods are filled in first.
    fn unfilled(&self, w: &Walk, ratio: f64, current: i32) -> Option<i32> {
        let scale_up_with_unready = !w.unready.is_empty() && ratio > 1.0;
        if scale_up_with_unready || !w.missing.is_empty() {
            return None;
        }
        Some(if self.tolerances.is_within(ratio) {
            current
        } else {
            ceil_i32(ratio * count_f64(w.ready_count))
        })
    }

    /// The common tail of `GetResourceReplicas` and `calcPlainMetricReplicas` after missing
    /// and unready pods were filled in: no change when the new ratio is within tolerance or
    /// points the other way, or when the new count would move against the ratio.
    fn rebalanced(&self, current: i32, ratio: f64, new_ratio: f64, sample_count: usize) -> i32 {
        if self.tolerances.is_within(new_ratio)
            || (ratio < 1.0 && new_ratio > 1.0)
            || (ratio > 1.0 && new_ratio < 1.0)
        {
            return current;
        }
        let new_replicas = ceil_i32(new_ratio * count_f64(sample_count));
        if (new_ratio < 1.0 && new_replicas > current)
            || (new_ratio > 1.0 && new_replicas < current)
        {
            return current;
        }
        new_replicas
    }

    /// `calcPlainMetricReplicas`: Pods metrics and Resource / ContainerResource AverageValue
    /// targets (walked with their resource, so the CPU rules applied).
    fn plain_metric_replicas(
        &self,
        w: Walk,
        target: i64,
    ) -> (Result<Computed, String>, Option<PodGroups>) {
        let pods = &self.observation.pods;
        let current = self.spec_replicas();
        if pods.is_empty() {
            return (Err(NO_PODS.to_string()), None);
        }
        let groups = Some(w.to_pod_groups(pods));
        if w.sample_count() == 0 {
            return (Err(NO_TARGETED_METRICS.to_string()), groups);
        }
        let sum = w.ready_sum + w.orphan_sum;
        let (ratio, usage) = usage_ratio(sum, w.sample_count(), target);
        let done = |replicas| Ok(Computed::per_pod(replicas, ratio, None, usage));
        if let Some(replicas) = self.unfilled(&w, ratio, current) {
            return (done(replicas), groups);
        }
        let scale_up_with_unready = !w.unready.is_empty() && ratio > 1.0;

        // Missing pods are taken at the target on a scale-down and as idle on a scale-up,
        // unready pods as idle on a scale-up.
        let (mut sum, mut count) = (sum, w.sample_count());
        if !w.missing.is_empty() {
            if ratio < 1.0 {
                sum += i128::from(target) * i128::try_from(w.missing.len()).unwrap_or(0);
                count += w.missing.len();
            } else if ratio > 1.0 {
                count += w.missing.len();
            }
        }
        if scale_up_with_unready {
            count += w.unready.len();
        }

        let (new_ratio, _) = usage_ratio(sum, count, target);
        (
            done(self.rebalanced(current, ratio, new_ratio, count)),
            groups,
        )
    }

    /// `computeStatusForPodsMetric` → `GetMetricReplicas`.
    fn pods_metric(&self, name: &str, target: &MetricTarget) -> Calc {
        let Some(average) = target.average_value else {
            // Upstream dereferences the absent quantity; the engine reports it instead.
            return (
                Err("invalid pods metric source: the average value target was not set".to_string()),
                None,
            );
        };
        let walked = if self.unavailable(name) {
            Err(
                "unable to fetch metrics from custom metrics API: the metric is unavailable"
                    .to_string(),
            )
        } else {
            let w = walk(
                self.observation,
                Source::Pods(name),
                false,
                self.settings,
                self.now,
            );
            if w.items == 0 {
                Err("no metrics returned from custom metrics API".to_string())
            } else {
                Ok(w)
            }
        };
        let walked = match walked {
            Ok(w) => w,
            Err(e) => return (Err(format!("unable to get metric {name}: {e}")), None),
        };
        let (result, groups) = self.plain_metric_replicas(walked, average);
        (result.map(Computed::into_proposal), groups)
    }

    /// `computeStatusForObjectMetric`: a Value target (type Value with `value`) uses
    /// `GetObjectMetricReplicas` with specReplicas, an AverageValue target (type AverageValue
    /// with `average_value`) `GetObjectPerPodMetricReplicas` with statusReplicas.
    fn object_metric(&self, name: &str, target: &MetricTarget) -> Result<MetricProposal, String> {
        enum Kind {
            Value(i64),
            Average(i64),
        }
        let kind = match (target.target_type, target.value, target.average_value) {
            (MetricTargetType::Value, Some(v), _) => Kind::Value(v),
            (MetricTargetType::AverageValue, _, Some(a)) => Kind::Average(a),
            _ => {
                return Err(
                    "invalid object metric source: neither a value target nor an average value target was set"
                        .to_string(),
                );
            }
        };
        let usage = if self.unavailable(name) {
            Err("unable to fetch metrics from custom metrics API: the metric is unavailable")
        } else {
            self.observation.object_metrics.get(name).copied().ok_or(
                "unable to fetch metrics from custom metrics API: no value returned for the object",
            )
        }
        .map_err(|e| format!("unable to get metric {name}: {e}"))?;
        match kind {
            Kind::Value(target) => {
                let ratio = usage as f64 / target as f64;
                let replicas = self.usage_ratio_replica_count(ratio)?;
                Ok(MetricProposal {
                    replicas,
                    current_average_utilization: None,
                    current_average_value: None,
                    current_value: Some(usage),
                    usage_ratio: Some(ratio),
                })
            }
            Kind::Average(target) => {
                // GetObjectPerPodMetricReplicas.
                let n = self.status_replicas();
                let ratio = usage as f64 / (target as f64 * f64::from(n));
                let replicas = if self.tolerances.is_within(ratio) {
                    n
                } else {
                    ceil_i32(usage as f64 / target as f64)
                };
                Ok(MetricProposal {
                    replicas,
                    current_average_utilization: None,
                    current_average_value: Some(ceil_i64(usage as f64 / f64::from(n))),
                    current_value: None,
                    usage_ratio: Some(ratio),
                })
            }
        }
    }

    /// `getUsageRatioReplicaCount`: with pods running, the ratio times the ready pods
    /// (capped at MaxInt32) unless within tolerance; from zero, `ceil(ratio)` with neither
    /// tolerance nor pods, so that a target at 0 replicas can wake up.
    fn usage_ratio_replica_count(&self, ratio: f64) -> Result<i32, String> {
        let current = self.spec_replicas();
        if current == 0 {
            return Ok(ceil_i32(ratio));
        }
        if self.tolerances.is_within(ratio) {
            return Ok(current);
        }
        let ready = ready_pods_count(&self.observation.pods)
            .map_err(|e| format!("unable to calculate ready pods: {e}"))?;
        let proposal = ratio * count_f64(ready);
        if proposal > f64::from(i32::MAX) {
            return Ok(i32::MAX);
        }
        Ok(ceil_i32(proposal))
    }

    /// `computeStatusForExternalMetric`: `average_value` set → `GetExternalPerPodMetricReplicas`
    /// with statusReplicas; else `value` set → `GetExternalMetricReplicas` with specReplicas.
    fn external_metric(&self, name: &str, target: &MetricTarget) -> Result<MetricProposal, String> {
        let values = if self.unavailable(name) {
            Err("unable to fetch metrics from external metrics API: the metric is unavailable")
        } else {
            match self.observation.external_metrics.get(name) {
                Some(v) if !v.is_empty() => Ok(v.as_slice()),
                _ => Err("no metrics returned from external metrics API"),
            }
        };
        if let Some(average) = target.average_value {
            let values =
                values.map_err(|e| format!("unable to get external metric {name}: {e}"))?;
            return Ok(self.external_per_pod(values, average));
        }
        if let Some(value) = target.value {
            let values =
                values.map_err(|e| format!("unable to get external metric {name}: {e}"))?;
            // GetExternalMetricReplicas: a positive value that would overflow stops the sum
            // at MaxInt64; a negative overflow wraps, as Go's int64 addition does.
            let mut usage: i64 = 0;
            for &v in values {
                if v > 0 && usage > i64::MAX - v {
                    usage = i64::MAX;
                    break;
                }
                usage = usage.wrapping_add(v);
            }
            let ratio = usage as f64 / value as f64;
            let replicas = self.usage_ratio_replica_count(ratio)?;
            return Ok(MetricProposal {
                replicas,
                current_average_utilization: None,
                current_average_value: None,
                current_value: Some(usage),
                usage_ratio: Some(ratio),
            });
        }
        Err("invalid external metric source: neither a value target nor an average value target was set"
            .to_string())
    }

    /// `GetExternalPerPodMetricReplicas`.
    fn external_per_pod(&self, values: &[i64], target: i64) -> MetricProposal {
        // Upstream adds in int64 and takes a negative running sum as an overflow
        // (MaxInt64, stop). Wrapping addition reproduces exactly that.
        let mut usage: i64 = 0;
        for &v in values {
            usage = usage.wrapping_add(v);
            if usage < 0 {
                usage = i64::MAX;
                break;
            }
        }
        let n = self.status_replicas();
        let ratio = usage as f64 / (target as f64 * f64::from(n));
        let replicas = if self.tolerances.is_within(ratio) {
            n
        } else {
            let proposal = (usage as f64 / target as f64).ceil();
            if proposal > f64::from(i32::MAX) {
                i32::MAX
            } else {
                ceil_i32(proposal)
            }
        };
        let saturated = usage as f64 >= i64::MAX as f64;
        let average = if saturated {
            i64::MAX
        } else {
            ceil_i64(usage as f64 / f64::from(n))
        };
        MetricProposal {
            replicas,
            current_average_utilization: None,
            current_average_value: Some(average),
            current_value: None,
            usage_ratio: Some(ratio),
        }
    }
}

/// One pod's request as `calculateRequests` reads it: the observation carries each pod's
/// request summed as upstream sums it (`Pod::requests`) and each container's request; a pod
/// or container without one is an error naming it.
fn pod_request(pod: &Pod, container: Option<&str>, resource: &str) -> Result<i64, String> {
    match container {
        Some(c) => {
            let k = pod
                .containers
                .iter()
                .find(|k| k.name == c)
                .ok_or_else(|| format!("container {c} not found in Pod {}", pod.name))?;
            k.requests.get(resource).copied().ok_or_else(|| {
                format!(
                    "missing request for {resource} in container {c} of Pod {}",
                    pod.name
                )
            })
        }
        None => pod.requests.get(resource).copied().ok_or_else(|| {
            match pod
                .containers
                .iter()
                .find(|k| !k.requests.contains_key(resource))
            {
                Some(k) => format!(
                    "missing request for {resource} in container {} of Pod {}",
                    k.name, pod.name
                ),
                None => format!("missing request for {resource} in Pod {}", pod.name),
            }
        }),
    }
}

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;
