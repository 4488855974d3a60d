//! End to end over a real channel: each test binds 127.0.0.1:0 first, hands the listener to
//! `server::serve` (so no sleep is needed: connections queue until it accepts), and talks
//! gRPC to it.

use std::collections::BTreeMap;

use autoscaled::{
    config::Config,
    pb::v1::{self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient},
};
use autoscaled_fixtures::{self as fixtures, cpu_utilization};
use prost_types::{Duration as PbDuration, Timestamp};
use tonic::{Code, transport::Channel};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use tonic_types::StatusExt;

mod common;

use common::{TestServer, now_secs};

fn config(dir: &tempfile::TempDir) -> Config {
    let mut c = Config::with_data_dir(dir.path().join("data"));
    c.limits.max_pods = 50;
    c
}

fn ts(seconds: i64) -> Timestamp {
    Timestamp { seconds, nanos: 0 }
}

/// A running, ready pod started an hour ago, requesting 1 CPU and using `usage_milli`.
fn pod(name: &str, usage_milli: i64) -> pb::PodSample {
    let hour_ago = now_secs() - 3600;
    pb::PodSample {
        name: name.into(),
        phase: pb::PodPhase::Running as i32,
        ready: Some(true),
        ready_transition_time: Some(ts(hour_ago)),
        start_time: Some(ts(hour_ago)),
        requests_milli: BTreeMap::from([("cpu".to_owned(), 1000)]),
        metrics: BTreeMap::from([(
            "cpu".to_owned(),
            pb::MetricSample {
                value_milli: Some(usage_milli),
                timestamp: None,
                window: Some(PbDuration {
                    seconds: 60,
                    nanos: 0,
                }),
            },
        )]),
        ..Default::default()
    }
}

/// Two pods at 100% of their CPU request against a 50% target: Kubernetes doubles to 4.
fn scale_up_request(key: &str) -> pb::RecommendRequest {
    fixtures::recommend(key)
        .pods(2)
        .cpu_usage_milli(1000)
        .pod_names(|i| ["web-a", "web-b"][i].to_owned())
        .ages(3600, 3600)
        .sample_age(None)
        .build()
}

fn condition<'a>(conditions: &'a [pb::Condition], kind: &str) -> &'a pb::Condition {
    conditions
        .iter()
        .find(|c| c.r#type == kind)
        .unwrap_or_else(|| panic!("no {kind} condition in {conditions:?}"))
}

async fn list_all(client: &mut HorizontalAutoscalerClient<Channel>) -> Vec<String> {
    client
        .list_targets(pb::ListTargetsRequest {
            page_size: 1000,
            page_token: String::new(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .target_keys
}

#[tokio::test]
async fn health_reports_serving_for_the_server_and_the_service() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(&dir)).await;
    let mut health = HealthClient::new(server.channel().await);
    for service in [
        "",
        "autoscaled.v1.HorizontalAutoscaler",
        "autoscaled.v1.VerticalAutoscaler",
    ] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "service {service:?}");
    }
    let unknown = health
        .check(HealthCheckRequest {
            service: "no.such.Service".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
    server.stop().await;
}

#[tokio::test]
async fn reflection_v1_and_v1alpha_list_both_services() {
    use tonic_reflection::pb::v1;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(&dir)).await;

    let response = common::reflection_v1(
        server.channel().await,
        v1::server_reflection_request::MessageRequest::ListServices(String::new()),
    )
    .await;
    let v1::server_reflection_response::MessageResponse::ListServicesResponse(list) = response
    else {
        panic!("unexpected reflection response {response:?}");
    };
    let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
    for expected in [
        "autoscaled.v1.HorizontalAutoscaler",
        "grpc.health.v1.Health",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }

    // grpcurl 1.8 speaks only v1alpha.
    let names = common::reflection_v1alpha_services(server.channel().await).await;
    assert!(
        names
            .iter()
            .any(|s| s == "autoscaled.v1.HorizontalAutoscaler"),
        "{names:?}"
    );
    server.stop().await;
}

/// grpcurl decodes the `google.rpc.BadRequest` error details only if reflection can serve the
/// file that defines them.
#[tokio::test]
async fn reflection_serves_the_error_details_protos() {
    use prost::Message;
    use tonic_reflection::pb::v1;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(&dir)).await;
    for (symbol, file) in [
        ("google.rpc.BadRequest", "google/rpc/error_details.proto"),
        ("google.rpc.Status", "google/rpc/status.proto"),
    ] {
        let response = common::reflection_v1(
            server.channel().await,
            v1::server_reflection_request::MessageRequest::FileContainingSymbol(symbol.into()),
        )
        .await;
        let v1::server_reflection_response::MessageResponse::FileDescriptorResponse(files) =
            response
        else {
            panic!("{symbol}: unexpected reflection response {response:?}");
        };
        let names: Vec<String> = files
            .file_descriptor_proto
            .iter()
            .map(|raw| {
                prost_types::FileDescriptorProto::decode(raw.as_slice())
                    .unwrap()
                    .name
                    .unwrap_or_default()
            })
            .collect();
        assert!(names.iter().any(|n| n == file), "{symbol}: {names:?}");
    }
    server.stop().await;
}

#[tokio::test]
async fn recommend_scales_up_and_history_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(&dir)).await;
    let mut client = server.horizontal().await;

    let first = client
        .recommend(scale_up_request("ns/web"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first.desired_replicas, 4);
    assert!(first.recorded);
    let able = condition(&first.conditions, "AbleToScale");
    assert_eq!(
        (able.status.as_str(), able.reason.as_str()),
        ("True", "SucceededRescale")
    );
    let active = condition(&first.conditions, "ScalingActive");
    assert_eq!(
        (active.status.as_str(), active.reason.as_str()),
        ("True", "ValidMetricFound")
    );
    let limited = condition(&first.conditions, "ScalingLimited");
    assert_eq!(
        (limited.status.as_str(), limited.reason.as_str()),
        ("False", "DesiredWithinRange")
    );
    assert_eq!(first.metrics.len(), 1);
    assert_eq!(first.metrics[0].name, "cpu");
    assert_eq!(first.metrics[0].proposed_replicas, Some(4));
    assert_eq!(first.metrics[0].current_average_utilization, Some(100));
    assert_eq!(first.explanation.as_ref().unwrap().path, "Legacy");

    // Second call: the target now runs 4 pods at 50%: within tolerance, stays at 4.
    let mut second = scale_up_request("ns/web");
    second.current_replicas = 4;
    second.pods = (0..4).map(|i| pod(&format!("web-{i}"), 500)).collect();
    let second = client.recommend(second).await.unwrap().into_inner();
    assert_eq!(second.desired_replicas, 4);

    let history = client
        .get_history(pb::GetHistoryRequest {
            target_key: "ns/web".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let desired: Vec<_> = history
        .decisions
        .iter()
        .map(|d| d.desired_replicas)
        .collect();
    assert_eq!(desired, [4, 4]);
    assert_eq!(history.decisions[0].current_replicas, 2);
    // recordInitialRecommendation (2) then one proposal per call (4, 4).
    let recs: Vec<_> = history.recommendations.iter().map(|r| r.replicas).collect();
    assert_eq!(recs, [2, 4, 4]);

    // Restart on the same folder: everything is still there.
    server.stop().await;
    let server = TestServer::start(config(&dir)).await;
    let mut client = server.horizontal().await;
    let after = client
        .get_history(pb::GetHistoryRequest {
            target_key: "ns/web".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(after, history);
    server.stop().await;
}

/// A first adapter's request, pods with a name, a cpu request and a cpu sample only: every
/// pod is unready for cpu (no Ready condition, no start time), the metric fails, and the
/// response names both fields and the pods. A complete request gets none, and none are
/// stored.
#[tokio::test]
async fn warnings_name_the_fields_a_naive_request_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(&dir)).await;
    let mut client = server.horizontal().await;

    let naive = |name: &str| pb::PodSample {
        name: name.into(),
        requests_milli: BTreeMap::from([("cpu".to_owned(), 1000)]),
        metrics: BTreeMap::from([(
            "cpu".to_owned(),
            pb::MetricSample {
                value_milli: Some(900),
                ..Default::default()
            },
        )]),
        ..Default::default()
    };
    let mut request = scale_up_request("ns/naive");
    request.current_replicas = 3;
    request.pods = (0..3).map(|i| naive(&format!("web-{i}"))).collect();
    let response = client.recommend(request).await.unwrap().into_inner();
    let active = condition(&response.conditions, "ScalingActive");
    assert_eq!(
        (active.status.as_str(), active.reason.as_str()),
        ("False", "FailedGetResourceMetric")
    );
    assert_eq!(response.desired_replicas, 3);
    let names: Vec<String> = (0..3).map(|i| format!("web-{i}")).collect();
    let fields: Vec<(&str, &[String], u32)> = response
        .warnings
        .iter()
        .map(|w| (w.field.as_str(), w.pods.as_slice(), w.pods_total))
        .collect();
    assert_eq!(
        fields,
        [
            ("pods[*].ready", names.as_slice(), 3),
            ("pods[*].start_time", names.as_slice(), 3)
        ]
    );
    assert!(
        response.warnings[0].message.contains("unready for cpu"),
        "{:?}",
        response.warnings
    );

    // One pod sent in full, one without its sample: only the missing sample is named.
    let mut request = scale_up_request("ns/partial");
    request.pods[1].metrics.clear();
    let response = client.recommend(request).await.unwrap().into_inner();
    assert_eq!(response.warnings.len(), 1, "{:?}", response.warnings);
    assert_eq!(response.warnings[0].field, "pods[*].metrics[cpu]");
    assert_eq!(response.warnings[0].pods, ["web-b"]);
    assert_eq!(response.warnings[0].pods_total, 1);

    // A complete request: no warnings.
    let response = client
        .recommend(scale_up_request("ns/complete"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response.desired_replicas, 4);
    assert_eq!(response.warnings, []);

    // The decision was recorded as it is without warnings: the log has none to give back.
    let history = client
        .get_history(pb::GetHistoryRequest {
            target_key: "ns/naive".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(history.decisions.len(), 1);
    assert_eq!(history.decisions[0].desired_replicas, 3);
    server.stop().await;
}

#[tokio::test]
async fn dry_run_decides_with_stored_history_and_records_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(&dir)).await;
    let mut client = server.horizontal().await;

    let mut dry = scale_up_request("ns/dry");
    dry.dry_run = true;
    let response = client.recommend(dry.clone()).await.unwrap().into_inner();
    assert_eq!(response.desired_replicas, 4);
    assert!(!response.recorded);
    let missing = client
        .get_history(pb::GetHistoryRequest {
            target_key: "ns/dry".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    assert!(list_all(&mut client).await.is_empty());

    // With stored history, a dry run sees it but adds nothing.
    client.recommend(scale_up_request("ns/dry")).await.unwrap();
    let before = client
        .get_history(pb::GetHistoryRequest {
            target_key: "ns/dry".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let response = client.recommend(dry).await.unwrap().into_inner();
    assert!(!response.recorded);
    let after = client
        .get_history(pb::GetHistoryRequest {
            target_key: "ns/dry".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(before, after);
    server.stop().await;
}

#[tokio::test]
async fn list_targets_paginates_and_delete_target_forgets() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(&dir)).await;
    let mut client = server.horizontal().await;
    let keys = ["a/1", "a/2", "b/1", "c", "c/d"];
    for key in keys.iter().rev() {
        client.recommend(scale_up_request(key)).await.unwrap();
    }

    let mut seen = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = client
            .list_targets(pb::ListTargetsRequest {
                page_size: 2,
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        pages += 1;
        assert!(page.target_keys.len() <= 2);
        seen.extend(page.target_keys);
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(seen, keys);
    assert_eq!(pages, 3);

    let bad_token = client
        .list_targets(pb::ListTargetsRequest {
            page_size: 2,
            page_token: "not-a-token".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad_token.code(), Code::InvalidArgument);

    client
        .delete_target(pb::DeleteTargetRequest {
            target_key: "b/1".into(),
        })
        .await
        .unwrap();
    assert_eq!(list_all(&mut client).await, ["a/1", "a/2", "c", "c/d"]);
    let gone = client
        .get_history(pb::GetHistoryRequest {
            target_key: "b/1".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    let again = client
        .delete_target(pb::DeleteTargetRequest {
            target_key: "b/1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::NotFound);
    // Deleting "c" leaves "c/d" alone.
    client
        .delete_target(pb::DeleteTargetRequest {
            target_key: "c".into(),
        })
        .await
        .unwrap();
    let cd = client
        .get_history(pb::GetHistoryRequest {
            target_key: "c/d".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cd.decisions.len(), 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_recommends_on_one_target_lose_no_update() {
    const CALLS: usize = 50;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(&dir)).await;
    let client = server.horizontal().await;
    let mut tasks = Vec::new();
    for i in 0..CALLS {
        let mut client = client.clone();
        // Alternate between two snapshots so the proposals differ (4 and 2).
        let mut req = scale_up_request("ns/hot");
        if i % 2 == 1 {
            req.pods = vec![pod("web-a", 500), pod("web-b", 500)];
        }
        tasks.push(tokio::spawn(async move {
            client.recommend(req).await.unwrap().into_inner()
        }));
    }
    for t in tasks {
        assert!(t.await.unwrap().recorded);
    }
    let mut client = client;
    let history = client
        .get_history(pb::GetHistoryRequest {
            target_key: "ns/hot".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    // Every call is logged (identical neighbours as one run with its count).
    let logged: u64 = history.decisions.iter().map(|d| d.run_count).sum();
    assert_eq!(logged, CALLS as u64);
    // Every call appended its proposal (all within the 5 min window): the initial
    // recommendation plus one per call. A lost update would leave fewer.
    assert_eq!(history.recommendations.len(), CALLS + 1);
    let fours = history
        .recommendations
        .iter()
        .filter(|r| r.replicas == 4)
        .count();
    assert_eq!(fours, CALLS / 2);
    // The log is in time order.
    let times: Vec<_> = history
        .decisions
        .iter()
        .map(|d| {
            let t = d.evaluation_time.unwrap();
            (t.seconds, t.nanos)
        })
        .collect();
    let mut sorted = times.clone();
    sorted.sort();
    assert_eq!(times, sorted);
    server.stop().await;
}

/// One invalid request and the field its violation must name.
struct BadCase {
    name: &'static str,
    request: pb::RecommendRequest,
    code: Code,
    field: &'static str,
}

fn bad_cases() -> Vec<BadCase> {
    let base = || scale_up_request("ns/bad");
    let mut cases = Vec::new();
    let mut case = |name, code, field, edit: &dyn Fn(&mut pb::RecommendRequest)| {
        let mut request = base();
        edit(&mut request);
        cases.push(BadCase {
            name,
            request,
            code,
            field,
        });
    };
    case("empty key", Code::InvalidArgument, "target_key", &|r| {
        r.target_key.clear()
    });
    case(
        "control char in key",
        Code::InvalidArgument,
        "target_key",
        &|r| r.target_key = "a\0b".into(),
    );
    case("key too long", Code::InvalidArgument, "target_key", &|r| {
        r.target_key = "k".repeat(513)
    });
    case("missing spec", Code::InvalidArgument, "spec", &|r| {
        r.spec = None
    });
    case(
        "max replicas 0",
        Code::InvalidArgument,
        "spec.max_replicas",
        &|r| r.spec.as_mut().unwrap().max_replicas = 0,
    );
    case(
        "min above max",
        Code::InvalidArgument,
        "spec.max_replicas",
        &|r| r.spec.as_mut().unwrap().min_replicas = Some(20),
    );
    case(
        "zero utilization",
        Code::InvalidArgument,
        "spec.metrics[1].target.average_utilization",
        &|r| r.spec.as_mut().unwrap().metrics.push(cpu_utilization(0)),
    );
    case(
        "unknown metric type",
        Code::InvalidArgument,
        "spec.metrics[0].type",
        &|r| r.spec.as_mut().unwrap().metrics[0].r#type = 99,
    );
    case(
        "missing target",
        Code::InvalidArgument,
        "spec.metrics[0].target",
        &|r| r.spec.as_mut().unwrap().metrics[0].target = None,
    );
    case(
        "utilization without value",
        Code::InvalidArgument,
        "spec.metrics[0].target.average_utilization",
        &|r| {
            r.spec.as_mut().unwrap().metrics[0]
                .target
                .as_mut()
                .unwrap()
                .average_utilization = None
        },
    );
    case(
        "window above 3600",
        Code::InvalidArgument,
        "spec.behavior.scale_up.stabilization_window_seconds",
        &|r| {
            r.spec.as_mut().unwrap().behavior = Some(pb::Behavior {
                scale_up: Some(pb::ScalingRules {
                    stabilization_window_seconds: Some(4000),
                    ..Default::default()
                }),
                scale_down: None,
            })
        },
    );
    case(
        "policy period 0",
        Code::InvalidArgument,
        "spec.behavior.scale_down.policies[0].period_seconds",
        &|r| {
            r.spec.as_mut().unwrap().behavior = Some(pb::Behavior {
                scale_up: None,
                scale_down: Some(pb::ScalingRules {
                    policies: vec![pb::ScalingPolicy {
                        r#type: pb::ScalingPolicyType::Pods as i32,
                        value: 1,
                        period_seconds: 0,
                    }],
                    ..Default::default()
                }),
            })
        },
    );
    case(
        "negative current replicas",
        Code::InvalidArgument,
        "current_replicas",
        &|r| r.current_replicas = -1,
    );
    case(
        "untrusted evaluation time",
        Code::InvalidArgument,
        "evaluation_time",
        &|r| r.evaluation_time = Some(ts(now_secs())),
    );
    case(
        "bad sample timestamp",
        Code::InvalidArgument,
        "pods[0].metrics[cpu].timestamp",
        &|r| {
            r.pods[0].metrics.get_mut("cpu").unwrap().timestamp = Some(Timestamp {
                seconds: 1,
                nanos: -5,
            })
        },
    );
    case(
        "negative duration",
        Code::InvalidArgument,
        "spec.settings.downscale_stabilization",
        &|r| {
            r.spec.as_mut().unwrap().settings = Some(pb::ControllerSettings {
                downscale_stabilization: Some(PbDuration {
                    seconds: -1,
                    nanos: 0,
                }),
                ..Default::default()
            })
        },
    );
    case(
        "nan tolerance",
        Code::InvalidArgument,
        "spec.settings.tolerance",
        &|r| {
            r.spec.as_mut().unwrap().settings = Some(pb::ControllerSettings {
                tolerance: Some(f64::NAN),
                ..Default::default()
            })
        },
    );
    case(
        "duplicate pod",
        Code::InvalidArgument,
        "pods[1].name",
        &|r| r.pods[1].name = "web-a".into(),
    );
    case(
        "unknown pod phase",
        Code::InvalidArgument,
        "pods[0].phase",
        &|r| r.pods[0].phase = 77,
    );
    case(
        "negative request",
        Code::InvalidArgument,
        "pods[0].requests_milli[cpu]",
        &|r| {
            r.pods[0].requests_milli.insert("cpu".into(), -1);
        },
    );
    case("too many pods", Code::ResourceExhausted, "pods", &|r| {
        r.pods = (0..51).map(|i| pod(&format!("p{i}"), 100)).collect()
    });
    cases
}

#[tokio::test]
async fn bad_input_is_rejected_with_the_field_path_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(&dir)).await;
    let mut client = server.horizontal().await;
    let cases = bad_cases();
    assert!(cases.len() >= 10);
    for case in cases {
        let status = client.recommend(case.request).await.unwrap_err();
        assert_eq!(status.code(), case.code, "{}: {status:?}", case.name);
        let bad = status
            .get_details_bad_request()
            .unwrap_or_else(|| panic!("{}: no BadRequest details in {status:?}", case.name));
        let fields: Vec<_> = bad
            .field_violations
            .iter()
            .map(|v| v.field.as_str())
            .collect();
        assert_eq!(fields, [case.field], "{}: {status:?}", case.name);
    }
    for key in ["", "k"] {
        let status = client
            .get_history(pb::GetHistoryRequest {
                target_key: key.repeat(600),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
    }
    // Nothing was stored, and the server still serves.
    assert!(list_all(&mut client).await.is_empty());
    let ok = client
        .recommend(scale_up_request("ns/bad"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ok.desired_replicas, 4);
    assert_eq!(list_all(&mut client).await, ["ns/bad"]);
    let history = client
        .get_history(pb::GetHistoryRequest {
            target_key: "ns/bad".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(history.decisions.len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn trusted_request_time_is_used_and_echoed() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(&dir);
    c.trust_request_time = true;
    let server = TestServer::start(c).await;
    let mut client = server.horizontal().await;
    let at = now_secs() - 30;
    let mut req = scale_up_request("ns/replay");
    req.evaluation_time = Some(ts(at));
    let response = client.recommend(req).await.unwrap().into_inner();
    assert_eq!(response.evaluation_time, Some(ts(at)));
    assert_eq!(response.desired_replicas, 4);
    server.stop().await;
}

#[tokio::test]
async fn an_oversized_request_is_resource_exhausted() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(&dir);
    c.limits.max_message_bytes = 4096;
    let server = TestServer::start(c).await;
    let mut client = server.horizontal().await;
    let mut req = scale_up_request("ns/big");
    req.unavailable_metrics = (0..1000).map(|i| format!("metric-{i}")).collect();
    let status = client.recommend(req).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("limit is: 4096 bytes")
            && status.message().contains("--max-message-bytes"),
        "{status:?}"
    );
    // A BadRequest violation, as every other limit has.
    let violations = status
        .get_details_bad_request()
        .expect("a BadRequest detail")
        .field_violations;
    assert_eq!(violations[0].field, "request", "{violations:?}");
    // A request under the limit still works on the same server.
    let ok = client.recommend(scale_up_request("ns/big")).await.unwrap();
    assert!(ok.into_inner().recorded);
    server.stop().await;
}

/// Load balancers and Kubernetes gRPC probes must stop sending before the server stops
/// accepting: a health `Watch` open across shutdown sees NOT_SERVING for the server and both
/// services while the (bounded) drain is still running.
#[tokio::test]
async fn shutdown_turns_health_not_serving_before_the_drain() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(&dir);
    // The watch streams stay open, so the drain runs to its bound.
    c.shutdown_grace = std::time::Duration::from_millis(500);
    let server = TestServer::start(c).await;
    let mut streams = Vec::new();
    for service in [
        "",
        "autoscaled.v1.HorizontalAutoscaler",
        "autoscaled.v1.VerticalAutoscaler",
    ] {
        let mut health = HealthClient::new(server.channel().await);
        let mut stream = health
            .watch(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        let first = stream.message().await.unwrap().expect("a first status");
        assert_eq!(
            first.status,
            ServingStatus::Serving as i32,
            "service {service:?}"
        );
        streams.push((service, stream));
    }
    let stopping = tokio::spawn(server.stop());
    for (service, mut stream) in streams {
        let next = tokio::time::timeout(std::time::Duration::from_secs(30), stream.message())
            .await
            .expect("no status change after shutdown began")
            .unwrap()
            .expect("the watch ended without reporting NOT_SERVING");
        assert_eq!(
            next.status,
            ServingStatus::NotServing as i32,
            "service {service:?}"
        );
    }
    stopping.await.unwrap();
}

#[tokio::test]
async fn shutdown_drain_is_bounded_by_the_grace_period() {
    use tonic_reflection::pb::v1;
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(&dir);
    c.shutdown_grace = std::time::Duration::from_millis(100);
    let server = TestServer::start(c).await;
    // A reflection stream the client never closes keeps one request in flight forever.
    let (tx, rx) = tokio::sync::mpsc::channel::<v1::ServerReflectionRequest>(1);
    let mut client =
        v1::server_reflection_client::ServerReflectionClient::new(server.channel().await);
    tx.send(v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(v1::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    })
    .await
    .unwrap();
    let mut stream = client
        .server_reflection_info(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    assert!(stream.message().await.unwrap().is_some());
    // Without the bound, `stop` would wait for the stream forever; the outer timeout only
    // turns such a hang into a failure.
    tokio::time::timeout(std::time::Duration::from_secs(60), server.stop())
        .await
        .expect("the server did not stop after its grace period");
    drop(tx);
}

#[tokio::test]
async fn per_target_settings_override_the_server_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(&dir);
    // Server default: a usage ratio of 2.0 is within tolerance, so nothing scales.
    c.hpa.tolerance = 1.5;
    let server = TestServer::start(c).await;
    let mut client = server.horizontal().await;
    let default = client
        .recommend(scale_up_request("ns/default"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(default.desired_replicas, 2);

    // The target's own tolerance (Kubernetes' 0.1) wins.
    let mut req = scale_up_request("ns/override");
    req.spec.as_mut().unwrap().settings = Some(pb::ControllerSettings {
        tolerance: Some(0.1),
        ..Default::default()
    });
    let overridden = client.recommend(req).await.unwrap().into_inner();
    assert_eq!(overridden.desired_replicas, 4);
    server.stop().await;
}

#[tokio::test]
async fn vertical_record_usage_then_recommendation() {
    use autoscaled::pb::v1::vertical_autoscaler_client::VerticalAutoscalerClient;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(&dir)).await;
    let mut client = VerticalAutoscalerClient::new(server.channel().await);
    let start = now_secs() - 7200;
    let mut samples = Vec::new();
    for i in 0..120 {
        let at = Some(ts(start + 60 * i));
        for (resource, value) in [
            (pb::Resource::Cpu, 400.0 + (i % 5) as f64 * 10.0),
            (pb::Resource::Memory, (300u64 << 20) as f64),
        ] {
            samples.push(pb::UsageSample {
                pod: "api-0".into(),
                container: "app".into(),
                resource: resource as i32,
                value,
                timestamp: at,
            });
        }
    }
    let recorded = client
        .record_usage(pb::RecordUsageRequest {
            target_key: "ns/api".into(),
            samples: samples.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(recorded.accepted_samples, 240);
    assert_eq!(recorded.discarded_samples, 0);
    // The same samples again are out of order for the CPU ordering rule: discarded, as the VPA does.
    let again = client
        .record_usage(pb::RecordUsageRequest {
            target_key: "ns/api".into(),
            samples: samples[..2].to_vec(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.accepted_samples + again.discarded_samples, 2);
    assert!(again.discarded_samples >= 1);

    let rec = client
        .get_recommendation(pb::GetRecommendationRequest {
            target_key: "ns/api".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(rec.containers.len(), 1);
    let app = &rec.containers[0];
    assert_eq!(app.container_name, "app");
    let target = app.target.unwrap();
    let cpu = target.cpu_millicores.unwrap();
    let memory = target.memory_bytes.unwrap();
    // A high percentile of 400..440m plus the 15% margin; memory: the 300 MiB peak plus margin.
    assert!((440..=600).contains(&cpu), "target cpu {cpu}m");
    assert!(
        ((300 << 20)..=(400 << 20)).contains(&memory),
        "target memory {memory}"
    );
    let lower = app.lower_bound.unwrap().cpu_millicores.unwrap();
    let upper = app.upper_bound.unwrap().cpu_millicores.unwrap();
    assert!(lower <= cpu && cpu <= upper, "{lower} <= {cpu} <= {upper}");

    // A policy turning the container off leaves no recommendation for it.
    let off = client
        .get_recommendation(pb::GetRecommendationRequest {
            target_key: "ns/api".into(),
            policy: Some(pb::VerticalPolicy {
                container_policies: vec![pb::ContainerResourcePolicy {
                    container_name: "app".into(),
                    mode: pb::ContainerScalingMode::Off as i32,
                    ..Default::default()
                }],
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(off.containers.is_empty(), "{off:?}");

    // Bad input names its field; nothing is stored for that key.
    let bad = client
        .record_usage(pb::RecordUsageRequest {
            target_key: "ns/bad".into(),
            samples: vec![pb::UsageSample {
                pod: "p".into(),
                container: "c".into(),
                resource: pb::Resource::Unspecified as i32,
                value: 1.0,
                timestamp: Some(ts(start)),
            }],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert_eq!(common::violation_fields(&bad), ["samples[0].resource"]);
    let missing = client
        .get_recommendation(pb::GetRecommendationRequest {
            target_key: "ns/bad".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);

    client
        .delete_vertical_target(pb::DeleteVerticalTargetRequest {
            target_key: "ns/api".into(),
        })
        .await
        .unwrap();
    let gone = client
        .get_recommendation(pb::GetRecommendationRequest {
            target_key: "ns/api".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    server.stop().await;
}

#[tokio::test]
async fn history_older_than_the_retention_is_pruned_on_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(&dir);
    c.trust_request_time = true;
    let server = TestServer::start(c).await;
    let mut client = server.horizontal().await;
    let t0 = now_secs() - 3 * 3600;
    let at = |secs: i64| {
        let mut req = scale_up_request("ns/old");
        req.evaluation_time = Some(ts(secs));
        for p in &mut req.pods {
            p.metrics.get_mut("cpu").unwrap().timestamp = Some(ts(secs));
            p.start_time = Some(ts(secs - 3600));
            p.ready_transition_time = Some(ts(secs - 3600));
        }
        req
    };
    client.recommend(at(t0)).await.unwrap();
    let before = client
        .get_history(pb::GetHistoryRequest {
            target_key: "ns/old".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(before.recommendations.len(), 2);

    // Two hours later (retention: one hour): the first call's entries are gone, the new
    // proposal is kept, and both decisions stay in the log.
    client.recommend(at(t0 + 7200)).await.unwrap();
    let after = client
        .get_history(pb::GetHistoryRequest {
            target_key: "ns/old".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let times: Vec<_> = after
        .recommendations
        .iter()
        .map(|r| r.time.unwrap().seconds)
        .collect();
    assert_eq!(times, [t0 + 7200]);
    let logged: u64 = after.decisions.iter().map(|d| d.run_count).sum();
    assert_eq!(logged, 2);
    server.stop().await;
}

/// The caps on what a target stores (`engine::hpa::prune::bound`: 256 recommendations, 256 scale
/// events per direction), through the API: 650 Recommends one second apart on two targets.
/// One keeps every recommendation (a downscale window of 3000 s), the other every scale event
/// (the usage alternates, so the count moves 1 <-> 2 every call, and the policies' period is
/// 1800 s). Every call is answered and recorded, and the history keeps no more than the caps.
#[tokio::test]
async fn stored_recommendations_and_scale_events_stay_bounded_through_the_api() {
    const CALLS: i64 = 650;
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(&dir);
    c.trust_request_time = true;
    let server = TestServer::start(c).await;
    let mut client = server.horizontal().await;
    let rules = |window: i32| pb::ScalingRules {
        stabilization_window_seconds: Some(window),
        policies: vec![pb::ScalingPolicy {
            r#type: pb::ScalingPolicyType::Percent as i32,
            value: 1000,
            period_seconds: 1800,
        }],
        policies_set: true,
        ..Default::default()
    };
    let t0 = now_secs() - CALLS - 60;
    for (key, down_window) in [("bounded/recommendations", 3000), ("bounded/events", 0)] {
        let behavior = pb::Behavior {
            scale_up: Some(rules(0)),
            scale_down: Some(rules(down_window)),
        };
        let mut current = 1;
        for i in 0..CALLS {
            let usage = if i % 2 == 0 { 900 } else { 100 };
            let request = fixtures::recommend(key)
                .pods(usize::try_from(current).unwrap())
                .behavior(behavior.clone())
                .cpu_usage_milli(usage)
                .at(t0 + i)
                .build();
            let response = client.recommend(request).await.unwrap().into_inner();
            assert!(response.recorded, "{key}: call {i}");
            current = response.desired_replicas;
        }
    }
    let history = |key: &str| pb::GetHistoryRequest {
        target_key: key.into(),
        ..Default::default()
    };
    let recs = client
        .get_history(history("bounded/recommendations"))
        .await
        .unwrap()
        .into_inner()
        .recommendations
        .len();
    let events = client
        .get_history(history("bounded/events"))
        .await
        .unwrap()
        .into_inner();
    let (up, down) = (events.scale_up_events.len(), events.scale_down_events.len());
    println!("after {CALLS} calls each: {recs} recommendations; {up} + {down} scale events");
    // Without the caps: 650 recommendations and about 325 events per direction.
    assert!((100..=256).contains(&recs), "{recs} recommendations");
    assert!((100..=256).contains(&up), "{up} scale-up events");
    assert!((100..=256).contains(&down), "{down} scale-down events");
    server.stop().await;
}
