//! A run's readings and a decision's metric outcomes as records: each reading's time as a
//! delta of deltas from the sync period, values as deltas, so that a run of steady
//! decisions costs a few bytes per decision.

use super::*;

/// The gap between readings that is stored as 0: Kubernetes' sync period.
pub(super) const CADENCE_MS: i64 = 15_000;

/// A run's readings as a record (`None` for none), times relative to the run's first time.
pub(super) fn readings_to_record(first_time_ms: i64, readings: &[Reading]) -> Option<pb::Readings> {
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

pub(super) fn without_trailing_zeros(v: &mut Vec<i64>) {
    while v.last() == Some(&0) {
        v.pop();
    }
}

/// The record's readings ([`readings_to_record`]).
pub(super) fn readings_from_record(
    first_time_ms: i64,
    r: &pb::Readings,
) -> Result<Vec<Reading>, String> {
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

pub(super) fn outcome_to_record(
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

pub(super) fn outcome_from_record(m: &pb::MetricOutcome) -> Result<MetricOutcome, String> {
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
