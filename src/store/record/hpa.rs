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
            budget::BudgetReport,
            extensions::{
                ExtensionReport, ExtensionState, FiredRule, MetricHealth, removal::RemovalCandidate,
            },
            predictive::{
                self, PredictiveMode, PredictiveReport,
                model::{LoadModel, ModelKind},
            },
            schedule::{Schedule, ScheduleReport},
        },
        time::Time,
    },
    store::{DecisionEntry, DecisionInputs, PodTotals, PolicyRef, Reading, Run},
};

// === history ===

/// The controller memory as a record, with the migration extensions' state when there is one.
pub(crate) fn history_to_record(h: &History) -> pb::History {
    let recs = h.recommendations.as_deref().unwrap_or(&[]);
    // The first time as it is, then each gap's difference from the previous gap (the first
    // gap's from Kubernetes' cadence).
    let (mut previous, mut previous_gap) = (0i64, CADENCE_MS);
    let mut dods = Vec::with_capacity(recs.len());
    for (i, r) in recs.iter().enumerate() {
        let t = r.time.unix_millis();
        if i == 0 {
            dods.push(t);
        } else {
            let gap = t.wrapping_sub(previous);
            dods.push(gap.wrapping_sub(previous_gap));
            previous_gap = gap;
        }
        previous = t;
    }
    let replicas: Vec<i32> = recs.iter().map(|r| r.replicas).collect();
    let base = recs.first().map_or(0, |r| r.time.unix_millis());
    pb::History {
        has_recommendations: h.recommendations.is_some(),
        recommendation_replicas: Vec::new(),
        recommendation_time_deltas: Vec::new(),
        recommendation_replica_runs: runs_of(&replicas, |n| i32::try_from(n).unwrap_or(i32::MAX)),
        recommendation_time_dod_runs: runs_of(&dods, |n| i64::try_from(n).unwrap_or(i64::MAX)),
        scale_up_events: h
            .scale_up_events
            .iter()
            .map(|e| scale_event_to_record(e, base))
            .collect(),
        scale_down_events: h
            .scale_down_events
            .iter()
            .map(|e| scale_event_to_record(e, base))
            .collect(),
        extensions: h.extensions.as_ref().map(extensions_to_record),
        predictive_on: h.predictive.is_some(),
        predictive_models: h
            .predictive
            .iter()
            .flat_map(|p| &p.models)
            .map(|(metric, model)| pb::PredictiveModel {
                metric: metric.clone(),
                state: model.to_bytes(),
            })
            .collect(),
    }
}

/// `values` as runs: pairs of (value, how many more times it repeats), the repeat counts as
/// `length` makes them (the lists are bounded by `prune`, far below any type's range).
fn runs_of<T: Copy + PartialEq>(values: &[T], length: impl Fn(usize) -> T) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    let mut i = 0;
    while i < values.len() {
        let same = values[i..].iter().take_while(|v| **v == values[i]).count();
        out.push(values[i]);
        out.push(length(same - 1));
        i += same;
    }
    out
}

/// The values of [`runs_of`]'s pairs, at most `limit` of them.
fn values_of<T: Copy + TryInto<usize>>(runs: &[T], limit: usize) -> Result<Vec<T>, String> {
    if !runs.len().is_multiple_of(2) {
        return Err("a run without its length".into());
    }
    let mut out = Vec::new();
    for pair in runs.chunks(2) {
        let more: usize = pair[1]
            .try_into()
            .map_err(|_| "a negative run length".to_owned())?;
        if out.len() + more + 1 > limit {
            return Err(format!("more than {limit} recommendations"));
        }
        out.extend(std::iter::repeat_n(pair[0], more + 1));
    }
    Ok(out)
}

/// The record's controller memory.
pub(crate) fn history_from_record(r: &pb::History) -> Result<History, String> {
    // Version 4: runs of replicas and of differences of gaps; older versions: the lists.
    const LIMIT: usize = 1 << 20;
    let (replicas, deltas): (Vec<i32>, Vec<i64>) = if r.recommendation_replicas.is_empty()
        && r.recommendation_time_deltas.is_empty()
    {
        let replicas = values_of(&r.recommendation_replica_runs, LIMIT)?;
        let mut gap = CADENCE_MS;
        let deltas = values_of(&r.recommendation_time_dod_runs, LIMIT)?
            .iter()
            .enumerate()
            .map(|(i, &dod)| {
                if i == 0 {
                    return dod;
                }
                gap = gap.wrapping_add(dod);
                gap
            })
            .collect();
        (replicas, deltas)
    } else if r.recommendation_replica_runs.is_empty() && r.recommendation_time_dod_runs.is_empty()
    {
        (
            r.recommendation_replicas.clone(),
            r.recommendation_time_deltas.clone(),
        )
    } else {
        return Err("recommendations stored twice".into());
    };
    if replicas.len() != deltas.len() {
        return Err(format!(
            "{} recommendation counts but {} times",
            replicas.len(),
            deltas.len()
        ));
    }
    let recommendations = r.has_recommendations.then(|| {
        let mut t = 0i64;
        replicas
            .iter()
            .zip(&deltas)
            .map(|(&replicas, &delta)| {
                t = t.wrapping_add(delta);
                Recommendation {
                    replicas,
                    time: Time::from_unix_millis(t),
                }
            })
            .collect()
    });
    let base = deltas.first().copied().unwrap_or(0);
    Ok(History {
        recommendations,
        scale_up_events: r
            .scale_up_events
            .iter()
            .map(|e| scale_event_from_record(e, base))
            .collect(),
        scale_down_events: r
            .scale_down_events
            .iter()
            .map(|e| scale_event_from_record(e, base))
            .collect(),
        extensions: r.extensions.as_ref().map(extensions_from_record),
        predictive: (r.predictive_on || !r.predictive_models.is_empty()).then(|| {
            predictive::State {
                // A model that does not decode (another format, a damaged blob) starts afresh.
                models: r
                    .predictive_models
                    .iter()
                    .filter_map(|m| {
                        LoadModel::from_bytes(&m.state)
                            .ok()
                            .map(|model| (m.metric.clone(), model))
                    })
                    .collect(),
            }
        }),
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

/// A scale event, its time relative to `base` (the history's first recommendation time).
fn scale_event_to_record(e: &ScaleEvent, base: i64) -> pb::ScaleEvent {
    pb::ScaleEvent {
        replica_change: e.replica_change,
        time_ms: 0,
        outdated: e.outdated,
        time_offset_ms: Some(e.time.unix_millis().wrapping_sub(base)),
    }
}

fn scale_event_from_record(e: &pb::ScaleEvent, base: i64) -> ScaleEvent {
    ScaleEvent {
        replica_change: e.replica_change,
        time: Time::from_unix_millis(
            e.time_offset_ms
                .map_or(e.time_ms, |offset| base.wrapping_add(offset)),
        ),
        outdated: e.outdated,
    }
}

// === decision runs ===

/// A decision run as a record, naming at most `max_pod_names` pods per group.
pub(crate) fn run_to_record(e: &DecisionEntry, max_pod_names: usize) -> pb::DecisionRun {
    let first = e.run.first_time.unix_millis();
    pb::DecisionRun {
        seq: e.seq,
        count: e.run.count,
        first_time_ms: first,
        // Left out when the last reading says it.
        last_time_delta_ms: (e.readings.last().map(|r| r.time) != Some(e.time))
            .then(|| e.time.unix_millis().wrapping_sub(first)),
        decision: Some(decision_to_record(e, max_pod_names)),
        metrics: e.metrics.iter().map(metric_spec_to_record).collect(),
        inputs: e.inputs.as_ref().map(inputs_to_record),
        readings: readings_to_record(first, &e.readings),
        spec_as_next: false,
    }
}

/// A closed run as logged by the commit that closed it with `next` (the new newest run):
/// [`run_to_record`], its spec and inputs left out when they are `next`'s (a run has one spec:
/// [`DecisionEntry::extends_with`]), as they are for most of a target's runs. Readers take
/// them from the successor (`store::hpa::runs_with_pending`): the successor is newer, so it
/// outlives the run in the log, and the newest run always has its own.
pub(crate) fn closed_run_to_record(
    run: &DecisionEntry,
    next: &DecisionEntry,
    max_pod_names: usize,
) -> pb::DecisionRun {
    let mut r = run_to_record(run, max_pod_names);
    if run.inputs.is_some() && run.inputs == next.inputs && run.metrics == next.metrics {
        r.metrics.clear();
        r.inputs = None;
        r.spec_as_next = true;
    }
    r
}

/// A decision run's stored bytes (version 4).
pub(crate) fn encode_run(run: &pb::DecisionRun) -> Vec<u8> {
    super::encode_versioned(super::VERSION_HPA, run)
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
        conditions: conditions_from_record(d)?,
        metrics,
        path: codes::decision_path_from(d.path)?,
        prenormalized_replicas: d.prenormalized_replicas,
        stabilized_replicas: d.stabilized_replicas,
        scale_up_limit: d.scale_up_limit,
        scale_down_limit: d.scale_down_limit,
        error: d.error.clone(),
        rescale_reason: d
            .rescale_reason
            .as_deref()
            .map(|r| codes::message_from(d.rescale_reason_prefix, r))
            .transpose()?,
        extensions: d
            .extensions
            .as_ref()
            .map(report_from_record)
            .transpose()?
            .map(Box::new),
        budget: d.budget.as_ref().map(|b| {
            Box::new(BudgetReport {
                group: b.group.clone(),
                uncapped_replicas: b.uncapped_replicas,
                fair_share: b.fair_share,
                capacity: b.capacity,
                units_per_replica: b.units_per_replica,
                used: b.used,
            })
        }),
        schedule: d.schedule.as_ref().map(|s| {
            Box::new(ScheduleReport {
                applied: s.applied.clone(),
                min_replicas: s.min_replicas,
                max_replicas: s.max_replicas,
                floor: s.floor,
                ceiling: s.ceiling,
                floor_by: s.floor_by.clone(),
                ceiling_by: s.ceiling_by.clone(),
                conflict: s.conflict,
                until: s.until_ms.map(Time::from_unix_millis),
                until_local: (!s.until_local.is_empty()).then(|| s.until_local.clone()),
            })
        }),
        predictive: d
            .predictive
            .as_ref()
            .map(|p| -> Result<Box<PredictiveReport>, String> {
                Ok(Box::new(PredictiveReport {
                    mode: match p.mode {
                        1 => PredictiveMode::ForecastOnly,
                        2 => PredictiveMode::ScaleUp,
                        m => return Err(format!("predictive mode {m}")),
                    },
                    metric: (!p.metric.is_empty()).then(|| p.metric.clone()),
                    model: match p.model {
                        0 => None,
                        m => Some(
                            *ModelKind::ALL
                                .get(m as usize - 1)
                                .ok_or_else(|| format!("forecast model {m}"))?,
                        ),
                    },
                    load: p.load,
                    forecast_load: p.forecast_load,
                    forecast_replicas: p.forecast_replicas,
                    reactive_replicas: p.reactive_replicas,
                    raised: p.raised,
                    wape: p.wape,
                    reason: codes::condition_reason_from(p.reason)?,
                }))
            })
            .transpose()?,
    };
    let readings = r
        .readings
        .as_ref()
        .map(|x| readings_from_record(r.first_time_ms, x))
        .transpose()?
        .unwrap_or_default();
    Ok(DecisionEntry {
        time: match (r.last_time_delta_ms, readings.last()) {
            (Some(delta), _) => Time::from_unix_millis(r.first_time_ms.wrapping_add(delta)),
            (None, Some(last)) => last.time,
            (None, None) => Time::from_unix_millis(r.first_time_ms),
        },
        decision,
        metrics: r
            .metrics
            .iter()
            .map(metric_spec_from_record)
            .collect::<Result<_, _>>()?,
        inputs: r.inputs.as_ref().map(inputs_from_record).transpose()?,
        readings,
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
        readings,
        spec_as_next: _,
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
            let (conditions, packed, metrics, extensions) = (
                std::mem::take(&mut d.conditions),
                d.packed_conditions.take(),
                std::mem::take(&mut d.metrics),
                d.extensions.take(),
            );
            tail.logged_scalars = d
                == pb::Decision {
                    conditions: Vec::new(),
                    packed_conditions: None,
                    metrics: Vec::new(),
                    extensions: None,
                    ..base.clone()
                };
            if tail.logged_scalars {
                d = pb::Decision::default();
            }
            tail.logged_conditions =
                conditions == base.conditions && packed == base.packed_conditions;
            if !tail.logged_conditions {
                d.conditions = conditions;
                d.packed_conditions = packed;
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
    if readings != logged.readings {
        tail.readings = readings;
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
        let (conditions, packed, metrics, extensions) = (
            std::mem::take(&mut base.conditions),
            base.packed_conditions.take(),
            std::mem::take(&mut base.metrics),
            base.extensions.take(),
        );
        let mut d = if tail.logged_scalars {
            pb::Decision {
                conditions: d.conditions.clone(),
                packed_conditions: d.packed_conditions.clone(),
                metrics: d.metrics.clone(),
                extensions: d.extensions.clone(),
                ..base
            }
        } else {
            d.clone()
        };
        if tail.logged_conditions {
            d.conditions = conditions;
            d.packed_conditions = packed;
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
    if let Some(r) = &tail.readings {
        logged.readings = Some(r.clone());
    }
    logged
}

fn decision_to_record(e: &DecisionEntry, max_pod_names: usize) -> pb::Decision {
    let d = &e.decision;
    let (rescale_reason_prefix, rescale_reason) = d
        .rescale_reason
        .as_deref()
        .map(codes::message_prefix)
        .map_or((0, None), |(code, rest)| (code, Some(rest.to_owned())));
    pb::Decision {
        current_replicas: d.current_replicas,
        desired_replicas: d.desired_replicas,
        conditions: Vec::new(),
        packed_conditions: Some(conditions_to_record(&d.conditions)),
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
        rescale_reason,
        rescale_reason_prefix,
        extensions: d.extensions.as_deref().map(report_to_record),
        budget: d.budget.as_deref().map(|b| pb::BudgetReport {
            group: b.group.clone(),
            uncapped_replicas: b.uncapped_replicas,
            fair_share: b.fair_share,
            capacity: b.capacity,
            units_per_replica: b.units_per_replica,
            used: b.used,
        }),
        schedule: d.schedule.as_deref().map(|s| pb::ScheduleReport {
            applied: s.applied.clone(),
            min_replicas: s.min_replicas,
            max_replicas: s.max_replicas,
            floor: s.floor,
            ceiling: s.ceiling,
            floor_by: s.floor_by.clone(),
            ceiling_by: s.ceiling_by.clone(),
            conflict: s.conflict,
            until_ms: s.until.map(Time::unix_millis),
            until_local: s.until_local.clone().unwrap_or_default(),
        }),
        predictive: d.predictive.as_deref().map(|p| pb::PredictiveReport {
            mode: match p.mode {
                PredictiveMode::ForecastOnly => 1,
                PredictiveMode::ScaleUp | PredictiveMode::Off => 2,
            },
            metric: p.metric.clone().unwrap_or_default(),
            model: p.model.map_or(0, |m| {
                ModelKind::ALL
                    .iter()
                    .position(|k| *k == m)
                    .map_or(0, |i| i as u32 + 1)
            }),
            load: p.load,
            forecast_load: p.forecast_load,
            forecast_replicas: p.forecast_replicas,
            reactive_replicas: p.reactive_replicas,
            raised: p.raised,
            wape: p.wape,
            reason: codes::condition_reason(p.reason),
        }),
    }
}

/// Conditions as their packed codes and message rests (version 4).
fn conditions_to_record(conditions: &[Condition]) -> pb::Conditions {
    let mut out = pb::Conditions::default();
    for c in conditions {
        let (prefix, rest) = codes::message_prefix(&c.message);
        out.codes.push(
            u64::from(codes::condition_type(c.condition_type))
                + 16 * u64::from(c.status)
                + 32 * u64::from(codes::condition_reason(c.reason))
                + 65_536 * u64::from(prefix),
        );
        out.message_rests.push(rest.to_owned());
    }
    while out.message_rests.last().is_some_and(String::is_empty) {
        out.message_rests.pop();
    }
    out
}

/// A decision's conditions: packed (version 4) or as messages (versions 2 and 3).
fn conditions_from_record(d: &pb::Decision) -> Result<Vec<Condition>, String> {
    let Some(packed) = &d.packed_conditions else {
        return d.conditions.iter().map(condition_from_record).collect();
    };
    if !d.conditions.is_empty() {
        return Err("conditions stored twice".into());
    }
    if packed.message_rests.len() > packed.codes.len() {
        return Err("more condition messages than conditions".into());
    }
    packed
        .codes
        .iter()
        .enumerate()
        .map(|(i, &code)| {
            let small = |v: u64| u32::try_from(v).map_err(|_| format!("condition code {code}"));
            let rest = packed.message_rests.get(i).map_or("", String::as_str);
            Ok(Condition {
                condition_type: codes::condition_type_from(small(code % 16)?)?,
                status: (code / 16) % 2 == 1,
                reason: codes::condition_reason_from(small((code / 32) % 2048)?)?,
                message: codes::message_from(small(code / 65_536)?, rest)?,
            })
        })
        .collect()
}

fn condition_from_record(c: &pb::Condition) -> Result<Condition, String> {
    Ok(Condition {
        condition_type: codes::condition_type_from(c.condition_type)?,
        status: c.status,
        reason: codes::condition_reason_from(c.reason)?,
        message: c.message.clone(),
    })
}

// === schedules ===

/// A schedule as a record (a spec's, or a group's capacity schedule).
pub(crate) fn schedule_record(s: &Schedule) -> pb::Schedule {
    pb::Schedule {
        name: s.name.clone(),
        start: s.start.clone(),
        end: s.end.clone(),
        duration_ms: s
            .duration
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        time_zone: s.time_zone.clone(),
        min_replicas: s.min_replicas,
        max_replicas: s.max_replicas,
    }
}

/// A schedule from its record.
pub(crate) fn schedule_of_record(s: &pb::Schedule) -> Schedule {
    Schedule {
        name: s.name.clone(),
        start: s.start.clone(),
        end: s.end.clone(),
        duration: s.duration_ms.map(Duration::from_millis),
        time_zone: s.time_zone.clone(),
        min_replicas: s.min_replicas,
        max_replicas: s.max_replicas,
    }
}

// === readings ===

/// The gap between readings that is stored as 0: Kubernetes' sync period.
const CADENCE_MS: i64 = 15_000;

/// A run's readings as a record (`None` for none), times relative to the run's first time.
fn readings_to_record(first_time_ms: i64, readings: &[Reading]) -> Option<pb::Readings> {
    let first = readings.first()?;
    let metrics = readings.iter().map(|r| r.values.len()).max().unwrap_or(0);
    let mut previous_time = first.time.unix_millis();
    let mut previous_gap = CADENCE_MS;
    let mut time_dods_ms: Vec<i64> = readings[1..]
        .iter()
        .map(|r| {
            let gap = r.time.unix_millis().wrapping_sub(previous_time);
            previous_time = r.time.unix_millis();
            let dod = gap.wrapping_sub(previous_gap);
            previous_gap = gap;
            dod
        })
        .collect();
    without_trailing_zeros(&mut time_dods_ms);
    let metrics = (0..metrics)
        .map(|m| {
            let mut out = pb::MetricReadings::default();
            let mut previous = 0i64;
            for (i, r) in readings.iter().enumerate() {
                match r.values.get(m).copied().flatten() {
                    Some(v) => {
                        out.value_deltas.push(v.wrapping_sub(previous));
                        previous = v;
                    }
                    None => out.absent.push(u32::try_from(i).unwrap_or(u32::MAX)),
                }
            }
            without_trailing_zeros(&mut out.value_deltas);
            out
        })
        .collect();
    Some(pb::Readings {
        count: u32::try_from(readings.len()).unwrap_or(u32::MAX),
        first_time_offset_ms: first.time.unix_millis().wrapping_sub(first_time_ms),
        time_dods_ms,
        metrics,
    })
}

fn without_trailing_zeros(v: &mut Vec<i64>) {
    while v.last() == Some(&0) {
        v.pop();
    }
}

/// The record's readings ([`readings_to_record`]).
fn readings_from_record(first_time_ms: i64, r: &pb::Readings) -> Result<Vec<Reading>, String> {
    let count = r.count as usize;
    if count == 0 || r.time_dods_ms.len() >= count {
        return Err(format!(
            "{} readings with {} time differences",
            r.count,
            r.time_dods_ms.len()
        ));
    }
    let mut time = first_time_ms.wrapping_add(r.first_time_offset_ms);
    let mut gap = CADENCE_MS;
    let mut readings = Vec::with_capacity(count);
    for i in 0..count {
        if i > 0 {
            gap = gap.wrapping_add(r.time_dods_ms.get(i - 1).copied().unwrap_or(0));
            time = time.wrapping_add(gap);
        }
        readings.push(Reading {
            time: Time::from_unix_millis(time),
            values: vec![None; r.metrics.len()],
        });
    }
    for (m, metric) in r.metrics.iter().enumerate() {
        if metric.value_deltas.len() + metric.absent.len() > count {
            return Err(format!(
                "metric {m} has {} readings and {} absent of {count}",
                metric.value_deltas.len(),
                metric.absent.len()
            ));
        }
        let mut absent = metric.absent.iter().peekable();
        let mut deltas = metric.value_deltas.iter();
        let mut value = 0i64;
        for (i, reading) in readings.iter_mut().enumerate() {
            if absent.next_if(|&&a| a as usize == i).is_some() {
                continue;
            }
            value = value.wrapping_add(deltas.next().copied().unwrap_or(0));
            reading.values[m] = Some(value);
        }
        if absent.next().is_some() {
            return Err(format!(
                "metric {m}: absent positions out of order or beyond {count}"
            ));
        }
    }
    Ok(readings)
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

/// The controller settings a version-4 record leaves out (`SettingsChanges`): Kubernetes
/// 1.37's defaults, literal, so that a later change of the engine's defaults does not change
/// what old records say.
const RECORD_DEFAULT_SETTINGS: pb::Settings = pb::Settings {
    tolerance: 0.1,
    cpu_initialization_period_ms: 300_000,
    initial_readiness_delay_ms: 30_000,
    downscale_stabilization_ms: 300_000,
    scale_up_limit_factor: 2.0,
    scale_up_limit_minimum: 4.0,
    scale_to_zero: true,
};

fn inputs_to_record(i: &DecisionInputs) -> pb::Inputs {
    let s = &i.settings;
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let d = &RECORD_DEFAULT_SETTINGS;
    // Compared as stored (bits for the floats), so that any value reads back exactly.
    let changed_f = |v: f64, default: f64| (v.to_bits() != default.to_bits()).then_some(v);
    let changed = |v: u64, default: u64| (v != default).then_some(v);
    pb::Inputs {
        min_replicas: i.min_replicas,
        max_replicas: i.max_replicas,
        behavior: i.behavior.as_ref().map(|b| pb::Behavior {
            scale_up: b.scale_up.as_ref().map(rules_to_record),
            scale_down: b.scale_down.as_ref().map(rules_to_record),
        }),
        settings: None,
        policy_name: i
            .policy
            .as_ref()
            .map(|p| p.name.clone())
            .unwrap_or_default(),
        policy_version: i.policy.as_ref().map_or(0, |p| p.version),
        shadow: i.shadow,
        schedules: i.schedules.iter().map(schedule_record).collect(),
        settings_changes: Some(pb::SettingsChanges {
            tolerance: changed_f(s.tolerance, d.tolerance),
            cpu_initialization_period_ms: changed(
                ms(s.cpu_initialization_period),
                d.cpu_initialization_period_ms,
            ),
            initial_readiness_delay_ms: changed(
                ms(s.initial_readiness_delay),
                d.initial_readiness_delay_ms,
            ),
            downscale_stabilization_ms: changed(
                ms(s.downscale_stabilization),
                d.downscale_stabilization_ms,
            ),
            scale_up_limit_factor: changed_f(s.scale_up_limit_factor, d.scale_up_limit_factor),
            scale_up_limit_minimum: changed_f(s.scale_up_limit_minimum, d.scale_up_limit_minimum),
            scale_to_zero: (s.scale_to_zero != d.scale_to_zero).then_some(s.scale_to_zero),
        }),
    }
}

fn inputs_from_record(i: &pb::Inputs) -> Result<DecisionInputs, String> {
    let s = match (&i.settings, &i.settings_changes) {
        (Some(s), None) => *s,
        (None, Some(c)) => {
            let d = RECORD_DEFAULT_SETTINGS;
            pb::Settings {
                tolerance: c.tolerance.unwrap_or(d.tolerance),
                cpu_initialization_period_ms: c
                    .cpu_initialization_period_ms
                    .unwrap_or(d.cpu_initialization_period_ms),
                initial_readiness_delay_ms: c
                    .initial_readiness_delay_ms
                    .unwrap_or(d.initial_readiness_delay_ms),
                downscale_stabilization_ms: c
                    .downscale_stabilization_ms
                    .unwrap_or(d.downscale_stabilization_ms),
                scale_up_limit_factor: c.scale_up_limit_factor.unwrap_or(d.scale_up_limit_factor),
                scale_up_limit_minimum: c
                    .scale_up_limit_minimum
                    .unwrap_or(d.scale_up_limit_minimum),
                scale_to_zero: c.scale_to_zero.unwrap_or(d.scale_to_zero),
            }
        }
        (None, None) => return Err("inputs without settings".into()),
        (Some(_), Some(_)) => return Err("inputs with settings stored twice".into()),
    };
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
        policy: (!i.policy_name.is_empty()).then(|| PolicyRef {
            name: i.policy_name.clone(),
            version: i.policy_version,
        }),
        shadow: i.shadow,
        schedules: i.schedules.iter().map(schedule_of_record).collect(),
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
            budget: None,
            schedule: None,
            predictive: None,
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
                policy: None,
                shadow: false,
                schedules: Vec::new(),
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
            readings: Vec::new(),
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
            predictive: None,
        }
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The sample run as this build records it: a reading per decision (the external metric
    /// failed in each).
    fn sample_run_with_readings() -> DecisionEntry {
        let mut run = sample_run();
        run.readings = [
            (1_767_225_630_000, 85),
            (1_767_225_645_000, 88),
            (1_767_225_660_000, 90),
        ]
        .into_iter()
        .map(|(t, cpu)| Reading {
            time: Time::from_unix_millis(t),
            values: vec![Some(cpu), None],
        })
        .collect();
        run
    }

    /// Version 2 as builds before version 4 wrote it, byte for byte: still read, as the
    /// same run (without readings) and history.
    const GOLDEN_V2_RUN: &str = "020807100318e0f4d8edee6620e0d4032ad101080210041a4110011804223b7468652048504120636f6e74726f6c6c6572207761732061626c6520746f207570646174652074686520746172676574207363616c6520746f2034221f12100804105a18840729cdccccccccccfc3f220b080212057765622d322801221208011a0e080a120a6e6f2073616d706c657328053004380440084801520a6e6f2073616d706c65735a3d637075207265736f75726365207574696c697a6174696f6e202870657263656e74616765206f662072657175657374292061626f766520746172676574320912036370752202103232110804120571756575652206080220b0ea013a480801100a1a190a17080010001801220608011064180f299a9999999999a93f2227099a9999999999b93f10e0a71218b0ea0120e0a712290000000000000040310000000000001040";
    const GOLDEN_V2_HISTORY: &str = "020801120204081a09e0f4d8edee66b0ea01220908021090dfdaedee66";

    fn unhex(s: &str) -> Vec<u8> {
        let s = s.replace(' ', "");
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn version_2_records_still_read() {
        let run = unhex(GOLDEN_V2_RUN);
        assert_eq!(run[0], VERSION_BINARY);
        let decoded: pb::DecisionRun = record::decode_binary("decision", "k", &run[1..]).unwrap();
        assert_eq!(run_from_record(&decoded).unwrap(), sample_run());
        let history = unhex(GOLDEN_V2_HISTORY);
        let decoded: pb::History = record::decode_binary("state", "k", &history[1..]).unwrap();
        assert_eq!(history_from_record(&decoded).unwrap(), sample_history());
    }

    /// Version 4 on disk, byte for byte: a change here is a format change (a new version
    /// byte and a migration), never an accident of renaming an engine type. The conditions
    /// are packed codes (field 14: the message prefix code 14 with the rest "4"), the last
    /// time is left out (the last reading's), the rescale
    /// reason is prefix code 21 with no rest, the readings follow the run (field 8: three
    /// readings, their zero time differences left out, cpu 85 +3 +2, the external metric
    /// absent at 0, 1, 2); the inputs' settings are only what differs from the fixed defaults
    /// (the gate, off).
    const GOLDEN_V4_RUN: &str = "040807100318e0f4d8edee662a5d08021004221f12100804105a18840729cdccccccccccfc3f220b080212057765622d322801221208011a0e080a120a6e6f2073616d706c657328053004380440084801520a6e6f2073616d706c65735a00681572080a03908138120134320912036370752202103232110804120571756575652206080220b0ea013a230801100a1a190a17080010001801220608011064180f299a9999999999a93f2a02380042111a060a04aa0106041a0512030001022003";
    /// The history of version 4: recommendation times as delta-of-delta.
    const GOLDEN_V4_HISTORY: &str = "0408012206080220b0ea013209e0f4d8edee660000003a0404000800";

    #[test]
    fn version_4_records_are_byte_for_byte_golden_and_read_back() {
        let run = encode_run(&run_to_record(&sample_run_with_readings(), 50));
        assert_eq!(run[0], record::VERSION_HPA);
        assert_eq!(hex(&run), GOLDEN_V4_RUN, "run record bytes changed");
        let history =
            record::encode_versioned(record::VERSION_HPA, &history_to_record(&sample_history()));
        assert_eq!(
            hex(&history),
            GOLDEN_V4_HISTORY,
            "history record bytes changed"
        );
        // The same run as version 2 wrote it, plus its readings, in three quarters of the bytes.
        assert!(
            run.len() < unhex(GOLDEN_V2_RUN).len() * 3 / 4,
            "{} B",
            run.len()
        );

        let decoded: pb::DecisionRun = record::decode_binary("decision", "k", &run[1..]).unwrap();
        assert_eq!(
            run_from_record(&decoded).unwrap(),
            sample_run_with_readings()
        );
        let decoded: pb::History = record::decode_binary("state", "k", &history[1..]).unwrap();
        assert_eq!(history_from_record(&decoded).unwrap(), sample_history());
    }

    /// Every message the engine has as a constant is stored as a code alone, and any text
    /// (a prefix, part of one, none, or a prefix followed by more) reads back as itself.
    #[test]
    fn messages_are_prefix_codes_and_read_back_exactly() {
        use crate::engine::hpa::{messages as controller, normalize::messages as normalize};
        for m in [
            normalize::READY_FOR_NEW_SCALE,
            normalize::SCALE_DOWN_STABILIZED,
            normalize::SCALE_UP_STABILIZED,
            normalize::DESIRED_WITHIN_RANGE,
            normalize::TOO_MANY_REPLICAS,
            normalize::TOO_FEW_REPLICAS,
            normalize::SCALE_UP_LIMIT,
            normalize::SCALE_DOWN_LIMIT,
            controller::SUCCEEDED_GET_SCALE,
            controller::SCALING_DISABLED,
            controller::ABOVE_MAX,
            controller::BELOW_MIN,
            controller::ALL_BELOW_TARGET,
        ] {
            let (code, rest) = codes::message_prefix(m);
            assert!(code > 0 && rest.is_empty(), "{m:?} is not a code");
        }
        for m in [
            "",
            "the HPA",
            "the HPA controller was able to update the target scale to 12",
            "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)",
            "the HPA was able to successfully calculate a replica count from cpu resource",
            "a message of someone else's",
        ] {
            let (code, rest) = codes::message_prefix(m);
            assert_eq!(codes::message_from(code, rest).unwrap(), m);
        }
        assert!(codes::message_from(codes::MESSAGE_PREFIXES.len() as u32 + 1, "").is_err());
    }

    /// Settings are stored as their changes to the fixed defaults: none for Kubernetes 1.37's
    /// defaults, and any value (also -0.0 against 0.0) reads back exactly.
    #[test]
    fn settings_are_stored_as_changes_and_read_back_exactly() {
        let mut inputs = sample_run().inputs.unwrap();
        inputs.settings = Settings::default();
        assert!(
            inputs.settings.scale_to_zero,
            "the engine's defaults are 1.37's"
        );
        let r = inputs_to_record(&inputs);
        assert_eq!(r.settings_changes, Some(pb::SettingsChanges::default()));
        assert_eq!(inputs_from_record(&r).unwrap(), inputs);
        let changed = [
            Settings {
                tolerance: -0.0,
                ..Settings::default()
            },
            Settings {
                tolerance: 0.25,
                ..Settings::default()
            },
            Settings {
                cpu_initialization_period: Duration::from_millis(1),
                ..Settings::default()
            },
            Settings {
                initial_readiness_delay: Duration::ZERO,
                ..Settings::default()
            },
            Settings {
                downscale_stabilization: Duration::from_secs(3600),
                ..Settings::default()
            },
            Settings {
                scale_up_limit_factor: 3.5,
                ..Settings::default()
            },
            Settings {
                scale_up_limit_minimum: 0.0,
                ..Settings::default()
            },
            Settings {
                scale_to_zero: false,
                ..Settings::default()
            },
        ];
        for settings in changed {
            inputs.settings = settings;
            let back = inputs_from_record(&inputs_to_record(&inputs)).unwrap();
            assert_eq!(
                back.settings.tolerance.to_bits(),
                inputs.settings.tolerance.to_bits()
            );
            assert_eq!(back, inputs);
        }
    }

    /// Readings at any times (gaps irregular, negative, huge) and with any values missing
    /// read back exactly.
    #[test]
    fn readings_read_back_exactly() {
        let cases: Vec<Vec<Reading>> = vec![
            vec![],
            vec![Reading {
                time: Time::from_unix_millis(5),
                values: vec![],
            }],
            (0..40)
                .map(|i| Reading {
                    time: Time::from_unix_millis(1_000 + i * i * 977 - (i % 3) * 15_000),
                    values: vec![
                        (i % 4 != 0).then_some(i * 1_000_003 - 7),
                        None,
                        Some(i64::MIN + i),
                    ],
                })
                .collect(),
        ];
        for readings in cases {
            let r = readings_to_record(-3, &readings);
            let back = r
                .as_ref()
                .map(|r| readings_from_record(-3, r).unwrap())
                .unwrap_or_default();
            assert_eq!(back, readings);
        }
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
        let full = record::encode_versioned(
            record::VERSION_HPA,
            &pb::HpaState {
                history: Some(history_to_record(&history)),
                next_seq: 12,
                log_len: 11,
                pending: Some(run_to_record(&sample_run(), 50)),
                pending_tail: None,
            },
        );
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
        let mut budget = later(sample_run());
        budget.decision.budget = Some(Box::new(BudgetReport {
            group: "gpus".into(),
            uncapped_replicas: 6,
            fair_share: 4,
            capacity: 10,
            units_per_replica: 2,
            used: 9,
        }));
        let mut policy = later(sample_run());
        policy.inputs.as_mut().unwrap().policy = Some(PolicyRef {
            name: "tier/web".into(),
            version: 3,
        });
        let mut shadow = later(sample_run());
        shadow.inputs.as_mut().unwrap().shadow = true;
        vec![
            ("same", later(sample_run())),
            ("usage", usage),
            ("message", message),
            ("pods", pods),
            ("scalars", scalars),
            ("inputs", inputs),
            ("no inputs", no_inputs),
            ("metric specs", specs),
            ("budget", budget),
            ("policy", policy),
            ("shadow", shadow),
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
                    !d.conditions.is_empty() || d.packed_conditions.is_some(),
                    !d.metrics.is_empty(),
                    d.current_replicas != 0 || d.scale_up_limit.is_some(),
                )
            });
            let expected = match what {
                "usage" | "pods" => Some((false, true, false)),
                "message" => Some((true, false, false)),
                "scalars" | "budget" => Some((false, false, true)),
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
                last_time_delta_ms: Some(90_000),
                ..pb::RunTail::default()
            }
        );
    }

    /// Version 3 (a state record whose newest run is a tail), byte for byte: the history
    /// (as in version 2), `next_seq`, `log_len`, then the tail: seq, count, first time, last
    /// time delta, the decision with only the metric outcomes (they changed), and the flags
    /// `logged_conditions`, `logged_extensions`, `logged_scalars`.
    const GOLDEN_V3_STATE: &str = "03 0a1c0801120204081a09e0f4d8edee66b0ea01220908021090dfdaedee66 1008 1803 2a4c 0807 1007 18e0f4d8edee66 20a0fe0a 2a35 221f12100804105b188407291f85eb51b81efd3f220b080212057765622d322801 221208011a0e080a120a6e6f2073616d706c6573 3001 5801 6001";

    /// Version 3 as builds before version 4 wrote it: its tail over the version-2 run
    /// golden reads as the same run as then.
    #[test]
    fn version_3_state_records_still_read() {
        let logged = unhex(GOLDEN_V2_RUN);
        let logged: pb::DecisionRun = record::decode_binary("decision", "k", &logged[1..]).unwrap();
        let (_, usage) = variations().swap_remove(1);
        let bytes = unhex(GOLDEN_V3_STATE);
        assert_eq!(bytes[0], record::VERSION_STATE_TAIL);
        let back: pb::HpaState = record::decode_binary("state", "k", &bytes[1..]).unwrap();
        assert_eq!(
            history_from_record(back.history.as_ref().unwrap()).unwrap(),
            sample_history()
        );
        let run = apply_tail(logged, &back.pending_tail.unwrap());
        assert_eq!(run_from_record(&run).unwrap(), usage);
    }

    /// Version 4 state record whose newest run is a tail, byte for byte: the history (replicas
    /// and times as runs, the scale event's time from the first recommendation's), `next_seq`,
    /// `log_len`, then the tail: seq, count, first time (the last time is the last reading's),
    /// the decision with only the metric outcomes (they changed), the flags
    /// `logged_conditions`, `logged_extensions`, `logged_scalars`, and the run's readings.
    const GOLDEN_V4_STATE: &str = "04 0a1b08012206080220b0ea013209e0f4d8edee660000003a0404000800 1008 1803 2a64 0807 1007 18e0f4d8edee66 2a35 221f12100804105b188407291f85eb51b81efd3f220b080212057765622d322801 221208011a0e080a120a6e6f2073616d706c6573 3001 5801 6001 6a1a 1205000090bf05 1a070a05aa01060402 1a06120400010203 2004";

    #[test]
    fn version_4_state_records_are_byte_for_byte_golden() {
        let logged = run_to_record(&sample_run_with_readings(), 50);
        let (_, mut usage) = variations().swap_remove(1);
        usage.readings = sample_run_with_readings().readings;
        usage.readings.push(Reading {
            time: usage.time,
            values: vec![Some(91), None],
        });
        let bytes = crate::store::hpa::StoredState::encode_tail(
            &sample_history(),
            8,
            3,
            tail_of(run_to_record(&usage, 50), &logged),
        );
        assert_eq!(
            hex(&bytes),
            GOLDEN_V4_STATE.replace(' ', ""),
            "version-4 state record bytes changed"
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
