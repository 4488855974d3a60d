//! The agent's Recommends as RecommendBatch calls, against the real server: many targets
//! deciding at once go as a few batches, and each gets its own answer (a bad request its own
//! error, naming its field).

mod support;

use std::{process::Command, time::Duration};

use autoscaled_agent::{config::ServerConfig, run};
use autoscaled_fixtures as fixtures;
use support::{Proc, free_port, http_get, runtime, server_binary};

/// `autoscaled_grpc_requests_total` of `method` with code 0 in the `/metrics` text.
fn answered(metrics: &str, method: &str) -> f64 {
    let label = format!("method=\"/autoscaled.v1.HorizontalAutoscaler/{method}\"");
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("autoscaled_grpc_requests_total{")
                && l.contains(&label)
                && l.contains("code=\"0\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn targets_deciding_at_once_go_as_batches_and_each_gets_its_own_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (port, metrics) = (free_port(), free_port());
    let mut command = Command::new(server_binary());
    command
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--metrics-listen", &format!("127.0.0.1:{metrics}")])
        .env("AUTOSCALED_LOG", "warn");
    let server = Proc::spawn(command);
    assert!(
        server.wait_for_log("listening", Duration::from_secs(20)),
        "{}",
        server.log()
    );
    let targets = 250;
    runtime().block_on(async {
        let service = run::service(&ServerConfig {
            addr: format!("127.0.0.1:{port}"),
            ..ServerConfig::default()
        })
        .unwrap();
        let requests = (0..=targets).map(|i| {
            let mut request = fixtures::recommend(format!("agent/{i}"))
                .pods(3)
                .replicas(Some(2), 10)
                .cpu_request_milli(500)
                .cpu_usage_by(|_| 400)
                .build();
            if i == targets {
                request.spec.as_mut().unwrap().max_replicas = 0;
            }
            service.batches.recommend(request)
        });
        let mut answers = futures_util::future::join_all(requests).await;
        let bad = answers.pop().unwrap().unwrap_err();
        assert_eq!(bad.code(), tonic::Code::InvalidArgument, "{bad:?}");
        use tonic_types::StatusExt;
        let fields: Vec<_> = bad
            .get_details_bad_request()
            .map(|b| b.field_violations.into_iter().map(|v| v.field).collect())
            .unwrap_or_default();
        assert_eq!(fields, ["spec.max_replicas"], "{bad:?}");
        for (i, answer) in answers.into_iter().enumerate() {
            let response = answer.unwrap_or_else(|e| panic!("agent/{i}: {e:?}"));
            assert!(
                response.recorded && response.desired_replicas > 2,
                "agent/{i}"
            );
        }
    });
    let text = http_get(metrics, "/metrics");
    let (batches, single) = (
        answered(&text, "RecommendBatch"),
        answered(&text, "Recommend"),
    );
    // 251 decisions: at most 100 in a batch, and the first requests go before the rest have
    // queued, so a few calls more than the minimum of 3, never one per target.
    assert!(
        batches >= 3.0 && batches + single <= 40.0,
        "{batches} RecommendBatch and {single} Recommend calls for {} targets",
        targets + 1
    );
}
