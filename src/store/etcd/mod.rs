//! The etcd v3 store: several autoscaled replicas share one history, any replica serves any
//! target, and a response is sent only after etcd acknowledged the write (a Raft commit on a
//! quorum of members, so it survives the loss of any minority of them).
//!
//! # Layout (under the configured prefix, default `autoscaled/`)
//!
//! * `hpa/s/<target_key>` → the [`HpaState`] record (the same `record` encoding as sled);
//! * `hpa/d/<target_key> 0x00 be(first time) be(seq)` → one closed decision run (the sled
//!   layout after `hpa/d/`); the commit's plan (`store::hpa::plan`) deletes the oldest by key,
//!   from the owner's cached key list or one keys-only read;
//! * `vpa/<target_key>` → the VPA record (`super::vpa`, through `Records`; its put
//!   compares the key's `mod_revision` with the one read, so two replicas recording usage
//!   for one target cannot both build on the same previous state).
//!
//! # Concurrency between replicas
//!
//! A Recommend reads the state with [`HpaStore::load_for_update`] (a linearizable `Range`,
//! which returns the key's `mod_revision`), decides, and commits with
//! [`HpaStore::commit_after`]: one etcd transaction whose guard is
//! `mod_revision(state key) == seen` (0 when absent: etcd compares a missing key's revisions
//! as 0), and whose success branch puts the state, puts the decision and trims the log. If
//! another replica committed in between the guard fails, nothing is written, and the API
//! re-reads and decides again (`api::hpa`), so two replicas never both append from the
//! same previous state. No global lock; the leases are the replicas' registrations
//! (`ownership`), which decide who decides a target, not whether a commit is applied.
//!
//! # Group commit
//!
//! Commits of different targets that arrive while a transaction is in flight are sent
//! together in the next one (as the sled store shares one flush), within etcd's limits:
//! `--max-txn-ops` (default 128; a steady commit is one put, closing a run adds a put and
//! the trimmed runs' deletes) and `--max-request-bytes`
//! (default 1.5 MiB). When a batch's guard fails, the failure branch reads every state key's
//! `mod_revision`, so only the targets that really conflicted fail; the others are re-sent.
//!
//! # Failures
//!
//! A transaction that fails in transport (leader change, member killed) may or may not have
//! been applied. Each of its targets is then read back: if both the state and the decision
//! are exactly what we wrote, it was applied (acknowledged); if the state is unchanged it is
//! re-sent (at most [`MAX_ATTEMPTS`] times); otherwise the caller gets a conflict and decides
//! again. So an acknowledged decision is always in etcd, and a decision is never logged twice
//! for one attempt.
//!
//! # Runtime
//!
//! The store runs on the server's tokio runtime: its methods await the members, and the
//! batcher is a task spawned by [`EtcdStore::connect`].
//!
//! # Layout of this module
//!
//! * `members`: failover between the members (one attempt, or member after member);
//! * `batcher`: group commit and the read-back after a transport failure;
//! * `commit`: one HPA commit's plan (`store::hpa::plan`) as a guarded transaction;
//! * `records`: the VPA's single-key records;
//! * `tls`: TLS to the members.

mod batcher;
mod cache;
mod commit;
mod members;
pub mod ownership;
mod records;
mod tls;

use std::{
    path::PathBuf,
    sync::{Arc, Mutex, OnceLock, atomic::AtomicUsize},
    time::Duration,
};

use tokio::sync::mpsc;
use tonic::transport::Endpoint;

pub use self::tls::EtcdTls;
use self::{
    batcher::{Pending, batcher},
    cache::StateCache,
    members::Members,
    ownership::Ownership,
    tls::tls_config,
};
use super::{
    Commit, Db, DecisionEntry, HpaState, HpaStore, KeyPage, Loaded, Seen, StoreError,
    db::Space,
    hpa::{StoredState, runs_with_pending},
    keys, vpa,
};

/// The generated client of `proto/etcd/kv.proto`.
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
mod pb {
    tonic::include_proto!("etcdserverpb");
}

use pb::{
    DeleteRangeRequest, KeyValue, RangeRequest, RequestOp, TxnRequest, kv_client::KvClient,
    request_op::Request as Op, response_op::Response as OpResponse,
};

/// Operations per transaction: etcd's default `--max-txn-ops` is 128 (a steady-state commit
/// is one put; closing a run adds a put and the trimmed runs' deletes). The failure branch
/// has one range per target, fewer than the success operations.
pub const MAX_BATCH_OPS: usize = 120;
/// Bytes of keys and values per transaction, below etcd's default `--max-request-bytes`
/// (1.5 MiB) with room for the envelope.
pub const MAX_BATCH_BYTES: usize = 1024 * 1024;
/// Sends of one commit before its error is returned (transport failures, leader changes).
pub const MAX_ATTEMPTS: u32 = 4;
/// Sends of one commit whose own guard held in a batch that failed on another target's guard
/// (a conflict of that target) before it is answered with a conflict (the API re-reads and
/// decides again). Never reached in practice; it keeps a guard that can never hold (a wrong
/// compare) from re-sending one commit forever.
pub const MAX_RESENDS: u32 = 32;

/// Options of [`EtcdStore::connect`].
#[derive(Clone, Debug)]
pub struct EtcdOptions {
    /// Client URLs of the members (`http://host:2379` or `https://…`).
    pub endpoints: Vec<String>,
    /// Prefix of every key written, so that several deployments can share a cluster.
    pub prefix: String,
    /// TLS to the members; no file given: plain connections.
    pub tls: EtcdTls,
    /// Decision runs kept per target.
    pub decision_log_len: usize,
    /// Closed runs older than this (relative to the target's newest decision) are dropped.
    pub decision_retention: Duration,
    /// Pod names kept per group and metric in a logged decision.
    pub max_pod_names: usize,
    /// Bound on one try of an etcd request on one member; then the next member is tried.
    pub request_timeout: Duration,
    /// Targets whose state this replica keeps in memory (those it owns: [`ownership`]), so
    /// that it decides without reading etcd.
    pub state_cache_targets: usize,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            endpoints: vec!["http://127.0.0.1:2379".to_owned()],
            prefix: "autoscaled/".to_owned(),
            tls: EtcdTls::default(),
            decision_log_len: super::DEFAULT_DECISION_LOG_LEN,
            decision_retention: super::sled::DEFAULT_DECISION_RETENTION,
            max_pod_names: super::sled::DEFAULT_MAX_POD_NAMES,
            request_timeout: Duration::from_secs(2),
            state_cache_targets: DEFAULT_STATE_CACHE_TARGETS,
        }
    }
}

/// Default of [`EtcdOptions::state_cache_targets`]: at most a few KiB each (the state and
/// the keys of its log), tens of MiB in all.
pub const DEFAULT_STATE_CACHE_TARGETS: usize = 10_000;

/// History (and VPA state) in etcd.
pub struct EtcdStore {
    members: Arc<Members>,
    commits: mpsc::UnboundedSender<Pending>,
    prefix: Vec<u8>,
    options: EtcdOptions,
    /// Which targets this replica owns; unset (a store without replicas: tests, tools): all.
    ownership: OnceLock<Arc<Ownership>>,
    /// The state of owned targets as this replica last committed it.
    cache: Mutex<StateCache>,
    /// When this replica's registration expires (never, without [`Self::start_ownership`]).
    registration: Arc<ownership::Registration>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.options.endpoints)
            .field("prefix", &self.options.prefix)
            .finish_non_exhaustive()
    }
}

/// The smallest key after every key starting with `prefix` (etcd's "prefix end").
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff (or empty): every key after it.
    vec![0]
}

impl EtcdStore {
    /// Connects to etcd (lazily: members may be down at start; requests fail with
    /// [`StoreError::Etcd`] until one answers) and starts the batcher on the current tokio
    /// runtime (the server's), which must be running. Fails on bad options (no endpoint, an
    /// unparsable URL, an unreadable certificate).
    pub fn connect(options: EtcdOptions) -> Result<Self, StoreError> {
        let open_err = |message: String| StoreError::Open {
            path: PathBuf::from(format!("etcd {}", options.endpoints.join(","))),
            message,
        };
        if options.endpoints.is_empty() {
            return Err(open_err("no etcd endpoint given".to_owned()));
        }
        let tls = tls_config(&options.tls).map_err(open_err)?;
        let mut endpoints = Vec::with_capacity(options.endpoints.len());
        for url in &options.endpoints {
            let mut endpoint = Endpoint::from_shared(url.clone())
                .map_err(|e| open_err(format!("bad etcd endpoint {url:?}: {e}")))?
                .connect_timeout(Duration::from_secs(2))
                .tcp_nodelay(true)
                // Detect a dead member (SIGKILL, partition) in seconds, not at the TCP timeout.
                .http2_keep_alive_interval(Duration::from_secs(2))
                .keep_alive_timeout(Duration::from_secs(2))
                .keep_alive_while_idle(true);
            if let Some(tls) = &tls {
                endpoint = endpoint
                    .tls_config(tls.clone())
                    .map_err(|e| open_err(format!("TLS for {url:?}: {e}")))?;
            }
            endpoints.push(endpoint);
        }
        let channels: Vec<_> = endpoints.into_iter().map(|e| e.connect_lazy()).collect();
        let members = Arc::new(Members {
            clients: channels.iter().cloned().map(KvClient::new).collect(),
            channels,
            current: AtomicUsize::new(0),
            per_try: options.request_timeout,
        });
        let (commits, rx) = mpsc::unbounded_channel();
        let registration = Arc::new(ownership::Registration::new());
        tokio::spawn(batcher(Arc::clone(&members), Arc::clone(&registration), rx));
        Ok(EtcdStore {
            members,
            commits,
            registration,
            prefix: options.prefix.as_bytes().to_vec(),
            cache: Mutex::new(StateCache::new(options.state_cache_targets)),
            ownership: OnceLock::new(),
            options,
        })
    }

    pub(super) fn key(&self, parts: &[&[u8]]) -> Vec<u8> {
        let mut k = self.prefix.clone();
        for p in parts {
            k.extend_from_slice(p);
        }
        k
    }

    pub(super) fn state_key(&self, target: &str) -> Vec<u8> {
        self.key(&[b"hpa/s/", target.as_bytes()])
    }

    /// `hpa/d/` ++ the sled store's decision key (`target 0x00 be(first time) be(seq)`), so
    /// that [`keys`]' decoders read the part after `hpa/d/`.
    pub(super) fn decision_prefix(&self, target: &str) -> Vec<u8> {
        self.key(&[b"hpa/d/", &keys::decision_prefix(target)])
    }

    /// The etcd key of a log key in the sled layout ([`keys::decision_key`]).
    pub(super) fn log_key(&self, log_key: &[u8]) -> Vec<u8> {
        self.key(&[b"hpa/d/", log_key])
    }

    /// The sled-layout part of a decision key read from etcd.
    pub(super) fn log_part<'a>(&self, etcd_key: &'a [u8]) -> &'a [u8] {
        etcd_key.get(self.prefix.len() + 6..).unwrap_or_default()
    }

    /// The target's state record and its `mod_revision` (0: absent).
    pub(super) async fn read_state(
        &self,
        key: &str,
    ) -> Result<(Option<StoredState>, i64), StoreError> {
        let Some(kv) = self.get(self.state_key(key)).await? else {
            return Ok((None, 0));
        };
        // A version-3 record (written by the sled store's commit; this store writes the newest
        // run whole) names the run's body in the log: the decoder asks for it by key, and the
        // record is decoded again with the body read.
        let mut wanted = None;
        let first = StoredState::decode(key, &kv.value, |k| {
            wanted = Some(k.to_vec());
            Ok(None::<Vec<u8>>)
        });
        let state = match (first, wanted) {
            (Ok(state), _) => state,
            (Err(_), Some(k)) => {
                let body = self
                    .get(self.key(&[b"hpa/d/", &k]))
                    .await?
                    .map(|kv| kv.value);
                StoredState::decode(key, &kv.value, |_| Ok(body))?
            }
            (Err(e), None) => return Err(e),
        };
        Ok((Some(state), kv.mod_revision))
    }

    /// The keys of the target's closed runs, oldest first, in the sled layout (what the plan
    /// and the cache take).
    pub(super) async fn log_keys(&self, key: &str) -> Result<Vec<Vec<u8>>, StoreError> {
        let prefix = self.decision_prefix(key);
        Ok(self
            .range(RangeRequest {
                range_end: prefix_end(&prefix),
                key: prefix,
                keys_only: true,
                ..Default::default()
            })
            .await?
            .kvs
            .into_iter()
            .map(|kv| self.log_part(&kv.key).to_vec())
            .collect())
    }

    pub(super) fn record_key(&self, space: &Space, target: &str) -> Vec<u8> {
        self.key(&[space.etcd.as_bytes(), target.as_bytes()])
    }

    /// One linearizable `Range`, member after member. Not sent once this replica's
    /// registration has lapsed, and given up when it lapses meanwhile ([`StoreError::Lapsed`]:
    /// the call is declined, nothing having been written, instead of waiting out the tries of
    /// a replica cut off from etcd); the registration's own reads do not come through here.
    pub(super) async fn range(
        &self,
        request: RangeRequest,
    ) -> Result<pb::RangeResponse, StoreError> {
        if self.registration.lapsed() {
            return Err(StoreError::Lapsed);
        }
        let read = self.members.call(|mut kv| {
            let request = request.clone();
            async move { kv.range(request).await }
        });
        tokio::select! {
            biased;
            response = read => response,
            () = self.registration.lapse() => Err(StoreError::Lapsed),
        }
    }

    pub(super) async fn get(&self, key: Vec<u8>) -> Result<Option<KeyValue>, StoreError> {
        Ok(self
            .range(RangeRequest {
                key,
                ..Default::default()
            })
            .await?
            .kvs
            .into_iter()
            .next())
    }

    /// Up to `limit` keys under `under` after `after`, as target keys.
    pub(super) async fn list(
        &self,
        under: Vec<u8>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<KeyPage, StoreError> {
        let end = prefix_end(&under);
        let mut start = under.clone();
        if let Some(after) = after {
            start.extend_from_slice(after.as_bytes());
            // The smallest key after `after`.
            start.push(0);
        }
        let response = self
            .range(RangeRequest {
                key: start,
                range_end: end,
                limit: i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX),
                keys_only: true,
                ..Default::default()
            })
            .await?;
        let more = response.kvs.len() > limit || response.more;
        let mut keys = Vec::with_capacity(limit.min(response.kvs.len()));
        for kv in response.kvs.into_iter().take(limit) {
            let k = kv.key.get(under.len()..).unwrap_or_default();
            keys.push(
                String::from_utf8(k.to_vec()).map_err(|_| StoreError::Corrupt {
                    kind: "state",
                    key: String::from_utf8_lossy(k).into_owned(),
                    message: "key is not UTF-8".to_owned(),
                })?,
            );
        }
        Ok(KeyPage { keys, more })
    }

    /// Deletes `keys` (exact) and `ranges` in one transaction; how many keys went.
    pub(super) async fn delete_all(&self, ops: Vec<DeleteRangeRequest>) -> Result<i64, StoreError> {
        let request = TxnRequest {
            compare: vec![],
            success: ops
                .into_iter()
                .map(|d| RequestOp {
                    request: Some(Op::RequestDeleteRange(d)),
                })
                .collect(),
            failure: vec![],
        };
        // Repeating a delete is harmless (the count of a repeat may be 0: the API then
        // answers NOT_FOUND for a target this call did delete, which a retry would too).
        let response = self.members.txn(request).await?;
        Ok(response
            .responses
            .iter()
            .map(|r| match &r.response {
                Some(OpResponse::ResponseDeleteRange(d)) => d.deleted,
                _ => 0,
            })
            .sum())
    }

    /// Total bytes of keys and values stored for `target` (state, decisions, VPA state): the
    /// figure "etcd bytes per target" of `docs/ha.md` (etcd's own per-key overhead excluded).
    pub async fn target_bytes(&self, target: &str) -> Result<usize, StoreError> {
        let mut total = 0;
        for key in [self.state_key(target), self.record_key(&vpa::SPACE, target)] {
            if let Some(kv) = self.get(key).await? {
                total += kv.key.len() + kv.value.len();
            }
        }
        let prefix = self.decision_prefix(target);
        let decisions = self
            .range(RangeRequest {
                range_end: prefix_end(&prefix),
                key: prefix,
                ..Default::default()
            })
            .await?;
        total += decisions
            .kvs
            .iter()
            .map(|kv| kv.key.len() + kv.value.len())
            .sum::<usize>();
        Ok(total)
    }
}

#[tonic::async_trait]
impl HpaStore for EtcdStore {
    async fn load(&self, key: &str) -> Result<Option<HpaState>, StoreError> {
        Ok(self.read_state(key).await?.0.map(|s| HpaState {
            history: s.history,
            next_seq: s.next_seq,
        }))
    }

    /// From the cache for a target this replica owns (no read: a stale entry fails the
    /// commit's guard, which drops it, and the API reads again); otherwise one read. A
    /// replica whose registration lapsed declines here, before deciding.
    async fn load_for_update(&self, key: &str) -> Result<(Option<HpaState>, Seen), StoreError> {
        if self.registration.lapsed() {
            return Err(StoreError::Lapsed);
        }
        let (mut stored, revision) = match self.cached_state(key) {
            Some((state, revision)) => (Some(state), revision),
            None => self.read_state(key).await?,
        };
        let state = stored.as_mut().map(|s| HpaState {
            history: std::mem::take(&mut s.history),
            next_seq: s.next_seq,
        });
        let seen = Seen {
            revision,
            loaded: Some(Loaded {
                generation: 0,
                state: stored,
            }),
            withdraw_newest: false,
        };
        Ok((state, seen))
    }

    /// The sled store's commit as one guarded etcd transaction (see `commit`).
    async fn commit_after(&self, seen: Seen, commit: Commit<'_>) -> Result<(), StoreError> {
        self.commit_guarded(seen, commit).await
    }

    /// As the sled store: the closed runs, then the pending one, at most `decision_log_len`.
    async fn decisions(&self, key: &str) -> Result<Vec<DecisionEntry>, StoreError> {
        let pending = self.read_state(key).await?.0.and_then(|s| s.pending);
        let prefix = self.decision_prefix(key);
        let response = self
            .range(RangeRequest {
                range_end: prefix_end(&prefix),
                key: prefix,
                ..Default::default()
            })
            .await?;
        let logged = response
            .kvs
            .iter()
            .map(|kv| Ok((self.log_part(&kv.key), &kv.value)));
        runs_with_pending(key, pending, logged, self.options.decision_log_len)
    }

    /// One linearizable read of the state record; a format-1 record without a pending run
    /// falls back to the log (as the sled store).
    async fn latest(&self, key: &str) -> Result<Option<DecisionEntry>, StoreError> {
        match self.read_state(key).await?.0 {
            None => Ok(None),
            Some(StoredState {
                pending: Some(p), ..
            }) => Ok(Some(p)),
            Some(_) => Ok(self.decisions(key).await?.pop()),
        }
    }

    async fn list_keys(&self, after: Option<&str>, limit: usize) -> Result<KeyPage, StoreError> {
        self.list(self.key(&[b"hpa/s/"]), after, limit).await
    }

    async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        self.cache_forget(key);
        let prefix = self.decision_prefix(key);
        let deleted = self
            .delete_all(vec![
                DeleteRangeRequest {
                    key: self.state_key(key),
                    ..Default::default()
                },
                DeleteRangeRequest {
                    range_end: prefix_end(&prefix),
                    key: prefix,
                    prev_kv: false,
                },
            ])
            .await?;
        Ok(deleted > 0)
    }
}

#[tonic::async_trait]
impl Db for EtcdStore {
    /// etcd's unavailability shows in no local state: probe on every tick.
    fn probe_while_healthy(&self) -> bool {
        true
    }

    /// Every write was acknowledged by etcd (a quorum) before it returned.
    fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn probe(&self) -> Result<(), StoreError> {
        // A linearizable read goes through the leader's read index: it succeeds only when a
        // quorum is reachable, i.e. when a write could succeed too. A replica whose
        // registration lapsed fails it too (`range`): not serving until it registers again.
        self.range(RangeRequest {
            key: self.key(&[b"health"]),
            count_only: true,
            ..Default::default()
        })
        .await
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_first_key_after_the_prefix() {
        assert_eq!(prefix_end(b"a/"), b"a0".to_vec());
        assert_eq!(prefix_end(b"a\x00"), b"a\x01".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }
}
