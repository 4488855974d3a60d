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
//! (`write_bytes` and `wchar` from `/proc/PID/io`, and the sectors written to the data
//! folder's block device over the same rounds), RSS (`VmRSS`), the data folder per target
//! (allocated blocks, as `du` counts them), and the start-up time on that folder (SIGTERM, then
//! a new process on the same folder: time until it listens, and until it answers `GetHistory`
//! for a stored target). Client side: req/s and latency percentiles of the measured rounds.
//! The no-op server (`support/servers.rs`) gets a warm-up round (of at most 10,000 targets)
//! and the same measured rounds.
//!
//! Where the server's share goes: after the measured rounds, `FLEET_DRY_RUN_ROUNDS` (default:
//! as many as measured; 0 skips them) more rounds of the same calls with `dry_run` set, on the
//! same server and data. A dry run reads the target's state and decides exactly as a real call
//! (conversion, engine, response), but writes nothing and waits for no flush; so the dry run's
//! CPU per call against the no-op's is what deciding costs, and the real call's against the
//! dry run's is what the durable write (records, sled, group commit) costs.
//!
//! Batches (`FLEET_BATCH=K`, default 1): with K > 1 every call is a RecommendBatch of K
//! targets (4 calls in flight, as an agent sends its period's targets), to the server and to
//! the no-op alike; calls, errors and CPU are then counted per decision, not per call.
//!
//! Full windows at a million targets (`FLEET_CLONE_FROM=K`, `0 < K < FLEET_TARGETS`): a
//! gRPC warm-up of 1 M targets × 21 rounds is 21 M calls, hours on 2 cores. Instead only the
//! first `K` targets are warmed through gRPC for the full `FLEET_WARMUP_ROUNDS` and measured
//! on their own for `FLEET_MEASURE_ROUNDS` (the small fleet's figures, same run); the server
//! is stopped (SIGTERM: it flushes); `support/fleet_clone.rs` copies every record of target
//! `j % K` to target `j`'s keys with sled (in a child process, same sled version and trees);
//! the server is started again on that folder (start-up time on the cloned folder), and
//! `GetHistory` of clones is compared with their sources'; then all `N` targets are measured
//! at the next evaluation times. Every target gets the same requests at the same times, so
//! every clone holds exactly the records the server wrote for a target after that many rounds
//! at this cadence (the clone step checks that the `K` warmed targets' records are the same
//! bytes). The table then has both sizes, autoscaled and no-op, and the cost per decision at
//! `K` vs `N` follows it.
//!
//! Load (`FLEET_LOAD`): `steady` (default) sends every round the same request, 10 pods at 46-54 %
//! of their cpu request against a 50 % target: within the tolerance, one decision run per
//! target for ever. `changing` changes the load every `FLEET_LOAD_PERIOD_ROUNDS` rounds
//! (default 7, i.e. 105 s) through utilizations of 40-60 % (60, 52, 44, 57, 49, 41, 54, ...):
//! above the tolerance the target rescales, within it the run holds, below it the 300 s window
//! stabilizes, so each period is a new decision run, as a real fleet's load makes them. Every
//! target gets the same request in a round, so cloning stays valid.
//!
//! `cargo bench --bench fleet` (about 2 minutes at 10,000 targets on 2 cores);
//! `FLEET_TARGETS=1000000 FLEET_CLONE_FROM=10000 cargo bench --bench fleet` for the big run
//! (about 20 minutes on 2 cores, 1.5–2 GB of disk: keep 3 GB free; see `docs/benchmarks.md`).
//! `FLEET_DATA_DIR` chooses where the temporary data folder goes (default: the system's
//! temporary directory). Prints a markdown table.
//!
//! Why the block device as well as `write_bytes`: the kernel charges `write_bytes` when a
//! page-cache folio becomes dirty, by the folio's size. With large folios (ext4 has them since
//! Linux 6.16; the folios that read-ahead built when sled read its file at start-up are up to
//! 1 MiB or more), a 150-byte `pwrite` into such a folio is charged as the whole folio, while
//! writeback sends only the dirty blocks to the device. So on those kernels `write_bytes`
//! overstates what reaches the disk, by up to hundreds of times once sled writes into reused
//! segments; the device's own counter (`/sys/dev/block/MAJ:MIN/stat`, sectors written) is what
//! reached the disk, from every writer on it. The no-op's rounds measure the same counter, so
//! its figure is the background on that device during the run (0 on a quiet machine).

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

#[path = "support/fleet_clone.rs"]
mod fleet_clone;
#[path = "support/servers.rs"]
mod servers;
#[path = "support/steady_state.rs"]
mod steady_state;
use fleet_clone::target_key;
use servers::{Server, env_u64, micros, run_noop_server, start_noop_server, start_real_server};
use steady_state::{PODS, recommend_request};

/// HTTP/2 connections the calls are spread over.
const CHANNELS: usize = 4;
/// Calls in flight.
const IN_FLIGHT: usize = 64;
/// RecommendBatch calls in flight (`FLEET_BATCH`).
const BATCHES_IN_FLIGHT: usize = 4;
/// Kubernetes' sync period (`--horizontal-pod-autoscaler-sync-period`).
const PERIOD_SECS: i64 = 15;

fn main() -> anyhow::Result<()> {
    if servers::is_noop_server() {
        return run_noop_server();
    }
    if fleet_clone::is_clone_child() {
        return fleet_clone::run_clone_child();
    }
    let targets = usize::try_from(env_u64("FLEET_TARGETS", 10_000))?.max(1);
    let warmup_rounds = env_u64("FLEET_WARMUP_ROUNDS", 21);
    let measure_rounds = env_u64("FLEET_MEASURE_ROUNDS", 2).max(1);
    let dry_run_rounds = env_u64("FLEET_DRY_RUN_ROUNDS", measure_rounds);
    let clone_from = usize::try_from(env_u64("FLEET_CLONE_FROM", 0))?;
    // Cloning applies when it leaves something to clone.
    let sources = (clone_from > 0 && clone_from < targets).then_some(clone_from);
    if sources.is_some() {
        anyhow::ensure!(
            targets <= fleet_clone::MAX_TARGETS,
            "FLEET_CLONE_FROM supports at most {} targets",
            fleet_clone::MAX_TARGETS
        );
    }
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
    let disk = BlockDevice::of(data.path());
    match &disk {
        Some(d) => eprintln!("  block device of the data folder: {}", d.stat),
        None => eprintln!("  the data folder is on no block device: device writes not measured"),
    }
    let disk = disk.as_ref();
    let t0 = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let t0 = i64::try_from(t0)?;
    let load = match std::env::var("FLEET_LOAD").as_deref() {
        Ok("changing") => Load::Changing {
            period_rounds: env_u64("FLEET_LOAD_PERIOD_ROUNDS", 7).max(1),
        },
        Ok("steady") | Err(_) => Load::Steady,
        Ok(other) => anyhow::bail!("FLEET_LOAD={other:?}: steady or changing"),
    };
    let fleet = Fleet::new(targets, t0, load);
    let calls = targets as u64 * measure_rounds;
    // The targets warmed through gRPC: all of them, or the clone sources.
    let warmed = Fleet::new(sources.unwrap_or(targets), t0, load);

    eprintln!(
        "fleet: {targets} targets, {warmup_rounds} warm-up + {measure_rounds} measured rounds, serve {}",
        serve_args.join(" ")
    );
    if let Some(sources) = sources {
        eprintln!(
            "  clone mode: {sources} targets warmed through gRPC, then measured; their records copied to the other {} targets; then all {targets} measured",
            targets - sources
        );
    }
    let mut real = start_real_server(&folder, &serve_args)?;
    let mut pid = server_pid(&real)?;
    let warm_started = Instant::now();
    for round in 0..warmup_rounds {
        let r = runtime.block_on(warmed.round(real.addr, round, false))?;
        eprintln!(
            "  warm-up round {round}: {:.0} req/s, {} errors",
            r.per_second(),
            r.errors
        );
    }
    let warmup_secs = warm_started.elapsed().as_secs_f64();
    let mut next_round = warmup_rounds;

    // Clone mode: the warmed targets measured on their own (the small fleet's figures, in the
    // same run), then their records copied to every other target, and the server started on
    // the cloned folder.
    let mut cloned = None;
    if let Some(sources) = sources {
        let small = measure(&runtime, &warmed, &real, disk, next_round, measure_rounds)?;
        let small_rss = proc_status_kib(pid, "VmRSS:")?;
        let small_stored = folder_bytes(&folder)?;
        next_round += measure_rounds;
        stop_gracefully(&mut real)?;
        let clone_started = Instant::now();
        let report = fleet_clone::clone_in_child(&folder, sources, targets)?;
        let clone_secs = clone_started.elapsed().as_secs_f64();
        let after_clone = folder_bytes(&folder)?;
        eprintln!(
            "  cloned {} targets in {clone_secs:.1} s: {} records ({:.0} MB) written, folder {:.0} MB",
            targets - sources,
            report.records_written,
            report.bytes_written as f64 / 1e6,
            after_clone.allocated as f64 / 1e6
        );
        let started = Instant::now();
        real = start_real_server(&folder, &serve_args)?;
        let listening = started.elapsed();
        runtime.block_on(first_answer(real.addr, &fleet.key(targets - 1)))?;
        let answering = started.elapsed();
        pid = server_pid(&real)?;
        let pairs = clone_pairs(sources, targets);
        let checked = runtime.block_on(check_clones(real.addr, &pairs))?;
        eprintln!("  GetHistory after cloning: {checked}");
        cloned = Some(Cloned {
            sources,
            small,
            small_rss,
            small_stored,
            report,
            clone_secs,
            after_clone,
            listening,
            answering,
            checked,
            pairs,
        });
    }

    let real_result = measure(&runtime, &fleet, &real, disk, next_round, measure_rounds)?;
    let stored = folder_bytes(&folder)?;
    let rss = proc_status_kib(pid, "VmRSS:")?;
    let hwm = proc_status_kib(pid, "VmHWM:")?;
    let checked_after = match &cloned {
        Some(c) => Some(runtime.block_on(check_clones(real.addr, &c.pairs))?),
        None => None,
    };
    if let Some(checked) = &checked_after {
        eprintln!("  GetHistory after the measured rounds: {checked}");
    }
    // The same calls as dry runs (read and decide, no write), after the figures of the data.
    let dry_run = match dry_run_rounds {
        0 => None,
        rounds => Some(measure(
            &runtime,
            &fleet.dry_run(),
            &real,
            disk,
            next_round + measure_rounds,
            rounds,
        )?),
    };

    // Start-up on that data: a graceful stop, then a new process on the same folder.
    stop_gracefully(&mut real)?;
    let started = Instant::now();
    let restarted = start_real_server(&folder, &serve_args)?;
    let listening = started.elapsed();
    runtime.block_on(first_answer(restarted.addr, &fleet.key(targets - 1)))?;
    let answering = started.elapsed();
    drop(restarted);

    let noop = start_noop_server()?;
    let noop_pid = server_pid(&noop)?;
    // Warm-up of the no-op (connections, allocator): the first 10,000 targets once.
    let warm = Fleet::new(targets.min(10_000), t0, load);
    runtime.block_on(warm.round(noop.addr, warmup_rounds.saturating_sub(1), false))?;
    let noop_small = match &cloned {
        Some(_) => Some(measure(
            &runtime,
            &warmed,
            &noop,
            disk,
            warmup_rounds,
            measure_rounds,
        )?),
        None => None,
    };
    let noop_result = measure(&runtime, &fleet, &noop, disk, next_round, measure_rounds)?;
    // In batches, the no-op answering the same decisions one Recommend each as well: the
    // floor of a single call, the cost per decision of batches is compared with.
    let noop_single = match fleet.batch {
        1 => None,
        _ => Some(measure(
            &runtime,
            &fleet.single(),
            &noop,
            disk,
            next_round,
            measure_rounds,
        )?),
    };
    let noop_rss = proc_status_kib(noop_pid, "VmRSS:")?;
    drop(noop);

    let report = Report {
        calls,
        real: &real_result,
        noop: &noop_result,
    };
    let rounds_before = next_round;
    println!(
        "\nFleet: {targets} targets x 10 pods, `behavior: {{}}`, {}, one call per target per \
         15 s of evaluation time (--trust-request-time), {IN_FLIGHT} in flight over {CHANNELS} \
         connections, serve {}",
        load.describe(),
        serve_args.join(" ")
    );
    match &cloned {
        None => println!(
            "{warmup_rounds} warm-up rounds through gRPC ({warmup_secs:.0} s), then \
             {measure_rounds} measured rounds ({calls} calls).\n"
        ),
        Some(c) => println!(
            "Full windows by cloning: {sources} targets warmed through gRPC for {warmup_rounds} \
             rounds ({warmup_secs:.0} s) and measured for {measure_rounds}; the server stopped \
             (SIGTERM, flushed); every record of those targets copied with sled to the other \
             {} targets' keys ({:.0} s: {} differ from target 0, {} values hold their key), \
             so every target holds exactly the state the server wrote for a target after \
             {rounds_before} rounds at this cadence; the server restarted on that folder; then \
             {measure_rounds} measured rounds over all {targets} targets ({calls} calls). \
             GetHistory of clones vs their sources: {}; after the measured rounds: {}.\n",
            targets - c.sources,
            c.clone_secs,
            c.report.differing_sources,
            c.report.values_with_key,
            c.checked,
            checked_after.as_deref().unwrap_or("-"),
            sources = c.sources,
        ),
    }
    match (&cloned, &noop_small) {
        (Some(c), Some(noop_small)) => {
            let small = Report {
                calls: c.sources as u64 * measure_rounds,
                real: &c.small,
                noop: noop_small,
            };
            println!(
                "| | autoscaled, {targets} targets | no-op, {targets} | autoscaled, {} targets (before cloning) | no-op, {} |",
                c.sources, c.sources
            );
            println!("|---|---|---|---|---|");
            for ((name, real, noop), (_, small_real, small_noop)) in
                report.rows().into_iter().zip(small.rows())
            {
                println!("| {name} | {real} | {noop} | {small_real} | {small_noop} |");
            }
            println!(
                "| data folder per target (allocated / apparent) | {} | – | {} | – |",
                per_target(&stored, targets),
                per_target(&c.small_stored, c.sources)
            );
            println!(
                "| RSS at the end (peak) | {:.0} MiB ({:.0} MiB) | {:.0} MiB | {:.0} MiB | – |",
                rss as f64 / 1024.0,
                hwm as f64 / 1024.0,
                noop_rss as f64 / 1024.0,
                c.small_rss as f64 / 1024.0,
            );
            println!(
                "| start-up on the cloned folder: listening / first answer | {:.2} s / {:.2} s | – | – | – |",
                c.listening.as_secs_f64(),
                c.answering.as_secs_f64()
            );
            println!(
                "| start-up after the measured rounds: listening / first answer | {:.2} s / {:.2} s | – | – | – |",
                listening.as_secs_f64(),
                answering.as_secs_f64()
            );
            println!(
                "\nCost per decision, {targets} vs {} targets: {:.0} µs vs {:.0} µs ({:.2}x); \
                 no-op {:.0} µs vs {:.0} µs. Clone step: {} records per target ({}), {} written \
                 ({:.0} MB), read {:.1} s, write {:.1} s, flush {:.1} s; folder after cloning {:.0} MB.",
                c.sources,
                report.real_per_call(),
                small.real_per_call(),
                report.real_per_call() / small.real_per_call().max(f64::MIN_POSITIVE),
                report.noop_per_call(),
                small.noop_per_call(),
                c.report.records_per_target,
                c.report.trees,
                c.report.records_written,
                c.report.bytes_written as f64 / 1e6,
                c.report.read_secs,
                c.report.write_secs,
                c.report.flush_secs,
                c.after_clone.allocated as f64 / 1e6,
            );
        }
        _ => {
            println!("| | autoscaled | no-op handler |");
            println!("|---|---|---|");
            for (name, real, noop) in report.rows() {
                println!("| {name} | {real} | {noop} |");
            }
            println!(
                "| data folder per target (allocated / apparent) | {} | – |",
                per_target(&stored, targets)
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
        }
    }
    if let Some(single) = &noop_single {
        let single_us = single.cpu_per_call(calls).0;
        let dry_us = dry_run.as_ref().map_or(f64::NAN, |d| {
            d.cpu_per_call(targets as u64 * dry_run_rounds).0
        });
        println!(
            "\nIn batches of {} (RecommendBatch, {BATCHES_IN_FLIGHT} in flight): the server's \
             CPU per decision {:.1} µs applied, {dry_us:.1} µs dry run; the no-op's {:.1} µs \
             per decision in the same batches and {single_us:.1} µs per single Recommend: \
             applied {:.2}x and dry runs {:.2}x the single call's.",
            fleet.batch,
            report.real_per_call(),
            report.noop_per_call(),
            report.real_per_call() / single_us,
            dry_us / single_us,
        );
    }
    if let Some(dry) = &dry_run {
        let (dry_us, dry_kernel_us) = dry.cpu_per_call(targets as u64 * dry_run_rounds);
        let (real_us, noop_us) = (report.real_per_call(), report.noop_per_call());
        println!(
            "\nWhere the server's CPU goes, {targets} targets: the same calls as dry runs \
             ({dry_run_rounds} rounds: read the state and decide, write nothing, wait for no \
             flush) cost {dry_us:.0} µs per call ({dry_kernel_us:.0} µs kernel, {:.0} req/s, \
             {} errors), {:.2}x the no-op's {noop_us:.0} µs: deciding costs {:.0} µs over the \
             no-op; the real call's {real_us:.0} µs add {:.0} µs for the durable write \
             (records, sled, group commit).",
            dry.round.per_second(),
            dry.round.errors,
            dry_us / noop_us.max(f64::MIN_POSITIVE),
            dry_us - noop_us,
            real_us - dry_us,
        );
    }
    Ok(())
}

/// What the clone mode measured and did before the big fleet's rounds.
struct Cloned {
    sources: usize,
    /// The warmed targets' measured rounds, before cloning.
    small: Measured,
    small_rss: u64,
    small_stored: FolderBytes,
    report: fleet_clone::CloneReport,
    clone_secs: f64,
    after_clone: FolderBytes,
    listening: Duration,
    answering: Duration,
    checked: String,
    pairs: Vec<(usize, usize)>,
}

/// The per-call rows both servers have, for one fleet size.
struct Report<'a> {
    calls: u64,
    real: &'a Measured,
    noop: &'a Measured,
}

impl Report<'_> {
    fn per_call(&self, m: &Measured) -> f64 {
        m.cpu_per_call(self.calls).0
    }

    fn real_per_call(&self) -> f64 {
        self.per_call(self.real)
    }

    fn noop_per_call(&self) -> f64 {
        self.per_call(self.noop)
    }

    /// (row name, autoscaled, no-op).
    fn rows(&self) -> Vec<(&'static str, String, String)> {
        let calls = self.calls as f64;
        let latency = |m: &Measured| {
            format!(
                "{} / {}",
                micros(m.round.latency.value_at_quantile(0.50)),
                micros(m.round.latency.value_at_quantile(0.99))
            )
        };
        let cpu = |m: &Measured| {
            let (total, kernel) = m.cpu_per_call(self.calls);
            format!("{total:.0} µs ({kernel:.0} µs)")
        };
        let written = |m: &Measured| {
            format!(
                "{:.0} B / {:.0} B",
                m.write_bytes as f64 / calls,
                m.wchar as f64 / calls
            )
        };
        let device = |m: &Measured| match m.device_bytes {
            Some(bytes) => format!("{:.0} B", bytes as f64 / calls),
            None => "not measured".to_owned(),
        };
        vec![
            (
                "server CPU per Recommend (utime+stime, /proc), of which kernel",
                cpu(self.real),
                cpu(self.noop),
            ),
            (
                "ratio to the no-op",
                format!(
                    "{:.2}x",
                    self.real_per_call() / self.noop_per_call().max(f64::MIN_POSITIVE)
                ),
                "1".to_owned(),
            ),
            (
                "req/s (client, closed loop)",
                format!("{:.0}", self.real.round.per_second()),
                format!("{:.0}", self.noop.round.per_second()),
            ),
            ("latency p50 / p99", latency(self.real), latency(self.noop)),
            (
                "written to the block device per call (sectors written, every writer on it)",
                device(self.real),
                device(self.noop),
            ),
            (
                "bytes written per call (write_bytes, by dirtied folio / wchar)",
                written(self.real),
                written(self.noop),
            ),
            (
                "bytes read from disk per call (read_bytes)",
                format!("{:.0} B", self.real.read_bytes as f64 / calls),
                format!("{:.0} B", self.noop.read_bytes as f64 / calls),
            ),
            (
                "errors in the measured rounds",
                self.real.round.errors.to_string(),
                self.noop.round.errors.to_string(),
            ),
        ]
    }
}

fn per_target(stored: &FolderBytes, targets: usize) -> String {
    format!(
        "{:.0} B / {:.0} B",
        stored.allocated as f64 / targets as f64,
        stored.apparent as f64 / targets as f64
    )
}

/// (clone, its source) pairs whose histories are compared: the first clone, one in the middle,
/// the last.
fn clone_pairs(sources: usize, targets: usize) -> Vec<(usize, usize)> {
    let mut clones = vec![sources, sources + (targets - sources) / 2, targets - 1];
    clones.dedup();
    clones.into_iter().map(|c| (c, c % sources)).collect()
}

/// GetHistory of each clone and of its source: equal but for the key, and not empty.
async fn check_clones(
    addr: std::net::SocketAddr,
    pairs: &[(usize, usize)],
) -> anyhow::Result<String> {
    let channel = Channel::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let mut client = HorizontalAutoscalerClient::new(channel);
    let mut summary = String::new();
    for &(clone, source) in pairs {
        let mut histories = Vec::with_capacity(2);
        for target in [clone, source] {
            let mut history = client
                .get_history(pb::GetHistoryRequest {
                    target_key: target_key(target),
                    ..Default::default()
                })
                .await?
                .into_inner();
            anyhow::ensure!(
                history.target_key == target_key(target),
                "GetHistory of {} answered for {}",
                target_key(target),
                history.target_key
            );
            history.target_key.clear();
            histories.push(history);
        }
        anyhow::ensure!(
            histories[0] == histories[1],
            "GetHistory of clone {} differs from its source {}",
            target_key(clone),
            target_key(source)
        );
        let h = &histories[0];
        anyhow::ensure!(
            !h.decisions.is_empty() && !h.recommendations.is_empty(),
            "GetHistory of {} is empty",
            target_key(clone)
        );
        summary = format!(
            "{} clones equal to their sources (e.g. {} = {}: {} decision runs, {} decisions, {} recommendations)",
            pairs.len(),
            target_key(clone),
            target_key(source),
            h.decisions.len(),
            h.decisions.iter().map(|d| d.run_count).sum::<u64>(),
            h.recommendations.len(),
        );
    }
    Ok(summary)
}

/// How the fleet's load moves (`FLEET_LOAD`).
#[derive(Clone, Copy, Debug)]
enum Load {
    /// The same request every round.
    Steady,
    /// A new utilization every `period_rounds` rounds.
    Changing { period_rounds: u64 },
}

impl Load {
    fn describe(self) -> String {
        match self {
            Load::Steady => "a steady load (46-54 % of the cpu request, target 50 %)".to_owned(),
            Load::Changing { period_rounds } => format!(
                "a load changing every {period_rounds} rounds ({} s) through 40-60 % of the cpu \
                 request (target 50 %)",
                period_rounds * PERIOD_SECS.unsigned_abs()
            ),
        }
    }

    /// The utilization (percent of the cpu request) of a changing load in `round`: a walk
    /// over 40-60 % that comes back to no value soon (60, 52, 44, 57, 49, 41, 54, ...).
    fn utilization(period_rounds: u64, round: u64) -> i64 {
        let phase = i64::try_from(round / period_rounds).unwrap_or(0);
        40 + (13 * phase + 20) % 21
    }
}

/// The fleet's requests: one template per round (the load bench's steady-state target with
/// `behavior: {}`, or its changing-load variant), a key per target and an evaluation time per
/// round.
struct Fleet {
    targets: usize,
    t0: i64,
    template: Arc<pb::RecommendRequest>,
    load: Load,
    /// Targets per call: 1 for Recommend, more for RecommendBatch (`FLEET_BATCH`).
    batch: usize,
}

impl Fleet {
    fn new(targets: usize, t0: i64, load: Load) -> Self {
        let mut template = recommend_request(String::new());
        if let Some(spec) = &mut template.spec {
            spec.behavior = Some(pb::Behavior::default());
        }
        Fleet {
            targets,
            t0,
            template: Arc::new(template),
            load,
            batch: usize::try_from(env_u64("FLEET_BATCH", 1))
                .unwrap_or(1)
                .max(1),
        }
    }

    /// The request of `round`: the template, or under a changing load the same target at
    /// the round's utilization (10 pods of 500m, spread ±20m around it).
    fn template_for(&self, round: u64) -> Arc<pb::RecommendRequest> {
        match self.load {
            Load::Steady => Arc::clone(&self.template),
            Load::Changing { period_rounds } => {
                let u = Load::utilization(period_rounds, round);
                let mut request = autoscaled_fixtures::recommend(String::new())
                    .pods(PODS)
                    .replicas(Some(2), 20)
                    .cpu_request_milli(500)
                    .cpu_usage_by(move |i| 5 * u - 20 + 10 * (i as i64 % 5))
                    .behavior(pb::Behavior::default())
                    .build();
                request.dry_run = self.template.dry_run;
                Arc::new(request)
            }
        }
    }

    fn key(&self, target: usize) -> String {
        target_key(target)
    }

    /// The same requests, one Recommend each.
    fn single(&self) -> Self {
        Fleet {
            template: Arc::clone(&self.template),
            batch: 1,
            ..*self
        }
    }

    /// The same calls with `dry_run` set: decided, not recorded.
    fn dry_run(&self) -> Self {
        let mut template = (*self.template).clone();
        template.dry_run = true;
        Fleet {
            template: Arc::new(template),
            ..*self
        }
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
        let round_template = self.template_for(round);
        let started = Instant::now();
        let batch = self.batch;
        let in_flight = if batch > 1 {
            BATCHES_IN_FLIGHT
        } else {
            IN_FLIGHT
        };
        let mut tasks = Vec::with_capacity(in_flight);
        for task in 0..in_flight {
            let mut client = clients[task % CHANNELS].clone();
            let (next, template, targets) = (next.clone(), round_template.clone(), self.targets);
            tasks.push(tokio::spawn(async move {
                let mut latency =
                    Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
                let (mut ok, mut errors) = (0u64, 0u64);
                let mut failed_call = false;
                loop {
                    let first = next.fetch_add(batch, Ordering::Relaxed);
                    if first >= targets {
                        break;
                    }
                    let request = |target| {
                        let mut request = (*template).clone();
                        request.target_key = target_key(target);
                        request.evaluation_time = Some(time);
                        request
                    };
                    let sent = Instant::now();
                    let answered = if batch == 1 {
                        client.recommend(request(first)).await.map(|_| (1, 0))
                    } else {
                        let requests = (first..targets.min(first + batch)).map(request).collect();
                        client
                            .recommend_batch(pb::RecommendBatchRequest { requests })
                            .await
                            .map(|answer| {
                                let results = answer.into_inner().results;
                                let failed = results
                                    .iter()
                                    .filter(|r| {
                                        !matches!(
                                            r.result,
                                            Some(pb::recommend_batch_result::Result::Response(_))
                                        )
                                    })
                                    .count() as u64;
                                (results.len() as u64 - failed, failed)
                            })
                    };
                    match answered {
                        Ok((answered, failed)) => {
                            ok += answered;
                            errors += failed;
                        }
                        Err(status) => {
                            if !failed_call {
                                eprintln!("  error: {status}");
                                failed_call = true;
                            }
                            errors += (targets.min(first + batch) - first) as u64;
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
    /// The kernel's share of `cpu_secs` (stime).
    sys_secs: f64,
    write_bytes: u64,
    wchar: u64,
    /// Bytes the server read from the block device (`read_bytes`: page cache misses).
    read_bytes: u64,
    /// Sectors written to the data folder's block device over the rounds, in bytes (every
    /// writer on that device; `None` when the folder is on no block device).
    device_bytes: Option<u64>,
}

impl Measured {
    /// Server CPU per call over `calls` calls, and the kernel's share of it, in µs.
    fn cpu_per_call(&self, calls: u64) -> (f64, f64) {
        let calls = calls as f64;
        (self.cpu_secs * 1e6 / calls, self.sys_secs * 1e6 / calls)
    }
}

fn measure(
    runtime: &tokio::runtime::Runtime,
    fleet: &Fleet,
    server: &Server,
    disk: Option<&BlockDevice>,
    first_round: u64,
    rounds: u64,
) -> anyhow::Result<Measured> {
    let tck = clock_ticks()?;
    let pid = server_pid(server)?;
    let device_written = || disk.map(BlockDevice::bytes_written).transpose();
    let (cpu0, io0, dev0) = (proc_user_sys_ticks(pid)?, proc_io(pid)?, device_written()?);
    let mut total = RoundResult {
        ok: 0,
        errors: 0,
        elapsed: Duration::ZERO,
        latency: Histogram::new_with_bounds(1, 60_000_000, 3)?,
    };
    let name = if fleet.template.dry_run {
        "dry-run"
    } else {
        server.name
    };
    for round in first_round..first_round + rounds {
        let (before, io_before, dev_before) =
            (proc_cpu_ticks(pid)?, proc_io(pid)?, device_written()?);
        let result = runtime.block_on(fleet.round(server.addr, round, true))?;
        let ticks = proc_cpu_ticks(pid)? - before;
        let written = proc_io(pid)?.0 - io_before.0;
        let calls = (result.ok + result.errors).max(1) as f64;
        let device = match (dev_before, device_written()?) {
            (Some(before), Some(after)) => format!("{:.0} B", (after - before) as f64 / calls),
            _ => "not measured".to_owned(),
        };
        eprintln!(
            "  {name} round {round} ({} targets): {:.0} req/s, server CPU {:.0} µs per call, \
             block device {device} per call, write_bytes {:.0} B per call",
            fleet.targets,
            result.per_second(),
            ticks as f64 * 1e6 / tck as f64 / calls,
            written as f64 / calls
        );
        total.add(result)?;
    }
    let (cpu1, io1, dev1) = (proc_user_sys_ticks(pid)?, proc_io(pid)?, device_written()?);
    eprintln!(
        "  {name} measured: {:.0} req/s, {} errors",
        total.per_second(),
        total.errors
    );
    Ok(Measured {
        round: total,
        cpu_secs: ((cpu1.0 + cpu1.1) - (cpu0.0 + cpu0.1)) as f64 / tck as f64,
        sys_secs: (cpu1.1 - cpu0.1) as f64 / tck as f64,
        write_bytes: io1.0 - io0.0,
        wchar: io1.1 - io0.1,
        read_bytes: io1.2 - io0.2,
        device_bytes: dev0.zip(dev1).map(|(before, after)| after - before),
    })
}

/// Asks the restarted server for a stored target's history until it answers: a refused
/// connection or UNAVAILABLE is retried, any other answer but the history is an error (a
/// missing target must not look like a slow start).
async fn first_answer(addr: std::net::SocketAddr, key: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let channel = match Channel::from_shared(format!("http://{addr}"))?
            .connect()
            .await
        {
            Ok(channel) => channel,
            Err(e) if Instant::now() > deadline => return Err(e.into()),
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        };
        let answer = HorizontalAutoscalerClient::new(channel)
            .get_history(pb::GetHistoryRequest {
                target_key: key.to_owned(),
                ..Default::default()
            })
            .await;
        match answer {
            Ok(_) => return Ok(()),
            Err(status)
                if status.code() == tonic::Code::Unavailable && Instant::now() <= deadline =>
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(status) => anyhow::bail!("GetHistory of {key} after a restart: {status}"),
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

/// utime + stime in clock ticks (fields 14 and 15 of `/proc/PID/stat`).
fn proc_cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let (user, sys) = proc_user_sys_ticks(pid)?;
    Ok(user + sys)
}

/// (utime, stime) in clock ticks (fields 14 and 15 of `/proc/PID/stat`; the command name may
/// hold spaces, so count after the closing parenthesis).
fn proc_user_sys_ticks(pid: u32) -> anyhow::Result<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat
        .rsplit_once(") ")
        .map(|(_, rest)| rest)
        .ok_or_else(|| anyhow::anyhow!("unexpected /proc/{pid}/stat"))?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    Ok((fields[11].parse()?, fields[12].parse()?))
}

/// The block device a folder is on, for the bytes that reached it.
struct BlockDevice {
    /// `/sys/dev/block/MAJ:MIN/stat` (a partition has one too).
    stat: String,
}

impl BlockDevice {
    /// The device of `folder`'s file system; `None` when it has no block device (tmpfs,
    /// overlay: major 0) or the kernel shows no statistics for it.
    fn of(folder: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata(folder).ok()?.dev();
        // glibc's gnu_dev_major / gnu_dev_minor.
        let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
        let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
        let stat = format!("/sys/dev/block/{major}:{minor}/stat");
        (major != 0 && Path::new(&stat).exists()).then_some(Self { stat })
    }

    /// Bytes written to the device since boot: field 7 of its `stat`, sectors of 512 bytes
    /// whatever the device's block size (Documentation/block/stat.rst).
    fn bytes_written(&self) -> anyhow::Result<u64> {
        let stat = std::fs::read_to_string(&self.stat)?;
        let sectors: u64 = stat
            .split_whitespace()
            .nth(6)
            .ok_or_else(|| anyhow::anyhow!("no sectors-written field in {}", self.stat))?
            .parse()?;
        Ok(sectors * 512)
    }
}

/// (`write_bytes`, `wchar`, `read_bytes`) of `/proc/PID/io`.
fn proc_io(pid: u32) -> anyhow::Result<(u64, u64, u64)> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        io.lines()
            .find_map(|l| l.strip_prefix(name))
            .ok_or_else(|| anyhow::anyhow!("no {name} in /proc/{pid}/io"))?
            .trim()
            .parse()
            .map_err(Into::into)
    };
    Ok((
        field("write_bytes:")?,
        field("wchar:")?,
        field("read_bytes:")?,
    ))
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
