//! Crash safety of the vertical state with the real binary: samples acknowledged before a
//! SIGKILL give the same recommendation after a restart on the same folder (the response of
//! RecordUsage is sent only after the group-commit flush).

use std::net::SocketAddr;

use autoscaled::pb::v1::{self as pb, vertical_autoscaler_client::VerticalAutoscalerClient};
use autoscaled_fixtures as fixtures;
use tonic::transport::Channel;

/// 2026-01-01T00:00:00Z: the evaluation time (the test binary trusts request times).
const T0: i64 = 1_767_225_600;

mod common;

use common::start;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn client(rt: &tokio::runtime::Runtime, addr: SocketAddr) -> VerticalAutoscalerClient<Channel> {
    rt.block_on(VerticalAutoscalerClient::connect(format!("http://{addr}")))
        .expect("connects")
}

/// Six hours of per-minute CPU and memory samples of `app`, ending at `T0`, plus an OOM.
fn request() -> pb::RecordUsageRequest {
    fixtures::usage("prod/web")
        .minutes(360)
        .oom(400 * 1024 * 1024)
        .settings(pb::VerticalSettings {
            target_cpu_percentile: Some(0.3),
            ..Default::default()
        })
        .at(T0)
        .build()
}

fn recommendation(
    rt: &tokio::runtime::Runtime,
    client: &mut VerticalAutoscalerClient<Channel>,
) -> pb::VerticalRecommendation {
    rt.block_on(client.get_recommendation(pb::GetRecommendationRequest {
        target_key: "prod/web".into(),
        ..Default::default()
    }))
    .expect("a recommendation")
    .into_inner()
}

#[test]
fn acknowledged_samples_survive_sigkill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let rt = runtime();

    let mut server = start(&data);
    let mut c = client(&rt, server.addr);
    let ack = rt
        .block_on(c.record_usage(request()))
        .expect("recorded")
        .into_inner();
    assert_eq!(ack.accepted_samples, 720);
    assert_eq!(ack.accepted_oom_events, 1);
    let before = recommendation(&rt, &mut c);
    assert_eq!(before.containers.len(), 1);
    drop(c);
    server.child.kill().expect("SIGKILL");
    server.child.wait().expect("reaped");
    drop(server);

    let server = start(&data);
    let mut c = client(&rt, server.addr);
    let after = recommendation(&rt, &mut c);
    assert_eq!(after, before);

    // The stored override (0.3 CPU percentile) is part of what came back: with the default
    // percentile the numbers differ, so `after == before` could not hold had it been lost.
    let with_default = rt
        .block_on(c.get_recommendation(pb::GetRecommendationRequest {
            target_key: "prod/web".into(),
            settings: Some(pb::VerticalSettings {
                target_cpu_percentile: Some(0.9),
                ..Default::default()
            }),
            ..Default::default()
        }))
        .expect("a recommendation")
        .into_inner();
    assert_ne!(
        with_default.containers[0].target,
        after.containers[0].target
    );
}
