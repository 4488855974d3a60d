//! One HPA commit as data: what a decision writes to a target's records, decided once for
//! both backends. The sled store (`store::hpa::HpaTrees::commit_loaded_with`) and the etcd
//! store (`store::etcd::commit`) only apply a [`CommitPlan`]:
//!
//! * sled: `log_puts` (idempotent copies under final keys), then `state` (the commit point:
//!   one single-key write, or one transaction with a scaling group's record), then
//!   `log_deletes` — in that order, so that a crash between any two writes leaves a state
//!   whose newest run is still readable and at most a few surplus runs, which readers hide
//!   (`runs_with_pending`);
//! * etcd: all of them in one transaction guarded by the state key's `mod_revision`.
//!
//! The rules (numbered as in the rule table of `tests/store_contract.rs`):
//!
//! * R1 a target without state starts from an empty one (`next_seq` 0, `log_len` 0);
//! * R2 a write that replaces the newest decision builds on the state without it
//!   ([`built_on`], [`StoredState::without_newest`]);
//! * R3 a decision extends the newest run when the run accepts it
//!   ([`DecisionEntry::extends_with`]: same outcome, spec, settings, shadow mode, room under
//!   `MAX_RUN_DECISIONS`) and the state is of this build (`log_len` known);
//! * R4 extending, with tails (sled): the run's body goes into the log under its final key at
//!   its first extension, and the state holds the run as a tail over that body; without
//!   tails (etcd): the state holds the run whole. Nothing is trimmed;
//! * R5 otherwise a new run starts at `next_seq`; the newest run, if any, is logged complete
//!   under its final key (`closed_run_to_record`: its spec left out when it is the new run's);
//! * R6 the logged runs are counted by the state's `log_len` (which never counts the newest
//!   run, even when its body is in the log) plus the run just closed; a state of an older
//!   build (no `log_len`) counts the log's keys, the closed run's once;
//! * R7 trim, oldest key first (key order: first time, then seq): while more than
//!   `max(decision_log_len, 1)` runs would be kept counting the new one, or while the run's
//!   successor began at or before `decision.time - decision_retention`; stop at the first run
//!   kept. Only when the commit starts a run and something is logged;
//! * R8 a closed run trimmed by the same commit is not written (etcd refuses a put and a
//!   delete of one key in a transaction; sled saves a write), its key is still deleted (it may
//!   hold the run's body under a tail, or a copy a crash left);
//! * R9 the new state: `next_seq + 1`, `log_len` = counted − trimmed, the new run as a run of
//!   one at the decision's time with its seq, whole.

use super::{LogOptions, StoredState};
use crate::{
    engine::hpa::history::History,
    store::{DecisionEntry, Run, StoreError, keys, record::hpa},
};

/// A key of the decision log in the sled layout ([`keys::decision_key`]:
/// `target 0x00 be(first time) be(seq)`); the etcd store puts it under `<prefix>hpa/d/`.
/// Byte order is the log's order.
pub(crate) type LogKey = Vec<u8>;

/// How a store commits: the log's bounds and detail, and how the newest run is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PlanOptions {
    /// `--decision-log-len`, `--decision-retention-secs`, `--max-pod-names`.
    pub(crate) log: LogOptions,
    /// An extended run is written as a tail over its body logged at its first extension
    /// (sled: small steady-state writes); false: whole in the state record (etcd: every read
    /// of the state is one read).
    pub(crate) tails: bool,
}

/// What one commit writes. Keys in `log_puts` and `log_deletes` never overlap (R8).
pub(crate) struct CommitPlan {
    /// Decision-log records, written before the state (sled) or with it (etcd). Each is an
    /// idempotent copy of a run under its final key.
    pub(crate) log_puts: Vec<(LogKey, Vec<u8>)>,
    /// The state record's new bytes: the commit point.
    pub(crate) state: Vec<u8>,
    /// Decision-log keys to remove, oldest first, after the state (sled) or with it (etcd).
    pub(crate) log_deletes: Vec<LogKey>,
    /// The state as a reader decodes it after the commit, its history left empty (the etcd
    /// store caches it with the committed history: `etcd::cache`).
    pub(crate) next: StoredState,
}

impl CommitPlan {
    /// `log` (the target's log keys, sorted) as they are once this plan is applied: the
    /// puts in their places, the deletes gone. The etcd store's cache of the log's keys.
    pub(crate) fn apply_to_keys(&self, log: &mut Vec<LogKey>) {
        for (k, _) in &self.log_puts {
            if let Err(at) = log.binary_search(k) {
                log.insert(at, k.clone());
            }
        }
        if !self.log_deletes.is_empty() {
            log.retain(|k| !self.log_deletes.contains(k));
        }
    }
}

/// R2: the state a write builds on: `previous`, or, for a write that replaces the newest
/// decision ([`crate::store::Seen::withdraw_newest`]), `previous` without it.
pub(crate) fn built_on(
    previous: Option<StoredState>,
    withdraw_newest: bool,
) -> Option<StoredState> {
    if withdraw_newest {
        previous.map(StoredState::without_newest)
    } else {
        previous
    }
}

/// R3: `decision` extends the newest run of `state`.
fn extends(state: &StoredState, decision: &DecisionEntry) -> bool {
    state.log_len.is_some()
        && state
            .pending
            .as_ref()
            .is_some_and(|run| run.extends_with(decision))
}

/// Whether [`plan`] reads the log's keys for this commit (it starts a run over a log that
/// may hold something): a backend whose keys cost a request (etcd without its cache) reads
/// them only then. Any other commit reads none (sled passes its lazy scan regardless).
pub(crate) fn reads_log(previous: Option<&StoredState>, decision: &DecisionEntry) -> bool {
    previous.is_some_and(|p| !extends(p, decision) && (p.log_len != Some(0) || p.pending.is_some()))
}

/// The commit of `decision` and `history` on `previous` (R1–R9).
///
/// `log`: the target's log keys ([`LogKey`]), oldest first, as stored. Pulled lazily and
/// only as far as needed: none when the decision extends the newest run, the oldest few
/// when it starts one (all of them for a state of an older build, R6). The sled store passes
/// its prefix scan, the etcd store its cached or read list. A key's error is returned.
pub(crate) fn plan<I>(
    target: &str,
    previous: Option<StoredState>,
    history: &History,
    decision: &DecisionEntry,
    options: &PlanOptions,
    log: I,
) -> Result<CommitPlan, StoreError>
where
    I: IntoIterator<Item = Result<LogKey, StoreError>>,
{
    // R1.
    let previous = previous.unwrap_or_else(|| StoredState {
        history: History::default(),
        next_seq: 0,
        log_len: Some(0),
        pending: None,
        logged_body: None,
    });
    if extends(&previous, decision) {
        Ok(extend(target, previous, history, decision, options))
    } else {
        start(
            target,
            previous,
            history,
            decision,
            options,
            log.into_iter(),
        )
    }
}

/// R4: the newest run grows.
fn extend(
    target: &str,
    previous: StoredState,
    history: &History,
    decision: &DecisionEntry,
    options: &PlanOptions,
) -> CommitPlan {
    let max_names = options.log.max_pod_names;
    let StoredState {
        next_seq,
        log_len,
        pending,
        logged_body,
        history: _,
    } = previous;
    let (Some(run), Some(log_len)) = (pending, log_len) else {
        unreachable!("`plan` extends only a state with a newest run and a log length")
    };
    let extended = run.extended_by(decision);
    if !options.tails {
        let next = StoredState {
            history: History::default(),
            next_seq,
            log_len: Some(log_len),
            pending: Some(extended),
            logged_body: None,
        };
        return CommitPlan {
            log_puts: Vec::new(),
            state: next.encode(history, max_names),
            log_deletes: Vec::new(),
            next,
        };
    }
    let mut log_puts = Vec::new();
    let body = match logged_body {
        Some(body) => *body,
        None => {
            // The run's first extension: its body under its final key (idempotent, like the
            // closing copy: after a crash before the state write, the state still holds this
            // same body whole).
            let body = hpa::run_to_record(&run, max_names);
            let key = keys::decision_key(target, run.run.first_time, run.seq);
            log_puts.push((key, hpa::encode_run(&body)));
            body
        }
    };
    let tail = hpa::tail_of(hpa::run_to_record(&extended, max_names), &body);
    CommitPlan {
        log_puts,
        state: StoredState::encode_tail(history, next_seq, log_len, tail),
        log_deletes: Vec::new(),
        next: StoredState {
            history: History::default(),
            next_seq,
            log_len: Some(log_len),
            pending: Some(extended),
            logged_body: Some(Box::new(body)),
        },
    }
}

/// R5–R9: a new run starts.
fn start(
    target: &str,
    previous: StoredState,
    history: &History,
    decision: &DecisionEntry,
    options: &PlanOptions,
    log: impl Iterator<Item = Result<LogKey, StoreError>>,
) -> Result<CommitPlan, StoreError> {
    let max_names = options.log.max_pod_names;
    let StoredState {
        next_seq: seq,
        log_len,
        pending,
        ..
    } = previous;
    // R5: the newest run closed, complete, under its final key (over its body there when the
    // state held only its tail: a tail over the complete run gives it again).
    let closed = pending.map(|run| {
        (
            keys::decision_key(target, run.run.first_time, run.seq),
            hpa::encode_run(&hpa::closed_run_to_record(&run, decision, max_names)),
        )
    });
    let closed_key = closed.as_ref().map(|(k, _)| k);
    // R6 and R7.
    let (counted, log_deletes) = match log_len {
        Some(n) => {
            let counted = n.saturating_add(u64::from(closed.is_some()));
            (
                counted,
                trim(counted, log, closed_key, decision, &options.log)?,
            )
        }
        None => {
            let all: Vec<LogKey> = log.collect::<Result<_, _>>()?;
            let closed_new = closed_key.is_some_and(|k| all.binary_search(k).is_err());
            let counted = (all.len() as u64).saturating_add(u64::from(closed_new));
            let all = all.into_iter().map(Ok);
            (
                counted,
                trim(counted, all, closed_key, decision, &options.log)?,
            )
        }
    };
    // R8.
    let log_puts = match closed {
        Some((k, v)) if !log_deletes.contains(&k) => vec![(k, v)],
        _ => Vec::new(),
    };
    // R9.
    let mut fresh = decision.clone();
    fresh.run = Run {
        count: 1,
        first_time: decision.time,
    };
    fresh.seq = seq;
    let next = StoredState {
        history: History::default(),
        next_seq: seq.saturating_add(1),
        log_len: Some(counted.saturating_sub(log_deletes.len() as u64)),
        pending: Some(fresh),
        logged_body: None,
    };
    Ok(CommitPlan {
        log_puts,
        state: next.encode(history, max_names),
        log_deletes,
        next,
    })
}

/// R7: the keys to delete, oldest first, of `logged` (sorted) with `closed` in its place:
/// by count (`counted` runs logged, the bound counts the new run too) and by age (a closed
/// run ended when its successor began; the last one's successor is the new run).
fn trim(
    counted: u64,
    logged: impl Iterator<Item = Result<LogKey, StoreError>>,
    closed: Option<&LogKey>,
    decision: &DecisionEntry,
    options: &LogOptions,
) -> Result<Vec<LogKey>, StoreError> {
    let mut deletes = Vec::new();
    if counted == 0 {
        return Ok(deletes);
    }
    let bound = u64::try_from(options.decision_log_len.max(1)).unwrap_or(u64::MAX);
    let excess = counted.saturating_add(1).saturating_sub(bound);
    let cutoff = decision.time.minus(options.decision_retention);
    let mut merged = WithKey {
        keys: logged.peekable(),
        extra: closed.cloned(),
    }
    .peekable();
    while let Some(k) = merged.next() {
        let k = k?;
        let successor_began = match merged.peek() {
            Some(Ok(next)) => keys::decision_key_time(next),
            // Not known to be old; the error is returned by the next pull, if any.
            Some(Err(_)) => None,
            None => Some(decision.time),
        };
        let old = successor_began.is_some_and(|t| t <= cutoff);
        if (deletes.len() as u64) < excess || old {
            deletes.push(k);
        } else {
            break;
        }
    }
    Ok(deletes)
}

/// `keys` (ascending) with `extra` in its place, once (a key equal to it is it).
struct WithKey<I: Iterator> {
    keys: std::iter::Peekable<I>,
    extra: Option<LogKey>,
}

impl<I: Iterator<Item = Result<LogKey, StoreError>>> Iterator for WithKey<I> {
    type Item = Result<LogKey, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        use std::cmp::Ordering;
        let Some(extra) = self.extra.as_ref() else {
            return self.keys.next();
        };
        let order = match self.keys.peek() {
            Some(Ok(k)) => Some(k.as_slice().cmp(extra.as_slice())),
            // An error comes out where it is.
            Some(Err(_)) => Some(Ordering::Less),
            None => None,
        };
        match order {
            Some(Ordering::Less) => self.keys.next(),
            Some(Ordering::Equal) => {
                self.extra = None;
                self.keys.next()
            }
            Some(Ordering::Greater) | None => self.extra.take().map(Ok),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The rule table on the plan alone: exact puts, deletes and state, no backend. Each row runs
// its steps on an in-memory store that applies plans as sled does (puts, state, deletes) and
// decodes the state as sled does, and checks the plan of its LAST step.
// ---------------------------------------------------------------------------------------
#[cfg(test)]
mod tests {
    use std::{collections::BTreeMap, time::Duration};

    use super::*;
    use crate::{
        engine::{
            hpa::condition::{Condition, ConditionReason, ConditionType},
            hpa::settings::Settings,
            hpa::spec::HorizontalSpec,
            hpa::{Decision, DecisionPath},
            time::Time,
        },
        store::record::{self, pb},
    };

    const TARGET: &str = "t";
    const DAY: Duration = Duration::from_secs(24 * 3600);

    fn entry(secs: i64, desired: i32) -> DecisionEntry {
        let decision = Decision {
            desired_replicas: desired,
            conditions: vec![Condition::new(
                ConditionType::AbleToScale,
                true,
                ConditionReason::ReadyForNewScale,
                format!("at {secs}"),
            )],
            prenormalized_replicas: Some(desired),
            ..Decision::keeping(1, DecisionPath::Legacy)
        };
        let spec = HorizontalSpec::new(Some(1), 10, vec![]);
        DecisionEntry::single(
            Time::from_unix_secs(secs),
            decision,
            &spec,
            &Settings::default(),
        )
    }

    /// The amended copy a failed rescale writes (`ReportScale`): another condition, so
    /// another outcome.
    fn failed(secs: i64, desired: i32) -> DecisionEntry {
        let mut e = entry(secs, desired);
        e.decision.conditions[0] = Condition::new(
            ConditionType::AbleToScale,
            false,
            ConditionReason::FailedUpdateScale,
            "no",
        );
        e
    }

    #[derive(Clone, Copy)]
    enum Step {
        /// A decision for `desired` at `secs`.
        D(i64, i32),
        /// `Seen::withdraw_newest` with the amended copy (failed) of a decision.
        Amend(i64, i32),
        /// `Seen::withdraw_newest` with a copy saying the same thing.
        AmendSame(i64, i32),
        /// The log bound from now on (a restart with another `--decision-log-len`).
        Bound(usize),
        /// A key left by a crash between a sled commit point and its deletes: (secs, seq).
        Leftover(i64, u64),
    }
    use Step::*;

    /// The plan of the last step.
    struct Expect {
        /// Seqs of the log keys put (`log_puts`), in order.
        puts: &'static [u64],
        /// Seqs of the log keys deleted.
        deletes: &'static [u64],
        log_len: u64,
        next_seq: u64,
        /// The newest run: (seq, count).
        pending: (u64, u64),
        /// How the state holds it.
        form: Form,
    }

    #[derive(Debug, PartialEq, Clone, Copy)]
    enum Form {
        Whole,
        Tail,
    }

    struct Row {
        name: &'static str,
        tails: bool,
        bound: usize,
        retention: Duration,
        steps: &'static [Step],
        expect: Expect,
    }

    struct Mem {
        state: Option<Vec<u8>>,
        log: BTreeMap<LogKey, Vec<u8>>,
        options: PlanOptions,
    }

    impl Mem {
        fn previous(&self) -> Option<StoredState> {
            self.state
                .as_ref()
                .map(|b| StoredState::decode(TARGET, b, |k| Ok(self.log.get(k).cloned())).unwrap())
        }

        fn commit(&mut self, decision: &DecisionEntry, withdraw: bool) -> CommitPlan {
            let previous = built_on(self.previous(), withdraw);
            let logged = self.log.keys().cloned().map(Ok);
            let plan = plan(
                TARGET,
                previous,
                &History::default(),
                decision,
                &self.options,
                logged,
            )
            .unwrap();
            for (k, v) in &plan.log_puts {
                self.log.insert(k.clone(), v.clone());
            }
            self.state = Some(plan.state.clone());
            for k in &plan.log_deletes {
                self.log.remove(k);
            }
            plan
        }
    }

    fn form(state: &[u8]) -> Form {
        assert_eq!(state[0], record::VERSION_HPA);
        let s: pb::HpaState = record::decode_binary("state", TARGET, &state[1..]).unwrap();
        match (s.pending, s.pending_tail) {
            (Some(_), None) => Form::Whole,
            (None, Some(_)) => Form::Tail,
            other => panic!("neither or both: {other:?}"),
        }
    }

    /// The seqs of log keys (a parameter named `keys` would hide the module).
    fn seqs<'a>(logged: impl Iterator<Item = &'a LogKey>) -> Vec<u64> {
        logged.map(|k| keys::decision_key_seq(k).unwrap()).collect()
    }

    const fn row(name: &'static str, bound: usize, steps: &'static [Step], expect: Expect) -> Row {
        Row {
            name,
            tails: true,
            bound,
            retention: DAY,
            steps,
            expect,
        }
    }

    const fn e(
        puts: &'static [u64],
        deletes: &'static [u64],
        log_len: u64,
        next_seq: u64,
        pending: (u64, u64),
        form: Form,
    ) -> Expect {
        Expect {
            puts,
            deletes,
            log_len,
            next_seq,
            pending,
            form,
        }
    }

    const W: Form = Form::Whole;
    const T: Form = Form::Tail;

    #[rustfmt::skip]
    const ROWS: &[Row] = &[
        // R1, R9: a new target's first decision writes the state alone.
        row("first decision", 3, &[D(0, 5)], e(&[], &[], 0, 1, (0, 1), W)),
        // R3, R4: the first extension logs the run's body and writes a tail.
        row("first extension", 3, &[D(0, 5), D(15, 5)], e(&[0], &[], 0, 1, (0, 2), T)),
        // R4: later extensions write the tail alone.
        row("later extension", 3, &[D(0, 5), D(15, 5), D(30, 5)], e(&[], &[], 0, 1, (0, 3), T)),
        // R5: another outcome closes the run (logged complete) and starts one, whole.
        row("close", 3, &[D(0, 5), D(15, 6)], e(&[0], &[], 1, 2, (1, 1), W)),
        row("close a tail", 3, &[D(0, 5), D(15, 5), D(30, 6)], e(&[0], &[], 1, 2, (1, 1), W)),
        // R7 by count, R8: bound 1 trims the run just closed, which is not written.
        row("bound 1", 1, &[D(0, 5), D(15, 6)], e(&[], &[0], 0, 2, (1, 1), W)),
        // ... and its body under the tail goes (the key is deleted although not put).
        row("bound 1, tail", 1, &[D(0, 5), D(15, 5), D(30, 6)], e(&[], &[0], 0, 2, (1, 1), W)),
        // R7: a bound of 0 is a bound of 1 (sled took it `as u64`: its excess was one more).
        row("bound 0", 0, &[D(0, 5), D(15, 6)], e(&[], &[0], 0, 2, (1, 1), W)),
        // R7 by count: the oldest goes.
        row("bound 2", 2, &[D(0, 1), D(15, 2), D(30, 3)], e(&[1], &[0], 1, 3, (2, 1), W)),
        // R7 by count after a restart with a smaller bound: all the surplus at once.
        row("shrunk bound", 10, &[D(0, 1), D(15, 2), D(30, 3), D(45, 4), D(60, 5), Bound(2), D(75, 6)], e(&[4], &[0, 1, 2, 3], 1, 6, (5, 1), W)),
        // R7 by count in key order: a run that began earlier (a request's time, another
        // replica's clock) is older, even the one just closed (then not written, R8).
        row("backward time", 2, &[D(100, 1), D(200, 2), D(50, 3), D(60, 4)], e(&[], &[2], 1, 4, (3, 1), W)),
        // R2: a withdrawn run of one is replaced; nothing closed; a new seq.
        row("withdraw a run of one", 3, &[D(0, 5), D(15, 6), Amend(15, 6)], e(&[], &[], 1, 3, (2, 1), W)),
        // R2, R5: a longer run loses its last decision and is logged closed.
        row("withdraw from a run", 3, &[D(0, 5), D(15, 5), D(30, 5), Amend(30, 5)], e(&[0], &[], 1, 2, (1, 1), W)),
        // R2, R4: an amended copy saying the same extends the shortened run: its body again.
        row("withdraw, same outcome", 3, &[D(0, 5), D(15, 5), D(30, 5), AmendSame(30, 5)], e(&[0], &[], 0, 1, (0, 3), T)),
        // R7 on a commit that closes nothing (sled trimmed only when it closed a run).
        row("withdraw trims to a shrunk bound", 3, &[D(0, 1), D(15, 2), D(30, 3), Bound(2), Amend(30, 3)], e(&[], &[0], 1, 4, (3, 1), W)),
        // R6: a key a crash left (not counted by `log_len`) is trimmed first, and stays
        // uncounted: the log then holds one run more than `log_len` says, which readers hide
        // (counted by `log_len`, not by keys: a full scan on every new run would cost more than
        // the whole commit).
        row("leftover", 2, &[D(10, 1), Leftover(0, 99), D(20, 2), D(30, 3)], e(&[1], &[99], 1, 3, (2, 1), W)),
    ];

    /// R7 by age, with `retention` 100 s.
    const AGE_ROWS: &[Row] = &[
        // The run's successor began at the cutoff: old (inclusive).
        Row {
            name: "age at the cutoff",
            tails: true,
            bound: 100,
            retention: Duration::from_secs(100),
            steps: &[D(0, 1), D(100, 2), D(200, 3)],
            expect: e(&[1], &[0], 1, 3, (2, 1), W),
        },
        Row {
            name: "age inside",
            tails: true,
            bound: 100,
            retention: Duration::from_secs(100),
            steps: &[D(0, 1), D(101, 2), D(200, 3)],
            expect: e(&[1], &[], 2, 3, (2, 1), W),
        },
        // By its end, not its start: 16 decisions from 0 to 150, closed at 160.
        Row {
            name: "age by the end",
            tails: true,
            bound: 100,
            retention: Duration::from_secs(100),
            steps: &[D(0, 1), D(10, 1), D(150, 1), D(160, 2), D(255, 3)],
            expect: e(&[1], &[], 2, 3, (2, 1), W),
        },
        // Without tails (etcd) the same, the extended run whole.
        Row {
            name: "no tails",
            tails: false,
            bound: 3,
            retention: DAY,
            steps: &[D(0, 5), D(15, 5), D(30, 5)],
            expect: e(&[], &[], 0, 1, (0, 3), W),
        },
    ];

    #[test]
    fn the_rule_table() {
        for row in ROWS.iter().chain(AGE_ROWS) {
            let mut mem = Mem {
                state: None,
                log: BTreeMap::new(),
                options: PlanOptions {
                    log: LogOptions {
                        decision_log_len: row.bound,
                        decision_retention: row.retention,
                        max_pod_names: 50,
                    },
                    tails: row.tails,
                },
            };
            let mut last = None;
            for step in row.steps {
                last = match *step {
                    D(s, d) => Some(mem.commit(&entry(s, d), false)),
                    Amend(s, d) => Some(mem.commit(&failed(s, d), true)),
                    AmendSame(s, d) => Some(mem.commit(&entry(s, d), true)),
                    Bound(n) => {
                        mem.options.log.decision_log_len = n;
                        None
                    }
                    Leftover(s, seq) => {
                        let k = keys::decision_key(TARGET, Time::from_unix_secs(s), seq);
                        let run = hpa::run_to_record(&entry(s, 0), 50);
                        mem.log.insert(k, hpa::encode_run(&run));
                        None
                    }
                };
            }
            let plan = last.expect("a row ends with a commit");
            let x = &row.expect;
            let name = row.name;
            assert_eq!(
                seqs(plan.log_puts.iter().map(|(k, _)| k)),
                x.puts,
                "{name}: puts"
            );
            assert_eq!(seqs(plan.log_deletes.iter()), x.deletes, "{name}: deletes");
            assert_eq!(plan.next.log_len, Some(x.log_len), "{name}: log_len");
            assert_eq!(plan.next.next_seq, x.next_seq, "{name}: next_seq");
            let pending = plan.next.pending.as_ref().unwrap();
            assert_eq!(
                (pending.seq, pending.run.count),
                x.pending,
                "{name}: pending"
            );
            assert_eq!(form(&plan.state), x.form, "{name}: form");
            // R8 always; and what the plan says it wrote is what a reader decodes.
            assert!(
                plan.log_puts
                    .iter()
                    .all(|(k, _)| !plan.log_deletes.contains(k)),
                "{name}: a key put and deleted"
            );
            let read = mem.previous().unwrap();
            assert_eq!(read.log_len, plan.next.log_len, "{name}");
            assert_eq!(read.next_seq, plan.next.next_seq, "{name}");
            assert_eq!(
                read.pending.as_ref().map(|p| (p.seq, p.run)),
                plan.next.pending.as_ref().map(|p| (p.seq, p.run)),
                "{name}"
            );
        }
    }

    /// R6 for a state of an older build (no `log_len`, format 1): the keys are counted, the
    /// closed run's once even when a crash already copied it (sled counted it twice).
    #[test]
    fn a_state_without_a_log_length_counts_the_keys_once() {
        let key = |s: i64, seq| keys::decision_key(TARGET, Time::from_unix_secs(s), seq);
        let mut pending = entry(30, 3);
        pending.seq = 2;
        let previous = StoredState {
            history: History::default(),
            next_seq: 3,
            log_len: None,
            pending: Some(pending),
            logged_body: None,
        };
        let log = vec![key(0, 0), key(15, 1), key(30, 2)];
        let options = PlanOptions {
            log: LogOptions {
                decision_log_len: 3,
                decision_retention: DAY,
                max_pod_names: 50,
            },
            tails: true,
        };
        let plan = plan(
            TARGET,
            Some(previous),
            &History::default(),
            &entry(45, 4),
            &options,
            log.into_iter().map(Ok),
        )
        .unwrap();
        assert_eq!(seqs(plan.log_puts.iter().map(|(k, _)| k)), [2]);
        assert_eq!(seqs(plan.log_deletes.iter()), [0]);
        assert_eq!(plan.next.log_len, Some(2));
    }

    /// A commit that extends reads no key; one that starts a run over an empty log reads
    /// none either (the etcd store skips its range then: `reads_log`).
    #[test]
    fn the_log_is_read_only_when_a_run_starts_over_something_logged() {
        let options = PlanOptions {
            log: LogOptions {
                decision_log_len: 3,
                decision_retention: DAY,
                max_pod_names: 50,
            },
            tails: true,
        };
        let untouchable = || {
            std::iter::from_fn(|| -> Option<Result<LogKey, StoreError>> {
                panic!("the log was read")
            })
        };
        let first = plan(
            TARGET,
            None,
            &History::default(),
            &entry(0, 5),
            &options,
            untouchable(),
        )
        .unwrap();
        assert!(!reads_log(None, &entry(0, 5)));
        let mut state = first.next;
        assert!(!reads_log(Some(&state), &entry(15, 5)));
        let second = plan(
            TARGET,
            Some(state.clone()),
            &History::default(),
            &entry(15, 5),
            &options,
            untouchable(),
        )
        .unwrap();
        assert_eq!(second.log_puts.len(), 1);
        state = second.next;
        assert!(reads_log(Some(&state), &entry(30, 6)));
    }

    #[test]
    fn apply_to_keys_keeps_the_order() {
        let k = |s: i64, seq| keys::decision_key(TARGET, Time::from_unix_secs(s), seq);
        let plan = CommitPlan {
            log_puts: vec![(k(50, 2), vec![])],
            state: vec![],
            log_deletes: vec![k(100, 0)],
            next: StoredState {
                history: History::default(),
                next_seq: 3,
                log_len: Some(2),
                pending: None,
                logged_body: None,
            },
        };
        let mut log = vec![k(100, 0), k(200, 1)];
        plan.apply_to_keys(&mut log);
        assert_eq!(log, vec![k(50, 2), k(200, 1)]);
    }
}
