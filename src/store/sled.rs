//! The sled 0.34 store. Trees (one per record kind):
//!
//! * `meta`: `format` → the layout version (one byte), checked at open;
//! * `hpa_state`: `target_key` → the target's state (versioned record: [`record::hpa`]
//!   version 2, or the JSON of format 1 until the target's next write);
//! * `hpa_decisions`: `target_key ++ 0x00 ++ be(first time) ++ be(seq)` → one decision run
//!   (versioned record), at most `decision_log_len` runs per target and none older than
//!   `decision_retention`, oldest dropped first;
//! * `vpa_state`: `target_key` → [`VerticalState`](super::vertical::VerticalState) (versioned
//!   record; see [`vertical`](super::vertical)).
//!
//! The decision log is a list of runs ([`DecisionEntry`]): a decision that says the same as
//! the newest run ([`DecisionEntry::same_outcome`]) extends it (count + 1, its time and
//! inputs become the run's last) instead of adding an entry, so at steady state a commit is
//! one small write.
//!
//! A commit's state and decision become durable together through ONE single-key write: the
//! state record carries the newest run (`pending`), and the commit that closes that run first
//! copies it into `hpa_decisions` (an idempotent insert under its final key), then replaces the
//! state. So after a crash a target's history and its last logged decision agree, without a
//! sled transaction or batch: in sled 0.34 both go through `PageCache::pin_log`, which writes
//! and syncs the log buffer twice per call (two `pwrite` + two `sync_file_range`, and each
//! wakes all of sled's I/O threads), whatever our durability mode.
//!
//! Start-up does constant work: the folder lock, a look at sled's files (no copy, no scan of
//! the records), sled's own recovery. A damaged record is found when it is read: that target
//! answers with an error naming its key, every other target keeps working.

use std::{
    ops::Bound,
    panic::{AssertUnwindSafe, catch_unwind},
    path::{Path, PathBuf},
    sync::{
        PoisonError, RwLock, RwLockReadGuard,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use serde::Deserialize;
use sled::{Transactional, transaction::TransactionError};

use super::{
    DecisionEntry, DecisionPage, DecisionPageRequest, HistoryStore, KeyPage, Run, StoreError,
    TargetState,
    folder_lock::{self, FolderLock, LockError},
    keys,
    record::{self, Versioned, hpa, pb},
};
use crate::engine::history::History;

const META_TREE: &str = "meta";
const STATE_TREE: &str = "hpa_state";
const DECISION_TREE: &str = "hpa_decisions";
const FORMAT_KEY: &[u8] = b"format";
/// Written by [`HistoryStore::probe`].
const PROBE_KEY: &[u8] = b"probe";
/// Size of a probe write.
const PROBE_BYTES: usize = 64 * 1024;
/// The tree layout written by this build (unchanged since format 1: the records carry their
/// own version byte, and version-1 records are read and rewritten as version 2 lazily).
const FORMAT: u8 = 1;

/// Default time a closed decision run is kept (issue 9 item 3).
pub const DEFAULT_DECISION_RETENTION: Duration = Duration::from_secs(24 * 3600);
/// Default number of pod names kept per group in a logged decision (issue 8 item 6).
pub const DEFAULT_MAX_POD_NAMES: usize = 50;
/// Default sled page cache: fits the chart's 512 Mi memory limit with room for the server.
pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;

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
            decision_log_len: crate::config::DEFAULT_DECISION_LOG_LEN,
            decision_retention: DEFAULT_DECISION_RETENTION,
            max_pod_names: DEFAULT_MAX_POD_NAMES,
            cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }
}

/// History in a sled database folder.
#[derive(Debug)]
pub struct SledStore {
    /// The open database; `None` only between a failed reopen and the next attempt.
    trees: RwLock<Option<Trees>>,
    options: SledOptions,
    path: PathBuf,
    /// A write or flush failed and no later flush of new data succeeded (health:
    /// NOT_SERVING meanwhile).
    failed: AtomicBool,
    /// Probe writes made while failed ([`HistoryStore::probe`]).
    probes: AtomicU64,
    /// Held for the store's life; declared last, so dropped after the database.
    _lock: FolderLock,
}

/// The open sled database and its trees, replaced as a whole when the store reopens after
/// a storage failure.
#[derive(Debug)]
pub(super) struct Trees {
    pub(super) db: sled::Db,
    pub(super) meta: sled::Tree,
    pub(super) state: sled::Tree,
    pub(super) decisions: sled::Tree,
    pub(super) vertical: sled::Tree,
    options: SledOptions,
}

/// Read access to the open trees; a reopen waits until every guard is gone.
pub(super) struct TreesGuard<'a>(RwLockReadGuard<'a, Option<Trees>>);

impl std::ops::Deref for TreesGuard<'_> {
    type Target = Trees;
    fn deref(&self) -> &Trees {
        match self.0.as_ref() {
            Some(t) => t,
            // `SledStore::trees` hands out guards only over `Some`.
            None => unreachable!("a TreesGuard over a closed database"),
        }
    }
}

impl SledStore {
    /// Opens (or creates) the database in `path`. Any failure is [`StoreError::Open`] (or
    /// [`StoreError::InUse`]), and the folder is never replaced, moved or copied.
    ///
    /// Order: the folder lock first (nothing in the folder is read before it is held), then a
    /// check of sled's files ([`preflight`]) that refuses a folder sled would "recover" by
    /// starting over, then sled. Constant work: no copy of the database and no scan of the
    /// records (a damaged record is reported when its target is read).
    pub fn open(path: &Path, options: SledOptions) -> Result<Self, StoreError> {
        let open_err = |message: String| StoreError::Open {
            path: path.to_owned(),
            message,
        };
        if path.exists() && !path.is_dir() {
            return Err(open_err("not a directory".to_owned()));
        }
        // Before anything else in the folder is read or touched (issue 8 item 1).
        let lock = FolderLock::acquire(path).map_err(|e| match e {
            LockError::InUse { pid } => StoreError::InUse {
                path: path.to_owned(),
                pid,
            },
            LockError::Io(message) => open_err(message),
        })?;
        let existing = match preflight(path) {
            Ok(existing) => existing,
            Err(message) => {
                lock.release_refused();
                return Err(open_err(message));
            }
        };
        remove_incomplete_snapshots(path);
        let trees = open_trees(path, &options, existing)?;
        Ok(SledStore {
            trees: RwLock::new(Some(trees)),
            options,
            path: path.to_owned(),
            failed: AtomicBool::new(false),
            probes: AtomicU64::new(0),
            _lock: lock,
        })
    }

    /// The open trees, or [`StoreError::Unavailable`] while a reopen has not succeeded.
    pub(super) fn trees(&self) -> Result<TreesGuard<'_>, StoreError> {
        let guard = self.trees.read().unwrap_or_else(PoisonError::into_inner);
        if guard.is_none() {
            return Err(StoreError::Unavailable(
                "the database is closed after a storage failure and could not be reopened yet"
                    .to_owned(),
            ));
        }
        Ok(TreesGuard(guard))
    }

    /// Runs `f` on the open trees; a storage failure marks the store failed and reopens it,
    /// so that what the failed call wrote in memory is dropped (sled 0.34 keeps failing every
    /// later call after an I/O error, and may hold the failed write in memory).
    pub(super) fn guarded<T>(
        &self,
        f: impl FnOnce(&Trees) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let result = {
            let trees = self.trees()?;
            f(&trees)
        };
        if let Err(StoreError::Sled(e)) = &result {
            tracing::error!(error = %e, path = %self.path.display(), "storage failure: reopening the database");
            self.failed.store(true, Ordering::Release);
            self.reopen();
        }
        result
    }

    /// Drops the open database and opens it again from disk: only what a successful flush
    /// made durable remains. On failure the store stays closed until the next attempt
    /// ([`HistoryStore::flush`], [`HistoryStore::probe`]).
    fn reopen(&self) {
        let mut guard = self.trees.write().unwrap_or_else(PoisonError::into_inner);
        // First close: sled locks its `db` file, and the new handle must take that lock.
        *guard = None;
        remove_incomplete_snapshots(&self.path);
        match open_trees(&self.path, &self.options, true) {
            Ok(trees) => {
                *guard = Some(trees);
                tracing::warn!(path = %self.path.display(), "database reopened after a storage failure");
            }
            Err(e) => {
                tracing::error!(error = %e, path = %self.path.display(), "cannot reopen the database");
            }
        }
    }

    fn reopen_if_closed(&self) {
        let closed = self
            .trees
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none();
        if closed {
            self.reopen();
        }
    }

    /// The database folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The store's options.
    pub fn options(&self) -> &SledOptions {
        &self.options
    }

    /// The encoded size of the target's state record (benchmarks and capacity planning).
    pub fn state_record_bytes(&self, key: &str) -> Result<Option<usize>, StoreError> {
        self.guarded(|t| Ok(t.state.get(keys::state_key(key))?.map(|v| v.len())))
    }
}

/// Removes `snap.*.generating` files: snapshots whose write failed (a full disk) before
/// sled renamed them into place. sled 0.34 writes a snapshot to `snap.LSN.generating`, syncs
/// it, then renames it to `snap.LSN` (`pagecache/snapshot.rs`, `write_snapshot`); but its
/// `RunningConfig::get_snapshot_files` also lists the leftover, which sorts last, so every
/// later open reads it as "the" snapshot and fails ("Read corrupted data") forever. Only
/// called with the folder lock held and no sled open on it.
fn remove_incomplete_snapshots(path: &Path) {
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("snap.") && name.ends_with(".generating") {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => tracing::warn!(file = %name, "removed an incomplete sled snapshot"),
                Err(e) => {
                    tracing::warn!(file = %name, error = %e, "cannot remove an incomplete sled snapshot")
                }
            }
        }
    }
}

/// Opens sled in `path` and checks our format marker (`existing`: the folder held a
/// database, so a missing marker means sled could not read it).
fn open_trees(path: &Path, options: &SledOptions, existing: bool) -> Result<Trees, StoreError> {
    let open_err = |message: String| StoreError::Open {
        path: path.to_owned(),
        message,
    };
    // sled may panic on some corruptions instead of returning an error; turn that into
    // the same clear refusal.
    let config = sled::Config::new()
        .path(path)
        .flush_every_ms(None)
        .cache_capacity(options.cache_bytes);
    let db = match catch_unwind(AssertUnwindSafe(|| config.open())) {
        Ok(Ok(db)) => db,
        Ok(Err(e)) => return Err(open_err(e.to_string())),
        Err(_) => {
            return Err(open_err(
                "the database is corrupt (sled panicked while reading it)".to_owned(),
            ));
        }
    };
    let tree = |name: &str| db.open_tree(name).map_err(|e| open_err(e.to_string()));
    let meta = tree(META_TREE)?;
    let state = tree(STATE_TREE)?;
    let decisions = tree(DECISION_TREE)?;
    let vertical = tree(super::vertical::VERTICAL_TREE)?;
    match meta.get(FORMAT_KEY).map_err(|e| open_err(e.to_string()))? {
        None if existing => {
            return Err(open_err(
                "sled could not read the existing database (no autoscaled format marker found): it is damaged or not an autoscaled database".to_owned(),
            ));
        }
        None => {
            meta.insert(FORMAT_KEY, &[FORMAT])
                .map_err(|e| open_err(e.to_string()))?;
            // Durable at once, so that an existing folder always carries the marker.
            db.flush().map_err(|e| open_err(e.to_string()))?;
        }
        Some(v) if v.as_ref() == [FORMAT] => {}
        Some(v) => {
            return Err(open_err(format!(
                "layout version {:?} is not supported by this build (it reads version {FORMAT})",
                v.as_ref()
            )));
        }
    }
    Ok(Trees {
        db,
        meta,
        state,
        decisions,
        vertical,
        options: options.clone(),
    })
}

impl Trees {
    /// The keys of the target's logged runs, oldest first.
    fn decision_keys(&self, key: &str) -> Result<Vec<sled::IVec>, StoreError> {
        self.decisions
            .scan_prefix(keys::decision_prefix(key))
            .keys()
            .collect::<Result<_, _>>()
            .map_err(StoreError::from)
    }

    /// A write's result (a failure reopens the store: [`SledStore::guarded`]).
    fn track<T>(&self, result: Result<T, sled::Error>) -> Result<T, StoreError> {
        result.map_err(StoreError::from)
    }

    /// The decoded state record of `key`.
    fn read_state(&self, key: &str) -> Result<Option<StoredState>, StoreError> {
        self.state
            .get(keys::state_key(key))?
            .map(|v| StoredState::decode(key, &v))
            .transpose()
    }
}

/// Checks an existing folder before sled sees it, reading only sled's small `conf` and one
/// header per segment of `db` (constant in the number of records).
///
/// sled 0.34 treats a truncated `conf` as "no database" and starts afresh over the old files,
/// and at recovery it overwrites with zeros every segment that its snapshot and segment
/// headers do not account for (`SegmentAccountant::initialize_from_snapshot`), so garbage over
/// `db` would be silently replaced by an empty database. We refuse instead. Accepted: a
/// missing or empty folder (a new database), or one whose `conf` is intact (checksum as sled
/// writes it) and whose `db` has at least one segment header with a valid checksum
/// (`SegmentHeader::from` in sled's `pagecache/logger.rs`: crc32 of bytes 4..20, xored with
/// `0xFFFF_FFFF`, in bytes 0..4) and no segment header that is neither valid nor zero (sled
/// zeroes freed segments). Damage inside a segment that sled's recovery can cut off as a torn
/// tail is repaired by sled as designed, losing only that tail.
///
/// Returns whether the folder holds a database.
fn preflight(path: &Path) -> Result<bool, String> {
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(format!("cannot read the folder: {e}")),
    };
    // Our lock file is there from the first start on; it says nothing about the database.
    let mut entries = entries.filter(|e| {
        e.as_ref()
            .map_or(true, |e| e.file_name() != folder_lock::LOCK_FILE)
    });
    if entries.next().is_none() {
        return Ok(false);
    }
    let conf = std::fs::read(path.join("conf")).map_err(|e| {
        format!("not empty, but its sled `conf` file cannot be read ({e}); is this an autoscaled data folder?")
    })?;
    let intact = conf.len() > 8 && {
        let (body, crc) = conf.split_at(conf.len() - 4);
        let mut expected = [0; 4];
        expected.copy_from_slice(crc);
        crc32fast::hash(body) == u32::from_le_bytes(expected)
    };
    if !intact {
        return Err("its sled `conf` file is truncated or fails its checksum".to_owned());
    }
    let segment_size = segment_size(&conf[..conf.len() - 4])
        .ok_or("its sled `conf` file names no valid segment_size")?;
    let db = path.join("db");
    let len = match std::fs::metadata(&db) {
        Ok(m) if m.is_file() && m.len() > 0 => m.len(),
        Ok(_) => return Err("its sled `db` file is empty or not a file".to_owned()),
        Err(e) => return Err(format!("its sled `db` file cannot be read ({e})")),
    };
    check_segment_headers(&db, len, segment_size)
        .map_err(|e| format!("its sled `db` file is damaged or not a sled log: {e}"))?;
    Ok(true)
}

/// `segment_size: N` of sled's `conf` (lines `key: value`).
fn segment_size(conf_body: &[u8]) -> Option<u64> {
    std::str::from_utf8(conf_body)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("segment_size:"))
        .and_then(|v| v.trim().parse().ok())
        .filter(|&n: &u64| n >= SEG_HEADER_LEN as u64)
}

/// sled 0.34's `SEG_HEADER_LEN`.
const SEG_HEADER_LEN: usize = 20;

/// See [`preflight`]: as sled's `scan_segment_headers_and_tail` counts segments (a partial
/// last segment counts when it holds a whole header).
fn check_segment_headers(db: &Path, len: u64, segment_size: u64) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(db).map_err(|e| e.to_string())?;
    let segments = len / segment_size + u64::from(len % segment_size >= SEG_HEADER_LEN as u64);
    let mut valid = 0u64;
    for idx in 0..segments {
        let mut header = [0u8; SEG_HEADER_LEN];
        file.read_exact_at(&mut header, idx * segment_size)
            .map_err(|e| e.to_string())?;
        let stored = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) ^ 0xFFFF_FFFF;
        if crc32fast::hash(&header[4..]) == stored {
            valid += 1;
        } else if header.iter().any(|&b| b != 0) {
            return Err(format!(
                "segment {idx} (offset {}) has no valid header",
                idx * segment_size
            ));
        }
    }
    if valid == 0 {
        return Err("no segment has a valid header".to_owned());
    }
    Ok(())
}

/// A stored state record, of either version, as the store needs it. Shared with the etcd
/// store ([`super::etcd`]), which writes the same records.
pub(super) struct StoredState {
    pub(super) history: History,
    pub(super) next_seq: u64,
    /// Runs in `hpa_decisions` for the target; `None` in records of older builds.
    pub(super) log_len: Option<u64>,
    /// The newest run, not yet in `hpa_decisions`.
    pub(super) pending: Option<DecisionEntry>,
}

impl StoredState {
    pub(super) fn decode(key: &str, bytes: &[u8]) -> Result<Self, StoreError> {
        match record::versioned("state", key, bytes)? {
            Versioned::Binary(body) => {
                let r: pb::HpaState = record::decode_binary("state", key, body)?;
                let bad = |m: String| record::corrupt("state", key, &m);
                let history =
                    hpa::history_from_record(r.history.as_ref().unwrap_or(&pb::History::default()))
                        .map_err(bad)?;
                let pending = r
                    .pending
                    .as_ref()
                    .map(hpa::run_from_record)
                    .transpose()
                    .map_err(bad)?;
                Ok(StoredState {
                    history,
                    next_seq: r.next_seq,
                    log_len: Some(r.log_len),
                    pending,
                })
            }
            Versioned::Json(body) => {
                let old: LegacyState = serde_json::from_slice(body)
                    .map_err(|e| record::corrupt("state", key, &e.to_string()))?;
                let pending = old.pending.map(|p| legacy_entry(p.entry, p.seq));
                Ok(StoredState {
                    history: old.history,
                    next_seq: old.next_seq,
                    log_len: old.log_len,
                    pending,
                })
            }
        }
    }

    pub(super) fn encode(&self, history: &History, max_pod_names: usize) -> Vec<u8> {
        record::encode_binary(&pb::HpaState {
            history: Some(hpa::history_to_record(history)),
            next_seq: self.next_seq,
            log_len: self.log_len.unwrap_or(0),
            pending: self
                .pending
                .as_ref()
                .map(|p| hpa::run_to_record(p, max_pod_names)),
        })
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

/// A logged run, of either version; `seq` from the key for format-1 records.
pub(super) fn decode_run(
    key: &str,
    log_key: &[u8],
    bytes: &[u8],
) -> Result<DecisionEntry, StoreError> {
    match record::versioned("decision", key, bytes)? {
        Versioned::Binary(body) => {
            let r: pb::DecisionRun = record::decode_binary("decision", key, body)?;
            hpa::run_from_record(&r).map_err(|m| record::corrupt("decision", key, &m))
        }
        Versioned::Json(body) => {
            let entry: DecisionEntry = serde_json::from_slice(body)
                .map_err(|e| record::corrupt("decision", key, &e.to_string()))?;
            let seq = keys::decision_key_seq(log_key).unwrap_or(0);
            Ok(legacy_entry(entry, seq))
        }
    }
}

fn key_string(k: &[u8]) -> Result<String, StoreError> {
    String::from_utf8(k.to_vec()).map_err(|_| StoreError::Corrupt {
        kind: "state",
        key: String::from_utf8_lossy(k).into_owned(),
        message: "key is not UTF-8".to_owned(),
    })
}

fn tx_error(e: TransactionError<StoreError>) -> StoreError {
    match e {
        TransactionError::Abort(e) => e,
        TransactionError::Storage(e) => StoreError::Sled(e),
    }
}

impl Trees {
    pub(super) fn load(&self, key: &str) -> Result<Option<TargetState>, StoreError> {
        Ok(self.read_state(key)?.map(|s| TargetState {
            history: s.history,
            next_seq: s.next_seq,
        }))
    }

    pub(super) fn commit(
        &self,
        key: &str,
        history: &History,
        decision: &DecisionEntry,
    ) -> Result<(), StoreError> {
        let state_key = keys::state_key(key);
        let max_names = self.options.max_pod_names;
        // Read before writing, like the log scan below: writers of one target are serialized
        // by the caller.
        let previous = self.read_state(key)?.unwrap_or(StoredState {
            history: History::default(),
            next_seq: 0,
            log_len: Some(0),
            pending: None,
        });
        // The same outcome as the newest run: the run grows, nothing else is written.
        if let Some(run) = previous
            .pending
            .as_ref()
            .filter(|p| p.same_outcome(decision))
        {
            let mut extended = decision.clone();
            extended.run = Run {
                count: run.run.count.saturating_add(1),
                first_time: run.run.first_time,
            };
            extended.seq = run.seq;
            let next = StoredState {
                history: History::default(),
                next_seq: previous.next_seq,
                log_len: previous.log_len,
                pending: Some(extended),
            };
            // A state of an older build: count its log once (below, on the closing path).
            if next.log_len.is_some() {
                let bytes = next.encode(history, max_names);
                self.track(self.state.insert(state_key, bytes))?;
                return Ok(());
            }
        }
        let seq = previous.next_seq;
        // 1. The newest run is closed: it goes into the log under its final key. Idempotent:
        //    after a crash between this insert and step 2 it is already there, and the state
        //    still names it as pending; `log_len` never counts the pending one, so it is
        //    counted here, once.
        let mut logged = match previous.log_len {
            Some(len) => len,
            None => self.decision_keys(key)?.len() as u64,
        };
        let mut newest_logged = None;
        if let Some(pending) = &previous.pending {
            let log_key = keys::decision_key(key, pending.run.first_time, pending.seq);
            let bytes = record::encode_binary(&hpa::run_to_record(pending, max_names));
            self.track(self.decisions.insert(log_key, bytes))?;
            logged = logged.saturating_add(1);
            newest_logged = Some(pending.run.first_time);
        }
        // 2. Trim, by count (the bound includes the new pending run) and by age: a closed run
        //    ended before its successor began, so it is older than the cutoff when its
        //    successor began at or before it.
        let bound = self.options.decision_log_len as u64;
        let excess = logged.saturating_add(1).saturating_sub(bound);
        let cutoff = decision.time.minus(self.options.decision_retention);
        let mut to_remove: Vec<sled::IVec> = Vec::new();
        if logged > 0 && newest_logged.is_some() {
            let mut iter = self
                .decisions
                .scan_prefix(keys::decision_prefix(key))
                .keys()
                .peekable();
            while let Some(k) = iter.next() {
                let k = k?;
                let successor_began = match iter.peek() {
                    Some(Ok(next)) => keys::decision_key_time(next),
                    Some(Err(_)) => None,
                    None => Some(decision.time),
                };
                let old = successor_began.is_some_and(|t| t <= cutoff);
                if (to_remove.len() as u64) < excess || old {
                    to_remove.push(k);
                } else {
                    break;
                }
            }
        }
        let log_len = logged.saturating_sub(to_remove.len() as u64);
        // 3. The commit point: one single-key write of the new history with the new run.
        let mut fresh = decision.clone();
        fresh.run = Run {
            count: 1,
            first_time: decision.time,
        };
        fresh.seq = seq;
        let next = StoredState {
            history: History::default(),
            next_seq: seq.saturating_add(1),
            log_len: Some(log_len),
            pending: Some(fresh),
        };
        self.track(
            self.state
                .insert(state_key, next.encode(history, max_names)),
        )?;
        // 4. A crash before this leaves at most these few old runs on disk; `decisions`
        //    shows only the newest `decision_log_len`.
        for old in &to_remove {
            self.track(self.decisions.remove(old))?;
        }
        Ok(())
    }

    pub(super) fn decisions(&self, key: &str) -> Result<Vec<DecisionEntry>, StoreError> {
        let pending = self.read_state(key)?.and_then(|s| s.pending);
        let mut out = Vec::new();
        let mut seqs = Vec::new();
        for item in self.decisions.scan_prefix(keys::decision_prefix(key)) {
            let (k, v) = item?;
            let entry = decode_run(key, &k, &v)?;
            seqs.push(entry.seq);
            out.push(entry);
        }
        if let Some(pending) = pending {
            // Already there after a crash between the two writes of a commit.
            if !seqs.contains(&pending.seq) {
                out.push(pending);
            }
        }
        // Entries a crash kept from being trimmed are not shown.
        let skip = out
            .len()
            .saturating_sub(self.options.decision_log_len.max(1));
        out.drain(..skip);
        Ok(out)
    }

    pub(super) fn list_keys(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<KeyPage, StoreError> {
        let lower = match after {
            Some(a) => Bound::Excluded(a.as_bytes().to_vec()),
            None => Bound::Unbounded,
        };
        let mut keys = Vec::new();
        let mut more = false;
        for item in self.state.range::<Vec<u8>, _>((lower, Bound::Unbounded)) {
            let (k, _) = item?;
            if keys.len() == limit {
                more = true;
                break;
            }
            keys.push(key_string(&k)?);
        }
        Ok(KeyPage { keys, more })
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
}

impl HistoryStore for SledStore {
    fn load(&self, key: &str) -> Result<Option<TargetState>, StoreError> {
        self.guarded(|t| t.load(key))
    }

    fn commit(
        &self,
        key: &str,
        history: &History,
        decision: &DecisionEntry,
    ) -> Result<(), StoreError> {
        self.guarded(|t| t.commit(key, history, decision))
    }

    fn decisions(&self, key: &str) -> Result<Vec<DecisionEntry>, StoreError> {
        self.guarded(|t| t.decisions(key))
    }

    fn decision_page(
        &self,
        key: &str,
        request: &DecisionPageRequest,
    ) -> Result<DecisionPage, StoreError> {
        // At most `decision_log_len` runs per target: reading them all is bounded.
        Ok(super::page_of(self.decisions(key)?, request))
    }

    fn list_keys(&self, after: Option<&str>, limit: usize) -> Result<KeyPage, StoreError> {
        self.guarded(|t| t.list_keys(after, limit))
    }

    fn delete(&self, key: &str) -> Result<bool, StoreError> {
        self.guarded(|t| t.delete(key))
    }

    /// Clears the failed state only when the flush wrote something (an empty flush proves
    /// nothing about the disk).
    fn flush(&self) -> Result<(), StoreError> {
        self.reopen_if_closed();
        let flushed = self.guarded(|t| Ok(t.db.flush()?))?;
        if flushed > 0 {
            self.failed.store(false, Ordering::Release);
        }
        Ok(())
    }

    fn healthy(&self) -> bool {
        !self.failed.load(Ordering::Acquire)
    }

    /// A small durable write (a counter under `meta/probe`), so that a failed store finds
    /// out whether writes succeed again even while health keeps traffic away.
    fn probe(&self) -> Result<(), StoreError> {
        self.reopen_if_closed();
        // Larger than a page, so that it cannot fit in the slack of pages the log already
        // has (a full disk fails it), and distinct each time.
        let n = self.probes.fetch_add(1, Ordering::Relaxed);
        let mut value = vec![0u8; PROBE_BYTES];
        value[..8].copy_from_slice(&n.to_be_bytes());
        self.guarded(|t| {
            t.meta.insert(PROBE_KEY, value)?;
            Ok(())
        })?;
        self.flush()?;
        // Healthy again: the probe value has served its purpose.
        self.guarded(|t| {
            t.meta.remove(PROBE_KEY)?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use serde::Serialize;

    use super::*;
    use crate::engine::{
        condition::{Condition, ConditionReason, ConditionType},
        history::Recommendation,
        hpa::{Decision, DecisionPath, MetricOutcome, MetricProposal, PodGroups},
        settings::Settings,
        spec::HorizontalSpec,
        time::Time,
    };
    use crate::store::PodTotals;

    fn decision(desired: i32) -> Decision {
        Decision {
            current_replicas: 1,
            desired_replicas: desired,
            conditions: vec![Condition {
                condition_type: ConditionType::AbleToScale,
                status: true,
                reason: ConditionReason::ReadyForNewScale,
                message: "recommended size matches current size".to_owned(),
            }],
            metrics: vec![],
            path: DecisionPath::Legacy,
            prenormalized_replicas: Some(desired),
            stabilized_replicas: None,
            scale_up_limit: None,
            scale_down_limit: None,
            error: None,
            rescale_reason: None,
            extensions: None,
        }
    }

    fn spec() -> HorizontalSpec {
        HorizontalSpec {
            min_replicas: Some(1),
            max_replicas: 10,
            metrics: vec![],
            behavior: None,
            extensions: None,
        }
    }

    fn entry(secs: i64, desired: i32) -> DecisionEntry {
        DecisionEntry::single(
            Time::from_unix_secs(secs),
            decision(desired),
            &spec(),
            &Settings::default(),
        )
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

    fn desired(s: &SledStore, key: &str) -> Vec<i32> {
        s.decisions(key)
            .unwrap()
            .iter()
            .map(|d| d.decision.desired_replicas)
            .collect()
    }

    /// The old JSON records (format 1), as builds before version 2 wrote them.
    #[derive(Serialize)]
    struct OldEntry<'a> {
        time: Time,
        decision: &'a Decision,
        metrics: Vec<crate::engine::spec::MetricSpec>,
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

    #[test]
    fn reopen_preserves_state_and_log() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = open(dir.path(), 10);
            s.commit("a", &history(3, 10), &entry(10, 3)).unwrap();
            s.commit("a", &history(4, 20), &entry(20, 4)).unwrap();
            s.flush().unwrap();
        }
        let s = open(dir.path(), 10);
        let state = s.load("a").unwrap().unwrap();
        assert_eq!(state.history, history(4, 20));
        assert_eq!(state.next_seq, 2);
        let log = s.decisions("a").unwrap();
        assert_eq!(log.len(), 2);
        assert_eq!(log[1], {
            let mut e = entry(20, 4);
            e.seq = 1;
            e
        });
        assert_eq!(desired(&s, "a"), vec![3, 4]);
        assert_eq!(s.load("b").unwrap(), None);
    }

    #[test]
    fn decisions_that_say_the_same_thing_are_one_run_with_count_and_times() {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), 10);
        for t in 0..5 {
            s.commit("a", &history(3, t * 15), &entry(t * 15, 3))
                .unwrap();
        }
        s.commit("a", &history(4, 75), &entry(75, 4)).unwrap();
        s.commit("a", &history(4, 90), &entry(90, 4)).unwrap();
        let log = s.decisions("a").unwrap();
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
            .unwrap();
        assert!(!page.more);
        assert_eq!(page.entries[0].decision.desired_replicas, 3);
    }

    #[test]
    fn a_different_reason_starts_a_new_run() {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), 10);
        s.commit("a", &history(3, 0), &entry(0, 3)).unwrap();
        let mut other = entry(15, 3);
        other.decision.conditions[0].reason = ConditionReason::ScaleDownStabilized;
        s.commit("a", &history(3, 15), &other).unwrap();
        // A different message alone does not.
        let mut worded = entry(30, 3);
        worded.decision.conditions[0].reason = ConditionReason::ScaleDownStabilized;
        worded.decision.conditions[0].message = "other words".to_owned();
        s.commit("a", &history(3, 30), &worded).unwrap();
        let counts: Vec<u64> = s
            .decisions("a")
            .unwrap()
            .iter()
            .map(|e| e.run.count)
            .collect();
        assert_eq!(counts, vec![1, 2]);
        assert_eq!(
            s.decisions("a").unwrap()[1].decision.conditions[0].message,
            "other words",
            "a run keeps its last decision"
        );
    }

    #[test]
    fn closed_runs_older_than_the_retention_are_dropped() {
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
            s.commit(
                "a",
                &history(i, i64::from(i) * 50),
                &entry(i64::from(i) * 50, i),
            )
            .unwrap();
        }
        // At 250 the cutoff is 150: runs that ended by 150 (began 0, 50, 100) are gone.
        assert_eq!(desired(&s, "a"), vec![3, 4, 5]);
    }

    #[test]
    fn pod_names_are_capped_per_group_with_the_totals_kept() {
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
        s.commit("a", &history(3, 0), &e).unwrap();
        let read = &s.decisions("a").unwrap()[0];
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
        s.commit("a", &history(4, 15), &entry(15, 4)).unwrap();
        assert_eq!(s.decisions("a").unwrap()[0].pod_totals(0).unready, 5);
    }

    #[test]
    fn decision_log_keeps_the_last_n_in_time_order() {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), 3);
        for i in 0..7 {
            s.commit("a", &history(i, i.into()), &entry(i.into(), i))
                .unwrap();
        }
        // Same time twice: the sequence number keeps both.
        s.commit("a", &history(7, 6), &entry(6, 70)).unwrap();
        assert_eq!(desired(&s, "a"), vec![5, 6, 70]);
    }

    #[test]
    fn a_shorter_log_bound_after_reopen_trims_the_surplus_on_the_next_write() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = open(dir.path(), 10);
            for i in 0..6 {
                s.commit("a", &history(i, i.into()), &entry(i.into(), i))
                    .unwrap();
            }
            s.flush().unwrap();
        }
        let s = open(dir.path(), 3);
        s.commit("a", &history(6, 6), &entry(6, 6)).unwrap();
        assert_eq!(desired(&s, "a"), vec![4, 5, 6]);
        assert_eq!(s.load("a").unwrap().unwrap().next_seq, 7);
    }

    #[test]
    fn a_format_1_target_reads_and_migrates_on_its_next_write() {
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
        assert_eq!(s.load("a").unwrap().unwrap().history, history(4, 4));
        let log = s.decisions("a").unwrap();
        assert_eq!(
            log.iter()
                .map(|e| (e.decision.desired_replicas, e.seq, e.run.count))
                .collect::<Vec<_>>(),
            vec![(2, 2, 1), (3, 3, 1), (4, 4, 1)]
        );
        assert_eq!(log[2].run.first_time, Time::from_unix_secs(4));
        assert_eq!(log[2].inputs, None);
        s.commit("a", &history(5, 5), &entry(5, 5)).unwrap();
        assert_eq!(desired(&s, "a"), vec![3, 4, 5]);
        assert_eq!(
            s.trees().unwrap().state.get("a").unwrap().unwrap()[0],
            record::VERSION_BINARY,
            "rewritten as version 2"
        );
        // The closed format-1 run went into the log as version 2.
        let logged =
            s.trees()
                .unwrap()
                .decisions
                .get(keys::decision_key("a", Time::from_unix_secs(4), 4));
        assert_eq!(logged.unwrap().unwrap()[0], record::VERSION_BINARY);
    }

    #[test]
    fn a_format_1_state_without_the_log_length_is_counted_once() {
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
            &TargetState {
                history: history(2, 2),
                next_seq: 3,
            },
        )
        .unwrap();
        s.trees().unwrap().state.insert("a", old).unwrap();
        assert_eq!(desired(&s, "a"), vec![0, 1, 2]);
        s.commit("a", &history(3, 3), &entry(3, 3)).unwrap();
        assert_eq!(desired(&s, "a"), vec![1, 2, 3]);
        s.commit("a", &history(4, 4), &entry(4, 4)).unwrap();
        assert_eq!(desired(&s, "a"), vec![2, 3, 4]);
        assert_eq!(s.trees().unwrap().decision_keys("a").unwrap().len(), 2);
    }

    #[test]
    fn a_crash_between_the_log_copy_and_the_state_write_counts_the_entry_once() {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), 3);
        s.commit("a", &history(1, 1), &entry(1, 1)).unwrap();
        s.commit("a", &history(2, 2), &entry(2, 2)).unwrap();
        // Step 1 of the next commit done (the pending run copied into the log), step 3 lost.
        let pending = s
            .trees()
            .unwrap()
            .read_state("a")
            .unwrap()
            .unwrap()
            .pending
            .unwrap();
        s.trees()
            .unwrap()
            .decisions
            .insert(
                keys::decision_key("a", pending.run.first_time, pending.seq),
                record::encode_binary(&hpa::run_to_record(&pending, 50)),
            )
            .unwrap();
        assert_eq!(desired(&s, "a"), vec![1, 2]);
        for i in 3..6 {
            s.commit("a", &history(i, i.into()), &entry(i.into(), i))
                .unwrap();
        }
        assert_eq!(desired(&s, "a"), vec![3, 4, 5]);
        assert_eq!(s.trees().unwrap().decision_keys("a").unwrap().len(), 2);
    }

    #[test]
    fn entries_a_crash_kept_from_being_trimmed_are_not_shown() {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), 2);
        s.commit("a", &history(1, 1), &entry(1, 1)).unwrap();
        let stale = keys::decision_key("a", Time::from_unix_secs(0), 99);
        s.trees()
            .unwrap()
            .decisions
            .insert(stale, old_entry(0, 0))
            .unwrap();
        s.commit("a", &history(2, 2), &entry(2, 2)).unwrap();
        s.commit("a", &history(3, 3), &entry(3, 3)).unwrap();
        assert_eq!(desired(&s, "a"), vec![2, 3]);
    }

    #[test]
    fn a_damaged_record_fails_its_target_only_and_is_left_in_place() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = open(dir.path(), 3);
            s.commit("a", &history(1, 1), &entry(1, 1)).unwrap();
            s.commit("b", &history(2, 1), &entry(1, 2)).unwrap();
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
        let err = s.load("a").unwrap_err();
        assert!(
            matches!(&err, StoreError::Corrupt { key, .. } if key == "a"),
            "{err}"
        );
        assert!(s.decisions("a").is_err());
        let err = s.load("v").unwrap_err();
        assert!(err.to_string().contains("encoding version 9"), "{err}");
        assert!(s.load("b").unwrap().is_some());
        s.commit("b", &history(3, 2), &entry(2, 3)).unwrap();
        // A write to the damaged target fails too: nothing silently replaced.
        assert!(s.commit("a", &history(1, 2), &entry(2, 1)).is_err());
        assert_eq!(
            s.trees().unwrap().state.get("v").unwrap().unwrap().as_ref(),
            &[9u8, 1, 2]
        );
    }

    #[test]
    fn damaged_or_foreign_folders_are_refused_and_left_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good");
        {
            let s = open(&good, 3);
            s.commit("a", &history(1, 1), &entry(1, 1)).unwrap();
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
        assert!(open(&good, 3).load("a").unwrap().is_some());
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

    #[test]
    fn list_keys_paginates_in_byte_order() {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), 3);
        for k in ["c", "a", "b/x", "b", "d"] {
            s.commit(k, &history(1, 1), &entry(1, 1)).unwrap();
        }
        let p1 = s.list_keys(None, 2).unwrap();
        assert_eq!(
            p1,
            KeyPage {
                keys: vec!["a".into(), "b".into()],
                more: true
            }
        );
        let p2 = s.list_keys(Some("b"), 2).unwrap();
        assert_eq!(
            p2,
            KeyPage {
                keys: vec!["b/x".into(), "c".into()],
                more: true
            }
        );
        let p3 = s.list_keys(Some("c"), 2).unwrap();
        assert_eq!(
            p3,
            KeyPage {
                keys: vec!["d".into()],
                more: false
            }
        );
        assert_eq!(s.list_keys(None, 100).unwrap().keys.len(), 5);
    }

    #[test]
    fn delete_removes_state_and_log_of_that_target_only() {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), 3);
        s.commit("a", &history(1, 1), &entry(1, 1)).unwrap();
        s.commit("a", &history(2, 2), &entry(2, 2)).unwrap();
        s.commit("ab", &history(2, 1), &entry(1, 2)).unwrap();
        assert!(s.delete("a").unwrap());
        assert!(!s.delete("a").unwrap());
        assert_eq!(s.load("a").unwrap(), None);
        assert!(s.decisions("a").unwrap().is_empty());
        assert_eq!(s.decisions("ab").unwrap().len(), 1);
        assert!(s.load("ab").unwrap().is_some());
    }
}
