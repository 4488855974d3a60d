//! The VerticalAutoscaler end to end over a real channel (127.0.0.1, port 0): a day of
//! per-minute samples for two containers plus an OOM gives exactly the pure engine's numbers;
//! every invalid field is INVALID_ARGUMENT naming its path and stores nothing; delete; health
//! and reflection list the service.

use std::time::Duration;

use autoscaled::{
    config::Config,
    engine::time::Time,
    engine::vpa::{Observation, OomEvent, Resource, UsageSample, VpaSettings, VpaTarget},
    pb::v1 as pb,
};
use prost_types::{Duration as PbDuration, Timestamp as PbTimestamp};
use tonic::Code;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use tonic_types::StatusExt;

mod common;

use common::{TestServer, now_secs};

const SERVICE: &str = "autoscaled.v1.VerticalAutoscaler";
/// 2026-01-01T00:00:00Z: the evaluation time of the deterministic test.
const T0: i64 = 1_767_225_600;
const MIB: i64 = 1024 * 1024;

fn ts(seconds: i64) -> Option<PbTimestamp> {
    Some(PbTimestamp { seconds, nanos: 0 })
}

/// One sample in both forms: the wire's and the engine's.
fn sample(
    pod: &str,
    container: &str,
    resource: Resource,
    value: i64,
    at: i64,
) -> (pb::UsageSample, Observation) {
    let wire = pb::UsageSample {
        pod: pod.into(),
        container: container.into(),
        resource: match resource {
            Resource::Cpu => pb::Resource::Cpu,
            Resource::Memory => pb::Resource::Memory,
        } as i32,
        value: value as f64,
        timestamp: ts(at),
    };
    let engine = Observation::Usage(UsageSample {
        pod: pod.into(),
        container: container.into(),
        resource,
        usage: value,
        at: Time::from_unix_seconds(at),
    });
    (wire, engine)
}

/// A day of per-minute samples ending at `T0` for `app` and `sidecar` of pod `web-0`: CPU
/// following a daily wave with jitter, memory slowly growing; deterministic.
fn day_of_samples() -> Vec<(pb::UsageSample, Observation)> {
    let mut out = Vec::new();
    for m in 0..1440_i64 {
        let at = T0 - 86_400 + m * 60;
        let phase = (m as f64) / 1440.0 * std::f64::consts::TAU;
        let jitter = (m * 7919) % 97;
        let app_cpu = 400 + (300.0 * phase.sin()) as i64 + jitter;
        let side_cpu = 30 + jitter / 4;
        let app_mem = 600 * MIB + m * 40 * 1024 + jitter * MIB;
        let side_mem = 64 * MIB + (jitter % 8) * MIB;
        out.push(sample("web-0", "app", Resource::Cpu, app_cpu, at));
        out.push(sample("web-0", "app", Resource::Memory, app_mem, at));
        out.push(sample("web-0", "sidecar", Resource::Cpu, side_cpu, at));
        out.push(sample("web-0", "sidecar", Resource::Memory, side_mem, at));
    }
    out
}

fn amounts(cpu: Option<i64>, memory: Option<i64>) -> Option<pb::ResourceAmounts> {
    Some(pb::ResourceAmounts {
        cpu_millicores: cpu,
        memory_bytes: memory,
    })
}

#[tokio::test]
async fn a_day_of_samples_gives_the_pure_engines_recommendation() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::with_data_dir(dir.path().join("data"));
    config.trust_request_time = true;
    let server = TestServer::start(config).await;
    let mut client = server.vertical().await;

    // The target's stored overrides (sent with the first batch) and the engine's equivalent.
    let stored = pb::VerticalSettings {
        safety_margin_fraction: Some(0.2),
        memory_histogram_decay_half_life: Some(PbDuration {
            seconds: 12 * 3600,
            nanos: 0,
        }),
        ..Default::default()
    };
    let mut settings = VpaSettings {
        safety_margin_fraction: 0.2,
        memory_histogram_decay_half_life: Duration::from_secs(12 * 3600),
        ..VpaSettings::default()
    };
    let now = Time::from_unix_seconds(T0);
    let mut engine = VpaTarget::default();

    let samples = day_of_samples();
    let oom = pb::OomEvent {
        pod: "web-0".into(),
        container: "app".into(),
        timestamp: ts(T0 - 1800),
        memory_bytes: 700 * MIB,
    };
    let batches: Vec<_> = samples.chunks(1000).collect();
    let mut accepted = 0;
    for (i, batch) in batches.iter().enumerate() {
        let last = i == batches.len() - 1;
        let mut observations: Vec<Observation> = batch.iter().map(|(_, o)| o.clone()).collect();
        if last {
            observations.push(Observation::Oom(OomEvent {
                pod: "web-0".into(),
                container: "app".into(),
                at: Time::from_unix_seconds(T0 - 1800),
                memory_bytes: 700 * MIB,
            }));
        }
        let report = engine.record_samples(&observations, None, &settings, now);
        engine.garbage_collect(None, &settings, now);

        let response = client
            .record_usage(pb::RecordUsageRequest {
                target_key: "prod/web".into(),
                samples: batch.iter().map(|(w, _)| w.clone()).collect(),
                oom_events: if last { vec![oom.clone()] } else { vec![] },
                settings: (i == 0).then_some(stored),
                evaluation_time: ts(T0),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (
                response.accepted_samples as u64,
                response.discarded_samples as u64,
                response.accepted_oom_events as u64
            ),
            (
                report.accepted_samples,
                report.discarded_samples,
                report.accepted_oom_events
            )
        );
        accepted += response.accepted_samples;
    }
    assert_eq!(accepted, 4 * 1440, "every sample is in order and accepted");

    // Per-call override on top of the stored ones.
    settings.target_cpu_percentile = 0.5;
    let expected = engine.recommend(None, &[], &settings);
    let got = client
        .get_recommendation(pb::GetRecommendationRequest {
            target_key: "prod/web".into(),
            settings: Some(pb::VerticalSettings {
                target_cpu_percentile: Some(0.5),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.target_key, "prod/web");
    let names: Vec<_> = got
        .containers
        .iter()
        .map(|c| c.container_name.as_str())
        .collect();
    assert_eq!(names, ["app", "sidecar"]);
    for (g, e) in got.containers.iter().zip(&expected.containers) {
        assert_eq!(g.container_name, e.container_name);
        assert_eq!(g.target, amounts(e.target.cpu, e.target.memory));
        assert_eq!(
            g.lower_bound,
            amounts(e.lower_bound.cpu, e.lower_bound.memory)
        );
        assert_eq!(
            g.upper_bound,
            amounts(e.upper_bound.cpu, e.upper_bound.memory)
        );
        assert_eq!(
            g.uncapped_target,
            amounts(e.uncapped_target.cpu, e.uncapped_target.memory)
        );
    }
    let app = &got.containers[0];
    let target = app.target.unwrap();
    eprintln!("app: {:?}", app);
    // The OOM (700 MiB, bumped by 1.2 to 840 MiB) dominates the app's memory peaks.
    assert!(target.memory_bytes.unwrap() >= 840 * MIB, "{app:?}");
    assert!(target.cpu_millicores.unwrap() > 400, "{app:?}");

    // Without the per-call override the stored settings alone apply (0.9 percentile): a
    // different CPU target, proving the override is per call and not stored.
    settings.target_cpu_percentile = 0.9;
    let plain = client
        .get_recommendation(pb::GetRecommendationRequest {
            target_key: "prod/web".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let expected_plain = engine.recommend(None, &[], &settings);
    assert_eq!(
        plain.containers[0].target,
        amounts(
            expected_plain.containers[0].target.cpu,
            expected_plain.containers[0].target.memory
        )
    );
    assert_ne!(plain.containers[0].target, app.target);

    // A policy caps the app's CPU; the uncapped target stays.
    let capped = client
        .get_recommendation(pb::GetRecommendationRequest {
            target_key: "prod/web".into(),
            policy: Some(pb::VerticalPolicy {
                container_policies: vec![pb::ContainerResourcePolicy {
                    container_name: "app".into(),
                    max_allowed: amounts(Some(250), None),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        capped.containers[0].target.unwrap().cpu_millicores,
        Some(250)
    );
    assert_eq!(
        capped.containers[0].uncapped_target,
        plain.containers[0].uncapped_target
    );
    server.stop().await;
}

/// A valid sample stamped a minute ago (server clock).
fn good_sample() -> pb::UsageSample {
    pb::UsageSample {
        pod: "p".into(),
        container: "c".into(),
        resource: pb::Resource::Cpu as i32,
        value: 100.0,
        timestamp: ts(now_secs() - 60),
    }
}

#[tokio::test]
async fn every_invalid_field_is_invalid_argument_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(Config::with_data_dir(dir.path().join("data"))).await;
    let mut client = server.vertical().await;

    type Change = fn(&mut pb::RecordUsageRequest);
    let cases: Vec<(&str, Change)> = vec![
        ("target_key", |r| r.target_key.clear()),
        ("target_key", |r| r.target_key = "a\u{0}b".into()),
        ("samples[1].value", |r| r.samples[1].value = -1.0),
        ("samples[1].value", |r| r.samples[1].value = f64::NAN),
        ("samples[1].value", |r| r.samples[1].value = f64::INFINITY),
        ("samples[1].resource", |r| {
            r.samples[1].resource = pb::Resource::Unspecified as i32
        }),
        ("samples[1].resource", |r| r.samples[1].resource = 7),
        ("samples[1].pod", |r| r.samples[1].pod.clear()),
        ("samples[1].container", |r| r.samples[1].container.clear()),
        ("samples[1].timestamp", |r| r.samples[1].timestamp = None),
        ("samples[1].timestamp", |r| {
            r.samples[1].timestamp = ts(now_secs() + 3600)
        }),
        ("samples[1].timestamp", |r| {
            r.samples[1].timestamp = Some(PbTimestamp {
                seconds: now_secs(),
                nanos: -1,
            })
        }),
        ("samples[1].timestamp", |r| {
            r.samples[1].timestamp = ts(-62_135_596_800)
        }),
        ("oom_events[0].memory_bytes", |r| {
            r.oom_events[0].memory_bytes = -1
        }),
        ("oom_events[0].timestamp", |r| {
            r.oom_events[0].timestamp = ts(now_secs() + 3600)
        }),
        ("oom_events[0].pod", |r| r.oom_events[0].pod.clear()),
        ("oom_events[0].container", |r| {
            r.oom_events[0].container.clear()
        }),
        ("settings.target_cpu_percentile", |r| {
            r.settings = Some(pb::VerticalSettings {
                target_cpu_percentile: Some(1.5),
                ..Default::default()
            })
        }),
        ("settings.safety_margin_fraction", |r| {
            r.settings = Some(pb::VerticalSettings {
                safety_margin_fraction: Some(f64::NAN),
                ..Default::default()
            })
        }),
        ("settings.cpu_histogram_decay_half_life", |r| {
            r.settings = Some(pb::VerticalSettings {
                cpu_histogram_decay_half_life: Some(PbDuration::default()),
                ..Default::default()
            })
        }),
        ("settings.memory_aggregation_interval_count", |r| {
            r.settings = Some(pb::VerticalSettings {
                memory_aggregation_interval_count: Some(0),
                ..Default::default()
            })
        }),
        ("settings.pod_min_memory_mb", |r| {
            r.settings = Some(pb::VerticalSettings {
                pod_min_memory_mb: Some(-1),
                ..Default::default()
            })
        }),
        ("evaluation_time", |r| r.evaluation_time = ts(now_secs())),
    ];
    for (field, change) in &cases {
        // Otherwise valid: a good sample first, so a partial store would leave a target.
        let mut request = pb::RecordUsageRequest {
            target_key: "bad".into(),
            samples: vec![good_sample(), good_sample()],
            oom_events: vec![pb::OomEvent {
                pod: "p".into(),
                container: "c".into(),
                timestamp: ts(now_secs() - 30),
                memory_bytes: 100 * MIB,
            }],
            ..Default::default()
        };
        change(&mut request);
        let status = client.record_usage(request).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
        let bad = status
            .get_details_bad_request()
            .unwrap_or_else(|| panic!("{field}: no BadRequest details in {status:?}"));
        let fields: Vec<_> = bad
            .field_violations
            .iter()
            .map(|v| v.field.as_str())
            .collect();
        assert_eq!(fields, [*field], "{status:?}");
    }

    let bad_gets: Vec<(&str, pb::GetRecommendationRequest)> = vec![
        ("target_key", pb::GetRecommendationRequest::default()),
        (
            "policy.container_policies[0].container_name",
            pb::GetRecommendationRequest {
                target_key: "bad".into(),
                policy: Some(pb::VerticalPolicy {
                    container_policies: vec![pb::ContainerResourcePolicy::default()],
                }),
                ..Default::default()
            },
        ),
        (
            "policy.container_policies[0].max_allowed.cpu_millicores",
            pb::GetRecommendationRequest {
                target_key: "bad".into(),
                policy: Some(pb::VerticalPolicy {
                    container_policies: vec![pb::ContainerResourcePolicy {
                        container_name: "c".into(),
                        min_allowed: amounts(Some(500), None),
                        max_allowed: amounts(Some(100), None),
                        ..Default::default()
                    }],
                }),
                ..Default::default()
            },
        ),
        (
            "policy.container_policies[0].controlled_resources[0]",
            pb::GetRecommendationRequest {
                target_key: "bad".into(),
                policy: Some(pb::VerticalPolicy {
                    container_policies: vec![pb::ContainerResourcePolicy {
                        container_name: "c".into(),
                        controlled_resources: vec![0],
                        controlled_resources_set: true,
                        ..Default::default()
                    }],
                }),
                ..Default::default()
            },
        ),
        (
            "integer_cpu_containers[0]",
            pb::GetRecommendationRequest {
                target_key: "bad".into(),
                integer_cpu_containers: vec![String::new()],
                ..Default::default()
            },
        ),
        (
            "settings.upper_bound_memory_percentile",
            pb::GetRecommendationRequest {
                target_key: "bad".into(),
                settings: Some(pb::VerticalSettings {
                    upper_bound_memory_percentile: Some(-0.1),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ),
    ];
    for (field, request) in bad_gets {
        let status = client.get_recommendation(request).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
        let bad = status.get_details_bad_request().expect("BadRequest");
        assert_eq!(bad.field_violations[0].field, field, "{status:?}");
    }

    // Nothing was stored by the rejected calls.
    let missing = client
        .get_recommendation(pb::GetRecommendationRequest {
            target_key: "bad".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound, "{missing:?}");

    // The same request without the bad field goes through, and the target now exists.
    let ok = client
        .record_usage(pb::RecordUsageRequest {
            target_key: "bad".into(),
            samples: vec![good_sample()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ok.accepted_samples, 1);
    let rec = client
        .get_recommendation(pb::GetRecommendationRequest {
            target_key: "bad".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(rec.containers.len(), 1);
    // One CPU sample of 100m: the pod minimum (25m) does not bind, the engine's estimate does.
    assert!(rec.containers[0].target.unwrap().cpu_millicores.unwrap() > 25);
    server.stop().await;
}

#[tokio::test]
async fn too_many_samples_are_resource_exhausted() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::with_data_dir(dir.path().join("data"));
    config.limits.max_samples = 3;
    let server = TestServer::start(config).await;
    let mut client = server.vertical().await;
    let status = client
        .record_usage(pb::RecordUsageRequest {
            target_key: "k".into(),
            samples: vec![good_sample(); 4],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    server.stop().await;
}

#[tokio::test]
async fn delete_forgets_the_target_and_list_pages_through_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(Config::with_data_dir(dir.path().join("data"))).await;
    let mut client = server.vertical().await;
    for key in ["ns/a", "ns/ab", "ns/b"] {
        client
            .record_usage(pb::RecordUsageRequest {
                target_key: key.into(),
                samples: vec![good_sample()],
                ..Default::default()
            })
            .await
            .unwrap();
    }
    client
        .delete_vertical_target(pb::DeleteVerticalTargetRequest {
            target_key: "ns/a".into(),
        })
        .await
        .unwrap();
    let get = |key: &str| pb::GetRecommendationRequest {
        target_key: key.into(),
        ..Default::default()
    };
    assert_eq!(
        client
            .get_recommendation(get("ns/a"))
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    assert!(client.get_recommendation(get("ns/ab")).await.is_ok());
    let list = |page_size, page_token: &str| pb::ListVerticalTargetsRequest {
        page_size,
        page_token: page_token.into(),
    };
    let all = client
        .list_vertical_targets(list(0, ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.target_keys, ["ns/ab", "ns/b"]);
    assert!(all.next_page_token.is_empty());
    let first = client
        .list_vertical_targets(list(1, ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first.target_keys, ["ns/ab"]);
    let second = client
        .list_vertical_targets(list(1, &first.next_page_token))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(second.target_keys, ["ns/b"]);
    assert!(second.next_page_token.is_empty());
    assert_eq!(
        client
            .list_vertical_targets(list(-1, ""))
            .await
            .unwrap_err()
            .code(),
        Code::InvalidArgument
    );
    let again = client
        .delete_vertical_target(pb::DeleteVerticalTargetRequest {
            target_key: "ns/a".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::NotFound);
    let empty = client
        .delete_vertical_target(pb::DeleteVerticalTargetRequest::default())
        .await
        .unwrap_err();
    assert_eq!(empty.code(), Code::InvalidArgument);
    server.stop().await;
}

#[tokio::test]
async fn health_and_reflection_list_the_vertical_service() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(Config::with_data_dir(dir.path().join("data"))).await;
    let status = HealthClient::new(server.channel().await)
        .check(HealthCheckRequest {
            service: SERVICE.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(status, ServingStatus::Serving as i32);

    let names = common::reflection_v1alpha_services(server.channel().await).await;
    assert!(names.iter().any(|s| s == SERVICE), "{names:?}");
    server.stop().await;
}
