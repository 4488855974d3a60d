//! High availability on etcd, with real processes only: real etcd members (Debian
//! `etcd-server`), the real `autoscaled` binary as replicas, real SIGKILL. See `docs/ha.md`.
//!
//! Without etcd installed every test prints `SKIPPED` and returns, except under `CI=true`
//! where it fails (`etcd_support::available`).

#[path = "common/binary.rs"]
mod binary;
mod etcd_support;

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    path::Path,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use autoscaled::pb::v1::{
    GetHistoryRequest, RecommendRequest, horizontal_autoscaler_client::HorizontalAutoscalerClient,
};
use autoscaled_ctl::conformance::grpc;
use etcd_support::Etcd;
use tonic::transport::Channel;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

#[path = "../benches/support/steady_state.rs"]
mod steady_state;

/// The secret the replicas of these tests share (`--peer-secret-file`).
const PEER_SECRET: &str = "the replicas of the etcd tests share this secret";

/// A replica of `autoscaled serve --store etcd` (the real binary), SIGKILLed when dropped.
struct Replica {
    server: Option<binary::Server>,
    _data: tempfile::TempDir,
}

impl Replica {
    fn start(endpoints: &str, prefix: &str, extra: &[&str]) -> Replica {
        let data = tempfile::tempdir().unwrap();
        // The deployment's shared secret: every replica of these tests has the same.
        let secret = data.path().join("peer-secret");
        std::fs::write(&secret, PEER_SECRET).unwrap();
        let mut command = binary::command(&data.path().join("unused"));
        command
            .args(["--store", "etcd", "--etcd-endpoints", endpoints])
            .args(["--etcd-prefix", prefix, "--decision-log-len", "10000"])
            .arg("--peer-secret-file")
            .arg(&secret)
            .args(extra);
        Replica {
            server: Some(binary::spawn(command)),
            _data: data,
        }
    }

    fn addr(&self) -> SocketAddr {
        self.server.as_ref().expect("running").addr
    }

    fn kill(&mut self) {
        // binary::Server's Drop sends SIGKILL and reaps the process.
        self.server = None;
    }
}

/// The bound on every call to a replica (each one etcd request or a few), and on every other
/// etcd request of these tests: a store that never answers (a compare-and-swap that retries
/// forever, a lost wake-up) fails the test with a message instead of hanging CI. Generous: a
/// call takes milliseconds, a few seconds while etcd elects a leader.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// `call`, or a panic naming `what` if it has not finished within [`CALL_TIMEOUT`].
async fn bounded<T>(what: impl std::fmt::Display, call: impl Future<Output = T>) -> T {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(out) => out,
        Err(_) => panic!(
            "{what}: no answer within {CALL_TIMEOUT:?} (a store that never commits or never answers?)"
        ),
    }
}

async fn channel(addr: SocketAddr) -> Channel {
    let endpoint = Channel::from_shared(format!("http://{addr}")).unwrap();
    bounded(format!("connecting to {addr}"), endpoint.connect())
        .await
        .unwrap()
}

async fn client(addr: SocketAddr) -> HorizontalAutoscalerClient<Channel> {
    HorizontalAutoscalerClient::new(channel(addr).await)
}

fn epoch_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A Recommend of `target` evaluated at `millis` (unique per call, so that each
/// acknowledged call can be found in the history).
fn request(target: &str, millis: i64) -> RecommendRequest {
    let mut r = steady_state::recommend_request(target.to_owned());
    r.evaluation_time = Some(prost_types::Timestamp {
        seconds: millis.div_euclid(1000),
        nanos: (millis.rem_euclid(1000) * 1_000_000) as i32,
    });
    r
}

fn ts_millis(t: &Option<prost_types::Timestamp>) -> i64 {
    let t = t.as_ref().expect("a time");
    t.seconds * 1000 + i64::from(t.nanos) / 1_000_000
}

/// Acknowledged calls: target → evaluation times (ms).
type Acks = Arc<Mutex<BTreeMap<String, Vec<i64>>>>;

/// Checks that every target's history holds exactly the acknowledged decisions
/// (`exact`) or at least them (after failures, an unacknowledged call may have committed),
/// each once, with one stored recommendation per decision (none lost to a concurrent write).
async fn check_history(addr: SocketAddr, acks: &BTreeMap<String, Vec<i64>>, exact: bool) -> usize {
    let mut c = client(addr).await;
    let mut total = 0;
    for (target, times) in acks {
        let call = c.get_history(GetHistoryRequest {
            target_key: target.clone(),
            ..Default::default()
        });
        let h = bounded(format!("GetHistory {target}"), call)
            .await
            .unwrap()
            .into_inner();
        // The log holds runs of decisions that said the same thing: count them.
        let decided: u64 = h.decisions.iter().map(|d| d.run_count).sum();
        let newest = h
            .decisions
            .iter()
            .map(|d| ts_millis(&d.evaluation_time))
            .max();
        // One stored recommendation per decision, at its evaluation time (all calls are
        // within the 300 s stabilization window, so none is replaced), plus the initial one
        // (`recordInitialRecommendation`, at the first decision's time).
        let recommended: Vec<i64> = h
            .recommendations
            .iter()
            .map(|r| ts_millis(&r.time))
            .collect();
        let recommended_set: BTreeSet<i64> = recommended.iter().copied().collect();
        assert!(
            recommended.len() <= recommended_set.len() + 1,
            "{target}: a recommendation is stored twice: {} stored, {} distinct",
            recommended.len(),
            recommended_set.len()
        );
        let acked: BTreeSet<i64> = times.iter().copied().collect();
        assert_eq!(acked.len(), times.len(), "{target}: a time was used twice");
        // Up to `MAX_RECOMMENDATIONS` every proposal is kept as is; beyond that the store
        // coalesces proposals that cannot change any window's max or min (engine::hpa::prune), so
        // only the decision count below can show a lost update.
        let lost: Vec<_> = if acked.len() < autoscaled::engine::hpa::prune::MAX_RECOMMENDATIONS {
            acked.difference(&recommended_set).collect()
        } else {
            Vec::new()
        };
        assert!(
            lost.is_empty(),
            "{target}: acknowledged decisions lost from the history (a concurrent write overwrote them): {lost:?}"
        );
        assert!(
            decided >= acked.len() as u64,
            "{target}: {decided} decisions logged, {} acknowledged",
            acked.len()
        );
        assert!(newest.is_some());
        if exact {
            assert_eq!(
                decided,
                acked.len() as u64,
                "{target}: decisions logged twice"
            );
            assert_eq!(
                recommended_set, acked,
                "{target}: unexpected recommendations"
            );
        }
        total += acked.len();
    }
    total
}

/// `clients` tasks, each sending `calls` Recommends over `targets` shared targets, spread
/// round-robin over `replicas`; every call must succeed.
async fn concurrent_load(
    replicas: &[SocketAddr],
    clients: usize,
    calls: usize,
    targets: usize,
    prefix: &str,
) -> BTreeMap<String, Vec<i64>> {
    let acks: Acks = Arc::default();
    let base = epoch_millis();
    let counter = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let mut conns = Vec::new();
        for addr in replicas {
            conns.push(client(*addr).await);
        }
        let acks = Arc::clone(&acks);
        let counter = Arc::clone(&counter);
        let prefix = prefix.to_owned();
        tasks.push(tokio::spawn(async move {
            for i in 0..calls {
                let n = counter.fetch_add(1, Ordering::SeqCst);
                let target = format!("{prefix}-t{}", n % targets);
                let millis = base + n as i64;
                let len = conns.len();
                let conn = &mut conns[(c + i) % len];
                let call = conn.recommend(request(&target, millis));
                bounded(format!("Recommend {target}"), call)
                    .await
                    .unwrap_or_else(|e| panic!("{target}: {e}"));
                acks.lock().unwrap().entry(target).or_default().push(millis);
            }
        }));
    }
    for t in tasks {
        // Every call in a task is bounded (`bounded`), so every task ends.
        t.await.unwrap();
    }
    Arc::try_unwrap(acks).unwrap().into_inner().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_and_three_replicas_on_a_three_member_cluster_lose_and_duplicate_nothing() {
    if !etcd_support::available() {
        return;
    }
    let etcd = Etcd::start(3);
    for n in [2, 3] {
        let prefix = format!("ha{n}/");
        let replicas: Vec<Replica> = (0..n)
            .map(|_| Replica::start(&etcd.endpoints(), &prefix, &[]))
            .collect();
        let addrs: Vec<SocketAddr> = replicas.iter().map(Replica::addr).collect();
        // 8 clients on 4 targets: every target is written by every replica at once.
        let acks = concurrent_load(&addrs, 8, 25, 4, &format!("r{n}")).await;
        let total = check_history(addrs[n - 1], &acks, true).await;
        assert_eq!(total, 200);
        // Every replica sees the same history.
        check_history(addrs[0], &acks, true).await;
    }
}

/// The value of counter `name{label}` on a replica's `/metrics` (0 when absent).
fn counter(admin: SocketAddr, name: &str, label: &str) -> f64 {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(admin).expect("the admin listener accepts");
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
        .lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Two replicas share out the targets: calls sent to either are decided by each target's
/// owner (the other replica forwards them: its counter says so, and the answer names the
/// owner), nothing is lost or logged twice; when an owner is SIGKILLed, the survivor decides its targets at once (a call to an
/// unreachable owner is decided where it landed, then the lease expires and the survivor owns
/// everything). The longest gap between acknowledged decisions after the kill is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_are_owned_forwarded_and_taken_over_when_their_owner_dies() {
    if !etcd_support::available() {
        return;
    }
    let etcd = Etcd::start(1);
    let flags = ["--metrics-listen", "127.0.0.1:0"];
    let mut replicas: Vec<Replica> = (0..2)
        .map(|_| Replica::start(&etcd.endpoints(), "own/", &flags))
        .collect();
    let addrs: Vec<SocketAddr> = replicas.iter().map(Replica::addr).collect();
    let admins: Vec<SocketAddr> = replicas
        .iter()
        .map(|r| r.server.as_ref().unwrap().admin.expect("an admin listener"))
        .collect();
    let forwarded = |i: usize| {
        counter(
            admins[i],
            "autoscaled_hpa_forwarded_total",
            "decided=\"owner\"",
        )
    };
    // Until both registrations are read (a few polls), every replica decides what it gets.
    let started = Instant::now();
    let mut acks: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let clients = [client(addrs[0]).await, client(addrs[1]).await];
    let mut millis = epoch_millis();
    let mut call = |target: String, via: usize| {
        millis += 1;
        let at = millis;
        let c = clients[via].clone();
        async move {
            let mut c = c;
            bounded(
                format!("Recommend {target}"),
                c.recommend(request(&target, at)),
            )
            .await
            .map(|answer| {
                // A forwarded answer names the owner, for clients that route themselves.
                let owner = answer
                    .metadata()
                    .get("autoscaled-owner")
                    .map(|v| v.to_str().unwrap().to_owned());
                (target, at, owner)
            })
        }
    };
    loop {
        for t in 0..16 {
            for via in 0..2 {
                let (target, at, owner) = call(format!("own-t{t}"), via).await.unwrap();
                if let Some(owner) = owner {
                    assert_eq!(
                        owner,
                        addrs[1 - via].to_string(),
                        "{target} forwarded by {via}"
                    );
                }
                acks.entry(target).or_default().push(at);
            }
        }
        if forwarded(0) > 0.0 && forwarded(1) > 0.0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no call was forwarded within 30 s (forwarded: {} and {})",
            forwarded(0),
            forwarded(1)
        );
    }
    println!(
        "ownership: both replicas forwarding after {:?} ({} and {} calls forwarded)",
        started.elapsed(),
        forwarded(0),
        forwarded(1)
    );
    assert_eq!(
        check_history(addrs[0], &acks, true).await,
        acks.values().map(Vec::len).sum::<usize>()
    );

    // The owner of half the targets dies; calls go on to the survivor. A call forwarded over
    // the connection the dead owner left may fail (its fate unknown to the survivor, as to a
    // caller of the owner itself); the next one is decided.
    replicas[1].kill();
    let killed = Instant::now();
    let mut last_ack = killed;
    let mut longest = Duration::ZERO;
    let mut failed = 0;
    while killed.elapsed() < Duration::from_secs(4) {
        for t in 0..16 {
            match call(format!("own-t{t}"), 0).await {
                Ok((target, at, _)) => {
                    acks.entry(target).or_default().push(at);
                    longest = longest.max(last_ack.elapsed());
                    last_ack = Instant::now();
                }
                Err(_) => failed += 1,
            }
        }
    }
    println!(
        "ownership: longest gap between acknowledged decisions after the owner's SIGKILL: \
         {longest:?} ({failed} calls failed)"
    );
    assert!(failed <= 16, "{failed} calls failed after the kill");
    let acked = acks.values().map(Vec::len).sum::<usize>();
    assert_eq!(check_history(addrs[0], &acks, failed == 0).await, acked);
}

/// A RecommendBatch's requests for targets another replica owns go to that owner as one
/// RecommendBatch: one call there (one slot of its load shedding), not one call per request.
/// An owner that refuses the batch untouched (here its lower `--max-batch-requests`) gets
/// each request alone. Every answer is the owner's decision, logged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_goes_to_each_owner_as_one_call() {
    use autoscaled::pb::v1::{RecommendBatchRequest, recommend_batch_result::Result as Outcome};
    if !etcd_support::available() {
        return;
    }
    let etcd = Etcd::start(1);
    let metrics = ["--metrics-listen", "127.0.0.1:0"];
    let replicas = [
        Replica::start(&etcd.endpoints(), "batch/", &metrics),
        Replica::start(
            &etcd.endpoints(),
            "batch/",
            &[&metrics[..], &["--max-batch-requests", "4"]].concat(),
        ),
    ];
    let addrs: Vec<SocketAddr> = replicas.iter().map(Replica::addr).collect();
    let admins: Vec<SocketAddr> = replicas
        .iter()
        .map(|r| r.server.as_ref().unwrap().admin.expect("an admin listener"))
        .collect();
    let calls = |i: usize, method: &str| {
        counter(
            admins[i],
            "autoscaled_grpc_requests_total",
            &format!("method=\"/autoscaled.v1.HorizontalAutoscaler/{method}\""),
        )
    };
    let forwarded = |i: usize| {
        counter(
            admins[i],
            "autoscaled_hpa_forwarded_total",
            "decided=\"owner\"",
        )
    };
    let clients = [client(addrs[0]).await, client(addrs[1]).await];
    let mut acks: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut millis = epoch_millis();
    // Until each replica has read the other's registration, each decides what it gets:
    // single calls through replica 0 until one is forwarded, and through 1 likewise; then
    // each target's owner, as the forwarded answers name it.
    let started = Instant::now();
    let targets: Vec<String> = (0..24).map(|t| format!("batch-t{t}")).collect();
    let mut owner_of: BTreeMap<String, usize> = BTreeMap::new();
    loop {
        owner_of.clear();
        for target in &targets {
            for (via, c) in clients.iter().enumerate() {
                millis += 1;
                let mut c = c.clone();
                let answer = bounded("Recommend", c.recommend(request(target, millis)))
                    .await
                    .unwrap();
                acks.entry(target.clone()).or_default().push(millis);
                let named = answer.metadata().get("autoscaled-owner").is_some();
                if via == 0 {
                    owner_of.insert(target.clone(), usize::from(named));
                } else if named != (owner_of[target] == 0) {
                    owner_of.remove(target); // the two views still differ
                }
            }
        }
        if forwarded(0) > 0.0 && forwarded(1) > 0.0 && owner_of.len() == targets.len() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the replicas did not agree on the owners within 30 s"
        );
    }
    let owned = |by: usize| -> Vec<String> {
        owner_of
            .iter()
            .filter(|(_, o)| **o == by)
            .map(|(t, _)| t.clone())
            .collect()
    };
    let (zero, one) = (owned(0), owned(1));
    assert!(
        zero.len() >= 6 && one.len() >= 6,
        "owners: {} and {} of {} targets",
        zero.len(),
        one.len(),
        targets.len()
    );
    let mut send = |via: usize, batch: Vec<String>| {
        let requests: Vec<RecommendRequest> = batch
            .iter()
            .map(|t| {
                millis += 1;
                acks.entry(t.clone()).or_default().push(millis);
                request(t, millis)
            })
            .collect();
        let times: Vec<i64> = requests
            .iter()
            .map(|r| ts_millis(&r.evaluation_time))
            .collect();
        let mut c = clients[via].clone();
        async move {
            let answer = bounded(
                "RecommendBatch",
                c.recommend_batch(RecommendBatchRequest { requests }),
            )
            .await
            .unwrap()
            .into_inner();
            // Each answer in its request's place: its evaluation time is the request's own.
            for ((t, at), result) in batch.iter().zip(times).zip(&answer.results) {
                match &result.result {
                    Some(Outcome::Response(r)) => {
                        assert_eq!(ts_millis(&r.evaluation_time), at, "{t}: another's answer")
                    }
                    other => panic!("{t}: {other:?}"),
                }
            }
            answer.results.len()
        }
    };

    // What the owner was called with (RecommendBatch, Recommend) and what the replica the
    // batch went through counted as forwarded.
    let counts = |owner: usize| {
        [
            calls(owner, "RecommendBatch"),
            calls(owner, "Recommend"),
            forwarded(1 - owner),
        ]
    };
    let since = |before: [f64; 3], owner: usize| {
        let after = counts(owner);
        [0, 1, 2].map(|k| after[k] - before[k])
    };

    // Through replica 1 (at most 4 requests a batch): three of replica 0's targets and one
    // of its own. Replica 0 gets one RecommendBatch of three, and no Recommend.
    let before = counts(0);
    let batch: Vec<String> = zero[..3].iter().chain(&one[..1]).cloned().collect();
    assert_eq!(send(1, batch).await, 4);
    assert_eq!(since(before, 0), [1.0, 0.0, 3.0], "at the owner, forwarded");

    // Through replica 0: six of each. Replica 1 refuses a batch of six untouched (over its
    // limit), so each of its six goes alone: six Recommends there, all decided by it.
    let before = counts(1);
    let batch: Vec<String> = zero[..6].iter().chain(&one[..6]).cloned().collect();
    assert_eq!(send(0, batch).await, 12);
    assert_eq!(since(before, 1), [1.0, 6.0, 6.0], "at the owner, forwarded");

    let acked = acks.values().map(Vec::len).sum::<usize>();
    assert_eq!(check_history(addrs[0], &acks, true).await, acked);
}

/// Replicas prove to each other that they are replicas of one deployment (the shared
/// secret, `peers`): a registration written into etcd by someone without the secret is never
/// an owner (no call goes to it, no caller's token with it), a marker a client sets to choose
/// which replica decides is ignored and counted, and a replica without the secret forwards
/// nothing (it decides what reaches it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_forward_only_to_verified_peers_and_ignore_client_markers() {
    if !etcd_support::available() {
        return;
    }
    let etcd = Etcd::start(1);
    // An impostor: a registration with an address of its own, unsigned and badly signed.
    let impostor = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let impostor_addr = impostor.local_addr().unwrap();
    impostor.set_nonblocking(true).unwrap();
    for (id, value) in [
        ("fff0", impostor_addr.to_string()),
        ("fff1", format!("{impostor_addr}\n{}", "00".repeat(32))),
    ] {
        etcd.etcdctl(
            &etcd.endpoints(),
            &["put", &format!("peer/replicas/{id}"), &value],
        )
        .expect("etcdctl put");
    }
    let flags = ["--metrics-listen", "127.0.0.1:0"];
    let first = Replica::start(&etcd.endpoints(), "peer/", &flags);
    let second = Replica::start(&etcd.endpoints(), "peer/", &flags);
    let admins = [
        first.server.as_ref().unwrap().admin.unwrap(),
        second.server.as_ref().unwrap().admin.unwrap(),
    ];
    let addrs = [first.addr(), second.addr()];
    let mut clients = [client(addrs[0]).await, client(addrs[1]).await];
    let started = Instant::now();
    let mut millis = epoch_millis();
    // Until both verified registrations are read, then until calls were forwarded both ways.
    loop {
        for t in 0..16 {
            for via in clients.iter_mut() {
                millis += 1;
                let target = format!("peer-t{t}");
                bounded(
                    format!("Recommend {target}"),
                    via.recommend(request(&target, millis)),
                )
                .await
                .unwrap();
            }
        }
        let forwarded = |i: usize| {
            counter(
                admins[i],
                "autoscaled_hpa_forwarded_total",
                "decided=\"owner\"",
            )
        };
        if forwarded(0) > 0.0 && forwarded(1) > 0.0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no call was forwarded within 30 s"
        );
    }
    // Nothing went to the impostor, and both replicas left its entries out.
    assert!(
        impostor.accept().is_err(),
        "a call was forwarded to an unverified registration"
    );
    for admin in admins {
        assert!(
            counter(
                admin,
                "autoscaled_door_refusals_total",
                "limit=\"registration\""
            ) >= 2.0
        );
    }
    // A client's own marker: ignored (the call decided or forwarded as any other) and counted.
    let before = counter(
        admins[0],
        "autoscaled_door_refusals_total",
        "limit=\"forwarded_marker\"",
    ) + counter(
        admins[1],
        "autoscaled_door_refusals_total",
        "limit=\"forwarded_marker\"",
    );
    for t in 0..16 {
        millis += 1;
        let mut request = tonic::Request::new(request(&format!("peer-t{t}"), millis));
        request
            .metadata_mut()
            .insert("autoscaled-forwarded", "1".parse().unwrap());
        request
            .metadata_mut()
            .insert("autoscaled-forwarded-for", "203.0.113.9:1".parse().unwrap());
        let answer = bounded("Recommend with a marker", clients[0].recommend(request))
            .await
            .unwrap();
        assert!(answer.get_ref().recorded);
    }
    let after = counter(
        admins[0],
        "autoscaled_door_refusals_total",
        "limit=\"forwarded_marker\"",
    ) + counter(
        admins[1],
        "autoscaled_door_refusals_total",
        "limit=\"forwarded_marker\"",
    );
    assert_eq!(after - before, 16.0, "every client marker counted once");
    drop((first, second));

    // Without the secret: nothing forwarded.
    let data = tempfile::tempdir().unwrap();
    let mut command = binary::command(&data.path().join("unused"));
    command
        .args(["--store", "etcd", "--etcd-endpoints", &etcd.endpoints()])
        .args([
            "--etcd-prefix",
            "nosecret/",
            "--metrics-listen",
            "127.0.0.1:0",
        ]);
    let lone = [binary::spawn(command), {
        let mut c = binary::command(&data.path().join("unused2"));
        c.args(["--store", "etcd", "--etcd-endpoints", &etcd.endpoints()])
            .args([
                "--etcd-prefix",
                "nosecret/",
                "--metrics-listen",
                "127.0.0.1:0",
            ]);
        binary::spawn(c)
    }];
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut c = client(lone[0].addr).await;
    for t in 0..16 {
        millis += 1;
        bounded(
            "Recommend",
            c.recommend(request(&format!("lone-t{t}"), millis)),
        )
        .await
        .unwrap();
    }
    assert_eq!(
        counter(lone[0].admin.unwrap(), "autoscaled_hpa_forwarded_total", ""),
        0.0,
        "a replica without the secret forwarded"
    );
}

/// Under mTLS replicas forward too: the hop is TLS (the owner's certificate checked against
/// the CA, the forwarding replica's own certificate presented), and the owner authorizes the
/// caller's certificate identity, which the signed marker carries (the caller may recommend
/// on `tls/`; the replicas' own identity may do nothing, so a call the owner took as the
/// forwarding replica's would be denied).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_forward_under_mtls_with_the_callers_identity() {
    if !etcd_support::available() {
        return;
    }
    let etcd = Etcd::start(1);
    let certs_dir = tempfile::tempdir().unwrap();
    let certs = etcd_support::make_certs(certs_dir.path());
    let authz = certs_dir.path().join("authz.toml");
    std::fs::write(
        &authz,
        "[[rule]]\nidentity = \"spiffe://test/caller\"\nverbs = [\"recommend\", \"read\"]\nprefixes = [\"tls/\"]\n",
    )
    .unwrap();
    let (caller_cert, caller_key) =
        etcd_support::make_client_cert(certs_dir.path(), &certs, "spiffe://test/caller");
    let paths = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    let flags = [
        "--metrics-listen".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--tls-cert".to_owned(),
        paths(&certs.server_cert),
        "--tls-key".to_owned(),
        paths(&certs.server_key),
        "--tls-client-ca".to_owned(),
        paths(&certs.ca),
        "--authz".to_owned(),
        paths(&authz),
        "--health".to_owned(),
        "open".to_owned(),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let replicas = [
        Replica::start(&etcd.endpoints(), "tls/", &flags),
        Replica::start(&etcd.endpoints(), "tls/", &flags),
    ];
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(
            std::fs::read(&certs.ca).unwrap(),
        ))
        .identity(tonic::transport::Identity::from_pem(
            std::fs::read(&caller_cert).unwrap(),
            std::fs::read(&caller_key).unwrap(),
        ))
        .domain_name("localhost");
    let mut clients = Vec::new();
    for r in &replicas {
        let channel = tonic::transport::Endpoint::from_shared(format!("https://{}", r.addr()))
            .unwrap()
            .tls_config(tls.clone())
            .unwrap()
            .connect()
            .await
            .unwrap();
        clients.push(HorizontalAutoscalerClient::new(channel));
    }
    let admins: Vec<SocketAddr> = replicas
        .iter()
        .map(|r| r.server.as_ref().unwrap().admin.unwrap())
        .collect();
    let forwarded = |i: usize| {
        counter(
            admins[i],
            "autoscaled_hpa_forwarded_total",
            "decided=\"owner\"",
        )
    };
    let started = Instant::now();
    let mut millis = epoch_millis();
    loop {
        for t in 0..16 {
            for (via, c) in clients.iter_mut().enumerate() {
                millis += 1;
                let target = format!("tls/t{t}");
                let answer = bounded(
                    format!("Recommend {target} via {via}"),
                    c.recommend(request(&target, millis)),
                )
                .await;
                assert!(answer.is_ok(), "{target} via {via}: {answer:?}");
            }
        }
        if forwarded(0) > 0.0 && forwarded(1) > 0.0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no call forwarded under TLS within 30 s ({} and {})",
            forwarded(0),
            forwarded(1)
        );
    }
}

#[test]
fn the_conformance_cases_pass_through_a_server_on_etcd() {
    if !etcd_support::available() {
        return;
    }
    let etcd = Etcd::start(1);
    let replica = Replica::start(&etcd.endpoints(), "conformance/", &[]);
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance/hpa");
    // The runner's calls have no timeout of their own: the run is bounded as a whole (a few
    // seconds here), on a thread, so that a store that never answers fails the test instead
    // of hanging it. The replica is SIGKILLed when the test ends, which ends the thread's call.
    let (done, result) = std::sync::mpsc::channel();
    let (addr, dir) = (replica.addr().to_string(), shared.clone());
    std::thread::spawn(move || {
        let mut runner = grpc::GrpcRunner::connect(&addr).unwrap();
        let _ = done.send(runner.run_dir(&dir));
    });
    let report = match result.recv_timeout(Duration::from_secs(300)) {
        Ok(report) => report,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("the conformance cases through the etcd replica did not finish within 300 s")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            panic!("the conformance runner panicked (its message is above)")
        }
    };
    let rendered = grpc::render(&report);
    assert!(report.outcomes.len() >= 173, "{rendered}");
    assert_eq!(report.failed(), 0, "\n{rendered}");

    // The same cases through a server on sled: the same outcome, case by case.
    let data = tempfile::tempdir().unwrap();
    let sled = binary::start(&data.path().join("data"));
    let mut runner = grpc::GrpcRunner::connect(&sled.addr.to_string()).unwrap();
    let on_sled = grpc::render(&runner.run_dir(&shared));
    assert_eq!(rendered, on_sled);
}

/// The replica's health; `None` if it cannot be read (no answer within [`CALL_TIMEOUT`]
/// included: the caller polls again).
async fn health(addr: SocketAddr) -> Option<ServingStatus> {
    let check = async {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .ok()?
            .connect()
            .await
            .ok()?;
        let status = HealthClient::new(channel)
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .ok()?
            .into_inner()
            .status;
        ServingStatus::try_from(status).ok()
    };
    tokio::time::timeout(CALL_TIMEOUT, check)
        .await
        .ok()
        .flatten()
}

/// Polls health until it is `want` (the probe runs every second); gives up after 60 s.
async fn wait_health(addr: SocketAddr, want: ServingStatus) {
    let started = Instant::now();
    while health(addr).await != Some(want) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "health never became {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_serving_while_etcd_is_down_and_a_clean_restart_after_all_of_etcd_restarted() {
    if !etcd_support::available() {
        return;
    }
    let mut etcd = Etcd::start(3);
    let replica = Replica::start(&etcd.endpoints(), "restart/", &[]);
    let addr = replica.addr();
    let before = concurrent_load(&[addr], 2, 10, 2, "before").await;
    wait_health(addr, ServingStatus::Serving).await;

    for i in 0..3 {
        etcd.kill(i);
    }
    wait_health(addr, ServingStatus::NotServing).await;
    let mut c = client(addr).await;
    let call = c.recommend(request("before-t0", epoch_millis() + 1_000_000));
    let err = bounded("Recommend with etcd down", call).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err}");

    for i in 0..3 {
        etcd.spawn(i);
    }
    etcd.wait_ready();
    // The same replica, without a restart.
    wait_health(addr, ServingStatus::Serving).await;
    let mut all = before.clone();
    for (target, times) in concurrent_load(&[addr], 2, 10, 2, "before").await {
        all.entry(target).or_default().extend(times);
    }
    // The refused call may or may not have been committed: nothing else is there.
    check_history(addr, &all, false).await;
    // A new replica reads the same history.
    let fresh = Replica::start(&etcd.endpoints(), "restart/", &[]);
    check_history(fresh.addr(), &all, false).await;
}

/// Stops the load `tasks` (each counting its failed calls) through `stop` and returns their
/// failed calls in all. Every call in a task is bounded (10 s), so a task ends soon after.
async fn stop_load(stop: &AtomicBool, tasks: Vec<tokio::task::JoinHandle<usize>>) -> usize {
    stop.store(true, Ordering::SeqCst);
    let mut failed = 0;
    for t in tasks {
        failed += tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("a load task did not stop within 60 s")
            .unwrap();
    }
    failed
}

/// Decisions acknowledged in each phase of the failover test before the next one starts.
const ACKS_PER_PHASE: usize = 20;

/// Polls until `ACKS_PER_PHASE` calls were acknowledged after `since` (a time since `start`,
/// as `ack_times` holds them); returns how long that took after `since`. Gives up after 60 s
/// (no failover, not a slow one).
async fn wait_for_acks(
    ack_times: &Mutex<Vec<Duration>>,
    start: Instant,
    since: Duration,
    phase: &str,
) -> Duration {
    loop {
        let acked = ack_times
            .lock()
            .unwrap()
            .iter()
            .filter(|t| **t > since)
            .count();
        let waited = start.elapsed().saturating_sub(since);
        if acked >= ACKS_PER_PHASE {
            return waited;
        }
        assert!(
            waited < Duration::from_secs(60),
            "{acked} of {ACKS_PER_PHASE} decisions acknowledged in 60 s {phase}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_kill_a_replica_then_the_etcd_leader_under_load() {
    if !etcd_support::available() {
        return;
    }
    let mut etcd = Etcd::start(3);
    let mut replicas: Vec<Replica> = (0..3)
        .map(|_| Replica::start(&etcd.endpoints(), "failover/", &[]))
        .collect();
    let addrs: Vec<SocketAddr> = replicas.iter().map(Replica::addr).collect();
    let alive: Arc<Vec<AtomicBool>> = Arc::new((0..3).map(|_| AtomicBool::new(true)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let acks: Acks = Arc::default();
    // Times (since `start`) of acknowledged calls, to measure the longest gap.
    let start = Instant::now();
    let ack_times: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let base = epoch_millis();
    let counter = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in 0..6usize {
        let mut conns = Vec::new();
        for addr in &addrs {
            conns.push(client(*addr).await);
        }
        let (alive, stop, acks, ack_times, counter) = (
            Arc::clone(&alive),
            Arc::clone(&stop),
            Arc::clone(&acks),
            Arc::clone(&ack_times),
            Arc::clone(&counter),
        );
        tasks.push(tokio::spawn(async move {
            let mut i = c;
            let mut failed = 0;
            while !stop.load(Ordering::SeqCst) {
                i += 1;
                let r = i % conns.len();
                if !alive[r].load(Ordering::SeqCst) {
                    continue;
                }
                let n = counter.fetch_add(1, Ordering::SeqCst);
                let target = format!("f-t{}", n % 5);
                let millis = base + n as i64;
                let call = conns[r].recommend(request(&target, millis));
                match tokio::time::timeout(Duration::from_secs(10), call).await {
                    Ok(Ok(_)) => {
                        acks.lock().unwrap().entry(target).or_default().push(millis);
                        ack_times.lock().unwrap().push(start.elapsed());
                    }
                    // Unacknowledged: a killed replica, or etcd electing a leader.
                    _ => {
                        failed += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
            failed
        }));
    }
    // No fixed windows: each phase lasts until the service has acknowledged decisions again
    // (`ACKS_PER_PHASE` of them), within a generous bound. How long that took is printed.
    let under_load = wait_for_acks(&ack_times, start, Duration::ZERO, "under load").await;
    alive[0].store(false, Ordering::SeqCst);
    replicas[0].kill();
    let replica_killed = start.elapsed();
    let after_replica_kill = wait_for_acks(
        &ack_times,
        start,
        replica_killed,
        "after the replica SIGKILL",
    )
    .await;
    let leader = etcd.leader();
    etcd.kill(leader);
    let leader_killed = start.elapsed();
    let after_leader_kill = wait_for_acks(
        &ack_times,
        start,
        leader_killed,
        "after the etcd leader SIGKILL",
    )
    .await;
    let failed = stop_load(&stop, tasks).await;
    println!(
        "failover: {ACKS_PER_PHASE} decisions acknowledged {under_load:?} after the start, {after_replica_kill:?} after the replica SIGKILL, {after_leader_kill:?} after the etcd leader SIGKILL"
    );
    let times = ack_times.lock().unwrap().clone();
    let after_leader: Vec<&Duration> = times.iter().filter(|t| **t > leader_killed).collect();
    assert!(
        !after_leader.is_empty(),
        "no decision acknowledged after the etcd leader was killed"
    );
    let after_replica = times.iter().filter(|t| **t > replica_killed).count();
    assert!(after_replica > after_leader.len());
    let mut sorted = times.clone();
    sorted.sort();
    let gap = |from: Duration| {
        let mut last = from;
        let mut max = Duration::ZERO;
        for t in sorted.iter().filter(|t| **t > from) {
            max = max.max(*t - last);
            last = *t;
        }
        max
    };
    eprintln!(
        "failover: {} acknowledged, {failed} failed calls; first decision {:?} after the replica SIGKILL, {:?} after the etcd leader SIGKILL; longest gap after the leader kill {:?}",
        times.len(),
        sorted
            .iter()
            .find(|t| **t > replica_killed)
            .map(|t| *t - replica_killed),
        after_leader.iter().min().map(|t| **t - leader_killed),
        gap(leader_killed),
    );
    let acks = acks.lock().unwrap().clone();
    let total = check_history(addrs[1], &acks, false).await;
    assert_eq!(total, times.len());
    drop(replicas);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_etcd_with_client_certificates() {
    if !etcd_support::available() {
        return;
    }
    let certs_dir = tempfile::tempdir().unwrap();
    let tls = etcd_support::make_certs(certs_dir.path());
    let etcd = Etcd::start_with(1, Some(tls.clone()));
    assert!(etcd.endpoints().starts_with("https://"));
    let path = |p: &std::path::PathBuf| p.to_str().unwrap().to_owned();
    let (ca, cert, key) = (path(&tls.ca), path(&tls.client_cert), path(&tls.client_key));
    let replica = Replica::start(
        &etcd.endpoints(),
        "tls/",
        &["--etcd-ca", &ca, "--etcd-cert", &cert, "--etcd-key", &key],
    );
    let acks = concurrent_load(&[replica.addr()], 2, 5, 2, "tls").await;
    check_history(replica.addr(), &acks, true).await;
    wait_health(replica.addr(), ServingStatus::Serving).await;

    // Without the client certificate etcd refuses the connection: not serving, no decision.
    let refused = Replica::start(&etcd.endpoints(), "tls/", &["--etcd-ca", &ca]);
    wait_health(refused.addr(), ServingStatus::NotServing).await;
    let mut c = client(refused.addr()).await;
    let call = c.recommend(request("tls-t0", epoch_millis() + 1_000_000));
    let err = bounded("Recommend without a client certificate", call)
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err}");
}

/// Issue 11's VPA gap: RecordUsage on etcd is a compare-and-swap on the record's
/// `mod_revision` (as Recommend's commit), so two replicas recording usage for one target at
/// once cannot both build on the same previous state. 8 clients, each with its own container,
/// alternate between two replicas and send batches to ONE target; afterwards the stored
/// record (read straight from etcd) counts every acknowledged sample: a lost batch (a plain
/// put over a concurrent one) would leave a container short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_usage_from_two_replicas_on_one_target_loses_no_acknowledged_sample() {
    use autoscaled::{
        pb::v1::{
            RecordUsageRequest, Resource, UsageSample,
            vertical_autoscaler_client::VerticalAutoscalerClient,
        },
        store::{
            VpaStore,
            etcd::{EtcdOptions, EtcdStore},
        },
    };
    if !etcd_support::available() {
        return;
    }
    const CLIENTS: usize = 8;
    const BATCHES: usize = 12;
    const SAMPLES: usize = 10;
    let etcd = Etcd::start(1);
    let prefix = "vpa-cas/";
    let replicas: Vec<Replica> = (0..2)
        .map(|_| Replica::start(&etcd.endpoints(), prefix, &[]))
        .collect();
    let addrs: Vec<SocketAddr> = replicas.iter().map(Replica::addr).collect();
    let start = epoch_millis() / 1000 - 3600;
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let mut conns = Vec::new();
        for addr in &addrs {
            conns.push(VerticalAutoscalerClient::new(channel(*addr).await));
        }
        tasks.push(tokio::spawn(async move {
            let mut accepted = 0u64;
            for b in 0..BATCHES {
                let samples = (0..SAMPLES)
                    .map(|s| UsageSample {
                        pod: "p".into(),
                        container: format!("c{c}"),
                        resource: Resource::Cpu as i32,
                        value: 100.0 + s as f64,
                        timestamp: Some(prost_types::Timestamp {
                            seconds: start + (b * SAMPLES + s) as i64,
                            nanos: 0,
                        }),
                    })
                    .collect();
                let conn = &mut conns[(c + b) % 2];
                let call = conn.record_usage(RecordUsageRequest {
                    target_key: "shared".into(),
                    samples,
                    ..Default::default()
                });
                let response = bounded(format!("RecordUsage client {c} batch {b}"), call)
                    .await
                    .unwrap_or_else(|e| panic!("client {c} batch {b}: {e}"))
                    .into_inner();
                accepted += u64::try_from(response.accepted_samples).unwrap();
            }
            (c, accepted)
        }));
    }
    let mut acknowledged = BTreeMap::new();
    for t in tasks {
        let (c, accepted) = t.await.unwrap();
        // Each client's samples are in order for its own container: all are accepted.
        assert_eq!(accepted, (BATCHES * SAMPLES) as u64, "client {c}");
        acknowledged.insert(format!("c{c}"), accepted);
    }
    let endpoints = etcd.endpoints();
    // Each etcd request of the store is bounded by `request_timeout` per member (and tried on
    // each member at most twice); the whole read is bounded too.
    let read = tokio::spawn(async move {
        let store = EtcdStore::connect(EtcdOptions {
            endpoints: endpoints.split(',').map(str::to_owned).collect(),
            prefix: prefix.to_owned(),
            request_timeout: Duration::from_secs(5),
            ..EtcdOptions::default()
        })
        .unwrap();
        let state = store
            .load_vertical("shared")
            .await
            .unwrap()
            .expect("stored");
        state
            .target
            .aggregates
            .iter()
            .map(|(name, a)| (name.clone(), a.total_samples_count))
            .collect::<BTreeMap<_, _>>()
    });
    let counted = bounded("reading the VPA record from etcd", read)
        .await
        .unwrap();
    assert_eq!(counted, acknowledged);
}

/// A member call of the budget test: an External AverageValue metric, one replica per 1000 of
/// `queue`, under the policy the test puts.
fn member_call(key: &str, at_secs: i64, current: i32, demand: i64) -> RecommendRequest {
    use autoscaled::pb::v1 as pb;
    RecommendRequest {
        target_key: key.into(),
        current_replicas: current,
        policy: "ha-tier".into(),
        external_metrics: [(
            "queue".to_owned(),
            pb::ExternalMetricValues {
                values_milli: vec![demand * 1000],
            },
        )]
        .into(),
        evaluation_time: Some(prost_types::Timestamp {
            seconds: at_secs,
            nanos: 0,
        }),
        ..Default::default()
    }
}

/// A scaling group's members decided by two replicas at once (each member's calls sent to
/// either replica, forwarded to its owner, the group's ledger written by both) never hold
/// more than the capacity; a SIGKILLed replica loses no allocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scaling_group_decided_by_two_replicas_stays_within_its_capacity() {
    use autoscaled::pb::v1 as pb;
    if !etcd_support::available() {
        return;
    }
    let etcd = Etcd::start(1);
    let mut replicas: Vec<Replica> = (0..2)
        .map(|_| Replica::start(&etcd.endpoints(), "group/", &[]))
        .collect();
    let addrs: Vec<SocketAddr> = replicas.iter().map(Replica::addr).collect();
    let mut admin = client(addrs[0]).await;
    let metric = autoscaled_fixtures::external_average_value("queue", 1000);
    bounded(
        "PutPolicy",
        admin.put_policy(pb::PutPolicyRequest {
            policy: Some(pb::Policy {
                name: "ha-tier".into(),
                spec: Some(pb::HorizontalSpec {
                    min_replicas: Some(1),
                    max_replicas: 40,
                    metrics: vec![metric],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            expected_version: None,
        }),
    )
    .await
    .unwrap();
    const CAPACITY: i64 = 23;
    bounded(
        "PutScalingGroup",
        admin.put_scaling_group(pb::PutScalingGroupRequest {
            group: Some(pb::ScalingGroup {
                name: "shared".into(),
                capacity: CAPACITY,
                member_policies: vec!["ha-tier".into()],
                ..Default::default()
            }),
            expected_version: None,
        }),
    )
    .await
    .unwrap();
    // The other replica reads the groups' definitions at most a second late.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let status = |addr: SocketAddr| async move {
        let mut c = client(addr).await;
        bounded(
            "GetScalingGroup",
            c.get_scaling_group(pb::GetScalingGroupRequest {
                name: "shared".into(),
            }),
        )
        .await
        .unwrap()
        .into_inner()
    };
    let keys: Vec<String> = (0..10).map(|i| format!("ha/m{i}")).collect();
    let mut running: BTreeMap<String, i32> = keys.iter().map(|k| (k.clone(), 1)).collect();
    let t0 = epoch_millis() / 1000;
    // The members join at what they run.
    for (i, k) in keys.iter().enumerate() {
        let mut c = client(addrs[i % 2]).await;
        bounded("join", c.recommend(member_call(k, t0, 1, 1)))
            .await
            .unwrap();
    }
    assert_eq!(status(addrs[1]).await.used, 10);
    let clients = [client(addrs[0]).await, client(addrs[1]).await];
    let mut live = vec![0usize, 1];
    for round in 1..=8i64 {
        if round == 5 {
            // SIGKILL a replica: the survivor takes its members over with their allocation.
            let before = status(addrs[1]).await;
            replicas[0].kill();
            live = vec![1];
            let after = status(addrs[1]).await;
            assert_eq!(after.used, before.used, "nothing held is lost");
            assert_eq!(after.members, before.members);
        }
        let calls: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let mut c = clients[live[i % live.len()]].clone();
                let req = member_call(k, t0 + 15 * round, running[k], 20);
                let k = k.clone();
                tokio::spawn(async move {
                    let answer = bounded(format!("Recommend {k}"), c.recommend(req)).await;
                    (k, answer)
                })
            })
            .collect();
        let mut told = 0;
        for call in calls {
            let (k, answer) = call.await.unwrap();
            match answer {
                Ok(r) => {
                    let r = r.into_inner();
                    told += r.desired_replicas;
                    running.insert(k, r.desired_replicas);
                }
                // The call in flight on the killed replica's connection may fail; the member
                // keeps what it runs.
                Err(e) if round == 5 => {
                    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
                    told += running[&k];
                }
                Err(e) => panic!("round {round}: {e:?}"),
            }
        }
        let s = status(addrs[1]).await;
        assert!(
            i64::from(told) <= CAPACITY && s.used <= CAPACITY,
            "round {round}: told {told}, held {} of {CAPACITY}",
            s.used
        );
    }
    // Ten members wanting 20 each share 23: 3 for the first three, 2 for the others.
    let s = status(addrs[1]).await;
    let counts: Vec<i32> = s.members.iter().map(|m| m.desired_replicas).collect();
    assert_eq!(counts, vec![3, 3, 3, 2, 2, 2, 2, 2, 2, 2], "{s:?}");
}

/// A TCP proxy in front of an etcd member, for a replica whose only way to etcd it is. Cut, it
/// carries no more bytes either way and holds every connection open, new ones included (a
/// partition: requests go unanswered until they time out); healed, it closes the held
/// connections and carries new ones again.
struct Partition {
    addr: SocketAddr,
    cut: tokio::sync::watch::Sender<bool>,
}

impl Partition {
    async fn start(to: SocketAddr) -> Partition {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (cut, watch) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut watch = watch.clone();
                tokio::spawn(async move {
                    if !*watch.borrow() {
                        let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await else {
                            return;
                        };
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => return,
                            _ = watch.wait_for(|cut| *cut) => {}
                        }
                        // Held (both sockets open, nothing carried) until the partition heals.
                        let _ = watch.wait_for(|cut| !*cut).await;
                    } else {
                        let _ = watch.wait_for(|cut| !*cut).await;
                    }
                });
            }
        });
        Partition { addr, cut }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn set(&self, cut: bool) {
        let _ = self.cut.send(cut);
    }
}

/// A replica cut off from etcd (its only way there a proxy the test cuts, so that its requests
/// go unanswered) stops deciding: it commits nothing while cut and reports NOT_SERVING, and the
/// other replica decides every target once the cut replica's lease has expired. Healed, it
/// registers again and decides again, and its memory of the targets it owned before the cut
/// (stale: the other replica decided them since) is never written over the newer history:
/// every acknowledged decision is in the history, once. The time the targets took to move is
/// printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_partitioned_from_etcd_stops_deciding_and_its_targets_move() {
    if !etcd_support::available() {
        return;
    }
    let etcd = Etcd::start(1);
    let member: SocketAddr = etcd.members[0]
        .client_url()
        .strip_prefix("http://")
        .unwrap()
        .parse()
        .unwrap();
    let partition = Partition::start(member).await;
    let flags = ["--metrics-listen", "127.0.0.1:0"];
    let a = Replica::start(&etcd.endpoints(), "part/", &flags);
    let b = Replica::start(&partition.url(), "part/", &flags);
    let admin = |r: &Replica| r.server.as_ref().unwrap().admin.expect("an admin listener");
    let (admin_a, admin_b) = (admin(&a), admin(&b));
    let forwarded = |at| counter(at, "autoscaled_hpa_forwarded_total", "decided=\"owner\"");
    let decided_by_b = || counter(admin_b, "autoscaled_hpa_decisions_total", "");

    // Five loops, every call bounded: three send every target's calls through both replicas
    // in turn, the fourth through the replica that stays connected only (its calls show when
    // the cut replica's targets are decided again), the fifth every target in one
    // RecommendBatch through that replica too: what it forwards to the cut replica before it
    // sees the lease gone is declined request by request, and decided where it landed, never
    // answered as declined. The acknowledged calls are recorded, the fourth loop's with when.
    const TARGETS: usize = 16;
    let addrs = [a.addr(), b.addr()];
    let stop = Arc::new(AtomicBool::new(false));
    let acks: Acks = Arc::default();
    // The fourth loop's acknowledged calls: when, and which target.
    let acked_at: Arc<Mutex<Vec<(Duration, usize)>>> = Arc::default();
    let start = Instant::now();
    let base = epoch_millis();
    let next = Arc::new(AtomicUsize::new(0));
    let batch_declined = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    {
        let conn = client(addrs[0]).await;
        let (stop, acks, next, batch_declined) = (
            Arc::clone(&stop),
            Arc::clone(&acks),
            Arc::clone(&next),
            Arc::clone(&batch_declined),
        );
        tasks.push(tokio::spawn(async move {
            use autoscaled::pb::v1::{RecommendBatchRequest, recommend_batch_result::Result};
            let mut failed = 0;
            while !stop.load(Ordering::SeqCst) {
                let first = next.fetch_add(TARGETS, Ordering::SeqCst);
                let calls: Vec<(String, i64)> = (first..first + TARGETS)
                    .map(|n| (format!("part-t{}", n % TARGETS), base + n as i64))
                    .collect();
                let requests = calls.iter().map(|(t, at)| request(t, *at)).collect();
                let mut conn = conn.clone();
                let call = conn.recommend_batch(RecommendBatchRequest { requests });
                match tokio::time::timeout(Duration::from_secs(10), call).await {
                    Ok(Ok(answer)) => {
                        for ((target, at), result) in
                            calls.into_iter().zip(answer.into_inner().results)
                        {
                            match result.result {
                                Some(Result::Response(r)) => {
                                    assert_eq!(ts_millis(&r.evaluation_time), at, "{target}");
                                    acks.lock().unwrap().entry(target).or_default().push(at);
                                }
                                Some(Result::Error(e)) => {
                                    failed += 1;
                                    if e.declined {
                                        batch_declined.fetch_add(1, Ordering::SeqCst);
                                    }
                                }
                                None => failed += 1,
                            }
                        }
                    }
                    _ => {
                        failed += TARGETS;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
            failed
        }));
    }
    for task in 0..4 {
        let conns = [client(addrs[0]).await, client(addrs[1]).await];
        let (stop, acks, acked_at, next) = (
            Arc::clone(&stop),
            Arc::clone(&acks),
            Arc::clone(&acked_at),
            Arc::clone(&next),
        );
        tasks.push(tokio::spawn(async move {
            let mut failed = 0;
            while !stop.load(Ordering::SeqCst) {
                let n = next.fetch_add(1, Ordering::SeqCst);
                let t = n % TARGETS;
                let target = format!("part-t{t}");
                let millis = base + n as i64;
                let via = if task == 3 { 0 } else { (n / TARGETS) % 2 };
                let mut conn = conns[via].clone();
                let call = conn.recommend(request(&target, millis));
                match tokio::time::timeout(Duration::from_secs(10), call).await {
                    Ok(Ok(_)) => {
                        acks.lock().unwrap().entry(target).or_default().push(millis);
                        if task == 3 {
                            acked_at.lock().unwrap().push((start.elapsed(), t));
                        }
                    }
                    _ => {
                        failed += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
            failed
        }));
    }
    // Both replicas registered and read each other: each forwards the other's targets.
    let started = Instant::now();
    while forwarded(admin_a) == 0.0 || forwarded(admin_b) == 0.0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "ownership not shared within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    partition.set(true);
    let cut = start.elapsed();
    wait_health(b.addr(), ServingStatus::NotServing).await;
    // What B had sent before the cut has failed by now (its registration has lapsed, so it
    // stopped waiting for etcd): from here on it commits nothing.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let decided_while_cut = decided_by_b();
    // Called directly, it declines the targets it owned (UNAVAILABLE, marked: nothing read or
    // written) and forwards the others.
    let mut direct = client(b.addr()).await;
    let mut declined = 0;
    let first = next.fetch_add(TARGETS, Ordering::SeqCst);
    for n in first..first + TARGETS {
        let target = format!("part-t{}", n % TARGETS);
        let millis = base + n as i64;
        match bounded(
            "Recommend on the cut replica",
            direct.recommend(request(&target, millis)),
        )
        .await
        {
            Ok(_) => acks.lock().unwrap().entry(target).or_default().push(millis),
            Err(status) => {
                assert_eq!(
                    status.code(),
                    tonic::Code::Unavailable,
                    "{target}: {status}"
                );
                assert!(
                    status.metadata().contains_key("autoscaled-declined"),
                    "{target}: not declined: {status}"
                );
                declined += 1;
            }
        }
    }
    assert!(declined > 0, "the cut replica declined none of its targets");
    // Every target decided after the cut: the cut replica's targets moved to the other.
    let moved = loop {
        let times = acked_at.lock().unwrap().clone();
        let firsts: BTreeMap<usize, Duration> =
            times
                .iter()
                .filter(|(at, _)| *at > cut)
                .fold(BTreeMap::new(), |mut m, (at, t)| {
                    m.entry(*t).or_insert(*at);
                    m
                });
        if firsts.len() == TARGETS {
            break firsts.values().max().copied().unwrap() - cut;
        }
        assert!(
            start.elapsed() - cut < Duration::from_secs(60),
            "only {} of {TARGETS} targets decided in the 60 s after the cut",
            firsts.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        decided_by_b(),
        decided_while_cut,
        "the replica cut off from etcd acknowledged decisions of its own"
    );

    partition.set(false);
    let healed = Instant::now();
    wait_health(b.addr(), ServingStatus::Serving).await;
    while decided_by_b() == decided_while_cut {
        assert!(
            healed.elapsed() < Duration::from_secs(30),
            "the healed replica decided nothing in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let resumed = healed.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let failed = stop_load(&stop, tasks).await;
    let acks = acks.lock().unwrap().clone();
    let acked = acks.values().map(Vec::len).sum::<usize>();
    let decided_here = counter(
        admin_a,
        "autoscaled_hpa_forwarded_total",
        "decided=\"here\"",
    );
    println!(
        "partition: every target decided within {moved:?} after the cut; the cut replica \
         declined {declined} of {TARGETS} targets called directly and decided again \
         {resumed:?} after the heal; {acked} acknowledged, {failed} failed calls; the other \
         decided {decided_here} writes it had forwarded to the cut replica"
    );
    assert_eq!(
        batch_declined.load(Ordering::SeqCst),
        0,
        "requests of a batch answered as declined by the replica that forwarded them"
    );
    // A call that failed may have been committed (its answer lost in the cut): at least the
    // acknowledged ones, each once.
    assert_eq!(check_history(a.addr(), &acks, false).await, acked);
}
