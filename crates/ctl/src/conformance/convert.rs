//! The reverse directions of the server's conversion boundary (`autoscaled_wire::convert`), for
//! a client that holds engine values and talks to the server: engine → `RecommendRequest` (the
//! inverse of `recommend_request`) and `RecommendResponse` / `TargetHistory` → engine (the
//! inverses of `recommend_response` and `target_history`).
//!
//! The gRPC conformance executor (`conformance::grpc`) is their user: it sends the engine
//! inputs of a case to a server and checks the server's answer with the engine runner's
//! checker. Used together with the forward conversions
//! ([`request_round_trip`], [`response_round_trip`]), they cannot drift from what the server
//! does: a field one direction gains and the other misses shows up as a round-trip
//! difference on the first case that uses it.

use std::{collections::BTreeMap, time::Duration};

use prost_types::{Duration as PbDuration, Timestamp};

use autoscaled_engine::{
    hpa::condition::{Condition, ConditionReason, ConditionType},
    hpa::history::{History, Recommendation, ScaleEvent},
    hpa::observation::{MetricSample, Observation, Pod, PodPhase},
    hpa::settings::Settings,
    hpa::spec::{
        Behavior, HorizontalSpec, MetricSpec, MetricTarget, MetricTargetType, ScalingPolicyType,
        ScalingRules, SelectPolicy,
    },
    hpa::{
        Decision, DecisionPath, MetricFailure, MetricOutcome, MetricProposal, PodGroups,
        extensions::{
            ExtensionReport, ExtensionState, FiredRule, MetricHealth, removal::RemovalCandidate,
        },
    },
    time::Time,
};
use autoscaled_wire::Limits;
use autoscaled_wire::convert::{
    Context, RecommendInput, Violations, metric_identity, recommend_request, recommend_response,
    timestamp, to_timestamp,
};
use autoscaled_wire::pb::v1 as pb;

// === engine → RecommendRequest ===

/// The `Recommend` request that carries exactly these engine inputs: every controller
/// setting is sent explicitly (so the server's defaults do not matter) and `now` travels as
/// `evaluation_time` (the server must trust request times).
pub(crate) fn recommend_request_for(
    target_key: &str,
    spec: &HorizontalSpec,
    settings: &Settings,
    observation: &Observation,
    now: Time,
) -> pb::RecommendRequest {
    pb::RecommendRequest {
        target_key: target_key.to_owned(),
        current_replicas: observation.current_replicas,
        status_replicas: observation.status_replicas,
        spec: Some(horizontal_spec(spec, settings)),
        policy: String::new(),
        shadow: false,
        pods: observation.pods.iter().map(pod).collect(),
        object_metrics_milli: observation
            .object_metrics
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        external_metrics: observation
            .external_metrics
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    pb::ExternalMetricValues {
                        values_milli: v.clone(),
                    },
                )
            })
            .collect(),
        unavailable_metrics: observation.unavailable_metrics.iter().cloned().collect(),
        orphan_pod_metrics: observation
            .orphan_samples
            .iter()
            .map(|(pod_name, samples)| pb::OrphanPodMetrics {
                pod_name: pod_name.clone(),
                metrics: metric_samples(samples),
            })
            .collect(),
        dry_run: false,
        evaluation_time: Some(to_timestamp(now)),
    }
}

/// Checks that the server's own conversion ([`super::recommend_request`], with a context that
/// trusts request times) reads `request` back as exactly `spec`, `settings`, `observation`
/// and `now`. `Ok(None)` when it does; `Ok(Some(field))` names the first part that differs;
/// `Err` is the server's rejection (which the server itself will answer with).
pub(crate) fn request_round_trip(
    request: &pb::RecommendRequest,
    spec: &HorizontalSpec,
    settings: &Settings,
    observation: &Observation,
    now: Time,
) -> Result<Option<&'static str>, String> {
    let limits = Limits {
        max_pods: usize::MAX,
        max_metrics: usize::MAX,
        ..Limits::default()
    };
    let ctx = Context {
        limits: &limits,
        trust_request_time: true,
        server_now: now,
        history_retention: Duration::MAX,
        scale_to_zero: settings.scale_to_zero,
    };
    let input: RecommendInput =
        recommend_request(request.clone(), &ctx).map_err(|e| format!("{e:?}"))?;
    Ok(if input.spec != *spec {
        Some("spec")
    } else if input.settings.apply(&Settings::default()) != *settings {
        Some("spec.settings")
    } else if input.observation != *observation {
        Some("observation")
    } else if input.now != now {
        Some("evaluation_time")
    } else {
        None
    })
}

fn duration(d: Duration) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

fn horizontal_spec(spec: &HorizontalSpec, settings: &Settings) -> pb::HorizontalSpec {
    pb::HorizontalSpec {
        min_replicas: spec.min_replicas,
        max_replicas: spec.max_replicas,
        metrics: spec.metrics.iter().map(metric_spec).collect(),
        behavior: spec.behavior.as_ref().map(behavior),
        settings: Some(pb::ControllerSettings {
            tolerance: Some(settings.tolerance),
            cpu_initialization_period: Some(duration(settings.cpu_initialization_period)),
            initial_readiness_delay: Some(duration(settings.initial_readiness_delay)),
            downscale_stabilization: Some(duration(settings.downscale_stabilization)),
            scale_up_limit_factor: Some(settings.scale_up_limit_factor),
            scale_up_limit_minimum: Some(settings.scale_up_limit_minimum),
        }),
        // The case's gate, always sent: the server's own default must not change a case.
        scale_to_zero: Some(settings.scale_to_zero),
        ..Default::default()
    }
}

/// A metric as the wire spells it; an unknown source type travels as `Unspecified`, which
/// the server rejects (by design: the API has no way to name an invalid type).
fn metric_spec(m: &MetricSpec) -> pb::MetricSpec {
    let target = m.target();
    let (source, name, container) = metric_identity(std::slice::from_ref(m), 0);
    pb::MetricSpec {
        r#type: source as i32,
        name,
        container,
        target: target.map(metric_target),
        ..Default::default()
    }
}

fn metric_target(t: &MetricTarget) -> pb::MetricTarget {
    pb::MetricTarget {
        r#type: match t.target_type {
            MetricTargetType::Utilization => pb::MetricTargetType::Utilization,
            MetricTargetType::AverageValue => pb::MetricTargetType::AverageValue,
            MetricTargetType::Value => pb::MetricTargetType::Value,
        } as i32,
        average_utilization: t.average_utilization,
        average_value_milli: t.average_value,
        value_milli: t.value,
    }
}

fn behavior(b: &Behavior) -> pb::Behavior {
    pb::Behavior {
        scale_up: b.scale_up.as_ref().map(scaling_rules),
        scale_down: b.scale_down.as_ref().map(scaling_rules),
    }
}

fn scaling_rules(r: &ScalingRules) -> pb::ScalingRules {
    pb::ScalingRules {
        stabilization_window_seconds: r.stabilization_window_seconds,
        select_policy: match r.select_policy {
            None => pb::SelectPolicy::Unspecified,
            Some(SelectPolicy::Max) => pb::SelectPolicy::Max,
            Some(SelectPolicy::Min) => pb::SelectPolicy::Min,
            Some(SelectPolicy::Disabled) => pb::SelectPolicy::Disabled,
        } as i32,
        policies: r
            .policies
            .iter()
            .flatten()
            .map(|p| pb::ScalingPolicy {
                r#type: match p.policy_type {
                    ScalingPolicyType::Pods => pb::ScalingPolicyType::Pods,
                    ScalingPolicyType::Percent => pb::ScalingPolicyType::Percent,
                } as i32,
                value: p.value,
                period_seconds: p.period_seconds,
            })
            .collect(),
        policies_set: r.policies.is_some(),
        tolerance: r.tolerance,
    }
}

fn pod(p: &Pod) -> pb::PodSample {
    let milli = |m: &std::collections::BTreeMap<String, i64>| {
        m.iter().map(|(k, v)| (k.clone(), *v)).collect()
    };
    pb::PodSample {
        name: p.name.clone(),
        phase: match p.phase {
            PodPhase::Running => pb::PodPhase::Running,
            PodPhase::Pending => pb::PodPhase::Pending,
            PodPhase::Succeeded => pb::PodPhase::Succeeded,
            PodPhase::Failed => pb::PodPhase::Failed,
            PodPhase::Unknown => pb::PodPhase::Unknown,
        } as i32,
        deleting: p.deleting,
        ready: p.ready,
        ready_transition_time: p.ready_transition.map(to_timestamp),
        start_time: p.start_time.map(to_timestamp),
        requests_milli: milli(&p.requests),
        containers: p
            .containers
            .iter()
            .map(|c| pb::ContainerSample {
                name: c.name.clone(),
                requests_milli: milli(&c.requests),
                usage_milli: milli(&c.usage),
            })
            .collect(),
        metrics: metric_samples(&p.metrics),
    }
}

fn metric_samples(samples: &BTreeMap<String, MetricSample>) -> BTreeMap<String, pb::MetricSample> {
    samples
        .iter()
        .map(|(name, s)| {
            (
                name.clone(),
                pb::MetricSample {
                    value_milli: s.value,
                    timestamp: Some(to_timestamp(s.timestamp)),
                    window: Some(duration(s.window)),
                },
            )
        })
        .collect()
}

// === RecommendResponse / TargetHistory → engine ===

/// A time the server sent (the server only sends valid ones; anything else reads as the
/// epoch, which no expectation matches).
fn time(t: Option<&Timestamp>) -> Time {
    t.and_then(|t| timestamp(&mut Violations::default(), "", t))
        .unwrap_or_default()
}

/// An engine enum from the name the API prints (the engine's serde names are Kubernetes'
/// words, the same [`super::recommend_response`] sends via `as_str`).
fn named<T: serde::de::DeserializeOwned>(what: &str, name: &str) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::String(name.to_owned()))
        .map_err(|_| format!("unknown {what} {name:?}"))
}

/// The decision a `Recommend` response reports, for the `spec_metrics` of the request (as
/// sent, not defaulted: the server names outcomes by `metric_identity` of those). Metric
/// statuses are matched to spec indexes by source type, name and container, in order.
/// What the wire does not carry (`usage_ratio`) is `None`.
pub(crate) fn decision_from_response(
    spec_metrics: &[MetricSpec],
    current_replicas: i32,
    r: &pb::RecommendResponse,
) -> Result<Decision, String> {
    let conditions = r
        .conditions
        .iter()
        .map(|c| {
            Ok(Condition {
                condition_type: named::<ConditionType>("condition type", &c.r#type)?,
                status: match c.status.as_str() {
                    "True" => true,
                    "False" => false,
                    other => return Err(format!("condition status {other:?}")),
                },
                reason: named::<ConditionReason>("condition reason", &c.reason)?,
                message: c.message.clone(),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    // An empty spec is evaluated as Kubernetes' default metric, index 0.
    let candidates = spec_metrics.len().max(1);
    let mut used = vec![false; candidates];
    let mut metrics = Vec::with_capacity(r.metrics.len());
    for status in &r.metrics {
        let index = (0..candidates)
            .find(|&i| {
                let (source, name, container) = metric_identity(spec_metrics, i);
                !used[i]
                    && source as i32 == status.r#type
                    && name == status.name
                    && container == status.container
            })
            .ok_or_else(|| format!("metric {:?} is not in the spec", status.name))?;
        used[index] = true;
        let result = match status.proposed_replicas {
            Some(replicas) => Ok(MetricProposal {
                replicas,
                current_average_utilization: status.current_average_utilization,
                current_average_value: status.current_average_value_milli,
                current_value: status.current_value_milli,
                usage_ratio: None,
            }),
            None => Err(MetricFailure {
                reason: named::<ConditionReason>("metric failure reason", &status.error_reason)?,
                message: status.error.clone(),
            }),
        };
        metrics.push(MetricOutcome {
            index,
            result,
            pod_groups: status.pod_groups.as_ref().map(pod_groups),
        });
    }
    let e = r.explanation.clone().unwrap_or_default();
    let non_empty = |s: String| (!s.is_empty()).then_some(s);
    Ok(Decision {
        current_replicas,
        desired_replicas: r.desired_replicas,
        conditions,
        metrics,
        path: named::<DecisionPath>("decision path", &e.path)?,
        prenormalized_replicas: e.prenormalized_replicas,
        stabilized_replicas: e.stabilized_replicas,
        scale_up_limit: e.scale_up_limit,
        scale_down_limit: e.scale_down_limit,
        error: non_empty(e.error),
        rescale_reason: non_empty(e.rescale_reason),
        extensions: r
            .extensions
            .as_ref()
            .map(extension_report)
            .transpose()?
            .map(Box::new),
        budget: r.budget.as_ref().map(|b| {
            Box::new(autoscaled_engine::hpa::budget::BudgetReport {
                group: b.group.clone(),
                uncapped_replicas: b.uncapped_replicas,
                fair_share: b.fair_share,
                capacity: b.capacity,
                units_per_replica: b.units_per_replica,
                used: b.used,
            })
        }),
        schedule: r.schedule.as_ref().map(|s| {
            Box::new(autoscaled_engine::hpa::schedule::ScheduleReport {
                applied: s.applied.clone(),
                min_replicas: s.min_replicas,
                max_replicas: s.max_replicas,
                floor: s.floor,
                ceiling: s.ceiling,
                floor_by: s.floor_by.clone(),
                ceiling_by: s.ceiling_by.clone(),
                conflict: s.conflict,
                until: s.next_change.as_ref().map(|t| {
                    Time::from_unix_millis(t.seconds * 1000 + i64::from(t.nanos / 1_000_000))
                }),
                until_local: (!s.next_change_local.is_empty()).then(|| s.next_change_local.clone()),
            })
        }),
        predictive: None,
    })
}

/// The migration extensions' report of a response (the inverse of `migration::report`).
fn extension_report(r: &pb::ExtensionReport) -> Result<ExtensionReport, String> {
    let removal_candidates = r
        .removal_candidates
        .iter()
        .map(|c| {
            Ok(RemovalCandidate {
                pod: c.pod.clone(),
                reason: named("removal reason", &c.reason)?,
                usage_ratio: c.usage_ratio,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let state = r.state.clone().unwrap_or_default();
    Ok(ExtensionReport {
        rules: r
            .rules
            .iter()
            .map(|f| FiredRule {
                rule: f.rule.clone(),
                detail: f.detail.clone(),
            })
            .collect(),
        active: r.active,
        fallback_metrics: r.fallback_metrics.iter().map(|i| *i as usize).collect(),
        stale_samples: r.stale_samples,
        removal_candidates,
        state: ExtensionState {
            metric_health: state
                .metric_health
                .iter()
                .map(|h| {
                    (
                        h.metric.clone(),
                        MetricHealth {
                            consecutive_failures: h.consecutive_failures,
                            first_failure_time: h
                                .first_failure_time
                                .as_ref()
                                .map(|t| time(Some(t))),
                        },
                    )
                })
                .collect(),
            last_active_time: state.last_active_time.as_ref().map(|t| time(Some(t))),
            first_seen: state.first_seen.as_ref().map(|t| time(Some(t))),
            scaled_to_zero: state.scaled_to_zero,
            not_scaled_to_zero: state.not_scaled_to_zero,
        },
    })
}

/// True when [`super::recommend_response`] turns `decision` back into exactly `response`:
/// the decoding lost nothing the server sent. The response's `warnings` are left out: they
/// describe the request, not the decision (the wire's `convert::recommend_warnings`).
pub(crate) fn response_round_trip(
    decision: &Decision,
    spec_metrics: &[MetricSpec],
    response: &pb::RecommendResponse,
) -> bool {
    let now = time(response.evaluation_time.as_ref());
    let mut sent = response.clone();
    sent.warnings.clear();
    recommend_response(decision, spec_metrics, now, response.recorded) == sent
}

/// The pod groups of a metric status.
pub(crate) fn pod_groups(g: &pb::PodGroups) -> PodGroups {
    PodGroups {
        ready_count: g.ready_count,
        unready: g.unready.clone(),
        missing: g.missing.clone(),
        ignored: g.ignored.clone(),
    }
}

/// The history a `GetHistory` page reports (recommendations in storage order, scale events).
/// Extension state is not read back.
pub(crate) fn history_from_target_history(h: &pb::TargetHistory) -> History {
    let event = |e: &pb::ScaleEventRecord| ScaleEvent {
        time: time(e.time.as_ref()),
        replica_change: e.replica_change,
        outdated: e.outdated,
    };
    History {
        recommendations: Some(
            h.recommendations
                .iter()
                .map(|r| Recommendation {
                    replicas: r.replicas,
                    time: time(r.time.as_ref()),
                })
                .collect(),
        ),
        scale_up_events: h.scale_up_events.iter().map(event).collect(),
        scale_down_events: h.scale_down_events.iter().map(event).collect(),
        extensions: None,
        predictive: None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use autoscaled_engine::{
        hpa,
        hpa::history::History,
        hpa::observation::Container,
        hpa::spec::{ScalingPolicy, ScalingRules},
    };

    const NOW: Time = Time::from_unix_secs(1_767_225_600);

    fn inputs() -> (HorizontalSpec, Settings, Observation) {
        let target = |average_utilization| MetricTarget::utilization(average_utilization);
        let spec = HorizontalSpec {
            min_replicas: Some(1),
            max_replicas: 10,
            metrics: vec![
                MetricSpec::Resource {
                    name: "cpu".into(),
                    target: target(50),
                },
                MetricSpec::ContainerResource {
                    name: "cpu".into(),
                    container: "app".into(),
                    target: target(60),
                },
            ],
            behavior: Some(Behavior {
                scale_up: Some(ScalingRules {
                    stabilization_window_seconds: Some(0),
                    select_policy: Some(SelectPolicy::Min),
                    policies: Some(vec![ScalingPolicy {
                        policy_type: ScalingPolicyType::Percent,
                        value: 100,
                        period_seconds: 15,
                    }]),
                    tolerance: Some(0.05),
                }),
                scale_down: None,
            }),
            extensions: None,
            schedules: Vec::new(),
            predictive: None,
        };
        let settings = Settings {
            tolerance: 0.2,
            scale_up_limit_factor: 8.0,
            ..Settings::default()
        };
        let sample = |value| MetricSample {
            value: Some(value),
            timestamp: NOW.plus_secs(-5),
            window: Duration::from_secs(60),
        };
        let pods = (0..3)
            .map(|i| Pod {
                name: format!("p{i}"),
                phase: PodPhase::Running,
                deleting: false,
                ready: Some(true),
                ready_transition: Some(NOW.plus_secs(-600)),
                start_time: Some(NOW.plus_secs(-700)),
                requests: BTreeMap::from([("cpu".into(), 1000)]),
                containers: vec![Container {
                    name: "app".into(),
                    requests: BTreeMap::from([("cpu".into(), 1000)]),
                    usage: BTreeMap::from([("cpu".into(), 900)]),
                }],
                metrics: BTreeMap::from([("cpu".into(), sample(900))]),
            })
            .collect();
        let observation = Observation {
            current_replicas: 3,
            status_replicas: Some(3),
            pods,
            orphan_samples: BTreeMap::from([(
                "gone".into(),
                BTreeMap::from([("cpu".into(), sample(100))]),
            )]),
            object_metrics: BTreeMap::new(),
            external_metrics: BTreeMap::new(),
            unavailable_metrics: Default::default(),
        };
        (spec, settings, observation)
    }

    #[test]
    fn a_request_reads_back_as_its_inputs_and_a_change_is_named() {
        let (spec, settings, observation) = inputs();
        let request = recommend_request_for("t", &spec, &settings, &observation, NOW);
        let check = |r: &pb::RecommendRequest| {
            request_round_trip(r, &spec, &settings, &observation, NOW).unwrap()
        };
        assert_eq!(check(&request), None);

        let mut changed = request.clone();
        changed.pods[1].deleting = true;
        assert_eq!(check(&changed), Some("observation"));
        let mut changed = request.clone();
        changed
            .spec
            .as_mut()
            .unwrap()
            .settings
            .as_mut()
            .unwrap()
            .tolerance = Some(0.1);
        assert_eq!(check(&changed), Some("spec.settings"));
        let mut changed = request.clone();
        changed.spec.as_mut().unwrap().behavior = None;
        assert_eq!(check(&changed), Some("spec"));
        let mut changed = request;
        changed.spec.as_mut().unwrap().max_replicas = 0;
        assert!(check_err(&changed, &spec, &settings, &observation));
    }

    fn check_err(
        r: &pb::RecommendRequest,
        spec: &HorizontalSpec,
        settings: &Settings,
        observation: &Observation,
    ) -> bool {
        request_round_trip(r, spec, settings, observation, NOW)
            .is_err_and(|e| e.contains("spec.max_replicas"))
    }

    #[test]
    fn a_response_decodes_to_the_decision_and_a_change_breaks_the_round_trip() {
        let (spec, settings, observation) = inputs();
        let decision = hpa::evaluate(&settings, &spec, &observation, &History::default(), NOW)
            .unwrap()
            .decision;
        let response = recommend_response(&decision, &spec.metrics, NOW, true);
        let decoded = decision_from_response(&spec.metrics, 3, &response).unwrap();
        assert!(response_round_trip(&decoded, &spec.metrics, &response));
        assert_eq!(decoded.desired_replicas, decision.desired_replicas);
        assert_eq!(decoded.conditions, decision.conditions);
        assert_eq!(decoded.metrics.len(), 2);
        assert_eq!(decoded.metrics[1].index, 1);

        // A field the decoding does not read back is caught.
        let mut changed = response.clone();
        changed.explanation.as_mut().unwrap().limited_by = "Elsewhere".into();
        let decoded = decision_from_response(&spec.metrics, 3, &changed).unwrap();
        assert!(!response_round_trip(&decoded, &spec.metrics, &changed));
        // A status for a metric the spec does not have is an error, not a guess.
        let mut changed = response;
        changed.metrics[0].name = "memory".into();
        assert!(
            decision_from_response(&spec.metrics, 3, &changed)
                .is_err_and(|e| e.contains("\"memory\" is not in the spec"))
        );
    }
}
