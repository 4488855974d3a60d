//! The sled 0.34 store. Trees (one per record kind):
//!
//! * `meta`: `format` → the layout version (one byte), checked at open;
//! * `hpa_state`: `target_key` → [`TargetState`] (versioned record);
//! * `hpa_decisions`: `target_key ++ 0x00 ++ be(time) ++ be(seq)` → [`DecisionEntry`]
//!   (versioned record), at most `decision_log_len` per target, oldest dropped first;
//! * `vpa_state`: `target_key` → [`VerticalState`](super::vertical::VerticalState) (versioned
//!   record; see [`vertical`](super::vertical)).
//!
//! A commit's state and decision become durable together through ONE single-key write: the
//! state record carries the newest decision (`pending`), and the next commit first copies that
//! one into `hpa_decisions` (an idempotent insert under its final key), then replaces the state.
//! So after a crash a target's history and its last logged decision agree, without a sled
//! transaction or batch: in sled 0.34 both go through `PageCache::pin_log`, which writes and
//! syncs the log buffer twice per call (two `pwrite` + two `sync_file_range`, and each wakes
//! all of sled's I/O threads), whatever our durability mode; that was more than half the
//! server's CPU per Recommend.

use std::{
    ops::Bound,
    panic::{AssertUnwindSafe, catch_unwind},
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sled::{Transactional, transaction::TransactionError};

use super::{DecisionEntry, HistoryStore, KeyPage, StoreError, TargetState, keys, record};
use crate::engine::{history::History, time::Time};

const META_TREE: &str = "meta";
const STATE_TREE: &str = "hpa_state";
const DECISION_TREE: &str = "hpa_decisions";
const FORMAT_KEY: &[u8] = b"format";
/// The tree layout written by this build.
const FORMAT: u8 = 1;

/// Options of [`SledStore::open`].
#[derive(Clone, Debug)]
pub struct SledOptions {
    /// Decisions kept per target.
    pub decision_log_len: usize,
}

impl Default for SledOptions {
    fn default() -> Self {
        SledOptions {
            decision_log_len: crate::config::DEFAULT_DECISION_LOG_LEN,
        }
    }
}

/// History in a sled database folder.
#[derive(Debug)]
pub struct SledStore {
    db: sled::Db,
    state: sled::Tree,
    decisions: sled::Tree,
    vertical: sled::Tree,
    options: SledOptions,
    path: PathBuf,
}

impl SledStore {
    /// Opens (or creates) the database in `path` and checks that every state record decodes.
    /// Any failure is [`StoreError::Open`], and the folder is left as it was: never replaced
    /// or repaired.
    ///
    /// sled 0.34 "recovers" a log it cannot read by starting over, which would silently
    /// replace a damaged history. So an existing database is copied aside before sled opens
    /// it (`db` → `db.autoscaled-open-backup`); if afterwards our format marker is missing (sled
    /// found nothing it could read) or any check fails, the copy is put back and start-up
    /// stops. Limitation: damage that sled's recovery can cut off at the log's tail (a torn
    /// last write) is repaired by sled as designed, losing only the unflushed tail.
    pub fn open(path: &Path, options: SledOptions) -> Result<Self, StoreError> {
        let open_err = |message: String| StoreError::Open {
            path: path.to_owned(),
            message,
        };
        if path.exists() && !path.is_dir() {
            return Err(open_err("not a directory".to_owned()));
        }
        let existing = preflight(path).map_err(open_err)?;
        let backup = if existing {
            Some(Backup::take(path).map_err(open_err)?)
        } else {
            None
        };
        let result = Self::open_checked(path, options, existing);
        match backup {
            None => result,
            Some(backup) => match result {
                Ok(store) => {
                    backup.discard();
                    Ok(store)
                }
                Err(e) => match backup.restore() {
                    Ok(()) => Err(e),
                    Err(restore) => Err(open_err(format!(
                        "{e}; restoring the copy made before opening also failed ({restore}): the original is in {}",
                        backup.path.display()
                    ))),
                },
            },
        }
    }

    fn open_checked(path: &Path, options: SledOptions, existing: bool) -> Result<Self, StoreError> {
        let open_err = |message: String| StoreError::Open {
            path: path.to_owned(),
            message,
        };
        // sled may panic on some corruptions instead of returning an error; turn that into
        // the same clear refusal.
        let config = sled::Config::new().path(path).flush_every_ms(None);
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
        let store = SledStore {
            db,
            state,
            decisions,
            vertical,
            options,
            path: path.to_owned(),
        };
        store.check().map_err(|e| open_err(e.to_string()))?;
        Ok(store)
    }

    /// Decodes every state record, so that an unreadable one stops start-up rather than the
    /// first request for that target.
    fn check(&self) -> Result<(), StoreError> {
        for item in self.state.iter() {
            let (k, v) = item?;
            let key = key_string(&k)?;
            record::decode::<TargetState>("state", &key, &v)?;
        }
        for item in self.vertical.iter() {
            let (k, v) = item?;
            super::vertical::decode_vertical(&key_string(&k)?, &v)?;
        }
        Ok(())
    }

    /// The `vpa_state` tree (used by [`super::vertical`]).
    pub(super) fn vertical_tree(&self) -> &sled::Tree {
        &self.vertical
    }

    /// The database folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The keys of the target's logged decisions, oldest first.
    fn decision_keys(&self, key: &str) -> Result<Vec<sled::IVec>, StoreError> {
        self.decisions
            .scan_prefix(keys::decision_prefix(key))
            .keys()
            .collect::<Result<_, _>>()
            .map_err(StoreError::from)
    }
}

/// Checks an existing folder before sled sees it. sled 0.34 treats a truncated `conf` as
/// "no database" and starts afresh over the old files, which would silently replace a
/// damaged history; we refuse instead. Accepted: a missing or empty folder (a new database),
/// or one whose `conf` is intact (checksum as sled writes it) and whose `db` file exists.
///
/// Returns whether the folder holds a database.
fn preflight(path: &Path) -> Result<bool, String> {
    let mut entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(format!("cannot read the folder: {e}")),
    };
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
    match std::fs::metadata(path.join("db")) {
        Ok(m) if m.is_file() && m.len() > 0 => Ok(true),
        Ok(_) => Err("its sled `db` file is empty or not a file".to_owned()),
        Err(e) => Err(format!("its sled `db` file cannot be read ({e})")),
    }
}

/// The copy of `db` made before sled opens an existing database.
struct Backup {
    db: PathBuf,
    path: PathBuf,
    /// sled creates `blobs/` when missing; remove it again if we restore.
    blobs: Option<PathBuf>,
}

impl Backup {
    fn take(folder: &Path) -> Result<Self, String> {
        let blobs = folder.join("blobs");
        let backup = Backup {
            db: folder.join("db"),
            path: folder.join("db.autoscaled-open-backup"),
            blobs: (!blobs.exists()).then_some(blobs),
        };
        std::fs::copy(&backup.db, &backup.path)
            .map_err(|e| format!("cannot copy `db` aside before opening it: {e}"))?;
        Ok(backup)
    }

    /// Puts the original back (an atomic rename over what sled left).
    fn restore(&self) -> std::io::Result<()> {
        std::fs::rename(&self.path, &self.db)?;
        if let Some(blobs) = &self.blobs {
            // Only if empty: anything in it is not ours to remove.
            let _ = std::fs::remove_dir(blobs);
        }
        Ok(())
    }

    fn discard(self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            tracing::warn!(error = %e, path = %self.path.display(), "cannot remove the pre-open copy");
        }
    }
}

/// [`TargetState`]'s encoding, borrowing the history (no copy of it per write), plus the
/// length of the target's decision log. `TargetState` ignores `log_len` when decoding (serde
/// skips unknown fields), so older builds read these records; a record they write back has
/// no `log_len`, and the next `commit` counts the log once.
///
/// `pending` is the decision of this commit: it belongs to the log although it is not yet in
/// `hpa_decisions` (see the module doc); `log_len` counts the entries in `hpa_decisions` only.
/// An older build ignores `pending` and so shows one decision fewer.
#[derive(Serialize)]
struct TargetStateRef<'a> {
    history: &'a History,
    next_seq: u64,
    log_len: u64,
    pending: PendingRef<'a>,
}

/// The newest decision, carried in the state record.
#[derive(Serialize)]
struct PendingRef<'a> {
    time: Time,
    seq: u64,
    entry: &'a DecisionEntry,
}

/// [`PendingRef`] as read back; the entry stays encoded, to be copied into the log as is.
#[derive(Deserialize)]
struct PendingRaw {
    time: Time,
    seq: u64,
    entry: Box<RawValue>,
}

impl PendingRaw {
    fn log_key(&self, key: &str) -> Vec<u8> {
        keys::decision_key(key, self.time, self.seq)
    }

    /// The log value, exactly as [`record::encode`] writes the entry.
    fn log_value(&self) -> Vec<u8> {
        let json = self.entry.get().as_bytes();
        let mut out = Vec::with_capacity(json.len() + 1);
        out.push(record::VERSION);
        out.extend_from_slice(json);
        out
    }
}

/// The fields of a stored state that `commit` needs.
#[derive(Deserialize)]
struct StoredCounters {
    next_seq: u64,
    /// Entries in `hpa_decisions` for the target; absent in records of older builds.
    #[serde(default)]
    log_len: Option<u64>,
    /// The newest decision, not yet copied into `hpa_decisions`; absent in records of older
    /// builds (their commits wrote the log entry in the same transaction).
    #[serde(default)]
    pending: Option<PendingRaw>,
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

impl HistoryStore for SledStore {
    fn load(&self, key: &str) -> Result<Option<TargetState>, StoreError> {
        self.state
            .get(keys::state_key(key))?
            .map(|v| record::decode("state", key, &v))
            .transpose()
    }

    fn commit(
        &self,
        key: &str,
        history: &History,
        decision: &DecisionEntry,
    ) -> Result<(), StoreError> {
        let state_key = keys::state_key(key);
        // Read before writing, like the log scan below: writers of one target are serialized
        // by the caller. Only the counters and the pending decision of the previous state are
        // needed, not its history.
        let previous = match self.state.get(state_key)? {
            Some(v) => record::decode::<StoredCounters>("state", key, &v)?,
            None => StoredCounters {
                next_seq: 0,
                log_len: Some(0),
                pending: None,
            },
        };
        let seq = previous.next_seq;
        // 1. The previous commit's decision goes into the log under its final key. Idempotent:
        //    after a crash between this insert and step 2 it is already there, and the state
        //    still names it as pending; `log_len` never counts the pending one, so it is
        //    counted here, once.
        let mut logged = match previous.log_len {
            Some(len) => len,
            // A state of an older build: count its log once.
            None => self.decision_keys(key)?.len() as u64,
        };
        if let Some(pending) = &previous.pending {
            self.decisions
                .insert(pending.log_key(key), pending.log_value())?;
            logged = logged.saturating_add(1);
        }
        // After adding this decision (pending in the state), keep `decision_log_len` in all:
        // the oldest logged entries beyond that go (never the new one, as before).
        let bound = self.options.decision_log_len as u64;
        let excess = logged.saturating_add(1).saturating_sub(bound);
        let to_remove: Vec<sled::IVec> = if excess == 0 {
            Vec::new()
        } else {
            self.decisions
                .scan_prefix(keys::decision_prefix(key))
                .keys()
                .take(usize::try_from(excess).unwrap_or(usize::MAX))
                .collect::<Result<_, _>>()?
        };
        let log_len = logged.saturating_sub(to_remove.len() as u64);
        // 2. The commit point: one single-key write of the new history with this decision.
        let state_bytes = record::encode(
            "state",
            key,
            &TargetStateRef {
                history,
                next_seq: seq.saturating_add(1),
                log_len,
                pending: PendingRef {
                    time: decision.time,
                    seq,
                    entry: decision,
                },
            },
        )?;
        self.state.insert(state_key, state_bytes)?;
        // 3. Trim. A crash before this leaves at most these few extra old entries on disk;
        //    `decisions` shows only the newest `decision_log_len`.
        for old in &to_remove {
            self.decisions.remove(old)?;
        }
        Ok(())
    }

    fn decisions(&self, key: &str) -> Result<Vec<DecisionEntry>, StoreError> {
        let pending = match self.state.get(keys::state_key(key))? {
            Some(v) => record::decode::<StoredCounters>("state", key, &v)?.pending,
            None => None,
        };
        let mut logged: Vec<(sled::IVec, sled::IVec)> = self
            .decisions
            .scan_prefix(keys::decision_prefix(key))
            .collect::<Result<_, _>>()?;
        if let Some(pending) = pending {
            let pending_key = pending.log_key(key);
            // Already there after a crash between the two writes of a commit.
            if let Err(at) = logged.binary_search_by(|(k, _)| k.as_ref().cmp(&pending_key)) {
                logged.insert(at, (pending_key.into(), pending.log_value().into()));
            }
        }
        // Entries a crash kept from being trimmed are not shown.
        let skip = logged
            .len()
            .saturating_sub(self.options.decision_log_len.max(1));
        logged
            .iter()
            .skip(skip)
            .map(|(_, v)| record::decode("decision", key, v))
            .collect()
    }

    fn list_keys(&self, after: Option<&str>, limit: usize) -> Result<KeyPage, StoreError> {
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

    fn delete(&self, key: &str) -> Result<bool, StoreError> {
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

    fn flush(&self) -> Result<(), StoreError> {
        self.db.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{
        history::Recommendation,
        hpa::{Decision, DecisionPath},
        time::Time,
    };

    fn entry(secs: i64, desired: i32) -> DecisionEntry {
        DecisionEntry {
            time: Time::from_unix_secs(secs),
            decision: Decision {
                current_replicas: 1,
                desired_replicas: desired,
                conditions: vec![],
                metrics: vec![],
                path: DecisionPath::Legacy,
                prenormalized_replicas: Some(desired),
                stabilized_replicas: None,
                scale_up_limit: None,
                scale_down_limit: None,
                error: None,
                rescale_reason: None,
                extensions: None,
            },
            metrics: vec![],
        }
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

    fn open(dir: &Path, len: usize) -> SledStore {
        SledStore::open(
            dir,
            SledOptions {
                decision_log_len: len,
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
        let log: Vec<i32> = s
            .decisions("a")
            .unwrap()
            .iter()
            .map(|d| d.decision.desired_replicas)
            .collect();
        assert_eq!(log, vec![3, 4]);
        assert_eq!(s.load("b").unwrap(), None);
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
        let log: Vec<i32> = s
            .decisions("a")
            .unwrap()
            .iter()
            .map(|d| d.decision.desired_replicas)
            .collect();
        assert_eq!(log, vec![5, 6, 70]);
    }

    #[test]
    fn a_shorter_log_bound_after_reopen_trims_the_surplus_on_the_next_write() {
        // The scan that trims the log is skipped while `next_seq < decision_log_len`; a bound
        // lowered between runs must still trim every surplus entry at the next write.
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
        let log: Vec<i32> = s
            .decisions("a")
            .unwrap()
            .iter()
            .map(|d| d.decision.desired_replicas)
            .collect();
        assert_eq!(log, vec![4, 5, 6]);
        assert_eq!(s.load("a").unwrap().unwrap().next_seq, 7);
    }

    #[test]
    fn a_state_without_the_log_length_is_counted_once_then_trimmed_as_usual() {
        // Records of older builds carry no `log_len`: the next write counts the log by a scan
        // and stores the count; later writes rely on it.
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), 3);
        // As older builds left it: the last three entries in `hpa_decisions`.
        for i in 2..5i32 {
            s.decisions
                .insert(
                    keys::decision_key("a", Time::from_unix_secs(i.into()), i as u64),
                    record::encode("decision", "a", &entry(i.into(), i)).unwrap(),
                )
                .unwrap();
        }
        let old = record::encode(
            "state",
            "a",
            &TargetState {
                history: history(4, 4),
                next_seq: 5,
            },
        )
        .unwrap();
        s.state.insert("a", old).unwrap();
        let log = |s: &SledStore| -> Vec<i32> {
            s.decisions("a")
                .unwrap()
                .iter()
                .map(|d| d.decision.desired_replicas)
                .collect()
        };
        assert_eq!(log(&s), vec![2, 3, 4]);
        s.commit("a", &history(5, 5), &entry(5, 5)).unwrap();
        assert_eq!(log(&s), vec![3, 4, 5]);
        let raw = s.state.get("a").unwrap().unwrap();
        let counters: StoredCounters = record::decode("state", "a", &raw).unwrap();
        // Two in `hpa_decisions`, the newest pending in the state.
        assert_eq!((counters.next_seq, counters.log_len), (6, Some(2)));
        assert!(counters.pending.is_some());
        s.commit("a", &history(6, 6), &entry(6, 6)).unwrap();
        assert_eq!(log(&s), vec![4, 5, 6]);
    }

    fn desired(s: &SledStore, key: &str) -> Vec<i32> {
        s.decisions(key)
            .unwrap()
            .iter()
            .map(|d| d.decision.desired_replicas)
            .collect()
    }

    #[test]
    fn a_crash_between_the_log_copy_and_the_state_write_counts_the_entry_once() {
        // Step 1 of a commit (the previous decision copied into the log) done, step 2 (the
        // new state) lost: the log shows the entry once, and later commits count it once.
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), 3);
        s.commit("a", &history(1, 1), &entry(1, 1)).unwrap();
        s.commit("a", &history(2, 2), &entry(2, 2)).unwrap();
        let raw = s.state.get("a").unwrap().unwrap();
        let pending = record::decode::<StoredCounters>("state", "a", &raw)
            .unwrap()
            .pending
            .unwrap();
        s.decisions
            .insert(pending.log_key("a"), pending.log_value())
            .unwrap();
        assert_eq!(desired(&s, "a"), vec![1, 2]);
        for i in 3..6 {
            s.commit("a", &history(i, i.into()), &entry(i.into(), i))
                .unwrap();
        }
        assert_eq!(desired(&s, "a"), vec![3, 4, 5]);
        assert_eq!(s.decision_keys("a").unwrap().len(), 2);
    }

    #[test]
    fn entries_a_crash_kept_from_being_trimmed_are_not_shown() {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), 2);
        s.commit("a", &history(1, 1), &entry(1, 1)).unwrap();
        // An old entry that step 3 (trim) did not remove.
        let stale = keys::decision_key("a", Time::from_unix_secs(0), 99);
        s.decisions
            .insert(
                stale,
                record::encode("decision", "a", &entry(0, 0)).unwrap(),
            )
            .unwrap();
        s.commit("a", &history(2, 2), &entry(2, 2)).unwrap();
        s.commit("a", &history(3, 3), &entry(3, 3)).unwrap();
        assert_eq!(desired(&s, "a"), vec![2, 3]);
    }

    #[test]
    fn a_log_written_by_transactions_of_older_builds_reads_and_continues() {
        // Older builds wrote the newest decision into `hpa_decisions` in the same
        // transaction as a state without `pending`.
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), 3);
        for i in 0..2i32 {
            s.decisions
                .insert(
                    keys::decision_key("a", Time::from_unix_secs(i.into()), i as u64),
                    record::encode("decision", "a", &entry(i.into(), i)).unwrap(),
                )
                .unwrap();
        }
        #[derive(Serialize)]
        struct OldState<'a> {
            history: &'a History,
            next_seq: u64,
            log_len: u64,
        }
        let old = OldState {
            history: &history(1, 1),
            next_seq: 2,
            log_len: 2,
        };
        s.state
            .insert("a", record::encode("state", "a", &old).unwrap())
            .unwrap();
        assert_eq!(desired(&s, "a"), vec![0, 1]);
        s.commit("a", &history(2, 2), &entry(2, 2)).unwrap();
        s.commit("a", &history(3, 3), &entry(3, 3)).unwrap();
        assert_eq!(desired(&s, "a"), vec![1, 2, 3]);
        assert_eq!(s.load("a").unwrap().unwrap().next_seq, 4);
    }

    #[test]
    fn the_state_written_by_commit_reads_back_as_a_target_state() {
        // `commit` encodes a borrowed view of the state; it must decode as `TargetState`.
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), 3);
        s.commit("a", &history(2, 5), &entry(5, 2)).unwrap();
        let raw = s.state.get("a").unwrap().unwrap();
        let decoded: TargetState = record::decode("state", "a", &raw).unwrap();
        assert_eq!(
            decoded,
            TargetState {
                history: history(2, 5),
                next_seq: 1
            }
        );
    }

    #[test]
    fn unknown_version_is_refused_at_open_with_a_clear_message() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = open(dir.path(), 3);
            s.commit("a", &history(1, 1), &entry(1, 1)).unwrap();
            let mut bytes = s.state.get("a").unwrap().unwrap().to_vec();
            bytes[0] = 9;
            s.state.insert("a", bytes).unwrap();
            s.flush().unwrap();
        }
        let err = SledStore::open(dir.path(), SledOptions::default()).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("encoding version 9"), "{text}");
        assert!(text.contains("left untouched"), "{text}");
        // Still there, untouched.
        drop(err);
        let db = sled::open(dir.path()).unwrap();
        let v = db.open_tree(STATE_TREE).unwrap().get("a").unwrap().unwrap();
        assert_eq!(v[0], 9);
    }

    #[test]
    fn damaged_or_foreign_folders_are_refused_and_left_untouched() {
        // A real database first, then damage its files one way or another.
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
        let no_db = copy("no_db");
        std::fs::remove_file(no_db.join("db")).unwrap();
        let foreign = dir.path().join("foreign");
        std::fs::create_dir(&foreign).unwrap();
        std::fs::write(foreign.join("notes.txt"), b"mine").unwrap();

        for folder in [&truncated_conf, &flipped_conf, &random_db, &no_db, &foreign] {
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
        // The decision tree's keys never show up as targets.
        assert_eq!(s.list_keys(None, 100).unwrap().keys.len(), 5);
    }

    #[test]
    fn delete_removes_state_and_log_of_that_target_only() {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), 3);
        s.commit("a", &history(1, 1), &entry(1, 1)).unwrap();
        s.commit("ab", &history(2, 1), &entry(1, 2)).unwrap();
        assert!(s.delete("a").unwrap());
        assert!(!s.delete("a").unwrap());
        assert_eq!(s.load("a").unwrap(), None);
        assert!(s.decisions("a").unwrap().is_empty());
        assert_eq!(s.decisions("ab").unwrap().len(), 1);
        assert!(s.load("ab").unwrap().is_some());
    }
}
