//! `ListTargets` with summaries over a real channel: each summary says what `GetHistory` says
//! of the target's newest run; `prefix` narrows the listing and pages follow it; a tenant
//! sees only its own targets; a fleet of 1,000 targets is listed completely.

use autoscaled::{
    config::{Config, Durability},
    pb::v1::{self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient},
};
use autoscaled_fixtures as fixtures;
use tonic::{Code, Request, transport::Channel};

mod common;

use common::TestServer;

fn config(dir: &tempfile::TempDir) -> Config {
    Config::with_data_dir(dir.path().join("data"))
}

/// Every page of `ListTargets` under `prefix` (with summaries), `page_size` at a time, each
/// call made by `call`: the keys and the summaries, in order, and the number of pages.
async fn list_all(
    client: &mut HorizontalAutoscalerClient<Channel>,
    prefix: &str,
    page_size: i32,
    token: Option<&str>,
) -> (Vec<String>, Vec<pb::TargetSummary>, usize) {
    let mut keys = Vec::new();
    let mut summaries = Vec::new();
    let mut page_token = String::new();
    for pages in 1..=10_000 {
        let mut request = Request::new(pb::ListTargetsRequest {
            page_size,
            page_token,
            prefix: prefix.to_owned(),
            include_summaries: true,
        });
        if let Some(token) = token {
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
        }
        let page = client.list_targets(request).await.unwrap().into_inner();
        assert!(page.target_keys.len() <= usize::try_from(page_size).unwrap());
        assert_eq!(page.summaries.len(), page.target_keys.len());
        for (key, summary) in page.target_keys.iter().zip(&page.summaries) {
            assert_eq!(&summary.target_key, key);
        }
        keys.extend(page.target_keys);
        summaries.extend(page.summaries);
        if page.next_page_token.is_empty() {
            return (keys, summaries, pages);
        }
        page_token = page.next_page_token;
    }
    panic!("pagination does not end");
}

/// `GetHistory`'s newest run of `key`, as a summary would report it.
async fn newest_as_summary(
    client: &mut HorizontalAutoscalerClient<Channel>,
    key: &str,
) -> pb::DecisionRecord {
    let history = client
        .get_history(pb::GetHistoryRequest {
            target_key: key.into(),
            page_size: 1,
            newest_first: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut newest = history.decisions.into_iter().next().expect("a decision");
    for m in &mut newest.metrics {
        if let Some(g) = m.pod_groups.as_mut() {
            g.unready.clear();
            g.missing.clear();
            g.ignored.clear();
        }
    }
    newest
}

#[tokio::test]
async fn each_summary_is_what_get_history_says_of_the_newest_run() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(&dir)).await;
    let mut client = server.horizontal().await;
    // web: the same decision three times (a run of 3); api: scaled up, limited by its max;
    // batch: no metrics in its spec (Kubernetes' default cpu at 80%), min left out;
    // queue: an External metric against a Value target.
    for _ in 0..3 {
        let r = fixtures::recommend("ns/web").pods(2).build();
        client.recommend(r).await.unwrap();
    }
    let api = fixtures::recommend("ns/api")
        .pods(3)
        .unready_last(1)
        .replicas(Some(2), 4)
        .cpu_usage_milli(1000)
        .build();
    client.recommend(api).await.unwrap();
    let batch = fixtures::recommend("ns/batch")
        .pods(2)
        .replicas(None, 10)
        .metrics(vec![])
        .build();
    client.recommend(batch).await.unwrap();
    let mut queue = fixtures::recommend("ns/queue")
        .pods(2)
        .metrics(vec![fixtures::external_value("queue", 10_000)]);
    queue = queue.current_replicas(2);
    let mut queue = queue.build();
    queue.external_metrics.insert(
        "queue".into(),
        pb::ExternalMetricValues {
            values_milli: vec![30_000],
        },
    );
    client.recommend(queue).await.unwrap();

    let (keys, summaries, _) = list_all(&mut client, "", 100, None).await;
    assert_eq!(keys, ["ns/api", "ns/batch", "ns/queue", "ns/web"]);
    for s in &summaries {
        let newest = newest_as_summary(&mut client, &s.target_key).await;
        assert_eq!(
            s.evaluation_time, newest.evaluation_time,
            "{}",
            s.target_key
        );
        assert_eq!(s.first_evaluation_time, newest.first_evaluation_time);
        assert_eq!(s.current_replicas, newest.current_replicas);
        assert_eq!(s.desired_replicas, newest.desired_replicas);
        assert_eq!(s.conditions, newest.conditions);
        assert_eq!(s.explanation, newest.explanation);
        assert_eq!(s.run_count, newest.run_count);
        let statuses: Vec<pb::MetricStatus> = s
            .metrics
            .iter()
            .map(|m| m.status.clone().unwrap())
            .collect();
        assert_eq!(statuses, newest.metrics, "{}", s.target_key);
    }
    let by_key = |k: &str| summaries.iter().find(|s| s.target_key == k).unwrap();
    let web = by_key("ns/web");
    assert_eq!(web.run_count, 3);
    let millis = |t: Option<prost_types::Timestamp>| {
        let t = t.unwrap();
        t.seconds * 1000 + i64::from(t.nanos / 1_000_000)
    };
    assert!(millis(web.first_evaluation_time) < millis(web.evaluation_time));
    assert_eq!((web.min_replicas, web.max_replicas), (Some(1), Some(10)));
    let target = web.metrics[0].target.unwrap();
    assert_eq!(target.average_utilization, Some(50));
    let api = by_key("ns/api");
    assert_eq!((api.min_replicas, api.max_replicas), (Some(2), Some(4)));
    assert_eq!(api.desired_replicas, 4);
    assert!(
        api.conditions
            .iter()
            .any(|c| c.r#type == "ScalingLimited" && c.status == "True"),
        "{:?}",
        api.conditions
    );
    let groups = api.metrics[0].status.as_ref().unwrap().pod_groups.as_ref();
    // Every pod counted, none named.
    let g = groups.unwrap();
    assert_eq!(
        i64::from(g.ready_count) + i64::from(g.unready_total + g.missing_total + g.ignored_total),
        3,
        "{g:?}"
    );
    assert!(g.unready.is_empty() && g.missing.is_empty() && g.ignored.is_empty());
    let batch = by_key("ns/batch");
    assert_eq!(batch.min_replicas, Some(1), "min defaults to 1");
    let default = batch.metrics[0].target.unwrap();
    assert_eq!(
        (default.r#type, default.average_utilization),
        (pb::MetricTargetType::Utilization as i32, Some(80))
    );
    let queue = by_key("ns/queue");
    let status = queue.metrics[0].status.as_ref().unwrap();
    assert_eq!(status.current_value_milli, Some(30_000));
    assert_eq!(queue.metrics[0].target.unwrap().value_milli, Some(10_000));

    // Without `include_summaries` the answer is the keys alone, as before.
    let plain = client
        .list_targets(pb::ListTargetsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(plain.target_keys, keys);
    assert!(plain.summaries.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn a_prefix_narrows_the_listing_and_pages_follow_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(&dir)).await;
    let mut client = server.horizontal().await;
    let keys = [
        "a",
        "team-a",
        "team-a-x/1",
        "team-a/1",
        "team-a/2",
        "team-a/3",
        "team-a/4",
        "team-a/5",
        "team-a0",
        "team-b/1",
    ];
    for key in keys {
        client
            .recommend(fixtures::recommend(key).build())
            .await
            .unwrap();
    }
    for page_size in [1, 2, 3, 5, 100] {
        let (listed, summaries, pages) = list_all(&mut client, "team-a/", page_size, None).await;
        assert_eq!(
            listed,
            ["team-a/1", "team-a/2", "team-a/3", "team-a/4", "team-a/5"],
            "page size {page_size}"
        );
        assert!(summaries.iter().all(|s| s.evaluation_time.is_some()));
        assert!(pages >= 5usize.div_ceil(usize::try_from(page_size).unwrap()));
    }
    let (listed, _, _) = list_all(&mut client, "team-a", 2, None).await;
    assert_eq!(listed.len(), 8);
    let (listed, _, _) = list_all(&mut client, "nothing/", 2, None).await;
    assert!(listed.is_empty());
    // The keys alone under a prefix, too.
    let plain = client
        .list_targets(pb::ListTargetsRequest {
            prefix: "team-b/".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(plain.target_keys, ["team-b/1"]);
    assert!(plain.summaries.is_empty() && plain.next_page_token.is_empty());

    for (prefix, page_size) in [("bad\u{7}", 10), (&"x".repeat(600), 10), ("a", -1)] {
        let status = client
            .list_targets(pb::ListTargetsRequest {
                prefix: prefix.to_owned(),
                page_size,
                include_summaries: true,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{prefix:?}");
        let field = if page_size < 0 { "page_size" } else { "prefix" };
        assert!(status.message().contains(field), "{}", status.message());
    }
    server.stop().await;
}

#[tokio::test]
async fn a_tenant_sees_the_summaries_of_its_own_targets_only() {
    let dir = tempfile::tempdir().unwrap();
    let hash = autoscaled::auth::policy::sha256_hex;
    let authz = dir.path().join("authz.toml");
    std::fs::write(
        &authz,
        format!(
            "[[rule]]\nidentity = \"a\"\nverbs = [\"recommend\", \"read\"]\nprefixes = [\"team-a/\"]\n\
             [[rule]]\nidentity = \"b\"\nverbs = [\"recommend\", \"read\"]\nprefixes = [\"team-b/\"]\n\
             [[token]]\nidentity = \"a\"\nsha256 = \"{}\"\n\
             [[token]]\nidentity = \"b\"\nsha256 = \"{}\"\n",
            hash(b"token-a"),
            hash(b"token-b")
        ),
    )
    .unwrap();
    let mut c = config(&dir);
    c.security.authz = Some(authz);
    let server = TestServer::start(c).await;
    let mut client = server.horizontal().await;
    for (key, token) in [
        ("team-a/1", "token-a"),
        ("team-a/2", "token-a"),
        ("team-a/web/1", "token-a"),
        ("team-a-big/1", "token-b"),
        ("team-b/1", "token-b"),
        ("team-b/2", "token-b"),
    ] {
        let mut request = Request::new(fixtures::recommend(key).build());
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        if key == "team-a-big/1" {
            // Not team-b's either: nobody may write it, so nobody lists it.
            assert_eq!(
                client.recommend(request).await.unwrap_err().code(),
                Code::PermissionDenied
            );
        } else {
            client.recommend(request).await.unwrap();
        }
    }
    for page_size in [1, 2, 100] {
        let (keys, summaries, _) = list_all(&mut client, "", page_size, Some("token-a")).await;
        assert_eq!(keys, ["team-a/1", "team-a/2", "team-a/web/1"]);
        assert!(summaries.iter().all(|s| s.evaluation_time.is_some()));
    }
    // A prefix inside the tenant's, one wider than it, one outside it.
    let (keys, _, _) = list_all(&mut client, "team-a/web", 10, Some("token-a")).await;
    assert_eq!(keys, ["team-a/web/1"]);
    let (keys, _, _) = list_all(&mut client, "team-", 10, Some("token-a")).await;
    assert_eq!(keys, ["team-a/1", "team-a/2", "team-a/web/1"]);
    let (keys, summaries, _) = list_all(&mut client, "team-b/", 10, Some("token-a")).await;
    assert!(keys.is_empty() && summaries.is_empty());
    let (keys, _, _) = list_all(&mut client, "", 1, Some("token-b")).await;
    assert_eq!(keys, ["team-b/1", "team-b/2"]);
    // No credentials: refused, as ListTargets always was.
    let status = client
        .list_targets(pb::ListTargetsRequest {
            include_summaries: true,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_a_thousand_targets_is_listed_completely() {
    const TARGETS: usize = 1000;
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(&dir);
    // The writes only set the fleet up; what is tested is the listing.
    c.durability = Durability::Relaxed;
    let server = TestServer::start(c).await;
    let channel = server.channel().await;
    let mut writers = Vec::new();
    for w in 0..8 {
        let mut client = HorizontalAutoscalerClient::new(channel.clone());
        writers.push(tokio::spawn(async move {
            for i in (w..TARGETS).step_by(8) {
                let r = fixtures::recommend(format!("fleet/{i:04}"))
                    .pods(1 + i % 5)
                    .build();
                client.recommend(r).await.unwrap();
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    let mut client = HorizontalAutoscalerClient::new(channel);
    let started = std::time::Instant::now();
    let (keys, summaries, pages) = list_all(&mut client, "", 1000, None).await;
    let elapsed = started.elapsed();
    eprintln!("{TARGETS} targets with summaries: {pages} page(s) in {elapsed:?}");
    let wanted: Vec<String> = (0..TARGETS).map(|i| format!("fleet/{i:04}")).collect();
    assert_eq!(keys, wanted);
    for (i, s) in summaries.iter().enumerate() {
        assert!(s.evaluation_time.is_some(), "{}", s.target_key);
        assert_eq!(s.current_replicas, i32::try_from(1 + i % 5).unwrap());
        assert_eq!(s.run_count, 1);
        assert_eq!(s.metrics.len(), 1);
    }
    server.stop().await;
}
