use serde::Serialize;

use super::*;
use crate::engine::{
    hpa::condition::{Condition, ConditionReason, ConditionType},
    hpa::history::{History, Recommendation},
    hpa::settings::Settings,
    hpa::spec::HorizontalSpec,
    hpa::{Decision, DecisionPath, MetricOutcome, MetricProposal, PodGroups},
    time::Time,
};
use crate::store::{
    DecisionPageRequest, PodTotals, Run, keys,
    record::{self, hpa},
};

fn decision(desired: i32) -> Decision {
    Decision {
        desired_replicas: desired,
        conditions: vec![Condition::new(
            ConditionType::AbleToScale,
            true,
            ConditionReason::ReadyForNewScale,
            "recommended size matches current size",
        )],
        prenormalized_replicas: Some(desired),
        ..Decision::keeping(1, DecisionPath::Legacy)
    }
}

fn spec() -> HorizontalSpec {
    HorizontalSpec::new(Some(1), 10, vec![])
}

fn entry(secs: i64, desired: i32) -> DecisionEntry {
    DecisionEntry::single(
        Time::from_unix_secs(secs),
        decision(desired),
        &spec(),
        &Settings::default(),
    )
}

/// Commits the decision of `replicas` at `secs`, the history recommending the same.
async fn decide(s: &SledStore, key: &str, replicas: i32, secs: i64) {
    s.commit(key, &history(replicas, secs), &entry(secs, replicas))
        .await
        .unwrap();
}

fn history(replicas: i32, secs: i64) -> History {
    History {
        recommendations: Some(vec![Recommendation {
            replicas,
            time: Time::from_unix_secs(secs),
        }]),
        ..History::default()
    }
}

fn options(len: usize) -> SledOptions {
    SledOptions {
        decision_log_len: len,
        ..SledOptions::default()
    }
}

fn open(dir: &Path, len: usize) -> SledStore {
    SledStore::open(dir, options(len)).unwrap()
}

async fn desired(s: &SledStore, key: &str) -> Vec<i32> {
    s.decisions(key)
        .await
        .unwrap()
        .iter()
        .map(|d| d.decision.desired_replicas)
        .collect()
}

/// The old JSON records (format 1), as builds before version 2 wrote them.
#[derive(Serialize)]
struct OldEntry<'a> {
    #[serde(with = "crate::engine::time::serde_millis")]
    time: Time,
    decision: &'a Decision,
    metrics: Vec<crate::engine::hpa::spec::MetricSpec>,
}

fn old_entry(secs: i64, desired: i32) -> Vec<u8> {
    record::encode(
        "decision",
        "a",
        &OldEntry {
            time: Time::from_unix_secs(secs),
            decision: &decision(desired),
            metrics: vec![],
        },
    )
    .unwrap()
}

#[tokio::test]
async fn reopen_preserves_state_and_log() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path(), 10);
        decide(&s, "a", 3, 10).await;
        decide(&s, "a", 4, 20).await;
        s.flush().unwrap();
    }
    let s = open(dir.path(), 10);
    let state = s.load("a").await.unwrap().unwrap();
    assert_eq!(state.history, history(4, 20));
    assert_eq!(state.next_seq, 2);
    let log = s.decisions("a").await.unwrap();
    assert_eq!(log.len(), 2);
    assert_eq!(log[1], {
        let mut e = entry(20, 4);
        e.seq = 1;
        e
    });
    assert_eq!(desired(&s, "a").await, vec![3, 4]);
    assert_eq!(s.load("b").await.unwrap(), None);
}

#[tokio::test]
async fn decisions_that_say_the_same_thing_are_one_run_with_count_and_times() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), 10);
    for t in 0..5 {
        decide(&s, "a", 3, t * 15).await;
    }
    decide(&s, "a", 4, 75).await;
    decide(&s, "a", 4, 90).await;
    let log = s.decisions("a").await.unwrap();
    let runs: Vec<(i32, u64, i64, i64)> = log
        .iter()
        .map(|e| {
            (
                e.decision.desired_replicas,
                e.run.count,
                e.run.first_time.unix_millis() / 1000,
                e.time.unix_millis() / 1000,
            )
        })
        .collect();
    assert_eq!(runs, vec![(3, 5, 0, 60), (4, 2, 75, 90)]);
    // Strictly increasing positions.
    assert!(log[0].seq < log[1].seq);
    // The newest pages first, one at a time.
    let page = s
        .decision_page(
            "a",
            &DecisionPageRequest {
                size: 1,
                newest_first: true,
                after_seq: None,
            },
        )
        .await
        .unwrap();
    assert!(page.more);
    assert_eq!(page.entries[0].decision.desired_replicas, 4);
    let page = s
        .decision_page(
            "a",
            &DecisionPageRequest {
                size: 1,
                newest_first: true,
                after_seq: Some(page.entries[0].seq),
            },
        )
        .await
        .unwrap();
    assert!(!page.more);
    assert_eq!(page.entries[0].decision.desired_replicas, 3);
}

/// What step 1 of a commit does before a crash loses its state write: the target's
/// newest run, complete, copied into the log under its final key. Returns that run.
fn copy_pending_into_log(s: &SledStore, key: &str) -> DecisionEntry {
    let trees = s.trees().unwrap();
    let pending = trees.read_state(key).unwrap().unwrap().pending.unwrap();
    trees
        .decisions
        .insert(
            keys::decision_key(key, pending.run.first_time, pending.seq),
            hpa::encode_run(&hpa::run_to_record(&pending, 50)),
        )
        .unwrap();
    pending
}

/// `entry(secs, desired)` with another condition message: the same outcome, so it extends
/// a run, and a part the run's last decision must keep exactly.
fn entry_saying(secs: i64, desired: i32, message: &str) -> DecisionEntry {
    let mut e = entry(secs, desired);
    e.decision.conditions[0].message = message.to_owned();
    e
}

/// How the state record of `key` holds its newest run: `"whole"` or `"tail"` (over its
/// logged body); always written as this build's version.
fn state_form(s: &SledStore, key: &str) -> &'static str {
    let bytes = s.trees().unwrap().state.get(key).unwrap().unwrap();
    assert_eq!(bytes[0], record::VERSION_HPA);
    let state: record::pb::HpaState = record::decode_binary("state", key, &bytes[1..]).unwrap();
    match (state.pending, state.pending_tail) {
        (Some(_), None) => "whole",
        (None, Some(_)) => "tail",
        other => panic!("neither or both: {other:?}"),
    }
}

#[tokio::test]
async fn an_extended_run_is_written_as_a_tail_and_read_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), 10);
    decide(&s, "a", 1, 0).await;
    decide(&s, "a", 2, 15).await;
    let whole = s.state_record_bytes("a").unwrap().unwrap();
    assert_eq!(state_form(&s, "a"), "whole");
    for i in 2..6 {
        s.commit(
            "a",
            &history(2, i * 15),
            &entry_saying(i * 15, 2, &format!("m{i}")),
        )
        .await
        .unwrap();
    }
    let tail = s.state_record_bytes("a").unwrap().unwrap();
    println!("state record: {whole} B with the run whole, {tail} B as a tail");
    assert_eq!(state_form(&s, "a"), "tail");
    // Smaller than the same state with its run whole (the readings are in both).
    let whole_now = {
        let state = s.trees().unwrap().read_state("a").unwrap().unwrap();
        state.encode(&state.history, 50).len()
    };
    assert!(tail < whole_now, "{tail} B as a tail, {whole_now} B whole");
    let mut last = entry_saying(75, 2, "m5");
    last.run = Run {
        count: 5,
        first_time: Time::from_unix_secs(15),
    };
    last.seq = 1;
    // Each of the run's five decisions' readings, in order.
    last.readings = (1..6).flat_map(|i| entry(i * 15, 2).readings).collect();
    let runs = s.decisions("a").await.unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1], last);
    // The run's body in the log is its first decision's; the state's tail says the rest.
    let logged = s.trees().unwrap().decision_keys("a").unwrap();
    assert_eq!(logged.len(), 2);
    drop(s);
    let s = open(dir.path(), 10);
    assert_eq!(s.decisions("a").await.unwrap(), runs);
    assert_eq!(s.load("a").await.unwrap().unwrap().history, history(2, 75));
    // Another outcome closes the run: the log holds it whole, the state a new run whole.
    decide(&s, "a", 3, 90).await;
    assert_eq!(state_form(&s, "a"), "whole");
    let closed = s.decisions("a").await.unwrap();
    assert_eq!(closed.len(), 3);
    assert_eq!(closed[1], last);
    let trees = s.trees().unwrap();
    let key = keys::decision_key("a", Time::from_unix_secs(15), 1);
    let bytes = trees.decisions.get(&key).unwrap().unwrap();
    // Logged without its spec and inputs: its successor's, from which readers take them.
    let (logged, spec_as_next) = crate::store::hpa::decode_run("a", &key, &bytes).unwrap();
    assert!(spec_as_next);
    assert_eq!((logged.metrics.len(), logged.inputs.as_ref()), (0, None));
    assert_eq!(
        DecisionEntry {
            metrics: last.metrics.clone(),
            inputs: last.inputs.clone(),
            ..logged
        },
        last
    );
}

/// A commit builds on the state `load_for_update` decoded; after a reopen (another generation)
/// it reads the state again. Both give the same records, run by run.
#[tokio::test]
async fn a_commit_after_a_reopen_writes_what_one_on_the_loaded_state_writes() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (s1, s2) = (open(d1.path(), 3), open(d2.path(), 3));
    let steps = [
        (0, 1),
        (15, 1),
        (30, 1),
        (45, 2),
        (60, 2),
        (75, 3),
        (90, 4),
        (105, 4),
    ];
    for (i, &(secs, desired)) in steps.iter().enumerate() {
        let e = entry_saying(secs, desired, &format!("m{i}"));
        let h = history(desired, secs);
        s1.commit("a", &h, &e).await.unwrap();
        let (state, mut seen) = s2.load_for_update("a").await.unwrap();
        assert_eq!(state.is_some(), i > 0);
        let loaded = seen.loaded.as_mut().expect("sled keeps the decoded state");
        loaded.generation += 1;
        s2.commit_after(seen, Commit::new("a", &h, &e))
            .await
            .unwrap();
        assert_eq!(
            s1.trees().unwrap().state.get("a").unwrap(),
            s2.trees().unwrap().state.get("a").unwrap()
        );
        assert_eq!(
            s1.decisions("a").await.unwrap(),
            s2.decisions("a").await.unwrap()
        );
    }
    assert_eq!(desired(&s2, "a").await, vec![2, 3, 4]);
}

#[tokio::test]
async fn a_crash_between_the_body_copy_and_the_tail_write_shows_the_run_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), 3);
    decide(&s, "a", 1, 0).await;
    decide(&s, "a", 2, 15).await;
    // The run's first extension: its body copied into the log, the state write lost.
    let pending = copy_pending_into_log(&s, "a");
    let runs = s.decisions("a").await.unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1], pending);
    decide(&s, "a", 2, 30).await;
    let counts: Vec<u64> = s
        .decisions("a")
        .await
        .unwrap()
        .iter()
        .map(|e| e.run.count)
        .collect();
    assert_eq!(counts, vec![1, 2]);
    for i in 3..6 {
        s.commit(
            "a",
            &history(i, (i * 15).into()),
            &entry((i * 15).into(), i),
        )
        .await
        .unwrap();
    }
    assert_eq!(desired(&s, "a").await, vec![3, 4, 5]);
    assert_eq!(s.trees().unwrap().decision_keys("a").unwrap().len(), 2);
}

#[tokio::test]
async fn a_crash_between_closing_a_tail_and_the_state_write_counts_the_run_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), 3);
    decide(&s, "a", 1, 0).await;
    for i in 1..4 {
        s.commit(
            "a",
            &history(2, i * 15),
            &entry_saying(i * 15, 2, &format!("m{i}")),
        )
        .await
        .unwrap();
    }
    assert_eq!(state_form(&s, "a"), "tail");
    let before = s.decisions("a").await.unwrap();
    // Step 1 of the closing commit done (the run complete over its body), step 3 lost.
    let pending = copy_pending_into_log(&s, "a");
    assert_eq!(pending.run.count, 3);
    assert_eq!(s.decisions("a").await.unwrap(), before);
    for i in 4..7 {
        s.commit(
            "a",
            &history(i, (i * 15).into()),
            &entry((i * 15).into(), i - 1),
        )
        .await
        .unwrap();
    }
    assert_eq!(desired(&s, "a").await, vec![3, 4, 5]);
    assert_eq!(s.trees().unwrap().decision_keys("a").unwrap().len(), 2);
}

#[tokio::test]
async fn a_tail_whose_logged_body_is_gone_fails_its_target_only() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), 3);
    for i in 0..3 {
        decide(&s, "a", 1, i * 15).await;
    }
    decide(&s, "b", 1, 0).await;
    let trees = s.trees().unwrap();
    for k in trees.decision_keys("a").unwrap() {
        trees.decisions.remove(k).unwrap();
    }
    let err = s.decisions("a").await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt { key, .. } if key == "a"),
        "{err}"
    );
    assert_eq!(desired(&s, "b").await, vec![1]);
}

#[tokio::test]
async fn a_different_reason_starts_a_new_run() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), 10);
    decide(&s, "a", 3, 0).await;
    let mut other = entry(15, 3);
    other.decision.conditions[0].reason = ConditionReason::ScaleDownStabilized;
    s.commit("a", &history(3, 15), &other).await.unwrap();
    // A different message alone does not.
    let mut worded = entry(30, 3);
    worded.decision.conditions[0].reason = ConditionReason::ScaleDownStabilized;
    worded.decision.conditions[0].message = "other words".to_owned();
    s.commit("a", &history(3, 30), &worded).await.unwrap();
    let counts: Vec<u64> = s
        .decisions("a")
        .await
        .unwrap()
        .iter()
        .map(|e| e.run.count)
        .collect();
    assert_eq!(counts, vec![1, 2]);
    assert_eq!(
        s.decisions("a").await.unwrap()[1].decision.conditions[0].message,
        "other words",
        "a run keeps its last decision"
    );
}

#[tokio::test]
async fn closed_runs_older_than_the_retention_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(
        dir.path(),
        SledOptions {
            decision_retention: Duration::from_secs(100),
            ..options(50)
        },
    )
    .unwrap();
    // Runs beginning at 0, 50, 100, ..., each of one decision.
    for i in 0..6 {
        decide(&s, "a", i, i64::from(i) * 50).await;
    }
    // At 250 the cutoff is 150: runs that ended by 150 (began 0, 50, 100) are gone.
    assert_eq!(desired(&s, "a").await, vec![3, 4, 5]);
}

#[tokio::test]
async fn pod_names_are_capped_per_group_with_the_totals_kept() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(
        dir.path(),
        SledOptions {
            max_pod_names: 2,
            ..options(10)
        },
    )
    .unwrap();
    let names = |n: usize| (0..n).map(|i| format!("p{i}")).collect::<Vec<_>>();
    let mut e = entry(0, 3);
    e.decision.metrics = vec![MetricOutcome {
        index: 0,
        result: Ok(MetricProposal {
            replicas: 3,
            current_average_utilization: Some(70),
            current_average_value: Some(700),
            current_value: None,
            usage_ratio: Some(1.4),
        }),
        pod_groups: Some(PodGroups {
            ready_count: 7,
            unready: names(5),
            missing: names(1),
            ignored: vec![],
        }),
    }];
    s.commit("a", &history(3, 0), &e).await.unwrap();
    let read = &s.decisions("a").await.unwrap()[0];
    let groups = read.decision.metrics[0].pod_groups.as_ref().unwrap();
    assert_eq!(groups.unready, names(2));
    assert_eq!(groups.missing, names(1));
    assert_eq!(
        read.pod_totals(0),
        PodTotals {
            ready: 7,
            unready: 5,
            missing: 1,
            ignored: 0
        }
    );
    // The next commit closes that run into the log: still capped with totals.
    decide(&s, "a", 4, 15).await;
    assert_eq!(s.decisions("a").await.unwrap()[0].pod_totals(0).unready, 5);
}

#[tokio::test]
async fn decision_log_keeps_the_last_n_in_time_order() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), 3);
    for i in 0..7 {
        decide(&s, "a", i, i.into()).await;
    }
    // Same time twice: the sequence number keeps both.
    s.commit("a", &history(7, 6), &entry(6, 70)).await.unwrap();
    assert_eq!(desired(&s, "a").await, vec![5, 6, 70]);
}

#[tokio::test]
async fn a_store_closed_and_opened_again_at_once_opens_every_time() {
    // sled's background threads may hold its `db` lock for a moment after the handle
    // is dropped; the open waits for them (CI once failed a reopen under load).
    let dir = tempfile::tempdir().unwrap();
    for i in 0..30 {
        let s = open(dir.path(), 10);
        decide(&s, "a", i, i.into()).await;
        s.flush().unwrap();
    }
    assert_eq!(
        open(dir.path(), 10)
            .load("a")
            .await
            .unwrap()
            .unwrap()
            .next_seq,
        30
    );
}

#[tokio::test]
async fn a_shorter_log_bound_after_reopen_trims_the_surplus_on_the_next_write() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path(), 10);
        for i in 0..6 {
            decide(&s, "a", i, i.into()).await;
        }
        s.flush().unwrap();
    }
    let s = open(dir.path(), 3);
    decide(&s, "a", 6, 6).await;
    assert_eq!(desired(&s, "a").await, vec![4, 5, 6]);
    assert_eq!(s.load("a").await.unwrap().unwrap().next_seq, 7);
}

#[tokio::test]
async fn a_format_1_target_reads_and_migrates_on_its_next_write() {
    // As format 1 left it: logged JSON entries, a JSON state with the newest pending.
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), 3);
    for i in 2..4i32 {
        s.trees()
            .unwrap()
            .decisions
            .insert(
                keys::decision_key("a", Time::from_unix_secs(i.into()), i as u64),
                old_entry(i.into(), i),
            )
            .unwrap();
    }
    #[derive(Serialize)]
    struct OldPending<'a> {
        #[serde(with = "crate::engine::time::serde_millis")]
        time: Time,
        seq: u64,
        entry: OldEntry<'a>,
    }
    #[derive(Serialize)]
    struct OldState<'a> {
        history: History,
        next_seq: u64,
        log_len: u64,
        pending: OldPending<'a>,
    }
    let d = decision(4);
    let old = OldState {
        history: history(4, 4),
        next_seq: 5,
        log_len: 2,
        pending: OldPending {
            time: Time::from_unix_secs(4),
            seq: 4,
            entry: OldEntry {
                time: Time::from_unix_secs(4),
                decision: &d,
                metrics: vec![],
            },
        },
    };
    s.trees()
        .unwrap()
        .state
        .insert("a", record::encode("state", "a", &old).unwrap())
        .unwrap();
    assert_eq!(s.load("a").await.unwrap().unwrap().history, history(4, 4));
    let log = s.decisions("a").await.unwrap();
    assert_eq!(
        log.iter()
            .map(|e| (e.decision.desired_replicas, e.seq, e.run.count))
            .collect::<Vec<_>>(),
        vec![(2, 2, 1), (3, 3, 1), (4, 4, 1)]
    );
    assert_eq!(log[2].run.first_time, Time::from_unix_secs(4));
    assert_eq!(log[2].inputs, None);
    decide(&s, "a", 5, 5).await;
    assert_eq!(desired(&s, "a").await, vec![3, 4, 5]);
    assert_eq!(
        state_form(&s, "a"),
        "whole",
        "rewritten as this build's version"
    );
    // The closed format-1 run went into the log as this build's version.
    let logged =
        s.trees()
            .unwrap()
            .decisions
            .get(keys::decision_key("a", Time::from_unix_secs(4), 4));
    assert_eq!(logged.unwrap().unwrap()[0], record::VERSION_HPA);
}

#[tokio::test]
async fn a_format_1_state_without_the_log_length_is_counted_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), 3);
    for i in 0..3i32 {
        s.trees()
            .unwrap()
            .decisions
            .insert(
                keys::decision_key("a", Time::from_unix_secs(i.into()), i as u64),
                old_entry(i.into(), i),
            )
            .unwrap();
    }
    let old = record::encode(
        "state",
        "a",
        &HpaState {
            history: history(2, 2),
            next_seq: 3,
        },
    )
    .unwrap();
    s.trees().unwrap().state.insert("a", old).unwrap();
    assert_eq!(desired(&s, "a").await, vec![0, 1, 2]);
    // No pending run in this record: the newest is the log's last.
    let newest = s.latest("a").await.unwrap().unwrap();
    assert_eq!((newest.decision.desired_replicas, newest.seq), (2, 2));
    decide(&s, "a", 3, 3).await;
    assert_eq!(desired(&s, "a").await, vec![1, 2, 3]);
    decide(&s, "a", 4, 4).await;
    assert_eq!(desired(&s, "a").await, vec![2, 3, 4]);
    assert_eq!(s.trees().unwrap().decision_keys("a").unwrap().len(), 2);
}

#[tokio::test]
async fn a_crash_between_the_log_copy_and_the_state_write_counts_the_entry_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), 3);
    decide(&s, "a", 1, 1).await;
    decide(&s, "a", 2, 2).await;
    // Step 1 of the next commit done (the pending run copied into the log), step 3 lost.
    copy_pending_into_log(&s, "a");
    assert_eq!(desired(&s, "a").await, vec![1, 2]);
    for i in 3..6 {
        decide(&s, "a", i, i.into()).await;
    }
    assert_eq!(desired(&s, "a").await, vec![3, 4, 5]);
    assert_eq!(s.trees().unwrap().decision_keys("a").unwrap().len(), 2);
}

#[tokio::test]
async fn entries_a_crash_kept_from_being_trimmed_are_not_shown() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), 2);
    decide(&s, "a", 1, 1).await;
    let stale = keys::decision_key("a", Time::from_unix_secs(0), 99);
    s.trees()
        .unwrap()
        .decisions
        .insert(stale, old_entry(0, 0))
        .unwrap();
    decide(&s, "a", 2, 2).await;
    decide(&s, "a", 3, 3).await;
    assert_eq!(desired(&s, "a").await, vec![2, 3]);
}

#[tokio::test]
async fn a_damaged_record_fails_its_target_only_and_is_left_in_place() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path(), 3);
        decide(&s, "a", 1, 1).await;
        decide(&s, "b", 2, 1).await;
        let mut bytes = s.trees().unwrap().state.get("a").unwrap().unwrap().to_vec();
        bytes.truncate(bytes.len() / 2);
        s.trees().unwrap().state.insert("a", bytes).unwrap();
        s.trees()
            .unwrap()
            .state
            .insert("v", &[9u8, 1, 2][..])
            .unwrap();
        s.flush().unwrap();
    }
    // Opens: no scan of the records at start.
    let s = open(dir.path(), 3);
    let err = s.load("a").await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt { key, .. } if key == "a"),
        "{err}"
    );
    assert!(s.decisions("a").await.is_err());
    let err = s.load("v").await.unwrap_err();
    assert!(err.to_string().contains("encoding version 9"), "{err}");
    assert!(s.load("b").await.unwrap().is_some());
    decide(&s, "b", 3, 2).await;
    // A write to the damaged target fails too: nothing silently replaced.
    assert!(s.commit("a", &history(1, 2), &entry(2, 1)).await.is_err());
    assert_eq!(
        s.trees().unwrap().state.get("v").unwrap().unwrap().as_ref(),
        &[9u8, 1, 2]
    );
}

#[tokio::test]
async fn damaged_or_foreign_folders_are_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good");
    {
        let s = open(&good, 3);
        decide(&s, "a", 1, 1).await;
        s.flush().unwrap();
    }
    let copy = |name: &str| {
        let to = dir.path().join(name);
        std::fs::create_dir(&to).unwrap();
        for f in ["conf", "db"] {
            std::fs::copy(good.join(f), to.join(f)).unwrap();
        }
        to
    };
    let truncated_conf = copy("truncated_conf");
    std::fs::write(truncated_conf.join("conf"), b"garbage").unwrap();
    let flipped_conf = copy("flipped_conf");
    let mut conf = std::fs::read(flipped_conf.join("conf")).unwrap();
    conf[0] ^= 0xff;
    std::fs::write(flipped_conf.join("conf"), &conf).unwrap();
    let random_db = copy("random_db");
    let len = std::fs::metadata(random_db.join("db")).unwrap().len() as usize;
    let noise: Vec<u8> = (0..len).map(|i| (i * 7919 % 251) as u8).collect();
    std::fs::write(random_db.join("db"), noise).unwrap();
    let zero_db = copy("zero_db");
    std::fs::write(zero_db.join("db"), vec![0u8; len]).unwrap();
    let header_db = copy("header_db");
    let mut db = std::fs::read(header_db.join("db")).unwrap();
    db[5] ^= 0x40;
    std::fs::write(header_db.join("db"), db).unwrap();
    let no_db = copy("no_db");
    std::fs::remove_file(no_db.join("db")).unwrap();
    let foreign = dir.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("notes.txt"), b"mine").unwrap();

    for folder in [
        &truncated_conf,
        &flipped_conf,
        &random_db,
        &zero_db,
        &header_db,
        &no_db,
        &foreign,
    ] {
        let snapshot = || {
            let mut files: Vec<_> = std::fs::read_dir(folder)
                .unwrap()
                .map(|e| {
                    let p = e.unwrap().path();
                    let bytes = if p.is_dir() {
                        None
                    } else {
                        Some(std::fs::read(&p).unwrap())
                    };
                    (p, bytes)
                })
                .collect();
            files.sort();
            files
        };
        let before = snapshot();
        let err = SledStore::open(folder, SledOptions::default()).unwrap_err();
        assert!(matches!(err, StoreError::Open { .. }), "{folder:?}: {err}");
        let after = snapshot();
        assert_eq!(before, after, "{folder:?} was modified");
    }
    // The intact original still opens, with its data.
    assert!(open(&good, 3).load("a").await.unwrap().is_some());
}

#[test]
fn a_file_in_place_of_the_folder_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data");
    std::fs::write(&file, b"not a database").unwrap();
    let err = SledStore::open(&file, SledOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }));
    assert_eq!(std::fs::read(&file).unwrap(), b"not a database");
}

#[test]
fn a_second_store_on_the_same_folder_is_refused_while_the_first_lives() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path(), 3);
    let err = SledStore::open(dir.path(), SledOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains(&format!(
            "in use by another process (pid {}?)",
            std::process::id()
        )),
        "{err}"
    );
    drop(first);
    open(dir.path(), 3);
}

#[tokio::test]
async fn list_keys_paginates_in_byte_order() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), 3);
    for k in ["c", "a", "b/x", "b", "d"] {
        s.commit(k, &history(1, 1), &entry(1, 1)).await.unwrap();
    }
    let p1 = s.list_keys(None, 2).await.unwrap();
    assert_eq!(
        p1,
        KeyPage {
            keys: vec!["a".into(), "b".into()],
            more: true
        }
    );
    let p2 = s.list_keys(Some("b"), 2).await.unwrap();
    assert_eq!(
        p2,
        KeyPage {
            keys: vec!["b/x".into(), "c".into()],
            more: true
        }
    );
    let p3 = s.list_keys(Some("c"), 2).await.unwrap();
    assert_eq!(
        p3,
        KeyPage {
            keys: vec!["d".into()],
            more: false
        }
    );
    assert_eq!(s.list_keys(None, 100).await.unwrap().keys.len(), 5);
}

#[tokio::test]
async fn latest_is_the_newest_run_read_from_the_state_alone() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), 3);
    assert_eq!(s.latest("a").await.unwrap(), None);
    for (secs, replicas) in [(1, 2), (2, 2), (3, 2), (4, 5)] {
        decide(&s, "a", replicas, secs).await;
        assert_eq!(
            s.latest("a").await.unwrap().as_ref(),
            s.decisions("a").await.unwrap().last()
        );
    }
    // Extended runs are stored as a tail over the logged body: read back whole.
    decide(&s, "a", 5, 5).await;
    let newest = s.latest("a").await.unwrap().unwrap();
    assert_eq!(state_form(&s, "a"), "tail");
    assert_eq!(newest.decision.desired_replicas, 5);
    assert_eq!(newest.run.count, 2);
    assert_eq!(newest.run.first_time, Time::from_unix_secs(4));
    assert_eq!(newest.time, Time::from_unix_secs(5));
    // The log alone says nothing here: the state record is what is read. With the state
    // gone (only log entries left), the target has no newest run.
    let trees = s.trees().unwrap();
    trees.state.remove(keys::state_key("a")).unwrap();
    assert_eq!(s.latest("a").await.unwrap(), None);
}

#[tokio::test]
async fn delete_removes_state_and_log_of_that_target_only() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), 3);
    decide(&s, "a", 1, 1).await;
    decide(&s, "a", 2, 2).await;
    decide(&s, "ab", 2, 1).await;
    assert!(s.delete("a").await.unwrap());
    assert!(!s.delete("a").await.unwrap());
    assert_eq!(s.load("a").await.unwrap(), None);
    assert!(s.decisions("a").await.unwrap().is_empty());
    assert_eq!(s.decisions("ab").await.unwrap().len(), 1);
    assert!(s.load("ab").await.unwrap().is_some());
}
