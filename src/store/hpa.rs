//! The HPA record kind: a target's state (the controller's memory plus the newest decision
//! run) and its decision log, in two sled trees of the [`SledDb`]:
//!
//! * `hpa_state`: `target_key` → the target's state (versioned record: [`record::hpa`]
//!   version 2 with the newest run whole, version 3 with the newest run as a tail over its
//!   logged body, or the JSON of format 1 until the target's next write);
//! * `hpa_decisions`: `target_key ++ 0x00 ++ be(first time) ++ be(seq)` → one decision run
//!   (versioned record), at most `decision_log_len` runs per target and none older than
//!   `decision_retention`, oldest dropped first.
//!
//! The decision log is a list of runs ([`DecisionEntry`]): a decision that says the same as
//! the newest run ([`DecisionEntry::same_outcome`]) extends it (count + 1, its time and
//! inputs become the run's last) instead of adding an entry, so at steady state a commit is
//! one small write.
//!
//! The run rules (extend or close the newest run, trim the log) are decided once for both
//! stores by [`plan`]; this module applies a plan to the sled trees.
//!
//! A commit's state and decision become durable together through ONE single-key write: the
//! state record carries the newest run (`pending`), and the commit that closes that run first
//! copies it into `hpa_decisions` (an idempotent insert under its final key), then replaces the
//! state.
//!
//! Small steady-state writes: the commit that first extends a run copies the run's body into
//! `hpa_decisions` under its final key the same way (idempotent), and from then on the state
//! record (version 3) holds only the run's tail ([`record::hpa::tail_of`]: seq, count, times,
//! and the parts of the last decision that differ from the logged body, usually none or the
//! metric outcomes' current values), so a commit that extends the run writes the history and
//! a few bytes, not the whole run again. Readers apply the tail to the logged body; the
//! closing commit logs the run complete over that body (a tail over the complete run gives it
//! again, so a crash between the two writes changes nothing). So after a crash a target's history and its last logged decision agree, without a
//! sled transaction or batch: in sled 0.34 both go through `PageCache::pin_log`, which writes
//! and syncs the log buffer twice per call (two `pwrite` + two `sync_file_range`, and each
//! wakes all of sled's I/O threads), whatever our durability mode.
//!
//! The record codec ([`StoredState`], [`runs_with_pending`]) is shared with the etcd backend, which
//! writes the same records under its own keys.

use std::time::Duration;

use serde::Deserialize;
use sled::{Transactional, transaction::TransactionError};

use super::{
    DecisionEntry, HpaState, KeyPage, Run, StoreError,
    db::{Open, SledDb, list_tree},
    keys,
    record::{self, Versioned, hpa, pb},
};
use crate::engine::{hpa::history::History, time::Time};

pub(crate) mod plan;
use self::plan::{CommitPlan, PlanOptions};

/// The state tree's name.
pub(crate) const STATE_TREE: &str = "hpa_state";
/// The decision-log tree's name.
pub(crate) const DECISION_TREE: &str = "hpa_decisions";

/// How long and how detailed the decision log is (the sled and etcd stores take the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LogOptions {
    /// Decision runs kept per target.
    pub decision_log_len: usize,
    /// Closed runs older than this (relative to the target's newest decision) are dropped.
    pub decision_retention: Duration,
    /// Pod names kept per group and metric in a logged decision; the totals are kept too.
    pub max_pod_names: usize,
}

/// The HPA trees of an open [`SledDb`], for one call.
pub(super) struct HpaTrees {
    pub(super) state: sled::Tree,
    pub(super) decisions: sled::Tree,
    options: LogOptions,
    /// The open's [`Open::generation`].
    pub(super) generation: u64,
}

impl HpaTrees {
    /// The HPA trees of `open`.
    pub(super) fn of(open: &Open, options: LogOptions) -> Result<Self, StoreError> {
        Ok(HpaTrees {
            state: open.tree(STATE_TREE)?,
            decisions: open.tree(DECISION_TREE)?,
            options,
            generation: open.generation(),
        })
    }

    /// Runs `f` on the HPA trees of `db` (a storage failure reopens it: [`SledDb::guarded`]).
    pub(super) fn with<T>(
        db: &SledDb,
        options: LogOptions,
        f: impl FnOnce(&HpaTrees) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        db.guarded(|open| f(&HpaTrees::of(open, options)?))
    }

    /// The keys of the target's logged runs, oldest first.
    pub(super) fn decision_keys(&self, key: &str) -> Result<Vec<sled::IVec>, StoreError> {
        self.decisions
            .scan_prefix(keys::decision_prefix(key))
            .keys()
            .collect::<Result<_, _>>()
            .map_err(StoreError::from)
    }

    /// A write's result (a failure reopens the store: [`SledDb::guarded`]).
    fn track<T>(&self, result: Result<T, sled::Error>) -> Result<T, StoreError> {
        result.map_err(StoreError::from)
    }

    /// The decoded state record of `key`, its newest run complete (a tail applied to the
    /// run's logged body).
    pub(super) fn read_state(&self, key: &str) -> Result<Option<StoredState>, StoreError> {
        self.state
            .get(keys::state_key(key))?
            .map(|v| StoredState::decode(key, &v, |k| Ok(self.decisions.get(k)?)))
            .transpose()
    }
}

/// A stored state record, of any version, as the store needs it. Shared with the etcd
/// store ([`super::etcd`]), which writes the same records.
#[derive(Clone)]
pub(crate) struct StoredState {
    pub(super) history: History,
    pub(super) next_seq: u64,
    /// Runs in `hpa_decisions` for the target, the newest (pending) run not counted even when
    /// its body is there; `None` in records of older builds.
    pub(super) log_len: Option<u64>,
    /// The newest run (from a version-3 record: its logged body with the tail applied).
    pub(super) pending: Option<DecisionEntry>,
    /// The newest run's body as logged in `hpa_decisions` when the record holds only the
    /// run's tail (version 3): what the next commit's tail is taken against. Boxed: this
    /// record travels in [`super::Seen`], kept small.
    pub(super) logged_body: Option<Box<pb::DecisionRun>>,
}

impl StoredState {
    /// The state as it was before its newest decision was added, for a write that replaces
    /// that decision ([`super::Seen::withdraw_newest`]): a run of one is dropped (it was
    /// never logged: a run reaches the log when it is first extended or closed), a longer
    /// run loses its last decision and that decision's reading (its other fields stay those of
    /// the withdrawn decision, which said the same thing: same outcome, by the run rule) and
    /// is logged whole again by the write, which closes it.
    pub(crate) fn without_newest(mut self) -> Self {
        match self.pending.take() {
            Some(mut run) if run.run.count > 1 => {
                run.run.count -= 1;
                run.readings.pop();
                self.pending = Some(run);
            }
            _ => {}
        }
        self.logged_body = None;
        self
    }

    /// Decodes a state record; `logged` reads a decision-log record by its key (the sled
    /// layout of [`keys::decision_key`]), for the body under a version-3 record's tail.
    pub(super) fn decode<B: AsRef<[u8]>>(
        key: &str,
        bytes: &[u8],
        logged: impl FnOnce(&[u8]) -> Result<Option<B>, StoreError>,
    ) -> Result<Self, StoreError> {
        let body = match record::versioned("state", key, bytes, record::STATE_VERSIONS)? {
            Versioned::Binary(body) => body,
            Versioned::Json(body) => return Self::decode_json(key, body),
        };
        let r: pb::HpaState = record::decode_binary("state", key, body)?;
        let bad = |m: String| record::corrupt("state", key, &m);
        let history =
            hpa::history_from_record(r.history.as_ref().unwrap_or(&pb::History::default()))
                .map_err(bad)?;
        let (pending, logged_body) = match (r.pending, r.pending_tail) {
            (Some(p), _) => (Some(hpa::run_from_record(&p).map_err(bad)?), None),
            (None, Some(tail)) => {
                let time = Time::from_unix_millis(tail.first_time_ms);
                let found = logged(&keys::decision_key(key, time, tail.seq))?.ok_or_else(|| {
                    bad(format!("the logged body of run {} is missing", tail.seq))
                })?;
                let body: pb::DecisionRun = match record::versioned(
                    "decision",
                    key,
                    found.as_ref(),
                    record::DECISION_VERSIONS,
                )? {
                    Versioned::Binary(b) => record::decode_binary("decision", key, b)?,
                    Versioned::Json(_) => {
                        return Err(bad(format!(
                            "run {} has a tail over a version-1 record",
                            tail.seq
                        )));
                    }
                };
                let run = hpa::apply_tail(body.clone(), &tail);
                (
                    Some(hpa::run_from_record(&run).map_err(bad)?),
                    Some(Box::new(body)),
                )
            }
            (None, None) => (None, None),
        };
        Ok(StoredState {
            history,
            next_seq: r.next_seq,
            log_len: Some(r.log_len),
            pending,
            logged_body,
        })
    }

    /// A format-1 (JSON) state record.
    fn decode_json(key: &str, body: &[u8]) -> Result<Self, StoreError> {
        let old: LegacyState = serde_json::from_slice(body)
            .map_err(|e| record::corrupt("state", key, &e.to_string()))?;
        let pending = old.pending.map(|p| legacy_entry(p.entry, p.seq));
        Ok(StoredState {
            history: old.history,
            next_seq: old.next_seq,
            log_len: old.log_len,
            pending,
            logged_body: None,
        })
    }

    /// The record with the newest run complete.
    pub(super) fn encode(&self, history: &History, max_pod_names: usize) -> Vec<u8> {
        record::encode_versioned(
            record::VERSION_HPA,
            &pb::HpaState {
                history: Some(hpa::history_to_record(history)),
                next_seq: self.next_seq,
                log_len: self.log_len.unwrap_or(0),
                pending: self
                    .pending
                    .as_ref()
                    .map(|p| hpa::run_to_record(p, max_pod_names)),
                pending_tail: None,
            },
        )
    }

    /// The record with the newest run as `tail` over its logged body.
    pub(super) fn encode_tail(
        history: &History,
        next_seq: u64,
        log_len: u64,
        tail: pb::RunTail,
    ) -> Vec<u8> {
        record::encode_versioned(
            record::VERSION_HPA,
            &pb::HpaState {
                history: Some(hpa::history_to_record(history)),
                next_seq,
                log_len,
                pending: None,
                pending_tail: Some(tail),
            },
        )
    }
}

/// A format-1 decision (JSON of `time`, `decision`, `metrics`) as a run of one.
fn legacy_entry(mut entry: DecisionEntry, seq: u64) -> DecisionEntry {
    entry.run = Run {
        count: 1,
        first_time: entry.time,
    };
    entry.seq = seq;
    entry
}

/// The state record of format 1 (JSON).
#[derive(Deserialize)]
struct LegacyState {
    history: History,
    next_seq: u64,
    #[serde(default)]
    log_len: Option<u64>,
    #[serde(default)]
    pending: Option<LegacyPending>,
}

#[derive(Deserialize)]
struct LegacyPending {
    seq: u64,
    entry: DecisionEntry,
}

/// A logged run, of either version; `seq` from the key for format-1 records. The flag: its
/// spec and inputs are left out, the same as the next run's ([`hpa::closed_run_to_record`]).
pub(super) fn decode_run(
    key: &str,
    log_key: &[u8],
    bytes: &[u8],
) -> Result<(DecisionEntry, bool), StoreError> {
    match record::versioned("decision", key, bytes, record::DECISION_VERSIONS)? {
        Versioned::Binary(body) => {
            let r: pb::DecisionRun = record::decode_binary("decision", key, body)?;
            let entry =
                hpa::run_from_record(&r).map_err(|m| record::corrupt("decision", key, &m))?;
            Ok((entry, r.spec_as_next))
        }
        Versioned::Json(body) => {
            let entry: DecisionEntry = serde_json::from_slice(body)
                .map_err(|e| record::corrupt("decision", key, &e.to_string()))?;
            let seq = keys::decision_key_seq(log_key).unwrap_or(0);
            Ok((legacy_entry(entry, seq), false))
        }
    }
}

/// A target's decision log as readers see it (both backends): its logged runs, `(log key,
/// value)` oldest first, then its newest run from the state record. The logged copy of the
/// newest run (its body under a tail, or a copy a crash left between the two writes of a
/// commit) gives way to the state's complete one, and entries a crash kept from being trimmed
/// are not shown: at most `decision_log_len` runs. A run logged without its spec and inputs
/// (the same as its successor's) gets them from its successor, newest first.
pub(super) fn runs_with_pending<K: AsRef<[u8]>, V: AsRef<[u8]>>(
    key: &str,
    pending: Option<DecisionEntry>,
    logged: impl IntoIterator<Item = Result<(K, V), StoreError>>,
    decision_log_len: usize,
) -> Result<Vec<DecisionEntry>, StoreError> {
    let mut out = Vec::new();
    let mut as_next = Vec::new();
    for item in logged {
        let (log_key, value) = item?;
        let log_key = log_key.as_ref();
        if pending
            .as_ref()
            .is_some_and(|p| keys::decision_key_seq(log_key) == Some(p.seq))
        {
            continue;
        }
        let (entry, spec_as_next) = decode_run(key, log_key, value.as_ref())?;
        out.push(entry);
        as_next.push(spec_as_next);
    }
    out.extend(pending);
    as_next.push(false);
    for i in (0..out.len().saturating_sub(1)).rev() {
        if as_next[i] {
            let (older, newer) = out.split_at_mut(i + 1);
            older[i].metrics.clone_from(&newer[0].metrics);
            older[i].inputs.clone_from(&newer[0].inputs);
        }
    }
    let skip = out.len().saturating_sub(decision_log_len.max(1));
    out.drain(..skip);
    Ok(out)
}

fn tx_error(e: TransactionError<StoreError>) -> StoreError {
    match e {
        TransactionError::Abort(e) => e,
        TransactionError::Storage(e) => StoreError::Sled(e),
    }
}

impl HpaTrees {
    pub(super) fn load(&self, key: &str) -> Result<Option<HpaState>, StoreError> {
        Ok(self.read_state(key)?.map(|s| HpaState {
            history: s.history,
            next_seq: s.next_seq,
        }))
    }

    /// The commit point: the state record's single-key write, or, with `also` (a tree, a key
    /// and a value: a scaling group's record), that write and the other in one transaction.
    fn commit_point(
        &self,
        state_key: &[u8],
        bytes: &[u8],
        also: Option<(&sled::Tree, &[u8], &[u8])>,
    ) -> Result<(), StoreError> {
        let Some((tree, other_key, other)) = also else {
            self.track(self.state.insert(state_key, bytes))?;
            return Ok(());
        };
        (&self.state, tree)
            .transaction(|(state, tree)| {
                state.insert(state_key, bytes)?;
                tree.insert(other_key, other)?;
                Ok(())
            })
            .map_err(tx_error)
    }

    /// A decision's commit on `previous`, the target's state as read under the caller's lock
    /// (by `load_for_update` of the same call, or again after a reopen), the commit point
    /// writing `also` too ([`Self::commit_point`]): the commit's [`plan`] applied in the
    /// order that keeps every crash readable.
    pub(super) fn commit_loaded_with(
        &self,
        key: &str,
        previous: Option<StoredState>,
        history: &History,
        decision: &DecisionEntry,
        also: Option<(&sled::Tree, &[u8], &[u8])>,
    ) -> Result<(), StoreError> {
        let options = PlanOptions {
            log: self.options,
            tails: true,
        };
        // The log's keys, oldest first, read only as far as the plan asks: none for a commit
        // that extends the newest run, the oldest one or two for one that starts a run.
        let logged = self
            .decisions
            .scan_prefix(keys::decision_prefix(key))
            .keys()
            .map(|k| k.map(|k| k.to_vec()).map_err(StoreError::from));
        let CommitPlan {
            log_puts,
            state,
            log_deletes,
            ..
        } = plan::plan(key, previous, history, decision, &options, logged)?;
        // 1. Runs under their final keys (the run just closed, complete; or the newest run's
        //    body at its first extension). Idempotent: after a crash before step 2 the state
        //    still names that run, and a tail over the complete run gives it again.
        for (k, v) in log_puts {
            self.track(self.decisions.insert(k, v))?;
        }
        // 2. The commit point: one single-key write (with `also`, one transaction).
        self.commit_point(keys::state_key(key), &state, also)?;
        // 3. A crash before this leaves at most these few old runs on disk; `decisions`
        //    shows only the newest `decision_log_len`.
        for k in &log_deletes {
            self.track(self.decisions.remove(k))?;
        }
        Ok(())
    }

    pub(super) fn decisions(&self, key: &str) -> Result<Vec<DecisionEntry>, StoreError> {
        let pending = self.read_state(key)?.and_then(|s| s.pending);
        let logged = self
            .decisions
            .scan_prefix(keys::decision_prefix(key))
            .map(|item| item.map_err(StoreError::from));
        runs_with_pending(key, pending, logged, self.options.decision_log_len)
    }

    /// The newest run from the state record; a record of an older build that keeps no
    /// pending run (format 1) falls back to the log's last entry.
    pub(super) fn latest(&self, key: &str) -> Result<Option<DecisionEntry>, StoreError> {
        match self.read_state(key)? {
            None => Ok(None),
            Some(StoredState {
                pending: Some(p), ..
            }) => Ok(Some(p)),
            Some(_) => Ok(self.decisions(key)?.pop()),
        }
    }

    pub(super) fn list_keys(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<KeyPage, StoreError> {
        list_tree(&self.state, "state", after, limit)
    }

    pub(super) fn delete(&self, key: &str) -> Result<bool, StoreError> {
        let logged = self.decision_keys(key)?;
        (&self.state, &self.decisions)
            .transaction(|(state, decisions)| {
                let existed = state.remove(keys::state_key(key))?.is_some();
                for k in &logged {
                    decisions.remove(k.as_ref())?;
                }
                Ok(existed || !logged.is_empty())
            })
            .map_err(tx_error)
    }

    /// The encoded size of the target's state record.
    pub(super) fn state_record_bytes(&self, key: &str) -> Result<Option<usize>, StoreError> {
        Ok(self.state.get(keys::state_key(key))?.map(|v| v.len()))
    }
}
