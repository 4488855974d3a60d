//! The steady-state Recommend request that `benches/load.rs` and
//! `examples/recommend_fixed.rs` both send, so their figures describe the same work.
//! Included with `#[path]` (a bench and an example cannot share a library module).

use std::time::{SystemTime, UNIX_EPOCH};

use autoscaled::pb::v1 as pb;

/// Pods per request.
pub const PODS: usize = 10;

/// A steady-state target: 10 pods requesting 500m cpu each, using about half of it, against a
/// 50% utilization target (legacy path, default settings). Times are taken from the wall
/// clock once; the server judges them with its own clock.
pub fn recommend_request(target_key: String) -> pb::RecommendRequest {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let at = |offset: i64| prost_types::Timestamp {
        seconds: now + offset,
        nanos: 0,
    };
    let pods = (0..PODS)
        .map(|i| {
            let usage = 230 + 10 * (i as i64 % 5);
            pb::PodSample {
                name: format!("web-{i}"),
                phase: pb::PodPhase::Running as i32,
                deleting: false,
                ready: Some(true),
                ready_transition_time: Some(at(-3500)),
                start_time: Some(at(-3600)),
                requests_milli: [("cpu".to_owned(), 500)].into(),
                containers: Vec::new(),
                metrics: [(
                    "cpu".to_owned(),
                    pb::MetricSample {
                        value_milli: Some(usage),
                        timestamp: Some(at(-10)),
                        window: Some(prost_types::Duration {
                            seconds: 60,
                            nanos: 0,
                        }),
                    },
                )]
                .into(),
            }
        })
        .collect();
    pb::RecommendRequest {
        target_key,
        current_replicas: PODS as i32,
        status_replicas: None,
        spec: Some(pb::HorizontalSpec {
            min_replicas: Some(2),
            max_replicas: 20,
            metrics: vec![pb::MetricSpec {
                r#type: pb::MetricSourceType::Resource as i32,
                name: "cpu".to_owned(),
                container: String::new(),
                target: Some(pb::MetricTarget {
                    r#type: pb::MetricTargetType::Utilization as i32,
                    average_utilization: Some(50),
                    average_value_milli: None,
                    value_milli: None,
                }),
                ..Default::default()
            }],
            behavior: None,
            settings: None,
            ..Default::default()
        }),
        pods,
        ..Default::default()
    }
}
