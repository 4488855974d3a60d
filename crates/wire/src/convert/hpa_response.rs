//! Engine → proto for the horizontal service: the Recommend response and the parts of a
//! logged decision (the server's `convert::hpa_records` builds the records from its store).

use prost_types::Timestamp;

use super::migration;
use crate::{
    engine::{
        hpa::condition::{Condition, ConditionType},
        hpa::history::{Recommendation, ScaleEvent},
        hpa::spec::MetricSpec,
        hpa::{
            Decision, MetricOutcome, PodGroups,
            budget::BudgetReport,
            predictive::{PredictiveMode, PredictiveReport},
            schedule::ScheduleReport,
        },
        time::Time,
    },
    pb::v1 as pb,
};

/// `Time` as a protobuf `Timestamp`.
pub fn to_timestamp(t: Time) -> Timestamp {
    let ms = t.unix_millis();
    Timestamp {
        seconds: ms.div_euclid(1000),
        // rem_euclid(1000) < 1000, so the product fits.
        nanos: (ms.rem_euclid(1000) as i32) * 1_000_000,
    }
}

impl From<&Condition> for pb::Condition {
    fn from(c: &Condition) -> Self {
        pb::Condition {
            r#type: c.condition_type.as_str().to_owned(),
            status: if c.status { "True" } else { "False" }.to_owned(),
            reason: c.reason.as_str().to_owned(),
            message: c.message.clone(),
        }
    }
}

impl From<&PodGroups> for pb::PodGroups {
    fn from(g: &PodGroups) -> Self {
        let count = |v: &Vec<String>| u32::try_from(v.len()).unwrap_or(u32::MAX);
        pb::PodGroups {
            ready_count: g.ready_count,
            unready: g.unready.clone(),
            missing: g.missing.clone(),
            ignored: g.ignored.clone(),
            unready_total: count(&g.unready),
            missing_total: count(&g.missing),
            ignored_total: count(&g.ignored),
        }
    }
}

/// The source type, name and container of the metric an outcome refers to. An empty spec
/// means Kubernetes' default metric (cpu at 80% utilization).
pub fn metric_identity(
    metrics: &[MetricSpec],
    index: usize,
) -> (pb::MetricSourceType, String, String) {
    use pb::MetricSourceType as S;
    match metrics.get(index) {
        None => (S::Resource, "cpu".to_owned(), String::new()),
        Some(MetricSpec::Resource { name, .. }) => (S::Resource, name.clone(), String::new()),
        Some(MetricSpec::ContainerResource {
            name, container, ..
        }) => (S::ContainerResource, name.clone(), container.clone()),
        Some(MetricSpec::Pods { name, .. }) => (S::Pods, name.clone(), String::new()),
        Some(MetricSpec::Object { name, .. }) => (S::Object, name.clone(), String::new()),
        Some(MetricSpec::External { name, .. }) => (S::External, name.clone(), String::new()),
        Some(MetricSpec::Unknown { type_name }) => {
            (S::Unspecified, type_name.clone(), String::new())
        }
    }
}

/// A decision's outcome for one metric, with the metric's identity from the spec.
pub fn metric_status(metrics: &[MetricSpec], m: &MetricOutcome) -> pb::MetricStatus {
    let (source, name, container) = metric_identity(metrics, m.index);
    let mut status = pb::MetricStatus {
        r#type: source as i32,
        name,
        container,
        pod_groups: m.pod_groups.as_ref().map(pb::PodGroups::from),
        ..pb::MetricStatus::default()
    };
    match &m.result {
        Ok(p) => {
            status.proposed_replicas = Some(p.replicas);
            status.current_average_utilization = p.current_average_utilization;
            status.current_average_value_milli = p.current_average_value;
            status.current_value_milli = p.current_value;
        }
        Err(f) => {
            status.error = f.message.clone();
            status.error_reason = f.reason.as_str().to_owned();
        }
    }
    status
}

/// The decision's explanation: its path, the proposals before and after each rule.
pub fn explanation(d: &Decision) -> pb::Explanation {
    let limited_by = d
        .conditions
        .iter()
        .find(|c| c.condition_type == ConditionType::ScalingLimited && c.status)
        .map(|c| c.reason.as_str().to_owned())
        .unwrap_or_default();
    pb::Explanation {
        path: d.path.as_str().to_owned(),
        prenormalized_replicas: d.prenormalized_replicas,
        stabilized_replicas: d.stabilized_replicas,
        scale_up_limit: d.scale_up_limit,
        scale_down_limit: d.scale_down_limit,
        limited_by,
        error: d.error.clone().unwrap_or_default(),
        rescale_reason: d.rescale_reason.clone().unwrap_or_default(),
    }
}

/// The Recommend response for a decision.
pub fn recommend_response(
    d: &Decision,
    metrics: &[MetricSpec],
    now: Time,
    recorded: bool,
) -> pb::RecommendResponse {
    pb::RecommendResponse {
        desired_replicas: d.desired_replicas,
        conditions: d.conditions.iter().map(pb::Condition::from).collect(),
        metrics: d
            .metrics
            .iter()
            .map(|m| metric_status(metrics, m))
            .collect(),
        explanation: Some(explanation(d)),
        evaluation_time: Some(to_timestamp(now)),
        recorded,
        current_replicas: Some(d.current_replicas),
        // The handler's to set: the mode is the request's.
        shadow: false,
        removal_candidates: d
            .extensions
            .as_ref()
            .map(|r| migration::removal_candidates(&r.removal_candidates))
            .unwrap_or_default(),
        extensions: d.extensions.as_deref().map(migration::report),
        // The handler's to add: the policy is the request's, not the decision's.
        policy: None,
        budget: d.budget.as_deref().map(budget_report),
        schedule: d.schedule.as_deref().map(schedule_report),
        predictive: d.predictive.as_deref().map(predictive_report),
        // What the request left out is the handler's to add (`recommend_warnings`): it is
        // not part of the decision, and a logged decision has none.
        warnings: Vec::new(),
    }
}

/// What predictive scale-up did in a decision.
pub fn predictive_report(p: &PredictiveReport) -> pb::PredictiveReport {
    pb::PredictiveReport {
        mode: match p.mode {
            PredictiveMode::Off => pb::PredictiveMode::Off,
            PredictiveMode::ForecastOnly => pb::PredictiveMode::ForecastOnly,
            PredictiveMode::ScaleUp => pb::PredictiveMode::ScaleUp,
        } as i32,
        metric: p.metric.clone().unwrap_or_default(),
        model: p.model.map_or("", |m| m.as_str()).to_owned(),
        load: p.load,
        forecast_load: p.forecast_load,
        forecast_replicas: p.forecast_replicas,
        reactive_replicas: p.reactive_replicas,
        raised: p.raised,
        wape: p.wape,
        reason: p.reason.as_str().to_owned(),
    }
}

/// What the spec's schedules did in a decision.
pub fn schedule_report(s: &ScheduleReport) -> pb::ScheduleReport {
    pb::ScheduleReport {
        applied: s.applied.clone(),
        min_replicas: s.min_replicas,
        max_replicas: s.max_replicas,
        floor: s.floor,
        ceiling: s.ceiling,
        floor_by: s.floor_by.clone(),
        ceiling_by: s.ceiling_by.clone(),
        conflict: s.conflict,
        next_change: s.until.map(to_timestamp),
        next_change_local: s.until_local.clone().unwrap_or_default(),
    }
}

/// What a scaling group did to a decision.
pub fn budget_report(b: &BudgetReport) -> pb::BudgetReport {
    pb::BudgetReport {
        group: b.group.clone(),
        uncapped_replicas: b.uncapped_replicas,
        fair_share: b.fair_share,
        capacity: b.capacity,
        units_per_replica: b.units_per_replica,
        used: b.used,
        residual: b.residual(),
    }
}

impl From<&Recommendation> for pb::RecommendationRecord {
    fn from(r: &Recommendation) -> Self {
        pb::RecommendationRecord {
            time: Some(to_timestamp(r.time)),
            replicas: r.replicas,
        }
    }
}

impl From<&ScaleEvent> for pb::ScaleEventRecord {
    fn from(e: &ScaleEvent) -> Self {
        pb::ScaleEventRecord {
            time: Some(to_timestamp(e.time)),
            replica_change: e.replica_change,
            outdated: e.outdated,
        }
    }
}
