//! Per-target history: the HPA controller's recommendations and scale events, plus a bounded
//! log of the decisions made, durable across restarts.
//!
//! # Layout
//!
//! * `db`: the database ([`Db`]: flush, health, probe; `db::Records`: single-key records
//!   of one namespace) and its sled implementation `db::SledDb` (folder lock, start-up
//!   checks, reopening after a storage failure).
//! * `hpa`: the HPA records (state and decision log) on sled, and their codec, which the
//!   etcd backend shares; [`HpaStore`] (below) is the trait the API codes against.
//! * `vpa`: the VPA record of a target ([`VpaStore`]), over any `db::Records`.
//! * [`sled`]: [`SledStore`], the default backend (one folder, both kinds);
//!   [`etcd`]: [`etcd::EtcdStore`], several replicas sharing one history.
//! * `record`: the versioned value encoding; `keys`: big-endian, order-preserving keys.
//! * [`prune`]: which recommendations and scale events can go, and why no decision changes.
//! * [`durability`]: group commit (strict) or periodic flush (relaxed), over a [`Db`].
//!
//! Per-target locks and the per-target settings policy belong to the API (`api::locks`,
//! `api::overrides`). The store may use engine types, never `pb` or `api`.

pub(crate) mod db;
pub mod durability;
pub mod etcd;
pub(crate) mod folder_lock;
pub(crate) mod hpa;
pub(crate) mod keys;
pub mod prune;
pub(crate) mod record;
pub mod sled;
pub(crate) mod vpa;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::engine::{
    hpa::Decision,
    hpa::history::History,
    hpa::settings::Settings,
    hpa::spec::{Behavior, HorizontalSpec, MetricSpec},
    time::Time,
};

pub use self::db::Db;
pub use self::sled::SledStore;
pub use self::vpa::{VpaOverrides, VpaState, VpaStore};

/// Default number of decision runs kept per target (`--decision-log-len`).
pub const DEFAULT_DECISION_LOG_LEN: usize = 100;

/// What is kept per target between evaluations.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HpaState {
    /// The controller's memory (recommendations, scale events), after pruning.
    pub history: History,
    /// Sequence number of the next decision record; keeps log keys unique even when two
    /// decisions carry the same evaluation time.
    pub next_seq: u64,
}

/// One run of the decision log: consecutive decisions that say the same thing
/// ([`DecisionEntry::same_outcome`]) stored once, with how many there were and when the first
/// was made; a decision that says something else starts a new run. The fields other than
/// [`run`](Self::run) are the LAST decision's of the run (its time, outcome and inputs), so a
/// replay of the run's last step is exact.
///
/// A fresh decision (as the API hands it to [`HpaStore::commit`]) is a run of one:
/// [`DecisionEntry::single`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionEntry {
    /// The evaluation instant (`now`) of the run's last decision.
    #[serde(with = "crate::engine::time::serde_millis")]
    pub time: Time,
    /// The run's last decision as the engine made it (replicas, metric outcomes, conditions).
    pub decision: Decision,
    /// The spec's metrics, so that a logged metric outcome (which carries only an index) can
    /// be reported with its source type and name, and replayed.
    #[serde(default)]
    pub metrics: Vec<MetricSpec>,
    /// The rest of the spec and the controller settings in force at the last decision;
    /// `None` in records written before they were kept (format 1).
    #[serde(default)]
    pub inputs: Option<DecisionInputs>,
    /// Per entry of `decision.metrics` (same order): how many pods each group had. The stored
    /// record names at most `max_pod_names` pods per group (issue 8 item 6), so the name
    /// lists may be shorter than these totals. Empty: the totals are the lists' lengths
    /// (see [`DecisionEntry::pod_totals`]).
    #[serde(default)]
    pub pod_totals: Vec<PodTotals>,
    /// How many decisions the run holds and when the first was made.
    #[serde(default)]
    pub run: Run,
    /// The run's position in the target's log (assigned by the store; 0 in a fresh decision).
    #[serde(default)]
    pub seq: u64,
}

/// The spec (besides its metrics) and the controller settings of a decision: with the
/// metric outcomes, what a replay of the decision needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionInputs {
    /// The spec's `min_replicas`, as given (before defaulting).
    pub min_replicas: Option<i32>,
    /// The spec's `max_replicas`.
    pub max_replicas: i32,
    /// The spec's behavior; `None` chose the legacy normalization.
    pub behavior: Option<Behavior>,
    /// The server defaults with the target's overrides applied.
    pub settings: Settings,
}

/// The size of each pod group of one metric outcome.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodTotals {
    /// Pods whose sample counted (`groupPods`' ready count).
    pub ready: i32,
    /// Pods not yet ready (cpu only; counted at 0 % when scaling up).
    pub unready: u32,
    /// Pods without a sample (counted at 0 % of the target when scaling up, 100 % down).
    pub missing: u32,
    /// Pods left out entirely (being deleted, or failed).
    pub ignored: u32,
}

/// A run's extent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// Decisions in the run (at least 1).
    pub count: u64,
    /// The evaluation instant of the run's first decision.
    #[serde(with = "crate::engine::time::serde_millis")]
    pub first_time: Time,
}

impl Default for Run {
    fn default() -> Self {
        Run {
            count: 1,
            first_time: Time::default(),
        }
    }
}

impl DecisionEntry {
    /// A fresh decision at `time`: a run of one.
    pub fn single(
        time: Time,
        decision: Decision,
        spec: &HorizontalSpec,
        settings: &Settings,
    ) -> Self {
        DecisionEntry {
            time,
            decision,
            metrics: spec.metrics.clone(),
            inputs: Some(DecisionInputs {
                min_replicas: spec.min_replicas,
                max_replicas: spec.max_replicas,
                behavior: spec.behavior.clone(),
                settings: settings.clone(),
            }),
            pod_totals: Vec::new(),
            run: Run {
                count: 1,
                first_time: time,
            },
            seq: 0,
        }
    }

    /// The group sizes of `decision.metrics[i]` (zeros when it has no pod groups).
    pub fn pod_totals(&self, i: usize) -> PodTotals {
        if let Some(t) = self.pod_totals.get(i) {
            return *t;
        }
        let count = |v: &Vec<String>| u32::try_from(v.len()).unwrap_or(u32::MAX);
        self.decision
            .metrics
            .get(i)
            .and_then(|m| m.pod_groups.as_ref())
            .map_or_else(PodTotals::default, |g| PodTotals {
                ready: g.ready_count,
                unready: count(&g.unready),
                missing: count(&g.missing),
                ignored: count(&g.ignored),
            })
    }

    /// Whether `other` says the same thing as this entry, so that it extends this entry's run
    /// instead of starting a new one: same current and desired replicas, same path, same
    /// conditions (type, status, reason) and the same per-metric proposals (replicas, or
    /// failure reason). What differs otherwise (times, current values, pod names, messages,
    /// inputs) is the last decision's in the run.
    pub fn same_outcome(&self, other: &DecisionEntry) -> bool {
        let (a, b) = (&self.decision, &other.decision);
        a.current_replicas == b.current_replicas
            && a.desired_replicas == b.desired_replicas
            && a.path == b.path
            && a.conditions.len() == b.conditions.len()
            && a.conditions.iter().zip(&b.conditions).all(|(x, y)| {
                x.condition_type == y.condition_type && x.status == y.status && x.reason == y.reason
            })
            && a.metrics.len() == b.metrics.len()
            && a.metrics.iter().zip(&b.metrics).all(|(x, y)| {
                x.index == y.index
                    && match (&x.result, &y.result) {
                        (Ok(p), Ok(q)) => p.replicas == q.replicas,
                        (Err(e), Err(f)) => e.reason == f.reason,
                        _ => false,
                    }
            })
    }
}

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

/// What [`HpaStore::load_for_update`] saw: handed back to [`HpaStore::commit_after`],
/// which fails with [`StoreError::Conflict`] if the target changed since (optimistic
/// concurrency between replicas sharing one store; see [`etcd`]). Meaningless for a store
/// with a single writer (sled), whose defaults ignore it.
#[derive(Clone, Default)]
pub struct Seen {
    /// The store's version of the target's state record (etcd: its `mod_revision`; 0: absent).
    pub revision: i64,
    /// The loaded state's `next_seq` (0 when absent).
    pub next_seq: u64,
    /// What else the store read and needs at commit (etcd: the decoded state record, with its
    /// pending run), so that the commit does not read it again.
    pub token: Option<std::sync::Arc<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seen")
            .field("revision", &self.revision)
            .field("next_seq", &self.next_seq)
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

/// The history backend. Calls are synchronous and short (in-memory writes) except
/// [`Db::flush`], which callers run on a blocking thread.
///
/// Writers of one target must be serialized by the caller (the API's per-key locks): `commit`
/// reads the previous state and trims the decision log from a scan made before its writes.
/// Durability and health are the database's ([`Db`]).
pub trait HpaStore: Db {
    /// The target's state, `None` if it has none.
    fn load(&self, key: &str) -> Result<Option<HpaState>, StoreError>;
    /// Atomically replaces the target's history and appends `decision` to its log, dropping
    /// the oldest entries beyond the log bound. Not durable until a later `flush` returns.
    fn commit(
        &self,
        key: &str,
        history: &History,
        decision: &DecisionEntry,
    ) -> Result<(), StoreError>;
    /// The target's logged decision runs, oldest first (`seq` ascending).
    fn decisions(&self, key: &str) -> Result<Vec<DecisionEntry>, StoreError>;
    /// One page of the target's decision runs.
    fn decision_page(
        &self,
        key: &str,
        request: &DecisionPageRequest,
    ) -> Result<DecisionPage, StoreError> {
        Ok(page_of(self.decisions(key)?, request))
    }
    /// Up to `limit` target keys after `after` (exclusive), in byte order.
    fn list_keys(&self, after: Option<&str>, limit: usize) -> Result<KeyPage, StoreError>;
    /// Removes everything stored for the target; false if it had nothing.
    fn delete(&self, key: &str) -> Result<bool, StoreError>;

    /// [`Self::load`] for a read-modify-write: also returns what [`Self::commit_after`] needs
    /// to detect that another writer (another replica) committed in between.
    fn load_for_update(&self, key: &str) -> Result<(Option<HpaState>, Seen), StoreError> {
        let state = self.load(key)?;
        let next_seq = state.as_ref().map_or(0, |s| s.next_seq);
        Ok((
            state,
            Seen {
                revision: 0,
                next_seq,
                token: None,
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
}
