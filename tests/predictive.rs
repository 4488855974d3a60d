//! Predictive scale-up over a real channel, on the configuration most users have (a CPU
//! Utilization target): a daily cycle decided every minute for three days through gRPC, with
//! the server restarted between days. `forecast_only` decides as the HPA and reports the
//! forecast beside it; `scale_up` is never below it and raises ahead of a morning rise once
//! the model has seen a day, from the state kept in the store across the restart; the logged
//! decisions and the listing carry the report; a bad spec is INVALID_ARGUMENT naming the
//! field, over gRPC and HTTP/JSON, with nothing stored.

use std::io::{Read, Write};

use autoscaled::{
    config::Config,
    pb::v1::{self as pb},
};
use autoscaled_fixtures as fixtures;
use tonic::Code;

mod common;

use common::{TestServer, assert_not_stored, violation_fields};

const DAY: i64 = 86_400;
/// A Monday 00:00 UTC, a few weeks before the test runs (any past time will do).
const START: i64 = 1_795_305_600 - 8 * 7 * DAY;

/// The service's total CPU in millicores: 5 replicas' worth (at 500m each) at night, a
/// steep rise to 35 over a quarter of an hour from 08:00, back down from 18:00.
fn load_milli(t: i64) -> i64 {
    let s = t.rem_euclid(DAY) as f64;
    let up = ((s - 8.0 * 3600.0) / 900.0).clamp(0.0, 1.0);
    let down = ((s - 18.0 * 3600.0) / 900.0).clamp(0.0, 1.0);
    ((5.0 + 30.0 * (up - down)) * 500.0) as i64
}

fn predictive(mode: pb::PredictiveMode, delay_secs: i64) -> pb::Predictive {
    pb::Predictive {
        mode: mode as i32,
        margin_percent: None,
        startup_delay: Some(prost_types::Duration {
            seconds: delay_secs,
            nanos: 0,
        }),
    }
}

/// `current` pods sharing the load, each requesting 1000m, against a 50 % target.
fn request(key: &str, t: i64, current: i32, p: Option<pb::Predictive>) -> pb::RecommendRequest {
    let each = load_milli(t) / i64::from(current);
    let mut r = fixtures::recommend(key)
        .pods(current as usize)
        .cpu_request_milli(1000)
        .cpu_usage_milli(each)
        .cpu_utilization(50)
        .replicas(Some(1), 60)
        .at(t)
        .build();
    r.spec.as_mut().unwrap().predictive = p;
    r
}

fn condition<'a>(r: &'a pb::RecommendResponse, kind: &str) -> Option<&'a pb::Condition> {
    r.conditions.iter().find(|c| c.r#type == kind)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forecast_only_reports_and_scale_up_raises_ahead_of_the_morning_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = || {
        let mut c = Config::with_data_dir(dir.path().join("data"));
        c.trust_request_time = true;
        // Three days of history for the what-if below (a default server keeps a day).
        c.decision_log_len = 1000;
        c.decision_retention = std::time::Duration::from_secs(4 * DAY as u64);
        c
    };
    let mut server = TestServer::start(config()).await;
    let mut client = server.horizontal().await;
    let (mut plain, mut only, mut up) = (10, 10, 10);
    let (mut raised, mut ahead, mut would_have) = (0, 0, 0);
    let mut last_wape = None;
    for minute in 0..(3 * DAY / 60) {
        let t = START + minute * 60;
        if minute > 0 && minute % (DAY / 60) == 0 {
            // A new server on the same data: the model is in the store, not in memory.
            drop(client);
            server.stop().await;
            // The stopped server's tasks release the folder as the runtime drops them.
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            server = TestServer::start(config()).await;
            client = server.horizontal().await;
        }
        let a = client
            .recommend(request("pred/plain", t, plain, None))
            .await
            .unwrap()
            .into_inner();
        let b = client
            .recommend(request(
                "pred/only",
                t,
                only,
                Some(predictive(pb::PredictiveMode::ForecastOnly, 300)),
            ))
            .await
            .unwrap()
            .into_inner();
        let c = client
            .recommend(request(
                "pred/up",
                t,
                up,
                Some(predictive(pb::PredictiveMode::ScaleUp, 300)),
            ))
            .await
            .unwrap()
            .into_inner();
        assert!(a.predictive.is_none() && condition(&a, "PredictiveScaling").is_none());
        // All three see the same pods whenever their counts agree; forecast_only's count
        // is always the plain HPA's.
        assert_eq!(
            b.desired_replicas, a.desired_replicas,
            "forecast_only changed the decision at minute {minute}"
        );
        let report = b.predictive.as_ref().expect("a forecast_only report");
        assert_eq!(report.mode, pb::PredictiveMode::ForecastOnly as i32);
        assert_eq!(report.metric, "Resource/cpu");
        assert!(report.load.is_some(), "{report:?}");
        would_have += i32::from(report.raised);
        if report.wape.is_some() {
            last_wape = report.wape;
        }
        let report = c.predictive.as_ref().expect("a scale_up report");
        // Never below the reactive count (within the rate limit and the maximum).
        let reactive = report.reactive_replicas.expect("the reactive count");
        let cap = c
            .explanation
            .as_ref()
            .unwrap()
            .scale_up_limit
            .unwrap_or(60)
            .min(60);
        assert!(
            c.desired_replicas >= reactive.min(cap),
            "scale_up below the HPA at minute {minute}: {c:?}"
        );
        let cond = condition(&c, "PredictiveScaling").expect("the condition");
        assert_eq!(cond.reason, report.reason, "minute {minute}: {c:?}");
        if minute < 6 * 60 {
            assert_eq!(report.reason, "InsufficientHistory", "minute {minute}");
            assert_eq!(cond.status, "False");
        }
        if report.raised {
            raised += 1;
            assert_eq!(report.reason, "ForecastRaised");
            assert!(report.forecast_replicas.unwrap() >= c.desired_replicas);
            let second_of_day = t.rem_euclid(DAY);
            // Raised before the rise's load arrives: the start-up delay ahead of 08:00.
            if (7 * 3600 + 50 * 60..8 * 3600).contains(&second_of_day) && c.desired_replicas > up {
                ahead += 1;
                assert!(
                    c.explanation
                        .as_ref()
                        .unwrap()
                        .rescale_reason
                        .starts_with("predictive scale-up"),
                    "{:?}",
                    c.explanation
                );
            }
        }
        // Replicas serve at once here: the gates score what was asked.
        (plain, only, up) = (a.desired_replicas, b.desired_replicas, c.desired_replicas);
    }
    eprintln!(
        "scale_up raised {raised} times ({ahead} ahead of 08:00); forecast_only would have raised {would_have}; last WAPE {last_wape:?}"
    );
    assert!(ahead > 0, "never raised ahead of the morning rise");
    assert!(would_have > 0, "forecast_only never saw the rise coming");
    let wape = last_wape.expect("forecast_only reports its accuracy after a day");
    assert!((0.0..1.0).contains(&wape), "{wape}");

    // The log and the listing carry the report.
    let history = client
        .get_history(pb::GetHistoryRequest {
            target_key: "pred/up".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(history.decisions[0].predictive.is_some());
    let listed = client
        .list_targets(pb::ListTargetsRequest {
            include_summaries: true,
            prefix: "pred/only".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let summary = listed.summaries[0].predictive.as_ref().expect("summary");
    assert_eq!(summary.mode, pb::PredictiveMode::ForecastOnly as i32);
    assert!(summary.wape.is_some());

    // The what-if: the plain target's stored history replayed with prediction on, both runs
    // measured as if replicas served 5 minutes after the scale call.
    let spec = request(
        "pred/plain",
        START,
        10,
        Some(predictive(pb::PredictiveMode::ScaleUp, 300)),
    )
    .spec
    .unwrap();
    let r = client
        .simulate(pb::SimulateRequest {
            target_key: "pred/plain".into(),
            spec: Some(spec),
            startup_delay: Some(prost_types::Duration {
                seconds: 300,
                nanos: 0,
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let summary = r.summary.unwrap();
    let (stored, simulated) = (summary.stored.unwrap(), summary.simulated.unwrap());
    eprintln!(
        "what-if over {} steps: stored {:.1} replica-hours, {:?} under-provisioned replica-minutes ({:?} of the time); with prediction {:.1}, {:?} ({:?})",
        r.steps.len(),
        stored.replica_hours,
        stored.under_provisioned_replica_minutes,
        stored.share_under_provisioned,
        simulated.replica_hours,
        simulated.under_provisioned_replica_minutes,
        simulated.share_under_provisioned
    );
    let (short_stored, short_simulated) = (
        stored.under_provisioned_replica_minutes.unwrap(),
        simulated.under_provisioned_replica_minutes.unwrap(),
    );
    assert!(
        short_stored > 0.0,
        "the reactive run trails each morning's rise"
    );
    assert!(
        short_simulated < short_stored,
        "prediction did not shorten the shortfall: {short_simulated} >= {short_stored}"
    );
    assert!(
        r.steps
            .iter()
            .any(|s| s.simulated_desired_replicas > s.stored_desired_replicas),
        "no step raised"
    );
    // A bad delay names the field.
    let e = client
        .simulate(pb::SimulateRequest {
            target_key: "pred/plain".into(),
            startup_delay: Some(prost_types::Duration {
                seconds: -1,
                nanos: 0,
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(violation_fields(&e), ["startup_delay"]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_predictive_specs_are_invalid_arguments_naming_the_field_and_store_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::with_data_dir(dir.path().join("data"));
    config.trust_request_time = true;
    let server = TestServer::start(config).await;
    let mut client = server.horizontal().await;
    let t = common::now_secs() - 60;

    let cases = [
        (
            predictive(pb::PredictiveMode::ScaleUp, -60),
            "spec.predictive.startup_delay",
        ),
        (
            predictive(pb::PredictiveMode::ScaleUp, 0),
            "spec.predictive.startup_delay",
        ),
        (
            predictive(pb::PredictiveMode::ScaleUp, 3 * 3600),
            "spec.predictive.startup_delay",
        ),
        (
            pb::Predictive {
                margin_percent: Some(101),
                ..predictive(pb::PredictiveMode::ScaleUp, 300)
            },
            "spec.predictive.margin_percent",
        ),
        (
            pb::Predictive {
                margin_percent: Some(-5),
                ..predictive(pb::PredictiveMode::ScaleUp, 300)
            },
            "spec.predictive.margin_percent",
        ),
        (
            pb::Predictive {
                mode: 42,
                margin_percent: None,
                startup_delay: None,
            },
            "spec.predictive.mode",
        ),
    ];
    for (i, (p, field)) in cases.into_iter().enumerate() {
        let key = format!("pred/bad-{i}");
        let e = client
            .recommend(request(&key, t, 2, Some(p)))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{field}: {e:?}");
        assert_eq!(violation_fields(&e), [field]);
        assert_not_stored(&mut client, &key).await;
    }

    // A policy's predictive spec is checked when it is put, under policy.spec.
    let e = client
        .put_policy(pb::PutPolicyRequest {
            policy: Some(pb::Policy {
                name: "bad-predictive".into(),
                spec: Some(pb::HorizontalSpec {
                    predictive: Some(predictive(pb::PredictiveMode::ScaleUp, -1)),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            expected_version: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(
        violation_fields(&e),
        ["policy.spec.predictive.startup_delay"]
    );

    // The same over HTTP/JSON: 400 naming the field; the mode by its name works.
    for (body, expect) in [
        (
            r#"{"targetKey":"pred/json","currentReplicas":2,"spec":{"maxReplicas":5,"predictive":{"mode":"PREDICTIVE_MODE_SCALE_UP","startupDelay":"7200s"}}}"#,
            "400",
        ),
        (
            r#"{"targetKey":"pred/json-ok","currentReplicas":2,"dryRun":true,"spec":{"maxReplicas":5,"metrics":[{"type":"METRIC_SOURCE_TYPE_EXTERNAL","name":"q","target":{"type":"METRIC_TARGET_TYPE_AVERAGE_VALUE","averageValueMilli":"10000"}}],"predictive":{"mode":"PREDICTIVE_MODE_FORECAST_ONLY"}},"externalMetrics":{"q":{"valuesMilli":["30000"]}}}"#,
            "200",
        ),
    ] {
        let mut tcp = std::net::TcpStream::connect(server.addr).unwrap();
        write!(
            tcp,
            "POST /autoscaled.v1.HorizontalAutoscaler/Recommend HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        tcp.read_to_string(&mut answer).unwrap();
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {expect}")),
            "{answer}"
        );
        if expect == "400" {
            assert!(answer.contains("spec.predictive.startup_delay"), "{answer}");
        } else {
            assert!(answer.contains("InsufficientHistory"), "{answer}");
        }
    }
    assert_not_stored(&mut client, "pred/json").await;
    server.stop().await;
}
