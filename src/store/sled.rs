//! The sled 0.34 store. Trees (one per record kind):
//!
//! * `meta`: `format` → the layout version (one byte), checked at open;
//! * `hpa_state`: `target_key` → [`TargetState`] (versioned record);
//! * `hpa_decisions`: `target_key ++ 0x00 ++ be(time) ++ be(seq)` → [`DecisionEntry`]
//!   (versioned record), at most `decision_log_len` per target, oldest dropped first.
//!
//! State and decision log change in one sled transaction across both trees, so after a crash
//! a target's history and its last logged decision agree.

use std::{
    ops::Bound,
    panic::{AssertUnwindSafe, catch_unwind},
    path::{Path, PathBuf},
};

use sled::{
    Transactional,
    transaction::{ConflictableTransactionError, TransactionError},
};

use super::{DecisionEntry, HistoryStore, KeyPage, StoreError, TargetState, keys, record};
use crate::engine::history::History;

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
    options: SledOptions,
    path: PathBuf,
}

impl SledStore {
    /// Opens (or creates) the database in `path` and checks that every state record decodes.
    /// Any failure is [`StoreError::Open`]: the folder is never replaced or repaired.
    pub fn open(path: &Path, options: SledOptions) -> Result<Self, StoreError> {
        let open_err = |message: String| StoreError::Open {
            path: path.to_owned(),
            message,
        };
        if path.exists() && !path.is_dir() {
            return Err(open_err("not a directory".to_owned()));
        }
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
        match meta.get(FORMAT_KEY).map_err(|e| open_err(e.to_string()))? {
            None => {
                meta.insert(FORMAT_KEY, &[FORMAT])
                    .map_err(|e| open_err(e.to_string()))?;
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
        Ok(())
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
        let decision_bytes = record::encode("decision", key, decision)?;
        // Oldest first; after adding one, keep `decision_log_len`.
        let existing = self.decision_keys(key)?;
        let excess = (existing.len() + 1).saturating_sub(self.options.decision_log_len);
        let to_remove = &existing[..excess.min(existing.len())];
        (&self.state, &self.decisions)
            .transaction(|(state, decisions)| {
                let previous: Option<TargetState> = state
                    .get(keys::state_key(key))?
                    .map(|v| record::decode("state", key, &v))
                    .transpose()
                    .map_err(ConflictableTransactionError::Abort)?;
                let seq = previous.map_or(0, |p| p.next_seq);
                let next = TargetState {
                    history: history.clone(),
                    next_seq: seq.saturating_add(1),
                };
                let state_bytes = record::encode("state", key, &next)
                    .map_err(ConflictableTransactionError::Abort)?;
                state.insert(keys::state_key(key), state_bytes)?;
                decisions.insert(
                    keys::decision_key(key, decision.time, seq),
                    decision_bytes.as_slice(),
                )?;
                for old in to_remove {
                    decisions.remove(old.as_ref())?;
                }
                Ok(())
            })
            .map_err(tx_error)
    }

    fn decisions(&self, key: &str) -> Result<Vec<DecisionEntry>, StoreError> {
        self.decisions
            .scan_prefix(keys::decision_prefix(key))
            .values()
            .map(|v| record::decode("decision", key, &v?))
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
