//! The fleet benchmark: `autoscaled` as the decision service of a whole fleet, against the
//! no-op server on the same calls in the same run.
//!
//! `N` targets (`FLEET_TARGETS`, default 10,000) of 10 pods each are evaluated at Kubernetes'
//! cadence: round `r` calls every target once with `evaluation_time = t0 + 15 s × r` on a
//! server started with `--trust-request-time`, `behavior: {}` (the Kubernetes default
//! behavior: 300 s scale-down window, 15 s / 60 s policy periods). `FLEET_WARMUP_ROUNDS`
//! (default 21, so 300 s of evaluation time: every window and period is full) are sent first,
//! then `FLEET_MEASURE_ROUNDS` (default 2) are measured. 64 calls in flight over 4 HTTP/2
//! connections, strict durability unless `FLEET_SERVER_ARGS` says otherwise (extra `serve`
//! arguments, split on spaces, e.g. `--durability relaxed`).
//!
//! Measured for the server process only (the client shares the cores, so its share must not
//! count): CPU per call (utime + stime from `/proc/PID/stat`), bytes written per call
//! (`write_bytes` and `wchar` from `/proc/PID/io`), RSS (`VmRSS`), the data folder per target
//! (allocated blocks, as `du` counts them), and the start-up time on that folder (SIGTERM, then
//! a new process on the same folder: time until it listens, and until it answers `GetHistory`
//! for a stored target). Client side: req/s and latency percentiles of the measured rounds.
//! The no-op server (`support/servers.rs`) gets a warm-up round (of at most 10,000 targets)
//! and the same measured rounds.
//!
//! `cargo bench --bench fleet` (about 2 minutes at 10,000 targets on 2 cores);
//! `FLEET_TARGETS=1000000 FLEET_WARMUP_ROUNDS=1 FLEET_MEASURE_ROUNDS=1 cargo bench --bench
//! fleet` for the big run. `FLEET_DATA_DIR` chooses where the temporary data folder goes
//! (default: the system's temporary directory). Prints a markdown table.

use std::{
    path::Path,
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use autoscaled::pb::v1::{self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient};
use hdrhistogram::Histogram;
use tonic::transport::Channel;

#[path = "support/servers.rs"]
mod servers;
#[path = "support/steady_state.rs"]
mod steady_state;
use servers::{Server, env_u64, micros, run_noop_server, start_noop_server, start_real_server};
use steady_state::recommend_request;

/// HTTP/2 connections the calls are spread over.
const CHANNELS: usize = 4;
/// Calls in flight.
const IN_FLIGHT: usize = 64;
/// Kubernetes' sync period (`--horizontal-pod-autoscaler-sync-period`).
const PERIOD_SECS: i64 = 15;

fn main() -> anyhow::Result<()> {
    if servers::is_noop_server() {
        return run_noop_server();
    }
    let targets = usize::try_from(env_u64("FLEET_TARGETS", 10_000))?.max(1);
    let warmup_rounds = env_u64("FLEET_WARMUP_ROUNDS", 21);
    let measure_rounds = env_u64("FLEET_MEASURE_ROUNDS", 2).max(1);
    let extra_args = std::env::var("FLEET_SERVER_ARGS").unwrap_or_default();
    let mut serve_args = vec!["--trust-request-time"];
    serve_args.extend(extra_args.split_whitespace());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let data = match std::env::var_os("FLEET_DATA_DIR") {
        Some(dir) => tempfile::tempdir_in(dir)?,
        None => tempfile::tempdir()?,
    };
    let folder = data.path().join("sled");
    let t0 = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let t0 = i64::try_from(t0)?;
    let fleet = Fleet::new(targets, t0);
    let calls = targets as u64 * measure_rounds;

    eprintln!(
        "fleet: {targets} targets, {warmup_rounds} warm-up + {measure_rounds} measured rounds, serve {}",
        serve_args.join(" ")
    );
    let mut real = start_real_server(&folder, &serve_args)?;
    let pid = server_pid(&real)?;
    let warm_started = Instant::now();
    for round in 0..warmup_rounds {
        let r = runtime.block_on(fleet.round(real.addr, round, false))?;
        eprintln!(
            "  warm-up round {round}: {:.0} req/s, {} errors",
            r.per_second(),
            r.errors
        );
    }
    let warmup_secs = warm_started.elapsed().as_secs_f64();
    let real_result = measure(&runtime, &fleet, &real, pid, warmup_rounds, measure_rounds)?;
    let stored = folder_bytes(&folder)?;
    let rss = proc_status_kib(pid, "VmRSS:")?;
    let hwm = proc_status_kib(pid, "VmHWM:")?;

    // Start-up on that data: a graceful stop, then a new process on the same folder.
    stop_gracefully(&mut real)?;
    let started = Instant::now();
    let restarted = start_real_server(&folder, &serve_args)?;
    let listening = started.elapsed();
    runtime.block_on(first_answer(restarted.addr, &fleet.key(0)))?;
    let answering = started.elapsed();
    drop(restarted);

    let noop = start_noop_server()?;
    let noop_pid = server_pid(&noop)?;
    // Warm-up of the no-op (connections, allocator): the first 10,000 targets once.
    let warm = Fleet::new(targets.min(10_000), t0);
    runtime.block_on(warm.round(noop.addr, warmup_rounds.saturating_sub(1), false))?;
    let noop_result = measure(
        &runtime,
        &fleet,
        &noop,
        noop_pid,
        warmup_rounds,
        measure_rounds,
    )?;
    let noop_rss = proc_status_kib(noop_pid, "VmRSS:")?;
    drop(noop);

    let per_call = |m: &Measured| m.cpu_secs * 1e6 / calls as f64;
    println!(
        "\nFleet: {targets} targets x 10 pods, `behavior: {{}}`, one call per target per 15 s of \
         evaluation time (--trust-request-time), {warmup_rounds} warm-up rounds ({warmup_secs:.0} s), \
         {measure_rounds} measured rounds ({calls} calls), {IN_FLIGHT} in flight over {CHANNELS} \
         connections, serve {}\n",
        serve_args.join(" ")
    );
    println!("| | autoscaled | no-op handler |");
    println!("|---|---|---|");
    println!(
        "| server CPU per Recommend (utime+stime, /proc) | {:.0} µs | {:.0} µs |",
        per_call(&real_result),
        per_call(&noop_result)
    );
    println!(
        "| ratio to the no-op | {:.2}x | 1 |",
        per_call(&real_result) / per_call(&noop_result).max(f64::MIN_POSITIVE)
    );
    println!(
        "| req/s (client, closed loop) | {:.0} | {:.0} |",
        real_result.round.per_second(),
        noop_result.round.per_second()
    );
    println!(
        "| latency p50 / p99 | {} / {} | {} / {} |",
        micros(real_result.round.latency.value_at_quantile(0.50)),
        micros(real_result.round.latency.value_at_quantile(0.99)),
        micros(noop_result.round.latency.value_at_quantile(0.50)),
        micros(noop_result.round.latency.value_at_quantile(0.99)),
    );
    println!(
        "| bytes written per call (write_bytes / wchar) | {:.0} B / {:.0} B | {:.0} B / {:.0} B |",
        real_result.write_bytes as f64 / calls as f64,
        real_result.wchar as f64 / calls as f64,
        noop_result.write_bytes as f64 / calls as f64,
        noop_result.wchar as f64 / calls as f64,
    );
    println!(
        "| data folder per target (allocated / apparent) | {:.0} B / {:.0} B | – |",
        stored.allocated as f64 / targets as f64,
        stored.apparent as f64 / targets as f64,
    );
    println!(
        "| RSS at the end (peak) | {:.0} MiB ({:.0} MiB) | {:.0} MiB |",
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0,
        noop_rss as f64 / 1024.0
    );
    println!(
        "| start-up on this folder: listening / first answer | {:.2} s / {:.2} s | – |",
        listening.as_secs_f64(),
        answering.as_secs_f64()
    );
    println!(
        "| errors in the measured rounds | {} | {} |",
        real_result.round.errors, noop_result.round.errors
    );
    Ok(())
}

/// The fleet's requests: one template (the load bench's steady-state target with
/// `behavior: {}`), a key per target and an evaluation time per round.
struct Fleet {
    targets: usize,
    t0: i64,
    template: Arc<pb::RecommendRequest>,
}

impl Fleet {
    fn new(targets: usize, t0: i64) -> Self {
        let mut template = recommend_request(String::new());
        if let Some(spec) = &mut template.spec {
            spec.behavior = Some(pb::Behavior::default());
        }
        Fleet {
            targets,
            t0,
            template: Arc::new(template),
        }
    }

    fn key(&self, target: usize) -> String {
        target_key(target)
    }

    /// Every target once, at `t0 + 15 s × round`; latencies recorded when `record`.
    async fn round(
        &self,
        addr: std::net::SocketAddr,
        round: u64,
        record: bool,
    ) -> anyhow::Result<RoundResult> {
        let mut clients = Vec::with_capacity(CHANNELS);
        for _ in 0..CHANNELS {
            let channel = Channel::from_shared(format!("http://{addr}"))?
                .connect()
                .await?;
            clients.push(HorizontalAutoscalerClient::new(channel));
        }
        let time = prost_types::Timestamp {
            seconds: self.t0 + PERIOD_SECS * i64::try_from(round)?,
            nanos: 0,
        };
        let next = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let mut tasks = Vec::with_capacity(IN_FLIGHT);
        for task in 0..IN_FLIGHT {
            let mut client = clients[task % CHANNELS].clone();
            let (next, template, targets) = (next.clone(), self.template.clone(), self.targets);
            tasks.push(tokio::spawn(async move {
                let mut latency =
                    Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
                let (mut ok, mut errors) = (0u64, 0u64);
                loop {
                    let target = next.fetch_add(1, Ordering::Relaxed);
                    if target >= targets {
                        break;
                    }
                    let mut request = (*template).clone();
                    request.target_key = target_key(target);
                    request.evaluation_time = Some(time);
                    let sent = Instant::now();
                    match client.recommend(request).await {
                        Ok(_) => ok += 1,
                        Err(status) => {
                            errors += 1;
                            if errors == 1 {
                                eprintln!("  error: {status}");
                            }
                            continue;
                        }
                    }
                    if record {
                        let us = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX);
                        latency.saturating_record(us.max(1));
                    }
                }
                (ok, errors, latency)
            }));
        }
        let mut result = RoundResult {
            ok: 0,
            errors: 0,
            elapsed: Duration::ZERO,
            latency: Histogram::new_with_bounds(1, 60_000_000, 3)?,
        };
        for task in tasks {
            let (ok, errors, latency) = task.await?;
            result.ok += ok;
            result.errors += errors;
            result.latency.add(&latency)?;
        }
        result.elapsed = started.elapsed();
        Ok(result)
    }
}

fn target_key(target: usize) -> String {
    format!("fleet/{target:07}")
}

struct RoundResult {
    ok: u64,
    errors: u64,
    elapsed: Duration,
    /// Microseconds, successful calls only (when recorded).
    latency: Histogram<u64>,
}

impl RoundResult {
    fn per_second(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64()
    }

    fn add(&mut self, other: RoundResult) -> anyhow::Result<()> {
        self.ok += other.ok;
        self.errors += other.errors;
        self.elapsed += other.elapsed;
        self.latency.add(&other.latency)?;
        Ok(())
    }
}

/// The measured rounds and the server's counters over them.
struct Measured {
    round: RoundResult,
    cpu_secs: f64,
    write_bytes: u64,
    wchar: u64,
}

fn measure(
    runtime: &tokio::runtime::Runtime,
    fleet: &Fleet,
    server: &Server,
    pid: u32,
    first_round: u64,
    rounds: u64,
) -> anyhow::Result<Measured> {
    let tck = clock_ticks()?;
    let (cpu0, io0) = (proc_cpu_ticks(pid)?, proc_io(pid)?);
    let mut total = RoundResult {
        ok: 0,
        errors: 0,
        elapsed: Duration::ZERO,
        latency: Histogram::new_with_bounds(1, 60_000_000, 3)?,
    };
    for round in first_round..first_round + rounds {
        total.add(runtime.block_on(fleet.round(server.addr, round, true))?)?;
    }
    let (cpu1, io1) = (proc_cpu_ticks(pid)?, proc_io(pid)?);
    eprintln!(
        "  {} measured: {:.0} req/s, {} errors",
        server.name,
        total.per_second(),
        total.errors
    );
    Ok(Measured {
        round: total,
        cpu_secs: (cpu1 - cpu0) as f64 / tck as f64,
        write_bytes: io1.0 - io0.0,
        wchar: io1.1 - io0.1,
    })
}

/// Asks the restarted server for a stored target's history until it answers.
async fn first_answer(addr: std::net::SocketAddr, key: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let attempt = async {
            let channel = Channel::from_shared(format!("http://{addr}"))?
                .connect()
                .await?;
            let history = HorizontalAutoscalerClient::new(channel)
                .get_history(pb::GetHistoryRequest {
                    target_key: key.to_owned(),
                    ..Default::default()
                })
                .await?;
            anyhow::Ok(history)
        };
        match attempt.await {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

fn server_pid(server: &Server) -> anyhow::Result<u32> {
    server
        .child
        .as_ref()
        .map(std::process::Child::id)
        .ok_or_else(|| anyhow::anyhow!("{} is not a child process", server.name))
}

/// SIGTERM (the server's graceful shutdown), then wait for it to exit.
fn stop_gracefully(server: &mut Server) -> anyhow::Result<()> {
    if let Some(mut child) = server.child.take() {
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()?;
        child.wait()?;
    }
    Ok(())
}

fn clock_ticks() -> anyhow::Result<u64> {
    let out = Command::new("getconf").arg("CLK_TCK").output()?;
    Ok(String::from_utf8(out.stdout)?.trim().parse()?)
}

/// utime + stime in clock ticks (fields 14 and 15 of `/proc/PID/stat`; the command name may
/// hold spaces, so count after the closing parenthesis).
fn proc_cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat
        .rsplit_once(") ")
        .map(|(_, rest)| rest)
        .ok_or_else(|| anyhow::anyhow!("unexpected /proc/{pid}/stat"))?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    Ok(fields[11].parse::<u64>()? + fields[12].parse::<u64>()?)
}

/// (`write_bytes`, `wchar`) of `/proc/PID/io`.
fn proc_io(pid: u32) -> anyhow::Result<(u64, u64)> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        io.lines()
            .find_map(|l| l.strip_prefix(name))
            .ok_or_else(|| anyhow::anyhow!("no {name} in /proc/{pid}/io"))?
            .trim()
            .parse()
            .map_err(Into::into)
    };
    Ok((field("write_bytes:")?, field("wchar:")?))
}

/// A `VmRSS:`-style line of `/proc/PID/status`, in KiB.
fn proc_status_kib(pid: u32, name: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next())
        .ok_or_else(|| anyhow::anyhow!("no {name} in /proc/{pid}/status"))?
        .parse()
        .map_err(Into::into)
}

struct FolderBytes {
    /// Allocated blocks × 512, as `du` counts.
    allocated: u64,
    apparent: u64,
}

fn folder_bytes(dir: &Path) -> anyhow::Result<FolderBytes> {
    use std::os::unix::fs::MetadataExt;
    let mut total = FolderBytes {
        allocated: 0,
        apparent: 0,
    };
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            let sub = folder_bytes(&entry.path())?;
            total.allocated += sub.allocated;
            total.apparent += sub.apparent;
        } else {
            total.allocated += meta.blocks() * 512;
            total.apparent += meta.len();
        }
    }
    Ok(total)
}
