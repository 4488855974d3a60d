//! Issue 8 against the real binary on 127.0.0.1: malformed bodies are INVALID_ARGUMENT, error
//! details are bounded, hostile counts are refused before decoding (peak RSS stays small),
//! overload is shed with RESOURCE_EXHAUSTED, a call whose deadline passed stores nothing, and
//! an open Health/Watch stream does not hold the shutdown. Plus a property test: arbitrary
//! bytes as the body of any RPC never produce INTERNAL, and the server keeps serving.
//!
//! Bodies are sent raw over a tonic `Channel` (an HTTP/2 POST with `content-type:
//! application/grpc`), so a test can send bytes no generated client would.

mod common;

use std::process::Command;

use autoscaled::pb::v1::{self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient};
use autoscaled_fixtures as fixtures;
use common::{Server, command, spawn, start};
use http_body_util::{BodyExt, Full};
use proptest::{prelude::*, test_runner::TestRunner};
use prost::{Message, bytes::Bytes};
use tonic::{
    Code,
    codegen::http::{self, HeaderMap},
    transport::Channel,
};
use tonic_types::StatusExt;
use tower::ServiceExt;

/// Every RPC: ours, health and reflection.
const PATHS: &[&str] = &[
    "/autoscaled.v1.HorizontalAutoscaler/Recommend",
    "/autoscaled.v1.HorizontalAutoscaler/GetHistory",
    "/autoscaled.v1.HorizontalAutoscaler/ListTargets",
    "/autoscaled.v1.HorizontalAutoscaler/DeleteTarget",
    "/autoscaled.v1.VerticalAutoscaler/RecordUsage",
    "/autoscaled.v1.VerticalAutoscaler/GetRecommendation",
    "/autoscaled.v1.VerticalAutoscaler/DeleteVerticalTarget",
    "/autoscaled.v1.VerticalAutoscaler/ListVerticalTargets",
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn channel(server: &Server) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// A gRPC message frame: no compression, big-endian length, the bytes.
fn framed(message: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend((message.len() as u32).to_be_bytes());
    out.extend(message);
    out
}

/// What the server answered to a raw call.
#[derive(Debug)]
struct Answer {
    code: Option<Code>,
    message: String,
    /// The response headers, and the trailers if any: what carries a status.
    headers: HeaderMap,
}

impl Answer {
    /// Bytes of every header and trailer (names and values).
    fn metadata_bytes(&self) -> usize {
        self.headers
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len())
            .sum()
    }

    fn status(&self) -> tonic::Status {
        tonic::Status::from_header_map(&self.headers).expect("a grpc-status")
    }
}

/// POSTs `body` with a `grpc-timeout` header over a bare HTTP/2 connection (a tonic `Channel`
/// enforces the timeout itself and would give up before the server answers).
async fn call_with_timeout(server: &Server, path: &str, body: Vec<u8>, timeout: &str) -> Answer {
    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("http://{}{path}", server.addr))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", timeout)
        .body(())
        .unwrap();
    let (response, mut send) = client.send_request(request, false).unwrap();
    // The server may answer (deadline passed) before it has read the body.
    let _ = send.send_data(Bytes::from(body), true);
    let response = response.await.unwrap();
    let headers = common::grpc_headers(response).await;
    let status = tonic::Status::from_header_map(&headers).expect("a grpc-status");
    Answer {
        code: Some(status.code()),
        message: status.message().to_owned(),
        headers,
    }
}

/// POSTs `body` (bytes as sent, framing included) to `path`. A streaming answer that has
/// started (Health/Watch) is not read to its end: `code` is then `None`.
async fn raw_call(channel: &Channel, path: &str, body: Vec<u8>) -> Answer {
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("http://127.0.0.1{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    let request = request
        .body(tonic::body::Body::new(Full::new(Bytes::from(body))))
        .unwrap();
    let response = channel
        .clone()
        .oneshot(request)
        .await
        .expect("the server answers");
    assert_eq!(response.status(), http::StatusCode::OK);
    let (parts, body) = response.into_parts();
    let mut headers = parts.headers;
    if !headers.contains_key("grpc-status") {
        if path.ends_with("/Watch") {
            return Answer {
                code: None,
                message: String::new(),
                headers,
            };
        }
        let collected = body.collect().await.expect("the body ends");
        if let Some(trailers) = collected.trailers() {
            headers.extend(trailers.clone());
        }
    }
    let code = headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .map(Code::from_i32);
    let message = tonic::Status::from_header_map(&headers)
        .map(|s| s.message().to_owned())
        .unwrap_or_default();
    Answer {
        code,
        message,
        headers,
    }
}

/// A valid Recommend of `pods` ready pods using half their cpu request.
fn recommend(key: &str, pods: usize) -> pb::RecommendRequest {
    fixtures::at_target(key, pods).build()
}

async fn serves(channel: &Channel, key: &str) {
    let response = HorizontalAutoscalerClient::new(channel.clone())
        .recommend(recommend(key, 3))
        .await
        .expect("a valid Recommend succeeds");
    assert!(response.into_inner().recorded);
}

/// Peak resident set of `pid` (VmHWM), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

#[test]
fn undecodable_bodies_and_non_utf8_strings_are_invalid_argument() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    runtime().block_on(async {
        let channel = channel(&server).await;
        // Field 1 (the target key of every request here) as bytes that are not UTF-8.
        let not_utf8 = framed(&[0x0a, 0x02, 0xc3, 0x28]);
        // A length running past the end of the message.
        let truncated = framed(&[0x0a, 0x7f, 0x61]);
        // A frame announcing 100 bytes and carrying 3.
        let mut short_frame = vec![0, 0, 0, 0, 100];
        short_frame.extend([1, 2, 3]);
        for path in PATHS.iter().filter(|p| p.starts_with("/autoscaled")) {
            for body in [&not_utf8, &truncated, &short_frame] {
                let answer = raw_call(&channel, path, body.clone()).await;
                assert_eq!(
                    answer.code,
                    Some(Code::InvalidArgument),
                    "{path}: {answer:?}"
                );
            }
        }
        let answer = raw_call(&channel, PATHS[0], not_utf8.clone()).await;
        assert!(
            answer.message.contains("RecommendRequest") && answer.message.contains("UTF-8"),
            "{answer:?}"
        );
        // Nothing was stored, and the server still serves.
        let targets = HorizontalAutoscalerClient::new(channel.clone())
            .list_targets(pb::ListTargetsRequest::default())
            .await
            .unwrap()
            .into_inner();
        assert!(targets.target_keys.is_empty(), "{targets:?}");
        serves(&channel, "after-garbage").await;
    });
}

#[test]
fn ten_thousand_violations_fit_the_default_header_limits() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    runtime().block_on(async {
        let channel = channel(&server).await;
        let mut request = recommend("negative", 10_000);
        for pod in &mut request.pods {
            pod.requests_milli.insert("cpu".to_owned(), -1);
        }
        let answer = raw_call(&channel, PATHS[0], framed(&request.encode_to_vec())).await;
        assert_eq!(answer.code, Some(Code::InvalidArgument), "{answer:?}");
        let status = answer.status();
        let bad = status
            .get_details_bad_request()
            .expect("BadRequest details");
        // The first 20 violations, then the count of the others.
        assert_eq!(bad.field_violations.len(), 21, "{bad:?}");
        assert!(
            bad.field_violations[0].field.starts_with("pods[0]"),
            "{bad:?}"
        );
        assert!(
            bad.field_violations[20]
                .description
                .contains("more violations"),
            "{bad:?}"
        );
        assert!(answer.message.contains("... and "), "{}", answer.message);
        let message = answer.headers["grpc-message"].len();
        let all = answer.metadata_bytes();
        eprintln!("10,000 violations: grpc-message {message} B, headers and trailers {all} B");
        assert!(message < 1024, "grpc-message {message} B");
        // grpcio's default limit is 16 KB; the issue asks for 8 KB.
        assert!(all < 8 * 1024, "headers {all} B");
        serves(&channel, "after-violations").await;
    });
}

/// 2,097,000 empty pods: tag 5 and a zero length, 2 bytes each, 4,194,000 bytes in all, under
/// the 4 MiB message limit.
fn empty_pods() -> Vec<u8> {
    let mut message = Vec::with_capacity(4_194_304);
    for _ in 0..2_097_000 {
        message.extend([0x2a, 0x00]);
    }
    framed(&message)
}

/// One pod holding 2,090,000 empty containers (field 8 of PodSample).
fn one_pod_of_empty_containers() -> Vec<u8> {
    let containers = 2_090_000;
    let mut pod = Vec::with_capacity(2 * containers);
    for _ in 0..containers {
        pod.extend([0x42, 0x00]);
    }
    let mut message = vec![0x2a];
    prost::encoding::encode_varint(pod.len() as u64, &mut message);
    message.extend(pod);
    framed(&message)
}

#[test]
fn hostile_counts_are_refused_before_decoding() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let pid = server.child.id();
    runtime().block_on(async {
        let channel = channel(&server).await;
        serves(&channel, "warm").await;
        let before = peak_rss_kib(pid);
        let pods = empty_pods();
        let containers = one_pod_of_empty_containers();
        // Four of each at once, as in the issue (2.9 GiB peak before).
        let calls = (0..8).map(|i| {
            let channel = channel.clone();
            let body = if i % 2 == 0 {
                pods.clone()
            } else {
                containers.clone()
            };
            tokio::spawn(async move { raw_call(&channel, PATHS[0], body).await })
        });
        for (i, call) in calls.enumerate() {
            let answer = call.await.unwrap();
            assert_eq!(answer.code, Some(Code::ResourceExhausted), "{answer:?}");
            let field = if i % 2 == 0 {
                "pods: "
            } else {
                "pods[].containers: "
            };
            assert!(answer.message.starts_with(field), "{answer:?}");
        }
        let after = peak_rss_kib(pid);
        let grown_mib = (after - before) / 1024;
        eprintln!(
            "8 hostile 4 MiB Recommends (4 × 2.1 M empty pods, 4 × 2.1 M empty containers): peak RSS {} → {} MiB (+{grown_mib} MiB)",
            before / 1024,
            after / 1024
        );
        // Before the wire limits, each request alone added 401 MiB (pods) or 1.2 GiB
        // (containers). Eight 4 MiB bodies in flight are 32 MiB; allow HTTP/2 buffering.
        assert!(grown_mib < 160, "peak RSS grew by {grown_mib} MiB");
        serves(&channel, "after-hostile").await;
    });
}

#[test]
fn overload_is_shed_with_resource_exhausted_and_a_retry_delay() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = command(dir.path());
    command.args([
        "--max-concurrent-requests",
        "1",
        "--max-queued-requests",
        "0",
    ]);
    let server = spawn(command);
    runtime().block_on(async {
        let channel = channel(&server).await;
        let body = framed(&recommend("busy", 2_000).encode_to_vec());
        let mut shed = None;
        let mut ok = 0;
        // With one slot and no queue, calls sent together are shed while one runs; a few
        // rounds make sure the overlap happened.
        for _ in 0..20 {
            let calls: Vec<_> = (0..16)
                .map(|_| {
                    let channel = channel.clone();
                    let body = body.clone();
                    tokio::spawn(async move { raw_call(&channel, PATHS[0], body).await })
                })
                .collect();
            for call in calls {
                let answer = call.await.unwrap();
                match answer.code {
                    Some(Code::Ok) => ok += 1,
                    Some(Code::ResourceExhausted) => shed = Some(answer),
                    other => panic!("unexpected {other:?}: {answer:?}"),
                }
            }
            if shed.is_some() && ok > 0 {
                break;
            }
        }
        let shed = shed.expect("some calls were shed");
        assert!(ok > 0);
        assert!(shed.message.contains("retry after about"), "{shed:?}");
        let pushback: u64 = shed.headers["grpc-retry-pushback-ms"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(pushback >= 10, "{shed:?}");
        // Health is not limited.
        let health = raw_call(&channel, "/grpc.health.v1.Health/Check", framed(&[])).await;
        assert_eq!(health.code, Some(Code::Ok), "{health:?}");
    });
}

#[test]
fn a_call_whose_deadline_passes_before_its_commit_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // Relaxed durability: a Recommend has no await between its commit and its answer, so an
    // answer is OK exactly when the decision was stored (no flush window in between).
    let mut command = command(dir.path());
    command.args(["--durability", "relaxed"]);
    let server = spawn(command);
    runtime().block_on(async {
        let channel = channel(&server).await;
        // The calls below must have their deadline pass while the server decodes and
        // evaluates (synchronous work that tonic's own timer cannot interrupt). Before the
        // check, the commit followed and the caller who had given up was answered OK late,
        // with the decision stored. No fixed fraction of one measured call: the deadline
        // starts at a quarter of it and adapts (halved after an answer in time, raised by half
        // after a call refused before it ran) until a call reached its commit after its
        // deadline, within a generous bound (60 s, or 400 calls).
        let heavy = |key: &str| framed(&recommend(key, 10_000).encode_to_vec());
        let started = std::time::Instant::now();
        let probe = raw_call(&channel, PATHS[0], heavy("probe")).await;
        assert_eq!(probe.code, Some(Code::Ok), "{probe:?}");
        let measured = started.elapsed();
        let mut deadline = measured / 4;
        let late = |a: &Answer| a.message.contains("before its commit");
        let mut answers = Vec::new();
        let searching = std::time::Instant::now();
        while answers.len() < 8 || !answers.iter().any(|(_, a, _)| late(a)) {
            assert!(
                searching.elapsed() < std::time::Duration::from_secs(60) && answers.len() < 400,
                "no call reached its commit after its deadline in {} calls ({:?}): {answers:?}",
                answers.len(),
                searching.elapsed(),
            );
            let key = format!("late-{}", answers.len());
            let timeout = format!("{}u", deadline.as_micros().max(1));
            let answer = call_with_timeout(&server, PATHS[0], heavy(&key), &timeout).await;
            assert!(
                matches!(
                    answer.code,
                    Some(Code::Ok | Code::DeadlineExceeded | Code::Cancelled)
                ),
                "{answer:?}"
            );
            if answer.code == Some(Code::Ok) {
                deadline /= 2;
            } else if !late(&answer) {
                deadline = deadline.mul_f64(1.5).max(std::time::Duration::from_micros(10));
            }
            answers.push((key, answer, timeout));
        }
        println!(
            "one heavy Recommend took {measured:?}; {} calls in {:?}, deadlines {:?}; {} reached their commit after their deadline",
            answers.len(),
            searching.elapsed(),
            answers.iter().map(|(_, _, t)| t.as_str()).collect::<Vec<_>>(),
            answers.iter().filter(|(_, a, _)| late(a)).count(),
        );
        // One page holds them all: at most 400 calls and the probe.
        let stored = HorizontalAutoscalerClient::new(channel.clone())
            .list_targets(pb::ListTargetsRequest {
                page_size: 1000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(stored.next_page_token.is_empty());
        let stored = stored.target_keys;
        for (key, answer, timeout) in &answers {
            assert_eq!(
                stored.contains(key),
                answer.code == Some(Code::Ok),
                "{key} (grpc-timeout {timeout}): stored {stored:?}, answered {answer:?}"
            );
        }
        serves(&channel, "on-time").await;
    });
}

#[test]
fn an_open_health_watch_does_not_hold_the_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = command(dir.path());
    command.args(["--shutdown-grace-secs", "30"]);
    let mut server = spawn(command);
    runtime().block_on(async {
        let channel = channel(&server).await;
        let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
        let mut stream = health
            .watch(tonic_health::pb::HealthCheckRequest::default())
            .await
            .unwrap()
            .into_inner();
        let first = stream.message().await.unwrap().unwrap();
        assert_eq!(first.status, 1, "SERVING");
        let killed = Command::new("kill")
            .args(["-TERM", &server.child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        // NOT_SERVING, then the stream ends cleanly. Before, it stayed open until the grace
        // period ran out and the connection was dropped (an error, not an end).
        let mut statuses = Vec::new();
        loop {
            match stream.message().await {
                Ok(Some(m)) => statuses.push(m.status),
                Ok(None) => break,
                Err(e) => panic!("the stream failed instead of ending: {e:?} after {statuses:?}"),
            }
        }
        assert_eq!(statuses.last(), Some(&2), "NOT_SERVING last: {statuses:?}");
    });
    let status = server.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

/// The property: any bytes, framed as one message or sent as the raw body, to any RPC, never
/// answer INTERNAL (a client's bytes are never a server fault), and the server keeps serving.
#[test]
fn arbitrary_bodies_never_answer_internal() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let rt = runtime();
    let channel = rt.block_on(channel(&server));
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let body = prop_oneof![
        // Raw protobuf-looking bytes: tags of the fields the messages have.
        proptest::collection::vec(
            prop_oneof![
                any::<u8>(),
                Just(0x0a),
                Just(0x2a),
                Just(0x12),
                Just(0x00),
                Just(0x80)
            ],
            0..256
        ),
        proptest::collection::vec(any::<u8>(), 0..64),
    ];
    let strategy = (0..PATHS.len(), any::<bool>(), body);
    runner
        .run(&strategy, |(path, frame, bytes)| {
            let body = if frame { framed(&bytes) } else { bytes.clone() };
            let answer = rt.block_on(raw_call(&channel, PATHS[path], body));
            prop_assert_ne!(
                answer.code,
                Some(Code::Internal),
                "{} framed={} {:?}: {:?}",
                PATHS[path],
                frame,
                bytes,
                answer
            );
            Ok(())
        })
        .unwrap();
    assert!(server_alive(&server));
    rt.block_on(serves(&channel, "after-property"));
}

fn server_alive(server: &Server) -> bool {
    std::fs::metadata(format!("/proc/{}", server.child.id())).is_ok()
}

/// Just past the admission limit, large requests must not stall the server (the issue's
/// reproduction, shortened): 100 closed-loop streams of 5,000-pod Recommends (about 290 KiB
/// each) over 4 HTTP/2 connections for 6 s, clients retrying at once, against the default
/// limits. Every call ends with OK or RESOURCE_EXHAUSTED; none waits until its 15 s deadline.
/// When a slot was taken as a call's headers arrived, the queued calls' unread bodies held the
/// connection windows that the running calls' bodies needed: goodput fell to about 1 call/s
/// and calls ended DEADLINE_EXCEEDED while the server idled. The counts and the goodput are
/// printed, not asserted.
#[test]
fn large_bodies_past_the_admission_limit_do_not_stall_the_server() {
    const STREAMS: usize = 100;
    const CONNECTIONS: usize = 4;
    let load = std::time::Duration::from_secs(6);
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    runtime().block_on(async {
        let mut channels = Vec::new();
        for _ in 0..CONNECTIONS {
            channels.push(channel(&server).await);
        }
        let body = Bytes::from(framed(&recommend("large", 5_000).encode_to_vec()));
        let started = std::time::Instant::now();
        let streams: Vec<_> = (0..STREAMS)
            .map(|i| {
                let channel = channels[i % CONNECTIONS].clone();
                let body = body.clone();
                tokio::spawn(async move {
                    let mut codes = Vec::new();
                    while started.elapsed() < load {
                        let request = http::Request::builder()
                            .method("POST")
                            .uri(format!("http://127.0.0.1{}", PATHS[0]))
                            .header("content-type", "application/grpc")
                            .header("te", "trailers")
                            .header("grpc-timeout", "15S")
                            .body(tonic::body::Body::new(Full::new(body.clone())))
                            .unwrap();
                        let call = async {
                            let response = channel.clone().oneshot(request).await.ok()?;
                            let (parts, body) = response.into_parts();
                            let mut headers = parts.headers;
                            if !headers.contains_key("grpc-status") {
                                let collected = body.collect().await.ok()?;
                                headers.extend(collected.trailers().cloned().unwrap_or_default());
                            }
                            tonic::Status::from_header_map(&headers).map(|s| s.code())
                        };
                        let code =
                            match tokio::time::timeout(std::time::Duration::from_secs(20), call)
                                .await
                            {
                                Ok(Some(code)) => format!("{code:?}"),
                                Ok(None) => "transport error".to_owned(),
                                Err(_) => "no answer in 20 s".to_owned(),
                            };
                        codes.push(code);
                    }
                    codes
                })
            })
            .collect();
        let mut counts = std::collections::BTreeMap::new();
        for stream in streams {
            for code in stream.await.unwrap() {
                *counts.entry(code).or_insert(0usize) += 1;
            }
        }
        let elapsed = started.elapsed();
        let ok = counts.get("Ok").copied().unwrap_or(0);
        println!(
            "{STREAMS} streams over {CONNECTIONS} connections: {counts:?} in {elapsed:?}, {:.1} OK/s",
            ok as f64 / elapsed.as_secs_f64()
        );
        assert!(
            counts.keys().all(|c| c == "Ok" || c == "ResourceExhausted"),
            "{counts:?}"
        );
        assert!(ok >= STREAMS, "{counts:?}");
        serves(&channels[0], "after-large").await;
    });
}

/// A burst that drains in well under a second is never refused: 100 concurrent small
/// Recommends on one key (a controller's fan-out) all succeed with the default limits (the
/// queue is bounded by expected wait, not by a count of 64).
#[test]
fn a_burst_of_small_calls_on_one_key_is_never_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    runtime().block_on(async {
        let channel = channel(&server).await;
        let calls: Vec<_> = (0..100)
            .map(|_| {
                let mut client = HorizontalAutoscalerClient::new(channel.clone());
                tokio::spawn(async move {
                    client
                        .recommend(recommend("burst", 3))
                        .await
                        .map(|_| ())
                        .map_err(|s| s.code())
                })
            })
            .collect();
        let mut refused = 0;
        for call in calls {
            if let Err(code) = call.await.unwrap() {
                assert_eq!(code, Code::ResourceExhausted);
                refused += 1;
            }
        }
        assert_eq!(refused, 0, "calls of a short burst were refused");
    });
}
