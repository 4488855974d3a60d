//! Observability of the real binary: OTLP span export (`--otlp-endpoint`) into an in-process
//! OTLP/gRPC sink, and Prometheus metrics (`--metrics-listen`) read over plain HTTP/1.1. The
//! binary is used rather than an in-process server because the tracing subscriber and the
//! metrics recorder are global, and spans are exported when the process shuts down (SIGTERM).

mod common;

use autoscaled_fixtures::free_port;
use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

use autoscaled::pb::v1::{self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient};
use autoscaled_fixtures as fixtures;
use opentelemetry_proto::tonic::{
    collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
        trace_service_server::{TraceService, TraceServiceServer},
    },
    common::v1::any_value::Value,
    trace::v1::Span,
};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

/// An OTLP/gRPC trace receiver that forwards every export to a channel.
struct Sink(mpsc::UnboundedSender<ExportTraceServiceRequest>);

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let _ = self.0.send(request.into_inner());
        Ok(Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// Starts the sink on 127.0.0.1:0 and returns its address and the stream of exports.
async fn start_sink() -> (
    SocketAddr,
    mpsc::UnboundedReceiver<ExportTraceServiceRequest>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Sink(tx)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (addr, rx)
}

/// One pod at 900m of 1000m cpu against 50% utilization: a scale-up decision.
fn recommend_request(key: &str) -> pb::RecommendRequest {
    fixtures::recommend(key).cpu_usage_milli(900).build()
}

fn string_attribute<'a>(span: &'a Span, key: &str) -> Option<&'a str> {
    span.attributes.iter().find_map(|kv| match &kv.value {
        Some(v) if kv.key == key => match &v.value {
            Some(Value::StringValue(s)) => Some(s.as_str()),
            _ => None,
        },
        _ => None,
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recommend_spans_reach_an_otlp_collector_and_continue_the_callers_trace() {
    let (sink, mut exports) = start_sink().await;
    let dir = tempfile::tempdir().unwrap();
    let mut command = common::command(dir.path());
    command
        .env("AUTOSCALED_LOG", "info")
        .args(["--otlp-endpoint", &format!("http://{sink}")]);
    let mut server = tokio::task::spawn_blocking(move || common::spawn(command))
        .await
        .unwrap();

    let mut client = HorizontalAutoscalerClient::connect(format!("http://{}", server.addr))
        .await
        .unwrap();
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let mut traced = Request::new(recommend_request("obs/traced"));
    traced.metadata_mut().insert(
        "traceparent",
        format!("00-{trace_id}-00f067aa0ba902b7-01")
            .parse()
            .unwrap(),
    );
    client.recommend(traced).await.expect("Recommend succeeds");
    client
        .recommend(Request::new(recommend_request("obs/plain")))
        .await
        .expect("Recommend succeeds");
    drop(client);

    tokio::task::spawn_blocking(move || server.terminate())
        .await
        .unwrap();

    // The provider's shutdown exported everything before the process exited.
    let mut spans = Vec::new();
    while let Ok(Some(export)) = tokio::time::timeout(Duration::from_secs(1), exports.recv()).await
    {
        for resource_spans in export.resource_spans {
            let service = resource_spans
                .resource
                .iter()
                .flat_map(|r| r.attributes.iter())
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref()?.value.clone());
            assert_eq!(
                service,
                Some(Value::StringValue("autoscaled".to_owned())),
                "service.name"
            );
            for scope in resource_spans.scope_spans {
                spans.extend(scope.spans);
            }
        }
    }
    let recommend = |key: &str| {
        spans
            .iter()
            .find(|s| s.name == "Recommend" && string_attribute(s, "target.key") == Some(key))
            .unwrap_or_else(|| {
                let names: Vec<_> = spans.iter().map(|s| &s.name).collect();
                panic!("no Recommend span for {key}; exported: {names:?}")
            })
    };
    let traced = recommend("obs/traced");
    assert_eq!(
        hex(&traced.trace_id),
        trace_id,
        "the caller's trace continues"
    );
    assert!(
        string_attribute(traced, "decision.path").is_some(),
        "late fields are exported too"
    );
    let plain = recommend("obs/plain");
    assert_ne!(
        hex(&plain.trace_id),
        trace_id,
        "no traceparent: a new trace"
    );
}

/// `GET /metrics` over a plain HTTP/1.1 connection; the body.
fn scrape(addr: SocketAddr) -> String {
    let mut stream = TcpStream::connect(addr).expect("the metrics listener accepts");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// The sum of the samples of `name` whose labels include every `labels` pair (`k="v"`).
fn sample_sum(body: &str, name: &str, labels: &[&str]) -> f64 {
    body.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit_once(' '))
        .filter(|(series, _)| {
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            metric == name && labels.iter().all(|l| rest.contains(l))
        })
        .map(|(_, value)| value.parse::<f64>().expect("a sample value"))
        .sum()
}

/// The admin listener answers probes over plain HTTP: `/healthz` (alive), `/readyz` (SERVING),
/// `/metrics`; any other path 404 and any other method 405, not the metrics text.
#[test]
fn the_admin_listener_answers_probes_and_refuses_other_paths() {
    let dir = tempfile::tempdir().unwrap();
    // Port 0: the address it got is on stdout, after the main listener's line.
    let mut command = common::command(dir.path());
    command.args(["--metrics-listen", "127.0.0.1:0"]);
    let mut child = command.spawn().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = |expected: &str| {
        let mut l = String::new();
        std::io::BufRead::read_line(&mut out, &mut l).unwrap();
        let rest = l.trim().strip_prefix(expected).map(str::to_owned);
        rest.unwrap_or_else(|| panic!("{l:?}"))
    };
    line("autoscaled listening on ");
    let admin: SocketAddr = line("autoscaled admin listening on ").parse().unwrap();
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    if let Some(mut err) = child.stderr.take() {
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    }
    // Killed when dropped.
    let _server = common::Server {
        addr: admin,
        admin: None,
        health: None,
        child,
    };
    assert_eq!(
        common::http(admin, "GET", "/healthz"),
        (200, "ok\n".to_owned())
    );
    // Ready once serving: the listening lines come just before (503 until then).
    let started = std::time::Instant::now();
    loop {
        match common::http(admin, "GET", "/readyz") {
            (200, body) => {
                assert_eq!(body, "ok\n");
                break;
            }
            (503, body) if started.elapsed() < std::time::Duration::from_secs(10) => {
                assert!(body.starts_with("not serving"), "{body}");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => panic!("/readyz: {other:?}"),
        }
    }
    let (status, body) = common::http(admin, "GET", "/metrics");
    assert_eq!(status, 200);
    assert!(body.contains("autoscaled_build_info"), "{body}");
    // The standard process metrics, as any Prometheus-instrumented process exposes them.
    for name in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
    ] {
        assert!(
            body.lines().any(|l| l.starts_with(&format!("{name} "))),
            "{name} missing: {body}"
        );
    }
    for path in ["/healthz/", "/metrics/x", "/favicon.ico", "/targets"] {
        let (status, body) = common::http(admin, "GET", path);
        assert_eq!(status, 404, "{path}: {body}");
        assert!(!body.contains("autoscaled_build_info"), "{path}: {body}");
    }
    assert_eq!(common::http(admin, "POST", "/metrics").0, 405);
    assert_eq!(common::http(admin, "HEAD", "/readyz"), (200, String::new()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_decisions_rescales_and_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let metrics_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut command = common::command(dir.path());
    command.args([
        "--metrics-listen",
        &metrics_addr.to_string(),
        "--metrics-per-target",
        "1",
    ]);
    let server = tokio::task::spawn_blocking(move || common::spawn(command))
        .await
        .unwrap();
    let mut client = HorizontalAutoscalerClient::connect(format!("http://{}", server.addr))
        .await
        .unwrap();

    let before = tokio::task::spawn_blocking(move || scrape(metrics_addr))
        .await
        .unwrap();
    let recommend = "/autoscaled.v1.HorizontalAutoscaler/Recommend";
    let method = format!("method=\"{recommend}\"");
    assert_eq!(
        sample_sum(&before, "autoscaled_grpc_requests_total", &[&method]),
        0.0
    );

    for key in ["metrics/a", "metrics/b", "metrics/c"] {
        let response = client
            .recommend(recommend_request(key))
            .await
            .expect("Recommend succeeds")
            .into_inner();
        assert_eq!(response.desired_replicas, 2, "a scale-up decision");
    }
    let rejected = client
        .recommend(recommend_request(""))
        .await
        .expect_err("an empty target key is rejected");
    assert_eq!(rejected.code(), tonic::Code::InvalidArgument);

    let body = tokio::task::spawn_blocking(move || scrape(metrics_addr))
        .await
        .unwrap();
    let sum = |name: &str, labels: &[&str]| sample_sum(&body, name, labels);
    assert_eq!(
        sum("autoscaled_grpc_requests_total", &[&method, "code=\"0\""]),
        3.0
    );
    assert_eq!(
        sum("autoscaled_grpc_requests_total", &[&method, "code=\"3\""]),
        1.0
    );
    assert_eq!(
        sum(
            "autoscaled_grpc_request_duration_seconds_count",
            &[&method, "code=\"0\""]
        ),
        3.0
    );
    assert_eq!(
        sum(
            "autoscaled_hpa_decisions_total",
            &["path=\"Legacy\"", "able_to_scale=\"SucceededRescale\""]
        ),
        3.0
    );
    assert_eq!(
        sum("autoscaled_hpa_rescales_total", &["direction=\"up\""]),
        3.0
    );
    assert_eq!(
        sum("autoscaled_hpa_rescales_total", &["direction=\"down\""]),
        0.0
    );
    assert_eq!(
        sum("autoscaled_store_commit_duration_seconds_count", &[]),
        3.0
    );
    // Strict durability: every recorded decision waited for a flush covering it.
    let flushes = sum("autoscaled_store_flush_batch_size_count", &[]);
    assert!((1.0..=3.0).contains(&flushes), "{flushes} flushes");
    assert_eq!(sum("autoscaled_store_flush_batch_size_sum", &[]), 3.0);
    assert!(
        body.contains("# HELP autoscaled_hpa_decisions_total"),
        "described: {body}"
    );
    // Three targets stored (counted at start, then followed as they are created).
    assert_eq!(sum("autoscaled_targets", &["kind=\"hpa\""]), 3.0, "{body}");
    // Per-target gauges for the first target only (--metrics-per-target 1).
    assert_eq!(
        sum(
            "autoscaled_target_replicas",
            &["target=\"metrics/a\"", "kind=\"desired\""]
        ),
        2.0
    );
    assert_eq!(
        sum("autoscaled_target_limited", &["target=\"metrics/a\""]),
        0.0
    );
    assert!(
        !body.contains("metrics/b"),
        "beyond the cap, keys are not labels"
    );
    client
        .delete_target(pb::DeleteTargetRequest {
            target_key: "metrics/c".into(),
        })
        .await
        .unwrap();
    let body = tokio::task::spawn_blocking(move || scrape(metrics_addr))
        .await
        .unwrap();
    assert_eq!(
        sample_sum(&body, "autoscaled_targets", &["kind=\"hpa\""]),
        2.0
    );
    drop(server);
}

/// POSTs a gRPC `message` to `path` with the given metadata; the grpc-status code.
async fn raw_status(
    channel: &tonic::transport::Channel,
    path: &str,
    headers: &[(&str, &str)],
    message: &[u8],
) -> i32 {
    raw_call(channel, path, headers, message).await.0
}

/// POSTs a gRPC `message` to `path` with the given metadata; the grpc-status code and the
/// response message's bytes (empty on an error).
async fn raw_call(
    channel: &tonic::transport::Channel,
    path: &str,
    headers: &[(&str, &str)],
    message: &[u8],
) -> (i32, Vec<u8>) {
    use http_body_util::{BodyExt, Full};
    use tonic::codegen::http;
    use tower::ServiceExt;
    let mut body = vec![0];
    body.extend((message.len() as u32).to_be_bytes());
    body.extend(message);
    let mut request = http::Request::builder()
        .method("POST")
        .uri(format!("http://127.0.0.1{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let request = request
        .body(tonic::body::Body::new(Full::new(
            prost::bytes::Bytes::from(body),
        )))
        .unwrap();
    let response = channel.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let mut headers = parts.headers;
    let mut data = Vec::new();
    if !headers.contains_key("grpc-status") {
        let collected = body.collect().await.unwrap();
        headers.extend(collected.trailers().cloned().unwrap_or_default());
        data = collected
            .to_bytes()
            .get(5..)
            .map(<[u8]>::to_vec)
            .unwrap_or_default();
    }
    let code = headers["grpc-status"].to_str().unwrap().parse().unwrap();
    (code, data)
}

/// The real binary with `--authz authz` and `--metrics-listen`, logging at `info` to a file:
/// the server, a channel to it, the metrics address and the log file.
async fn start_with_authz(
    dir: &std::path::Path,
    authz: &std::path::Path,
) -> (
    common::Server,
    tonic::transport::Channel,
    SocketAddr,
    std::path::PathBuf,
) {
    let log = dir.join("server.log");
    let metrics_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut command = common::command(&dir.join("data"));
    command
        .args(["--metrics-listen", &metrics_addr.to_string(), "--authz"])
        .arg(authz)
        .env("AUTOSCALED_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(std::fs::File::create(&log).unwrap());
    let server = common::spawn(command);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    (server, channel, metrics_addr, log)
}

/// With an authorization file (the security review's probes): calls to made-up methods are
/// counted under `method="unknown"`, so 200 of them do not grow `/metrics`; every refusal of
/// the authentication layer is audited (a `Basic` value, a method without a verb called with
/// a valid token); a target key with a line break is INVALID_ARGUMENT before any permission
/// is looked at, and no log line can be forged through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_audited_escaped_and_unknown_methods_do_not_grow_metrics() {
    use prost::Message;
    let dir = tempfile::tempdir().unwrap();
    let token = "s3cret";
    let authz = dir.path().join("authz.toml");
    std::fs::write(
        &authz,
        format!(
            "[[rule]]\nidentity = \"bot\"\nverbs = [\"recommend\", \"read\", \"delete\"]\nprefixes = [\"team-a/\"]\n[[token]]\nidentity = \"bot\"\nsha256 = \"{}\"\n",
            autoscaled::auth::policy::sha256_hex(token.as_bytes())
        ),
    )
    .unwrap();
    let (mut server, channel, metrics_addr, log) = start_with_authz(dir.path(), &authz).await;
    let bearer = format!("Bearer {token}");
    let auth = [("authorization", bearer.as_str())];

    for (path, key) in [
        (
            "/autoscaled.v1.HorizontalAutoscaler/GetHistory",
            "team-b/x\nFORGED autoscaled::audit: outcome=\"allowed\"",
        ),
        (
            "/autoscaled.v1.HorizontalAutoscaler/DeleteTarget",
            "team-a/x\nFORGED\0nul",
        ),
    ] {
        let message = pb::GetHistoryRequest {
            target_key: key.to_owned(),
            ..Default::default()
        }
        .encode_to_vec();
        assert_eq!(
            raw_status(&channel, path, &auth, &message).await,
            3,
            "{key:?}"
        );
    }

    for i in 0..200 {
        let path = format!("/autoscaled.v1.HorizontalAutoscaler/Probe{i}x");
        assert_eq!(raw_status(&channel, &path, &[], &[]).await, 16, "{path}");
    }
    let basic = raw_status(
        &channel,
        "/autoscaled.v1.HorizontalAutoscaler/GetHistory",
        &[("authorization", "Basic eA==")],
        &[],
    )
    .await;
    assert_eq!(basic, 16);
    let unmapped = raw_status(
        &channel,
        "/autoscaled.v1.HorizontalAutoscaler/Nope",
        &auth,
        &[],
    )
    .await;
    assert_eq!(unmapped, 7);
    // The same refusals through the HTTP/JSON door: audited with the caller's address too.
    let connect = |token: &str, key: &str| {
        use std::io::{Read, Write};
        let body = format!("{{\"targetKey\":\"{key}\"}}");
        let mut tcp = std::net::TcpStream::connect(server.addr).unwrap();
        tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        write!(
            tcp,
            "POST /autoscaled.v1.HorizontalAutoscaler/GetHistory HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\n{token}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        let _ = tcp.read_to_string(&mut answer);
        answer
    };
    let answer = connect("", "team-a/connect-no-token");
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    let answer = connect(
        &format!("Authorization: {bearer}\r\n"),
        "team-b/connect-denied",
    );
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");

    let body = scrape(metrics_addr);
    assert!(!body.contains("Probe"), "made-up methods became labels");
    assert!(
        sample_sum(
            &body,
            "autoscaled_grpc_requests_total",
            &["method=\"unknown\""]
        ) >= 200.0
    );

    tokio::task::spawn_blocking(move || server.terminate())
        .await
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    let audit: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("autoscaled::audit"))
        .collect();
    assert!(
        audit
            .iter()
            .any(|l| l.contains("malformed authorization metadata")),
        "{text}"
    );
    assert!(
        audit
            .iter()
            .any(|l| l.contains("method without a verb") && l.contains("bot")),
        "{text}"
    );
    // Every audit line carries the caller's address, whichever door the call came through.
    assert!(
        audit.iter().all(|l| l.contains("remote=127.0.0.1:")),
        "an audit line without the remote address: {text}"
    );
    assert!(
        audit
            .iter()
            .any(|l| l.contains("no credentials") && l.contains("GetHistory")),
        "{text}"
    );
    assert!(
        audit
            .iter()
            .any(|l| l.contains("team-b/connect-denied") && l.contains("denied")),
        "{text}"
    );
    assert!(
        text.lines()
            .all(|l| !l.starts_with("FORGED") && !l.contains('\0')),
        "{text}"
    );
    // Refused calls leave a line (rate-limited: 10 a second, the rest counted), naming the
    // method from the served set, the code and the start of the message.
    let refused: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("autoscaled::refused"))
        .collect();
    // The peer and the identity its token authenticated: which caller sends bad requests.
    assert!(
        refused.iter().any(|l| l.contains("InvalidArgument")
            && l.contains("target_key")
            && l.contains("identity=\"bot\"")
            && l.contains("peer=127.0.0.1:")),
        "{text}"
    );
    assert!(refused.len() < 200, "{} refusal lines", refused.len());
    assert!(
        // The start-up line names the console too.
        text.lines().any(|l| l.contains("admin listener up")
            && l.contains("GET / the console")
            && l.contains(&format!("local={metrics_addr}"))
            && l.contains(&format!("console=http://{metrics_addr}/"))),
        "{text}"
    );
    assert!(body.contains("autoscaled_build_info{"), "{body}");
}

/// Every RPC of the descriptor set, generated: team-a's token on a key of team-b's is
/// PERMISSION_DENIED, stores nothing, is audited and counted; a List (no key) shows none of
/// team-b's keys. Policies and scaling groups are named as keys are (`name`, or the name of
/// the message a Put carries). A new RPC is covered without a change here; one that takes no
/// key or name and is not a List fails this test until its authorization is decided here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_of_the_descriptor_set_denies_another_tenants_key() {
    use prost::Message;
    use prost_reflect::{DescriptorPool, DynamicMessage, Value};
    let dir = tempfile::tempdir().unwrap();
    let authz = dir.path().join("authz.toml");
    let hash = autoscaled::auth::policy::sha256_hex;
    let verbs = "verbs = [\"recommend\", \"read\", \"write-usage\", \"delete\", \"configure\"]";
    std::fs::write(
        &authz,
        format!(
            "[[rule]]\nidentity = \"a\"\n{verbs}\nprefixes = [\"team-a/\"]\n\
             [[rule]]\nidentity = \"b\"\n{verbs}\nprefixes = [\"team-b/\"]\n\
             [[token]]\nidentity = \"a\"\nsha256 = \"{}\"\n\
             [[token]]\nidentity = \"b\"\nsha256 = \"{}\"\n",
            hash(b"token-a"),
            hash(b"token-b")
        ),
    )
    .unwrap();
    let (mut server, channel, metrics_addr, log) = start_with_authz(dir.path(), &authz).await;
    let as_a = [("authorization", "Bearer token-a")];
    let as_b = [("authorization", "Bearer token-b")];
    const H: &str = "/autoscaled.v1.HorizontalAutoscaler/";
    const V: &str = "/autoscaled.v1.VerticalAutoscaler/";
    // team-b has a target of each kind, which team-a must neither see nor change.
    let recommend = fixtures::at_target("team-b/web", 3).build().encode_to_vec();
    let recommend_path = format!("{H}Recommend");
    assert_eq!(
        raw_status(&channel, &recommend_path, &as_b, &recommend).await,
        0
    );
    let usage = fixtures::usage("team-b/web").build().encode_to_vec();
    let usage_path = format!("{V}RecordUsage");
    assert_eq!(raw_status(&channel, &usage_path, &as_b, &usage).await, 0);
    let history = pb::GetHistoryRequest {
        target_key: "team-b/web".into(),
        ..Default::default()
    }
    .encode_to_vec();
    let before = raw_call(&channel, &format!("{H}GetHistory"), &as_b, &history).await;
    assert_eq!(before.0, 0);
    // And a policy and a scaling group, named as its keys are.
    let policy = pb::PutPolicyRequest {
        policy: Some(pb::Policy {
            name: "team-b/web".into(),
            spec: Some(pb::HorizontalSpec {
                max_replicas: 5,
                ..Default::default()
            }),
            ..Default::default()
        }),
        expected_version: None,
    }
    .encode_to_vec();
    assert_eq!(
        raw_status(&channel, &format!("{H}PutPolicy"), &as_b, &policy).await,
        0
    );
    let group = pb::PutScalingGroupRequest {
        group: Some(pb::ScalingGroup {
            name: "team-b/web".into(),
            capacity: 5,
            member_prefixes: vec!["team-b/".into()],
            ..Default::default()
        }),
        expected_version: None,
    }
    .encode_to_vec();
    assert_eq!(
        raw_status(&channel, &format!("{H}PutScalingGroup"), &as_b, &group).await,
        0
    );

    // More of each, so that a page of one read in team-b's names has a token to give.
    for name in ["team-b/x1", "team-b/x2"] {
        let mut policy = pb::PutPolicyRequest::decode(policy.as_slice()).unwrap();
        policy.policy.as_mut().unwrap().name = name.into();
        assert_eq!(
            raw_status(
                &channel,
                &format!("{H}PutPolicy"),
                &as_b,
                &policy.encode_to_vec()
            )
            .await,
            0
        );
        let mut group = pb::PutScalingGroupRequest::decode(group.as_slice()).unwrap();
        group.group.as_mut().unwrap().name = name.into();
        group.group.as_mut().unwrap().member_prefixes = vec![format!("{name}/")];
        assert_eq!(
            raw_status(
                &channel,
                &format!("{H}PutScalingGroup"),
                &as_b,
                &group.encode_to_vec()
            )
            .await,
            0
        );
    }

    let pool = DescriptorPool::decode(autoscaled::pb::FILE_DESCRIPTOR_SET).unwrap();
    let mut denied = 0;
    let mut methods = Vec::new();
    for service in pool.services() {
        for method in service.methods() {
            let path = format!("/{}/{}", service.full_name(), method.name());
            let input = method.input();
            let mut message = DynamicMessage::new(input.clone());
            // A key, a name (policies, groups), or a named message (Put of one).
            let team_b = || Value::String("team-b/web".into());
            let mut keyed = true;
            if input.get_field_by_name("target_key").is_some() {
                message.set_field_by_name("target_key", team_b());
            } else if input.get_field_by_name("name").is_some() {
                message.set_field_by_name("name", team_b());
            } else if let Some(field) = input
                .get_field_by_name("requests")
                .filter(prost_reflect::FieldDescriptor::is_list)
            {
                // A batch: each of its requests names a key.
                let mut request = DynamicMessage::new(field.kind().as_message().unwrap().clone());
                request.set_field_by_name("target_key", team_b());
                message.set_field(&field, Value::List(vec![Value::Message(request)]));
            } else if let Some(field) = ["policy", "group"]
                .into_iter()
                .find_map(|f| input.get_field_by_name(f))
            {
                let mut named = DynamicMessage::new(field.kind().as_message().unwrap().clone());
                named.set_field_by_name("name", team_b());
                message.set_field(&field, Value::Message(named));
            } else {
                keyed = false;
            }
            let (code, body) = raw_call(&channel, &path, &as_a, &message.encode_to_vec()).await;
            if keyed {
                assert_eq!(code, 7, "{path}: team-a on team-b/web");
                denied += 1;
            } else {
                assert!(
                    method.name().starts_with("List"),
                    "{path}: no target_key and not a List: decide how it is authorized"
                );
                assert_eq!(code, 0, "{path}");
                // Pages of one, followed to the end: no page token names team-b's things
                // (tokens are the hex of the last name a page read).
                if input.get_field_by_name("page_size").is_some() {
                    let mut token = String::new();
                    for page in 0.. {
                        assert!(page < 50, "{path}: pages without end");
                        let mut request = DynamicMessage::new(input.clone());
                        request.set_field_by_name("page_size", Value::I32(1));
                        request.set_field_by_name("page_token", Value::String(token.clone()));
                        let (code, body) =
                            raw_call(&channel, &path, &as_a, &request.encode_to_vec()).await;
                        assert_eq!(code, 0, "{path} page {page}");
                        let response =
                            DynamicMessage::decode(method.output(), body.as_slice()).unwrap();
                        token = response
                            .get_field_by_name("next_page_token")
                            .unwrap_or_else(|| panic!("{path}: pages without tokens"))
                            .as_str()
                            .unwrap()
                            .to_owned();
                        let decoded: Vec<u8> = (0..token.len() / 2)
                            .filter_map(|i| u8::from_str_radix(&token[2 * i..2 * i + 2], 16).ok())
                            .collect();
                        let decoded = String::from_utf8_lossy(&decoded);
                        assert!(
                            !decoded.contains("team-b") && !token.contains("team-b"),
                            "{path}: a page token names team-b's: {decoded:?}"
                        );
                        if token.is_empty() {
                            break;
                        }
                    }
                }
                let response = DynamicMessage::decode(method.output(), body.as_slice()).unwrap();
                // Keys, or named things (policies, groups).
                let names: Vec<String> =
                    if let Some(keys) = response.get_field_by_name("target_keys") {
                        keys.as_list()
                            .unwrap()
                            .iter()
                            .map(|k| k.as_str().unwrap().to_owned())
                            .collect()
                    } else {
                        let items = ["policies", "groups"]
                            .into_iter()
                            .find_map(|f| response.get_field_by_name(f))
                            .unwrap_or_else(|| panic!("{path}: a List of what?"));
                        items
                            .as_list()
                            .unwrap()
                            .iter()
                            .map(|m| {
                                m.as_message()
                                    .unwrap()
                                    .get_field_by_name("name")
                                    .unwrap()
                                    .as_str()
                                    .unwrap()
                                    .to_owned()
                            })
                            .collect()
                    };
                assert!(
                    names.iter().all(|k| !k.starts_with("team-b/")),
                    "{path} lists team-b's: {names:?}"
                );
            }
            methods.push(path);
        }
    }
    assert!(methods.len() >= 17, "{methods:?}");

    // Nothing changed: team-b's history is as it was, and its vertical target is there.
    let after = raw_call(&channel, &format!("{H}GetHistory"), &as_b, &history).await;
    assert_eq!(after, before, "a denied call changed team-b's history");
    let vertical = pb::GetRecommendationRequest {
        target_key: "team-b/web".into(),
        ..Default::default()
    }
    .encode_to_vec();
    let path = format!("{V}GetRecommendation");
    assert_eq!(raw_status(&channel, &path, &as_b, &vertical).await, 0);
    // team-b's policy and group are still there, unchanged (version 1).
    let named = pb::GetPolicyRequest {
        name: "team-b/web".into(),
    }
    .encode_to_vec();
    let (code, body) = raw_call(&channel, &format!("{H}GetPolicy"), &as_b, &named).await;
    assert_eq!(
        (code, pb::Policy::decode(body.as_slice()).unwrap().version),
        (0, 1)
    );
    let (code, body) = raw_call(&channel, &format!("{H}GetScalingGroup"), &as_b, &named).await;
    let status = pb::ScalingGroupStatus::decode(body.as_slice()).unwrap();
    assert_eq!((code, status.group.unwrap().version), (0, 1));

    let body = scrape(metrics_addr);
    let counted = sample_sum(&body, "autoscaled_authz_denied_total", &[]);
    assert_eq!(counted, f64::from(denied), "{body}");
    tokio::task::spawn_blocking(move || server.terminate())
        .await
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    let audited = text
        .lines()
        .filter(|l| l.contains("autoscaled::audit") && l.contains("team-b/web"))
        .filter(|l| l.contains("denied"))
        .count();
    assert_eq!(audited, denied as usize, "{text}");
}
