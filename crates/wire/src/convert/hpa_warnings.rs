//! The Recommend response's `warnings`: which pod fields the request left out (or sent at
//! their proto default) and what Kubernetes' rules did with those pods because of it.
//!
//! An adapter written off Kubernetes often sends a pod's name, requests and a sample, and
//! nothing else. The rules of `groupPods` (`replica_calculator.go`) then count every such pod
//! as unready for cpu, and the answer is a `FailedGetResourceMetric` "did not receive metrics
//! for targeted pods (pods might be unready)" that names no field. The warnings name them.
//!
//! They are derived after the decision, from the engine's values built from the request (a
//! field the wire left out is `None` there) and from the pod groups the engine reported; they
//! never feed back into the decision, and they are not stored. A warning is given only where
//! the absence had a consequence under the rules as the engine applies them
//! (`engine::hpa::replicas`):
//!
//! * cpu metrics (`groupPods`' CPU branch): a pod counted unready because it has no Ready
//!   condition (`ready` unset) or no start time, or because it is not Ready and has no
//!   transition time after the cpu initialization period (an unset `LastTransitionTime`
//!   compares as Go's zero time, so the pod reads as never having been ready);
//! * pod metrics (Resource, ContainerResource, Pods): a pod counted missing because its
//!   sample, the sample's value or the container's usage is absent (a sample dropped as stale
//!   by `max_sample_age` was sent, so it is not warned about); when no pod has the sample at
//!   all the metric fails before grouping ("no metrics returned"), and the pods it would have
//!   counted are named;
//! * Object and External Value targets (`getReadyPodsCount`): a Running pod without a Ready
//!   condition is not among the ready pods the usage ratio is multiplied by, when that count
//!   was used (pods running and the ratio outside the tolerance).
//!
//! An absent `phase` is taken as Running, as most callers only send running pods, and
//! `deleting` false is what a live pod has: neither changes a count, so neither is warned
//! about.

use std::collections::{BTreeSet, HashMap};

use crate::{
    engine::{
        hpa::observation::{Observation, Pod, PodPhase},
        hpa::settings::Settings,
        hpa::spec::{HorizontalSpec, MetricSpec, MetricTargetType},
        hpa::{Decision, MetricOutcome, defaults},
        time::Time,
    },
    pb::v1 as pb,
};

/// Pod names listed per warning; `pods_total` counts them all. A request may carry thousands
/// of pods: the response must not grow with them.
pub const MAX_WARNING_PODS: usize = 10;

/// The cpu resource, whose samples `groupPods` checks against readiness.
const CPU: &str = "cpu";

/// The warnings for one Recommend: `decision` is what the engine decided from `spec`,
/// `observation`, `settings` (the server defaults with the target's overrides) and `now`.
/// Empty when every pod carries the fields the rules read.
pub fn recommend_warnings(
    spec: &HorizontalSpec,
    observation: &Observation,
    settings: &Settings,
    decision: &Decision,
    now: Time,
) -> Vec<pb::InputWarning> {
    let pods = &observation.pods;
    if decision.metrics.is_empty() || pods.is_empty() {
        return Vec::new();
    }
    let default_metric = defaults::default_metric();
    let mut w = Warnings::new(pods);
    for outcome in &decision.metrics {
        // An empty spec is Kubernetes' default metric, cpu at 80% (`SetDefaults`).
        let metric = spec.metrics.get(outcome.index).unwrap_or(&default_metric);
        match metric {
            MetricSpec::Resource { name, .. } => {
                w.pod_metric(observation, outcome, name, None, settings, now);
            }
            MetricSpec::ContainerResource {
                name, container, ..
            } => {
                w.pod_metric(observation, outcome, name, Some(container), settings, now);
            }
            MetricSpec::Pods { name, .. } => {
                // Pods metrics never get the CPU rules: upstream passes no resource name.
                w.pod_metric(observation, outcome, name, None, settings, now);
            }
            MetricSpec::Object { name, target } | MetricSpec::External { name, target } => {
                let value_target = match metric {
                    MetricSpec::Object { .. } => {
                        target.target_type == MetricTargetType::Value && target.value.is_some()
                    }
                    // computeStatusForExternalMetric: average_value first, else value.
                    _ => target.average_value.is_none() && target.value.is_some(),
                };
                if value_target {
                    w.ready_count(spec, observation, outcome, name, settings);
                }
            }
            MetricSpec::Unknown { .. } => {}
        }
    }
    w.finish()
}

/// One field and consequence, and the pods (indexes) it concerns.
struct Entry {
    field: String,
    message: String,
    pods: BTreeSet<usize>,
}

struct Warnings<'p> {
    pods: &'p [Pod],
    /// Pod name → index, built on first use (only when some pod is not ready).
    index: Option<HashMap<&'p str, usize>>,
    entries: Vec<Entry>,
}

impl<'p> Warnings<'p> {
    fn new(pods: &'p [Pod]) -> Self {
        Warnings {
            pods,
            index: None,
            entries: Vec::new(),
        }
    }

    fn add(&mut self, field: String, message: String, pod: usize) {
        if let Some(e) = self
            .entries
            .iter_mut()
            .find(|e| e.field == field && e.message == message)
        {
            e.pods.insert(pod);
        } else {
            self.entries.push(Entry {
                field,
                message,
                pods: BTreeSet::from([pod]),
            });
        }
    }

    /// The indexes of the named pods (the engine's groups name them; names are unique, as
    /// conversion checks).
    fn indexes(&mut self, names: &[String]) -> Vec<usize> {
        let pods = self.pods;
        let index = self.index.get_or_insert_with(|| {
            pods.iter()
                .enumerate()
                .map(|(i, p)| (p.name.as_str(), i))
                .collect()
        });
        names
            .iter()
            .filter_map(|n| index.get(n.as_str()).copied())
            .collect()
    }

    /// A Resource, ContainerResource or Pods metric: the pods `groupPods` counted unready
    /// (cpu) or missing because a field was absent.
    fn pod_metric(
        &mut self,
        observation: &Observation,
        outcome: &MetricOutcome,
        name: &str,
        container: Option<&str>,
        settings: &Settings,
        now: Time,
    ) {
        let Some(groups) = &outcome.pod_groups else {
            self.no_samples(observation, outcome, name, container);
            return;
        };
        // The CPU branch of groupPods applies to Resource and ContainerResource metrics on
        // cpu; `pod_groups.unready` of any other metric holds only Pending pods.
        if name == CPU {
            for i in self.indexes(&groups.unready) {
                self.cpu_unready(i, settings, now);
            }
        }
        for i in self.indexes(&groups.missing) {
            if let Some(field) = absent_sample(&self.pods[i], name, container) {
                let message = missing_message(name, container, &field);
                self.add(field, message, i);
            }
        }
    }

    /// Why the CPU branch of `groupPods` counted pod `i` unready, if a field's absence made
    /// it so: no Ready condition or no start time (`condition == nil ||
    /// pod.Status.StartTime == nil`), or not Ready with no transition time once the cpu
    /// initialization period is over (the unset `LastTransitionTime` is Go's zero time,
    /// before `start + initial readiness delay`: "never been ready"). A Pending pod is
    /// unready by its phase, which the caller sent.
    fn cpu_unready(&mut self, i: usize, settings: &Settings, now: Time) {
        let pod = &self.pods[i];
        if pod.phase == PodPhase::Pending {
            return;
        }
        let no_ready = pod.ready.is_none();
        let no_start = pod.start_time.is_none();
        if no_ready {
            self.add(
                "pods[*].ready".to_owned(),
                "no Ready condition: Kubernetes counts the pod as unready for cpu, so its cpu \
                 sample is left out of the average (and taken as idle on a scale-up)"
                    .to_owned(),
                i,
            );
        }
        if no_start {
            self.add(
                "pods[*].start_time".to_owned(),
                "no start time: Kubernetes counts the pod as unready for cpu, so its cpu sample \
                 is left out of the average (and taken as idle on a scale-up)"
                    .to_owned(),
                i,
            );
        }
        if let (Some(false), Some(start), None) = (pod.ready, pod.start_time, pod.ready_transition)
            && start.plus(settings.cpu_initialization_period) <= now
        {
            self.add(
                "pods[*].ready_transition_time".to_owned(),
                "not Ready and no transition time: the pod reads as never having been ready, \
                 so Kubernetes counts it as unready for cpu (with the time it became unready, \
                 a pod that was once ready keeps its sample)"
                    .to_owned(),
                i,
            );
        }
    }

    /// A pod metric that failed before grouping: when no pod (and no orphan) has the sample,
    /// the metrics API "returned no metrics" and the metric fails; the pods it would have
    /// counted (neither ignored nor pending) are the ones whose sample is absent. A metric
    /// the caller marked unavailable failed for that reason, not for a missing field.
    fn no_samples(
        &mut self,
        observation: &Observation,
        outcome: &MetricOutcome,
        name: &str,
        container: Option<&str>,
    ) {
        let any_sample = observation
            .pods
            .iter()
            .any(|p| p.metrics.contains_key(name))
            || observation
                .orphan_samples
                .values()
                .any(|m| m.contains_key(name));
        if outcome.result.is_ok() || any_sample || observation.unavailable_metrics.contains(name) {
            return;
        }
        let field = format!("pods[*].metrics[{name}]");
        let message = match container {
            None => format!(
                "no {name} sample on any pod: the metric failed (no metrics returned), as \
                 Kubernetes does when the metrics API has nothing for the pods"
            ),
            Some(c) => format!(
                "no {name} sample on any pod: the {name} metric of container {c} failed (no \
                 metrics returned), as Kubernetes does when the metrics API has nothing for \
                 the pods"
            ),
        };
        for (i, pod) in observation.pods.iter().enumerate() {
            if pod.deleting || matches!(pod.phase, PodPhase::Failed | PodPhase::Pending) {
                continue;
            }
            self.add(field.clone(), message.clone(), i);
        }
    }

    /// An Object or External Value target: `getReadyPodsCount` (Running with Ready = True)
    /// multiplies the usage ratio (`getUsageRatioReplicaCount`) when pods are running and the
    /// ratio is outside the tolerance; a Running pod without a Ready condition is not counted.
    fn ready_count(
        &mut self,
        spec: &HorizontalSpec,
        observation: &Observation,
        outcome: &MetricOutcome,
        name: &str,
        settings: &Settings,
    ) {
        let Ok(proposal) = &outcome.result else {
            return;
        };
        let Some(ratio) = proposal.usage_ratio else {
            return;
        };
        if observation.current_replicas <= 0 {
            return;
        }
        let unready: Vec<usize> = observation
            .pods
            .iter()
            .enumerate()
            .filter(|(_, p)| p.phase == PodPhase::Running && p.ready.is_none())
            .map(|(i, _)| i)
            .collect();
        if unready.is_empty() {
            return;
        }
        let tolerances =
            defaults::tolerances_for_hpa(&defaults::set_defaults(spec, settings), settings);
        if tolerances.is_within(ratio) {
            return;
        }
        let message = format!(
            "no Ready condition: the pod is not counted among the ready pods that the Value \
             target of metric {name} multiplies its usage ratio by (Kubernetes counts Running \
             pods with Ready true)"
        );
        for i in unready {
            self.add("pods[*].ready".to_owned(), message.clone(), i);
        }
    }

    fn finish(self) -> Vec<pb::InputWarning> {
        let pods = self.pods;
        self.entries
            .into_iter()
            .map(|e| pb::InputWarning {
                field: e.field,
                pods: e
                    .pods
                    .iter()
                    .take(MAX_WARNING_PODS)
                    .map(|&i| pods[i].name.clone())
                    .collect(),
                pods_total: u32::try_from(e.pods.len()).unwrap_or(u32::MAX),
                message: e.message,
            })
            .collect()
    }
}

/// The absent field that makes a pod missing for a pod metric, as the engine reads samples
/// (`metrics/client.go`: a pod item, then the pod's value or the container's usage); `None`
/// when everything was sent (the sample was dropped later, e.g. as stale).
fn absent_sample(pod: &Pod, name: &str, container: Option<&str>) -> Option<String> {
    let Some(sample) = pod.metrics.get(name) else {
        return Some(format!("pods[*].metrics[{name}]"));
    };
    match container {
        None => sample
            .value
            .is_none()
            .then(|| format!("pods[*].metrics[{name}].value_milli")),
        Some(c) => match pod.containers.iter().find(|k| k.name == c) {
            None => Some("pods[*].containers".to_owned()),
            Some(k) => (!k.usage.contains_key(name))
                .then(|| format!("pods[*].containers[*].usage_milli[{name}]")),
        },
    }
}

/// What being missing means for the calculation (`GetResourceReplicas`,
/// `calcPlainMetricReplicas`): assumed at the target on a scale-down and idle on a scale-up,
/// so that it never pushes the count further.
fn missing_message(name: &str, container: Option<&str>, field: &str) -> String {
    let what = if field.ends_with(".value_milli") {
        format!("a {name} sample without a value")
    } else if field == "pods[*].containers" {
        format!("no container named {}", container.unwrap_or_default())
    } else if field.contains(".containers[*].") {
        format!(
            "container {} has no {name} usage",
            container.unwrap_or_default()
        )
    } else {
        format!("no {name} sample")
    };
    format!(
        "{what}: Kubernetes counts the pod as missing for {name}, so its load is assumed, not \
         measured (at the target or its full request on a scale-down, idle on a scale-up)"
    )
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeMap, time::Duration};

    use prost_types::Timestamp;

    use super::*;
    use crate::{
        convert::{Context, recommend_request},
        engine::hpa::{self, history::History},
        limits::Limits,
    };

    /// The evaluation instant: well past every start time below.
    const NOW: i64 = 1_800_000_000;

    fn ts(seconds: i64) -> Option<Timestamp> {
        Some(Timestamp { seconds, nanos: 0 })
    }

    fn spec(metrics: Vec<pb::MetricSpec>) -> Option<pb::HorizontalSpec> {
        Some(pb::HorizontalSpec {
            min_replicas: Some(1),
            max_replicas: 100,
            metrics,
            ..Default::default()
        })
    }

    fn cpu(utilization: i32) -> pb::MetricSpec {
        pb::MetricSpec {
            r#type: pb::MetricSourceType::Resource as i32,
            name: "cpu".into(),
            target: Some(pb::MetricTarget {
                r#type: pb::MetricTargetType::Utilization as i32,
                average_utilization: Some(utilization),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// What a naive adapter sends: a name, requests and a cpu sample.
    fn naive(name: &str) -> pb::PodSample {
        pb::PodSample {
            name: name.into(),
            requests_milli: BTreeMap::from([("cpu".to_owned(), 500)]),
            metrics: BTreeMap::from([(
                "cpu".to_owned(),
                pb::MetricSample {
                    value_milli: Some(400),
                    ..Default::default()
                },
            )]),
            ..Default::default()
        }
    }

    /// The same pod as Kubernetes would describe it: running, ready for an hour.
    fn complete(name: &str) -> pb::PodSample {
        pb::PodSample {
            phase: pb::PodPhase::Running as i32,
            ready: Some(true),
            start_time: ts(NOW - 3600),
            ready_transition_time: ts(NOW - 3590),
            ..naive(name)
        }
    }

    fn request(pods: Vec<pb::PodSample>) -> pb::RecommendRequest {
        pb::RecommendRequest {
            target_key: "ns/web".into(),
            current_replicas: i32::try_from(pods.len()).unwrap(),
            spec: spec(vec![cpu(50)]),
            pods,
            ..Default::default()
        }
    }

    fn decide(req: pb::RecommendRequest) -> (Decision, Vec<pb::InputWarning>) {
        let limits = Limits::default();
        let ctx = Context {
            limits: &limits,
            trust_request_time: false,
            server_now: Time::from_unix_secs(NOW),
            history_retention: Duration::from_secs(3600),
            scale_to_zero: true,
        };
        let input = recommend_request(req, &ctx).unwrap();
        let settings = input.settings.apply(&Settings::default());
        let decision = hpa::evaluate(
            &settings,
            &input.spec,
            &input.observation,
            &History::default(),
            input.now,
        )
        .unwrap()
        .decision;
        let warnings = recommend_warnings(
            &input.spec,
            &input.observation,
            &settings,
            &decision,
            input.now,
        );
        (decision, warnings)
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("web-{i}")).collect()
    }

    #[test]
    fn a_complete_request_has_no_warnings() {
        let (decision, warnings) = decide(request(vec![complete("web-0"), complete("web-1")]));
        assert_eq!(decision.desired_replicas, 4);
        assert_eq!(warnings, []);
    }

    /// The case that prompted them: every pod unready for cpu, the metric fails, and the
    /// warnings name both fields on every pod.
    #[test]
    fn a_naive_request_names_ready_and_start_time() {
        let (decision, warnings) = decide(request(vec![naive("web-0"), naive("web-1")]));
        assert_eq!(decision.desired_replicas, 2);
        assert!(decision.metrics[0].result.is_err());
        let fields: Vec<_> = warnings.iter().map(|w| w.field.as_str()).collect();
        assert_eq!(fields, ["pods[*].ready", "pods[*].start_time"]);
        for w in &warnings {
            assert_eq!(w.pods, names(2));
            assert_eq!(w.pods_total, 2);
            assert!(w.message.contains("unready for cpu"), "{}", w.message);
        }
    }

    #[test]
    fn the_pod_list_is_capped_and_the_total_counts_all() {
        let pods = names(25).iter().map(|n| naive(n)).collect();
        let (_, warnings) = decide(request(pods));
        assert_eq!(warnings.len(), 2);
        for w in &warnings {
            assert_eq!(w.pods.len(), MAX_WARNING_PODS);
            assert_eq!(w.pods_total, 25);
        }
    }

    #[test]
    fn a_pod_without_a_sample_is_named_missing() {
        let mut quiet = complete("web-1");
        quiet.metrics.clear();
        let mut no_value = complete("web-2");
        no_value.metrics.get_mut("cpu").unwrap().value_milli = None;
        let (decision, warnings) = decide(request(vec![complete("web-0"), quiet, no_value]));
        let groups = decision.metrics[0].pod_groups.as_ref().unwrap();
        assert_eq!(groups.missing, ["web-1", "web-2"]);
        let got: Vec<_> = warnings
            .iter()
            .map(|w| (w.field.as_str(), w.pods.clone()))
            .collect();
        assert_eq!(
            got,
            [
                ("pods[*].metrics[cpu]", vec!["web-1".to_owned()]),
                ("pods[*].metrics[cpu].value_milli", vec!["web-2".to_owned()]),
            ]
        );
    }

    #[test]
    fn no_sample_at_all_names_the_pods_the_metric_would_have_counted() {
        let bare = |name: &str| pb::PodSample {
            metrics: BTreeMap::new(),
            ..complete(name)
        };
        let pending = pb::PodSample {
            phase: pb::PodPhase::Pending as i32,
            ..bare("web-2")
        };
        let (decision, warnings) = decide(request(vec![bare("web-0"), bare("web-1"), pending]));
        assert!(decision.metrics[0].pod_groups.is_none());
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].field, "pods[*].metrics[cpu]");
        assert_eq!(warnings[0].pods, names(2));
    }

    #[test]
    fn an_unavailable_metric_is_not_a_missing_field() {
        let mut req = request(vec![complete("web-0")]);
        req.pods[0].metrics.clear();
        req.unavailable_metrics = vec!["cpu".into()];
        assert_eq!(decide(req).1, []);
    }

    #[test]
    fn not_ready_without_a_transition_time_reads_as_never_ready() {
        let was_ready = pb::PodSample {
            ready: Some(false),
            ready_transition_time: None,
            ..complete("web-1")
        };
        // The same pod with its transition time keeps its sample: it was ready once.
        let with_time = pb::PodSample {
            ready: Some(false),
            ready_transition_time: ts(NOW - 60),
            ..complete("web-1")
        };
        let (decision, warnings) = decide(request(vec![complete("web-0"), was_ready]));
        let groups = decision.metrics[0].pod_groups.as_ref().unwrap();
        assert_eq!(groups.unready, ["web-1"]);
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].field, "pods[*].ready_transition_time");
        assert_eq!(warnings[0].pods, ["web-1"]);
        let (decision, warnings) = decide(request(vec![complete("web-0"), with_time]));
        assert_eq!(
            decision.metrics[0].pod_groups.as_ref().unwrap().ready_count,
            2
        );
        assert_eq!(warnings, []);
    }

    /// Sent states are not warned about: Pending is unready by its phase, a pod starting
    /// within the cpu initialization period and not Ready is unready whatever its transition
    /// time, and an absent phase is Running.
    #[test]
    fn what_the_caller_said_is_not_a_warning() {
        let pending = pb::PodSample {
            phase: pb::PodPhase::Pending as i32,
            ready: None,
            start_time: None,
            ..complete("web-1")
        };
        let starting = pb::PodSample {
            ready: Some(false),
            start_time: ts(NOW - 10),
            ready_transition_time: None,
            ..complete("web-2")
        };
        let no_phase = pb::PodSample {
            phase: pb::PodPhase::Unspecified as i32,
            ..complete("web-3")
        };
        let (decision, warnings) = decide(request(vec![
            complete("web-0"),
            pending,
            starting,
            no_phase,
        ]));
        let groups = decision.metrics[0].pod_groups.as_ref().unwrap();
        assert_eq!(groups.unready, ["web-1", "web-2"]);
        assert_eq!(warnings, []);
    }

    /// Memory has no readiness rules: a naive pod counts, so nothing is warned about.
    #[test]
    fn readiness_matters_for_cpu_only() {
        let pods: Vec<_> = ["web-0", "web-1"]
            .map(|n| {
                let mut p = naive(n);
                p.requests_milli = BTreeMap::from([("memory".to_owned(), 1_000)]);
                p.metrics = BTreeMap::from([(
                    "memory".to_owned(),
                    pb::MetricSample {
                        value_milli: Some(900),
                        ..Default::default()
                    },
                )]);
                p
            })
            .into();
        let mut req = request(pods);
        let mut memory = cpu(50);
        memory.name = "memory".into();
        req.spec = spec(vec![memory]);
        let (decision, warnings) = decide(req);
        assert_eq!(
            decision.metrics[0].pod_groups.as_ref().unwrap().ready_count,
            2
        );
        assert_eq!(warnings, []);
    }

    #[test]
    fn an_external_value_target_counts_ready_pods_only() {
        let external = pb::MetricSpec {
            r#type: pb::MetricSourceType::External as i32,
            name: "queue".into(),
            target: Some(pb::MetricTarget {
                r#type: pb::MetricTargetType::Value as i32,
                value_milli: Some(10_000),
                ..Default::default()
            }),
            ..Default::default()
        };
        let values = |v: i64| {
            BTreeMap::from([(
                "queue".to_owned(),
                pb::ExternalMetricValues {
                    values_milli: vec![v],
                },
            )])
        };
        let mut req = request(vec![complete("web-0"), naive("web-1"), naive("web-2")]);
        req.spec = spec(vec![external]);
        req.external_metrics = values(20_000);
        let (decision, warnings) = decide(req.clone());
        // Ratio 2 × 1 ready pod: 2, where 3 ready pods would give 6.
        assert_eq!(decision.metrics[0].result.as_ref().unwrap().replicas, 2);
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].field, "pods[*].ready");
        assert_eq!(warnings[0].pods, ["web-1", "web-2"]);
        assert!(
            warnings[0].message.contains("queue"),
            "{}",
            warnings[0].message
        );
        // Within the tolerance the ready count is not read.
        req.external_metrics = values(10_500);
        assert_eq!(decide(req).1, []);
    }
}
