//! The replica calculator's per-pod steps as they were before the one-pass [`super::walk`]:
//! `PodMetricsInfo` built per metric, `groupPods` over it, `removeMetricsForPods`,
//! `calculateRequests` and the ratios each in their own pass. Kept, for tests only, as the
//! oracle the one-pass walk is checked against on random pod sets
//! (`one_pass_walk_matches_the_per_step_calculator`).

use std::time::Duration;

use super::{
    CPU, Calc, Computed, Ctx, GO_ZERO_TIME, NO_PODS, NO_TARGETED_METRICS, ceil_i32, count_f64,
    pod_request, saturate_i64,
};
use crate::{
    hpa::PodGroups,
    hpa::observation::{Observation, Pod, PodPhase},
    hpa::settings::Settings,
    hpa::spec::{MetricSpec, MetricTarget},
    time::Time,
};

/// `groupPods` for one metric: how the selected pods sort into ready, unready, missing and
/// ignored given the samples the observation holds for the metric (fetch failures aside, so
/// the grouping is available even when the calculation stops earlier).
///
/// Resource and ContainerResource metrics on `cpu` get the CPU readiness rules; Pods metrics
/// never do (upstream passes no resource name). Object and External metrics have no per-pod
/// samples, so every pod that is neither ignored nor pending is missing.
pub(super) fn ref_group_pods(
    observation: &Observation,
    metric: &MetricSpec,
    settings: &Settings,
    now: Time,
) -> PodGroups {
    let (samples, resource) = match metric {
        MetricSpec::Resource { name, .. } => (
            resource_samples(observation, name, None).samples,
            name.as_str(),
        ),
        MetricSpec::ContainerResource {
            name, container, ..
        } => (
            resource_samples(observation, name, Some(container)).samples,
            name.as_str(),
        ),
        MetricSpec::Pods { name, .. } => (pods_metric_samples(observation, name).samples, ""),
        MetricSpec::Object { .. } | MetricSpec::External { .. } | MetricSpec::Unknown { .. } => {
            (Samples::with_pods(observation.pods.len()), "")
        }
    };
    group(&observation.pods, &samples, resource, settings, now).to_pod_groups(&observation.pods)
}

// ---------------------------------------------------------------------------------------------
// Samples (`metrics/client.go`)
// ---------------------------------------------------------------------------------------------

/// One pod's sample (`metricsclient.PodMetric`).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Sample {
    value: i64,
    timestamp: Time,
    window: Duration,
}

/// `PodMetricsInfo`: the samples of one metric, for the listed pods by their index in
/// `observation.pods`, and the values of the samples for pods that are not listed.
///
/// Upstream keys the samples by pod name. Pod names are unique and no orphan sample names a
/// listed pod (`validate_observation` rejects both), so an index is the same key without a
/// string comparison or an allocation per pod: one evaluation costs a few vectors per metric,
/// and every sum below is exact (`i128`), so the iteration order does not matter.
#[derive(Debug, Default)]
struct Samples {
    listed: Vec<Option<Sample>>,
    /// Orphans carry no request and are never grouped: only their values are read.
    orphans: Vec<i64>,
    /// The number of `Some` in `listed` plus `orphans.len()`.
    len: usize,
}

impl Samples {
    fn with_pods(pods: usize) -> Self {
        Samples {
            listed: vec![None; pods],
            orphans: Vec::new(),
            len: 0,
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn get(&self, pod: usize) -> Option<&Sample> {
        self.listed.get(pod).and_then(Option::as_ref)
    }

    /// `samples[pod] = sample` (insert or replace).
    fn insert(&mut self, pod: usize, sample: Sample) {
        if let Some(slot) = self.listed.get_mut(pod) {
            if slot.is_none() {
                self.len += 1;
            }
            *slot = Some(sample);
        }
    }

    /// The first sample for a pod wins (`entry().or_insert`), as a map keyed by name did.
    fn insert_if_absent(&mut self, pod: usize, sample: Sample) {
        if self.get(pod).is_none() {
            self.insert(pod, sample);
        }
    }

    fn push_orphan(&mut self, value: i64) {
        self.orphans.push(value);
        self.len += 1;
    }

    /// `removeMetricsForPods`.
    fn remove(&mut self, pods: &[usize]) {
        for &pod in pods {
            if let Some(slot) = self.listed.get_mut(pod)
                && slot.take().is_some()
            {
                self.len -= 1;
            }
        }
    }

    /// Every value, listed pods and orphans.
    fn values(&self) -> impl Iterator<Item = i64> + '_ {
        self.listed
            .iter()
            .flatten()
            .map(|s| s.value)
            .chain(self.orphans.iter().copied())
    }
}

/// What a metrics API answered: `items` counts the API's items (for its "no metrics
/// returned" error), `samples` holds the pods with a usable value.
struct Fetched {
    items: usize,
    samples: Samples,
}

/// `GetResourceMetric` → `getPodMetrics` / `getContainerMetrics`: the pod value is the sum
/// over containers (absent when a container lacks the resource, which the observation gives
/// as a `None` value); with a container name, that container's usage. Orphan samples count
/// as items; they carry no containers, so they have no container value.
fn resource_samples(observation: &Observation, resource: &str, container: Option<&str>) -> Fetched {
    let mut items = 0usize;
    let mut samples = Samples::with_pods(observation.pods.len());
    for (i, pod) in observation.pods.iter().enumerate() {
        let Some(sample) = pod.metrics.get(resource) else {
            continue;
        };
        items += 1;
        let value = match container {
            None => sample.value,
            Some(c) => pod
                .containers
                .iter()
                .find(|k| k.name == c)
                .and_then(|k| k.usage.get(resource).copied()),
        };
        if let Some(value) = value {
            samples.insert_if_absent(
                i,
                Sample {
                    value,
                    timestamp: sample.timestamp,
                    window: sample.window,
                },
            );
        }
    }
    for metrics in observation.orphan_samples.values() {
        let Some(sample) = metrics.get(resource) else {
            continue;
        };
        items += 1;
        if container.is_none()
            && let Some(value) = sample.value
        {
            samples.push_orphan(value);
        }
    }
    Fetched { items, samples }
}

/// `GetRawMetric`: one value per pod from the custom metrics API, orphans included.
fn pods_metric_samples(observation: &Observation, metric: &str) -> Fetched {
    let mut items = 0usize;
    let mut samples = Samples::with_pods(observation.pods.len());
    for (i, pod) in observation.pods.iter().enumerate() {
        let Some(sample) = pod.metrics.get(metric) else {
            continue;
        };
        items += 1;
        if let Some(value) = sample.value {
            samples.insert_if_absent(
                i,
                Sample {
                    value,
                    timestamp: sample.timestamp,
                    window: sample.window,
                },
            );
        }
    }
    for metrics in observation.orphan_samples.values() {
        let Some(sample) = metrics.get(metric) else {
            continue;
        };
        items += 1;
        if let Some(value) = sample.value {
            samples.push_orphan(value);
        }
    }
    Fetched { items, samples }
}

// ---------------------------------------------------------------------------------------------
// groupPods
// ---------------------------------------------------------------------------------------------

/// `groupPods`' four sets, as indices into `observation.pods` in pod order.
#[derive(Debug, Default)]
struct Grouping {
    ready_count: usize,
    unready: Vec<usize>,
    missing: Vec<usize>,
    ignored: Vec<usize>,
}

impl Grouping {
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

/// `groupPods`: in this order, a pod is ignored (deleting or Failed), unready (Pending),
/// missing (no sample), unready by the CPU rules (cpu only), else ready.
///
/// The CPU rules distrust samples taken while a pod starts: CPU usage during start-up says
/// little about steady load. While `start + cpu_initialization_period` is after `now`, the
/// pod counts only if Ready and its sample covers a full window after the last readiness
/// change; after that, it is unready only if it is not Ready and turned so within
/// `initial_readiness_delay` of starting (it has never been ready). All comparisons are
/// strict (`After`/`Before`).
fn group(
    pods: &[Pod],
    samples: &Samples,
    resource: &str,
    settings: &Settings,
    now: Time,
) -> Grouping {
    let mut g = Grouping::default();
    let cpu = resource == CPU;
    for (i, pod) in pods.iter().enumerate() {
        if pod.deleting || pod.phase == PodPhase::Failed {
            g.ignored.push(i);
            continue;
        }
        if pod.phase == PodPhase::Pending {
            g.unready.push(i);
            continue;
        }
        let Some(sample) = samples.get(i) else {
            g.missing.push(i);
            continue;
        };
        if cpu && cpu_unready(pod, sample, settings, now) {
            g.unready.push(i);
            continue;
        }
        g.ready_count += 1;
    }
    g
}

/// The CPU branch of `groupPods`.
fn cpu_unready(pod: &Pod, sample: &Sample, settings: &Settings, now: Time) -> bool {
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

/// `GetResourceUtilizationRatio`: over the pods with both a sample and a request (samples of
/// unlisted pods are skipped), `utilization = (Σ sample × 100) ÷ Σ request` truncated to an
/// integer percentage, `ratio = utilization ÷ target` (from the truncated percentage), and
/// the raw average `Σ sample ÷ count` (integer division).
fn utilization_ratio(
    samples: &Samples,
    requests: &[i64],
    target: i32,
) -> Result<(f64, i32, i64), String> {
    let mut sample_sum: i128 = 0;
    let mut request_sum: i128 = 0;
    let mut count: i128 = 0;
    // Orphans have no request: only listed pods count.
    for (sample, request) in samples.listed.iter().zip(requests) {
        let Some(sample) = sample else {
            continue;
        };
        sample_sum += i128::from(sample.value);
        request_sum += i128::from(*request);
        count += 1;
    }
    if request_sum == 0 {
        return Err("no metrics returned matched known pods".to_string());
    }
    let percentage = sample_sum * 100 / request_sum;
    let utilization = i32::try_from(percentage)
        .map_err(|_| format!("resource utilization {percentage} is outside the int32 range"))?;
    // count > 0 because request_sum != 0; an average of i64 values fits i64.
    let raw_average = saturate_i64(sample_sum / count.max(1));
    Ok((
        f64::from(utilization) / f64::from(target),
        utilization,
        raw_average,
    ))
}

/// `GetMetricUsageRatio`: `usage = Σ sample ÷ count` (integer division), `ratio = usage ÷
/// target`. Every sample counts, unlisted pods included.
fn usage_ratio(samples: &Samples, target: i64) -> (f64, i64) {
    let sum: i128 = samples.values().map(i128::from).sum();
    let count = i128::try_from(samples.len()).unwrap_or(i128::MAX).max(1);
    let usage = saturate_i64(sum / count);
    (usage as f64 / target as f64, usage)
}

impl Ctx<'_> {
    /// `computeStatusForResourceMetricGeneric`: an `average_value` target takes the raw path
    /// (`GetRawResourceReplicas`), else `average_utilization` the utilization path
    /// (`GetResourceReplicas`); neither is an error. Errors of the calculation are wrapped
    /// as "failed to get <resource> utilization: ...", as upstream does for both paths.
    pub(super) fn ref_resource_metric(
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
            let f = resource_samples(self.observation, resource, container);
            if f.items == 0 {
                Err("no metrics returned from resource metrics API".to_string())
            } else {
                Ok(f.samples)
            }
        };
        let samples = match fetched {
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
            Kind::Average(average) => self.ref_plain_metric_replicas(samples, average, resource),
            Kind::Utilization(utilization) => {
                self.ref_utilization_replicas(samples, utilization, resource, container)
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
    fn ref_utilization_replicas(
        &self,
        mut samples: Samples,
        target: i32,
        resource: &str,
        container: Option<&str>,
    ) -> (Result<Computed, String>, Option<PodGroups>) {
        let pods = &self.observation.pods;
        let current = self.spec_replicas();
        if pods.is_empty() {
            return (Err(NO_PODS.to_string()), None);
        }
        let g = group(pods, &samples, resource, self.settings, self.now);
        let groups = Some(g.to_pod_groups(pods));
        samples.remove(&g.ignored);
        samples.remove(&g.unready);
        if samples.is_empty() {
            return (Err(NO_TARGETED_METRICS.to_string()), groups);
        }
        let requests = match calculate_requests(pods, container, resource) {
            Ok(r) => r,
            Err(e) => return (Err(e), groups),
        };
        let (ratio, utilization, raw_average) = match utilization_ratio(&samples, &requests, target)
        {
            Ok(v) => v,
            Err(e) => return (Err(e), groups),
        };
        let done = |replicas| {
            Ok(Computed {
                replicas,
                ratio,
                utilization: Some(utilization),
                average_value: Some(raw_average),
                value: None,
            })
        };

        let scale_up_with_unready = !g.unready.is_empty() && ratio > 1.0;
        if !scale_up_with_unready && g.missing.is_empty() {
            if self.tolerances.is_within(ratio) {
                return (done(current), groups);
            }
            return (done(ceil_i32(ratio * count_f64(g.ready_count))), groups);
        }

        if !g.missing.is_empty() {
            if ratio < 1.0 {
                // On a scale-down a missing pod is taken at its full request, or at the
                // target when that is above 100 %, so that it never pushes further down.
                let fallback = i128::from(target.max(100));
                for &pod in &g.missing {
                    let request = requests.get(pod).copied().unwrap_or(0);
                    let value = saturate_i64(i128::from(request) * fallback / 100);
                    samples.insert(pod, filled(value));
                }
            } else if ratio > 1.0 {
                // On a scale-up it is taken as idle, so that it never pushes further up.
                for &pod in &g.missing {
                    samples.insert(pod, filled(0));
                }
            }
        }
        if scale_up_with_unready {
            for &pod in &g.unready {
                samples.insert(pod, filled(0));
            }
        }

        let new_ratio = match utilization_ratio(&samples, &requests, target) {
            Ok((r, _, _)) => r,
            Err(e) => return (Err(e), groups),
        };
        (
            done(self.rebalanced(current, ratio, new_ratio, samples.len())),
            groups,
        )
    }

    /// `calcPlainMetricReplicas`: Pods metrics (`resource` empty) and Resource /
    /// ContainerResource AverageValue targets (`resource` set, so the CPU rules apply).
    fn ref_plain_metric_replicas(
        &self,
        mut samples: Samples,
        target: i64,
        resource: &str,
    ) -> (Result<Computed, String>, Option<PodGroups>) {
        let pods = &self.observation.pods;
        let current = self.spec_replicas();
        if pods.is_empty() {
            return (Err(NO_PODS.to_string()), None);
        }
        let g = group(pods, &samples, resource, self.settings, self.now);
        let groups = Some(g.to_pod_groups(pods));
        samples.remove(&g.ignored);
        samples.remove(&g.unready);
        if samples.is_empty() {
            return (Err(NO_TARGETED_METRICS.to_string()), groups);
        }
        let (ratio, usage) = usage_ratio(&samples, target);
        let done = |replicas| {
            Ok(Computed {
                replicas,
                ratio,
                utilization: None,
                average_value: Some(usage),
                value: None,
            })
        };

        let scale_up_with_unready = !g.unready.is_empty() && ratio > 1.0;
        if !scale_up_with_unready && g.missing.is_empty() {
            if self.tolerances.is_within(ratio) {
                return (done(current), groups);
            }
            return (done(ceil_i32(ratio * count_f64(g.ready_count))), groups);
        }

        if !g.missing.is_empty() {
            if ratio < 1.0 {
                for &pod in &g.missing {
                    samples.insert(pod, filled(target));
                }
            } else if ratio > 1.0 {
                for &pod in &g.missing {
                    samples.insert(pod, filled(0));
                }
            }
        }
        if scale_up_with_unready {
            for &pod in &g.unready {
                samples.insert(pod, filled(0));
            }
        }

        let (new_ratio, _) = usage_ratio(&samples, target);
        (
            done(self.rebalanced(current, ratio, new_ratio, samples.len())),
            groups,
        )
    }

    /// `computeStatusForPodsMetric` → `GetMetricReplicas`.
    pub(super) fn ref_pods_metric(&self, name: &str, target: &MetricTarget) -> Calc {
        let Some(average) = target.average_value else {
            // Upstream dereferences the absent quantity; the engine reports it instead.
            return (
                Err("invalid pods metric source: the average value target was not set".to_string()),
                None,
            );
        };
        let samples = if self.unavailable(name) {
            Err(
                "unable to fetch metrics from custom metrics API: the metric is unavailable"
                    .to_string(),
            )
        } else {
            let f = pods_metric_samples(self.observation, name);
            if f.items == 0 {
                Err("no metrics returned from custom metrics API".to_string())
            } else {
                Ok(f.samples)
            }
        };
        let samples = match samples {
            Ok(s) => s,
            Err(e) => return (Err(format!("unable to get metric {name}: {e}")), None),
        };
        let (result, groups) = self.ref_plain_metric_replicas(samples, average, "");
        (result.map(Computed::into_proposal), groups)
    }
}

/// A sample put in for a missing or unready pod; only its value is read afterwards.
fn filled(value: i64) -> Sample {
    Sample {
        value,
        timestamp: GO_ZERO_TIME,
        window: Duration::ZERO,
    }
}

/// `calculateRequests` for every listed pod (ignored pods included): the first error, else
/// every pod's request (read as the calculator reads one).
fn calculate_requests(
    pods: &[Pod],
    container: Option<&str>,
    resource: &str,
) -> Result<Vec<i64>, String> {
    pods.iter()
        .map(|pod| pod_request(pod, container, resource))
        .collect()
}
