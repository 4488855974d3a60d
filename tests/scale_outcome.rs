//! `ReportScale` end to end over a real channel: a caller that could not apply a rescale
//! reports it, and the target's history is what Kubernetes keeps after a failed scale update
//! (`reconcileAutoscaler`): no scale event, AbleToScale False / FailedUpdateScale with the
//! caller's message, the recommendations kept. A reported failure gives the next period its
//! whole rate budget back; an unreported one (or APPLIED) spends it.

use autoscaled::{
    config::Config,
    pb::v1::{self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient},
};
use autoscaled_fixtures as fixtures;
use tonic::{Code, transport::Channel};
use tonic_types::StatusExt;

mod common;

use common::{TestServer, history, now_secs};

fn config(dir: &tempfile::TempDir) -> Config {
    let mut c = Config::with_data_dir(dir.path().join("data"));
    c.trust_request_time = true;
    c
}

/// Two pods at 400 % of their cpu request against a 50 % target, at `at`: the metrics ask
/// for 16; the default scale-up policies (100 % or 4 pods per 15 s) allow 2 → 6.
fn overloaded(key: &str, at: i64) -> pb::RecommendRequest {
    fixtures::recommend(key)
        .pods(2)
        .cpu_usage_milli(4000)
        .replicas(Some(1), 20)
        .behavior(pb::Behavior::default())
        .ages(3600, 3600)
        .at(at)
        .build()
}

async fn recommend(
    client: &mut HorizontalAutoscalerClient<Channel>,
    request: pb::RecommendRequest,
) -> pb::RecommendResponse {
    client.recommend(request).await.unwrap().into_inner()
}

fn report(
    key: &str,
    decided: &pb::RecommendResponse,
    outcome: pb::ScaleOutcome,
    message: &str,
) -> pb::ReportScaleRequest {
    pb::ReportScaleRequest {
        target_key: key.into(),
        evaluation_time: decided.evaluation_time,
        desired_replicas: decided.desired_replicas,
        outcome: outcome as i32,
        message: message.into(),
    }
}

fn able_to_scale(conditions: &[pb::Condition]) -> (&str, &str, &str) {
    let c = conditions
        .iter()
        .find(|c| c.r#type == "AbleToScale")
        .expect("an AbleToScale condition");
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}

#[tokio::test]
async fn a_failed_scale_stores_no_event_and_says_failed_update_scale() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(&dir)).await;
    let mut client = server.horizontal().await;
    let t0 = now_secs() - 600;
    let key = "nomad/prod/web";

    let first = recommend(&mut client, overloaded(key, t0)).await;
    assert_eq!(first.desired_replicas, 6);
    assert_eq!(able_to_scale(&first.conditions).1, "SucceededRescale");
    assert_eq!(history(&mut client, key).await.scale_up_events.len(), 1);

    let failed = client
        .report_scale(report(
            key,
            &first,
            pb::ScaleOutcome::Failed,
            "nomad: quota exceeded",
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(failed.scale_event_withdrawn);
    assert_eq!(
        able_to_scale(&failed.conditions),
        (
            "False",
            "FailedUpdateScale",
            "the HPA controller was unable to update the target scale: nomad: quota exceeded"
        )
    );
    let h = history(&mut client, key).await;
    assert!(h.scale_up_events.is_empty(), "{:?}", h.scale_up_events);
    // The recommendations stay: upstream stores them before the update.
    assert_eq!(h.recommendations.len(), 2, "{:?}", h.recommendations);
    // The decision was replaced, not followed: one decision in the log, and it says failed.
    assert_eq!(h.decisions.len(), 1);
    assert_eq!(h.decisions[0].run_count, 1);
    assert_eq!(
        able_to_scale(&h.decisions[0].conditions).1,
        "FailedUpdateScale"
    );

    // Reported twice: nothing more happens.
    let again = client
        .report_scale(report(key, &first, pb::ScaleOutcome::Failed, "again"))
        .await
        .unwrap()
        .into_inner();
    assert!(!again.scale_event_withdrawn);
    assert_eq!(able_to_scale(&again.conditions).1, "FailedUpdateScale");
    assert_eq!(history(&mut client, key).await.decisions.len(), 1);

    // The next period, still at 2: the failed +4 spent no budget, so 2 → 6 again, which the
    // caller applies.
    let retry = recommend(&mut client, overloaded(key, t0 + 10)).await;
    assert_eq!(retry.desired_replicas, 6);
    let applied = client
        .report_scale(report(key, &retry, pb::ScaleOutcome::Applied, ""))
        .await
        .unwrap()
        .into_inner();
    assert!(!applied.scale_event_withdrawn);
    assert_eq!(able_to_scale(&applied.conditions).1, "SucceededRescale");
    let h = history(&mut client, key).await;
    assert_eq!(h.scale_up_events.len(), 1);
    assert_eq!(h.decisions.len(), 2);

    // The failed decision is no longer the newest: too late to report it.
    let late = client
        .report_scale(report(key, &first, pb::ScaleOutcome::Failed, "late"))
        .await
        .unwrap_err();
    assert_eq!(late.code(), Code::FailedPrecondition, "{late:?}");
    assert!(
        late.message().contains("not the newest"),
        "{}",
        late.message()
    );

    server.stop().await;
}

/// Without a report the rescale counts as applied (today's behaviour for every existing
/// client): at 2 replicas ten seconds later the spent budget holds the target at 2.
#[tokio::test]
async fn an_unreported_scale_counts_as_applied() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(&dir)).await;
    let mut client = server.horizontal().await;
    let t0 = now_secs() - 600;
    let key = "legacy";
    assert_eq!(
        recommend(&mut client, overloaded(key, t0))
            .await
            .desired_replicas,
        6
    );
    let next = recommend(&mut client, overloaded(key, t0 + 10)).await;
    assert_eq!(next.desired_replicas, 2);
    let limited = next
        .conditions
        .iter()
        .find(|c| c.r#type == "ScalingLimited")
        .unwrap();
    assert_eq!(limited.reason, "ScaleUpLimit");
    server.stop().await;
}

#[tokio::test]
async fn bad_reports_are_invalid_argument_naming_the_field_and_store_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(&dir)).await;
    let mut client = server.horizontal().await;
    let t0 = now_secs() - 600;
    let key = "bad/reports";
    let decided = recommend(&mut client, overloaded(key, t0)).await;
    let before = history(&mut client, key).await;

    let field_of = |status: tonic::Status| {
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        let bad = status.get_details_bad_request().expect("a BadRequest");
        bad.field_violations
            .iter()
            .map(|v| v.field.clone())
            .collect::<Vec<_>>()
    };
    let mut wrong_desired = report(key, &decided, pb::ScaleOutcome::Failed, "x");
    wrong_desired.desired_replicas = 5;
    let mut unspecified = report(key, &decided, pb::ScaleOutcome::Failed, "x");
    unspecified.outcome = 0;
    let mut no_time = report(key, &decided, pb::ScaleOutcome::Failed, "x");
    no_time.evaluation_time = None;
    let long = report(key, &decided, pb::ScaleOutcome::Failed, &"x".repeat(1025));
    let control = report(key, &decided, pb::ScaleOutcome::Failed, "a\u{1b}[31m");
    let applied_with_message = report(key, &decided, pb::ScaleOutcome::Applied, "x");
    let mut no_key = report(key, &decided, pb::ScaleOutcome::Failed, "x");
    no_key.target_key.clear();
    for (request, field) in [
        (wrong_desired, "desired_replicas"),
        (unspecified, "outcome"),
        (no_time, "evaluation_time"),
        (long, "message"),
        (control, "message"),
        (applied_with_message, "message"),
        (no_key, "target_key"),
    ] {
        let fields = field_of(client.report_scale(request).await.unwrap_err());
        assert_eq!(fields, [field]);
    }
    assert_eq!(
        history(&mut client, key).await,
        before,
        "a refused report stored something"
    );

    // A target with nothing stored, and a decision that was a dry run (it recorded nothing).
    let unknown = client
        .report_scale(report("no/such", &decided, pb::ScaleOutcome::Failed, "x"))
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
    let mut dry = overloaded(key, t0 + 5);
    dry.dry_run = true;
    let dry = recommend(&mut client, dry).await;
    let refused = client
        .report_scale(report(key, &dry, pb::ScaleOutcome::Failed, "x"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);
    assert!(
        refused.message().contains("dry run"),
        "{}",
        refused.message()
    );
    server.stop().await;
}
