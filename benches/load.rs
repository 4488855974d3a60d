//! Closed-loop gRPC load benchmark of `HorizontalAutoscaler/Recommend`.
//!
//! Runs the same load against two servers, each in its own process, and prints both and the
//! throughput ratio:
//!
//! * `real`: the `autoscaled` binary (`autoscaled serve`, built with the bench profile) on a
//!   fresh temporary data directory, recording every decision in sled before answering;
//! * `no-op`: this benchmark binary re-executed as a server whose `Recommend` returns a fixed
//!   response, so the difference is the decision, the store and the per-key lock, not gRPC.
//!
//! The load is closed-loop: a fixed number of requests in flight (1, 16, 64) spread over
//! `CHANNELS` HTTP/2 connections, each task sending its next request when the previous one
//! returns, for a fixed time after a warm-up. Two request mixes: `many-keys` (round-robin over
//! `KEYS` targets) and `single-key` (one target, so the server serializes every call on that
//! key). Each scenario uses fresh target keys, so no scenario inherits another's history.
//! gRPC errors (non-OK statuses) are counted apart from successes and excluded from latency.
//!
//! `cargo bench --bench load`. Environment: `LOAD_SECS` (measured seconds per scenario,
//! default 5), `LOAD_WARMUP_SECS` (default 1), `LOAD_ADDR` (measure a server that is already
//! running instead of starting the binary; requests carry no `evaluation_time`, so its clock
//! decides).
//!
//! Every call on a key adds a recommendation that stays for the 5 min stabilization window,
//! so at hundreds of calls per second one key's history grows to thousands of entries within
//! a scenario (Kubernetes evaluates a target every 15 s). The single-key figures therefore
//! include the cost of that growing history, not only the serialization on the key.
//!
//! Client and servers share the machine's cores, so absolute figures are lower bounds; the
//! ratio is the figure to compare.

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use autoscaled::pb::v1::horizontal_autoscaler_client::HorizontalAutoscalerClient;
use hdrhistogram::Histogram;
use tonic::transport::Channel;

#[path = "support/servers.rs"]
mod servers;
#[path = "support/steady_state.rs"]
mod steady_state;
use servers::{Server, env_u64, micros, run_noop_server, start_noop_server, start_real_server};
use steady_state::{PODS, recommend_request};

/// Target keys of the many-keys mix.
const KEYS: usize = 1000;
/// HTTP/2 connections the in-flight requests are spread over.
const CHANNELS: usize = 4;
/// Requests in flight, per scenario.
const IN_FLIGHT: [usize; 3] = [1, 16, 64];
fn main() -> anyhow::Result<()> {
    if servers::is_noop_server() {
        return run_noop_server();
    }
    let measure = Duration::from_secs(env_u64("LOAD_SECS", 5));
    let warmup = Duration::from_secs(env_u64("LOAD_WARMUP_SECS", 1));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;

    let data_dir = tempfile::tempdir()?;
    let mut servers: Vec<Server> = Vec::new();
    match std::env::var("LOAD_ADDR") {
        Ok(addr) => servers.push(Server {
            name: "real",
            addr: addr.parse()?,
            child: None,
        }),
        Err(_) => match start_real_server(&data_dir.path().join("sled"), &[]) {
            Ok(server) => servers.push(server),
            Err(e) => eprintln!("real server did not start, measuring the no-op only: {e:#}"),
        },
    }
    servers.push(start_noop_server()?);

    println!(
        "closed loop, {CHANNELS} channels, {} s measured after {} s warm-up, {PODS} pods/request, cpu utilization",
        measure.as_secs(),
        warmup.as_secs()
    );
    println!(
        "{:<6} {:<11} {:>9} {:>11} {:>10} {:>10} {:>10} {:>8}",
        "server", "keys", "in-flight", "req/s", "p50", "p90", "p99", "errors"
    );
    let mut throughput: BTreeMap<(Mix, usize), HashMap<&'static str, f64>> = BTreeMap::new();
    for mix in [Mix::ManyKeys, Mix::SingleKey] {
        for in_flight in IN_FLIGHT {
            for server in &servers {
                let scenario = Scenario {
                    mix,
                    in_flight,
                    warmup,
                    measure,
                    key_prefix: format!("bench/{}/{}/{in_flight}", server.name, mix.name()),
                };
                let result = runtime.block_on(run_scenario(server.addr, &scenario))?;
                println!(
                    "{:<6} {:<11} {:>9} {:>11.0} {:>10} {:>10} {:>10} {:>8}",
                    server.name,
                    mix.name(),
                    in_flight,
                    result.per_second(),
                    micros(result.latency.value_at_quantile(0.50)),
                    micros(result.latency.value_at_quantile(0.90)),
                    micros(result.latency.value_at_quantile(0.99)),
                    result.errors_summary(),
                );
                throughput
                    .entry((mix, in_flight))
                    .or_default()
                    .insert(server.name, result.per_second());
            }
        }
    }
    println!("throughput ratio real / no-op:");
    for ((mix, in_flight), by_server) in &throughput {
        if let (Some(real), Some(noop)) = (by_server.get("real"), by_server.get("no-op")) {
            println!(
                "  {:<11} in-flight {:>3}: {:.3}",
                mix.name(),
                in_flight,
                real / noop
            );
        }
    }
    for server in &mut servers {
        server.stop();
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Mix {
    ManyKeys,
    SingleKey,
}

impl Mix {
    fn name(self) -> &'static str {
        match self {
            Mix::ManyKeys => "many-keys",
            Mix::SingleKey => "single-key",
        }
    }
}

struct Scenario {
    mix: Mix,
    in_flight: usize,
    warmup: Duration,
    measure: Duration,
    key_prefix: String,
}

struct ScenarioResult {
    ok: u64,
    errors: BTreeMap<String, u64>,
    elapsed: Duration,
    /// Microseconds, successful calls only.
    latency: Histogram<u64>,
}

impl ScenarioResult {
    fn per_second(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64()
    }

    fn errors_summary(&self) -> String {
        if self.errors.is_empty() {
            return "0".to_owned();
        }
        self.errors
            .iter()
            .map(|(code, n)| format!("{n} {code}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Counts of one task, merged at the end.
struct TaskCounts {
    ok: u64,
    errors: BTreeMap<String, u64>,
    latency: Histogram<u64>,
}

async fn run_scenario(addr: SocketAddr, scenario: &Scenario) -> anyhow::Result<ScenarioResult> {
    let mut clients = Vec::with_capacity(CHANNELS);
    for _ in 0..CHANNELS.min(scenario.in_flight) {
        let channel = Channel::from_shared(format!("http://{addr}"))?
            .connect()
            .await?;
        clients.push(HorizontalAutoscalerClient::new(channel));
    }
    let keys: Arc<Vec<String>> = Arc::new(match scenario.mix {
        Mix::ManyKeys => (0..KEYS)
            .map(|i| format!("{}/{i:04}", scenario.key_prefix))
            .collect(),
        Mix::SingleKey => vec![scenario.key_prefix.clone()],
    });
    let template = Arc::new(recommend_request(String::new()));
    let next_key = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let measure_from = start + scenario.warmup;
    let deadline = measure_from + scenario.measure;
    let mut tasks = Vec::with_capacity(scenario.in_flight);
    for task in 0..scenario.in_flight {
        let mut client = clients[task % clients.len()].clone();
        let (keys, template, next_key) = (keys.clone(), template.clone(), next_key.clone());
        tasks.push(tokio::spawn(async move {
            let mut counts = TaskCounts {
                ok: 0,
                errors: BTreeMap::new(),
                latency: Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds"),
            };
            loop {
                let mut request = (*template).clone();
                request.target_key =
                    keys[next_key.fetch_add(1, Ordering::Relaxed) % keys.len()].clone();
                let sent = Instant::now();
                if sent >= deadline {
                    break;
                }
                let outcome = client.recommend(request).await;
                let done = Instant::now();
                if sent < measure_from || done > deadline {
                    continue;
                }
                match outcome {
                    Ok(_) => {
                        counts.ok += 1;
                        let us = u64::try_from(done.duration_since(sent).as_micros())
                            .unwrap_or(u64::MAX);
                        counts.latency.saturating_record(us.max(1));
                    }
                    Err(status) => {
                        *counts
                            .errors
                            .entry(format!("{:?}", status.code()))
                            .or_default() += 1;
                    }
                }
            }
            counts
        }));
    }
    let mut result = ScenarioResult {
        ok: 0,
        errors: BTreeMap::new(),
        elapsed: scenario.measure,
        latency: Histogram::new_with_bounds(1, 60_000_000, 3)?,
    };
    for task in tasks {
        let counts = task.await?;
        result.ok += counts.ok;
        for (code, n) in counts.errors {
            *result.errors.entry(code).or_default() += n;
        }
        result.latency.add(&counts.latency)?;
    }
    Ok(result)
}
