//! HPA records (version 2): conversions between the engine's types and the storage-only
//! messages of [`super::pb`], both ways, explicit field by field.
//!
//! Compactness: times are milliseconds as zigzag varints, recommendation times as
//! differences from the previous one (15 s apart at Kubernetes' cadence: 3 bytes each), a
//! run's last time as a difference from its first; pod names are capped per group
//! (`max_pod_names`, issue 8 item 6) with the totals kept.

use std::time::Duration;

use super::{codes, pb};
use crate::{
    engine::{
        hpa::condition::Condition,
        hpa::history::{History, Recommendation, ScaleEvent},
        hpa::settings::Settings,
        hpa::spec::{Behavior, MetricSpec, MetricTarget, ScalingPolicy, ScalingRules},
        hpa::{
            Decision, MetricFailure, MetricOutcome, MetricProposal, PodGroups,
            extensions::{
                ExtensionReport, ExtensionState, FiredRule, MetricHealth, removal::RemovalCandidate,
            },
        },
        time::Time,
    },
    store::{DecisionEntry, DecisionInputs, PodTotals, Run},
};

// === history ===

/// The controller memory as a record, with the migration extensions' state when there is one.
pub(crate) fn history_to_record(h: &History) -> pb::History {
    let recs = h.recommendations.as_deref().unwrap_or(&[]);
    let mut previous = 0i64;
    let mut deltas = Vec::with_capacity(recs.len());
    for r in recs {
        let t = r.time.unix_millis();
        deltas.push(t.wrapping_sub(previous));
        previous = t;
    }
    pb::History {
        has_recommendations: h.recommendations.is_some(),
        recommendation_replicas: recs.iter().map(|r| r.replicas).collect(),
        recommendation_time_deltas: deltas,
        scale_up_events: h
            .scale_up_events
            .iter()
            .map(scale_event_to_record)
            .collect(),
        scale_down_events: h
            .scale_down_events
            .iter()
            .map(scale_event_to_record)
            .collect(),
        extensions: h.extensions.as_ref().map(extensions_to_record),
    }
}

/// The record's controller memory.
pub(crate) fn history_from_record(r: &pb::History) -> Result<History, String> {
    if r.recommendation_replicas.len() != r.recommendation_time_deltas.len() {
        return Err(format!(
            "{} recommendation counts but {} times",
            r.recommendation_replicas.len(),
            r.recommendation_time_deltas.len()
        ));
    }
    let recommendations = r.has_recommendations.then(|| {
        let mut t = 0i64;
        r.recommendation_replicas
            .iter()
            .zip(&r.recommendation_time_deltas)
            .map(|(&replicas, &delta)| {
                t = t.wrapping_add(delta);
                Recommendation {
                    replicas,
                    time: Time::from_unix_millis(t),
                }
            })
            .collect()
    });
    Ok(History {
        recommendations,
        scale_up_events: r
            .scale_up_events
            .iter()
            .map(scale_event_from_record)
            .collect(),
        scale_down_events: r
            .scale_down_events
            .iter()
            .map(scale_event_from_record)
            .collect(),
        extensions: r.extensions.as_ref().map(extensions_from_record),
    })
}

// === migration extensions (issue 12) ===

fn extensions_to_record(s: &ExtensionState) -> pb::Extensions {
    pb::Extensions {
        metric_health: s
            .metric_health
            .iter()
            .map(|(metric, h)| pb::MetricHealth {
                metric: metric.clone(),
                consecutive_failures: h.consecutive_failures,
                first_failure_time_ms: h.first_failure_time.map(Time::unix_millis),
            })
            .collect(),
        last_active_time_ms: s.last_active_time.map(Time::unix_millis),
        first_seen_ms: s.first_seen.map(Time::unix_millis),
        scaled_to_zero: s.scaled_to_zero,
        not_scaled_to_zero: s.not_scaled_to_zero,
    }
}

fn extensions_from_record(r: &pb::Extensions) -> ExtensionState {
    ExtensionState {
        metric_health: r
            .metric_health
            .iter()
            .map(|h| {
                (
                    h.metric.clone(),
                    MetricHealth {
                        consecutive_failures: h.consecutive_failures,
                        first_failure_time: h.first_failure_time_ms.map(Time::from_unix_millis),
                    },
                )
            })
            .collect(),
        last_active_time: r.last_active_time_ms.map(Time::from_unix_millis),
        first_seen: r.first_seen_ms.map(Time::from_unix_millis),
        scaled_to_zero: r.scaled_to_zero,
        not_scaled_to_zero: r.not_scaled_to_zero,
    }
}

fn report_to_record(r: &ExtensionReport) -> pb::ExtensionReport {
    pb::ExtensionReport {
        rules: r
            .rules
            .iter()
            .map(|f| pb::FiredRule {
                rule: f.rule.clone(),
                detail: f.detail.clone(),
            })
            .collect(),
        active: r.active,
        fallback_metrics: r
            .fallback_metrics
            .iter()
            .map(|&i| u32::try_from(i).unwrap_or(u32::MAX))
            .collect(),
        stale_samples: r.stale_samples,
        removal_candidates: r
            .removal_candidates
            .iter()
            .map(|c| pb::RemovalCandidate {
                pod: c.pod.clone(),
                reason: codes::removal_reason(c.reason),
                usage_ratio: c.usage_ratio,
            })
            .collect(),
        state: Some(extensions_to_record(&r.state)),
    }
}

fn report_from_record(r: &pb::ExtensionReport) -> Result<ExtensionReport, String> {
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
        fallback_metrics: r.fallback_metrics.iter().map(|&i| i as usize).collect(),
        stale_samples: r.stale_samples,
        removal_candidates: r
            .removal_candidates
            .iter()
            .map(|c| {
                Ok(RemovalCandidate {
                    pod: c.pod.clone(),
                    reason: codes::removal_reason_from(c.reason)?,
                    usage_ratio: c.usage_ratio,
                })
            })
            .collect::<Result<_, String>>()?,
        state: r
            .state
            .as_ref()
            .map(extensions_from_record)
            .unwrap_or_default(),
    })
}

fn scale_event_to_record(e: &ScaleEvent) -> pb::ScaleEvent {
    pb::ScaleEvent {
        replica_change: e.replica_change,
        time_ms: e.time.unix_millis(),
        outdated: e.outdated,
    }
}

fn scale_event_from_record(e: &pb::ScaleEvent) -> ScaleEvent {
    ScaleEvent {
        replica_change: e.replica_change,
        time: Time::from_unix_millis(e.time_ms),
        outdated: e.outdated,
    }
}

// === decision runs ===

/// A decision run as a record, naming at most `max_pod_names` pods per group.
pub(crate) fn run_to_record(e: &DecisionEntry, max_pod_names: usize) -> pb::DecisionRun {
    run_to_record_as(e, e.run, e.seq, max_pod_names)
}

/// The record of `e` as the run `run` at position `seq` (a decision that extends a run,
/// without a copy of the decision).
pub(crate) fn run_to_record_as(
    e: &DecisionEntry,
    run: Run,
    seq: u64,
    max_pod_names: usize,
) -> pb::DecisionRun {
    let first = run.first_time.unix_millis();
    pb::DecisionRun {
        seq,
        count: run.count,
        first_time_ms: first,
        last_time_delta_ms: e.time.unix_millis().wrapping_sub(first),
        decision: Some(decision_to_record(e, max_pod_names)),
        metrics: e.metrics.iter().map(metric_spec_to_record).collect(),
        inputs: e.inputs.as_ref().map(inputs_to_record),
    }
}

/// The record's decision run.
pub(crate) fn run_from_record(r: &pb::DecisionRun) -> Result<DecisionEntry, String> {
    let d = r
        .decision
        .as_ref()
        .ok_or("a decision run without a decision")?;
    let metrics = d
        .metrics
        .iter()
        .map(outcome_from_record)
        .collect::<Result<Vec<_>, _>>()?;
    let pod_totals = d
        .metrics
        .iter()
        .map(|m| {
            m.pod_groups
                .as_ref()
                .map_or_else(PodTotals::default, |g| PodTotals {
                    ready: g.ready_count,
                    unready: g.unready_total,
                    missing: g.missing_total,
                    ignored: g.ignored_total,
                })
        })
        .collect();
    let decision = Decision {
        current_replicas: d.current_replicas,
        desired_replicas: d.desired_replicas,
        conditions: d
            .conditions
            .iter()
            .map(condition_from_record)
            .collect::<Result<_, _>>()?,
        metrics,
        path: codes::decision_path_from(d.path)?,
        prenormalized_replicas: d.prenormalized_replicas,
        stabilized_replicas: d.stabilized_replicas,
        scale_up_limit: d.scale_up_limit,
        scale_down_limit: d.scale_down_limit,
        error: d.error.clone(),
        rescale_reason: d.rescale_reason.clone(),
        extensions: d
            .extensions
            .as_ref()
            .map(report_from_record)
            .transpose()?
            .map(Box::new),
    };
    Ok(DecisionEntry {
        time: Time::from_unix_millis(r.first_time_ms.wrapping_add(r.last_time_delta_ms)),
        decision,
        metrics: r
            .metrics
            .iter()
            .map(metric_spec_from_record)
            .collect::<Result<_, _>>()?,
        inputs: r.inputs.as_ref().map(inputs_from_record).transpose()?,
        pod_totals,
        run: Run {
            count: r.count.max(1),
            first_time: Time::from_unix_millis(r.first_time_ms),
        },
        seq: r.seq,
    })
}

/// The newest run `run` as a tail over `logged`, its body as logged in `hpa_decisions`: the
/// run's counters, and only the parts of its last decision that differ from the logged body
/// (at steady state usually none, or the metric outcomes' current values). Inverse:
/// [`apply_tail`].
pub(crate) fn tail_of(run: pb::DecisionRun, logged: &pb::DecisionRun) -> pb::RunTail {
    let pb::DecisionRun {
        seq,
        count,
        first_time_ms,
        last_time_delta_ms,
        decision,
        metrics,
        inputs,
    } = run;
    let mut tail = pb::RunTail {
        seq,
        count,
        first_time_ms,
        last_time_delta_ms,
        ..pb::RunTail::default()
    };
    if decision != logged.decision {
        let mut d = decision.unwrap_or_default();
        if let Some(base) = &logged.decision {
            let (conditions, metrics, extensions) = (
                std::mem::take(&mut d.conditions),
                std::mem::take(&mut d.metrics),
                d.extensions.take(),
            );
            tail.logged_scalars = d
                == pb::Decision {
                    conditions: Vec::new(),
                    metrics: Vec::new(),
                    extensions: None,
                    ..base.clone()
                };
            if tail.logged_scalars {
                d = pb::Decision::default();
            }
            tail.logged_conditions = conditions == base.conditions;
            if !tail.logged_conditions {
                d.conditions = conditions;
            }
            tail.logged_metric_outcomes = metrics == base.metrics;
            if !tail.logged_metric_outcomes {
                d.metrics = metrics;
            }
            tail.logged_extensions = extensions == base.extensions;
            if !tail.logged_extensions {
                d.extensions = extensions;
            }
        }
        tail.decision = Some(d);
    }
    if metrics != logged.metrics {
        tail.metrics = Some(pb::MetricSpecs { metrics });
    }
    if inputs != logged.inputs {
        tail.no_inputs = inputs.is_none();
        tail.inputs = inputs;
    }
    tail
}

/// The run that `tail` describes over `logged`, its body as logged ([`tail_of`]).
pub(crate) fn apply_tail(mut logged: pb::DecisionRun, tail: &pb::RunTail) -> pb::DecisionRun {
    logged.seq = tail.seq;
    logged.count = tail.count;
    logged.first_time_ms = tail.first_time_ms;
    logged.last_time_delta_ms = tail.last_time_delta_ms;
    if let Some(d) = &tail.decision {
        let mut base = logged.decision.take().unwrap_or_default();
        let (conditions, metrics, extensions) = (
            std::mem::take(&mut base.conditions),
            std::mem::take(&mut base.metrics),
            base.extensions.take(),
        );
        let mut d = if tail.logged_scalars {
            pb::Decision {
                conditions: d.conditions.clone(),
                metrics: d.metrics.clone(),
                extensions: d.extensions.clone(),
                ..base
            }
        } else {
            d.clone()
        };
        if tail.logged_conditions {
            d.conditions = conditions;
        }
        if tail.logged_metric_outcomes {
            d.metrics = metrics;
        }
        if tail.logged_extensions {
            d.extensions = extensions;
        }
        logged.decision = Some(d);
    }
    if let Some(m) = &tail.metrics {
        logged.metrics.clone_from(&m.metrics);
    }
    if tail.no_inputs {
        logged.inputs = None;
    } else if let Some(i) = &tail.inputs {
        logged.inputs = Some(i.clone());
    }
    logged
}

fn decision_to_record(e: &DecisionEntry, max_pod_names: usize) -> pb::Decision {
    let d = &e.decision;
    pb::Decision {
        current_replicas: d.current_replicas,
        desired_replicas: d.desired_replicas,
        conditions: d.conditions.iter().map(condition_to_record).collect(),
        metrics: d
            .metrics
            .iter()
            .enumerate()
            .map(|(i, m)| outcome_to_record(m, e.pod_totals(i), max_pod_names))
            .collect(),
        path: codes::decision_path(d.path),
        prenormalized_replicas: d.prenormalized_replicas,
        stabilized_replicas: d.stabilized_replicas,
        scale_up_limit: d.scale_up_limit,
        scale_down_limit: d.scale_down_limit,
        error: d.error.clone(),
        rescale_reason: d.rescale_reason.clone(),
        extensions: d.extensions.as_deref().map(report_to_record),
    }
}

fn condition_to_record(c: &Condition) -> pb::Condition {
    pb::Condition {
        condition_type: codes::condition_type(c.condition_type),
        status: c.status,
        reason: codes::condition_reason(c.reason),
        message: c.message.clone(),
    }
}

fn condition_from_record(c: &pb::Condition) -> Result<Condition, String> {
    Ok(Condition {
        condition_type: codes::condition_type_from(c.condition_type)?,
        status: c.status,
        reason: codes::condition_reason_from(c.reason)?,
        message: c.message.clone(),
    })
}

fn outcome_to_record(
    m: &MetricOutcome,
    totals: PodTotals,
    max_pod_names: usize,
) -> pb::MetricOutcome {
    let capped = |names: &[String]| names.iter().take(max_pod_names).cloned().collect();
    pb::MetricOutcome {
        index: u32::try_from(m.index).unwrap_or(u32::MAX),
        result: Some(match &m.result {
            Ok(p) => pb::metric_outcome::Result::Proposal(pb::Proposal {
                replicas: p.replicas,
                current_average_utilization: p.current_average_utilization,
                current_average_value: p.current_average_value,
                current_value: p.current_value,
                usage_ratio: p.usage_ratio,
            }),
            Err(f) => pb::metric_outcome::Result::Failure(pb::Failure {
                reason: codes::condition_reason(f.reason),
                message: f.message.clone(),
            }),
        }),
        pod_groups: m.pod_groups.as_ref().map(|g| pb::PodGroups {
            ready_count: g.ready_count,
            unready: capped(&g.unready),
            missing: capped(&g.missing),
            ignored: capped(&g.ignored),
            unready_total: totals.unready,
            missing_total: totals.missing,
            ignored_total: totals.ignored,
        }),
    }
}

fn outcome_from_record(m: &pb::MetricOutcome) -> Result<MetricOutcome, String> {
    let result = match m
        .result
        .as_ref()
        .ok_or("a metric outcome without a result")?
    {
        pb::metric_outcome::Result::Proposal(p) => Ok(MetricProposal {
            replicas: p.replicas,
            current_average_utilization: p.current_average_utilization,
            current_average_value: p.current_average_value,
            current_value: p.current_value,
            usage_ratio: p.usage_ratio,
        }),
        pb::metric_outcome::Result::Failure(f) => Err(MetricFailure {
            reason: codes::condition_reason_from(f.reason)?,
            message: f.message.clone(),
        }),
    };
    Ok(MetricOutcome {
        index: usize::try_from(m.index).map_err(|e| e.to_string())?,
        result,
        pod_groups: m.pod_groups.as_ref().map(|g| PodGroups {
            ready_count: g.ready_count,
            unready: g.unready.clone(),
            missing: g.missing.clone(),
            ignored: g.ignored.clone(),
        }),
    })
}

// === spec ===

fn metric_spec_to_record(m: &MetricSpec) -> pb::MetricSpec {
    let (kind, name, container, target, type_name) = match m {
        MetricSpec::Resource { name, target } => (codes::KIND_RESOURCE, name, "", Some(target), ""),
        MetricSpec::ContainerResource {
            name,
            container,
            target,
        } => (
            codes::KIND_CONTAINER_RESOURCE,
            name,
            container.as_str(),
            Some(target),
            "",
        ),
        MetricSpec::Pods { name, target } => (codes::KIND_PODS, name, "", Some(target), ""),
        MetricSpec::Object { name, target } => (codes::KIND_OBJECT, name, "", Some(target), ""),
        MetricSpec::External { name, target } => (codes::KIND_EXTERNAL, name, "", Some(target), ""),
        MetricSpec::Unknown { type_name } => {
            return pb::MetricSpec {
                kind: codes::KIND_UNKNOWN,
                type_name: type_name.clone(),
                ..pb::MetricSpec::default()
            };
        }
    };
    pb::MetricSpec {
        kind,
        name: name.clone(),
        container: container.to_owned(),
        target: target.map(|t| pb::MetricTarget {
            target_type: codes::target_type(t.target_type),
            average_utilization: t.average_utilization,
            average_value: t.average_value,
            value: t.value,
        }),
        type_name: type_name.to_owned(),
    }
}

fn metric_spec_from_record(m: &pb::MetricSpec) -> Result<MetricSpec, String> {
    let target = || -> Result<MetricTarget, String> {
        let t = m.target.as_ref().ok_or("a metric spec without a target")?;
        Ok(MetricTarget {
            target_type: codes::target_type_from(t.target_type)?,
            average_utilization: t.average_utilization,
            average_value: t.average_value,
            value: t.value,
        })
    };
    let name = m.name.clone();
    Ok(match m.kind {
        codes::KIND_RESOURCE => MetricSpec::Resource {
            name,
            target: target()?,
        },
        codes::KIND_CONTAINER_RESOURCE => MetricSpec::ContainerResource {
            name,
            container: m.container.clone(),
            target: target()?,
        },
        codes::KIND_PODS => MetricSpec::Pods {
            name,
            target: target()?,
        },
        codes::KIND_OBJECT => MetricSpec::Object {
            name,
            target: target()?,
        },
        codes::KIND_EXTERNAL => MetricSpec::External {
            name,
            target: target()?,
        },
        codes::KIND_UNKNOWN => MetricSpec::Unknown {
            type_name: m.type_name.clone(),
        },
        other => return Err(format!("unknown metric kind code {other}")),
    })
}

fn inputs_to_record(i: &DecisionInputs) -> pb::Inputs {
    let s = &i.settings;
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    pb::Inputs {
        min_replicas: i.min_replicas,
        max_replicas: i.max_replicas,
        behavior: i.behavior.as_ref().map(|b| pb::Behavior {
            scale_up: b.scale_up.as_ref().map(rules_to_record),
            scale_down: b.scale_down.as_ref().map(rules_to_record),
        }),
        settings: Some(pb::Settings {
            tolerance: s.tolerance,
            cpu_initialization_period_ms: ms(s.cpu_initialization_period),
            initial_readiness_delay_ms: ms(s.initial_readiness_delay),
            downscale_stabilization_ms: ms(s.downscale_stabilization),
            scale_up_limit_factor: s.scale_up_limit_factor,
            scale_up_limit_minimum: s.scale_up_limit_minimum,
            scale_to_zero: s.scale_to_zero,
        }),
    }
}

fn inputs_from_record(i: &pb::Inputs) -> Result<DecisionInputs, String> {
    let s = i.settings.as_ref().ok_or("inputs without settings")?;
    Ok(DecisionInputs {
        min_replicas: i.min_replicas,
        max_replicas: i.max_replicas,
        behavior: i
            .behavior
            .as_ref()
            .map(|b| -> Result<Behavior, String> {
                Ok(Behavior {
                    scale_up: b.scale_up.as_ref().map(rules_from_record).transpose()?,
                    scale_down: b.scale_down.as_ref().map(rules_from_record).transpose()?,
                })
            })
            .transpose()?,
        settings: Settings {
            tolerance: s.tolerance,
            cpu_initialization_period: Duration::from_millis(s.cpu_initialization_period_ms),
            initial_readiness_delay: Duration::from_millis(s.initial_readiness_delay_ms),
            downscale_stabilization: Duration::from_millis(s.downscale_stabilization_ms),
            scale_up_limit_factor: s.scale_up_limit_factor,
            scale_up_limit_minimum: s.scale_up_limit_minimum,
            scale_to_zero: s.scale_to_zero,
        },
    })
}

fn rules_to_record(r: &ScalingRules) -> pb::ScalingRules {
    pb::ScalingRules {
        stabilization_window_seconds: r.stabilization_window_seconds,
        select_policy: r.select_policy.map(codes::select_policy),
        has_policies: r.policies.is_some(),
        policies: r
            .policies
            .iter()
            .flatten()
            .map(|p| pb::ScalingPolicy {
                policy_type: codes::policy_type(p.policy_type),
                value: p.value,
                period_seconds: p.period_seconds,
            })
            .collect(),
        tolerance: r.tolerance,
    }
}

fn rules_from_record(r: &pb::ScalingRules) -> Result<ScalingRules, String> {
    let policies = r
        .policies
        .iter()
        .map(|p| -> Result<ScalingPolicy, String> {
            Ok(ScalingPolicy {
                policy_type: codes::policy_type_from(p.policy_type)?,
                value: p.value,
                period_seconds: p.period_seconds,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ScalingRules {
        stabilization_window_seconds: r.stabilization_window_seconds,
        select_policy: r.select_policy.map(codes::select_policy_from).transpose()?,
        policies: r.has_policies.then_some(policies),
        tolerance: r.tolerance,
    })
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::{
        engine::{
            hpa::DecisionPath,
            hpa::condition::{ConditionReason, ConditionType},
            hpa::spec::{MetricTargetType, ScalingPolicyType, SelectPolicy},
        },
        store::record::{self, VERSION_BINARY},
    };

    /// A run with every kind of field set.
    fn sample_run() -> DecisionEntry {
        let decision = Decision {
            current_replicas: 2,
            desired_replicas: 4,
            conditions: vec![Condition {
                condition_type: ConditionType::AbleToScale,
                status: true,
                reason: ConditionReason::SucceededRescale,
                message: "the HPA controller was able to update the target scale to 4".into(),
            }],
            metrics: vec![
                MetricOutcome {
                    index: 0,
                    result: Ok(MetricProposal {
                        replicas: 4,
                        current_average_utilization: Some(90),
                        current_average_value: Some(900),
                        current_value: None,
                        usage_ratio: Some(1.8),
                    }),
                    pod_groups: Some(PodGroups {
                        ready_count: 2,
                        unready: vec!["web-2".into()],
                        missing: vec![],
                        ignored: vec![],
                    }),
                },
                MetricOutcome {
                    index: 1,
                    result: Err(MetricFailure {
                        reason: ConditionReason::FailedGetExternalMetric,
                        message: "no samples".into(),
                    }),
                    pod_groups: None,
                },
            ],
            path: DecisionPath::Behavior,
            prenormalized_replicas: Some(4),
            stabilized_replicas: Some(4),
            scale_up_limit: Some(8),
            scale_down_limit: Some(1),
            error: Some("no samples".into()),
            rescale_reason: Some(
                "cpu resource utilization (percentage of request) above target".into(),
            ),
            extensions: None,
        };
        DecisionEntry {
            time: Time::from_unix_millis(1_767_225_660_000),
            decision,
            metrics: vec![
                MetricSpec::Resource {
                    name: "cpu".into(),
                    target: MetricTarget {
                        target_type: MetricTargetType::Utilization,
                        average_utilization: Some(50),
                        average_value: None,
                        value: None,
                    },
                },
                MetricSpec::External {
                    name: "queue".into(),
                    target: MetricTarget {
                        target_type: MetricTargetType::Value,
                        average_utilization: None,
                        average_value: None,
                        value: Some(30_000),
                    },
                },
            ],
            inputs: Some(DecisionInputs {
                min_replicas: Some(1),
                max_replicas: 10,
                behavior: Some(Behavior {
                    scale_up: Some(ScalingRules {
                        stabilization_window_seconds: Some(0),
                        select_policy: Some(SelectPolicy::Max),
                        policies: Some(vec![ScalingPolicy {
                            policy_type: ScalingPolicyType::Percent,
                            value: 100,
                            period_seconds: 15,
                        }]),
                        tolerance: Some(0.05),
                    }),
                    scale_down: None,
                }),
                // The gate off: the golden bytes predate it (and decode to false).
                settings: Settings {
                    scale_to_zero: false,
                    ..Settings::default()
                },
            }),
            pod_totals: vec![
                PodTotals {
                    ready: 2,
                    unready: 1,
                    missing: 0,
                    ignored: 0,
                },
                PodTotals::default(),
            ],
            run: Run {
                count: 3,
                first_time: Time::from_unix_millis(1_767_225_630_000),
            },
            seq: 7,
        }
    }

    fn sample_history() -> History {
        History {
            recommendations: Some(vec![
                Recommendation {
                    replicas: 2,
                    time: Time::from_unix_millis(1_767_225_630_000),
                },
                Recommendation {
                    replicas: 4,
                    time: Time::from_unix_millis(1_767_225_645_000),
                },
            ]),
            scale_up_events: vec![ScaleEvent {
                replica_change: 2,
                time: Time::from_unix_millis(1_767_225_645_000),
                outdated: false,
            }],
            scale_down_events: vec![],
            extensions: None,
        }
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Version 2 on disk, byte for byte: a change here is a format change (a new version
    /// byte and a migration), never an accident of renaming an engine type.
    const GOLDEN_V2_RUN: &str = "020807100318e0f4d8edee6620e0d4032ad101080210041a4110011804223b7468652048504120636f6e74726f6c6c6572207761732061626c6520746f207570646174652074686520746172676574207363616c6520746f2034221f12100804105a18840729cdccccccccccfc3f220b080212057765622d322801221208011a0e080a120a6e6f2073616d706c657328053004380440084801520a6e6f2073616d706c65735a3d637075207265736f75726365207574696c697a6174696f6e202870657263656e74616765206f662072657175657374292061626f766520746172676574320912036370752202103232110804120571756575652206080220b0ea013a480801100a1a190a17080010001801220608011064180f299a9999999999a93f2227099a9999999999b93f10e0a71218b0ea0120e0a712290000000000000040310000000000001040";
    const GOLDEN_V2_HISTORY: &str = "020801120204081a09e0f4d8edee66b0ea01220908021090dfdaedee66";

    #[test]
    fn version_2_records_are_byte_for_byte_golden_and_read_back() {
        let run = record::encode_binary(&run_to_record(&sample_run(), 50));
        assert_eq!(run[0], VERSION_BINARY);
        assert_eq!(hex(&run), GOLDEN_V2_RUN, "run record bytes changed");
        let history = record::encode_binary(&history_to_record(&sample_history()));
        assert_eq!(
            hex(&history),
            GOLDEN_V2_HISTORY,
            "history record bytes changed"
        );

        let decoded: pb::DecisionRun = record::decode_binary("decision", "k", &run[1..]).unwrap();
        assert_eq!(run_from_record(&decoded).unwrap(), sample_run());
        let decoded: pb::History = record::decode_binary("state", "k", &history[1..]).unwrap();
        assert_eq!(history_from_record(&decoded).unwrap(), sample_history());
    }

    #[test]
    fn a_steady_state_target_is_small() {
        // 20 recommendations (5 min at 15 s) and a one-metric run.
        let history = History {
            recommendations: Some(
                (0..20)
                    .map(|i| Recommendation {
                        replicas: 3,
                        time: Time::from_unix_millis(1_767_225_600_000 + i * 15_000),
                    })
                    .collect(),
            ),
            ..History::default()
        };
        let full = record::encode_binary(&pb::HpaState {
            history: Some(history_to_record(&history)),
            next_seq: 12,
            log_len: 11,
            pending: Some(run_to_record(&sample_run(), 50)),
            pending_tail: None,
        });
        assert!(full.len() < 1024, "{} bytes", full.len());
        // The next decision of the run, the same in all but its time: a tail only.
        let logged = run_to_record(&sample_run(), 50);
        let mut next = sample_run();
        next.run.count += 1;
        next.time = next.time.plus(Duration::from_secs(15));
        let run_tail = tail_of(run_to_record(&next, 50), &logged);
        let tail = crate::store::hpa::StoredState::encode_tail(&history, 12, 11, run_tail.clone());
        println!(
            "steady-state state record: {} B with the run whole (version 2), {} B as a tail \
             (version 3, of which the tail {} B)",
            full.len(),
            tail.len(),
            run_tail.encoded_len()
        );
        assert!(run_tail.encoded_len() < 24, "{run_tail:?}");
        assert!(tail.len() < full.len() / 3, "{} bytes", tail.len());
    }

    /// A run's next decisions, each differing from the logged body in one part that a run
    /// may vary in (same outcome: `DecisionEntry::same_outcome`).
    fn variations() -> Vec<(&'static str, DecisionEntry)> {
        let later = |mut e: DecisionEntry| {
            e.run.count += 4;
            e.time = e.time.plus(Duration::from_secs(60));
            e
        };
        let mut usage = later(sample_run());
        if let Ok(p) = &mut usage.decision.metrics[0].result {
            p.current_average_utilization = Some(91);
            p.usage_ratio = Some(1.82);
        }
        let mut message = later(sample_run());
        message.decision.conditions[0].message = "another message".into();
        let mut pods = later(sample_run());
        pods.decision.metrics[0]
            .pod_groups
            .as_mut()
            .unwrap()
            .unready = vec!["web-3".into()];
        let mut scalars = later(sample_run());
        scalars.decision.scale_up_limit = Some(9);
        scalars.decision.error = None;
        let mut inputs = later(sample_run());
        inputs.inputs.as_mut().unwrap().min_replicas = Some(2);
        let mut no_inputs = later(sample_run());
        no_inputs.inputs = None;
        let mut specs = later(sample_run());
        specs.metrics.pop();
        vec![
            ("same", later(sample_run())),
            ("usage", usage),
            ("message", message),
            ("pods", pods),
            ("scalars", scalars),
            ("inputs", inputs),
            ("no inputs", no_inputs),
            ("metric specs", specs),
        ]
    }

    #[test]
    fn a_tail_over_the_logged_body_gives_the_run_back_exactly() {
        let logged = run_to_record(&sample_run(), 50);
        for (what, next) in variations() {
            let record = run_to_record(&next, 50);
            let tail = tail_of(record.clone(), &logged);
            let back = apply_tail(logged.clone(), &tail);
            assert_eq!(back, record, "{what}");
            assert_eq!(run_from_record(&back).unwrap(), next, "{what}");
            // Only what differs is in the tail.
            assert_eq!(
                tail.decision.is_some(),
                record.decision != logged.decision,
                "{what}"
            );
            let parts = tail.decision.as_ref().map(|d| {
                (
                    !d.conditions.is_empty(),
                    !d.metrics.is_empty(),
                    d.current_replicas != 0 || d.scale_up_limit.is_some(),
                )
            });
            let expected = match what {
                "usage" | "pods" => Some((false, true, false)),
                "message" => Some((true, false, false)),
                "scalars" => Some((false, false, true)),
                _ => None,
            };
            assert_eq!(parts, expected, "{what}");
            assert_eq!(
                tail.metrics.is_some(),
                record.metrics != logged.metrics,
                "{what}"
            );
        }
        let same = tail_of(run_to_record(&variations()[0].1, 50), &logged);
        assert_eq!(
            same,
            pb::RunTail {
                seq: 7,
                count: 7,
                first_time_ms: 1_767_225_630_000,
                last_time_delta_ms: 90_000,
                ..pb::RunTail::default()
            }
        );
    }

    /// Version 3 (a state record whose newest run is a tail), byte for byte: the history
    /// (as in version 2), `next_seq`, `log_len`, then the tail: seq, count, first time, last
    /// time delta, the decision with only the metric outcomes (they changed), and the flags
    /// `logged_conditions`, `logged_extensions`, `logged_scalars`.
    const GOLDEN_V3_STATE: &str = "03 0a1c0801120204081a09e0f4d8edee66b0ea01220908021090dfdaedee66 1008 1803 2a4c 0807 1007 18e0f4d8edee66 20a0fe0a 2a35 221f12100804105b188407291f85eb51b81efd3f220b080212057765622d322801 221208011a0e080a120a6e6f2073616d706c6573 3001 5801 6001";

    #[test]
    fn version_3_state_records_are_byte_for_byte_golden() {
        let logged = run_to_record(&sample_run(), 50);
        let (_, usage) = variations().swap_remove(1);
        let bytes = record::encode_versioned(
            record::VERSION_STATE_TAIL,
            &pb::HpaState {
                history: Some(history_to_record(&sample_history())),
                next_seq: 8,
                log_len: 3,
                pending: None,
                pending_tail: Some(tail_of(run_to_record(&usage, 50), &logged)),
            },
        );
        assert_eq!(
            hex(&bytes),
            GOLDEN_V3_STATE.replace(' ', ""),
            "version-3 state record bytes changed"
        );
        let back: pb::HpaState = record::decode_binary("state", "k", &bytes[1..]).unwrap();
        let run = apply_tail(logged, &back.pending_tail.unwrap());
        assert_eq!(run_from_record(&run).unwrap(), usage);
    }

    #[test]
    fn unknown_codes_are_refused_not_defaulted() {
        let mut r = run_to_record(&sample_run(), 50);
        r.decision.as_mut().unwrap().path = 99;
        let err = run_from_record(&r).unwrap_err();
        assert!(err.contains("99"), "{err}");
    }
}
