//! Overload benchmark: goodput and server memory under 10× the server's capacity, with and
//! without the load shedding of `src/overload.rs` (issue 8: 200 concurrent 5,000-pod
//! Recommends with a 2 s deadline fell from 37 to 7 good calls/s).
//!
//! For each server configuration, a fresh `autoscaled serve` (bench profile, strict
//! durability, its own temporary folder):
//!
//! 1. capacity: closed loop, 32 calls in flight for `OVERLOAD_SECS`; the
//!    OK calls per second are the capacity;
//! 2. overload: open loop at 10 × capacity for `OVERLOAD_SECS`, every call with a 2 s deadline
//!    (`grpc-timeout`, enforced by the client too), then up to 3 s for the stragglers.
//!    Goodput = calls answered OK within their deadline, per second of the overload phase.
//!    The server's peak RSS (`VmHWM`) is read before and after.
//!
//! 3. for `default` (and `baseline`, another build given by `OVERLOAD_BASELINE_BIN`): 100, 200 and 1,000 closed-loop streams over 4 HTTP/2 connections
//!    that retry at once whatever the answer (clients without backoff), 30 s deadlines, for
//!    `OVERLOAD_SECS` each: goodput (OK within the phase) against the capacity of step 1.
//!
//! Configurations: `unlimited` (`--max-concurrent-requests 1000000 --max-queued-requests 0`,
//! i.e. no limit, the server before issue 8) and `default` (the shipped limits).
//!
//! Requests: `OVERLOAD_PODS` ready pods (default 5,000) over 64 keys round-robin, each body
//! encoded once up front so the client spends its CPU on sending, not encoding. Client and
//! server share the machine's cores. Bounded: about 4 × `OVERLOAD_SECS` + 10 s per
//! configuration. `cargo bench --bench overload`; `OVERLOAD_SECS` (default 5).

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use autoscaled::pb::v1 as pb;
use autoscaled_fixtures as fixtures;
use http_body_util::{BodyExt, Full};
use prost::{Message, bytes::Bytes};
use tonic::{Code, codegen::http, transport::Channel};
use tower::ServiceExt;

#[path = "../tests/common/binary.rs"]
mod binary;

const KEYS: usize = 64;
/// Calls in flight when measuring capacity: the default `max_concurrent_requests`, so that
/// group commit batches as it does under overload.
const CAPACITY_IN_FLIGHT: usize = 32;
const DEADLINE: Duration = Duration::from_secs(2);

fn main() -> anyhow::Result<()> {
    let secs = std::env::var("OVERLOAD_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5u64);
    let pods = std::env::var("OVERLOAD_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000usize);
    let phase = Duration::from_secs(secs);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let bodies: Arc<Vec<Bytes>> = Arc::new(
        (0..KEYS)
            .map(|k| framed(&request(&format!("overload-{k}"), pods).encode_to_vec()))
            .collect(),
    );
    println!(
        "overload: {pods}-pod Recommends, {} KiB each, deadline {} s, {secs} s per phase",
        bodies[0].len() / 1024,
        DEADLINE.as_secs()
    );
    // `OVERLOAD_BASELINE_BIN`: another build of the server (e.g. the previous release), run
    // with its default limits after ours, for a comparison within one run.
    let baseline = std::env::var_os("OVERLOAD_BASELINE_BIN");
    let mut configs: Vec<(&str, &[&str], Option<std::ffi::OsString>)> = vec![
        (
            "unlimited",
            &[
                "--max-concurrent-requests",
                "1000000",
                "--max-queued-requests",
                "0",
            ][..],
            None,
        ),
        ("default", &[][..], None),
    ];
    if let Some(bin) = baseline {
        configs.push(("baseline", &[][..], Some(bin)));
    }
    for (name, args, bin) in configs {
        let dir = tempfile::tempdir()?;
        let mut command = binary::command(dir.path());
        if let Some(bin) = bin {
            // The same arguments and environment, another executable.
            let mut other = std::process::Command::new(bin);
            other.args(command.get_args());
            for (k, v) in command.get_envs() {
                if let Some(v) = v {
                    other.env(k, v);
                }
            }
            other
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            command = other;
        }
        command.args(args);
        let server = binary::spawn(command);
        let pid = server.child.id();
        runtime.block_on(async {
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))?
                .connect()
                .await?;
            let capacity = closed_loop(&channel, &bodies, phase).await;
            let rss_before = peak_rss_mib(pid);
            let rate = (capacity * 10.0).max(1.0);
            let result = open_loop(&channel, &bodies, rate, phase).await;
            let rss_after = peak_rss_mib(pid);
            println!(
                "{name:>9}: capacity {capacity:.1} calls/s; at 10× ({rate:.0}/s offered, {} sent): goodput {:.1} calls/s = {:.0} % of capacity; shed {} (RESOURCE_EXHAUSTED), late {} (deadline), other errors {}; peak RSS {rss_before} → {rss_after} MiB",
                result.sent,
                result.ok as f64 / phase.as_secs_f64(),
                100.0 * result.ok as f64 / phase.as_secs_f64() / capacity.max(f64::MIN_POSITIVE),
                result.shed,
                result.late,
                result.other,
            );
            if name != "unlimited" {
                // Closed-loop streams that retry at once, with no backoff, over 4 HTTP/2
                // connections (the stall of issue 28 took goodput to ~1 call/s here).
                let mut channels = vec![channel.clone()];
                for _ in 1..4 {
                    channels.push(
                        tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))?
                            .connect()
                            .await?,
                    );
                }
                for streams in [100, 200, 1000] {
                    let r = no_backoff(&channels, &bodies, streams, phase).await;
                    let goodput = r.ok as f64 / phase.as_secs_f64();
                    println!(
                        "{name:>9}: {streams} streams retrying without backoff: goodput {goodput:.1} calls/s = {:.0} % of capacity; shed {}, late {}, other {}; peak RSS {} MiB",
                        100.0 * goodput / capacity.max(f64::MIN_POSITIVE),
                        r.shed,
                        r.late,
                        r.other,
                        peak_rss_mib(pid),
                    );
                }
            }
            anyhow::Ok(())
        })?;
        drop(server);
    }
    Ok(())
}

#[derive(Default)]
struct Counts {
    sent: u64,
    ok: u64,
    shed: u64,
    late: u64,
    other: u64,
}

/// OK calls per second with `CAPACITY_IN_FLIGHT` calls in flight, no deadline.
async fn closed_loop(channel: &Channel, bodies: &Arc<Vec<Bytes>>, phase: Duration) -> f64 {
    let ok = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + phase;
    let tasks: Vec<_> = (0..CAPACITY_IN_FLIGHT)
        .map(|t| {
            let (channel, bodies, ok) = (channel.clone(), Arc::clone(bodies), Arc::clone(&ok));
            tokio::spawn(async move {
                let mut i = t;
                while Instant::now() < end {
                    if call(&channel, bodies[i % KEYS].clone(), None).await == Some(Code::Ok) {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    i += CAPACITY_IN_FLIGHT;
                }
            })
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
    ok.load(Ordering::Relaxed) as f64 / phase.as_secs_f64()
}

/// `streams` closed loops over `channels` for `phase`, each call with a 30 s deadline and
/// retried at once whatever the answer (clients that do not back off).
async fn no_backoff(
    channels: &[Channel],
    bodies: &Arc<Vec<Bytes>>,
    streams: usize,
    phase: Duration,
) -> Counts {
    let end = Instant::now() + phase;
    let deadline = Duration::from_secs(30);
    let tasks: Vec<_> = (0..streams)
        .map(|t| {
            let (channel, bodies) = (channels[t % channels.len()].clone(), Arc::clone(bodies));
            tokio::spawn(async move {
                let mut counts = Counts::default();
                let mut i = t;
                while Instant::now() < end {
                    counts.sent += 1;
                    match call(&channel, bodies[i % KEYS].clone(), Some(deadline)).await {
                        // Only what completes within the phase counts as its goodput.
                        Some(Code::Ok) if Instant::now() <= end => counts.ok += 1,
                        Some(Code::Ok) => {}
                        Some(Code::ResourceExhausted) => counts.shed += 1,
                        Some(Code::DeadlineExceeded | Code::Cancelled) | None => counts.late += 1,
                        Some(_) => counts.other += 1,
                    }
                    i += streams;
                }
                counts
            })
        })
        .collect();
    let mut total = Counts::default();
    for task in tasks {
        if let Ok(c) = task.await {
            total.sent += c.sent;
            total.ok += c.ok;
            total.shed += c.shed;
            total.late += c.late;
            total.other += c.other;
        }
    }
    total
}

/// Calls at `rate` per second for `phase`, each with [`DEADLINE`].
async fn open_loop(
    channel: &Channel,
    bodies: &Arc<Vec<Bytes>>,
    rate: f64,
    phase: Duration,
) -> Counts {
    let start = Instant::now();
    let mut tasks = Vec::new();
    let mut counts = Counts::default();
    let mut i = 0usize;
    while start.elapsed() < phase {
        let due = start + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(due.into()).await;
        let (channel, body) = (channel.clone(), bodies[i % KEYS].clone());
        tasks.push(tokio::spawn(async move {
            let sent = Instant::now();
            let code = call(&channel, body, Some(DEADLINE)).await;
            (code, sent.elapsed())
        }));
        i += 1;
    }
    counts.sent = i as u64;
    let stragglers = Instant::now() + DEADLINE + Duration::from_secs(1);
    for task in tasks {
        let left = stragglers.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, task).await {
            Ok(Ok((Some(Code::Ok), took))) if took <= DEADLINE => counts.ok += 1,
            Ok(Ok((Some(Code::Ok), _))) => counts.late += 1,
            Ok(Ok((Some(Code::ResourceExhausted), _))) => counts.shed += 1,
            Ok(Ok((Some(Code::DeadlineExceeded | Code::Cancelled) | None, _))) => counts.late += 1,
            Ok(Ok(_)) | Ok(Err(_)) => counts.other += 1,
            Err(_) => counts.late += 1,
        }
    }
    counts
}

/// One Recommend with `body`; `None`: the client gave up (its deadline) or the transport failed.
async fn call(channel: &Channel, body: Bytes, deadline: Option<Duration>) -> Option<Code> {
    let mut request = http::Request::builder()
        .method("POST")
        .uri("http://127.0.0.1/autoscaled.v1.HorizontalAutoscaler/Recommend")
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(d) = deadline {
        request = request.header("grpc-timeout", format!("{}m", d.as_millis()));
    }
    let request = request.body(tonic::body::Body::new(Full::new(body))).ok()?;
    let response = channel.clone().oneshot(request).await.ok()?;
    let (parts, body) = response.into_parts();
    let mut headers = parts.headers;
    if !headers.contains_key("grpc-status") {
        let collected = body.collect().await.ok()?;
        headers.extend(collected.trailers()?.clone());
    }
    tonic::Status::from_header_map(&headers).map(|s| s.code())
}

fn framed(message: &[u8]) -> Bytes {
    let mut out = vec![0];
    out.extend((message.len() as u32).to_be_bytes());
    out.extend(message);
    Bytes::from(out)
}

fn peak_rss_mib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib / 1024)
}

/// `pods` ready pods using half of their cpu request, against a 50 % target.
fn request(key: &str, pods: usize) -> pb::RecommendRequest {
    fixtures::at_target(key, pods).build()
}
