//! Issue 12 through a real server on 127.0.0.1:0: the fidelity fix of the legacy zero-window
//! stabilization and the migration extensions (scale to zero, activation, fallback, pause,
//! removal candidates, stale samples), with state stored between calls.

use std::collections::BTreeMap;

use autoscaled::{
    config::Config,
    pb::v1::{self as pb},
};
use autoscaled_fixtures::cpu_utilization;
use prost_types::{Duration as PbDuration, Timestamp};

mod common;

use common::{TestServer, now_secs, start};

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
        requests_milli: BTreeMap::from([("cpu".to_owned(), 1000)]),
        metrics: BTreeMap::from([(
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
            ..Default::default()
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

fn queue_metric() -> pb::MetricSpec {
    autoscaled_fixtures::external_average_value("queue", 10_000)
}

/// Min 0, KEDA activation and a static KEDA fallback of 4 after more than 1 failure.
fn keda_request(current: i32, queue_milli: Option<i64>, at: i64) -> pb::RecommendRequest {
    let mut r = pb::RecommendRequest {
        target_key: "keda/worker".into(),
        current_replicas: current,
        spec: Some(pb::HorizontalSpec {
            min_replicas: Some(0),
            max_replicas: 10,
            metrics: vec![queue_metric()],
            scale_to_zero: Some(true),
            activation: Some(pb::Activation {
                cooldown_period: Some(secs(300)),
                ..Default::default()
            }),
            fallback: Some(pb::TargetFallback {
                failure_threshold: 1,
                replicas: 4,
                behavior: pb::FallbackBehavior::Static as i32,
            }),
            settings: Some(pb::ControllerSettings {
                downscale_stabilization: Some(secs(0)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        evaluation_time: Some(ts(at)),
        ..Default::default()
    };
    match queue_milli {
        Some(v) => {
            r.external_metrics.insert(
                "queue".into(),
                pb::ExternalMetricValues {
                    values_milli: vec![v],
                },
            );
        }
        None => r.unavailable_metrics.push("queue".into()),
    }
    r
}

async fn connect(
    addr: std::net::SocketAddr,
) -> pb::horizontal_autoscaler_client::HorizontalAutoscalerClient<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    pb::horizontal_autoscaler_client::HorizontalAutoscalerClient::new(channel)
}

fn rules(r: &pb::RecommendResponse) -> Vec<String> {
    r.extensions
        .as_ref()
        .map(|e| e.rules.iter().map(|f| f.rule.clone()).collect())
        .unwrap_or_default()
}

/// Scale to zero on inactivity, SIGKILL, then the metric fails until the KEDA fallback fires
/// and wakes the target from zero (KEDA #7239, #8056), then the metric returns and the HPA
/// takes over: the stored counters survive the kill and are shown by GetHistory.
#[tokio::test]
async fn scale_to_zero_fallback_wakes_from_zero_across_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let t0 = 1_800_000_000;

    let server = start(&data);
    let mut c = connect(server.addr).await;
    let r = c
        .recommend(keda_request(2, Some(0), t0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.desired_replicas, 0, "{r:?}");
    assert_eq!(
        condition(&r.conditions, "ScaledToZero").unwrap().status,
        "True"
    );
    assert_eq!(
        condition(&r.conditions, "Active").unwrap().reason,
        "ScalerNotActive"
    );
    drop(c);
    drop(server); // SIGKILL

    let server = start(&data);
    let mut c = connect(server.addr).await;
    // One failure is not more than the threshold of 1: stays at 0.
    let r = c
        .recommend(keda_request(0, None, t0 + 30))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.desired_replicas, 0);
    assert_eq!(
        condition(&r.conditions, "Fallback").unwrap().reason,
        "NoFallbackFound"
    );
    // The second (stored across the kill: zero was ours, the count is 2) fires and wakes.
    let r = c
        .recommend(keda_request(0, None, t0 + 60))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.desired_replicas, 1, "{r:?}");
    assert_eq!(
        condition(&r.conditions, "Fallback").unwrap().reason,
        "FallbackExists"
    );
    assert_eq!(
        condition(&r.conditions, "ScaledToZero").unwrap().reason,
        "NotScaledToZero"
    );
    let fired = rules(&r);
    assert!(fired.contains(&"fallback.target".to_owned()), "{fired:?}");
    assert!(fired.contains(&"activation.wake".to_owned()), "{fired:?}");
    let history = c
        .get_history(pb::GetHistoryRequest {
            target_key: "keda/worker".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let state = history.extension_state.unwrap();
    assert_eq!(state.metric_health.len(), 1);
    assert_eq!(state.metric_health[0].metric, "External/queue");
    assert_eq!(state.metric_health[0].consecutive_failures, 2);
    assert!(!state.scaled_to_zero);
    let last = history.decisions.last().unwrap();
    assert_eq!(last.explanation.as_ref().unwrap().path, "Activation");
    assert!(last.extensions.as_ref().unwrap().rules.len() >= 2);

    // The metric is back: 35 items per 10 → 4 (legacy limit max(2 × 1, 4) = 4); healthy.
    let r = c
        .recommend(keda_request(1, Some(35_000), t0 + 90))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.desired_replicas, 4);
    assert!(
        r.extensions
            .unwrap()
            .state
            .unwrap()
            .metric_health
            .is_empty()
    );
}

/// Removal candidates and pause over the API: a scale-down lists at most current - desired
/// pods, not-ready first; with scale-in paused the count holds and nothing is listed.
#[tokio::test]
async fn removal_candidates_and_pause_scale_in_over_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(&dir)).await;
    let mut client = server.horizontal().await;
    let at = now_secs();
    let mut pods: Vec<_> = (0..4).map(|i| pod(&format!("p{i}"), 100, at)).collect();
    pods[2].ready = Some(false);
    let request = |pause: Option<pb::Pause>| pb::RecommendRequest {
        target_key: "web".into(),
        current_replicas: 4,
        spec: Some(pb::HorizontalSpec {
            min_replicas: Some(1),
            max_replicas: 10,
            metrics: vec![cpu_utilization(50)],
            removal_candidates: true,
            pause,
            settings: Some(pb::ControllerSettings {
                downscale_stabilization: Some(secs(0)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        pods: pods.clone(),
        evaluation_time: Some(ts(at)),
        dry_run: true,
        ..Default::default()
    };
    let r = client.recommend(request(None)).await.unwrap().into_inner();
    // 3 ready pods at 10% of a 50% target (the unready one counts as 0 on a scale-down).
    assert!(r.desired_replicas < 4);
    let limit = (4 - r.desired_replicas) as usize;
    assert!(!r.removal_candidates.is_empty());
    assert!(r.removal_candidates.len() <= limit);
    assert_eq!(r.removal_candidates[0].pod, "p2");
    assert_eq!(r.removal_candidates[0].reason, "NotReady");

    let r = client
        .recommend(request(Some(pb::Pause {
            scale_in: true,
            ..Default::default()
        })))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.desired_replicas, 4);
    assert!(r.removal_candidates.is_empty());
    assert_eq!(
        condition(&r.conditions, "Paused").unwrap().reason,
        "ScaleInPaused"
    );

    // `paused` (KEDA's autoscaling.keda.sh/paused) holds the current count.
    let r = client
        .recommend(request(Some(pb::Pause {
            paused: true,
            ..Default::default()
        })))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.desired_replicas, 4);
    assert_eq!(
        condition(&r.conditions, "Paused").unwrap().reason,
        "ScaledObjectPaused"
    );
    server.stop().await;
}

/// Scale to zero requires an Object or External metric: INVALID_ARGUMENT naming the field,
/// nothing stored.
#[tokio::test]
async fn min_zero_with_only_cpu_is_invalid_argument_with_scale_to_zero() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(&dir)).await;
    let mut client = server.horizontal().await;
    let at = now_secs();
    let status = client
        .recommend(pb::RecommendRequest {
            target_key: "cpu-only".into(),
            current_replicas: 2,
            spec: Some(pb::HorizontalSpec {
                min_replicas: Some(0),
                max_replicas: 10,
                metrics: vec![cpu_utilization(50)],
                scale_to_zero: Some(true),
                ..Default::default()
            }),
            pods: (0..2).map(|i| pod(&format!("p{i}"), 100, at)).collect(),
            evaluation_time: Some(ts(at)),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("spec.min_replicas"), "{status:?}");
    let missing = client
        .get_history(pb::GetHistoryRequest {
            target_key: "cpu-only".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
    server.stop().await;
}

/// An External `queue` metric (AverageValue 10) spec with `min_replicas`.
fn queue_spec(min: i32, scale_to_zero: Option<bool>) -> pb::HorizontalSpec {
    pb::HorizontalSpec {
        min_replicas: Some(min),
        max_replicas: 10,
        metrics: vec![autoscaled_fixtures::external_average_value("queue", 10_000)],
        scale_to_zero,
        settings: Some(pb::ControllerSettings {
            downscale_stabilization: Some(secs(0)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn queue_request(
    key: &str,
    current: i32,
    queue_milli: i64,
    at: i64,
    spec: pb::HorizontalSpec,
) -> pb::RecommendRequest {
    pb::RecommendRequest {
        target_key: key.into(),
        current_replicas: current,
        spec: Some(spec),
        pods: (0..current)
            .map(|i| pod(&format!("p{i}"), 500, at))
            .collect(),
        external_metrics: BTreeMap::from([(
            "queue".to_owned(),
            pb::ExternalMetricValues {
                values_milli: vec![queue_milli],
            },
        )]),
        evaluation_time: Some(ts(at)),
        ..Default::default()
    }
}

fn scaled_to_zero(r: &pb::RecommendResponse) -> Option<(String, String)> {
    condition(&r.conditions, "ScaledToZero").map(|c| (c.status.clone(), c.reason.clone()))
}

/// The real binary with default flags answers a Kubernetes 1.37 user's spec (no
/// `scale_to_zero` field) as the 1.37 controller does: `NotScaledToZero` after a rescale and
/// kept without one, `min_replicas: 0` admitted with an External metric and scaled to zero,
/// a target at 0 that it did not scale there left alone, and `min_replicas: 0` without an
/// Object or External metric refused. With `--feature-gates HPAScaleToZero=false` the same
/// calls answer as 1.36 did; `spec.scale_to_zero` overrides the server's gate per target.
#[tokio::test]
async fn default_flags_answer_as_kubernetes_1_37_and_the_gate_off_as_1_36() {
    let dir = tempfile::tempdir().unwrap();
    let on = common::start(&dir.path().join("on"));
    let mut off_command = common::command(&dir.path().join("off"));
    off_command.args(["--feature-gates", "HPAScaleToZero=false"]);
    let off = common::spawn(off_command);
    let connect = |addr: std::net::SocketAddr| async move {
        pb::horizontal_autoscaler_client::HorizontalAutoscalerClient::connect(format!(
            "http://{addr}"
        ))
        .await
        .unwrap()
    };
    let (mut on, mut off) = (connect(on.addr).await, connect(off.addr).await);
    let at = now_secs();
    let not_scaled = Some(("False".to_owned(), "NotScaledToZero".to_owned()));

    // A scale-up with min 1: NotScaledToZero under 1.37, no condition under 1.36; kept on
    // the next call without a rescale.
    for (client, expected) in [(&mut on, not_scaled.clone()), (&mut off, None)] {
        let r = client
            .recommend(queue_request("up", 2, 40_000, at, queue_spec(1, None)))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.desired_replicas, 4);
        assert_eq!(scaled_to_zero(&r), expected);
        let r = client
            .recommend(queue_request("up", 4, 40_000, at + 15, queue_spec(1, None)))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.desired_replicas, 4);
        assert_eq!(scaled_to_zero(&r), expected, "kept without a rescale");
    }

    // min 0 with an External metric: to zero under 1.37; refused under 1.36 (min >= 1),
    // unless the target turns the gate on.
    let r = on
        .recommend(queue_request("zero", 2, 0, at, queue_spec(0, None)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.desired_replicas, 0);
    assert_eq!(
        scaled_to_zero(&r),
        Some(("True".to_owned(), "ScaledToZero".to_owned()))
    );
    let status = off
        .recommend(queue_request("zero", 2, 0, at, queue_spec(0, None)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status
            .message()
            .contains("spec.min_replicas: must be greater than or equal to 1"),
        "{status:?}"
    );
    let r = off
        .recommend(queue_request("zero", 2, 0, at, queue_spec(0, Some(true))))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.desired_replicas, 0, "the per-target override turns it on");

    // A target at 0 that the server did not scale there: left alone under 1.37.
    let r = on
        .recommend(queue_request("paused", 0, 50_000, at, queue_spec(0, None)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.desired_replicas, 0);
    let active = condition(&r.conditions, "ScalingActive").unwrap();
    assert_eq!(
        (active.status.as_str(), active.reason.as_str()),
        ("False", "ScalingDisabled")
    );
    // min 0 without an Object or External metric: refused whatever the gate.
    for client in [&mut on, &mut off] {
        let mut spec = queue_spec(0, Some(true));
        spec.metrics = vec![cpu_utilization(50)];
        let status = client
            .recommend(queue_request("cpu", 2, 0, at, spec))
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains("spec.min_replicas"), "{status:?}");
    }
}
