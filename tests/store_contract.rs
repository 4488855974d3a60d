//! The history store's contract, one body run against each backend: sled (a temporary
//! folder) and etcd (a real etcd process, `tests/etcd_support`). Through the public
//! `HpaStore` API, as the server calls it (`load_for_update`, `prune`, `commit_after`,
//! `flush`):
//!
//! * the decision log is bounded: after N + k runs only the newest N are kept (also N = 1),
//!   and the surplus is deleted, not merely hidden (a store reopened with a larger bound
//!   still sees only N);
//! * consecutive decisions that say the same thing are one run, with its count, first time
//!   and the last decision;
//! * every decision of a run keeps its reading (time and each metric's value), and a run
//!   holds at most `MAX_RUN_DECISIONS`: the next identical decision starts a new run;
//! * closed runs that ended more than `decision_retention` before the newest decision are
//!   dropped (by their end, not their start);
//! * the stored recommendations and scale events stay within `prune`'s caps
//!   (`MAX_RECOMMENDATIONS`, `MAX_SCALE_EVENTS`) however many calls a target gets.
//!
//! * policies and scaling groups (with a group's ledger) read back as written, list in name
//!   order and delete; on etcd a write guarded by a stale revision is a conflict and writes
//!   nothing.
//!
//! Without etcd installed the etcd run prints `SKIPPED` and returns, except under `CI=true`
//! where it fails (`etcd_support::available`; `scripts/etcd-ci.sh` installs etcd).

mod etcd_support;

use std::time::Duration;

use autoscaled::{
    engine::{
        hpa::condition::{Condition, ConditionReason, ConditionType},
        hpa::history::{History, Recommendation, ScaleEvent},
        hpa::prune::{self, MAX_RECOMMENDATIONS, MAX_SCALE_EVENTS},
        hpa::settings::Settings,
        hpa::spec::HorizontalSpec,
        hpa::{Decision, DecisionPath, MetricOutcome, MetricProposal},
        time::Time,
    },
    store::{
        Commit, DecisionEntry, FleetStore, HpaStore, MAX_RUN_DECISIONS, ScalingGroupDef, SledStore,
        StoreError, StoredPolicy,
        etcd::{EtcdOptions, EtcdStore},
        sled::SledOptions,
    },
};

const T0: i64 = 1_767_225_600;

/// The runtime the stores run on (the etcd store's batcher is a task of it); the contract
/// itself is written as plain calls that wait for each store call.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    })
}

/// Waits for one store call.
fn wait<T>(call: impl std::future::Future<Output = T>) -> T {
    runtime().block_on(call)
}

/// Large enough that neither bound nor retention trims anything in a check.
const UNBOUNDED: usize = 10_000;
const FOREVER: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Opens the backend on the same data each time, with this decision-log bound and retention.
/// A handle must be dropped before the next is opened (sled's folder lock).
type Open<'a> = &'a dyn Fn(usize, Duration) -> Box<dyn HpaStore>;

fn spec() -> HorizontalSpec {
    HorizontalSpec::new(Some(1), 1000, vec![])
}

/// The cpu utilization the decision at `secs` observed: different from one call to the next.
fn utilization(secs: i64) -> i32 {
    40 + i32::try_from(secs % 23).unwrap()
}

/// A decision for `desired` replicas; decisions with the same `desired` say the same thing
/// (the message and the cpu reading, which differ per call, are not part of the outcome).
fn entry(secs: i64, desired: i32) -> DecisionEntry {
    let decision = Decision {
        desired_replicas: desired,
        conditions: vec![Condition::new(
            ConditionType::AbleToScale,
            true,
            ConditionReason::ReadyForNewScale,
            format!("decided at {secs}"),
        )],
        metrics: vec![MetricOutcome {
            index: 0,
            result: Ok(MetricProposal {
                replicas: desired,
                current_average_utilization: Some(utilization(secs)),
                current_average_value: Some(i64::from(utilization(secs)) * 10),
                current_value: None,
                usage_ratio: Some(f64::from(utilization(secs)) / 80.0),
            }),
            pod_groups: None,
        }],
        prenormalized_replicas: Some(desired),
        ..Decision::keeping(1, DecisionPath::Legacy)
    };
    DecisionEntry::single(
        Time::from_unix_secs(T0 + secs),
        decision,
        &spec(),
        &Settings::default(),
    )
}

/// One call as the server makes it: read for update, add this evaluation's recommendation
/// and scale events to the stored history, prune, commit; returns the committed history.
fn decide(store: &dyn HpaStore, key: &str, secs: i64, desired: i32) -> History {
    decide_with(store, key, secs, desired, desired)
}

/// [`decide`], the evaluation proposing `proposal` (its recommendation) for `desired`.
fn decide_with(store: &dyn HpaStore, key: &str, secs: i64, desired: i32, proposal: i32) -> History {
    decide_entry(store, key, entry(secs, desired), proposal)
}

/// [`decide`] with the decision `e` (its time, outcome and spec).
fn decide_entry(store: &dyn HpaStore, key: &str, e: DecisionEntry, proposal: i32) -> History {
    let now = e.time;
    let (state, seen) = wait(store.load_for_update(key)).unwrap();
    let mut history = state.map(|s| s.history).unwrap_or_default();
    history
        .recommendations
        .get_or_insert_with(Vec::new)
        .push(Recommendation {
            replicas: proposal,
            time: now,
        });
    for events in [&mut history.scale_up_events, &mut history.scale_down_events] {
        events.push(ScaleEvent {
            replica_change: 1,
            time: now,
            outdated: false,
        });
    }
    prune::prune(&mut history, now, Duration::from_secs(3600));
    wait(store.commit_after(seen, Commit::new(key, &history, &e))).unwrap();
    history
}

/// The target's runs as (desired, count, first second, last second).
fn runs(store: &dyn HpaStore, key: &str) -> Vec<(i32, u64, i64, i64)> {
    let runs = wait(store.decisions(key)).unwrap();
    let seqs: Vec<u64> = runs.iter().map(|r| r.seq).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "{key}: runs not oldest first: {seqs:?}"
    );
    for r in &runs {
        // A reading per decision, from the run's first, in time order.
        assert_eq!(r.readings.len() as u64, r.run.count, "{key}: {r:?}");
        assert_eq!(r.readings[0].time, r.run.first_time, "{key}: {r:?}");
        assert!(
            r.readings.windows(2).all(|w| w[0].time < w[1].time),
            "{key}: {r:?}"
        );
    }
    runs.iter()
        .map(|r| {
            (
                r.decision.desired_replicas,
                r.run.count,
                r.run.first_time.unix_millis() / 1000 - T0,
                r.time.unix_millis() / 1000 - T0,
            )
        })
        .collect()
}

fn desired(store: &dyn HpaStore, key: &str) -> Vec<i32> {
    runs(store, key).iter().map(|r| r.0).collect()
}

/// The contract, on a backend whose data starts empty.
fn contract(open: Open) {
    log_bound(open, "bound/4", 4, 3);
    log_bound(open, "bound/1", 1, 3);
    runs_of_identical_decisions(open);
    a_run_has_one_spec(open);
    every_decision_keeps_its_reading(open);
    latest_is_the_newest_run(open);
    withdrawn_newest_is_replaced(open);
    retention_by_age(open);
    bounded_history(open);
    commit_rules(open);
    predictive_state_is_committed(open);
}

/// A predictive model (`History::predictive`) travels the same commit as the rest of the
/// state and comes back equal, on every backend; a commit without it drops it.
fn predictive_state_is_committed(open: Open) {
    use autoscaled::engine::hpa::predictive::{State, model::LoadModel};
    let store = open(UNBOUNDED, FOREVER);
    let key = "predictive/a";
    // Ten hours of a load with an hourly shape, a minute apart: the profiles partly seen,
    // the levels and the pending evaluations in use.
    let mut model = LoadModel::new(300, 60);
    for m in 0..600_i64 {
        model.observe(T0 + m * 60, 5.0 + (m % 60) as f64 / 6.0);
    }
    let state = State {
        models: vec![("External/load".to_owned(), model)],
    };
    let commit = |secs: i64, predictive: Option<State>| {
        let (loaded, seen) = wait(store.load_for_update(key)).unwrap();
        let mut history = loaded.map(|s| s.history).unwrap_or_default();
        history.predictive = predictive;
        wait(store.commit_after(seen, Commit::new(key, &history, &entry(secs, 3)))).unwrap();
    };
    commit(T0, Some(state.clone()));
    let stored = wait(store.load(key)).unwrap().unwrap().history;
    assert_eq!(stored.predictive.as_ref(), Some(&state));
    commit(T0 + 15, None);
    let stored = wait(store.load(key)).unwrap().unwrap().history;
    assert!(stored.predictive.is_none());
}

/// N + k distinct decisions under a bound of N: the newest N stay, and the older ones are
/// deleted (a reader with a larger bound does not find them).
fn log_bound(open: Open, key: &str, n: usize, k: usize) {
    let total = i32::try_from(n + k).unwrap();
    let newest: Vec<i32> = (1..=total).skip(k).collect();
    {
        let store = open(n, FOREVER);
        for i in 1..=total {
            decide(&*store, key, i64::from(i) * 15, i);
            assert!(
                wait(store.decisions(key)).unwrap().len() <= n,
                "{key}: over the bound"
            );
        }
        assert_eq!(desired(&*store, key), newest, "{key}");
        assert_eq!(
            wait(store.load(key)).unwrap().unwrap().next_seq,
            (n + k) as u64
        );
        store.flush().unwrap();
    }
    let reader = open(UNBOUNDED, FOREVER);
    assert_eq!(
        desired(&*reader, key),
        newest,
        "{key}: runs beyond the bound of {n} were left in the store (only hidden on read)"
    );
}

/// Consecutive decisions that say the same thing are one run: its count, the first one's
/// time, the last one's time and decision. A run counts once against the bound.
fn runs_of_identical_decisions(open: Open) {
    let key = "runs/a";
    let store = open(3, FOREVER);
    for s in [0, 15, 30, 45] {
        decide(&*store, key, s, 5);
    }
    for s in [60, 75] {
        decide(&*store, key, s, 6);
    }
    decide(&*store, key, 90, 5);
    assert_eq!(
        runs(&*store, key),
        vec![(5, 4, 0, 45), (6, 2, 60, 75), (5, 1, 90, 90)]
    );
    let all = wait(store.decisions(key)).unwrap();
    assert_eq!(
        all[0].decision.conditions[0].message, "decided at 45",
        "a run holds its last decision"
    );
    // Seven decisions, three runs: within the bound of 3. A fourth run pushes out the first.
    decide(&*store, key, 105, 5);
    decide(&*store, key, 120, 7);
    assert_eq!(
        runs(&*store, key),
        vec![(6, 2, 60, 75), (5, 2, 90, 105), (7, 1, 120, 120)]
    );
    assert_eq!(wait(store.load(key)).unwrap().unwrap().next_seq, 4);
}

/// A run holds decisions under one spec: the same outcome under another spec starts a new
/// run. Each run reads back with its own spec (runs logged without theirs, the same as their
/// successor's, take it from there), also once the log's oldest runs are trimmed.
fn a_run_has_one_spec(open: Open) {
    let key = "spec/a";
    let store = open(4, FOREVER);
    let with_max = |secs: i64, desired: i32, max: i32| {
        let mut e = entry(secs, desired);
        e.inputs.as_mut().unwrap().max_replicas = max;
        e
    };
    let steps = [
        (0, 5, 100),
        (15, 5, 100),
        (30, 6, 100),
        (45, 6, 200),
        (60, 6, 200),
        (75, 6, 300),
        (90, 7, 300),
        (105, 7, 300),
    ];
    for (secs, desired, max) in steps {
        decide_entry(&*store, key, with_max(secs, desired, max), desired);
    }
    let seen = |store: &dyn HpaStore| -> Vec<(i32, u64, i32)> {
        wait(store.decisions(key))
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r.decision.desired_replicas,
                    r.run.count,
                    r.inputs.as_ref().unwrap().max_replicas,
                )
            })
            .collect()
    };
    // Five runs under a bound of 4: the first (5 × 2 under 100) is trimmed.
    assert_eq!(
        seen(&*store),
        vec![(6, 1, 100), (6, 2, 200), (6, 1, 300), (7, 2, 300)]
    );
    assert_eq!(
        wait(store.decisions(key)).unwrap()[0].metrics,
        entry(0, 5).metrics
    );
    store.flush().unwrap();
    drop(store);
    let store = open(2, FOREVER);
    decide_entry(&*store, key, with_max(120, 8, 300), 8);
    assert_eq!(seen(&*store), vec![(7, 2, 300), (8, 1, 300)]);
}

/// 45 decisions that say the same thing: a run of `MAX_RUN_DECISIONS` (40) and a run of 5,
/// each holding every decision's time and cpu reading, also when read by a fresh handle.
fn every_decision_keeps_its_reading(open: Open) {
    let key = "readings/a";
    let store = open(UNBOUNDED, FOREVER);
    let times: Vec<i64> = (0..45).map(|i| i * 15 + i % 4).collect();
    for &s in &times {
        decide(&*store, key, s, 5);
    }
    assert_eq!(MAX_RUN_DECISIONS, 40);
    let expected = vec![(5, 40, times[0], times[39]), (5, 5, times[40], times[44])];
    assert_eq!(runs(&*store, key), expected);
    let readings = |store: &dyn HpaStore| -> Vec<(i64, Vec<Option<i64>>)> {
        wait(store.decisions(key))
            .unwrap()
            .iter()
            .flat_map(|r| r.readings.clone())
            .map(|r| (r.time.unix_millis() / 1000 - T0, r.values))
            .collect()
    };
    let want: Vec<(i64, Vec<Option<i64>>)> = times
        .iter()
        .map(|&s| (s, vec![Some(i64::from(utilization(s)))]))
        .collect();
    assert_eq!(readings(&*store), want);
    store.flush().unwrap();
    drop(store);
    let store = open(UNBOUNDED, FOREVER);
    assert_eq!(runs(&*store, key), expected);
    assert_eq!(readings(&*store), want);
}

/// `latest` (one state read) is the last of `decisions` after every kind of commit: a new
/// run, a run extended (its tail), a run closed; nothing for a target never written or
/// deleted.
fn latest_is_the_newest_run(open: Open) {
    let key = "latest/a";
    let store = open(3, FOREVER);
    assert_eq!(wait(store.latest(key)).unwrap(), None);
    for (s, desired) in [(0, 2), (15, 2), (30, 2), (45, 4), (60, 3), (75, 3)] {
        decide(&*store, key, s, desired);
        let newest = wait(store.latest(key)).unwrap().expect("a newest run");
        assert_eq!(
            Some(&newest),
            wait(store.decisions(key)).unwrap().last(),
            "{s}"
        );
        assert_eq!(newest.time.unix_millis() / 1000 - T0, s);
    }
    let newest = wait(store.latest(key)).unwrap().unwrap();
    assert_eq!((newest.decision.desired_replicas, newest.run.count), (3, 2));
    assert_eq!(newest.run.first_time.unix_millis() / 1000 - T0, 60);
    assert!(wait(store.delete(key)).unwrap());
    assert_eq!(wait(store.latest(key)).unwrap(), None);
}

/// A failed rescale (`ReportScale`): the write after `Seen::withdraw_newest` replaces the
/// newest decision with its amended copy instead of following it. A run of one is replaced
/// in place; a longer run gives up its last decision to the amended one.
fn withdrawn_newest_is_replaced(open: Open) {
    let key = "withdraw/a";
    let store = open(UNBOUNDED, FOREVER);
    let amend = |secs: i64, desired: i32| {
        let (state, mut seen) = wait(store.load_for_update(key)).unwrap();
        let newest = seen.newest().cloned().expect("a newest decision");
        assert_eq!(newest.time.unix_millis() / 1000 - T0, secs);
        let mut amended = entry(secs, desired);
        amended.decision.conditions[0] = Condition::new(
            ConditionType::AbleToScale,
            false,
            ConditionReason::FailedUpdateScale,
            "the HPA controller was unable to update the target scale: no",
        );
        seen.withdraw_newest();
        let history = state.unwrap().history;
        wait(store.commit_after(seen, Commit::new(key, &history, &amended))).unwrap();
    };
    let reason = |store: &dyn HpaStore| {
        let newest = wait(store.latest(key)).unwrap().unwrap();
        newest.decision.conditions[0].reason
    };
    for s in [0, 15] {
        decide(&*store, key, s, 5);
    }
    decide(&*store, key, 30, 6);
    amend(30, 6);
    assert_eq!(runs(&*store, key), vec![(5, 2, 0, 15), (6, 1, 30, 30)]);
    assert_eq!(reason(&*store), ConditionReason::FailedUpdateScale);
    // The next decision says something else again: a new run after the amended one.
    decide(&*store, key, 45, 7);
    decide(&*store, key, 60, 7);
    assert_eq!(
        runs(&*store, key),
        vec![(5, 2, 0, 15), (6, 1, 30, 30), (7, 2, 45, 60)]
    );
    amend(60, 7);
    assert_eq!(
        runs(&*store, key),
        vec![
            (5, 2, 0, 15),
            (6, 1, 30, 30),
            (7, 1, 45, 60),
            (7, 1, 60, 60)
        ]
    );
    assert_eq!(reason(&*store), ConditionReason::FailedUpdateScale);
    // Durable and readable by a fresh handle, and the log keeps growing normally after it.
    store.flush().unwrap();
    drop(store);
    let store = open(UNBOUNDED, FOREVER);
    decide(&*store, key, 75, 8);
    assert_eq!(
        runs(&*store, key),
        vec![
            (5, 2, 0, 15),
            (6, 1, 30, 30),
            (7, 1, 45, 60),
            (7, 1, 60, 60),
            (8, 1, 75, 75)
        ]
    );
}

/// With a retention of 100 s, a closed run is dropped once the newest decision is more than
/// 100 s after the run ENDED (when its successor began), however long ago it began.
fn retention_by_age(open: Open) {
    let key = "retention/a";
    let retention = Duration::from_secs(100);
    {
        let store = open(UNBOUNDED, retention);
        // Run 1: from 0 to 150, closed when run 2 begins at 160.
        for s in (0..=150).step_by(10) {
            decide(&*store, key, s, 1);
        }
        decide(&*store, key, 160, 2);
        decide(&*store, key, 170, 3);
        // 255 - 100 = 155 < 160: run 1 ended within the retention; it stays, although it
        // began 255 s ago.
        decide(&*store, key, 255, 4);
        assert_eq!(
            runs(&*store, key),
            vec![
                (1, 16, 0, 150),
                (2, 1, 160, 160),
                (3, 1, 170, 170),
                (4, 1, 255, 255)
            ]
        );
        // 265 - 100 = 165 >= 160: run 1 ended too long ago; run 2 (ended at 170) stays.
        decide(&*store, key, 265, 5);
        assert_eq!(desired(&*store, key), vec![2, 3, 4, 5]);
        // Much later: every run but the one just closed (it ended now) and the new one is
        // old.
        decide(&*store, key, 5_000, 6);
        assert_eq!(desired(&*store, key), vec![5, 6]);
        decide(&*store, key, 10_000, 7);
        assert_eq!(desired(&*store, key), vec![6, 7]);
        store.flush().unwrap();
    }
    let reader = open(UNBOUNDED, FOREVER);
    assert_eq!(desired(&*reader, key), vec![6, 7], "old runs were deleted");
}

/// Far more calls within the retention hour than the caps: what is stored stays within
/// `MAX_RECOMMENDATIONS` and `MAX_SCALE_EVENTS` per direction, and is what was committed.
fn bounded_history(open: Open) {
    let key = "history/a";
    let calls = 2 * MAX_RECOMMENDATIONS.max(MAX_SCALE_EVENTS) + 50;
    let store = open(UNBOUNDED, FOREVER);
    let mut committed = History::default();
    for i in 0..calls {
        let i = i32::try_from(i).unwrap();
        // Falling proposals: each is above every newer one, so none is redundant and
        // only the cap (bucketing) can shrink the list.
        committed = decide_with(&*store, key, i64::from(i), 5, 10_000 - i);
    }
    let stored = wait(store.load(key)).unwrap().unwrap().history;
    assert_eq!(stored, committed, "the store returns what was committed");
    let recommendations = stored.recommendations.as_ref().unwrap();
    assert!(
        recommendations.len() <= MAX_RECOMMENDATIONS,
        "{} recommendations stored after {calls} calls",
        recommendations.len()
    );
    assert!(
        recommendations.contains(&Recommendation {
            replicas: 10_000 - i32::try_from(calls - 1).unwrap(),
            time: Time::from_unix_secs(T0 + i64::try_from(calls - 1).unwrap()),
        }),
        "the newest recommendation is kept"
    );
    for (direction, events) in [
        ("up", &stored.scale_up_events),
        ("down", &stored.scale_down_events),
    ] {
        assert!(
            events.len() <= MAX_SCALE_EVENTS,
            "{} scale-{direction} events stored after {calls} calls",
            events.len()
        );
        // Merged, not dropped: the changes still sum to one per call.
        let sum: i64 = events.iter().map(|e| i64::from(e.replica_change)).sum();
        assert_eq!(sum, i64::try_from(calls).unwrap(), "scale-{direction}");
    }
    // All the same decision: runs of `MAX_RUN_DECISIONS`, the last one shorter.
    let calls = calls as u64;
    let expected: Vec<(i32, u64, i64, i64)> = (0..calls)
        .step_by(MAX_RUN_DECISIONS as usize)
        .map(|first| {
            let last = (first + MAX_RUN_DECISIONS).min(calls) - 1;
            (5, last - first + 1, first as i64, last as i64)
        })
        .collect();
    assert_eq!(runs(&*store, key), expected);
}

/// Policies and groups through [`FleetStore`]; `guarded`: the backend compares revisions
/// (etcd), so a stale one is a conflict.
fn fleet_contract(store: &dyn FleetStore, guarded: bool) {
    use autoscaled::engine::hpa::budget::{Ledger, LedgerEntry};
    let policy = |version| StoredPolicy {
        version,
        update_time: Time::from_unix_secs(T0),
        horizontal_spec: vec![0x10, 0x0a],
        owner: Some("team-a".to_owned()),
    };
    assert!(wait(store.policy("tier/web")).unwrap().is_none());
    wait(store.put_policy("tier/web", Some(0), &policy(1))).unwrap();
    wait(store.put_policy("tier/api", None, &policy(1))).unwrap();
    let (read, revision) = wait(store.policy("tier/web")).unwrap().unwrap();
    assert_eq!(read, policy(1));
    wait(store.put_policy("tier/web", Some(revision), &policy(2))).unwrap();
    if guarded {
        let stale = wait(store.put_policy("tier/web", Some(revision), &policy(3)));
        assert!(
            matches!(stale, Err(StoreError::Conflict { .. })),
            "{stale:?}"
        );
    }
    assert_eq!(
        wait(store.policy("tier/web")).unwrap().unwrap().0,
        policy(2)
    );
    let names = wait(store.list_policies(None, 10)).unwrap();
    assert_eq!(names.keys, ["tier/api", "tier/web"]);
    assert!(wait(store.delete_policy("tier/api")).unwrap());
    assert!(!wait(store.delete_policy("tier/api")).unwrap());

    let mut group = ScalingGroupDef {
        version: 1,
        units_per_replica: 1,
        member_prefixes: vec!["gpu/".into()],
        ledger: Ledger {
            capacity: 10,
            ..Ledger::default()
        },
        ..ScalingGroupDef::default()
    };
    group.ledger.members.insert(
        "gpu/a".into(),
        LedgerEntry {
            demand: 6,
            current: 3,
            told: 4,
            min: 1,
            units: 2,
        },
    );
    wait(store.put_group("gpus", Some(0), &group)).unwrap();
    // The groups' generation: a new value at each bump (every replica's index re-reads the
    // definitions only when it changed).
    let before = wait(store.groups_generation()).unwrap();
    wait(store.bump_groups_generation()).unwrap();
    let after = wait(store.groups_generation()).unwrap();
    assert!(!after.is_empty() && after != before);
    wait(store.bump_groups_generation()).unwrap();
    assert_ne!(wait(store.groups_generation()).unwrap(), after);
    let (read, revision) = wait(store.group("gpus")).unwrap().unwrap();
    assert_eq!(read, group);
    let mut next = group.clone();
    next.ledger.members.get_mut("gpu/a").unwrap().told = 5;
    wait(store.put_group("gpus", Some(revision), &next)).unwrap();
    if guarded {
        // A second replica that read the group before that write cannot spend its units.
        let stale = wait(store.put_group("gpus", Some(revision), &group));
        assert!(
            matches!(stale, Err(StoreError::Conflict { .. })),
            "{stale:?}"
        );
    }
    assert_eq!(wait(store.group("gpus")).unwrap().unwrap().0, next);
    assert_eq!(wait(store.list_groups(None, 10)).unwrap().keys, ["gpus"]);
    assert!(wait(store.delete_group("gpus")).unwrap());
    assert!(wait(store.group("gpus")).unwrap().is_none());
}

#[test]
fn sled_keeps_the_store_contract() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    contract(&|decision_log_len, decision_retention| {
        Box::new(
            SledStore::open(
                &path,
                SledOptions {
                    decision_log_len,
                    decision_retention,
                    ..SledOptions::default()
                },
            )
            .unwrap(),
        )
    });
    let fleet = SledStore::open(&dir.path().join("fleet"), SledOptions::default()).unwrap();
    fleet_contract(&fleet, false);
    member_contract(&fleet, false);
}

#[test]
fn etcd_keeps_the_store_contract() {
    if !etcd_support::available() {
        return;
    }
    let etcd = etcd_support::Etcd::start(1);
    let endpoints: Vec<String> = etcd.endpoints().split(',').map(str::to_owned).collect();
    contract(&|decision_log_len, decision_retention| {
        let _runtime = runtime().enter();
        Box::new(
            EtcdStore::connect(EtcdOptions {
                endpoints: endpoints.clone(),
                prefix: "contract/".to_owned(),
                decision_log_len,
                decision_retention,
                ..EtcdOptions::default()
            })
            .unwrap(),
        )
    });
    let fleet = {
        let _runtime = runtime().enter();
        EtcdStore::connect(EtcdOptions {
            endpoints: endpoints.clone(),
            prefix: "fleet/".to_owned(),
            ..EtcdOptions::default()
        })
        .unwrap()
    };
    fleet_contract(&fleet, true);
    member_contract(&fleet, true);
}

// The commit rules as a table (the rule ids are those of `store::hpa::plan`, whose own unit
// test checks the exact puts and deletes of each): what each backend makes of them. `runs`:
// what `decisions` shows under the row's bound; `stored`: what a fresh handle with no bound
// and no retention finds (deleted, not merely hidden); `next_seq`: the state's.

/// One step of a row.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// `decide(secs, desired)`.
    D(i64, i32),
    /// `count` decisions for `desired`, the first at `first`, then every `every` seconds.
    Same {
        first: i64,
        every: i64,
        count: i64,
        desired: i32,
    },
    /// A decision under a spec whose `max_replicas` is `max` (spec() has 1000).
    Spec(i64, i32, i32),
    /// A decision made in shadow mode (`DecisionInputs::shadow`).
    Shadow(i64, i32),
    /// A failed rescale (`ReportScale`): the newest decision (made at `secs`) replaced by its
    /// amended copy, FailedUpdateScale, through `Seen::withdraw_newest`.
    Amend(i64, i32),
    /// Flush, drop the handle, open the same data with this bound (a restart with another
    /// `--decision-log-len`).
    Reopen(usize),
}
use Step::{Amend, D, Reopen, Same, Shadow, Spec};

/// (desired, count, first second, last second), as `runs` returns them.
type R = (i32, u64, i64, i64);

struct Rule {
    name: &'static str,
    bound: usize,
    retention: Duration,
    steps: &'static [Step],
    runs: &'static [R],
    stored: &'static [R],
    next_seq: u64,
    /// More to check on the bounded handle (the row's key).
    extra: Option<fn(&dyn HpaStore, &str)>,
}

const fn rule(
    name: &'static str,
    bound: usize,
    steps: &'static [Step],
    runs: &'static [R],
    next_seq: u64,
) -> Rule {
    Rule {
        name,
        bound,
        retention: FOREVER,
        steps,
        runs,
        stored: runs,
        next_seq,
        extra: None,
    }
}

const HUNDRED_SECS: Duration = Duration::from_secs(100);

const RULES: &[Rule] = &[
    // R1, R9: a new target.
    rule("new", 3, &[D(0, 5)], &[(5, 1, 0, 0)], 1),
    // R3, R4: the same outcome extends the run (sled: a tail over the body logged at the
    // first extension; etcd: whole; read back the same).
    rule(
        "extend",
        3,
        &[D(0, 5), D(15, 5), D(30, 5)],
        &[(5, 3, 0, 30)],
        1,
    ),
    // R5: another outcome closes it.
    rule(
        "close",
        3,
        &[D(0, 5), D(15, 5), D(30, 6)],
        &[(5, 2, 0, 15), (6, 1, 30, 30)],
        2,
    ),
    // R3: a run holds at most MAX_RUN_DECISIONS (40).
    rule(
        "full run",
        UNBOUNDED,
        &[Same {
            first: 0,
            every: 15,
            count: 41,
            desired: 5,
        }],
        &[(5, 40, 0, 585), (5, 1, 600, 600)],
        2,
    ),
    // R3: another spec starts a run; each run keeps its own spec.
    Rule {
        extra: Some(each_run_keeps_its_spec),
        ..rule(
            "spec",
            3,
            &[D(0, 5), Spec(15, 5, 200), Spec(30, 5, 200)],
            &[(5, 1, 0, 0), (5, 2, 15, 30)],
            2,
        )
    },
    // R3: shadow decisions are runs of their own (shadow handling is `inputs.shadow`).
    Rule {
        extra: Some(shadow_runs_apart),
        ..rule(
            "shadow",
            4,
            &[D(0, 5), Shadow(15, 5), Shadow(30, 5), D(45, 5)],
            &[(5, 1, 0, 0), (5, 2, 15, 30), (5, 1, 45, 45)],
            3,
        )
    },
    // R7, R8: bound 1 keeps the newest run only; the closed run is deleted, not written.
    rule(
        "bound 1",
        1,
        &[D(0, 5), D(15, 6), D(30, 7)],
        &[(7, 1, 30, 30)],
        3,
    ),
    // ... also the body a tail was written over (sled).
    rule(
        "bound 1, tail",
        1,
        &[D(0, 5), D(15, 5), D(30, 5), D(45, 6)],
        &[(6, 1, 45, 45)],
        2,
    ),
    // R7 by count: oldest first.
    rule(
        "bound 2",
        2,
        &[D(0, 1), D(15, 2), D(30, 3), D(45, 4)],
        &[(3, 1, 30, 30), (4, 1, 45, 45)],
        4,
    ),
    // R7 by count after a restart with a smaller bound: the whole surplus at once.
    rule(
        "shrunk bound",
        10,
        &[
            D(0, 1),
            D(15, 2),
            D(30, 3),
            D(45, 4),
            D(60, 5),
            Reopen(2),
            D(75, 6),
        ],
        &[(5, 1, 60, 60), (6, 1, 75, 75)],
        6,
    ),
    // R7 in key order: run 3 began (50) before run 2 (200), so it is the older one, even
    // though it was closed last. FAILS on etcd today (its cache appends: [3, 4]).
    rule(
        "backward time",
        2,
        &[D(100, 1), D(200, 2), D(50, 3), D(60, 4)],
        &[(2, 1, 200, 200), (4, 1, 60, 60)],
        4,
    ),
    // R7 by age: a closed run goes once its SUCCESSOR began at or before now - retention.
    Rule {
        retention: HUNDRED_SECS,
        ..rule(
            "age by the end",
            UNBOUNDED,
            &[
                Same {
                    first: 0,
                    every: 10,
                    count: 16,
                    desired: 1,
                },
                D(160, 2),
                D(265, 3),
            ],
            &[(2, 1, 160, 160), (3, 1, 265, 265)],
            3,
        )
    },
    Rule {
        retention: HUNDRED_SECS,
        ..rule(
            "age at the cutoff",
            UNBOUNDED,
            &[D(0, 1), D(100, 2), D(200, 3)],
            &[(2, 1, 100, 100), (3, 1, 200, 200)],
            3,
        )
    },
    Rule {
        retention: HUNDRED_SECS,
        ..rule(
            "age inside",
            UNBOUNDED,
            &[D(0, 1), D(101, 2), D(200, 3)],
            &[(1, 1, 0, 0), (2, 1, 101, 101), (3, 1, 200, 200)],
            3,
        )
    },
    // R2: a withdrawn run of one is replaced in place (a new seq).
    Rule {
        extra: Some(newest_is_the_amended_copy),
        ..rule(
            "withdraw a run of one",
            UNBOUNDED,
            &[D(0, 5), D(15, 6), Amend(15, 6)],
            &[(5, 1, 0, 0), (6, 1, 15, 15)],
            3,
        )
    },
    // R2, R5: a longer run gives up its last decision, which the amended copy replaces (the
    // run keeps its last time: a run holds one decision, not each one's time).
    rule(
        "withdraw from a run",
        UNBOUNDED,
        &[D(0, 5), D(15, 5), D(30, 5), Amend(30, 5)],
        &[(5, 2, 0, 30), (5, 1, 30, 30)],
        2,
    ),
    // R7 on a commit that closes no run. FAILS on sled today (`stored` keeps run 1).
    rule(
        "withdraw trims to a shrunk bound",
        3,
        &[D(0, 1), D(15, 2), D(30, 3), Reopen(2), Amend(30, 3)],
        &[(2, 1, 15, 15), (3, 1, 30, 30)],
        4,
    ),
];

fn each_run_keeps_its_spec(store: &dyn HpaStore, key: &str) {
    let max: Vec<i32> = wait(store.decisions(key))
        .unwrap()
        .iter()
        .map(|r| r.inputs.as_ref().unwrap().max_replicas)
        .collect();
    assert_eq!(max, [1000, 200], "{key}: each run's spec");
}

fn shadow_runs_apart(store: &dyn HpaStore, key: &str) {
    let shadow: Vec<bool> = wait(store.decisions(key))
        .unwrap()
        .iter()
        .map(DecisionEntry::shadow)
        .collect();
    assert_eq!(shadow, [false, true, false], "{key}: shadow flags");
}

fn newest_is_the_amended_copy(store: &dyn HpaStore, key: &str) {
    let newest = wait(store.latest(key)).unwrap().unwrap();
    assert_eq!(
        newest.decision.conditions[0].reason,
        ConditionReason::FailedUpdateScale,
        "{key}"
    );
}

/// `Seen::withdraw_newest` with the amended copy of the newest decision (as
/// `withdrawn_newest_is_replaced` does).
fn amend(store: &dyn HpaStore, key: &str, secs: i64, desired: i32) {
    let (state, mut seen) = wait(store.load_for_update(key)).unwrap();
    let newest = seen.newest().cloned().expect("a newest decision");
    assert_eq!(newest.time.unix_millis() / 1000 - T0, secs, "{key}");
    let mut amended = entry(secs, desired);
    amended.decision.conditions[0] = Condition::new(
        ConditionType::AbleToScale,
        false,
        ConditionReason::FailedUpdateScale,
        "the HPA controller was unable to update the target scale: no",
    );
    seen.withdraw_newest();
    let history = state.unwrap().history;
    wait(store.commit_after(seen, Commit::new(key, &history, &amended))).unwrap();
}

/// The commit rules, each on its own key.
fn commit_rules(open: Open) {
    for rule in RULES {
        let key = format!("rules/{}", rule.name);
        let key = key.as_str();
        let name = rule.name;
        let mut store = open(rule.bound, rule.retention);
        for &step in rule.steps {
            match step {
                D(s, d) => {
                    decide(&*store, key, s, d);
                }
                Same {
                    first,
                    every,
                    count,
                    desired,
                } => {
                    for i in 0..count {
                        decide(&*store, key, first + i * every, desired);
                    }
                }
                Spec(s, d, max) => {
                    let mut e = entry(s, d);
                    e.inputs.as_mut().unwrap().max_replicas = max;
                    decide_entry(&*store, key, e, d);
                }
                Shadow(s, d) => {
                    let mut e = entry(s, d);
                    e.inputs.as_mut().unwrap().shadow = true;
                    decide_entry(&*store, key, e, d);
                }
                Amend(s, d) => amend(&*store, key, s, d),
                Reopen(bound) => {
                    store.flush().unwrap();
                    drop(store);
                    store = open(bound, rule.retention);
                }
            }
        }
        assert_eq!(runs(&*store, key), rule.runs, "{name}: runs");
        assert_eq!(
            wait(store.load(key)).unwrap().unwrap().next_seq,
            rule.next_seq,
            "{name}: next_seq"
        );
        if let Some(extra) = rule.extra {
            extra(&*store, key);
        }
        store.flush().unwrap();
        drop(store);
        let reader = open(UNBOUNDED, FOREVER);
        assert_eq!(
            runs(&*reader, key),
            rule.stored,
            "{name}: stored (runs beyond the rules were left in the store)"
        );
    }
}

/// A scaling group's member: its commit writes the group's record (the new ledger) at the
/// same commit point; on etcd (`guarded`) a stale group revision is a conflict and writes
/// neither the group nor the target.
fn member_contract<S: HpaStore + FleetStore>(store: &S, guarded: bool) {
    use autoscaled::{
        engine::hpa::budget::{Ledger, LedgerEntry},
        store::GroupWrite,
    };
    let key = "members/gpu/a";
    let group = ScalingGroupDef {
        version: 1,
        units_per_replica: 1,
        member_prefixes: vec!["members/".into()],
        ledger: Ledger {
            capacity: 10,
            ..Ledger::default()
        },
        ..ScalingGroupDef::default()
    };
    wait(store.put_group("members", Some(0), &group)).unwrap();
    let held = |told: i32| LedgerEntry {
        demand: told,
        current: 1,
        told,
        min: 1,
        units: 1,
    };
    // One member decision: the target's run and the group's ledger, one commit.
    let commit = |secs: i64, desired: i32| {
        let (read, revision) = wait(store.group("members")).unwrap().unwrap();
        let (state, seen) = wait(store.load_for_update(key)).unwrap();
        let mut next = read.clone();
        next.ledger.members.insert(key.to_owned(), held(desired));
        let write = GroupWrite {
            name: "members".to_owned(),
            revision,
            group: next,
        };
        let history = state.map(|s| s.history).unwrap_or_default();
        wait(store.commit_after(
            seen,
            Commit::new(key, &history, &entry(secs, desired)).with_group(&write),
        ))
    };
    commit(0, 3).unwrap();
    commit(15, 4).unwrap();
    let (read, stale) = wait(store.group("members")).unwrap().unwrap();
    assert_eq!(read.ledger.members[key], held(4));
    assert_eq!(
        runs(store, key),
        vec![(3, 1, 0, 0), (4, 1, 15, 15)],
        "the member's runs"
    );
    if guarded {
        // Another replica spends the group's units meanwhile: the member's commit built on
        // the group as read before is refused, and nothing of it is written.
        let (state, seen) = wait(store.load_for_update(key)).unwrap();
        let mut other = read.clone();
        other.ledger.members.insert("members/gpu/b".into(), held(6));
        wait(store.put_group("members", Some(stale), &other)).unwrap();
        let mut next = read.clone();
        next.ledger.members.insert(key.to_owned(), held(5));
        let write = GroupWrite {
            name: "members".to_owned(),
            revision: stale,
            group: next,
        };
        let history = state.unwrap().history;
        let refused = wait(store.commit_after(
            seen,
            Commit::new(key, &history, &entry(30, 5)).with_group(&write),
        ));
        assert!(
            matches!(refused, Err(StoreError::Conflict { .. })),
            "{refused:?}"
        );
        assert_eq!(
            wait(store.group("members")).unwrap().unwrap().0,
            other,
            "the group as the other replica wrote it"
        );
        assert_eq!(
            runs(store, key),
            vec![(3, 1, 0, 0), (4, 1, 15, 15)],
            "nothing of the refused commit"
        );
    }
    assert!(wait(store.delete_group("members")).unwrap());
    assert!(wait(store.delete(key)).unwrap());
}
