//! Issue 12 through a real server on 127.0.0.1:0: the fidelity fix of the legacy zero-window
//! stabilization and the migration extensions (scale to zero, activation, fallback, pause,
//! removal candidates, stale samples), with state stored between calls.

use std::collections::HashMap;

use autoscaled::{
    config::Config,
    pb::v1::{self as pb},
};
use prost_types::{Duration as PbDuration, Timestamp};

mod common;

use common::{TestServer, now_secs};

fn config(dir: &tempfile::TempDir) -> Config {
    let mut c = Config::with_data_dir(dir.path().join("data"));
    c.trust_request_time = true;
    c
}

fn ts(seconds: i64) -> Timestamp {
    Timestamp { seconds, nanos: 0 }
}

fn secs(seconds: i64) -> PbDuration {
    PbDuration { seconds, nanos: 0 }
}

/// A running, ready pod started an hour before `at`, requesting 1 CPU and using `usage_milli`.
fn pod(name: &str, usage_milli: i64, at: i64) -> pb::PodSample {
    pb::PodSample {
        name: name.into(),
        phase: pb::PodPhase::Running as i32,
        ready: Some(true),
        ready_transition_time: Some(ts(at - 3600)),
        start_time: Some(ts(at - 3600)),
        requests_milli: HashMap::from([("cpu".to_owned(), 1000)]),
        metrics: HashMap::from([(
            "cpu".to_owned(),
            pb::MetricSample {
                value_milli: Some(usage_milli),
                timestamp: Some(ts(at)),
                window: Some(secs(60)),
            },
        )]),
        ..Default::default()
    }
}

fn cpu_utilization(percent: i32) -> pb::MetricSpec {
    pb::MetricSpec {
        r#type: pb::MetricSourceType::Resource as i32,
        name: "cpu".into(),
        target: Some(pb::MetricTarget {
            r#type: pb::MetricTargetType::Utilization as i32,
            average_utilization: Some(percent),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn condition<'a>(conditions: &'a [pb::Condition], kind: &str) -> Option<&'a pb::Condition> {
    conditions.iter().find(|c| c.r#type == kind)
}

/// The legacy path with a per-target downscale stabilization of 0 and nothing stored: the
/// initial recommendation does not hold the count (algorithm document, section 10), over gRPC
/// as in the engine; the stored list holds only the new proposal.
#[tokio::test]
async fn legacy_zero_downscale_window_ignores_the_initial_recommendation_over_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(&dir)).await;
    let mut client = server.horizontal().await;
    let at = now_secs();
    let request = |key: &str, window: i64| pb::RecommendRequest {
        target_key: key.into(),
        current_replicas: 4,
        spec: Some(pb::HorizontalSpec {
            min_replicas: Some(1),
            max_replicas: 10,
            metrics: vec![cpu_utilization(50)],
            settings: Some(pb::ControllerSettings {
                downscale_stabilization: Some(secs(window)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        pods: (0..4).map(|i| pod(&format!("p{i}"), 100, at)).collect(),
        evaluation_time: Some(ts(at)),
        ..Default::default()
    };
    let zero = client
        .recommend(request("zero", 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(zero.desired_replicas, 1);
    let explanation = zero.explanation.unwrap();
    assert_eq!(explanation.stabilized_replicas, Some(1));
    assert_eq!(
        condition(&zero.conditions, "AbleToScale").unwrap().reason,
        "SucceededRescale"
    );
    let history = client
        .get_history(pb::GetHistoryRequest {
            target_key: "zero".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        history
            .recommendations
            .iter()
            .map(|r| r.replicas)
            .collect::<Vec<_>>(),
        vec![1]
    );

    // A window of 1 s keeps upstream's hold.
    let held = client
        .recommend(request("one-second", 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(held.desired_replicas, 4);
    assert_eq!(
        condition(&held.conditions, "AbleToScale").unwrap().reason,
        "ScaleDownStabilized"
    );
    server.stop().await;
}
