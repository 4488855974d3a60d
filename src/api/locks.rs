//! Per-target async locks: Recommends on one target run one after the other (each reads the
//! history the previous one wrote), while different targets proceed in parallel.
//!
//! Entries do not leak: the map holds one `Arc` per key in use, and whoever drops the last
//! other reference (a guard being released or a cancelled waiter) removes the entry, under
//! the map's lock, so the reference count it checks cannot change meanwhile. A
//! `std::sync::Mutex` is right for the map: its critical sections are short and never cross
//! an `.await` (mini-redis `db.rs`).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

type Slots = HashMap<String, Arc<AsyncMutex<()>>>;

/// A set of named async locks.
#[derive(Clone, Debug, Default)]
pub struct KeyLocks {
    slots: Arc<Mutex<Slots>>,
}

/// Holds the lock of one key until dropped.
#[derive(Debug)]
pub struct KeyGuard {
    guard: Option<OwnedMutexGuard<()>>,
    key: String,
    locks: KeyLocks,
}

/// A waiter's reference, released (with cleanup) even if the waiting future is cancelled.
struct Waiter {
    mutex: Option<Arc<AsyncMutex<()>>>,
    key: String,
    locks: KeyLocks,
}

impl KeyLocks {
    /// Waits for the lock of `key` (FIFO among waiters: tokio's mutex is fair).
    pub async fn lock(&self, key: &str) -> KeyGuard {
        let mutex = Arc::clone(self.slots().entry(key.to_owned()).or_default());
        let mut waiter = Waiter {
            mutex: Some(Arc::clone(&mutex)),
            key: key.to_owned(),
            locks: self.clone(),
        };
        let guard = mutex.lock_owned().await;
        // The guard holds its own reference now; drop the waiter's without cleanup (the
        // count cannot reach one while we hold the guard).
        waiter.mutex = None;
        KeyGuard {
            guard: Some(guard),
            key: key.to_owned(),
            locks: self.clone(),
        }
    }

    /// Number of keys with a holder or waiter (for tests and metrics).
    pub fn len(&self) -> usize {
        self.slots().len()
    }

    /// No key is held or awaited.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn slots(&self) -> MutexGuard<'_, Slots> {
        // A panic while holding this lock cannot leave the map inconsistent (single inserts
        // and removes), so a poisoned lock is still usable.
        self.slots
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Drops `reference` and removes the key's entry if only the map still refers to it.
    fn release(&self, key: &str, reference: Arc<AsyncMutex<()>>) {
        let mut slots = self.slots();
        drop(reference);
        if slots.get(key).is_some_and(|m| Arc::strong_count(m) == 1) {
            slots.remove(key);
        }
    }
}

impl Drop for KeyGuard {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            let reference = Arc::clone(OwnedMutexGuard::mutex(&guard));
            drop(guard);
            self.locks.release(&self.key, reference);
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if let Some(reference) = self.mutex.take() {
            self.locks.release(&self.key, reference);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn same_key_is_exclusive_and_entries_are_removed() {
        let locks = KeyLocks::default();
        let g = locks.lock("a").await;
        assert_eq!(locks.len(), 1);
        // A second lock of "a" must wait; "b" must not.
        let locks2 = locks.clone();
        let waiter = tokio::spawn(async move { locks2.lock("a").await });
        let gb = locks.lock("b").await;
        assert_eq!(locks.len(), 2);
        drop(gb);
        assert_eq!(locks.len(), 1);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(g);
        let g2 = waiter.await.unwrap();
        assert_eq!(locks.len(), 1);
        drop(g2);
        assert!(locks.is_empty());
    }

    #[tokio::test]
    async fn a_cancelled_waiter_leaves_no_entry() {
        let locks = KeyLocks::default();
        let g = locks.lock("a").await;
        let locks2 = locks.clone();
        let waiter = tokio::spawn(async move {
            let _g = locks2.lock("a").await;
        });
        tokio::task::yield_now().await;
        waiter.abort();
        let _ = waiter.await;
        drop(g);
        assert!(locks.is_empty());
    }
}
