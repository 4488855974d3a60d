//! The one write path of both services: lock → load → decide → write → wait for the flush.
//!
//! 1. take the target's lock ([`KeyLocks`]), so that concurrent calls on one target each
//!    build on the state the previous one wrote (different targets run in parallel), then
//!    read `now` (a Recommend reads the server clock again here, so that calls on one target
//!    commit in time order);
//! 2. load the target's state with what the store needs to detect a concurrent writer
//!    ([`Seen`]: etcd's `mod_revision`), decide, and write only if the target is still as
//!    read: on [`StoreError::Conflict`] (another replica sharing the etcd store wrote in
//!    between) load and decide again, at most [`MAX_CONFLICT_RETRIES`] times, then ABORTED.
//!    With one writer per store (sled) the first write always succeeds;
//! 3. release the lock, then wait for a flush covering the write (group commit,
//!    [`Durability`]) before answering. Releasing first lets calls on the same target share
//!    flushes; a reader may therefore see a write whose flush is still running, never one
//!    that is rolled back. A batch of decisions ([`Flush::Defer`]) waits once, for the flush
//!    covering all its writes, before it answers any of them ([`CommitPath::flushed`]).

use std::{
    future::Future,
    sync::{Arc, Mutex},
    time::Instant,
};

use super::{
    locks::{KeyGuard, KeyLocks},
    status::ApiError,
};
use crate::{
    engine::hpa::history::History,
    store::{
        Commit, DecisionEntry, FleetStore, GroupWrite, HpaState, HpaStore, ScalingGroupDef, Seen,
        StoreError, VpaState, VpaStore, durability::Durability,
    },
};

/// Re-decisions after a conflicting write by another replica before giving up with ABORTED.
/// A conflict means another replica wrote this target in the meantime, so more than a few in
/// a row only happen under a pathological hot spot.
pub(crate) const MAX_CONFLICT_RETRIES: u32 = 16;

/// A kind of per-target state: how it is read for an update and written back.
pub(crate) trait Kind {
    /// What is loaded.
    type State;
    /// What a decision writes.
    type Write;
    /// Whether a write is counted in `autoscaled_store_commit_duration_seconds` (Recommend's
    /// commits, as the metric is documented).
    const TIMED: bool = false;
    /// The state of `key` and what the store needs to detect a concurrent writer.
    async fn load(&self, key: &str) -> Result<(Option<Self::State>, Seen), StoreError>;
    /// Writes `write` if the target is still as `seen`, else [`StoreError::Conflict`].
    async fn write(&self, key: &str, seen: Seen, write: &Self::Write) -> Result<(), StoreError>;
}

/// A target's state as a decision reads it: the controller's memory and, when the newest
/// decision was made in shadow mode, the count it asked for (the count the target has as if
/// it had been applied).
pub(crate) struct TargetState {
    pub(crate) state: HpaState,
    pub(crate) shadow_replicas: Option<i32>,
}

impl TargetState {
    fn of(state: Option<HpaState>, seen: &Seen) -> Option<TargetState> {
        let shadow_replicas = seen
            .newest()
            .filter(|e| e.shadow())
            .map(|e| e.decision.desired_replicas);
        state.map(|state| TargetState {
            state,
            shadow_replicas,
        })
    }
}

/// The HPA kind for a write that replaces the newest decision (`ReportScale`): loads the
/// history with the newest decision, and writes the new history with an amended copy of that
/// decision in its place ([`Seen::withdraw_newest`]).
pub(crate) struct HpaAmend<'a>(pub &'a dyn HpaStore);

impl Kind for HpaAmend<'_> {
    type State = (HpaState, Option<DecisionEntry>);
    type Write = (History, DecisionEntry);
    async fn load(
        &self,
        key: &str,
    ) -> Result<(Option<(HpaState, Option<DecisionEntry>)>, Seen), StoreError> {
        let (state, seen) = self.0.load_for_update(key).await?;
        let newest = seen.newest().cloned();
        Ok((state.map(|s| (s, newest)), seen))
    }
    async fn write(
        &self,
        key: &str,
        mut seen: Seen,
        (history, entry): &Self::Write,
    ) -> Result<(), StoreError> {
        seen.withdraw_newest();
        self.0
            .commit_after(seen, Commit::new(key, history, entry))
            .await
    }
}

/// The HPA kind of a Recommend: the target's history and, for a member of a scaling group,
/// the group (its definition and ledger, and the ledger's revision); written back as the new
/// history with the decision's log entry and, when the member's holding changed, the group's
/// new ledger, in one transaction guarded by both revisions
/// ([`HpaStore::commit_after`]): two replicas cannot both spend the same units (the
/// loser reads both again and decides again), and no crash separates a member's count from the
/// group's record of it.
pub(crate) struct HpaTarget<'a> {
    pub(crate) hpa: &'a dyn HpaStore,
    /// The target's group and the store holding it, when it is in one.
    pub(crate) group: Option<(&'a dyn FleetStore, &'a str)>,
}

/// A group as read for a member's decision: its definition and ledger, and its revision.
pub(crate) type GroupRead = Option<(ScalingGroupDef, i64)>;

/// What a Recommend writes: the new history, the decision's log entry, and the group's record
/// when the member's holding changed.
pub(crate) struct HpaWrite {
    pub(crate) history: History,
    pub(crate) entry: DecisionEntry,
    pub(crate) group: GroupRead,
}

impl Kind for HpaTarget<'_> {
    type State = (Option<TargetState>, GroupRead);
    type Write = HpaWrite;
    const TIMED: bool = true;
    async fn load(&self, key: &str) -> Result<(Option<Self::State>, Seen), StoreError> {
        let (state, seen) = self.hpa.load_for_update(key).await?;
        let group = match self.group {
            Some((fleet, name)) => fleet.group(name).await?,
            None => None,
        };
        Ok((Some((TargetState::of(state, &seen), group)), seen))
    }
    async fn write(&self, key: &str, seen: Seen, write: &HpaWrite) -> Result<(), StoreError> {
        let commit = Commit::new(key, &write.history, &write.entry);
        match (&write.group, self.group) {
            (Some((group, revision)), Some((_, name))) => {
                let group = GroupWrite {
                    name: name.to_owned(),
                    revision: *revision,
                    group: group.clone(),
                };
                self.hpa.commit_after(seen, commit.with_group(&group)).await
            }
            _ => self.hpa.commit_after(seen, commit).await,
        }
    }
}

/// The VPA kind: the target's whole record.
pub(crate) struct Vpa<'a>(pub &'a dyn VpaStore);

impl Kind for Vpa<'_> {
    type State = VpaState;
    type Write = VpaState;
    async fn load(&self, key: &str) -> Result<(Option<VpaState>, Seen), StoreError> {
        self.0.load_vertical_for_update(key).await
    }
    async fn write(&self, key: &str, seen: Seen, state: &VpaState) -> Result<(), StoreError> {
        self.0.put_vertical_after(key, seen, state).await
    }
}

/// Whether and how a decision is written ([`CommitPath::commit_decision`]).
pub(crate) enum Recording<'a> {
    /// A dry run: no lock taken, nothing written.
    DryRun,
    /// Written under the target's lock and `held` (another lock the caller holds for the
    /// decision: a scaling group's), both released before the wait for the flush, which is as
    /// `flush` says.
    Write {
        held: Option<KeyGuard>,
        flush: Flush<'a>,
    },
}

impl Recording<'_> {
    /// A call of its own: the target's lock alone, the flush awaited before it returns.
    pub(crate) fn alone() -> Self {
        Recording::Write {
            held: None,
            flush: Flush::Await,
        }
    }
}

/// When a decision's write waits for its flush.
#[derive(Clone, Copy)]
pub(crate) enum Flush<'a> {
    /// Before the decision returns: a call of its own.
    Await,
    /// Once for a batch: the write is request `.1` of the batch's [`Deferred`], which the
    /// batch waits for ([`CommitPath::flushed`]) before it answers.
    Defer(&'a Deferred, usize),
}

/// A batch's writes whose flush it has yet to wait for: each request's index, ticket, and
/// when its commit started (for `autoscaled_store_commit_duration_seconds`).
#[derive(Debug, Default)]
pub(crate) struct Deferred(Mutex<Vec<(usize, u64, Option<Instant>)>>);

impl Deferred {
    fn push(&self, request: usize, ticket: u64, started: Option<Instant>) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((request, ticket, started));
    }
}

/// The per-target locks and the group commit, shared by the calls of one service.
#[derive(Debug)]
pub(crate) struct CommitPath {
    locks: KeyLocks,
    durability: Arc<Durability>,
}

impl CommitPath {
    /// A path waiting for durability through `durability`.
    pub(crate) fn new(durability: Arc<Durability>) -> Self {
        CommitPath {
            locks: KeyLocks::default(),
            durability,
        }
    }

    /// The per-target locks (tests check that none leak).
    pub(crate) fn locks(&self) -> &KeyLocks {
        &self.locks
    }

    /// Runs one decision on `key` (see the module documentation), written as `recording`
    /// says: a dry run takes no lock and writes nothing (the decision is made on the current
    /// state and returned). `now` is called once, under the lock; `decide` once per attempt,
    /// with the loaded state. Returns `now`, what was (or would have been) written, and
    /// `decide`'s other output.
    pub(crate) async fn commit_decision<K: Kind, N, O>(
        &self,
        kind: &K,
        key: &str,
        recording: Recording<'_>,
        now: impl FnOnce() -> N,
        mut decide: impl FnMut(Option<K::State>, &N) -> Result<(K::Write, O), ApiError>,
    ) -> Result<(N, K::Write, O), ApiError> {
        let (guard, flush) = match recording {
            Recording::DryRun => (None, None),
            Recording::Write { held, flush } => {
                (Some((self.locks.lock(key).await, held)), Some(flush))
            }
        };
        let now = now();
        let mut conflicts = 0;
        loop {
            let (state, seen) = kind.load(key).await?;
            let (write, output) = decide(state, &now)?;
            if let Some(flush) = flush {
                let started = Instant::now();
                super::context::check_deadline()?;
                match kind.write(key, seen, &write).await {
                    Err(StoreError::Conflict { .. }) if conflicts < MAX_CONFLICT_RETRIES => {
                        conflicts += 1;
                        crate::metrics::store_conflict();
                        continue;
                    }
                    result => result?,
                }
                let ticket = self.durability.written();
                drop(guard);
                match flush {
                    Flush::Await => {
                        self.durability.durable(ticket).await?;
                        if K::TIMED {
                            crate::metrics::store_commit(started.elapsed());
                        }
                    }
                    Flush::Defer(deferred, request) => {
                        deferred.push(request, ticket, K::TIMED.then_some(started));
                    }
                }
            }
            return Ok((now, write, output));
        }
    }

    /// Waits for the flush covering every write of a batch. On a failure, the requests whose
    /// writes it did not cover, with the error they are answered.
    pub(crate) async fn flushed(&self, deferred: Deferred) -> Result<(), (Vec<usize>, ApiError)> {
        let writes = deferred
            .0
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(last) = writes.iter().map(|&(_, ticket, _)| ticket).max() else {
            return Ok(());
        };
        if let Err(e) = self.durability.durable(last).await {
            return Err((writes.iter().map(|&(i, ..)| i).collect(), e.into()));
        }
        for started in writes.iter().filter_map(|&(.., started)| started) {
            crate::metrics::store_commit(started.elapsed());
        }
        Ok(())
    }

    /// Deletes under the target's lock with `delete` (true: something was there) and, if
    /// something went, waits for a flush covering it.
    pub(crate) async fn delete(
        &self,
        key: &str,
        delete: impl Future<Output = Result<bool, StoreError>>,
    ) -> Result<bool, ApiError> {
        let guard = self.locks.lock(key).await;
        let existed = delete.await?;
        let ticket = self.durability.written();
        drop(guard);
        if existed {
            self.durability.durable(ticket).await?;
        }
        Ok(existed)
    }
}
