//! RecommendBatch over a real channel: each request decided as its own Recommend would be,
//! a failed request alone in its failure, and the batch held to the request limits as one
//! request (the doors' probes of the same limits are in `tests/doors.rs`).

mod common;
#[path = "../benches/support/steady_state.rs"]
mod steady_state;

use autoscaled::{config::Config, pb::v1 as pb};
use common::{TestServer, assert_not_stored, violation_fields};
use pb::recommend_batch_result::Result as Outcome;
use tonic::Code;

/// The steady-state request for `key` at `at` seconds, its usage scaled by `load` percent.
fn request(key: &str, at: i64, load: i64) -> pb::RecommendRequest {
    let mut request = steady_state::recommend_request(key.to_owned());
    for pod in &mut request.pods {
        for sample in pod.metrics.values_mut() {
            sample.value_milli = sample.value_milli.map(|v| v * load / 100);
        }
    }
    request.evaluation_time = Some(prost_types::Timestamp {
        seconds: at,
        nanos: 0,
    });
    request
}

async fn server(limits: impl FnOnce(&mut Config)) -> (TestServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::with_data_dir(dir.path());
    config.trust_request_time = true;
    limits(&mut config);
    (TestServer::start(config).await, dir)
}

#[tokio::test]
async fn a_batch_decides_each_request_as_its_own_recommend_would() {
    let (server, _dir) = server(|_| ()).await;
    let mut client = server.horizontal().await;
    let start = common::now_secs() - 600;
    let loads = [40, 100, 180, 260];
    // Three rounds: the later ones decide on the history the earlier ones stored
    // (stabilization, rate limits), in the batch as in the single calls.
    for (round, factor) in [(0i64, 100i64), (1, 150), (2, 60)] {
        let at = start + 60 * round;
        let batch: Vec<_> = loads
            .iter()
            .enumerate()
            .map(|(i, load)| request(&format!("batch/{i}"), at, load * factor / 100))
            .collect();
        let answer = client
            .recommend_batch(pb::RecommendBatchRequest {
                requests: batch.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(answer.results.len(), loads.len());
        for (i, (result, mut alone)) in answer.results.into_iter().zip(batch).enumerate() {
            alone.target_key = format!("alone/{i}");
            let expected = client.recommend(alone).await.unwrap().into_inner();
            match result.result {
                Some(Outcome::Response(response)) => {
                    assert!(response.recorded);
                    assert_eq!(response, expected, "round {round}, request {i}");
                }
                other => panic!("round {round}, request {i}: {other:?}"),
            }
        }
    }
    for i in 0..loads.len() {
        let batch = common::history(&mut client, &format!("batch/{i}")).await;
        let alone = common::history(&mut client, &format!("alone/{i}")).await;
        assert_eq!(batch.decisions.len(), alone.decisions.len());
        assert_eq!(batch.recommendations, alone.recommendations, "request {i}");
        assert_eq!(batch.scale_up_events, alone.scale_up_events, "request {i}");
        assert_eq!(
            batch.scale_down_events, alone.scale_down_events,
            "request {i}"
        );
    }
}

#[tokio::test]
async fn a_failed_request_fails_alone_and_stores_nothing() {
    let (server, _dir) = server(|_| ()).await;
    let mut client = server.horizontal().await;
    let at = common::now_secs();
    let mut invalid = request("mixed/invalid", at, 100);
    invalid.spec.as_mut().unwrap().max_replicas = 0;
    let mut dry = request("mixed/dry", at, 100);
    dry.dry_run = true;
    let answer = client
        .recommend_batch(pb::RecommendBatchRequest {
            requests: vec![request("mixed/ok", at, 100), invalid, dry],
        })
        .await
        .unwrap()
        .into_inner();
    let [ok, invalid, dry] = answer.results.try_into().unwrap();
    assert!(
        matches!(ok.result, Some(Outcome::Response(ref r)) if r.recorded),
        "{ok:?}"
    );
    let Some(Outcome::Error(error)) = invalid.result else {
        panic!("{invalid:?}")
    };
    assert_eq!(error.code, Code::InvalidArgument as i32, "{error:?}");
    assert!(
        error
            .field_violations
            .iter()
            .any(|v| v.field == "spec.max_replicas"),
        "{error:?}"
    );
    assert!(
        matches!(dry.result, Some(Outcome::Response(ref r)) if !r.recorded),
        "{dry:?}"
    );
    assert_eq!(
        common::history(&mut client, "mixed/ok")
            .await
            .decisions
            .len(),
        1
    );
    assert_not_stored(&mut client, "mixed/invalid").await;
    assert_not_stored(&mut client, "mixed/dry").await;
}

#[tokio::test]
async fn a_batch_is_held_to_the_request_limits_as_one_request() {
    let (server, _dir) = server(|c| {
        c.limits.max_batch_requests = 3;
        c.limits.max_pods = 25;
        c.limits.max_metrics = 1;
    })
    .await;
    let mut client = server.horizontal().await;
    let at = common::now_secs();
    let batch = |n: usize| pb::RecommendBatchRequest {
        requests: (0..n)
            .map(|i| request(&format!("limits/{n}-{i}"), at, 100))
            .collect(),
    };
    // Four requests (without pods): over max_batch_requests.
    let mut four = batch(4);
    four.requests.iter_mut().for_each(|r| r.pods.clear());
    let refused = client.recommend_batch(four).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(violation_fields(&refused), ["requests"]);
    assert!(
        refused.message().contains("max_batch_requests"),
        "{refused:?}"
    );
    // Three of 10 pods: within the count, but 30 pods together are over max_pods.
    let refused = client.recommend_batch(batch(3)).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(violation_fields(&refused), ["requests[].pods"]);
    for key in ["limits/4-0", "limits/3-0", "limits/3-2"] {
        assert_not_stored(&mut client, key).await;
    }
    // Two of 10 pods, one metric each: the pods within max_pods together, the metrics within
    // max_metrics in each request (a spec's limits hold per request).
    let answer = client.recommend_batch(batch(2)).await.unwrap().into_inner();
    for result in answer.results {
        assert!(
            matches!(result.result, Some(Outcome::Response(ref r)) if r.recorded),
            "{result:?}"
        );
    }
    // The server keeps serving.
    client
        .recommend(request("limits/after", at, 100))
        .await
        .unwrap();
}
