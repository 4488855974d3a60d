//! Store → proto for the horizontal service: logged decisions and a target's history (the
//! parts of a decision are autoscaled-wire's [`hpa_response`]).

use autoscaled_wire::convert::{
    hpa_response::{budget_report, explanation, metric_status, predictive_report, schedule_report},
    migration, to_timestamp,
};

use crate::{
    engine::hpa::{history::History, spec::MetricTargetType},
    pb::v1 as pb,
    store::{DecisionEntry, PolicyRef, Reading},
};

/// A logged decision.
pub(crate) fn decision_record(e: &DecisionEntry) -> pb::DecisionRecord {
    let d = &e.decision;
    pb::DecisionRecord {
        evaluation_time: Some(to_timestamp(e.time)),
        current_replicas: d.current_replicas,
        desired_replicas: d.desired_replicas,
        conditions: d.conditions.iter().map(pb::Condition::from).collect(),
        metrics: d
            .metrics
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let mut status = metric_status(&e.metrics, m);
                // The stored record names at most N pods per group; the totals count all.
                if let Some(g) = status.pod_groups.as_mut() {
                    let totals = e.pod_totals(i);
                    g.unready_total = totals.unready;
                    g.missing_total = totals.missing;
                    g.ignored_total = totals.ignored;
                }
                status
            })
            .collect(),
        explanation: Some(explanation(d)),
        run_count: e.run.count,
        first_evaluation_time: Some(to_timestamp(e.run.first_time)),
        readings: {
            // Per entry of the record's metrics: its spec index and target type.
            let slots: Vec<(usize, Option<MetricTargetType>)> = d
                .metrics
                .iter()
                .map(|m| (m.index, e.metric_target_type(m.index)))
                .collect();
            e.readings
                .iter()
                .map(|r| decision_reading(&slots, r))
                .collect()
        },
        extensions: d.extensions.as_deref().map(migration::report),
        policy: e
            .inputs
            .as_ref()
            .and_then(|i| i.policy.as_ref())
            .map(policy_ref),
        budget: d.budget.as_deref().map(budget_report),
        schedule: d.schedule.as_deref().map(schedule_report),
        predictive: d.predictive.as_deref().map(predictive_report),
        shadow: e.shadow(),
    }
}

/// A policy as a decision used it.
pub(crate) fn policy_ref(p: &PolicyRef) -> pb::PolicyRef {
    pb::PolicyRef {
        name: p.name.clone(),
        version: p.version,
    }
}

/// One decision's reading, its values in the order of the record's `metrics` (`slots`: each
/// one's spec index, by which a reading is kept, and target type), each in the field its
/// target type compares.
fn decision_reading(
    slots: &[(usize, Option<MetricTargetType>)],
    r: &Reading,
) -> pb::DecisionReading {
    let metrics = slots
        .iter()
        .map(|&(index, target_type)| {
            let value = r.values.get(index).copied().flatten();
            let mut reading = pb::MetricReading::default();
            match target_type {
                Some(MetricTargetType::Utilization) => {
                    reading.current_average_utilization =
                        value.map(|v| i32::try_from(v).unwrap_or(i32::MAX));
                }
                Some(MetricTargetType::AverageValue) => reading.current_average_value_milli = value,
                Some(MetricTargetType::Value) => reading.current_value_milli = value,
                None => {}
            }
            reading
        })
        .collect();
    pb::DecisionReading {
        evaluation_time: Some(to_timestamp(r.time)),
        metrics,
    }
}

/// A target's history and logged decisions.
pub fn target_history(
    key: &str,
    history: &History,
    decisions: &[DecisionEntry],
) -> pb::TargetHistory {
    pb::TargetHistory {
        target_key: key.to_owned(),
        decisions: decisions.iter().map(decision_record).collect(),
        recommendations: history
            .recommendations
            .iter()
            .flatten()
            .map(pb::RecommendationRecord::from)
            .collect(),
        scale_up_events: history
            .scale_up_events
            .iter()
            .map(pb::ScaleEventRecord::from)
            .collect(),
        scale_down_events: history
            .scale_down_events
            .iter()
            .map(pb::ScaleEventRecord::from)
            .collect(),
        next_page_token: String::new(),
        extension_state: history.extensions.as_ref().map(migration::state),
    }
}
