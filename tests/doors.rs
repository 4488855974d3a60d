//! Every limit of every door, from the one table in the code (`autoscaled::doors::LIMITS`):
//! for each (limit, door) pair the table lists, a probe against the real binary that fails
//! when that door does not apply the limit. A row added to the table without a probe for each
//! of its doors fails here too.
//!
//! The doors: `grpc` (gRPC on the main listener), `connect` (HTTP/JSON and binary Connect on
//! the same listener, HTTP/1.1), `admin` (metrics, probes and the console), `health` (the
//! health-only listener). The servers run with small limits so that each probe is quick:
//! 64 KiB messages, 10 pods, 100 kB of buffered bodies, 500 ms body and write timeouts.

mod common;

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    time::{Duration, Instant},
};

use autoscaled::pb::v1 as pb;
use bytes::Bytes;
use prost::Message;
use tonic::codegen::http;

/// A server for the probes: the real binary with small limits, its log (stderr) in a file.
struct Door {
    server: common::Server,
    health: Option<SocketAddr>,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn start(extra: &[&str]) -> Door {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let mut command = common::command(&dir.path().join("data"));
    command
        .args([
            "--max-message-bytes",
            "65536",
            "--max-pods",
            "10",
            "--max-batch-requests",
            "3",
            "--max-buffered-request-bytes",
            "100000",
            "--request-body-timeout-ms",
            "500",
            "--write-timeout-ms",
            "500",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .args(extra)
        .env("AUTOSCALED_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(std::fs::File::create(&log).unwrap());
    let server = common::spawn(command);
    let health = server.health;
    Door {
        server,
        health,
        log,
        _dir: dir,
    }
}

impl Door {
    fn addr(&self) -> SocketAddr {
        self.server.addr
    }

    fn admin(&self) -> SocketAddr {
        self.server.admin.expect("an admin listener")
    }

    fn metric(&self, name: &str, labels: &[&str]) -> f64 {
        let (_, body) = http(
            self.admin(),
            "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        );
        body.lines()
            .filter(|l| l.starts_with(name) && labels.iter().all(|x| l.contains(x)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    fn refused(&self, door: &str, limit: &str) -> f64 {
        self.metric(
            "autoscaled_door_refusals_total",
            &[&format!("door=\"{door}\""), &format!("limit=\"{limit}\"")],
        )
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// One HTTP/1.1 exchange (`head` without the final blank line; the connection closed after):
/// the status and the body.
fn http(addr: SocketAddr, head: &str) -> (u16, String) {
    http_with_body(addr, head, b"")
}

fn http_with_body(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(b"Connection: close\r\n\r\n").unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let status = raw
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_owned());
    (status, body)
}

/// A Connect JSON call: status and body.
fn connect(addr: SocketAddr, method: &str, json: &str, extra_headers: &str) -> (u16, String) {
    http_with_body(
        addr,
        &format!(
            "POST /autoscaled.v1.HorizontalAutoscaler/{method} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra_headers}",
            json.len()
        ),
        json.as_bytes(),
    )
}

/// A gRPC frame of `message`.
fn frame(message: &[u8]) -> Vec<u8> {
    let mut body = vec![0];
    body.extend(u32::try_from(message.len()).unwrap().to_be_bytes());
    body.extend(message);
    body
}

/// A gRPC call over a bare HTTP/2 connection: the body sent in pieces (`hold`: the last piece
/// never sent, the stream left open), the status answered.
async fn grpc(addr: SocketAddr, path: &str, pieces: Vec<Vec<u8>>, hold: bool) -> tonic::Status {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (response, mut send) = client.send_request(request, false).unwrap();
    let n = pieces.len();
    for (i, piece) in pieces.into_iter().enumerate() {
        send.reserve_capacity(piece.len());
        let _ = send.send_data(Bytes::from(piece), i + 1 == n && !hold);
    }
    let response = tokio::time::timeout(Duration::from_secs(20), response)
        .await
        .expect("an answer within 20 s")
        .unwrap();
    let headers = common::grpc_headers(response).await;
    drop(send);
    tonic::Status::from_header_map(&headers).expect("a grpc-status")
}

const RECOMMEND: &str = "/autoscaled.v1.HorizontalAutoscaler/Recommend";
const RECOMMEND_BATCH: &str = "/autoscaled.v1.HorizontalAutoscaler/RecommendBatch";

/// RecommendBatch probes of a door started with `--max-batch-requests 3 --max-pods 10`:
/// (requests, pods in each, what a refusal names; `None`: answered). Over the count; over
/// max_pods together (6 + 6: a batch's pods count as one request's); within both.
const BATCH_PROBES: [(usize, usize, Option<&[&str]>); 3] = [
    (4, 0, Some(&["requests", "max_batch_requests"])),
    (2, 6, Some(&["requests[].pods", "max_pods"])),
    (3, 3, None),
];

/// A RecommendBatch of `requests` requests of `pods` (empty) pods each.
fn batch_request(requests: usize, pods: usize) -> Vec<u8> {
    let one = pb::RecommendRequest::decode(pods_request(pods).as_slice()).unwrap();
    pb::RecommendBatchRequest {
        requests: vec![one; requests],
    }
    .encode_to_vec()
}

/// [`batch_request`] in proto3 JSON.
fn batch_json(requests: usize, pods: usize) -> String {
    let pods = vec!["{}"; pods].join(",");
    let one = format!(
        "{{\"targetKey\":\"doors/x\",\"currentReplicas\":1,\"spec\":{{\"maxReplicas\":4}},\"pods\":[{pods}]}}"
    );
    format!("{{\"requests\":[{}]}}", vec![one; requests].join(","))
}

fn pods_request(n: usize) -> Vec<u8> {
    pb::RecommendRequest {
        target_key: "doors/x".into(),
        current_replicas: 1,
        spec: Some(pb::HorizontalSpec {
            max_replicas: 4,
            ..Default::default()
        }),
        pods: vec![pb::PodSample::default(); n],
        ..Default::default()
    }
    .encode_to_vec()
}

/// Whether the peer closed `stream` (EOF or a reset) within `within`.
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 4096];
    let end = Instant::now() + within;
    while Instant::now() < end {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
    false
}

/// At the cap, a new connection makes an idle one go (and is served).
fn connections(addr: SocketAddr, cap: usize, door: &Door, name: &str, probe: impl Fn()) {
    let mut idle: Vec<TcpStream> = (0..cap)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(400));
    probe();
    let closed = idle
        .iter_mut()
        .filter_map(|s| closed_within(s, Duration::from_millis(300)).then_some(()))
        .count();
    assert!(
        closed >= 1,
        "{name}: no idle connection made room at the cap"
    );
    assert!(
        door.refused(name, "evicted") >= 1.0,
        "{name}: evictions not counted"
    );
}

/// A client that pipelines requests and never reads: the write timeout closes it.
async fn write_timeout(addr: SocketAddr, request: &str, count: usize, door: &Door, name: &str) {
    let before = door.refused(name, "write_timeout");
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    let all = request.repeat(count);
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncWriteExt::write_all(&mut stream, all.as_bytes()),
    )
    .await;
    let end = Instant::now() + Duration::from_secs(10);
    while door.refused(name, "write_timeout") <= before {
        assert!(
            Instant::now() < end,
            "{name}: a client that never reads was not closed by the write timeout"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(stream);
}

/// Partial headers: closed by the header timeout (and not before `at_least`).
fn header_timeout(addr: SocketAddr, at_least: Duration, within: Duration, name: &str) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .unwrap();
    let started = Instant::now();
    assert!(
        closed_within(&mut s, within),
        "{name}: headers that never end were not cut within {within:?}"
    );
    assert!(started.elapsed() >= at_least, "{name}: cut too early");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_limit_of_every_door() {
    let door = start(&["--health-listen", "127.0.0.1:0"]);
    let capped = start(&["--max-connections", "8"]);
    let dir = tempfile::tempdir().unwrap();
    let token = "doors-test-token";
    let authz = dir.path().join("authz.toml");
    let hash: String = ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    std::fs::write(
        &authz,
        format!("[[rule]]\nidentity = \"t\"\nverbs = [\"recommend\", \"read\"]\nprefixes = [\"doors/\"]\n[[token]]\nidentity = \"t\"\nsha256 = \"{hash}\"\n"),
    )
    .unwrap();
    let secured = start(&["--authz", authz.to_str().unwrap()]);

    // The slow one first, beside the others: the main listener's HTTP/1.1 header timeout is
    // hyper's 30 s.
    let main_addr = door.addr();
    let slow = std::thread::spawn(move || {
        header_timeout(
            main_addr,
            Duration::from_secs(20),
            Duration::from_secs(40),
            "connect",
        );
    });

    let mut probed: Vec<(&str, &str)> = Vec::new();
    for row in autoscaled::doors::LIMITS {
        for &name in row.doors {
            match (row.limit, name) {
                ("connections", "grpc") => {
                    let addr = capped.addr();
                    connections(addr, 8, &capped, "grpc", || {
                        let (status, _) = http(addr, "GET /nope HTTP/1.1\r\nHost: 127.0.0.1\r\n");
                        assert_eq!(status, 404, "a new client at the cap was not served");
                    });
                }
                ("connections", "admin") => {
                    let admin = door.admin();
                    connections(admin, 64, &door, "admin", || {
                        let (status, _) =
                            http(admin, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n");
                        assert_eq!(status, 200, "a probe at the cap was not served");
                    });
                }
                ("connections", "health") => {
                    let health = door.health.unwrap();
                    connections(health, 256, &door, "health", || {
                        let mut tcp = TcpStream::connect(health).unwrap();
                        tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
                        assert!(!closed_within(&mut tcp, Duration::from_millis(200)));
                    });
                }
                ("write_timeout", "grpc") => {
                    write_timeout(
                        door.addr(),
                        "GET /nope HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                        50_000,
                        &door,
                        "grpc",
                    )
                    .await;
                }
                ("write_timeout", "admin") => {
                    write_timeout(
                        door.admin(),
                        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                        20_000,
                        &door,
                        "admin",
                    )
                    .await;
                }
                ("header_timeout", "connect") => {} // the thread above
                ("header_timeout", "admin") => {
                    header_timeout(
                        door.admin(),
                        Duration::from_secs(3),
                        Duration::from_secs(10),
                        "admin",
                    );
                }
                ("body_timeout", "grpc") => {
                    let body = frame(&pods_request(1));
                    let status =
                        grpc(door.addr(), RECOMMEND, vec![body[..10].to_vec()], true).await;
                    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
                    assert!(
                        status.message().contains("request-body-timeout"),
                        "{status:?}"
                    );
                }
                ("body_timeout", "connect") => {
                    let mut s = TcpStream::connect(door.addr()).unwrap();
                    s.write_all(format!("POST {RECOMMEND} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"targ").as_bytes()).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    let mut raw = vec![0u8; 4096];
                    let n = s.read(&mut raw).unwrap();
                    let raw = String::from_utf8_lossy(&raw[..n]);
                    assert!(raw.starts_with("HTTP/1.1 504"), "{raw}");
                    assert!(raw.contains("request-body-timeout"), "{raw}");
                }
                ("body_timeout", "admin") => {
                    let mut s = TcpStream::connect(door.admin()).unwrap();
                    s.write_all(b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nSec-Fetch-Site: same-origin\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 4000\r\n\r\ntoken=").unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
                    let mut raw = vec![0u8; 4096];
                    let n = s.read(&mut raw).unwrap();
                    let raw = String::from_utf8_lossy(&raw[..n]);
                    assert!(raw.starts_with("HTTP/1.1 408"), "{raw}");
                }
                ("message_bytes", "grpc") => {
                    let status = grpc(
                        door.addr(),
                        RECOMMEND,
                        vec![frame(&vec![0u8; 70_000])],
                        false,
                    )
                    .await;
                    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
                }
                ("message_bytes", "connect") => {
                    let big = format!("{{\"targetKey\":\"{}\"}}", "x".repeat(70_000));
                    let (status, body) = connect(door.addr(), "Recommend", &big, "");
                    assert_eq!(status, 429, "{body}");
                    assert!(body.contains("max-message-bytes"), "{body}");
                }
                ("message_bytes", "admin") => {
                    let form = format!("token={}", "a".repeat(5000));
                    let (status, body) = http_with_body(
                        door.admin(),
                        &format!(
                            "POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nSec-Fetch-Site: same-origin\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
                            form.len()
                        ),
                        form.as_bytes(),
                    );
                    assert_eq!(status, 400, "{body}");
                    assert!(body.contains("too large"), "{body}");
                }
                ("max_pods", "grpc") => {
                    let status = grpc(
                        door.addr(),
                        RECOMMEND,
                        vec![frame(&pods_request(11))],
                        false,
                    )
                    .await;
                    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
                    assert!(status.message().contains("max_pods"), "{status:?}");
                }
                ("max_pods", "connect") => {
                    let pods = ["{}"; 11].join(",");
                    let json = format!(
                        "{{\"targetKey\":\"doors/x\",\"currentReplicas\":1,\"spec\":{{\"maxReplicas\":4}},\"pods\":[{pods}]}}"
                    );
                    let (status, body) = connect(door.addr(), "Recommend", &json, "");
                    assert_eq!(status, 429, "{body}");
                    assert!(
                        body.contains("\"pods\"") && body.contains("max_pods"),
                        "{body}"
                    );
                    // The same as binary Connect.
                    let proto = pods_request(11);
                    let (status, _) = http_with_body(
                        door.addr(),
                        &format!(
                            "POST {RECOMMEND} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/proto\r\nContent-Length: {}\r\n",
                            proto.len()
                        ),
                        &proto,
                    );
                    assert_eq!(status, 429);
                }
                ("max_batch_requests", "grpc") => {
                    for (requests, pods, named) in BATCH_PROBES {
                        let batch = frame(&batch_request(requests, pods));
                        let status = grpc(door.addr(), RECOMMEND_BATCH, vec![batch], false).await;
                        match named {
                            Some(named) => {
                                assert_eq!(status.code(), tonic::Code::ResourceExhausted);
                                assert!(
                                    named.iter().all(|n| status.message().contains(n)),
                                    "{status:?}"
                                );
                            }
                            None => assert_eq!(status.code(), tonic::Code::Ok, "{status:?}"),
                        }
                    }
                }
                ("max_batch_requests", "connect") => {
                    for (requests, pods, named) in BATCH_PROBES {
                        let json = batch_json(requests, pods);
                        let (status, body) = connect(door.addr(), "RecommendBatch", &json, "");
                        match named {
                            Some(named) => {
                                assert_eq!(status, 429, "{body}");
                                assert!(named.iter().all(|n| body.contains(n)), "{body}");
                            }
                            None => {
                                assert_eq!(status, 200, "{body}");
                                let answer: serde_json::Value =
                                    serde_json::from_str(&body).unwrap();
                                let results = answer["results"].as_array().map(Vec::len);
                                assert_eq!(results, Some(requests), "{body}");
                            }
                        }
                    }
                    // The same as binary Connect.
                    let proto = batch_request(4, 0);
                    let (status, _) = http_with_body(
                        door.addr(),
                        &format!(
                            "POST {RECOMMEND_BATCH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/proto\r\nContent-Length: {}\r\n",
                            proto.len()
                        ),
                        &proto,
                    );
                    assert_eq!(status, 429);
                }
                ("buffered_bytes", "grpc") => {
                    let body = frame(&vec![0u8; 64_000]);
                    let addr = door.addr();
                    let first = body[..60_000].to_vec();
                    let holder =
                        tokio::spawn(async move { grpc(addr, RECOMMEND, vec![first], true).await });
                    tokio::time::sleep(Duration::from_millis(150)).await;
                    let status = grpc(addr, RECOMMEND, vec![body[..60_000].to_vec()], true).await;
                    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
                    assert!(
                        status.message().contains("request bodies in memory"),
                        "{status:?}"
                    );
                    assert!(
                        status.metadata().contains_key("grpc-retry-pushback-ms"),
                        "{status:?}"
                    );
                    let _ = holder.await;
                }
                ("buffered_bytes", "connect") => {
                    let head = format!(
                        "POST {RECOMMEND} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 64000\r\n\r\n"
                    );
                    let mut first = TcpStream::connect(door.addr()).unwrap();
                    first.write_all(head.as_bytes()).unwrap();
                    first.write_all(&vec![b' '; 60_000]).unwrap();
                    std::thread::sleep(Duration::from_millis(150));
                    let mut second = TcpStream::connect(door.addr()).unwrap();
                    second.write_all(head.as_bytes()).unwrap();
                    let _ = second.write_all(&vec![b' '; 60_000]);
                    second
                        .set_read_timeout(Some(Duration::from_secs(10)))
                        .unwrap();
                    let mut raw = vec![0u8; 4096];
                    let n = second.read(&mut raw).unwrap_or(0);
                    let raw = String::from_utf8_lossy(&raw[..n]);
                    assert!(raw.starts_with("HTTP/1.1 429"), "{raw}");
                    assert!(raw.contains("request bodies in memory"), "{raw}");
                    // The shedding's retry delay, as gRPC's `grpc-retry-pushback-ms` carries
                    // it, in whole seconds.
                    assert!(
                        raw.to_ascii_lowercase().contains("\r\nretry-after: 1\r\n"),
                        "{raw}"
                    );
                    drop(first);
                }
                ("authentication", "grpc") => {
                    let status = grpc(
                        secured.addr(),
                        RECOMMEND,
                        vec![frame(&pods_request(1))],
                        false,
                    )
                    .await;
                    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
                }
                ("authentication", "connect") => {
                    let (status, _) = connect(secured.addr(), "ListTargets", "{}", "");
                    assert_eq!(status, 401);
                    let bearer = format!("Authorization: Bearer {token}\r\n");
                    let (status, _) = connect(secured.addr(), "ListTargets", "{}", &bearer);
                    assert_eq!(status, 200);
                    // A batch is authorized request by request, before any is decided: one
                    // target outside the caller's prefixes refuses it whole.
                    let batch = r#"{"requests":[{"targetKey":"doors/batch","currentReplicas":1,"spec":{"maxReplicas":4}},{"targetKey":"elsewhere/x","currentReplicas":1,"spec":{"maxReplicas":4}}]}"#;
                    let (status, body) = connect(secured.addr(), "RecommendBatch", batch, &bearer);
                    assert_eq!(status, 403, "{body}");
                    assert!(
                        body.contains("requests[1]") && body.contains("elsewhere/x"),
                        "{body}"
                    );
                    let (_, body) = connect(secured.addr(), "ListTargets", "{}", &bearer);
                    assert!(!body.contains("doors/batch"), "{body}");
                }
                ("authentication", "admin") => {
                    let (status, _) =
                        http(secured.admin(), "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n");
                    assert_eq!(status, 303, "the console asks for a login first");
                }
                ("host", "connect") => {
                    let (status, body) = http_with_body(
                        door.addr(),
                        "POST /autoscaled.v1.HorizontalAutoscaler/ListTargets HTTP/1.1\r\nHost: rebound.example:50051\r\nContent-Type: application/json\r\nContent-Length: 2\r\n",
                        b"{}",
                    );
                    assert_eq!(status, 403, "{body}");
                    assert!(body.contains("allowed-hosts"), "{body}");
                    let (status, _) = connect(door.addr(), "ListTargets", "{}", "");
                    assert_eq!(status, 200);
                    assert!(
                        door.refused("grpc", "host") == 0.0 || door.refused("admin", "host") >= 0.0
                    );
                }
                ("host", "admin") => {
                    let (status, _) = http(
                        door.admin(),
                        "GET / HTTP/1.1\r\nHost: rebound.example:9090\r\n",
                    );
                    assert_eq!(status, 403);
                    let (status, _) =
                        http(door.admin(), "GET / HTTP/1.1\r\nHost: localhost:9090\r\n");
                    assert_eq!(status, 200);
                }
                ("metrics_and_refusal_log", "grpc") => {
                    let before = door.metric(
                        "autoscaled_grpc_requests_total",
                        &["Recommend", "code=\"3\""],
                    );
                    let status = grpc(
                        door.addr(),
                        RECOMMEND,
                        vec![frame(&pb::RecommendRequest::default().encode_to_vec())],
                        false,
                    )
                    .await;
                    assert_eq!(status.code(), tonic::Code::InvalidArgument);
                    let after = door.metric(
                        "autoscaled_grpc_requests_total",
                        &["Recommend", "code=\"3\""],
                    );
                    assert_eq!(after - before, 1.0);
                }
                ("metrics_and_refusal_log", "connect") => {
                    let before = door.metric(
                        "autoscaled_grpc_requests_total",
                        &["Recommend", "code=\"3\""],
                    );
                    let (status, _) = connect(door.addr(), "Recommend", "{\"targetKey\": 5}", "");
                    assert_eq!(status, 400);
                    let after = door.metric(
                        "autoscaled_grpc_requests_total",
                        &["Recommend", "code=\"3\""],
                    );
                    assert_eq!(
                        after - before,
                        1.0,
                        "a Connect refusal is counted as gRPC's are"
                    );
                    let unknown =
                        door.metric("autoscaled_grpc_requests_total", &["method=\"unknown\""]);
                    let (status, _) = connect(door.addr(), "Nope", "{}", "");
                    assert_eq!(status, 404);
                    assert_eq!(
                        door.metric("autoscaled_grpc_requests_total", &["method=\"unknown\""])
                            - unknown,
                        1.0
                    );
                    let end = Instant::now() + Duration::from_secs(5);
                    while !door.log().lines().any(|l| {
                        l.contains("call refused")
                            && l.contains("Recommend")
                            && l.contains("peer=127.0.0.1:")
                    }) {
                        assert!(Instant::now() < end, "no refusal line: {}", door.log());
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
                (limit, name) => panic!("no probe for limit {limit:?} on door {name:?}: write one"),
            }
            probed.push((row.limit, name));
        }
    }
    slow.join().expect("the main listener's header timeout");
    eprintln!("probed {} (limit, door) pairs: {probed:?}", probed.len());
}

/// Waits until the admin listener says the server is ready (the console's API installed: the
/// listening lines come a moment before).
fn ready(admin: SocketAddr) {
    let end = Instant::now() + Duration::from_secs(10);
    while http(admin, "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n").0 != 200 {
        assert!(Instant::now() < end, "not ready");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One HTTP/1.1 exchange, the whole answer (status line, headers and body).
fn raw_exchange(addr: SocketAddr, head: &str, body: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(b"Connection: close\r\n\r\n").unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    String::from_utf8_lossy(&raw).into_owned()
}

/// The console's sessions: a login is taken only from the console's own page (a same-origin
/// `Origin` or `Sec-Fetch-Site`; `Origin: null`, another site's form and a client that says
/// neither are refused); the cookie holds an opaque id, never the token, and is `Secure` when
/// a proxy says the request came over TLS; the id opens the console until the logout ends it
/// on the server. Logins trickled a byte at a time do not lock anyone out: they are read
/// before the render permit is taken, and cut at the admin listener's body timeout.
#[test]
fn console_sessions_are_opaque_same_origin_and_end_at_logout() {
    let dir = tempfile::tempdir().unwrap();
    let token = "console-session-token";
    let authz = dir.path().join("authz.toml");
    std::fs::write(
        &authz,
        format!(
            "[[rule]]\nidentity = \"t\"\nverbs = [\"read\"]\nprefixes = [\"doors/\"]\n[[token]]\nidentity = \"t\"\nsha256 = \"{}\"\n",
            autoscaled::auth::policy::sha256_hex(token.as_bytes())
        ),
    )
    .unwrap();
    let door = start(&["--authz", authz.to_str().unwrap()]);
    let admin = door.admin();
    ready(admin);
    let host = format!("127.0.0.1:{}", admin.port());
    let form = format!("token={token}");
    let login = |headers: &str| {
        raw_exchange(
            admin,
            &format!(
                "POST /login HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n{headers}",
                form.len()
            ),
            form.as_bytes(),
        )
    };
    for (refused, headers) in [
        ("no Origin", ""),
        ("Origin: null", "Origin: null\r\n"),
        ("another site", "Origin: http://evil.example\r\n"),
        ("cross-site fetch", "Sec-Fetch-Site: cross-site\r\n"),
    ] {
        let answer = login(headers);
        assert!(answer.starts_with("HTTP/1.1 403"), "{refused}: {answer}");
        assert!(!answer.contains("Set-Cookie") && !answer.contains("set-cookie"));
    }

    let cookie_of = |answer: &str| -> String {
        answer
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
            .unwrap_or_else(|| panic!("no cookie: {answer}"))
            .to_owned()
    };
    let answer = login(&format!("Origin: http://{host}\r\n"));
    assert!(answer.starts_with("HTTP/1.1 303"), "{answer}");
    let set = cookie_of(&answer);
    assert!(!set.contains(token), "the cookie holds the token: {set}");
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert!(!set.contains("Secure"), "plain HTTP, no proxy: {set}");
    let id = set
        .split_once("autoscaled_session=")
        .and_then(|(_, rest)| rest.split(';').next())
        .unwrap()
        .to_owned();
    assert!(id.len() >= 32, "a guessable session id: {id}");

    let behind_tls = login("Sec-Fetch-Site: same-origin\r\nX-Forwarded-Proto: https\r\n");
    assert!(cookie_of(&behind_tls).contains("Secure"), "{behind_tls}");

    let page = |cookie: &str| {
        raw_exchange(
            admin,
            &format!("GET / HTTP/1.1\r\nHost: {host}\r\nCookie: autoscaled_session={cookie}\r\n"),
            b"",
        )
    };
    assert!(
        page(&id).starts_with("HTTP/1.1 200"),
        "the session opens the console"
    );
    assert!(
        page("forged").starts_with("HTTP/1.1 303"),
        "an unknown id is sent to the login"
    );
    assert!(
        page(token).starts_with("HTTP/1.1 303"),
        "the token itself is not a session"
    );
    let out = raw_exchange(
        admin,
        &format!(
            "POST /logout HTTP/1.1\r\nHost: {host}\r\nCookie: autoscaled_session={id}\r\nContent-Length: 0\r\n"
        ),
        b"",
    );
    assert!(cookie_of(&out).contains("Max-Age=0"), "{out}");
    assert!(
        page(&id).starts_with("HTTP/1.1 303"),
        "the session outlived the logout"
    );

    // Eight logins trickled a byte at a time: the console still answers at once, and each of
    // them is cut at the admin listener's body timeout (5 s) with 408.
    let trickles: Vec<_> = (0..8)
        .map(|_| {
            let host = host.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(admin).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                write!(
                    s,
                    "POST /login HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\nContent-Length: 4000\r\n\r\ntoken="
                )
                .unwrap();
                let started = Instant::now();
                let mut answer = Vec::new();
                let mut byte = [0u8; 1];
                loop {
                    if s.write_all(b"x").is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                    s.set_nonblocking(true).unwrap();
                    let got = s.read(&mut byte);
                    s.set_nonblocking(false).unwrap();
                    match got {
                        Ok(0) => break,
                        Ok(_) => {
                            answer.push(byte[0]);
                            let _ = s.read_to_end(&mut answer);
                            break;
                        }
                        Err(_) if started.elapsed() > Duration::from_secs(15) => break,
                        Err(_) => {}
                    }
                }
                (started.elapsed(), String::from_utf8_lossy(&answer).into_owned())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let served = page(&{
        let again = login(&format!("Origin: http://{host}\r\n"));
        cookie_of(&again)
            .split_once("autoscaled_session=")
            .and_then(|(_, rest)| rest.split(';').next())
            .unwrap()
            .to_owned()
    });
    assert!(
        served.starts_with("HTTP/1.1 200"),
        "locked out by trickled logins: {served}"
    );
    eprintln!(
        "the console served during 8 trickled logins in {:?}",
        started.elapsed()
    );
    for t in trickles {
        let (took, answer) = t.join().unwrap();
        assert!(
            took < Duration::from_secs(10),
            "a trickled login held {took:?}"
        );
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    }
    assert!(door.refused("admin", "body_timeout") >= 8.0);
}

/// Policies and groups are limited per identity (count and bytes), so one tenant filling its
/// quota leaves another's untouched: team-a's sixth group and policy are RESOURCE_EXHAUSTED
/// naming the flag, team-b's first ones are stored; an update of one it holds still passes;
/// a definition over the byte budget is refused whatever the count.
#[test]
fn groups_and_policies_are_limited_per_identity() {
    let dir = tempfile::tempdir().unwrap();
    let authz = dir.path().join("authz.toml");
    let hash = autoscaled::auth::policy::sha256_hex;
    std::fs::write(
        &authz,
        format!(
            "[[rule]]\nidentity = \"a\"\nverbs = [\"recommend\", \"read\", \"configure\", \"delete\"]\nprefixes = [\"team-a/\"]\n\
             [[rule]]\nidentity = \"b\"\nverbs = [\"recommend\", \"read\", \"configure\", \"delete\"]\nprefixes = [\"team-b/\"]\n\
             [[token]]\nidentity = \"a\"\nsha256 = \"{}\"\n[[token]]\nidentity = \"b\"\nsha256 = \"{}\"\n",
            hash(b"token-a"),
            hash(b"token-b")
        ),
    )
    .unwrap();
    let door = start(&[
        "--authz",
        authz.to_str().unwrap(),
        "--max-groups-per-identity",
        "5",
        "--max-policies-per-identity",
        "5",
        "--max-fleet-bytes-per-identity",
        "4096",
    ]);
    let as_ = |who: &str| format!("Authorization: Bearer token-{who}\r\n");
    let group = |name: &str, prefixes: &[String]| {
        format!(
            "{{\"group\":{{\"name\":\"{name}\",\"capacity\":5,\"memberPrefixes\":{}}}}}",
            serde_json::to_string(prefixes).unwrap()
        )
    };
    let policy = |name: &str| {
        format!("{{\"policy\":{{\"name\":\"{name}\",\"spec\":{{\"maxReplicas\":5}}}}}}")
    };
    for i in 0..5 {
        let name = format!("team-a/g{i}");
        let (status, body) = connect(
            door.addr(),
            "PutScalingGroup",
            &group(&name, &[format!("{name}/")]),
            &as_("a"),
        );
        assert_eq!(status, 200, "{body}");
        let (status, body) = connect(
            door.addr(),
            "PutPolicy",
            &policy(&format!("team-a/p{i}")),
            &as_("a"),
        );
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = connect(
        door.addr(),
        "PutScalingGroup",
        &group("team-a/g5", &["team-a/g5/".into()]),
        &as_("a"),
    );
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("--max-groups-per-identity"), "{body}");
    let (status, body) = connect(door.addr(), "PutPolicy", &policy("team-a/p5"), &as_("a"));
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("--max-policies-per-identity"), "{body}");
    // An update of a group it holds is not a new one.
    let (status, body) = connect(
        door.addr(),
        "PutScalingGroup",
        &group("team-a/g0", &["team-a/g0/".into(), "team-a/more/".into()]),
        &as_("a"),
    );
    assert_eq!(status, 200, "{body}");

    // team-b is not held by team-a's quota.
    let (status, body) = connect(
        door.addr(),
        "PutScalingGroup",
        &group("team-b/g0", &["team-b/g0/".into()]),
        &as_("b"),
    );
    assert_eq!(status, 200, "team-b held by team-a's groups: {body}");
    let (status, body) = connect(door.addr(), "PutPolicy", &policy("team-b/p0"), &as_("b"));
    assert_eq!(status, 200, "team-b held by team-a's policies: {body}");

    // Bytes: 40 prefixes of 100 bytes exceed team-b's 4,096 whatever its count.
    let long: Vec<String> = (0..40)
        .map(|i| format!("team-b/{i:03}/{}/", "x".repeat(90)))
        .collect();
    let (status, body) = connect(
        door.addr(),
        "PutScalingGroup",
        &group("team-b/big", &long),
        &as_("b"),
    );
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("--max-fleet-bytes-per-identity"), "{body}");
    let (status, body) = connect(
        door.addr(),
        "GetScalingGroup",
        "{\"name\":\"team-b/big\"}",
        &as_("b"),
    );
    assert_eq!(status, 404, "a refused group was stored: {body}");
}

/// `docs/security.md`'s table of the limits of every door is this table, rendered: a limit
/// added to the code without its line in the documentation fails here.
#[test]
fn the_security_guide_lists_every_limit_of_every_door() {
    let doors = ["grpc", "connect", "admin", "health"];
    let mut table = format!(
        "| limit | setting | {} |\n|---|---|{}\n",
        doors.join(" | "),
        "---|".repeat(doors.len())
    );
    for row in autoscaled::doors::LIMITS {
        let marks: Vec<&str> = doors
            .iter()
            .map(|d| if row.doors.contains(d) { "✓" } else { "" })
            .collect();
        table.push_str(&format!(
            "| `{}` | {} | {} |\n",
            row.limit,
            row.setting,
            marks.join(" | ")
        ));
    }
    let guide =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/security.md")).unwrap();
    let section = guide
        .split("<!-- limits-table:begin -->\n")
        .nth(1)
        .and_then(|rest| rest.split("<!-- limits-table:end -->").next())
        .expect("docs/security.md has the limits-table markers");
    assert_eq!(
        section, table,
        "docs/security.md's limits table is stale; it should read:\n{table}"
    );
}

/// A caller reloading the console in a loop costs one render every 2 s, not one a request:
/// twenty reloads of the fleet read the targets (ListTargets) at most twice.
#[test]
fn the_console_renders_a_page_once_for_a_caller_reloading_it() {
    let door = start(&[]);
    let admin = door.admin();
    ready(admin);
    let listed = || {
        door.metric(
            "autoscaled_grpc_requests_total",
            &["method=\"/autoscaled.v1.HorizontalAutoscaler/ListTargets\""],
        )
    };
    let before = listed();
    let started = Instant::now();
    for _ in 0..20 {
        let (status, body) = http(admin, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("id=counts"), "{body}");
    }
    let took = started.elapsed();
    let renders = listed() - before;
    assert!(
        renders >= 1.0 && renders <= 1.0 + (took.as_secs_f64() / 2.0).ceil(),
        "{renders} renders in {took:?}"
    );
}
