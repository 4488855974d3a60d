//! The database under the stores: [`Db`] (flush, health, probe) and its sled 0.34
//! implementation [`SledDb`], which owns the data folder (folder lock, start-up checks, the
//! sled handle and its reopening after a storage failure). The record kinds build on it and on
//! nothing else: [`hpa`](super::hpa) (trees `hpa_state`, `hpa_decisions`) and
//! [`vpa`](super::vpa) (tree `vpa_state`, through [`Records`]); the etcd backend
//! ([`etcd`](super::etcd)) implements the same traits.
//!
//! Tree `meta`: `format` → the layout version (one byte), checked at open.
//!
//! Start-up does constant work: the folder lock, a look at sled's files (no copy, no scan of
//! the records), sled's own recovery.

use std::{
    ops::Bound,
    panic::{AssertUnwindSafe, catch_unwind},
    path::{Path, PathBuf},
    sync::{
        PoisonError, RwLock, RwLockReadGuard,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use super::{
    KeyPage, StoreError,
    folder_lock::{self, FolderLock, LockError},
};

const META_TREE: &str = "meta";
const FORMAT_KEY: &[u8] = b"format";
/// Written by [`Db::probe`].
const PROBE_KEY: &[u8] = b"probe";
/// Size of a probe write.
const PROBE_BYTES: usize = 64 * 1024;
/// The tree layout written by this build (unchanged since format 1: the records carry their
/// own version byte, and older records are read and rewritten lazily).
const FORMAT: u8 = 1;

/// The database every record kind of one store lives in: one flush makes every write of
/// every kind durable (the group commit of [`durability`](super::durability) runs it).
#[tonic::async_trait]
pub trait Db: Send + Sync + 'static {
    /// Makes every write that returned before this call durable. Blocking (an fsync): the
    /// group commit runs it on a blocking thread.
    fn flush(&self) -> Result<(), StoreError>;
    /// False while the store cannot write (the last write or flush failed and no later one
    /// succeeded): health reports NOT_SERVING meanwhile.
    fn healthy(&self) -> bool {
        true
    }
    /// While not [`healthy`](Self::healthy): a small durable write that tells whether writes
    /// succeed again (health keeps traffic away meanwhile, so no request would find out).
    /// A success makes the store healthy. The etcd store answers whether a quorum read
    /// succeeds. Called by the one store-health watcher (`store_health`).
    async fn probe(&self) -> Result<(), StoreError>;
    /// Whether the health watcher probes even while [`healthy`](Self::healthy) (a remote
    /// store, whose failure no local write reports first), and serves only while the probe
    /// succeeds.
    fn probe_while_healthy(&self) -> bool {
        false
    }
}

/// Where a kind of single-key records lives: a sled tree, or a key prefix on etcd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Space {
    /// The sled tree.
    pub tree: &'static str,
    /// The etcd key segment after the store's prefix (e.g. `vpa/`).
    pub etcd: &'static str,
    /// The record kind named in errors.
    pub kind: &'static str,
}

/// A record's new bytes, written only if its revision is still `if_revision` (0: absent)
/// when that is given ([`Records::put_record`]).
#[derive(Clone, Debug)]
pub struct Put {
    pub bytes: Vec<u8>,
    pub if_revision: Option<i64>,
}

impl Put {
    /// An unguarded write.
    pub fn new(bytes: Vec<u8>) -> Self {
        Put {
            bytes,
            if_revision: None,
        }
    }
}

/// A record as read for a read-modify-write: its bytes and the store's version of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Versioned {
    pub bytes: Vec<u8>,
    /// etcd: the key's `mod_revision`; sled: 0 (one writer per folder, serialized per key by
    /// the API's locks).
    pub revision: i64,
}

/// Single-key records of one [`Space`]: what a record kind that keeps one record per target
/// (the VPA state) needs from a backend.
#[tonic::async_trait]
pub trait Records: Db {
    /// The record of `key`, with its revision.
    async fn get_record(&self, space: &Space, key: &str) -> Result<Option<Versioned>, StoreError>;
    /// Writes the record of `key`: with `if_revision`, only if its revision is still that one
    /// (0: absent), else [`StoreError::Conflict`] and nothing is written. Not durable until a
    /// later flush.
    async fn put_record(&self, space: &Space, key: &str, put: Put) -> Result<(), StoreError>;
    /// Removes the record of `key`; false if there was none.
    async fn delete_record(&self, space: &Space, key: &str) -> Result<bool, StoreError>;
    /// Up to `limit` keys after `after` (exclusive), in byte order.
    async fn list_records(
        &self,
        space: &Space,
        after: Option<&str>,
        limit: usize,
    ) -> Result<KeyPage, StoreError>;
}

/// A sled database in a data folder.
#[derive(Debug)]
pub(crate) struct SledDb {
    /// The open database; `None` only between a failed reopen and the next attempt.
    open: RwLock<Option<Open>>,
    cache_bytes: u64,
    trees: &'static [&'static str],
    path: PathBuf,
    /// A write or flush failed and no later flush of new data succeeded (health:
    /// NOT_SERVING meanwhile).
    failed: AtomicBool,
    /// Probe writes made while failed ([`Db::probe`]).
    probes: AtomicU64,
    /// Held for the store's life; declared last, so dropped after the database.
    _lock: FolderLock,
}

/// The open sled database and its trees, replaced as a whole when the store reopens after
/// a storage failure.
#[derive(Debug)]
pub(crate) struct Open {
    db: sled::Db,
    meta: sled::Tree,
    trees: Vec<(&'static str, sled::Tree)>,
    /// Which open this is (unique in the process): a reopen after a storage failure drops
    /// what was not durable, so what a caller read from an earlier open may be gone.
    generation: u64,
}

/// The source of [`Open::generation`].
static GENERATIONS: AtomicU64 = AtomicU64::new(0);

impl Open {
    /// The tree `name` (opened at start-up when listed in [`SledDb::open`]'s `trees`).
    pub(crate) fn tree(&self, name: &str) -> Result<sled::Tree, StoreError> {
        match self.trees.iter().find(|(n, _)| *n == name) {
            Some((_, t)) => Ok(t.clone()),
            None => Ok(self.db.open_tree(name)?),
        }
    }

    /// Which open this is: equal generations, same database in memory (no reopen between).
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }
}

/// Read access to the open database; a reopen waits until every guard is gone.
struct OpenGuard<'a>(RwLockReadGuard<'a, Option<Open>>);

impl std::ops::Deref for OpenGuard<'_> {
    type Target = Open;
    fn deref(&self) -> &Open {
        match self.0.as_ref() {
            Some(t) => t,
            // `SledDb::opened` hands out guards only over `Some`.
            None => unreachable!("an OpenGuard over a closed database"),
        }
    }
}

impl SledDb {
    /// Opens (or creates) the database in `path`, with the trees `trees` opened at once. Any
    /// failure is [`StoreError::Open`] (or [`StoreError::InUse`]), and the folder is never
    /// replaced, moved or copied.
    ///
    /// Order: the folder lock first (nothing in the folder is read before it is held), then a
    /// check of sled's files ([`preflight`]) that refuses a folder sled would "recover" by
    /// starting over, then sled. Constant work: no copy of the database and no scan of the
    /// records (a damaged record is reported when its target is read).
    pub(crate) fn open(
        path: &Path,
        cache_bytes: u64,
        trees: &'static [&'static str],
    ) -> Result<Self, StoreError> {
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
        let open = open_db(path, cache_bytes, trees, existing)?;
        Ok(SledDb {
            open: RwLock::new(Some(open)),
            cache_bytes,
            trees,
            path: path.to_owned(),
            failed: AtomicBool::new(false),
            probes: AtomicU64::new(0),
            _lock: lock,
        })
    }

    /// The open database, or [`StoreError::Unavailable`] while a reopen has not succeeded.
    fn opened(&self) -> Result<OpenGuard<'_>, StoreError> {
        let guard = self.open.read().unwrap_or_else(PoisonError::into_inner);
        if guard.is_none() {
            return Err(StoreError::Unavailable(
                "the database is closed after a storage failure and could not be reopened yet"
                    .to_owned(),
            ));
        }
        Ok(OpenGuard(guard))
    }

    /// Runs `f` on the open database; a storage failure marks the store failed and reopens
    /// it, so that what the failed call wrote in memory is dropped (sled 0.34 keeps failing
    /// every later call after an I/O error, and may hold the failed write in memory).
    pub(crate) fn guarded<T>(
        &self,
        f: impl FnOnce(&Open) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let result = {
            let open = self.opened()?;
            f(&open)
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
    /// ([`Db::flush`], [`Db::probe`]).
    fn reopen(&self) {
        let mut guard = self.open.write().unwrap_or_else(PoisonError::into_inner);
        // First close: sled locks its `db` file, and the new handle must take that lock.
        *guard = None;
        remove_incomplete_snapshots(&self.path);
        match open_db(&self.path, self.cache_bytes, self.trees, true) {
            Ok(open) => {
                *guard = Some(open);
                tracing::warn!(path = %self.path.display(), "database reopened after a storage failure");
            }
            Err(e) => {
                tracing::error!(error = %e, path = %self.path.display(), "cannot reopen the database");
            }
        }
    }

    fn reopen_if_closed(&self) {
        let closed = self
            .open
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none();
        if closed {
            self.reopen();
        }
    }

    /// The database folder.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// What [`Db`] and [`Records`] ask of a sled folder, as plain blocking calls: sled's reads
/// and writes are in-memory (the fsync is [`SledDb::flush`]'s), so the async store methods
/// over them call them directly.
impl SledDb {
    /// Clears the failed state only when the flush wrote something (an empty flush proves
    /// nothing about the disk).
    pub(crate) fn flush(&self) -> Result<(), StoreError> {
        self.reopen_if_closed();
        let flushed = self.guarded(|o| Ok(o.db.flush()?))?;
        if flushed > 0 {
            self.failed.store(false, Ordering::Release);
        }
        Ok(())
    }

    pub(crate) fn healthy(&self) -> bool {
        !self.failed.load(Ordering::Acquire)
    }

    /// A small durable write (a counter under `meta/probe`), so that a failed store finds
    /// out whether writes succeed again even while health keeps traffic away.
    pub(crate) fn probe(&self) -> Result<(), StoreError> {
        self.reopen_if_closed();
        // Larger than a page, so that it cannot fit in the slack of pages the log already
        // has (a full disk fails it), and distinct each time.
        let n = self.probes.fetch_add(1, Ordering::Relaxed);
        let mut value = vec![0u8; PROBE_BYTES];
        value[..8].copy_from_slice(&n.to_be_bytes());
        self.guarded(|o| {
            o.meta.insert(PROBE_KEY, value)?;
            Ok(())
        })?;
        self.flush()?;
        // Healthy again: the probe value has served its purpose.
        self.guarded(|o| {
            o.meta.remove(PROBE_KEY)?;
            Ok(())
        })
    }

    /// One sled tree per [`Space`], keyed by the target key. sled has one writer per folder
    /// (the folder lock) and the API serializes writers of one key, so there is nothing to
    /// compare: every revision is 0.
    pub(crate) fn get_record(
        &self,
        space: &Space,
        key: &str,
    ) -> Result<Option<Versioned>, StoreError> {
        self.guarded(|o| {
            Ok(o.tree(space.tree)?.get(key.as_bytes())?.map(|v| Versioned {
                bytes: v.to_vec(),
                revision: 0,
            }))
        })
    }

    pub(crate) fn put_record(&self, space: &Space, key: &str, put: Put) -> Result<(), StoreError> {
        self.guarded(|o| {
            o.tree(space.tree)?.insert(key.as_bytes(), put.bytes)?;
            Ok(())
        })
    }

    pub(crate) fn delete_record(&self, space: &Space, key: &str) -> Result<bool, StoreError> {
        self.guarded(|o| Ok(o.tree(space.tree)?.remove(key.as_bytes())?.is_some()))
    }

    pub(crate) fn list_records(
        &self,
        space: &Space,
        after: Option<&str>,
        limit: usize,
    ) -> Result<KeyPage, StoreError> {
        self.guarded(|o| list_tree(&o.tree(space.tree)?, space.kind, after, limit))
    }
}

/// Up to `limit` keys of `tree` after `after` (exclusive), in byte order; a key that is not
/// UTF-8 is reported as a corrupt `kind` record.
pub(crate) fn list_tree(
    tree: &sled::Tree,
    kind: &'static str,
    after: Option<&str>,
    limit: usize,
) -> Result<KeyPage, StoreError> {
    let lower = match after {
        Some(a) => Bound::Excluded(a.as_bytes().to_vec()),
        None => Bound::Unbounded,
    };
    let mut keys = Vec::new();
    let mut more = false;
    for item in tree.range::<Vec<u8>, _>((lower, Bound::Unbounded)) {
        let (k, _) = item?;
        if keys.len() == limit {
            more = true;
            break;
        }
        keys.push(
            String::from_utf8(k.to_vec()).map_err(|_| StoreError::Corrupt {
                kind,
                key: String::from_utf8_lossy(&k).into_owned(),
                message: "key is not UTF-8".to_owned(),
            })?,
        );
    }
    Ok(KeyPage { keys, more })
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

/// How long [`open_db`] waits for sled's own file lock to be released by this process's
/// previous handle.
const SLED_LOCK_WAIT: Duration = Duration::from_secs(2);

/// Opens sled in `path` and checks our format marker (`existing`: the folder held a
/// database, so a missing marker means sled could not read it).
fn open_db(
    path: &Path,
    cache_bytes: u64,
    names: &'static [&'static str],
    existing: bool,
) -> Result<Open, StoreError> {
    let open_err = |message: String| StoreError::Open {
        path: path.to_owned(),
        message,
    };
    // sled may panic on some corruptions instead of returning an error; turn that into
    // the same clear refusal.
    let config = sled::Config::new()
        .path(path)
        .flush_every_ms(None)
        .cache_capacity(cache_bytes);
    // Our folder lock is held, so no other process has sled's lock on `db`: if sled still
    // cannot take it, the holder is a handle this process just dropped (a reopen after a
    // failure, or a store closed and opened again) whose background threads have not let go
    // yet. sled 0.34 releases it when they finish, within milliseconds; wait that long.
    let deadline = Instant::now() + SLED_LOCK_WAIT;
    let db = loop {
        match catch_unwind(AssertUnwindSafe(|| config.open())) {
            Ok(Ok(db)) => break db,
            // sled reports it as `ErrorKind::Other` with this text (`Config::open_file`).
            Ok(Err(sled::Error::Io(e)))
                if e.to_string().starts_with("could not acquire lock on")
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(Err(e)) => return Err(open_err(e.to_string())),
            Err(_) => {
                return Err(open_err(
                    "the database is corrupt (sled panicked while reading it)".to_owned(),
                ));
            }
        }
    };
    let tree = |name: &str| db.open_tree(name).map_err(|e| open_err(e.to_string()));
    let meta = tree(META_TREE)?;
    let trees = names
        .iter()
        .map(|&n| Ok((n, tree(n)?)))
        .collect::<Result<Vec<_>, StoreError>>()?;
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
    Ok(Open {
        db,
        meta,
        trees,
        generation: GENERATIONS.fetch_add(1, Ordering::Relaxed),
    })
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
