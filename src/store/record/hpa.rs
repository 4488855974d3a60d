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

mod readings;
use readings::{
    CADENCE_MS, outcome_from_record, outcome_to_record, readings_from_record, readings_to_record,
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
                    model: match (p.forecaster, p.model) {
                        (0, 0) => None,
                        (0, m) | (m, _) => Some(
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
            model: forecaster_code(p.model)
                .filter(|&c| c <= FIRST_FORECASTERS)
                .unwrap_or(0),
            forecaster: forecaster_code(p.model).unwrap_or(0),
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

/// The forecasters a build before the blend knows (`model` 1 to 4 of the record); the others
/// are written in `forecaster` alone, so that such a build still reads the decision.
const FIRST_FORECASTERS: u32 = 4;

/// A forecaster's number in the record: its place in [`ModelKind::ALL`], from 1.
fn forecaster_code(model: Option<ModelKind>) -> Option<u32> {
    let i = ModelKind::ALL.iter().position(|k| Some(*k) == model)?;
    u32::try_from(i + 1).ok()
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
            Ok(Condition::new(
                codes::condition_type_from(small(code % 16)?)?,
                (code / 16) % 2 == 1,
                codes::condition_reason_from(small((code / 32) % 2048)?)?,
                codes::message_from(small(code / 65_536)?, rest)?,
            ))
        })
        .collect()
}

fn condition_from_record(c: &pb::Condition) -> Result<Condition, String> {
    Ok(Condition::new(
        codes::condition_type_from(c.condition_type)?,
        c.status,
        codes::condition_reason_from(c.reason)?,
        c.message.clone(),
    ))
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

// === readings: `readings` ===

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
mod tests;
