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

/// The real server with `args`, its gRPC and metrics ports.
fn server(dir: &std::path::Path, args: &[&str]) -> (Proc, u16, u16) {
    let (port, metrics) = (free_port(), free_port());
    let mut command = Command::new(server_binary());
    command
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--metrics-listen", &format!("127.0.0.1:{metrics}")])
        .args(args)
        .env("AUTOSCALED_LOG", "warn");
    let server = Proc::spawn(command);
    assert!(
        server.wait_for_log("listening", Duration::from_secs(20)),
        "{}",
        server.log()
    );
    (server, port, metrics)
}

/// A CPU target's request for `key`, at 80 % of its pods' requests.
fn request(key: &str) -> autoscaled_wire::pb::v1::RecommendRequest {
    fixtures::recommend(key.to_owned())
        .pods(3)
        .replicas(Some(2), 10)
        .cpu_request_milli(500)
        .cpu_usage_by(|_| 400)
        .build()
}

#[test]
fn targets_deciding_at_once_go_as_batches_and_each_gets_its_own_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port, metrics) = server(dir.path(), &[]);
    let targets = 250;
    runtime().block_on(async {
        let service = run::service(&ServerConfig {
            addr: format!("127.0.0.1:{port}"),
            ..ServerConfig::default()
        })
        .unwrap();
        let requests = (0..=targets).map(|i| {
            let mut request = request(&format!("agent/{i}"));
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

/// A server that refuses a whole batch before deciding any of it (a target the agent may not
/// decide; more requests than its `--max-batch-requests`) gets the requests again one by one,
/// so that each target gets its own answer; after a refusal for a limit the batches are
/// halved until the server takes them.
#[test]
fn a_batch_refused_whole_is_sent_again_request_by_request() {
    let dir = tempfile::tempdir().unwrap();
    let token = "agent-batch-token";
    let hash = sha256_hex(token);
    let authz = dir.path().join("authz.toml");
    std::fs::write(
        &authz,
        format!("[[rule]]\nidentity = \"agent\"\nverbs = [\"recommend\"]\nprefixes = [\"agent/\"]\n[[token]]\nidentity = \"agent\"\nsha256 = \"{hash}\"\n"),
    )
    .unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, token).unwrap();
    let (_server, port, metrics) = server(
        dir.path(),
        &[
            "--authz",
            authz.to_str().unwrap(),
            "--max-batch-requests",
            "10",
        ],
    );
    runtime().block_on(async {
        let service = run::service(&ServerConfig {
            addr: format!("127.0.0.1:{port}"),
            token_file: Some(token_file),
            ..ServerConfig::default()
        })
        .unwrap();
        // Rounds of the agent's own targets, the batches halved at each refusal for the
        // limit; then one with a target outside its prefix among them.
        for round in 0..5 {
            let mut keys: Vec<String> = (0..60).map(|i| format!("agent/{round}-{i}")).collect();
            if round == 4 {
                keys.insert(3, "other/x".to_owned());
            }
            let answers = futures_util::future::join_all(
                keys.iter().map(|k| service.batches.recommend(request(k))),
            )
            .await;
            for (key, answer) in keys.iter().zip(answers) {
                match answer {
                    Ok(r) => assert!(r.recorded && key.starts_with("agent/"), "{key}"),
                    Err(e) => {
                        assert_eq!(key, "other/x", "{e:?}");
                        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
                    }
                }
            }
        }
    });
    let text = http_get(metrics, "/metrics");
    assert!(
        answered(&text, "RecommendBatch") >= 1.0,
        "no batch within the server's limit was sent: {text}"
    );
}

/// The SHA-256 of `text` in hex (an authorization file's token hash), by `sha256sum`.
fn sha256_hex(text: &str) -> String {
    use std::io::Write;
    let mut child = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let hex = String::from_utf8(out.stdout).unwrap();
    hex.split_whitespace().next().unwrap().to_owned()
}
