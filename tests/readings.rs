//! The honest record over a real channel: ten calls whose cpu utilization moves (250, 157, 93,
//! 92, 98, 99, 95, 87, 75 and 61 %) are stored as a few runs of identical decisions, yet
//! `GetHistory` gives every decision's time and reading, a replay of the stored history
//! (`Simulate`) steps through those same readings at those times, and a steady target's
//! decisions are runs of at most 40, each with all its readings.

use autoscaled::{config::Config, pb::v1 as pb};
use autoscaled_fixtures as fixtures;

mod common;

use common::{TestServer, history};

const T0: i64 = 1_767_225_600;

/// A call at `t` from 4 pods each at `percent` % of their 1000m cpu request (50 % target).
fn call(key: &str, t: i64, percent: i64) -> pb::RecommendRequest {
    let mut r = fixtures::recommend(key)
        .pods(4)
        .cpu_usage_milli(percent * 10)
        .ages(3600, 3600)
        .sample_age(Some(0))
        .at(t)
        .build();
    r.evaluation_time = Some(prost_types::Timestamp {
        seconds: t,
        nanos: 0,
    });
    r
}

/// Every decision's (time, cpu utilization) in the stored runs, oldest first; each run's
/// readings are as many as its decisions.
fn readings(h: &pb::TargetHistory) -> Vec<(i64, Option<i32>)> {
    let mut out = Vec::new();
    for run in &h.decisions {
        assert_eq!(run.readings.len() as u64, run.run_count, "{run:?}");
        assert_eq!(
            run.readings.last().and_then(|r| r.evaluation_time),
            run.evaluation_time
        );
        for r in &run.readings {
            assert_eq!(r.metrics.len(), run.metrics.len());
            out.push((
                r.evaluation_time.unwrap().seconds,
                r.metrics[0].current_average_utilization,
            ));
        }
    }
    out
}

#[tokio::test]
async fn every_decision_keeps_its_readings() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::with_data_dir(dir.path().join("data"));
    config.trust_request_time = true;
    let server = TestServer::start(config).await;
    let mut client = server.horizontal().await;

    let load = [250, 157, 93, 92, 98, 99, 95, 87, 75, 61];
    let times: Vec<i64> = (0..10).map(|i| T0 + i * 15).collect();
    for (&t, &percent) in times.iter().zip(&load) {
        client.recommend(call("web/a", t, percent)).await.unwrap();
    }
    let h = history(&mut client, "web/a").await;
    let runs = h.decisions.len();
    assert!(
        runs < 10,
        "{runs} runs: the decisions repeat, so some share a run"
    );
    let want: Vec<(i64, Option<i32>)> = times
        .iter()
        .zip(&load)
        .map(|(&t, &p)| (t, Some(i32::try_from(p).unwrap())))
        .collect();
    assert_eq!(readings(&h), want);

    // The replay of the stored history sees each decision's own reading, at its own time.
    let replay = client
        .simulate(pb::SimulateRequest {
            target_key: "web/a".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let stepped: Vec<(i64, Option<i32>)> = replay
        .steps
        .iter()
        .map(|s| {
            (
                s.evaluation_time.unwrap().seconds,
                s.metrics[0].current.map(|c| i32::try_from(c).unwrap()),
            )
        })
        .collect();
    assert_eq!(stepped, want);
    assert!(!replay.fidelity.contains("evenly"), "{}", replay.fidelity);

    // A steady target: 45 identical decisions are a run of 40 and a run of 5.
    for i in 0..45 {
        client
            .recommend(call("web/steady", T0 + i * 15, 50))
            .await
            .unwrap();
    }
    let h = history(&mut client, "web/steady").await;
    let counts: Vec<u64> = h.decisions.iter().map(|d| d.run_count).collect();
    assert_eq!(counts, vec![40, 5]);
    assert_eq!(readings(&h).len(), 45);
    server.stop().await;
}
