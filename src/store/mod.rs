//! Per-target history: the HPA controller's recommendations and scale events, plus a bounded
//! log of the decisions made, and the VPA recommender's state, durable across restarts.
//!
//! The store traits ([`HpaStore`], [`VpaStore`], `db::Records`) are async: the etcd backend
//! awaits its members on the server's runtime; sled's reads and writes are in-memory and
//! return at once, and its fsync ([`Db::flush`]) runs on a blocking thread.
//!
//! # Layout
//!
//! * `state`: what is kept per target ([`HpaState`], [`DecisionEntry`], [`VpaState`]).
//! * `db`: the database ([`Db`]: flush, health, probe; `db::Records`: single-key records
//!   of one namespace) and its sled implementation `db::SledDb` (folder lock, start-up
//!   checks, reopening after a storage failure).
//! * `hpa`: the HPA records (state and decision log) on sled, and their codec, which the
//!   etcd backend shares; [`HpaStore`] (below) is the trait the API codes against.
//! * `vpa`: the VPA record of a target ([`VpaStore`]), over any `db::Records`.
//! * [`sled`]: [`SledStore`], the default backend (one folder, both kinds);
//!   [`etcd`]: [`etcd::EtcdStore`], several replicas sharing one history (split by concern:
//!   member failover, the batcher, one commit's transaction, single-key records, TLS).
//! * `record`: the versioned value encoding; `keys`: big-endian, order-preserving keys.
//! * [`durability`]: group commit (strict) or periodic flush (relaxed), over a [`Db`].
//!
//! Per-target locks and the per-target settings policy belong to the API (`api::locks`,
//! `api::overrides`). The store may use engine types, never `pb` or `api`.

pub(crate) mod db;
pub mod durability;
pub mod etcd;
pub mod fleet;
pub(crate) mod folder_lock;
pub(crate) mod hpa;
pub(crate) mod keys;
mod owners;
pub(crate) mod record;
pub mod sled;
mod state;
pub(crate) mod vpa;

use std::path::PathBuf;

use thiserror::Error;

use self::hpa::StoredState;
use crate::engine::hpa::history::History;

pub use self::db::Db;
pub use self::fleet::{FleetStore, ScalingGroupDef, StoredPolicy};
pub use self::owners::Owners;
pub use self::sled::SledStore;
pub use self::state::{
    DecisionEntry, DecisionInputs, HpaState, MAX_RUN_DECISIONS, PodTotals, PolicyRef, Reading, Run,
    VpaOverrides, VpaState,
};
pub use self::vpa::VpaStore;

/// Default number of decision runs kept per target (`--decision-log-len`).
pub const DEFAULT_DECISION_LOG_LEN: usize = 100;

/// Which page of a target's decision log to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecisionPageRequest {
    /// At most this many runs (at least 1 is returned when any remain).
    pub size: usize,
    /// Newest run first (the default of `GetHistory`) or oldest first.
    pub newest_first: bool,
    /// Continue after this run (`seq` of the last run of the previous page).
    pub after_seq: Option<u64>,
}

/// A page of a target's decision log.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DecisionPage {
    /// In the requested order.
    pub entries: Vec<DecisionEntry>,
    /// More runs follow the last one.
    pub more: bool,
}

/// Cuts `all` (oldest first, as [`HpaStore::decisions`] returns it) into the page that
/// `request` asks for: the default [`HpaStore::decision_page`].
pub fn page_of(all: Vec<DecisionEntry>, request: &DecisionPageRequest) -> DecisionPage {
    let mut ordered = all;
    if request.newest_first {
        ordered.reverse();
    }
    let start = match request.after_seq {
        None => 0,
        Some(after) => ordered
            .iter()
            .position(|e| {
                if request.newest_first {
                    e.seq < after
                } else {
                    e.seq > after
                }
            })
            .unwrap_or(ordered.len()),
    };
    let size = request.size.max(1);
    let more = ordered.len() > start.saturating_add(size);
    let entries = ordered.into_iter().skip(start).take(size).collect();
    DecisionPage { entries, more }
}

/// What a `load_*_for_update` saw: handed back to the matching write (`commit_after`,
/// `put_vertical_after`), which fails with [`StoreError::Conflict`] if the target changed
/// since (optimistic concurrency between replicas sharing one store; see [`etcd`]). Opaque to
/// the API, which only carries it from the load to the write of one attempt.
#[derive(Default)]
pub struct Seen {
    /// The store's version of the target's record (etcd: its `mod_revision`; sled and absent: 0).
    pub(crate) revision: i64,
    /// The HPA state record as read, decoded once per call, so that the commit does not read
    /// it again (VPA loads leave it empty).
    pub(crate) loaded: Option<Loaded>,
    /// The write replaces the newest decision instead of following it
    /// ([`Seen::withdraw_newest`]).
    pub(crate) withdraw_newest: bool,
}

impl Seen {
    /// The newest decision as loaded (the last decision of the newest run), if the load
    /// carried the state record.
    pub fn newest(&self) -> Option<&DecisionEntry> {
        self.loaded
            .as_ref()
            .and_then(|l| l.state.as_ref())
            .and_then(|s| s.pending.as_ref())
    }

    /// Makes the write that takes this `Seen` replace the newest decision (an amended copy of
    /// it, e.g. a rescale the caller reported as failed) instead of following it: the newest
    /// run is written as if that decision had never been added to it. Both stores apply it
    /// with [`hpa::StoredState::without_newest`].
    pub fn withdraw_newest(&mut self) {
        self.withdraw_newest = true;
    }
}

/// The HPA state record a `load_for_update` decoded, and from which open of the database
/// (a sled reopen after a storage failure drops what was not durable, so an earlier read may
/// be stale; etcd: always 0).
pub(crate) struct Loaded {
    pub(crate) generation: u64,
    pub(crate) state: Option<StoredState>,
}

impl std::fmt::Debug for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seen")
            .field("revision", &self.revision)
            .finish_non_exhaustive()
    }
}

/// A page of target keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyPage {
    /// Target keys in byte order.
    pub keys: Vec<String>,
    /// More keys follow the last one.
    pub more: bool,
}

/// The HPA side of a store: each target's state and decision log. Async: the etcd backend
/// awaits its members on the server's runtime; sled's reads and writes are in-memory and
/// return at once (its fsync is [`Db::flush`], which the group commit runs on a blocking
/// thread).
///
/// Writers of one target must be serialized by the caller (the API's per-key locks): `commit`
/// reads the previous state and trims the decision log from a scan made before its writes.
/// Durability and health are the database's ([`Db`]).
#[tonic::async_trait]
pub trait HpaStore: Db {
    /// The target's state, `None` if it has none.
    async fn load(&self, key: &str) -> Result<Option<HpaState>, StoreError>;
    /// Atomically replaces the target's history and appends `decision` to its log, dropping
    /// the oldest entries beyond the log bound. Not durable until a later `flush` returns.
    ///
    /// The state is read first ([`Self::load_for_update`]): only for callers that serialize
    /// writers themselves (the API uses [`Self::commit_after`]).
    async fn commit(
        &self,
        key: &str,
        history: &History,
        decision: &DecisionEntry,
    ) -> Result<(), StoreError> {
        let (_, seen) = self.load_for_update(key).await?;
        self.commit_after(seen, Commit::new(key, history, decision))
            .await
    }
    /// The target's logged decision runs, oldest first (`seq` ascending).
    async fn decisions(&self, key: &str) -> Result<Vec<DecisionEntry>, StoreError>;
    /// One page of the target's decision runs (at most `decision_log_len` runs per target:
    /// reading them all is bounded).
    async fn decision_page(
        &self,
        key: &str,
        request: &DecisionPageRequest,
    ) -> Result<DecisionPage, StoreError> {
        Ok(page_of(self.decisions(key).await?, request))
    }
    /// The target's newest decision run (the last of [`Self::decisions`]), `None` if it has
    /// none. One read of the state record, which carries the newest run, instead of the
    /// whole log: listing a fleet's summaries costs one read per target.
    async fn latest(&self, key: &str) -> Result<Option<DecisionEntry>, StoreError>;
    /// Up to `limit` target keys after `after` (exclusive), in byte order.
    async fn list_keys(&self, after: Option<&str>, limit: usize) -> Result<KeyPage, StoreError>;
    /// Removes everything stored for the target; false if it had nothing.
    async fn delete(&self, key: &str) -> Result<bool, StoreError>;

    /// [`Self::load`] for a read-modify-write: also returns what [`Self::commit_after`] needs
    /// to detect that another writer (another replica) committed in between.
    async fn load_for_update(&self, key: &str) -> Result<(Option<HpaState>, Seen), StoreError>;
    /// [`Self::commit`], only if the target is still as [`Self::load_for_update`] saw it;
    /// otherwise [`StoreError::Conflict`] and nothing is written (the caller re-reads and
    /// decides again).
    ///
    /// A scaling group's member writes the group's record (its new ledger) in the same
    /// transaction, guarded by the group's revision as read: both or neither, and
    /// [`StoreError::Conflict`] if either changed since it was read.
    async fn commit_after(&self, seen: Seen, commit: Commit<'_>) -> Result<(), StoreError>;
}

/// What one decision writes ([`HpaStore::commit_after`]): the target's new history, its log
/// entry and, for a member of a scaling group whose holding changed, the group's record.
#[derive(Clone, Copy)]
pub struct Commit<'a> {
    /// The target.
    pub key: &'a str,
    /// Its new history.
    pub history: &'a History,
    /// The decision's log entry.
    pub decision: &'a DecisionEntry,
    /// The group's record to write with it, if any.
    pub group: Option<&'a GroupWrite>,
}

impl<'a> Commit<'a> {
    /// A target's commit outside any scaling group.
    pub fn new(key: &'a str, history: &'a History, decision: &'a DecisionEntry) -> Self {
        Commit {
            key,
            history,
            decision,
            group: None,
        }
    }

    /// The same commit with the group's record written beside it.
    pub fn with_group(self, group: &'a GroupWrite) -> Self {
        Commit {
            group: Some(group),
            ..self
        }
    }
}

/// A scaling group's record to write with a member's commit
/// ([`Commit::group`]).
#[derive(Clone, Debug)]
pub struct GroupWrite {
    /// The group's name.
    pub name: String,
    /// Its revision when read (etcd's `mod_revision`; sled: 0, its writers serialized by the
    /// API's per-group lock).
    pub revision: i64,
    /// The group with the member's new ledger entry.
    pub group: ScalingGroupDef,
}

/// Why the store failed.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The data folder cannot be opened; it is left untouched.
    #[error(
        "cannot open the data folder {path}: {message}; refusing to start (the folder is left untouched)"
    )]
    Open {
        /// The data folder.
        path: PathBuf,
        /// What the open failed on.
        message: String,
    },
    /// Another process holds the folder's lock (a live server): nothing in it was touched.
    #[error(
        "cannot open the data folder {path}: it is in use by another process (pid {}?); refusing to start (nothing in the folder was touched)",
        pid.map_or_else(|| "unknown".to_owned(), |p| p.to_string())
    )]
    InUse {
        /// The data folder.
        path: PathBuf,
        /// The holder's pid, as its lock file says; `None` when unreadable.
        pid: Option<u32>,
    },
    /// A stored value has a version this build does not know.
    #[error(
        "{kind} record for {key:?} has encoding version {version}, this build reads only version {supported} (written by a newer autoscaled?)"
    )]
    UnknownVersion {
        /// The record kind (`hpa_state`, `hpa_decisions`, `vpa_state`).
        kind: &'static str,
        /// The target key of the record.
        key: String,
        /// The version byte found.
        version: u8,
        /// The newest version this build reads.
        supported: u8,
    },
    /// A stored value or key does not decode.
    #[error("corrupt {kind} record for {key:?}: {message}")]
    Corrupt {
        /// The record kind (`hpa_state`, `hpa_decisions`, `vpa_state`).
        kind: &'static str,
        /// The target key (or the raw key, when the key itself does not decode).
        key: String,
        /// What does not decode.
        message: String,
    },
    /// sled failed (I/O).
    #[error("storage failure: {0}")]
    Sled(#[from] ::sled::Error),
    /// The database is closed after a storage failure and not reopened yet.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// The flush task is gone (the server is shutting down).
    #[error("the flusher stopped")]
    FlusherStopped,
    /// A flush failed; the write may not be durable.
    #[error("flush failed: {0}")]
    Flush(String),
    /// Another writer (another replica) changed the target since it was read; nothing was
    /// written. The API re-reads and decides again.
    #[error("the history of {key:?} changed concurrently")]
    Conflict {
        /// The target key.
        key: String,
    },
    /// etcd cannot be reached or refused the request; the write may or may not have happened
    /// (it is not acknowledged).
    #[error("etcd: {0}")]
    Etcd(String),
    /// This replica's registration in etcd lapsed (it was cut off from etcd longer than its
    /// lease): the other replicas own its targets, so it decides nothing until it has
    /// registered again. Nothing was read or written.
    #[error(
        "this replica's registration in etcd lapsed; it decides nothing until it registers again"
    )]
    Lapsed,
}
