//! The sled 0.34 store: one `SledDb` (the data folder) holding the HPA records
//! (`hpa`: trees `hpa_state`, `hpa_decisions`) and the VPA records
//! (`vpa`: tree `vpa_state`). This type only puts them together: the database
//! machinery is in `db`, each record kind in its own module.
//!
//! Start-up does constant work: the folder lock, a look at sled's files (no copy, no scan of
//! the records), sled's own recovery. A damaged record is found when it is read: that target
//! answers with an error naming its key, every other target keeps working.

use std::{path::Path, sync::Arc, time::Duration};

use super::{
    Commit, Db, DecisionEntry, HpaState, HpaStore, KeyPage, Loaded, Seen, StoreError,
    db::{Put, Records, SledDb, Space, Versioned},
    fleet,
    hpa::{self, HpaTrees, LogOptions},
    record, vpa,
};

/// Default time a closed decision run is kept (issue 9 item 3).
pub const DEFAULT_DECISION_RETENTION: Duration = Duration::from_secs(24 * 3600);
/// Default number of pod names kept per group in a logged decision (issue 8 item 6).
pub const DEFAULT_MAX_POD_NAMES: usize = 50;
/// Default sled page cache: fits the chart's 384 Mi memory limit (helm/autoscaled/values.yaml) with room for the server.
pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// The trees opened at start-up.
const TREES: &[&str] = &[
    hpa::STATE_TREE,
    hpa::DECISION_TREE,
    vpa::VERTICAL_TREE,
    fleet::GROUPS.tree,
];

/// Options of [`SledStore::open`].
#[derive(Clone, Debug)]
pub struct SledOptions {
    /// Decision runs kept per target.
    pub decision_log_len: usize,
    /// Closed decision runs whose last decision is older than this (relative to the newest
    /// decision of the target) are dropped.
    pub decision_retention: Duration,
    /// Pod names kept per group and metric in a logged decision; the totals are kept too.
    pub max_pod_names: usize,
    /// sled's page cache in bytes (`sled::Config::cache_capacity`; sled's own default is 1 GiB).
    pub cache_bytes: u64,
}

impl Default for SledOptions {
    fn default() -> Self {
        SledOptions {
            decision_log_len: super::DEFAULT_DECISION_LOG_LEN,
            decision_retention: DEFAULT_DECISION_RETENTION,
            max_pod_names: DEFAULT_MAX_POD_NAMES,
            cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }
}

/// History and VPA state in a sled database folder.
#[derive(Debug)]
pub struct SledStore {
    /// Shared with the health probe's blocking task.
    db: Arc<SledDb>,
    options: SledOptions,
}

impl SledStore {
    /// Opens (or creates) the database in `path` (`SledDb::open`). Any failure is
    /// [`StoreError::Open`] (or [`StoreError::InUse`]), and the folder is never replaced,
    /// moved or copied.
    pub fn open(path: &Path, options: SledOptions) -> Result<Self, StoreError> {
        let db = Arc::new(SledDb::open(path, options.cache_bytes, TREES)?);
        Ok(SledStore { db, options })
    }

    /// The database folder.
    pub fn path(&self) -> &Path {
        self.db.path()
    }

    /// The store's options.
    pub fn options(&self) -> &SledOptions {
        &self.options
    }

    /// The encoded size of the target's state record (benchmarks and capacity planning).
    pub fn state_record_bytes(&self, key: &str) -> Result<Option<usize>, StoreError> {
        self.hpa(|t| t.state_record_bytes(key))
    }

    fn log_options(&self) -> LogOptions {
        LogOptions {
            decision_log_len: self.options.decision_log_len,
            decision_retention: self.options.decision_retention,
            max_pod_names: self.options.max_pod_names,
        }
    }

    fn hpa<T>(&self, f: impl FnOnce(&HpaTrees) -> Result<T, StoreError>) -> Result<T, StoreError> {
        HpaTrees::with(&self.db, self.log_options(), f)
    }

    /// [`HpaStore::commit_after`] (and, with `group`, the group's record at the same commit
    /// point): on the state `load_for_update` read, unless the store reopened since.
    fn commit_seen(&self, seen: Seen, commit: Commit<'_>) -> Result<(), StoreError> {
        let Commit {
            key,
            history,
            decision,
            group,
        } = commit;
        let bytes = group.map(|g| record::fleet::encode_group(&g.group));
        self.db.guarded(|o| {
            let t = HpaTrees::of(o, self.log_options())?;
            let groups = group.map(|_| o.tree(fleet::GROUPS.tree)).transpose()?;
            let previous = match seen.loaded {
                Some(l) if l.generation == t.generation => l.state,
                _ => t.read_state(key)?,
            };
            let previous = hpa::plan::built_on(previous, seen.withdraw_newest);
            let also = group
                .zip(groups.as_ref())
                .zip(bytes.as_deref())
                .map(|((g, tree), bytes)| (tree, g.name.as_bytes(), bytes));
            t.commit_loaded_with(key, previous, history, decision, also)
        })
    }

    /// The HPA trees (tests look at the records directly).
    #[cfg(test)]
    fn trees(&self) -> Result<HpaTrees, StoreError> {
        self.db.guarded(|o| HpaTrees::of(o, self.log_options()))
    }
}

#[tonic::async_trait]
impl Db for SledStore {
    fn flush(&self) -> Result<(), StoreError> {
        self.db.flush()
    }

    fn healthy(&self) -> bool {
        self.db.healthy()
    }

    /// A write and an fsync: on a blocking thread.
    async fn probe(&self) -> Result<(), StoreError> {
        let db = Arc::clone(&self.db);
        tokio::task::spawn_blocking(move || db.probe())
            .await
            .map_err(|e| StoreError::Flush(format!("the probe task failed: {e}")))?
    }
}

#[tonic::async_trait]
impl Records for SledStore {
    async fn get_record(&self, space: &Space, key: &str) -> Result<Option<Versioned>, StoreError> {
        self.db.get_record(space, key)
    }

    async fn put_record(&self, space: &Space, key: &str, put: Put) -> Result<(), StoreError> {
        self.db.put_record(space, key, put)
    }

    async fn delete_record(&self, space: &Space, key: &str) -> Result<bool, StoreError> {
        self.db.delete_record(space, key)
    }

    async fn list_records(
        &self,
        space: &Space,
        after: Option<&str>,
        limit: usize,
    ) -> Result<KeyPage, StoreError> {
        self.db.list_records(space, after, limit)
    }
}

/// The sled store's reads and writes are in-memory: each method returns at once.
#[tonic::async_trait]
impl HpaStore for SledStore {
    async fn load(&self, key: &str) -> Result<Option<HpaState>, StoreError> {
        self.hpa(|t| t.load(key))
    }

    async fn load_for_update(&self, key: &str) -> Result<(Option<HpaState>, Seen), StoreError> {
        let (generation, mut stored) = self.hpa(|t| Ok((t.generation, t.read_state(key)?)))?;
        let state = stored.as_mut().map(|s| HpaState {
            history: std::mem::take(&mut s.history),
            next_seq: s.next_seq,
        });
        let seen = Seen {
            revision: 0,
            loaded: Some(Loaded {
                generation,
                state: stored,
            }),
            withdraw_newest: false,
        };
        Ok((state, seen))
    }

    /// The commit on the state `load_for_update` read, unless the store reopened since (a
    /// storage failure dropped what was not durable): then the state is read again.
    /// A member's commit point and the group's record are written in one sled transaction
    /// over both trees (the group's writers are serialized by the API's per-group lock).
    async fn commit_after(&self, seen: Seen, commit: Commit<'_>) -> Result<(), StoreError> {
        self.commit_seen(seen, commit)
    }

    async fn decisions(&self, key: &str) -> Result<Vec<DecisionEntry>, StoreError> {
        self.hpa(|t| t.decisions(key))
    }

    async fn latest(&self, key: &str) -> Result<Option<DecisionEntry>, StoreError> {
        self.hpa(|t| t.latest(key))
    }

    async fn list_keys(&self, after: Option<&str>, limit: usize) -> Result<KeyPage, StoreError> {
        self.hpa(|t| t.list_keys(after, limit))
    }

    async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        self.hpa(|t| t.delete(key))
    }
}

#[cfg(test)]
mod tests;
