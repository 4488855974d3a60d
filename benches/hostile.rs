//! The hostile run: `HOSTILE_REQUESTS` (default 1,000,000) requests against the real binary
//! (default flags, `--metrics-listen`), spread over its three doors, while slow and half-open
//! connections come and go beside them:
//!
//! * gRPC (HTTP/2): Recommends whose bodies are valid, mutated (bytes flipped, inserted, cut)
//!   or random, frames that lie about their length, other methods with random bodies;
//! * Connect (HTTP/1.1 keep-alive): the same as proto3 JSON and as `application/proto`,
//!   mutated JSON, random bodies under random content types and encodings;
//! * the admin listener: probes, `/metrics`, console pages with random paths and queries,
//!   logins with junk forms;
//! * raw garbage written to both ports;
//! * beside them, all the time: 200 connections that send half a request head and hold, 50
//!   that trickle a body a byte a second, 50 that open HTTP/2 and say nothing, 20 half-open on
//!   the admin listener.
//!
//! Checked at the end: the server is alive and serving; no request got INTERNAL (gRPC 13,
//! HTTP 500); every target the store lists was named by a call that was answered OK (nothing
//! stored for refused calls). Reported: the answers per door and code, the slow connections the
//! server closed, and the server's RSS (start, highest sampled every 100 ms, end, `VmHWM`).
//!
//! Then the tenants: with `--authz`, tenant B's Recommend latency (p50, p99) alone, while
//! tenant A fills its quota of scaling groups and policies (1 MiB of definitions), and after.
//!
//! `cargo bench --bench hostile`; `HOSTILE_REQUESTS`, `HOSTILE_SEED`. About 3–6 minutes on two
//! cores for 10⁶ requests. Exits non-zero when a check fails.

use std::{
    collections::{BTreeMap, HashSet},
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use autoscaled::pb::v1::{self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient};
use autoscaled_fixtures as fixtures;
use http_body_util::{BodyExt, Full};
use prost::{Message, bytes::Bytes};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use tonic::{codegen::http, transport::Channel};
use tower::ServiceExt;

#[path = "../tests/common/binary.rs"]
mod binary;

const H: &str = "/autoscaled.v1.HorizontalAutoscaler/";

/// A small, seeded generator (xorshift64*): the run is the same for the same seed.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    /// `body` with 1–8 mutations: a byte flipped, inserted or removed, or the body cut.
    fn mutate(&mut self, body: &[u8]) -> Vec<u8> {
        let mut out = body.to_vec();
        for _ in 0..1 + self.below(8) {
            if out.is_empty() {
                break;
            }
            let at = self.below(out.len());
            match self.below(4) {
                0 => out[at] ^= 1 << self.below(8),
                1 => out.insert(at, self.next() as u8),
                2 => {
                    out.remove(at);
                }
                _ => out.truncate(at),
            }
        }
        out
    }
}

/// Answers per (door, code), INTERNALs, and the keys of calls answered OK.
#[derive(Default)]
struct Tally {
    codes: Mutex<BTreeMap<(String, String), u64>>,
    internal: AtomicU64,
    done: AtomicU64,
    ok_keys: Mutex<HashSet<String>>,
}

impl Tally {
    fn count(&self, door: &str, code: String) {
        if code == "13" || code == "500" {
            self.internal.fetch_add(1, Ordering::Relaxed);
        }
        self.done.fetch_add(1, Ordering::Relaxed);
        *self
            .codes
            .lock()
            .unwrap()
            .entry((door.to_owned(), code))
            .or_default() += 1;
    }
}

fn framed(message: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend((message.len() as u32).to_be_bytes());
    out.extend(message);
    out
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// One gRPC call with `body` as is (framed or not): the grpc-status, or "transport".
async fn grpc(channel: &Channel, path: &str, body: Vec<u8>) -> String {
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("http://127.0.0.1{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", "10S")
        .body(tonic::body::Body::new(Full::new(Bytes::from(body))))
        .unwrap();
    let Ok(Ok(response)) =
        tokio::time::timeout(Duration::from_secs(20), channel.clone().oneshot(request)).await
    else {
        return "transport".into();
    };
    let (parts, body) = response.into_parts();
    let mut headers = parts.headers;
    if !headers.contains_key("grpc-status")
        && let Ok(collected) = body.collect().await
        && let Some(trailers) = collected.trailers()
    {
        headers.extend(trailers.clone());
    }
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .map_or_else(|| format!("http {}", parts.status.as_u16()), str::to_owned)
}

async fn grpc_worker(channel: Channel, mut rng: Rng, left: Arc<AtomicU64>, tally: Arc<Tally>) {
    let mut n = 0u64;
    while left
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1))
        .is_ok()
    {
        n += 1;
        let key = format!("hostile/g{}-{n}", rng.next() % 1_000_000);
        let valid = fixtures::at_target(&key, 1 + rng.below(12))
            .build()
            .encode_to_vec();
        let (path, message, frame) = match rng.below(10) {
            0 => (format!("{H}Recommend"), valid, true),
            1..=5 => (format!("{H}Recommend"), rng.mutate(&valid), true),
            6 => {
                let len = rng.below(300);
                (format!("{H}Recommend"), rng.bytes(len), true)
            }
            7 => {
                // A frame whose length lies (longer than what follows, or past the limit).
                let mut raw = framed(&valid);
                let lie = [raw.len() as u32 + 100, 64 << 20, u32::MAX][rng.below(3)];
                raw[1..5].copy_from_slice(&lie.to_be_bytes());
                (format!("{H}Recommend"), raw, false)
            }
            _ => {
                let methods = [
                    "GetHistory",
                    "PutScalingGroup",
                    "PutPolicy",
                    "ListTargets",
                    "ReportScale",
                    "Simulate",
                    "DeleteTarget",
                    "Nope",
                ];
                let len = rng.below(200);
                (
                    format!("{H}{}", methods[rng.below(methods.len())]),
                    rng.bytes(len),
                    true,
                )
            }
        };
        let body = if frame {
            framed(&message)
        } else {
            message.clone()
        };
        let code = grpc(&channel, &path, body).await;
        if code == "0"
            && path.ends_with("/Recommend")
            && let Ok(request) = pb::RecommendRequest::decode(message.as_slice())
        {
            tally.ok_keys.lock().unwrap().insert(request.target_key);
        }
        tally.count("grpc", code);
    }
}

/// An HTTP/1.1 keep-alive connection for the Connect and admin workers.
struct Http1 {
    addr: SocketAddr,
    sender: Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>>,
}

impl Http1 {
    /// Sends one request: the status (or "transport") and the body.
    async fn send(&mut self, request: http::Request<Full<Bytes>>) -> (String, Bytes) {
        if self.sender.as_ref().is_none_or(|s| s.is_closed()) {
            let Ok(tcp) = TcpStream::connect(self.addr).await else {
                return ("transport".into(), Bytes::new());
            };
            let Ok((sender, connection)) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await
            else {
                return ("transport".into(), Bytes::new());
            };
            tokio::spawn(connection);
            self.sender = Some(sender);
        }
        let sender = self.sender.as_mut().unwrap();
        if sender.ready().await.is_err() {
            self.sender = None;
            return ("transport".into(), Bytes::new());
        }
        let answer = tokio::time::timeout(Duration::from_secs(20), async {
            let response = sender.send_request(request).await.ok()?;
            let status = response.status().as_u16().to_string();
            let body = response.into_body().collect().await.ok()?.to_bytes();
            Some((status, body))
        })
        .await;
        match answer {
            Ok(Some(answer)) => answer,
            _ => {
                self.sender = None;
                ("transport".into(), Bytes::new())
            }
        }
    }
}

async fn connect_worker(addr: SocketAddr, mut rng: Rng, left: Arc<AtomicU64>, tally: Arc<Tally>) {
    let mut http1 = Http1 { addr, sender: None };
    let mut n = 0u64;
    while left
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1))
        .is_ok()
    {
        n += 1;
        let key = format!("hostile/c{}-{n}", rng.next() % 1_000_000);
        let request = fixtures::at_target(&key, 1 + rng.below(12)).build();
        let json = autoscaled_ctl::client::to_json(&request, "autoscaled.v1.RecommendRequest")
            .unwrap()
            .into_bytes();
        let proto = request.encode_to_vec();
        let (content_type, body, encoding) = match rng.below(10) {
            0 => ("application/json", json, None),
            1..=3 => ("application/json", rng.mutate(&json), None),
            4 => ("application/proto", proto, None),
            5 | 6 => ("application/proto", rng.mutate(&proto), None),
            7 => {
                let len = rng.below(300);
                let types = ["application/json", "text/plain", "application/grpc", ""];
                (types[rng.below(types.len())], rng.bytes(len), None)
            }
            8 => ("application/json", json, Some("gzip")),
            _ => {
                // Deep nesting, long strings, many keys: the JSON the scanner must bound.
                let depth = 1 + rng.below(10_000);
                let body = format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes();
                ("application/json", body, None)
            }
        };
        let mut builder = http::Request::builder()
            .method("POST")
            .uri(format!("{H}Recommend"))
            .header("host", "127.0.0.1");
        if !content_type.is_empty() {
            builder = builder.header("content-type", content_type);
        }
        if let Some(encoding) = encoding {
            builder = builder.header("content-encoding", encoding);
        }
        let (status, _) = http1
            .send(builder.body(Full::new(Bytes::from(body.clone()))).unwrap())
            .await;
        if status == "200" && encoding.is_none() {
            let key = if content_type == "application/proto" {
                pb::RecommendRequest::decode(body.as_slice())
                    .ok()
                    .map(|r| r.target_key)
            } else {
                serde_json::from_slice::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v["targetKey"].as_str().map(str::to_owned))
            };
            if let Some(key) = key {
                tally.ok_keys.lock().unwrap().insert(key);
            }
        }
        tally.count("connect", status);
    }
}

async fn admin_worker(addr: SocketAddr, mut rng: Rng, left: Arc<AtomicU64>, tally: Arc<Tally>) {
    let mut http1 = Http1 { addr, sender: None };
    let safe = b"abcdefghijklmnopqrstuvwxyz0123456789-_./%?=&";
    while left
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1))
        .is_ok()
    {
        let junk: String = (0..rng.below(60))
            .map(|_| safe[rng.below(safe.len())] as char)
            .collect();
        let (method, path, body) = match rng.below(8) {
            0 => ("GET", "/healthz".to_owned(), Vec::new()),
            1 => ("GET", "/readyz".to_owned(), Vec::new()),
            2 => ("GET", "/metrics".to_owned(), Vec::new()),
            3 => ("GET", format!("/targets/{junk}"), Vec::new()),
            4 => ("GET", format!("/?{junk}"), Vec::new()),
            5 => ("POST", "/login".to_owned(), {
                let len = rng.below(5000);
                rng.bytes(len)
            }),
            6 => ("GET", format!("/{junk}"), Vec::new()),
            _ => ("DELETE", format!("/{junk}"), Vec::new()),
        };
        let Ok(uri) = http::Uri::try_from(path) else {
            continue;
        };
        let request = http::Request::builder()
            .method(method)
            .uri(uri)
            .header("host", "127.0.0.1")
            .header("origin", "http://127.0.0.1")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let (status, _) = http1.send(request).await;
        tally.count("admin", status);
    }
}

/// Random bytes written to `addr`, read until the server closes (or 5 s).
async fn garbage_worker(
    addrs: [SocketAddr; 2],
    mut rng: Rng,
    left: Arc<AtomicU64>,
    tally: Arc<Tally>,
) {
    while left
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1))
        .is_ok()
    {
        let addr = addrs[rng.below(2)];
        let Ok(mut tcp) = TcpStream::connect(addr).await else {
            tally.count("garbage", "transport".into());
            continue;
        };
        let len = 1 + rng.below(2000);
        let _ = tcp.write_all(&rng.bytes(len)).await;
        let _ = tcp.shutdown().await;
        let mut sink = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut sink))
            .await
            .is_ok();
        let answer = String::from_utf8_lossy(&sink);
        let status = answer.split(' ').nth(1).unwrap_or("").to_owned();
        tally.count(
            "garbage",
            match (closed, status.len()) {
                (false, _) => "held".into(),
                (true, 3) => status,
                (true, _) => "closed".into(),
            },
        );
    }
}

/// Keeps `count` connections of one slow kind open against `addr` until `stop`; returns how
/// many the server closed.
async fn slow_kind(
    kind: &'static str,
    addr: SocketAddr,
    count: usize,
    stop: Arc<AtomicBool>,
) -> u64 {
    let closed = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..count)
        .map(|_| {
            let (stop, closed) = (Arc::clone(&stop), Arc::clone(&closed));
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut tcp) = TcpStream::connect(addr).await else {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    };
                    let opening: &[u8] = match kind {
                        "half-head" => b"POST /autoscaled.v1.HorizontalAutoscaler/Recommend HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                        "trickle" => b"POST /autoscaled.v1.HorizontalAutoscaler/Recommend HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{",
                        "h2-silent" => b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
                        _ => b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                    };
                    if tcp.write_all(opening).await.is_err() {
                        continue;
                    }
                    let mut byte = [0u8; 1024];
                    loop {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        if kind == "trickle" && tcp.write_all(b" ").await.is_err() {
                            closed.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                        // An answer (a 408 or a GOAWAY) is read on; a close ends this one.
                        let read =
                            tokio::time::timeout(Duration::from_secs(1), tcp.read(&mut byte)).await;
                        if let Ok(Ok(0) | Err(_)) = read {
                            closed.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
    closed.load(Ordering::Relaxed)
}

fn main() -> anyhow::Result<()> {
    let total: u64 = std::env::var("HOSTILE_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let seed: u64 = std::env::var("HOSTILE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut failed = Vec::new();
    runtime.block_on(hostile(total, seed, &mut failed))?;
    runtime.block_on(tenants(&mut failed))?;
    if failed.is_empty() {
        println!("hostile: every check passed");
        Ok(())
    } else {
        anyhow::bail!("hostile: {} check(s) failed: {failed:#?}", failed.len())
    }
}

async fn hostile(total: u64, seed: u64, failed: &mut Vec<String>) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut command = binary::command(&dir.path().join("data"));
    command.args(["--metrics-listen", "127.0.0.1:0"]);
    let mut server = binary::spawn(command);
    let (addr, admin) = (server.addr, server.admin.expect("an admin listener"));
    let pid = server.child.id();
    large_bodies(addr, pid).await;
    let rss_start = rss_kib(pid, "VmRSS:");
    let rss_max = Arc::new(AtomicU64::new(rss_start));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (rss_max, stop) = (Arc::clone(&rss_max), Arc::clone(&stop));
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                rss_max.fetch_max(rss_kib(pid, "VmRSS:"), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let slow: Vec<_> = [
        ("half-head", addr, 200),
        ("trickle", addr, 50),
        ("h2-silent", addr, 50),
        ("admin-half", admin, 20),
    ]
    .into_iter()
    .map(|(kind, at, count)| {
        let stop = Arc::clone(&stop);
        (kind, tokio::spawn(slow_kind(kind, at, count, stop)))
    })
    .collect();

    let tally = Arc::new(Tally::default());
    // The share of each door: 45 % gRPC, 40 % Connect, 13 % admin, 2 % raw garbage.
    let shares = [
        (45 * total / 100, "grpc"),
        (40 * total / 100, "connect"),
        (13 * total / 100, "admin"),
        (total - 98 * total / 100, "garbage"),
    ];
    let started = Instant::now();
    let mut workers = Vec::new();
    let mut rng = Rng(seed | 1);
    let channels = [
        tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
            .connect()
            .await?,
        tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
            .connect()
            .await?,
    ];
    for (count, door) in shares {
        let left = Arc::new(AtomicU64::new(count));
        let tasks = match door {
            "grpc" => 32,
            "connect" => 16,
            "admin" => 8,
            _ => 4,
        };
        for t in 0..tasks {
            let (left, tally) = (Arc::clone(&left), Arc::clone(&tally));
            let worker_rng = Rng(rng.next() | 1);
            workers.push(match door {
                "grpc" => tokio::spawn(grpc_worker(
                    channels[t % 2].clone(),
                    worker_rng,
                    left,
                    tally,
                )),
                "connect" => tokio::spawn(connect_worker(addr, worker_rng, left, tally)),
                "admin" => tokio::spawn(admin_worker(admin, worker_rng, left, tally)),
                _ => tokio::spawn(garbage_worker([addr, admin], worker_rng, left, tally)),
            });
        }
    }
    let progress = {
        let (tally, stop) = (Arc::clone(&tally), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut last = 0;
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_secs(30)).await;
                let done = tally.done.load(Ordering::Relaxed);
                println!(
                    "  {:>4.0} s: {done} of {total} ({:.0}/s in the last 30 s), RSS {} MiB",
                    started.elapsed().as_secs_f64(),
                    (done - last) as f64 / 30.0,
                    rss_kib(pid, "VmRSS:") / 1024
                );
                last = done;
            }
        })
    };
    for worker in workers {
        worker.await?;
    }
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut closed = Vec::new();
    for (kind, task) in slow {
        closed.push((kind, task.await?));
    }
    sampler.await?;
    progress.abort();

    println!(
        "hostile: {total} requests in {:.0} s ({:.0}/s) across gRPC, Connect, admin and raw garbage",
        took.as_secs_f64(),
        total as f64 / took.as_secs_f64()
    );
    for ((door, code), n) in tally.codes.lock().unwrap().iter() {
        println!("  {door:>8} {code:>10}: {n}");
    }
    println!("  slow connections the server closed: {closed:?}");

    // Alive and serving.
    if server.child.try_wait()?.is_some() {
        failed.push("the server exited".into());
        return Ok(());
    }
    let mut client = HorizontalAutoscalerClient::new(channels[0].clone());
    if client
        .recommend(fixtures::at_target("hostile/after", 3).build())
        .await
        .is_err()
    {
        failed.push("a valid Recommend after the run failed".into());
    }
    tally.ok_keys.lock().unwrap().insert("hostile/after".into());
    let internal = tally.internal.load(Ordering::Relaxed);
    if internal > 0 {
        failed.push(format!("{internal} INTERNAL answers"));
    }
    // Nothing stored for refused calls: every listed target was named by an OK call.
    let ok_keys = tally.ok_keys.lock().unwrap().clone();
    let mut token = String::new();
    let (mut listed, mut strays) = (0u64, Vec::new());
    loop {
        let page = client
            .list_targets(pb::ListTargetsRequest {
                page_size: 1000,
                page_token: token,
                ..Default::default()
            })
            .await?
            .into_inner();
        for key in page.target_keys {
            listed += 1;
            if !ok_keys.contains(&key) && strays.len() < 10 {
                strays.push(key);
            }
        }
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    println!(
        "  stored targets: {listed}; calls answered OK named {} keys",
        ok_keys.len()
    );
    if !strays.is_empty() {
        failed.push(format!("stored without an OK answer: {strays:?}"));
    }
    println!(
        "  server RSS: {} MiB at start, {} MiB the highest sampled, {} MiB at the end, VmHWM {} MiB",
        rss_start / 1024,
        rss_max.load(Ordering::Relaxed) / 1024,
        rss_kib(pid, "VmRSS:") / 1024,
        rss_kib(pid, "VmHWM:") / 1024
    );
    server.terminate();
    Ok(())
}

/// The review's first attack: Recommends of millions of empty pods, the largest body each
/// door takes (4 MiB over gRPC, the default --max-message-bytes; 7 MiB over Connect, past it),
/// and the server's peak RSS after each: a Connect call must cost no more than a gRPC one.
async fn large_bodies(addr: SocketAddr, pid: u32) {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let empty_pods = |bytes: usize| {
        let mut message = pb::RecommendRequest {
            target_key: "hostile/large".into(),
            ..Default::default()
        }
        .encode_to_vec();
        // Field 5 (pods), length 0: two bytes an empty pod.
        while message.len() + 2 <= bytes {
            message.extend([0x2a, 0x00]);
        }
        message
    };
    let hwm = || rss_kib(pid, "VmHWM:") / 1024;
    let before = hwm();
    let code = grpc(
        &channel,
        &format!("{H}Recommend"),
        framed(&empty_pods(4 << 20)),
    )
    .await;
    let after_grpc = hwm();
    let json = {
        let mut body = String::from("{\"targetKey\":\"hostile/large\",\"pods\":[{}");
        while body.len() < 7 << 20 {
            body.push_str(",{}");
        }
        body.push_str("]}");
        body
    };
    let mut http1 = Http1 { addr, sender: None };
    let post = |content_type: &str, body: Vec<u8>| {
        http::Request::builder()
            .method("POST")
            .uri(format!("{H}Recommend"))
            .header("host", "127.0.0.1")
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(body)))
            .unwrap()
    };
    let (json_status, _) = http1
        .send(post("application/json", json.into_bytes()))
        .await;
    let after_json = hwm();
    let mut http1 = Http1 { addr, sender: None };
    let (proto_status, _) = http1
        .send(post("application/proto", empty_pods(7 << 20)))
        .await;
    let after_proto = hwm();
    println!(
        "large bodies: peak RSS {before} MiB; gRPC 4 MiB of empty pods (code {code}) {after_grpc} MiB; Connect JSON 7 MiB (HTTP {json_status}) {after_json} MiB; Connect proto 7 MiB (HTTP {proto_status}) {after_proto} MiB"
    );
}

/// `message` with tenant `who`'s bearer token.
fn bearer<T>(who: &str, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer token-{who}").parse().unwrap(),
    );
    request
}

/// Tenant B's Recommend latency, alone and while tenant A fills its quota of definitions.
async fn tenants(failed: &mut Vec<String>) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let authz = dir.path().join("authz.toml");
    let hash = autoscaled::auth::policy::sha256_hex;
    let verbs = "verbs = [\"recommend\", \"read\", \"configure\", \"delete\"]";
    std::fs::write(
        &authz,
        format!(
            "[[rule]]\nidentity = \"a\"\n{verbs}\nprefixes = [\"team-a/\"]\n\
             [[rule]]\nidentity = \"b\"\n{verbs}\nprefixes = [\"team-b/\"]\n\
             [[token]]\nidentity = \"a\"\nsha256 = \"{}\"\n[[token]]\nidentity = \"b\"\nsha256 = \"{}\"\n",
            hash(b"token-a"),
            hash(b"token-b")
        ),
    )?;
    let mut command = binary::command(&dir.path().join("data"));
    command.arg("--authz").arg(&authz);
    let server = binary::spawn(command);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))?
        .connect()
        .await?;
    let b_loop = |channel: Channel, secs: u64| async move {
        let mut client = HorizontalAutoscalerClient::new(channel);
        let mut latencies = Vec::new();
        let end = Instant::now() + Duration::from_secs(secs);
        let mut i = 0;
        while Instant::now() < end {
            i += 1;
            let mut request = tonic::Request::new(
                fixtures::at_target(format!("team-b/web-{}", i % 16), 3).build(),
            );
            request
                .metadata_mut()
                .insert("authorization", "Bearer token-b".parse().unwrap());
            let started = Instant::now();
            let ok = client.recommend(request).await.is_ok();
            latencies.push((started.elapsed(), ok));
        }
        latencies
    };
    let summary = |name: &str, mut l: Vec<(Duration, bool)>| {
        let errors = l.iter().filter(|(_, ok)| !ok).count();
        l.sort();
        let at = |q: f64| l[((l.len() - 1) as f64 * q) as usize].0.as_secs_f64() * 1e3;
        println!(
            "  tenant B {name}: {} calls, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, {errors} errors",
            l.len(),
            at(0.5),
            at(0.99),
            at(1.0)
        );
        errors
    };
    println!("tenants: B's Recommends (1 in flight) while A fills its quota");
    let alone = b_loop(channel.clone(), 10).await;
    let during = tokio::spawn(b_loop(channel.clone(), 10));
    // A: groups of 200 prefixes of 100 bytes (20 kB each) until refused, then policies.
    let mut client = HorizontalAutoscalerClient::new(channel.clone());
    let (mut groups, mut policies) = (0, 0);
    for g in 0.. {
        let group = pb::ScalingGroup {
            name: format!("team-a/g{g}"),
            capacity: 10,
            member_prefixes: (0..200)
                .map(|i| format!("team-a/g{g}/{i:03}/{}/", "x".repeat(80)))
                .collect(),
            ..Default::default()
        };
        let put = pb::PutScalingGroupRequest {
            group: Some(group),
            expected_version: None,
        };
        match client.put_scaling_group(bearer("a", put)).await {
            Ok(_) => groups += 1,
            Err(e) if e.code() == tonic::Code::ResourceExhausted => break,
            Err(e) => anyhow::bail!("group {g}: {e}"),
        }
    }
    for p in 0.. {
        let put = pb::PutPolicyRequest {
            policy: Some(pb::Policy {
                name: format!("team-a/p{p}"),
                spec: Some(pb::HorizontalSpec {
                    max_replicas: 5,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            expected_version: None,
        };
        match client.put_policy(bearer("a", put)).await {
            Ok(_) => policies += 1,
            Err(e) if e.code() == tonic::Code::ResourceExhausted => break,
            Err(e) => anyhow::bail!("policy {p}: {e}"),
        }
    }
    println!("  tenant A put {groups} groups and {policies} policies before its quota refused");
    let during = during.await?;
    let after = b_loop(channel.clone(), 10).await;
    let errors =
        summary("alone", alone) + summary("while A fills", during) + summary("after", after);
    if errors > 0 {
        failed.push(format!("{errors} of tenant B's Recommends failed"));
    }
    // And B may still define its own.
    let put = pb::PutScalingGroupRequest {
        group: Some(pb::ScalingGroup {
            name: "team-b/g0".into(),
            capacity: 10,
            member_prefixes: vec!["team-b/".into()],
            ..Default::default()
        }),
        expected_version: None,
    };
    if let Err(e) = client.put_scaling_group(bearer("b", put)).await {
        failed.push(format!("tenant B's first group refused: {e}"));
    }
    Ok(())
}
