//! `GetHistory` over a real channel (issue 8 item 6, issue 9 item 3): decisions that say
//! the same thing come back as one run with its count and first time; pages in both orders
//! with tokens; pod names capped per group with the totals.

use autoscaled::pb::v1::{self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient};
use autoscaled_fixtures as fixtures;
use tonic::{Code, transport::Channel};

mod common;

use common::{command, spawn};

const T0: i64 = 1_767_225_600;

/// `pods` pods, the last `unready` of them unready, at `usage` milli-cpu of 1000m against
/// 50%, evaluated at `T0 + at`.
fn request(pods: i32, unready: i32, usage: i64, at: i64) -> pb::RecommendRequest {
    fixtures::recommend("pages/web")
        .pods(pods as usize)
        .unready_last(unready as usize)
        .replicas(Some(1), 100)
        .metrics(Vec::new())
        .behavior(pb::Behavior::default())
        .cpu_usage_milli(usage)
        .pod_names(|i| format!("web-{i:02}"))
        .ages(10, 20)
        .sample_age(Some(5))
        .at(T0 + at)
        .build()
}

#[test]
fn history_is_runs_in_pages_with_pod_names_capped() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = command(&dir.path().join("data"));
    cmd.args(["--max-pod-names", "3"]);
    let server = spawn(cmd);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut c: HorizontalAutoscalerClient<Channel> = rt
        .block_on(HorizontalAutoscalerClient::connect(format!(
            "http://{}",
            server.addr
        )))
        .unwrap();
    let mut send =
        |r: pb::RecommendRequest| rt.block_on(c.recommend(r)).expect("Recommend").into_inner();
    // Three runs: the same decision 4 times, then a different one twice, then another.
    for i in 0..4 {
        send(request(10, 6, 500, i * 15));
    }
    for i in 4..6 {
        send(request(11, 6, 500, i * 15));
    }
    send(request(12, 6, 100, 90));

    let mut get = |page_size: i32, page_token: String, newest_first: bool| {
        rt.block_on(c.get_history(pb::GetHistoryRequest {
            target_key: "pages/web".into(),
            page_size,
            page_token,
            newest_first,
        }))
    };
    let all = get(0, String::new(), false)
        .expect("GetHistory")
        .into_inner();
    assert!(all.next_page_token.is_empty());
    let runs: Vec<(u64, i64, i64)> = all
        .decisions
        .iter()
        .map(|d| {
            (
                d.run_count,
                d.first_evaluation_time.as_ref().unwrap().seconds - T0,
                d.evaluation_time.as_ref().unwrap().seconds - T0,
            )
        })
        .collect();
    assert_eq!(runs, vec![(4, 0, 45), (2, 60, 75), (1, 90, 90)]);
    let groups = all.decisions[0].metrics[0].pod_groups.as_ref().unwrap();
    assert_eq!(groups.unready.len(), 3, "{groups:?}");
    // All ten pods are unready for cpu (started within the cpu initialization period).
    assert_eq!(groups.unready_total, 10);

    // Newest first, one run per page.
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = get(1, token, true).expect("page").into_inner();
        assert_eq!(page.decisions.len(), 1);
        seen.push(page.decisions[0].evaluation_time.as_ref().unwrap().seconds - T0);
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(seen, vec![90, 75, 45]);
    // Oldest first, two per page.
    let first = get(2, String::new(), false).unwrap().into_inner();
    assert_eq!(first.decisions.len(), 2);
    let second = get(2, first.next_page_token.clone(), false)
        .unwrap()
        .into_inner();
    assert_eq!(second.decisions.len(), 1);
    assert!(second.next_page_token.is_empty());
    assert_eq!(second.decisions[0].run_count, 1);

    let bad = get(1, "not-a-token".into(), false).unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(bad.message().contains("page_token"), "{}", bad.message());
    let negative = get(-1, String::new(), false).unwrap_err();
    assert_eq!(negative.code(), Code::InvalidArgument);
}
