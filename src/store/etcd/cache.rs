//! The owner's memory of its targets: each target's state as this replica last committed it,
//! with the state key's `mod_revision` that commit produced and the keys of its decision log,
//! so that a decision on an owned target reads nothing from etcd. Bounded: past
//! `state_cache_targets` entries the oldest inserted goes (its next decision reads etcd).
//!
//! Never trusted for correctness: a commit built on an entry is still guarded by that
//! revision, so an entry made stale by another replica (ownership moved and back, a
//! disagreement between views) fails its commit with a conflict, which drops it, and the API
//! reads etcd and decides again.

use std::collections::{HashMap, VecDeque};

use super::EtcdStore;
use crate::store::hpa::StoredState;

/// One owned target.
struct Cached {
    state: StoredState,
    revision: i64,
    /// The keys of the closed runs in etcd, in the sled layout (without `<prefix>hpa/d/`),
    /// in key order; `None`: not known (read on the next commit that starts a run).
    log: Option<Vec<Vec<u8>>>,
}

/// Owned targets' states, at most `capacity`, the oldest inserted evicted first.
pub(super) struct StateCache {
    entries: HashMap<String, Cached>,
    order: VecDeque<String>,
    capacity: usize,
}

impl StateCache {
    pub(super) fn new(capacity: usize) -> Self {
        StateCache {
            entries: HashMap::new(),
            order: VecDeque::new(),
            capacity,
        }
    }

    fn insert(&mut self, key: &str, cached: Cached) {
        if self.capacity == 0 {
            return;
        }
        if self.entries.insert(key.to_owned(), cached).is_none() {
            self.order.push_back(key.to_owned());
        }
        while self.entries.len() > self.capacity {
            match self.order.pop_front() {
                Some(old) => {
                    self.entries.remove(&old);
                }
                None => break,
            }
        }
        // Keys forgotten since they were queued are skipped when they come up; keep the
        // queue from growing past twice the entries.
        if self.order.len() > 2 * self.capacity.max(self.entries.len()) {
            let entries = &self.entries;
            self.order.retain(|k| entries.contains_key(k));
        }
    }
}

impl EtcdStore {
    fn owns(&self, key: &str) -> bool {
        self.ownership.get().is_none_or(|o| o.owns(key))
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, StateCache> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The cached state of `key` and its revision, when this replica owns it; a target it
    /// no longer owns is forgotten.
    pub(super) fn cached_state(&self, key: &str) -> Option<(StoredState, i64)> {
        if !self.owns(key) {
            self.cache_forget(key);
            return None;
        }
        let cache = self.cache();
        let c = cache.entries.get(key)?;
        Some((c.state.clone(), c.revision))
    }

    /// The cached log keys of `key`, if the cache holds the state at `revision`.
    pub(super) fn cached_log(&self, key: &str, revision: i64) -> Option<Vec<Vec<u8>>> {
        let cache = self.cache();
        let c = cache.entries.get(key)?;
        (c.revision == revision).then(|| c.log.clone()).flatten()
    }

    /// After a commit of `state` acknowledged at `revision`: remembered if owned.
    pub(super) fn cache_committed(
        &self,
        key: &str,
        state: StoredState,
        revision: i64,
        log: Option<Vec<Vec<u8>>>,
    ) {
        if self.owns(key) {
            self.cache().insert(
                key,
                Cached {
                    state,
                    revision,
                    log,
                },
            );
        } else {
            self.cache_forget(key);
        }
    }

    pub(super) fn cache_forget(&self, key: &str) {
        self.cache().entries.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::hpa::history::History;

    fn state(next_seq: u64) -> StoredState {
        StoredState {
            history: History::default(),
            next_seq,
            log_len: Some(0),
            pending: None,
            logged_body: None,
        }
    }

    /// Past its capacity the cache drops the oldest inserted entries, and its queue stays
    /// bounded however many keys come and go.
    #[test]
    fn bounded_oldest_first() {
        let mut c = StateCache::new(3);
        for i in 0..10u64 {
            c.insert(
                &format!("t{i}"),
                Cached {
                    state: state(i),
                    revision: 1,
                    log: None,
                },
            );
            if i % 2 == 0 {
                c.entries.remove(&format!("t{i}"));
            }
            assert!(c.entries.len() <= 3 && c.order.len() <= 6);
        }
        let mut kept: Vec<_> = c.entries.keys().cloned().collect();
        kept.sort();
        assert_eq!(kept, vec!["t5", "t7", "t9"]);
    }
}
