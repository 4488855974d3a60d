//! VerticalAutoscaler load: samples per second through the real binary over gRPC
//! (RecordUsage, closed loop: each client sends its next batch when the previous answer
//! arrived), for batches of 100 and 1,000 samples, 1 and 4 clients in flight, strict (group
//! commit) and relaxed durability; and the stored size of one container's record after a
//! week of per-minute CPU and memory samples.
//!
//! `cargo bench --bench vpa_load` (harness = false). Traffic goes to 127.0.0.1 only, every
//! run is bounded by a request count and a time limit, and the server is killed at the end.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use autoscaled::{
    engine::time::Time,
    engine::vpa::{Observation, Resource, UsageSample, VpaSettings},
    pb::v1::{self as pb, vertical_autoscaler_client::VerticalAutoscalerClient},
    store::{Db, SledStore, VpaState, VpaStore, sled::SledOptions},
};
use prost_types::Timestamp as PbTimestamp;

/// Starting the real binary, shared with the tests (benches cannot import `tests/common`).
#[path = "../tests/common/binary.rs"]
mod binary;

/// 2026-01-01T00:00:00Z.
const T0: i64 = 1_767_225_600;
/// Containers of each client's target the samples are spread over.
const CONTAINERS: usize = 10;
/// Bounds of one measured run.
const MAX_REQUESTS: usize = 2_000;
const MAX_TIME: Duration = Duration::from_secs(6);

/// `autoscaled serve` on a free loopback port with the given durability.
fn start(data_dir: &std::path::Path, durability: &str) -> binary::Server {
    let mut command = binary::command(data_dir);
    command.args(["--durability", durability]);
    binary::spawn(command)
}

/// Batch `n` of `size` samples for one target: consecutive minutes, round-robin over
/// `CONTAINERS` containers and both resources, so every sample is in order and accepted.
fn batch(client: usize, n: usize, size: usize) -> pb::RecordUsageRequest {
    let per_series = size / (CONTAINERS * 2);
    let start = T0 + (n * per_series) as i64 * 60;
    let mut samples = Vec::with_capacity(size);
    for k in 0..per_series {
        let at = start + k as i64 * 60;
        for c in 0..CONTAINERS {
            for (resource, value) in [
                (pb::Resource::Cpu, 100 + ((k * 37 + c * 11) % 900) as i64),
                (
                    pb::Resource::Memory,
                    200_000_000 + ((k * 7_919_993 + c) % 300_000_000) as i64,
                ),
            ] {
                samples.push(pb::UsageSample {
                    pod: "pod-0".into(),
                    container: format!("c{c}"),
                    resource: resource as i32,
                    value: value as f64,
                    timestamp: Some(PbTimestamp {
                        seconds: at,
                        nanos: 0,
                    }),
                });
            }
        }
    }
    let end = start + per_series as i64 * 60;
    pb::RecordUsageRequest {
        target_key: format!("bench/client-{client}"),
        samples,
        evaluation_time: Some(PbTimestamp {
            seconds: end,
            nanos: 0,
        }),
        ..Default::default()
    }
}

struct Run {
    requests: usize,
    samples: u64,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

async fn run(addr: SocketAddr, clients: usize, size: usize) -> Run {
    // Prebuilt requests: the client's own encoding work is not the server's.
    let per_client = MAX_REQUESTS / clients;
    let prebuilt: Vec<Vec<_>> = (0..clients)
        .map(|c| (0..per_client).map(|n| batch(c, n, size)).collect())
        .collect();
    let started = Instant::now();
    let tasks: Vec<_> = prebuilt
        .into_iter()
        .map(|requests| {
            tokio::spawn(async move {
                let mut client = VerticalAutoscalerClient::connect(format!("http://{addr}"))
                    .await
                    .expect("connects")
                    .max_decoding_message_size(64 << 20)
                    .max_encoding_message_size(64 << 20);
                let mut latencies = Vec::new();
                let mut samples = 0u64;
                let deadline = Instant::now() + MAX_TIME;
                for r in requests {
                    if Instant::now() > deadline {
                        break;
                    }
                    let t = Instant::now();
                    let ack = client.record_usage(r).await.expect("recorded").into_inner();
                    latencies.push(t.elapsed());
                    samples += ack.accepted_samples as u64;
                }
                (latencies, samples)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut samples = 0;
    for t in tasks {
        let (l, s) = t.await.expect("client task");
        latencies.extend(l);
        samples += s;
    }
    let elapsed = started.elapsed();
    latencies.sort();
    Run {
        requests: latencies.len(),
        samples,
        elapsed,
        latencies,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Bytes of the `vpa_state` record of a target with one container after a week of
/// per-minute CPU and memory samples.
fn stored_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SledStore::open(dir.path(), SledOptions::default()).expect("store");
    let settings = VpaSettings::default();
    let week = 7 * 24 * 60;
    let mut state = VpaState::new();
    let obs: Vec<Observation> = (0..week)
        .flat_map(|i: i64| {
            let at = Time::from_unix_seconds(T0 + i * 60);
            [
                Observation::Usage(UsageSample {
                    pod: "pod-0".into(),
                    container: "app".into(),
                    resource: Resource::Cpu,
                    usage: 100 + (i * 37) % 900,
                    at,
                }),
                Observation::Usage(UsageSample {
                    pod: "pod-0".into(),
                    container: "app".into(),
                    resource: Resource::Memory,
                    usage: 200_000_000 + (i * 7_919_993) % 300_000_000,
                    at,
                }),
            ]
        })
        .collect();
    let report = state
        .target
        .record_samples(&obs, None, &settings, Time::from_unix_seconds(T0));
    // The sled store's calls finish at once: a current-thread runtime drives them.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    runtime
        .block_on(store.put_vertical("bench/one", &state))
        .expect("stored");
    store.flush().expect("flushed");
    let bytes = runtime
        .block_on(store.vertical_record_bytes("bench/one"))
        .expect("readable")
        .expect("present");
    println!(
        "stored size: one container, one week of 1/min CPU + memory samples ({} accepted): \
         vpa_state record = {bytes} bytes",
        report.accepted_samples
    );
}

fn main() {
    // `cargo test --benches` runs benchmarks with `--bench` absent: keep that quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    stored_size();
    if quick {
        println!("vpa_load: pass --bench (cargo bench) for the load figures");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "{:<8} {:>6} {:>8} {:>9} {:>12} {:>10} {:>10} {:>10}",
        "durable", "batch", "clients", "requests", "samples/s", "req/s", "p50 ms", "p99 ms"
    );
    for durability in ["strict", "relaxed"] {
        for size in [100, 1_000] {
            for clients in [1, 4] {
                let dir = tempfile::tempdir().expect("tempdir");
                let server = start(&dir.path().join("data"), durability);
                let r = rt.block_on(run(server.addr, clients, size));
                drop(server);
                let secs = r.elapsed.as_secs_f64();
                println!(
                    "{:<8} {:>6} {:>8} {:>9} {:>12.0} {:>10.0} {:>10.2} {:>10.2}",
                    durability,
                    size,
                    clients,
                    r.requests,
                    r.samples as f64 / secs,
                    r.requests as f64 / secs,
                    percentile(&r.latencies, 0.5).as_secs_f64() * 1e3,
                    percentile(&r.latencies, 0.99).as_secs_f64() * 1e3,
                );
            }
        }
    }
}
