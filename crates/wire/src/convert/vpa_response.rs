//! `VerticalAutoscaler` responses, engine → proto.

use crate::{
    engine::vpa::{
        amount::Resources,
        recommender::{RecommendedContainerResources, RecommendedPodResources},
        target::IngestReport,
    },
    pb::v1 as pb,
};

impl From<&Resources> for pb::ResourceAmounts {
    fn from(r: &Resources) -> Self {
        pb::ResourceAmounts {
            cpu_millicores: r.cpu,
            memory_bytes: r.memory,
        }
    }
}

impl From<&RecommendedContainerResources> for pb::ContainerRecommendation {
    fn from(c: &RecommendedContainerResources) -> Self {
        pb::ContainerRecommendation {
            container_name: c.container_name.clone(),
            target: Some((&c.target).into()),
            lower_bound: Some((&c.lower_bound).into()),
            upper_bound: Some((&c.upper_bound).into()),
            uncapped_target: Some((&c.uncapped_target).into()),
        }
    }
}

/// The recommendation, containers sorted by name.
pub fn vertical_recommendation(
    key: &str,
    r: &RecommendedPodResources,
) -> pb::VerticalRecommendation {
    let mut containers: Vec<_> = r
        .containers
        .iter()
        .map(pb::ContainerRecommendation::from)
        .collect();
    containers.sort_by(|a, b| a.container_name.cmp(&b.container_name));
    pb::VerticalRecommendation {
        target_key: key.to_owned(),
        containers,
    }
}

/// Counts saturate at `i32::MAX` (a request holds far fewer samples).
pub fn record_usage_response(r: &IngestReport) -> pb::RecordUsageResponse {
    let n = |x: u64| i32::try_from(x).unwrap_or(i32::MAX);
    pb::RecordUsageResponse {
        accepted_samples: n(r.accepted_samples),
        discarded_samples: n(r.discarded_samples),
        accepted_oom_events: n(r.accepted_oom_events),
        discarded_oom_events: n(r.discarded_oom_events),
    }
}
