//! Schedules over a real channel: a spec's window sets the floor, the response, the logged
//! decision and the listing say which schedule and until when, a policy carries schedules to
//! its targets, and bad schedules are INVALID_ARGUMENT naming the field, over gRPC and
//! HTTP/JSON alike, with nothing stored.

use std::io::{Read, Write};

use autoscaled::{
    config::Config,
    pb::v1::{self as pb},
};
use autoscaled_fixtures as fixtures;
use tonic::Code;

mod common;

use common::{TestServer, assert_not_stored, now_secs, violation_fields};

/// Open all year: opened every 1 January at 00:00 UTC, for 366 days.
fn always(min: Option<i32>, max: Option<i32>) -> pb::Schedule {
    pb::Schedule {
        name: "always".into(),
        start: "0 0 1 1 *".into(),
        end: String::new(),
        duration: Some(prost_types::Duration {
            seconds: 366 * 86_400,
            nanos: 0,
        }),
        time_zone: "UTC".into(),
        min_replicas: min,
        max_replicas: max,
    }
}

/// Two pods nearly idle against a 50 % cpu target, bounds 1..20.
fn request(key: &str, at: i64, schedules: Vec<pb::Schedule>) -> pb::RecommendRequest {
    let mut r = fixtures::recommend(key)
        .pods(2)
        .cpu_request_milli(500)
        .cpu_usage_milli(10)
        .replicas(Some(1), 20)
        .at(at)
        .build();
    r.spec.as_mut().unwrap().schedules = schedules;
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_sets_the_floor_and_every_view_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::with_data_dir(dir.path().join("data"));
    config.trust_request_time = true;
    let server = TestServer::start(config).await;
    let mut client = server.horizontal().await;
    let at = now_secs() - 60;

    let r = client
        .recommend(request("sched/web", at, vec![always(Some(8), None)]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.desired_replicas, 8, "raised to the scheduled floor");
    let explanation = r.explanation.as_ref().unwrap();
    assert_eq!(explanation.path, "BelowMinReplicas");
    assert!(
        explanation.rescale_reason.contains("scheduled minimum 8"),
        "{explanation:?}"
    );
    let report = r.schedule.as_ref().expect("a schedule report");
    assert_eq!(report.applied, ["always"]);
    assert_eq!((report.min_replicas, report.max_replicas), (8, 20));
    // Its windows chain (366 days from each 1 January): no change within the lookahead.
    assert!(report.next_change.is_none() && report.next_change_local.is_empty());

    // The logged decision and the listing keep it.
    let history = client
        .get_history(pb::GetHistoryRequest {
            target_key: "sched/web".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        history.decisions[0].schedule.as_ref().unwrap().applied,
        ["always"]
    );
    let listed = client
        .list_targets(pb::ListTargetsRequest {
            include_summaries: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let summary = &listed.summaries[0];
    assert_eq!(summary.schedule.as_ref().unwrap().min_replicas, 8);

    // A ceiling below the spec's maximum: the count is capped and the condition says why.
    let r = client
        .recommend(pb::RecommendRequest {
            current_replicas: 12,
            ..request("sched/capped", at, vec![always(None, Some(5))])
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.desired_replicas, 5);
    assert_eq!(r.explanation.unwrap().path, "AboveMaxReplicas");

    // A policy carries schedules to its targets; a target's own list replaces it.
    client
        .put_policy(pb::PutPolicyRequest {
            policy: Some(pb::Policy {
                name: "with-floor".into(),
                spec: Some(pb::HorizontalSpec {
                    schedules: vec![always(Some(6), None)],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            expected_version: None,
        })
        .await
        .unwrap();
    let r = client
        .recommend(pb::RecommendRequest {
            policy: "with-floor".into(),
            ..request("sched/from-policy", at, Vec::new())
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.desired_replicas, 6);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_schedules_are_invalid_arguments_naming_the_field_and_store_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::with_data_dir(dir.path().join("data"));
    config.trust_request_time = true;
    let server = TestServer::start(config).await;
    let mut client = server.horizontal().await;
    let at = now_secs() - 60;

    let mut cases: Vec<(pb::Schedule, &str)> = Vec::new();
    let mut s = always(Some(3), None);
    s.start = "not a cron".into();
    cases.push((s, "spec.schedules[0].start"));
    let mut s = always(Some(3), None);
    s.time_zone = "Nowhere/Atlantis".into();
    cases.push((s, "spec.schedules[0].time_zone"));
    cases.push((always(None, None), "spec.schedules[0]"));
    let mut s = always(Some(3), None);
    s.duration = Some(prost_types::Duration {
        seconds: -60,
        nanos: 0,
    });
    cases.push((s, "spec.schedules[0].duration"));
    let mut s = always(Some(3), None);
    s.end = "0 17 * * *".into();
    cases.push((s, "spec.schedules[0].duration"));
    for (i, (schedule, field)) in cases.into_iter().enumerate() {
        let key = format!("sched/bad-{i}");
        let e = client
            .recommend(request(&key, at, vec![schedule]))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{field}: {e:?}");
        assert!(
            violation_fields(&e).iter().any(|f| f == field),
            "{field} not in {:?}",
            violation_fields(&e)
        );
        assert_not_stored(&mut client, &key).await;
    }

    // Too many: refused before any is parsed.
    let many: Vec<pb::Schedule> = (0..33)
        .map(|i| pb::Schedule {
            name: format!("s{i}"),
            ..always(Some(2), None)
        })
        .collect();
    let e = client
        .recommend(request("sched/many", at, many))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    assert_eq!(violation_fields(&e), ["spec.schedules"]);

    // A policy's schedules are checked when it is put, under policy.spec.
    let mut s = always(Some(3), None);
    s.start = "61 * * * *".into();
    let e = client
        .put_policy(pb::PutPolicyRequest {
            policy: Some(pb::Policy {
                name: "bad-schedule".into(),
                spec: Some(pb::HorizontalSpec {
                    schedules: vec![s],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            expected_version: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(violation_fields(&e), ["policy.spec.schedules[0].start"]);

    // The same refusal over HTTP/JSON: 400 with the field.
    let body = r#"{"targetKey":"sched/json","currentReplicas":2,"spec":{"maxReplicas":5,"schedules":[{"name":"x","start":"0 9 * * *","duration":"3600s","timeZone":"Nowhere/Atlantis","minReplicas":3}]}}"#;
    let mut tcp = std::net::TcpStream::connect(server.addr).unwrap();
    write!(
        tcp,
        "POST /autoscaled.v1.HorizontalAutoscaler/Recommend HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("spec.schedules[0].time_zone"), "{answer}");
    assert_not_stored(&mut client, "sched/json").await;
    server.stop().await;
}

/// A capacity schedule open all year: the window of [`always`] on a group's capacity.
fn always_capacity(min: Option<i64>, max: Option<i64>) -> pb::CapacitySchedule {
    let w = always(None, None);
    pb::CapacitySchedule {
        name: w.name,
        start: w.start,
        end: w.end,
        duration: w.duration,
        time_zone: w.time_zone,
        min_capacity: min,
        max_capacity: max,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_capacity_follows_its_schedules_and_bad_ones_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::with_data_dir(dir.path().join("data"));
    config.trust_request_time = true;
    let server = TestServer::start(config).await;
    let mut client = server.horizontal().await;
    let at = now_secs() - 60;
    let group = |schedules| pb::PutScalingGroupRequest {
        group: Some(pb::ScalingGroup {
            name: "pool".into(),
            capacity: 2,
            member_keys: vec!["pool/web".into()],
            capacity_schedules: schedules,
            ..Default::default()
        }),
        expected_version: None,
    };

    // Refused, naming the field; nothing stored.
    let mut bad_zone = always_capacity(Some(6), None);
    bad_zone.time_zone = "Nowhere/Atlantis".into();
    for (schedule, field) in [
        (always_capacity(None, None), "group.capacity_schedules[0]"),
        (
            always_capacity(None, Some(0)),
            "group.capacity_schedules[0].max_capacity",
        ),
        (
            always_capacity(Some(8), Some(4)),
            "group.capacity_schedules[0].max_capacity",
        ),
        (bad_zone, "group.capacity_schedules[0].time_zone"),
    ] {
        let e = client
            .put_scaling_group(group(vec![schedule]))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{field}: {e:?}");
        assert_eq!(violation_fields(&e), [field]);
    }
    let e = client
        .get_scaling_group(pb::GetScalingGroupRequest {
            name: "pool".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);

    // Capacity 2, raised to 6 while the schedule is open: a member asking for 20 gets 6.
    client
        .put_scaling_group(group(vec![always_capacity(Some(6), None)]))
        .await
        .unwrap();
    let status = client
        .get_scaling_group(pb::GetScalingGroupRequest {
            name: "pool".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.capacity_in_force, 6);
    assert_eq!(status.capacity_schedules_open, ["always"]);
    assert_eq!(
        status.group.as_ref().unwrap().capacity,
        2,
        "the base is kept"
    );
    assert_eq!(
        status.group.unwrap().capacity_schedules[0].min_capacity,
        Some(6)
    );
    let busy = fixtures::recommend("pool/web")
        .pods(4)
        .cpu_request_milli(500)
        .cpu_usage_milli(2500)
        .replicas(Some(1), 20)
        .at(at)
        .build();
    let r = client.recommend(busy.clone()).await.unwrap().into_inner();
    assert_eq!(r.desired_replicas, 6, "{:?}", r.budget);

    // A ceiling below the base: 1 unit while open.
    client
        .put_scaling_group(group(vec![always_capacity(None, Some(1))]))
        .await
        .unwrap();
    let r = client
        .recommend(pb::RecommendRequest {
            evaluation_time: Some(prost_types::Timestamp {
                seconds: at + 15,
                nanos: 0,
            }),
            ..busy
        })
        .await
        .unwrap()
        .into_inner();
    let budget = r.budget.as_ref().unwrap();
    assert_eq!(budget.capacity, 1, "{budget:?}");
    assert!(r.desired_replicas < 6, "{}", r.desired_replicas);
    let status = client
        .get_scaling_group(pb::GetScalingGroupRequest {
            name: "pool".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.capacity_in_force, 1);
    server.stop().await;
}
