//! Shadow mode over a real channel: a target whose decisions are recorded as if applied while
//! the caller scales nothing. The first hour of a new user, who watches what autoscaled would
//! do to a service of 10 replicas at 20 % of a 50 % cpu target before letting it act:
//!
//! * a dry run never shows the scale-down (each call is a new target, which Kubernetes holds
//!   at its count for the stabilization window);
//! * shadow does: held at 10 for the 5 minute window, then 10 → 4, then 4 held (the next
//!   decisions start from the 4 it asked for, not the 10 the caller still runs);
//! * shadow everywhere: the response, the logged runs, the listing; ReportScale is refused;
//! * going live starts the target afresh, as a new HPA: held at the 10 it really runs for the
//!   window, no rate limit spent by scale events that never happened.

use autoscaled::{
    config::Config,
    pb::v1::{self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient},
};
use autoscaled_fixtures as fixtures;
use tonic::{Code, transport::Channel};

mod common;

use common::{TestServer, history, now_secs};

/// The real service: 10 pods using 100m of a 500m request (20 %) against 50 %, with the
/// default behavior (whose scale events count against its rate limits).
fn service(key: &str, at: i64) -> pb::RecommendRequest {
    fixtures::recommend(key)
        .pods(10)
        .cpu_request_milli(500)
        .cpu_usage_milli(100)
        .replicas(Some(1), 20)
        .behavior(pb::Behavior::default())
        .at(at)
        .build()
}

fn shadow(key: &str, at: i64) -> pb::RecommendRequest {
    pb::RecommendRequest {
        shadow: true,
        ..service(key, at)
    }
}

async fn recommend(
    client: &mut HorizontalAutoscalerClient<Channel>,
    request: pb::RecommendRequest,
) -> pb::RecommendResponse {
    client.recommend(request).await.unwrap().into_inner()
}

fn reason<'a>(r: &'a pb::RecommendResponse, kind: &str) -> &'a str {
    r.conditions
        .iter()
        .find(|c| c.r#type == kind)
        .map_or("", |c| c.reason.as_str())
}

#[tokio::test]
async fn shadow_previews_the_scale_down_that_a_dry_run_never_shows() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::with_data_dir(dir.path().join("data"));
    config.trust_request_time = true;
    let server = TestServer::start(config).await;
    let mut client = server.horizontal().await;
    let t0 = now_secs() - 3600;
    let key = "first-hour/web";

    // A dry run at every period: always a new target, always held at 10.
    for i in 0..30 {
        let r = recommend(
            &mut client,
            pb::RecommendRequest {
                dry_run: true,
                ..service("first-hour/dry", t0 + i * 15)
            },
        )
        .await;
        assert_eq!(r.desired_replicas, 10, "dry run at +{}s", i * 15);
        assert!(!r.recorded && !r.shadow);
    }

    // Shadow: the 5 minute window first (the seeded recommendation of 10), then the plain
    // HPA's ceil(10 × 20 / 50) = 4, from which the next periods go on.
    let mut timeline = Vec::new();
    for i in 0..30 {
        let at = t0 + i * 15;
        let r = recommend(&mut client, shadow(key, at)).await;
        assert!(r.recorded && r.shadow);
        timeline.push((i * 15, r.current_replicas.unwrap(), r.desired_replicas));
        if r.desired_replicas == 4 && r.current_replicas == Some(10) {
            // Recorded as if applied: the scale event counts against the rate limits.
            let h = history(&mut client, key).await;
            assert!(
                h.scale_down_events.iter().any(|e| e.replica_change == 6),
                "{:?}",
                h.scale_down_events
            );
        }
        if i * 15 < 300 {
            assert_eq!(r.desired_replicas, 10, "+{}s: {timeline:?}", i * 15);
            assert_eq!(reason(&r, "AbleToScale"), "ScaleDownStabilized");
        }
    }
    let down = timeline
        .iter()
        .find(|(_, _, desired)| *desired == 4)
        .copied()
        .unwrap_or_else(|| panic!("no scale-down previewed: {timeline:?}"));
    assert_eq!(down.1, 10, "the scale-down starts from 10: {timeline:?}");
    // After it, the decisions start from the 4 it asked for (the caller still runs 10).
    for &(at, current, desired) in timeline.iter().filter(|(at, _, _)| *at > down.0) {
        assert_eq!((current, desired), (4, 4), "+{at}s: {timeline:?}");
    }
    eprintln!("shadow timeline (seconds, current, desired): {timeline:?}");

    // Shown as shadow: the logged runs and the listing.
    let h = history(&mut client, key).await;
    assert!(h.decisions.iter().all(|d| d.shadow), "{:?}", h.decisions);
    let listing = client
        .list_targets(pb::ListTargetsRequest {
            prefix: key.into(),
            include_summaries: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let summary = &listing.summaries[0];
    assert!(summary.shadow);
    assert_eq!((summary.current_replicas, summary.desired_replicas), (4, 4));

    // Nothing was to be applied: a report is refused, and stores nothing.
    let newest = h.decisions.last().unwrap();
    let report = client
        .report_scale(pb::ReportScaleRequest {
            target_key: key.into(),
            evaluation_time: newest.evaluation_time,
            desired_replicas: newest.desired_replicas,
            outcome: pb::ScaleOutcome::Failed as i32,
            message: "refused".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(report.code(), Code::FailedPrecondition, "{report:?}");
    assert!(report.message().contains("shadow"), "{}", report.message());
    assert_eq!(history(&mut client, key).await.decisions, h.decisions);

    // Live: a new HPA at the 10 the service runs, held for its window; the shadow decisions
    // stay in the log, marked.
    let live_at = t0 + 30 * 15;
    let live = recommend(&mut client, service(key, live_at)).await;
    assert!(live.recorded && !live.shadow);
    assert_eq!(live.current_replicas, Some(10));
    assert_eq!(live.desired_replicas, 10);
    assert_eq!(reason(&live, "AbleToScale"), "ScaleDownStabilized");
    let h = history(&mut client, key).await;
    let (last, earlier) = h.decisions.split_last().unwrap();
    assert!(!last.shadow && earlier.iter().all(|d| d.shadow));
    assert!(
        h.scale_down_events.is_empty(),
        "the shadow's scale events went: {:?}",
        h.scale_down_events
    );
    let later = recommend(&mut client, service(key, live_at + 301)).await;
    assert_eq!(later.desired_replicas, 4);
}

#[tokio::test]
async fn shadow_with_dry_run_is_invalid_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(Config::with_data_dir(dir.path().join("data"))).await;
    let mut client = server.horizontal().await;
    let status = client
        .recommend(pb::RecommendRequest {
            dry_run: true,
            shadow: true,
            evaluation_time: None,
            ..service("x/y", now_secs())
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(common::violation_fields(&status), ["shadow"]);
    let listing = client
        .list_targets(pb::ListTargetsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listing.target_keys.is_empty(), "stored: {listing:?}");
}
