//! Recommend throughput and latency on the etcd store, next to sled and a no-op server in the
//! same run (see `docs/ha.md` for the figures).
//!
//! Setups, each started fresh (real `autoscaled` release-profile binaries, real etcd members,
//! all on 127.0.0.1):
//! * `no-op`: a server in this process that answers a fixed decision (gRPC cost only);
//! * `sled`: one replica on sled (strict durability, group commit);
//! * `etcd 1m/1r`: one replica on a one-member etcd;
//! * `etcd 3m/1r`, `etcd 3m/2r`, `etcd 3m/3r`: one, two and three replicas on a three-member
//!   cluster, the client connections spread over the replicas; each target is decided by the
//!   replica that owns it (the others forward its calls there: `api::forward`), and the client
//!   sends a target's later calls to the owner a forwarded answer names (`autoscaled-owner`).
//!
//! * `store 3m/1s` .. `3m/3s`: no server, the store alone: one to three `EtcdStore`s in the
//!   bench's own process, as that many replicas' stores, each committing the targets it would
//!   own (the owner's memory, one guarded put per decision, commits sharing transactions): the
//!   ceiling of a server that commits every acknowledged decision through this store.
//!
//! Closed loop: `ETCD_LOAD_IN_FLIGHT` (default 16) requests in flight over 4 connections,
//! round-robin over 256 targets, `ETCD_LOAD_SECS` (default 3) measured after 1 s of warm-up.
//! Then the etcd bytes of one target after 1 and after 100 decisions (keys + values; etcd's
//! own per-key index overhead excluded). Client, servers and etcd share the machine's cores:
//! the figures are lower bounds, the ratios are the point.
//!
//! `ETCD_LOAD_REPLICA_CPU=0.1` gives the sled server and every replica a CPU limit of 0.1
//! cores each, as a Kubernetes pod's `limits.cpu` does (a CFS quota in a cgroup of its own;
//! needs root): the replicas then bound each setup, not the two cores they share with etcd
//! and the client, which is how a platform that adds replicas for capacity runs them.
//!
//! `ETCD_LOAD_MEMBER_CPU=0.25` does the same for each etcd member: every member, the sled
//! server and every replica in a quota of its own, as separate machines of that size would
//! run them (the client and the no-op are not limited).
//!
//! `cargo bench --bench etcd_load` (or `scripts/etcd-ci.sh bench`). Needs etcd installed.

#[path = "../tests/common/binary.rs"]
mod binary;
#[path = "../tests/etcd_support/mod.rs"]
mod etcd_support;
#[path = "support/servers.rs"]
mod servers;
#[path = "support/steady_state.rs"]
mod steady_state;

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use autoscaled::{
    pb::v1::horizontal_autoscaler_client::HorizontalAutoscalerClient,
    store::etcd::{EtcdOptions, EtcdStore},
};
use hdrhistogram::Histogram;
use tonic::transport::Channel;

const KEYS: usize = 256;
const CHANNELS: usize = 4;
/// Calls before each setup's measured window (connections made, owners learned).
const WARM_UP: Duration = Duration::from_secs(1);
/// The etcd prefix and the target keys of the store-only setups ([`store_only`]).
const STORE_ONLY_ETCD_PREFIX: &str = "store-only/";
const STORE_ONLY_TARGETS: &str = "so";
/// The bound on each call (sent as `grpc-timeout` too): a stuck server makes calls count as
/// errors (timeouts) instead of hanging the bench.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// CPU seconds a process has used (`/proc/PID/stat` utime + stime), 0 where unreadable.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command (which may hold spaces) start after its closing ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15 of stat(5), 12 and 13 after the command.
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|v| v.parse::<f64>().ok()))
        .sum();
    ticks / 100.0 // USER_HZ
}

/// The counters of one etcd member's `/metrics` that say what a decision costs it: gRPC calls
/// handled by method (any code), and the member's own MVCC and Raft counters.
fn etcd_counters(client_url: &str) -> Counters {
    use std::io::{Read, Write};
    let mut out = std::collections::BTreeMap::new();
    let Some(addr) = client_url.strip_prefix("http://") else {
        return out;
    };
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return out;
    };
    let _ = write!(
        stream,
        "GET /metrics HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    );
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body);
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let key = if let Some(labels) = name.strip_prefix("grpc_server_handled_total{") {
            match labels
                .split(',')
                .find_map(|l| l.strip_prefix("grpc_method=\""))
                .and_then(|m| m.strip_suffix('"'))
            {
                Some(method) => format!("grpc {method}"),
                None => continue,
            }
        } else if [
            "etcd_mvcc_put_total",
            "etcd_mvcc_range_total",
            "etcd_mvcc_txn_total",
            "etcd_server_proposals_committed_total",
            "etcd_disk_wal_fsync_duration_seconds_count",
        ]
        .contains(&name)
        {
            name.to_owned()
        } else {
            continue;
        };
        *out.entry(key).or_default() += value;
    }
    out
}

/// What the etcd members did per decision over a window: `before` and `after` are each
/// member's counters; gRPC calls are summed over the members (each serves its own clients),
/// the Raft and MVCC counters taken from the member that counted most (the leader's view).
fn etcd_per_decision(before: &[Counters], after: &[Counters], decisions: u64) -> String {
    let mut grpc: std::collections::BTreeMap<&str, f64> = Default::default();
    let mut own: std::collections::BTreeMap<&str, f64> = Default::default();
    for (b, a) in before.iter().zip(after) {
        for (k, v) in a {
            let delta = v - b.get(k).copied().unwrap_or(0.0);
            if let Some(method) = k.strip_prefix("grpc ") {
                *grpc.entry(method).or_default() += delta;
            } else {
                let e = own.entry(k.as_str()).or_default();
                *e = e.max(delta);
            }
        }
    }
    let n = decisions.max(1) as f64;
    let mut parts: Vec<String> = grpc
        .iter()
        .filter(|(_, v)| **v > 0.0)
        .map(|(m, v)| format!("{m} {:.2}", v / n))
        .collect();
    parts.extend(own.iter().map(|(k, v)| {
        let short = k
            .trim_start_matches("etcd_")
            .trim_end_matches("_total")
            .trim_end_matches("_duration_seconds_count");
        format!("{short} {:.2}", v / n)
    }));
    parts.join(", ")
}

/// A measured window's CPU seconds by group of processes, and the etcd members' counters
/// before and after it.
type Window = (
    Vec<(&'static str, f64)>,
    Option<(Vec<Counters>, Vec<Counters>)>,
);

/// One etcd member's counters, by name ([`etcd_counters`]).
type Counters = std::collections::BTreeMap<String, f64>;

/// The processes whose CPU a setup reports: (what, pids).
type Processes = Vec<(&'static str, Vec<u32>)>;

struct Figures {
    ok: u64,
    /// CPU seconds of each group of processes over the measured window.
    cpu: Vec<(&'static str, f64)>,
    /// The etcd members' counters before and after the window.
    etcd: Option<(Vec<Counters>, Vec<Counters>)>,
    /// Every failed call, timeouts included.
    errors: u64,
    /// Calls without an answer within [`CALL_TIMEOUT`] (also in `errors`).
    timeouts: u64,
    secs: f64,
    latency: Histogram<u64>,
}

async fn load(
    addrs: &[SocketAddr],
    prefix: &str,
    in_flight: usize,
    measure: Duration,
    processes: Processes,
    etcd_urls: Vec<String>,
) -> Figures {
    let mut clients = Vec::new();
    for i in 0..CHANNELS {
        let addr = addrs[i % addrs.len()];
        let endpoint = Channel::from_shared(format!("http://{addr}")).unwrap();
        let channel = tokio::time::timeout(CALL_TIMEOUT, endpoint.connect())
            .await
            .unwrap_or_else(|_| panic!("no connection to {addr} within {CALL_TIMEOUT:?}"))
            .unwrap();
        clients.push((addr.to_string(), HorizontalAutoscalerClient::new(channel)));
    }
    let clients = Arc::new(clients);
    // A target's calls go where its last forwarded answer said its owner is (the
    // `autoscaled-owner` header), as a client that follows the hint does.
    let route: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>> = Arc::default();
    let template = Arc::new(steady_state::recommend_request(String::new()));
    let next = Arc::new(AtomicUsize::new(0));
    let (measure_from, deadline, cpu) = sample_window(processes, etcd_urls, measure);
    let mut tasks = Vec::new();
    for t in 0..in_flight {
        let (clients, route) = (Arc::clone(&clients), Arc::clone(&route));
        let (template, next, prefix) = (template.clone(), next.clone(), prefix.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut ok = 0;
            let mut errors = 0;
            let mut timeouts = 0;
            let mut latency = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
            loop {
                let mut request = (*template).clone();
                request.target_key =
                    format!("{prefix}/{}", next.fetch_add(1, Ordering::Relaxed) % KEYS);
                let sent = Instant::now();
                if sent >= deadline {
                    break;
                }
                let target = request.target_key.clone();
                let via = route.lock().unwrap().get(&target).copied();
                let mut client = clients[via.unwrap_or(t % clients.len())].1.clone();
                let mut request = tonic::Request::new(request);
                request.set_timeout(CALL_TIMEOUT);
                let outcome = tokio::time::timeout(CALL_TIMEOUT, client.recommend(request)).await;
                if let Ok(Ok(answer)) = &outcome
                    && let Some(owner) = answer.metadata().get(autoscaled::api::forward::OWNER)
                    && let Some(i) = clients
                        .iter()
                        .position(|(a, _)| owner.to_str().ok() == Some(a.as_str()))
                {
                    route.lock().unwrap().insert(target, i);
                }
                let done = Instant::now();
                if sent < measure_from {
                    continue;
                }
                // A timeout counts even if it ends after the measured window: a stuck server
                // would otherwise show no calls at all.
                let timed_out = match &outcome {
                    Err(_) => true,
                    // The server's deadline answer, or tonic's own timer (CANCELLED).
                    Ok(Err(status)) => matches!(
                        status.code(),
                        tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
                    ),
                    Ok(Ok(_)) => false,
                };
                if timed_out {
                    timeouts += 1;
                    errors += 1;
                    continue;
                }
                if done > deadline {
                    continue;
                }
                match outcome {
                    Ok(Ok(_)) => {
                        ok += 1;
                        latency.saturating_record(done.duration_since(sent).as_micros() as u64);
                    }
                    _ => errors += 1,
                }
            }
            (ok, errors, timeouts, latency)
        }));
    }
    let mut figures = Figures::of_window(measure);
    for t in tasks {
        let (ok, errors, timeouts, latency) = t.await.unwrap();
        figures.ok += ok;
        figures.errors += errors;
        figures.timeouts += timeouts;
        figures.latency.add(&latency).unwrap();
    }
    (figures.cpu, figures.etcd) = cpu.await.unwrap();
    figures
}

/// The measured window: [`WARM_UP`] from now, then `measure` long. Returns its start, its end,
/// and a task that samples each group's CPU (and this client process's) and the etcd
/// members' counters at both ends: the window's figures, once it has passed.
fn sample_window(
    processes: Processes,
    etcd_urls: Vec<String>,
    measure: Duration,
) -> (Instant, Instant, tokio::task::JoinHandle<Window>) {
    let measure_from = Instant::now() + WARM_UP;
    let deadline = measure_from + measure;
    let mut processes = processes;
    processes.push(("client", vec![std::process::id()]));
    let task = tokio::spawn(async move {
        let sample = |p: &Processes| -> Vec<f64> {
            p.iter()
                .map(|(_, pids)| pids.iter().map(|&pid| cpu_secs(pid)).sum())
                .collect()
        };
        let counters =
            |urls: &[String]| -> Vec<_> { urls.iter().map(|u| etcd_counters(u)).collect() };
        tokio::time::sleep_until(measure_from.into()).await;
        let before = sample(&processes);
        let etcd_before = counters(&etcd_urls);
        tokio::time::sleep_until(deadline.into()).await;
        let after = sample(&processes);
        let etcd_after = counters(&etcd_urls);
        let cpu = processes
            .iter()
            .zip(before.iter().zip(after))
            .map(|((what, _), (b, a))| (*what, a - b))
            .collect::<Vec<_>>();
        let etcd = (!etcd_urls.is_empty()).then_some((etcd_before, etcd_after));
        (cpu, etcd)
    });
    (measure_from, deadline, task)
}

/// The store alone, without a server: `stores` [`EtcdStore`]s in this process, as that many
/// replicas' stores would be, each committing the targets it would own (target `i` to store
/// `i % stores`), `in_flight` loops in all, each a read for update (the owner's memory) and a
/// guarded commit of the target's own state and newest decision, as a Recommend makes them.
/// The targets are [`STORE_ONLY_TARGETS`]`/0` .. `/255` under [`STORE_ONLY_ETCD_PREFIX`],
/// decided once beforehand through a replica.
/// What etcd and our commit path reach when nothing else runs: the ceiling of any server that
/// commits every acknowledged decision through this store on these members.
async fn store_only(
    endpoints: &str,
    stores: usize,
    in_flight: usize,
    measure: Duration,
    processes: Processes,
    etcd_urls: Vec<String>,
) -> Figures {
    use autoscaled::store::{Commit, HpaStore};
    let stores: Vec<Arc<EtcdStore>> = (0..stores)
        .map(|_| {
            Arc::new(
                EtcdStore::connect(EtcdOptions {
                    endpoints: endpoints.split(',').map(str::to_owned).collect(),
                    prefix: STORE_ONLY_ETCD_PREFIX.to_owned(),
                    ..EtcdOptions::default()
                })
                .unwrap(),
            )
        })
        .collect();
    // Every target's history and newest decision, as the replica committed them.
    let mut targets = Vec::new();
    for i in 0..KEYS {
        let key = format!("{STORE_ONLY_TARGETS}/{i}");
        let store = &stores[i % stores.len()];
        let (state, _) = store.load_for_update(&key).await.unwrap();
        let history = state.expect("the target was decided beforehand").history;
        // A fresh decision as the API commits one: its own reading, no run yet; each commit
        // a second later than the one before, so that the open run grows and is trimmed as
        // a live target's does.
        let mut decision = store.latest(&key).await.unwrap().unwrap();
        let newest = decision.readings.pop();
        decision.readings = newest.into_iter().collect();
        decision.run = Default::default();
        decision.seq = 0;
        targets.push((key, history, decision));
    }
    let targets = Arc::new(targets);
    let (measure_from, deadline, cpu) = sample_window(processes, etcd_urls, measure);
    let mut tasks = Vec::new();
    for t in 0..in_flight {
        let (stores, targets) = (stores.clone(), Arc::clone(&targets));
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut errors) = (0, 0);
            let mut latency = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
            // Loop `t` commits its own targets among those of store `t % stores` in turn,
            // as the calls of one client routed to their owner would (no two loops share
            // a target: the API's per-target lock would serialize them).
            let (n, m) = (stores.len(), in_flight.div_ceil(stores.len()));
            let mine: Vec<usize> = (0..KEYS)
                .filter(|i| i % n == t % n && (i / n) % m == t / n)
                .collect();
            let store = &stores[t % n];
            let mut mine: Vec<_> = mine.into_iter().map(|i| targets[i].clone()).collect();
            let mut next = 0;
            loop {
                let sent = Instant::now();
                if sent >= deadline || mine.is_empty() {
                    break;
                }
                let count = mine.len();
                let (key, history, decision) = &mut mine[next % count];
                next += 1;
                decision.time = decision.time.plus_secs(1);
                let outcome = async {
                    let (_, seen) = store.load_for_update(key).await?;
                    store
                        .commit_after(seen, Commit::new(key, history, decision))
                        .await
                }
                .await;
                let done = Instant::now();
                if sent < measure_from || done > deadline {
                    continue;
                }
                match outcome {
                    Ok(()) => {
                        ok += 1;
                        latency.saturating_record(done.duration_since(sent).as_micros() as u64);
                    }
                    Err(_) => errors += 1,
                }
            }
            (ok, errors, latency)
        }));
    }
    let mut figures = Figures::of_window(measure);
    for t in tasks {
        let (ok, errors, latency) = t.await.unwrap();
        figures.ok += ok;
        figures.errors += errors;
        figures.latency.add(&latency).unwrap();
    }
    (figures.cpu, figures.etcd) = cpu.await.unwrap();
    figures
}

/// A CPU limit on one server process, as a Kubernetes pod's `resources.limits.cpu` sets one: a
/// CFS quota of `cores` × the 100 ms period, in a cgroup of the process's own (cgroup v1's
/// `cpu` controller or v2's `cpu.max`). With `ETCD_LOAD_REPLICA_CPU` set, the sled server and
/// every replica get one, so that the replicas, not the machine's two cores, bound what a
/// setup decides: the case in which a platform adds replicas. The cgroup is removed when this
/// is dropped.
struct CpuLimit {
    dir: std::path::PathBuf,
}

impl CpuLimit {
    const PERIOD_US: u64 = 100_000;

    fn apply(pid: u32, cores: f64) -> Result<CpuLimit, String> {
        let quota = (cores * Self::PERIOD_US as f64).round() as u64;
        let name = format!("autoscaled-bench-{}-{pid}", std::process::id());
        // cgroup v2 when the root hands the cpu controller down to its children.
        let v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.subtree_control");
        let (dir, files): (std::path::PathBuf, Vec<(&str, String)>) = if std::fs::read_to_string(v2)
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "cpu"))
        {
            (
                std::path::Path::new("/sys/fs/cgroup").join(name),
                vec![("cpu.max", format!("{quota} {}", Self::PERIOD_US))],
            )
        } else {
            (
                std::path::Path::new("/sys/fs/cgroup/cpu").join(name),
                vec![
                    ("cpu.cfs_period_us", Self::PERIOD_US.to_string()),
                    ("cpu.cfs_quota_us", quota.to_string()),
                ],
            )
        };
        let fail = |what: &str, e: std::io::Error| format!("{what} in {}: {e}", dir.display());
        std::fs::create_dir(&dir).map_err(|e| fail("creating the cgroup", e))?;
        let limit = CpuLimit { dir: dir.clone() };
        for (file, value) in files {
            std::fs::write(dir.join(file), value).map_err(|e| fail(file, e))?;
        }
        // Moves the whole process, every thread (cgroup.procs, v1 and v2).
        std::fs::write(dir.join("cgroup.procs"), pid.to_string())
            .map_err(|e| fail("cgroup.procs", e))?;
        Ok(limit)
    }

    /// The limit of `ETCD_LOAD_REPLICA_CPU` (cores) on `pid`, if set; a limit that cannot be
    /// set stops the bench (its figures would mean something else).
    fn from_env(pid: u32) -> Option<CpuLimit> {
        Self::from_var("ETCD_LOAD_REPLICA_CPU", pid)
    }

    /// The limit of `ETCD_LOAD_MEMBER_CPU` on each etcd member, if set: each member in a
    /// quota of its own, as separate machines (or pods) of that size would run them.
    fn members_from_env(etcd: &etcd_support::Etcd) -> Vec<CpuLimit> {
        etcd.members
            .iter()
            .filter_map(|m| m.pid())
            .filter_map(|pid| Self::from_var("ETCD_LOAD_MEMBER_CPU", pid))
            .collect()
    }

    fn from_var(var: &str, pid: u32) -> Option<CpuLimit> {
        let value = std::env::var(var).ok()?;
        let cores: f64 = value
            .parse()
            .ok()
            .filter(|c: &f64| *c > 0.0)
            .unwrap_or_else(|| panic!("{var}={value:?}: not a number of cores"));
        Some(
            Self::apply(pid, cores)
                .unwrap_or_else(|e| panic!("{var}={cores}: cannot limit the CPU of {pid}: {e}")),
        )
    }
}

impl Drop for CpuLimit {
    fn drop(&mut self) {
        // A cgroup with a task cannot be removed: its process (killed after this, or still
        // exiting) goes back to the parent first.
        if let (Ok(procs), Some(parent)) = (
            std::fs::read_to_string(self.dir.join("cgroup.procs")),
            self.dir.parent(),
        ) {
            for pid in procs.split_whitespace() {
                let _ = std::fs::write(parent.join("cgroup.procs"), pid);
            }
        }
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Figures {
    /// Nothing counted yet, over a window of `measure`.
    fn of_window(measure: Duration) -> Figures {
        Figures {
            ok: 0,
            cpu: Vec::new(),
            etcd: None,
            errors: 0,
            timeouts: 0,
            secs: measure.as_secs_f64(),
            latency: Histogram::new_with_bounds(1, 60_000_000, 3).unwrap(),
        }
    }
}

fn print(name: &str, f: &Figures, noop: Option<f64>) {
    let rate = f.ok as f64 / f.secs;
    println!(
        "{name:<14} {rate:>9.0} decisions/s  p50 {:>6} µs  p99 {:>6} µs  errors {} ({} timeouts of {} ms){}",
        f.latency.value_at_quantile(0.5),
        f.latency.value_at_quantile(0.99),
        f.errors,
        f.timeouts,
        CALL_TIMEOUT.as_millis(),
        noop.map_or(String::new(), |n| format!(
            "  ({:.1}% of no-op)",
            100.0 * rate / n
        )),
    );
    // Where the machine's cores went: cores used by each group, and its CPU per decision.
    let ok = f.ok.max(1) as f64;
    let split: Vec<String> = f
        .cpu
        .iter()
        .map(|(what, secs)| {
            format!(
                "{what} {:.2} cores ({:.0} µs/decision)",
                secs / f.secs,
                1e6 * secs / ok
            )
        })
        .collect();
    println!("{:<14} cpu: {}", "", split.join(", "));
    if let Some((before, after)) = &f.etcd {
        println!(
            "{:<14} etcd per decision: {}",
            "",
            etcd_per_decision(before, after, f.ok)
        );
    }
}

fn replica(endpoints: &str, prefix: &str, data: &std::path::Path) -> binary::Server {
    // The replicas' shared secret, so that they forward to each other.
    let secret = data.with_extension("peer-secret");
    std::fs::write(&secret, "the replicas of the etcd bench share this secret").unwrap();
    let mut command = binary::command(data);
    command
        .args([
            "--store",
            "etcd",
            "--etcd-endpoints",
            endpoints,
            "--etcd-prefix",
            prefix,
        ])
        .arg("--peer-secret-file")
        .arg(&secret);
    binary::spawn(command)
}

fn main() {
    if servers::is_noop_server() {
        servers::run_noop_server().expect("the no-op server runs");
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !etcd_support::available() {
        return;
    }
    let in_flight = env_u64("ETCD_LOAD_IN_FLIGHT", 16) as usize;
    let measure = Duration::from_secs(env_u64("ETCD_LOAD_SECS", 3));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    println!(
        "{in_flight} in flight, {KEYS} targets, {} s measured per setup",
        measure.as_secs()
    );

    // The no-op server of the other load benches (this binary again, in its own process).
    let noop_server = servers::start_noop_server().expect("the no-op server starts");
    let noop = runtime.block_on(load(
        &[noop_server.addr],
        "noop",
        in_flight,
        measure,
        vec![(
            "server",
            noop_server
                .child
                .iter()
                .map(std::process::Child::id)
                .collect(),
        )],
        Vec::new(),
    ));
    drop(noop_server);
    let noop_rate = noop.ok as f64 / noop.secs;
    print("no-op", &noop, None);

    {
        let sled = binary::start(&tmp.path().join("sled"));
        let _limit = CpuLimit::from_env(sled.child.id());
        let f = runtime.block_on(load(
            &[sled.addr],
            "sled",
            in_flight,
            measure,
            vec![("server", vec![sled.child.id()])],
            Vec::new(),
        ));
        print("sled", &f, Some(noop_rate));
    }
    {
        let etcd = etcd_support::Etcd::start(1);
        let _members = CpuLimit::members_from_env(&etcd);
        let r = replica(&etcd.endpoints(), "bench/", &tmp.path().join("r1"));
        let _limit = CpuLimit::from_env(r.child.id());
        let f = runtime.block_on(load(
            &[r.addr],
            "e1",
            in_flight,
            measure,
            vec![
                ("replicas", vec![r.child.id()]),
                (
                    "etcd",
                    etcd.members.iter().filter_map(|m| m.pid()).collect(),
                ),
            ],
            etcd.members.iter().map(|m| m.client_url()).collect(),
        ));
        print("etcd 1m/1r", &f, Some(noop_rate));
    }
    {
        let etcd = etcd_support::Etcd::start(3);
        let _members = CpuLimit::members_from_env(&etcd);
        for n in [1usize, 2, 3] {
            // A prefix per setup: the replicas of the previous one (SIGKILLed) stay
            // registered until their leases expire, and would own targets meanwhile.
            let prefix = format!("bench{n}/");
            let replicas: Vec<binary::Server> = (0..n)
                .map(|i| {
                    replica(
                        &etcd.endpoints(),
                        &prefix,
                        &tmp.path().join(format!("r{n}{i}")),
                    )
                })
                .collect();
            let _limits: Vec<CpuLimit> = replicas
                .iter()
                .filter_map(|r| CpuLimit::from_env(r.child.id()))
                .collect();
            let addrs: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();
            let f = runtime.block_on(load(
                &addrs,
                &format!("e3-{n}"),
                in_flight,
                measure,
                vec![
                    ("replicas", replicas.iter().map(|r| r.child.id()).collect()),
                    (
                        "etcd",
                        etcd.members.iter().filter_map(|m| m.pid()).collect(),
                    ),
                ],
                etcd.members.iter().map(|m| m.client_url()).collect(),
            ));
            print(&format!("etcd 3m/{n}r"), &f, Some(noop_rate));
        }

        // The store alone (no server): the targets decided once through a replica, which is
        // then stopped; n stores in this process commit them as n replicas' stores would.
        {
            let seed = replica(
                &etcd.endpoints(),
                STORE_ONLY_ETCD_PREFIX,
                &tmp.path().join("seed"),
            );
            runtime.block_on(load(
                &[seed.addr],
                STORE_ONLY_TARGETS,
                in_flight,
                Duration::from_millis(200),
                Vec::new(),
                Vec::new(),
            ));
        }
        for n in [1usize, 2, 3] {
            let f = runtime.block_on(store_only(
                &etcd.endpoints(),
                n,
                in_flight,
                measure,
                vec![(
                    "etcd",
                    etcd.members.iter().filter_map(|m| m.pid()).collect(),
                )],
                etcd.members.iter().map(|m| m.client_url()).collect(),
            ));
            print(&format!("store 3m/{n}s"), &f, Some(noop_rate));
        }

        // Bytes per target.
        let replica = replica(&etcd.endpoints(), "bytes/", &tmp.path().join("bytes"));
        runtime.block_on(async {
            let store = EtcdStore::connect(EtcdOptions {
                endpoints: etcd.endpoints().split(',').map(str::to_owned).collect(),
                prefix: "bytes/".to_owned(),
                ..EtcdOptions::default()
            })
            .unwrap();
            let endpoint = Channel::from_shared(format!("http://{}", replica.addr)).unwrap();
            let mut client = HorizontalAutoscalerClient::new(
                tokio::time::timeout(CALL_TIMEOUT, endpoint.connect())
                    .await
                    .expect("no connection to the replica within the call timeout")
                    .unwrap(),
            );
            for n in 1..=100 {
                let mut request =
                    tonic::Request::new(steady_state::recommend_request("ns/web".to_owned()));
                request.set_timeout(CALL_TIMEOUT);
                tokio::time::timeout(CALL_TIMEOUT, client.recommend(request))
                    .await
                    .unwrap_or_else(|_| panic!("decision {n}: no answer within {CALL_TIMEOUT:?}"))
                    .unwrap();
                if n == 1 || n == 100 {
                    let bytes = store.target_bytes("ns/web").await.unwrap();
                    println!("etcd bytes of one target after {n} decisions: {bytes}");
                }
            }
        });
    }
}
