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
    io::{BufRead, BufReader, Read},
    net::SocketAddr,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use autoscaled::pb::v1::{
    self as pb,
    horizontal_autoscaler_client::HorizontalAutoscalerClient,
    horizontal_autoscaler_server::{HorizontalAutoscaler, HorizontalAutoscalerServer},
};
use hdrhistogram::Histogram;
use tonic::{
    Request, Response, Status,
    transport::{Channel, server::TcpIncoming},
};

/// Set in the environment of the re-executed benchmark binary that serves the no-op service.
#[path = "support/steady_state.rs"]
mod steady_state;
use steady_state::{PODS, recommend_request};

const NOOP_SERVER_ENV: &str = "AUTOSCALED_LOAD_NOOP_SERVER";
/// Target keys of the many-keys mix.
const KEYS: usize = 1000;
/// HTTP/2 connections the in-flight requests are spread over.
const CHANNELS: usize = 4;
/// Requests in flight, per scenario.
const IN_FLIGHT: [usize; 3] = [1, 16, 64];
fn main() -> anyhow::Result<()> {
    if std::env::var_os(NOOP_SERVER_ENV).is_some() {
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
        Err(_) => match start_real_server(data_dir.path()) {
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

struct Server {
    name: &'static str,
    addr: SocketAddr,
    child: Option<Child>,
}

impl Server {
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `autoscaled serve` on a free loopback port; the address comes from its first stdout line.
fn start_real_server(data_dir: &std::path::Path) -> anyhow::Result<Server> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_autoscaled"));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir.join("sled"))
        .env("AUTOSCALED_LOG", "warn");
    let (child, addr) = spawn_and_read_addr(command, "autoscaled listening on ")?;
    Ok(Server {
        name: "real",
        addr,
        child: Some(child),
    })
}

/// This binary again, as the no-op server.
fn start_noop_server() -> anyhow::Result<Server> {
    let mut command = Command::new(std::env::current_exe()?);
    command.env(NOOP_SERVER_ENV, "1");
    let (child, addr) = spawn_and_read_addr(command, "no-op listening on ")?;
    Ok(Server {
        name: "no-op",
        addr,
        child: Some(child),
    })
}

/// Starts `command` with piped stdin (the child may exit when it closes) and stdout, waits for
/// the line `<prefix><addr>` and keeps draining stdout afterwards so the child never blocks.
fn spawn_and_read_addr(mut command: Command, prefix: &str) -> anyhow::Result<(Child, SocketAddr)> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
    let mut line = String::new();
    loop {
        line.clear();
        if stdout.read_line(&mut line)? == 0 {
            let status = child.wait()?;
            anyhow::bail!("{command:?} exited ({status}) before printing `{prefix}ADDR`");
        }
        if let Some(addr) = line.trim().strip_prefix(prefix) {
            let addr = addr.parse()?;
            std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
            return Ok((child, addr));
        }
    }
}

/// The no-op `HorizontalAutoscaler`: decodes the request like any server and answers with a
/// fixed decision, recording nothing.
struct Noop {
    response: pb::RecommendResponse,
}

#[tonic::async_trait]
impl HorizontalAutoscaler for Noop {
    async fn recommend(
        &self,
        _request: Request<pb::RecommendRequest>,
    ) -> Result<Response<pb::RecommendResponse>, Status> {
        Ok(Response::new(self.response.clone()))
    }

    async fn get_history(
        &self,
        request: Request<pb::GetHistoryRequest>,
    ) -> Result<Response<pb::TargetHistory>, Status> {
        Ok(Response::new(pb::TargetHistory {
            target_key: request.into_inner().target_key,
            ..Default::default()
        }))
    }

    async fn list_targets(
        &self,
        _request: Request<pb::ListTargetsRequest>,
    ) -> Result<Response<pb::ListTargetsResponse>, Status> {
        Ok(Response::new(pb::ListTargetsResponse::default()))
    }

    async fn delete_target(
        &self,
        _request: Request<pb::DeleteTargetRequest>,
    ) -> Result<Response<()>, Status> {
        Ok(Response::new(()))
    }
}

/// A response the size of a real one: three conditions, one metric with its pod groups.
fn noop_response() -> pb::RecommendResponse {
    let condition = |t: &str, r: &str, m: &str| pb::Condition {
        r#type: t.to_owned(),
        status: "True".to_owned(),
        reason: r.to_owned(),
        message: m.to_owned(),
    };
    pb::RecommendResponse {
        desired_replicas: PODS as i32,
        conditions: vec![
            condition(
                "AbleToScale",
                "ReadyForNewScale",
                "recommended size matches current size",
            ),
            condition(
                "ScalingActive",
                "ValidMetricFound",
                "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)",
            ),
            pb::Condition {
                status: "False".to_owned(),
                ..condition(
                    "ScalingLimited",
                    "DesiredWithinRange",
                    "the desired count is within the acceptable range",
                )
            },
        ],
        metrics: vec![pb::MetricStatus {
            r#type: pb::MetricSourceType::Resource as i32,
            name: "cpu".to_owned(),
            proposed_replicas: Some(PODS as i32),
            current_average_utilization: Some(50),
            current_average_value_milli: Some(250),
            pod_groups: Some(pb::PodGroups {
                ready_count: PODS as i32,
                ..Default::default()
            }),
            ..Default::default()
        }],
        explanation: Some(pb::Explanation {
            path: "Legacy".to_owned(),
            prenormalized_replicas: Some(PODS as i32),
            stabilized_replicas: Some(PODS as i32),
            scale_up_limit: Some(20),
            ..Default::default()
        }),
        evaluation_time: Some(prost_types::Timestamp::default()),
        recorded: false,
        ..Default::default()
    }
}

/// Serves the no-op service on a free loopback port until stdin closes (the parent exited or
/// stopped it).
fn run_noop_server() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        println!("no-op listening on {}", listener.local_addr()?);
        let stdin_closed = async {
            let _ =
                tokio::task::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new())).await;
        };
        tonic::transport::Server::builder()
            .add_service(HorizontalAutoscalerServer::new(Noop {
                response: noop_response(),
            }))
            .serve_with_incoming_shutdown(
                // Without TCP_NODELAY, delayed ACKs add about 40 ms to every call.
                TcpIncoming::from(listener).with_nodelay(Some(true)),
                stdin_closed,
            )
            .await?;
        Ok(())
    })
}

fn micros(us: u64) -> String {
    if us >= 10_000 {
        format!("{:.1} ms", us as f64 / 1000.0)
    } else {
        format!("{us} µs")
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
