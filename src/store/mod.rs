//! Per-target history: the HPA controller's recommendations and scale events, plus a bounded
//! log of the decisions made, durable across restarts.
//!
//! # Layout
//!
//! * [`HistoryStore`]: the small trait the API codes against, so that another backend (etcd)
//!   can come later.
//! * [`sled`](self::sled): the sled 0.34 implementation (one `Tree` per record kind).
//! * [`record`]: the versioned value encoding; [`keys`]: big-endian, order-preserving keys.
//! * [`prune`]: which recommendations and scale events can go, and why no decision changes.
//! * [`durability`]: group commit (strict) or periodic flush (relaxed).
//! * [`locks`]: per-target async locks, so that Recommends on one target are serialized.
//! * [`vertical`]: the VPA state of a target ([`VerticalStore`]), in its own tree.
//!
//! The store may use engine types, never `pb` or `api`.

pub mod durability;
pub mod etcd;
pub mod keys;
pub mod locks;
pub mod prune;
pub mod record;
pub mod sled;
pub mod vertical;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::engine::{history::History, hpa::Decision, spec::MetricSpec, time::Time};

pub use self::sled::SledStore;
pub use self::vertical::{VerticalOverrides, VerticalState, VerticalStore};

/// What is kept per target between evaluations.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TargetState {
    /// The controller's memory (recommendations, scale events), after pruning.
    pub history: History,
    /// Sequence number of the next decision record; keeps log keys unique even when two
    /// decisions carry the same evaluation time.
    pub next_seq: u64,
}

/// One decision, as stored in the bounded decision log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionEntry {
    /// The evaluation instant (`now` of the evaluation).
    pub time: Time,
    pub decision: Decision,
    /// The spec's metrics, so that a logged metric outcome (which carries only an index) can
    /// be reported with its source type and name.
    #[serde(default)]
    pub metrics: Vec<MetricSpec>,
}

/// What [`HistoryStore::load_for_update`] saw: handed back to [`HistoryStore::commit_after`],
/// which fails with [`StoreError::Conflict`] if the target changed since (optimistic
/// concurrency between replicas sharing one store; see [`etcd`]). Meaningless for a store
/// with a single writer (sled), whose defaults ignore it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// The store's version of the target's state record (etcd: its `mod_revision`; 0: absent).
    pub revision: i64,
    /// The loaded state's `next_seq` (0 when absent).
    pub next_seq: u64,
}

/// A page of target keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyPage {
    pub keys: Vec<String>,
    /// More keys follow the last one.
    pub more: bool,
}

/// The history backend. Calls are synchronous and short (in-memory writes) except
/// [`HistoryStore::flush`], which callers run on a blocking thread.
///
/// Writers of one target must be serialized by the caller ([`locks::KeyLocks`]): `commit`
/// reads the previous state and trims the decision log from a scan made before its writes.
pub trait HistoryStore: Send + Sync + 'static {
    /// The target's state, `None` if it has none.
    fn load(&self, key: &str) -> Result<Option<TargetState>, StoreError>;
    /// Atomically replaces the target's history and appends `decision` to its log, dropping
    /// the oldest entries beyond the log bound. Not durable until a later `flush` returns.
    fn commit(
        &self,
        key: &str,
        history: &History,
        decision: &DecisionEntry,
    ) -> Result<(), StoreError>;
    /// The target's logged decisions, oldest first.
    fn decisions(&self, key: &str) -> Result<Vec<DecisionEntry>, StoreError>;
    /// Up to `limit` target keys after `after` (exclusive), in byte order.
    fn list_keys(&self, after: Option<&str>, limit: usize) -> Result<KeyPage, StoreError>;
    /// Removes everything stored for the target; false if it had nothing.
    fn delete(&self, key: &str) -> Result<bool, StoreError>;
    /// Makes every write that returned before this call durable. Blocking.
    fn flush(&self) -> Result<(), StoreError>;

    /// [`Self::load`] for a read-modify-write: also returns what [`Self::commit_after`] needs
    /// to detect that another writer (another replica) committed in between.
    fn load_for_update(&self, key: &str) -> Result<(Option<TargetState>, Seen), StoreError> {
        let state = self.load(key)?;
        let next_seq = state.as_ref().map_or(0, |s| s.next_seq);
        Ok((
            state,
            Seen {
                revision: 0,
                next_seq,
            },
        ))
    }

    /// [`Self::commit`], only if the target is still as [`Self::load_for_update`] saw it;
    /// otherwise [`StoreError::Conflict`] and nothing is written (the caller re-reads and
    /// decides again). The default (one writer per store) is `commit`.
    fn commit_after(
        &self,
        key: &str,
        seen: Seen,
        history: &History,
        decision: &DecisionEntry,
    ) -> Result<(), StoreError> {
        let _ = seen;
        self.commit(key, history, decision)
    }

    /// Whether the store can take writes now (health). The default, a local store, always can;
    /// the etcd store answers whether a quorum read succeeds.
    fn probe(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Why the store failed.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The data folder cannot be opened; it is left untouched.
    #[error(
        "cannot open the data folder {path}: {message}; refusing to start (the folder is left untouched: repair or move it)"
    )]
    Open { path: PathBuf, message: String },
    /// A stored value has a version this build does not know.
    #[error(
        "{kind} record for {key:?} has encoding version {version}, this build reads only version {supported} (written by a newer autoscaled?)"
    )]
    UnknownVersion {
        kind: &'static str,
        key: String,
        version: u8,
        supported: u8,
    },
    /// A stored value or key does not decode.
    #[error("corrupt {kind} record for {key:?}: {message}")]
    Corrupt {
        kind: &'static str,
        key: String,
        message: String,
    },
    /// sled failed (I/O).
    #[error("storage failure: {0}")]
    Sled(#[from] ::sled::Error),
    /// The flush task is gone (the server is shutting down).
    #[error("the flusher stopped")]
    FlusherStopped,
    /// A flush failed; the write may not be durable.
    #[error("flush failed: {0}")]
    Flush(String),
    /// Another writer (another replica) changed the target since it was read; nothing was
    /// written. The API re-reads and decides again.
    #[error("the history of {key:?} changed concurrently")]
    Conflict { key: String },
    /// etcd cannot be reached or refused the request; the write may or may not have happened
    /// (it is not acknowledged).
    #[error("etcd: {0}")]
    Etcd(String),
}
