//! The etcd v3 store: several autoscaled replicas share one history, any replica serves any
//! target, and a response is sent only after etcd acknowledged the write (a Raft commit on a
//! quorum of members, so it survives the loss of any minority of them).
//!
//! # Layout (under the configured prefix, default `autoscaled/`)
//!
//! * `hpa/s/<target_key>` → the [`HpaState`] record (the same `record` encoding as sled);
//! * `hpa/d/<target_key> 0x00 be(seq)` → one [`DecisionEntry`] record per logged decision;
//!   `seq` is the state's `next_seq` at commit, so the oldest entries beyond the log bound are
//!   one contiguous range and are trimmed with a single `DeleteRange`, without a read;
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
//! same previous state. No global lock, no lease.
//!
//! # Group commit
//!
//! Commits of different targets that arrive while a transaction is in flight are sent
//! together in the next one (as the sled store shares one flush), within etcd's limits:
//! `--max-txn-ops` (default 128; each target takes 3 operations) and `--max-request-bytes`
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
//! # Blocking
//!
//! The store traits are synchronous. The store runs its own small tokio runtime for the etcd
//! connections and the batcher; a trait call hands the work to it and waits (inside
//! `block_in_place` on a multi-thread runtime, so the server's other tasks keep running).
//! This works from any caller, including a current-thread runtime, without deadlock.

use std::{
    collections::VecDeque,
    future::Future,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::{
    runtime::{Handle, Runtime, RuntimeFlavor},
    sync::{mpsc, oneshot},
};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::{
    Db, DecisionEntry, HpaStore, KeyPage, Run, Seen, StoreError, HpaState,
    db::{Records, Space, Versioned},
    hpa::{StoredState, runs_with_pending},
    keys,
    record::{self, hpa},
    vpa,
};
use crate::engine::{hpa::history::History, time::Time};

/// The generated client of `proto/etcd/kv.proto`.
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
mod pb {
    tonic::include_proto!("etcdserverpb");
}

use pb::{
    Compare, DeleteRangeRequest, KeyValue, PutRequest, RangeRequest, RequestOp, TxnRequest,
    compare::{CompareResult, CompareTarget, TargetUnion},
    kv_client::KvClient,
    request_op::Request as Op,
    response_op::Response as OpResponse,
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

/// TLS to etcd: a CA to verify the members, and a client certificate and key if etcd
/// requires client authentication (`--client-cert-auth`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtcdTls {
    /// `--etcd-ca`: PEM CA the members' certificates are verified against; required as soon
    /// as any TLS file is given.
    pub ca: Option<PathBuf>,
    /// `--etcd-cert`: PEM client certificate, for etcd's `--client-cert-auth`.
    pub cert: Option<PathBuf>,
    /// `--etcd-key`: PEM private key of `cert`; given together with it.
    pub key: Option<PathBuf>,
}

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
        }
    }
}

/// One commit waiting for the batcher: its guard, its operations, and the state value it
/// writes (to recognise it after a transport failure).
struct Pending {
    state_key: Vec<u8>,
    state_value: Vec<u8>,
    expected: i64,
    ops: Vec<RequestOp>,
    bytes: usize,
    target: String,
    attempts: u32,
    /// Sends again after a batch failed on another target's guard (at most [`MAX_RESENDS`]).
    resends: u32,
    done: oneshot::Sender<Result<(), StoreError>>,
}

/// One lazily connected client per member, and the one in use. A request that fails in
/// transport (member killed, partitioned, no leader, no answer within the per-try timeout)
/// moves to the next member. tonic's `Channel::balance_list` was not used: after a member is
/// SIGKILLed it kept routing calls to it (they hung until our timeout), so decisions stalled.
struct Members {
    clients: Vec<KvClient<Channel>>,
    current: AtomicUsize,
    per_try: Duration,
}

/// The failure of a request to one member: worth another member, or final.
fn retryable(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable
            | tonic::Code::Unknown
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Cancelled
            | tonic::Code::Aborted
            | tonic::Code::Internal
    )
}

impl Members {
    fn client(&self) -> (usize, KvClient<Channel>) {
        let i = self.current.load(Ordering::Relaxed) % self.clients.len();
        (i, self.clients[i].clone())
    }

    /// After a failure on member `i`, use the next one (unless another caller already moved).
    fn failed(&self, i: usize) {
        let _ = self.current.compare_exchange(
            i,
            (i + 1) % self.clients.len(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// One attempt on the current member, bounded by the per-try timeout; moves on if it fails
    /// in transport. For requests that must not be repeated blindly (a transaction).
    async fn once<T, F, Fut>(&self, op: F) -> Result<T, String>
    where
        F: FnOnce(KvClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let (i, client) = self.client();
        match tokio::time::timeout(self.per_try, op(client)).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => {
                if retryable(&status) {
                    self.failed(i);
                }
                Err(format!("member {i}: {}", status.message()))
            }
            Err(_) => {
                self.failed(i);
                Err(format!(
                    "member {i}: no answer within {} ms",
                    self.per_try.as_millis()
                ))
            }
        }
    }

    /// An idempotent request (a read, or a write whose repetition is harmless), tried on each
    /// member in turn, twice round.
    async fn call<T, F, Fut>(&self, op: F) -> Result<T, StoreError>
    where
        F: Fn(KvClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut last = String::new();
        for _ in 0..self.clients.len() * 2 {
            let (i, client) = self.client();
            match tokio::time::timeout(self.per_try, op(client)).await {
                Ok(Ok(response)) => return Ok(response.into_inner()),
                Ok(Err(status)) if retryable(&status) => {
                    last = format!("member {i}: {}", status.message());
                    self.failed(i);
                }
                Ok(Err(status)) => return Err(etcd_error("request refused", status.message())),
                Err(_) => {
                    last = format!(
                        "member {i}: no answer within {} ms",
                        self.per_try.as_millis()
                    );
                    self.failed(i);
                }
            }
        }
        Err(StoreError::Etcd(format!(
            "no etcd member answered; last: {last}"
        )))
    }
}

/// History (and VPA state) in etcd.
pub struct EtcdStore {
    runtime: Option<Runtime>,
    handle: Handle,
    members: Arc<Members>,
    commits: mpsc::UnboundedSender<Pending>,
    prefix: Vec<u8>,
    options: EtcdOptions,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.options.endpoints)
            .field("prefix", &self.options.prefix)
            .finish_non_exhaustive()
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which panics inside another runtime; let it wind down in
        // the background instead.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

fn etcd_error(context: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Etcd(format!("{context}: {e}"))
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
    /// [`StoreError::Etcd`] until one answers) and starts the batcher. Fails on bad options
    /// (no endpoint, an unparsable URL, an unreadable certificate).
    pub fn connect(options: EtcdOptions) -> Result<Self, StoreError> {
        let open_err = |message: String| StoreError::Open {
            path: PathBuf::from(format!("etcd {}", options.endpoints.join(","))),
            message,
        };
        if options.endpoints.is_empty() {
            return Err(open_err("no etcd endpoint given".to_owned()));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("autoscaled-etcd")
            .enable_all()
            .build()
            .map_err(|e| open_err(format!("cannot start the etcd client runtime: {e}")))?;
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
        let handle = runtime.handle().clone();
        let clients = {
            let _entered = runtime.enter();
            endpoints
                .into_iter()
                .map(|e| KvClient::new(e.connect_lazy()))
                .collect()
        };
        let members = Arc::new(Members {
            clients,
            current: AtomicUsize::new(0),
            per_try: options.request_timeout,
        });
        let (commits, rx) = mpsc::unbounded_channel();
        handle.spawn(batcher(Arc::clone(&members), rx));
        Ok(EtcdStore {
            runtime: Some(runtime),
            handle,
            members,
            commits,
            prefix: options.prefix.as_bytes().to_vec(),
            options,
        })
    }

    fn key(&self, parts: &[&[u8]]) -> Vec<u8> {
        let mut k = self.prefix.clone();
        for p in parts {
            k.extend_from_slice(p);
        }
        k
    }

    fn state_key(&self, target: &str) -> Vec<u8> {
        self.key(&[b"hpa/s/", target.as_bytes()])
    }

    /// `hpa/d/` ++ the sled store's decision key (`target 0x00 be(first time) be(seq)`), so
    /// that [`keys`]' decoders read the part after `hpa/d/`.
    fn decision_prefix(&self, target: &str) -> Vec<u8> {
        self.key(&[b"hpa/d/", &keys::decision_prefix(target)])
    }

    fn decision_key(&self, target: &str, time: Time, seq: u64) -> Vec<u8> {
        self.key(&[b"hpa/d/", &keys::decision_key(target, time, seq)])
    }

    /// The sled-layout part of a decision key read from etcd.
    fn log_part<'a>(&self, etcd_key: &'a [u8]) -> &'a [u8] {
        etcd_key.get(self.prefix.len() + 6..).unwrap_or_default()
    }

    /// The target's state record and its `mod_revision` (0: absent).
    fn read_state(&self, key: &str) -> Result<(Option<StoredState>, i64), StoreError> {
        match self.get(self.state_key(key))? {
            None => Ok((None, 0)),
            Some(kv) => {
                // A version-3 record (written by the sled store's commit; this store writes
                // the newest run whole) names the run's body in the log.
                let logged = |k: &[u8]| Ok(self.get(self.key(&[b"hpa/d/", k]))?.map(|kv| kv.value));
                Ok((
                    Some(StoredState::decode(key, &kv.value, logged)?),
                    kv.mod_revision,
                ))
            }
        }
    }

    /// The keys of the target's closed runs, oldest first.
    fn log_keys(&self, key: &str) -> Result<Vec<Vec<u8>>, StoreError> {
        let prefix = self.decision_prefix(key);
        Ok(self
            .range(RangeRequest {
                range_end: prefix_end(&prefix),
                key: prefix,
                keys_only: true,
                ..Default::default()
            })?
            .kvs
            .into_iter()
            .map(|kv| kv.key)
            .collect())
    }

    fn record_key(&self, space: &Space, target: &str) -> Vec<u8> {
        self.key(&[space.etcd.as_bytes(), target.as_bytes()])
    }

    /// Runs `future` on the store's runtime and waits for it.
    fn block<T: Send + 'static>(
        &self,
        future: impl Future<Output = Result<T, StoreError>> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        // `Members::call` bounds each try; this bounds the whole (every member, twice).
        let timeout = self.options.request_timeout
            * (2 * u32::try_from(self.options.endpoints.len()).unwrap_or(u32::MAX / 4) + 1);
        self.handle.spawn(async move {
            let result = match tokio::time::timeout(timeout, future).await {
                Ok(result) => result,
                Err(_) => Err(StoreError::Etcd(format!(
                    "no answer within {} ms",
                    timeout.as_millis()
                ))),
            };
            let _ = tx.send(result);
        });
        let wait = move || rx.recv();
        let received = match Handle::try_current() {
            Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(wait)
            }
            _ => wait(),
        };
        received.map_err(|_| StoreError::Etcd("the etcd client runtime stopped".to_owned()))?
    }

    /// One linearizable `Range`.
    fn range(&self, request: RangeRequest) -> Result<pb::RangeResponse, StoreError> {
        let members = Arc::clone(&self.members);
        self.block(async move {
            members
                .call(|mut kv| {
                    let request = request.clone();
                    async move { kv.range(request).await }
                })
                .await
        })
    }

    fn get(&self, key: Vec<u8>) -> Result<Option<KeyValue>, StoreError> {
        Ok(self
            .range(RangeRequest {
                key,
                ..Default::default()
            })?
            .kvs
            .into_iter()
            .next())
    }

    /// Up to `limit` keys under `under` after `after`, as target keys.
    fn list(
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
        let response = self.range(RangeRequest {
            key: start,
            range_end: end,
            limit: i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX),
            keys_only: true,
            ..Default::default()
        })?;
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
    fn delete_all(&self, ops: Vec<DeleteRangeRequest>) -> Result<i64, StoreError> {
        let members = Arc::clone(&self.members);
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
        self.block(async move {
            // Repeating a delete is harmless (the count of a repeat may be 0: the API then
            // answers NOT_FOUND for a target this call did delete, which a retry would too).
            let response = members
                .call(|mut kv| {
                    let request = request.clone();
                    async move { kv.txn(request).await }
                })
                .await?;
            Ok(response
                .responses
                .iter()
                .map(|r| match &r.response {
                    Some(OpResponse::ResponseDeleteRange(d)) => d.deleted,
                    _ => 0,
                })
                .sum())
        })
    }

    /// Total bytes of keys and values stored for `target` (state, decisions, VPA state): the
    /// figure "etcd bytes per target" of `docs/ha.md` (etcd's own per-key overhead excluded).
    pub fn target_bytes(&self, target: &str) -> Result<usize, StoreError> {
        let mut total = 0;
        for kv in [self.state_key(target), self.record_key(&vpa::SPACE, target)]
            .into_iter()
            .filter_map(|k| self.get(k).transpose())
        {
            let kv = kv?;
            total += kv.key.len() + kv.value.len();
        }
        let prefix = self.decision_prefix(target);
        let decisions = self.range(RangeRequest {
            range_end: prefix_end(&prefix),
            key: prefix,
            ..Default::default()
        })?;
        total += decisions
            .kvs
            .iter()
            .map(|kv| kv.key.len() + kv.value.len())
            .sum::<usize>();
        Ok(total)
    }
}

fn tls_config(tls: &EtcdTls) -> Result<Option<ClientTlsConfig>, String> {
    if tls.ca.is_none() && tls.cert.is_none() && tls.key.is_none() {
        return Ok(None);
    }
    let read = |what: &str, path: &PathBuf| {
        std::fs::read(path)
            .map_err(|e| format!("cannot read the etcd {what} {}: {e}", path.display()))
    };
    let mut config = ClientTlsConfig::new();
    match &tls.ca {
        Some(ca) => config = config.ca_certificate(Certificate::from_pem(read("CA", ca)?)),
        None => return Err("--etcd-ca is required with --etcd-cert/--etcd-key".to_owned()),
    }
    match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => {
            config = config.identity(Identity::from_pem(
                read("client certificate", cert)?,
                read("client key", key)?,
            ));
        }
        (None, None) => {}
        _ => return Err("--etcd-cert and --etcd-key go together".to_owned()),
    }
    Ok(Some(config))
}

/// Sends the queued commits, batching those that arrive while a transaction is in flight.
async fn batcher(members: Arc<Members>, mut rx: mpsc::UnboundedReceiver<Pending>) {
    let mut queue: VecDeque<Pending> = VecDeque::new();
    loop {
        if queue.is_empty() {
            match rx.recv().await {
                Some(p) => queue.push_back(p),
                None => return,
            }
        }
        while let Ok(p) = rx.try_recv() {
            queue.push_back(p);
        }
        let mut batch = Vec::new();
        let mut bytes = 0;
        let mut ops = 0;
        while let Some(p) = queue.front() {
            if !batch.is_empty()
                && (ops + p.ops.len() > MAX_BATCH_OPS || bytes + p.bytes > MAX_BATCH_BYTES)
            {
                break;
            }
            bytes += p.bytes;
            ops += p.ops.len();
            batch.extend(queue.pop_front());
        }
        let again = send_batch(&members, batch).await;
        for p in again.into_iter().rev() {
            queue.push_front(p);
        }
    }
}

/// Sends one batch; returns the commits to send again (not applied, not conflicting).
async fn send_batch(members: &Members, batch: Vec<Pending>) -> Vec<Pending> {
    let mut request = TxnRequest::default();
    for p in &batch {
        request.compare.push(Compare {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Mod as i32,
            key: p.state_key.clone(),
            target_union: Some(TargetUnion::ModRevision(p.expected)),
            range_end: vec![],
        });
        request.success.extend(p.ops.iter().cloned());
        request.failure.push(RequestOp {
            request: Some(Op::RequestRange(RangeRequest {
                key: p.state_key.clone(),
                keys_only: true,
                ..Default::default()
            })),
        });
    }
    let result = members
        .once(|mut kv| async move { kv.txn(request).await })
        .await;
    let mut again = Vec::new();
    match result {
        Ok(response) if response.succeeded => {
            for p in batch {
                let _ = p.done.send(Ok(()));
            }
        }
        Ok(response) => {
            // Some guard failed: the failure branch read every state key's revision.
            for (mut p, r) in batch.into_iter().zip(
                response
                    .responses
                    .into_iter()
                    .map(Some)
                    .chain(std::iter::repeat_with(|| None)),
            ) {
                let now = match r.and_then(|r| r.response) {
                    Some(OpResponse::ResponseRange(range)) => {
                        range.kvs.first().map_or(0, |kv| kv.mod_revision)
                    }
                    _ => -1,
                };
                if now == p.expected && p.resends + 1 < MAX_RESENDS {
                    p.resends += 1;
                    again.push(p);
                } else {
                    let _ = p.done.send(Err(StoreError::Conflict { key: p.target }));
                }
            }
        }
        Err(message) => {
            // Applied or not? Read each target back.
            for mut p in batch {
                match resolve(members, &p).await {
                    Ok(Resolved::Applied) => {
                        let _ = p.done.send(Ok(()));
                    }
                    Ok(Resolved::NotApplied) if p.attempts + 1 < MAX_ATTEMPTS => {
                        p.attempts += 1;
                        again.push(p);
                    }
                    Ok(Resolved::NotApplied) => {
                        let _ = p.done.send(Err(etcd_error("commit", &message)));
                    }
                    Ok(Resolved::Changed) => {
                        let _ = p.done.send(Err(StoreError::Conflict { key: p.target }));
                    }
                    Err(e) => {
                        let _ = p.done.send(Err(etcd_error(
                            "commit (outcome unknown, not acknowledged)",
                            format!("{message}; reading back: {e}"),
                        )));
                    }
                }
            }
        }
    }
    again
}

enum Resolved {
    Applied,
    NotApplied,
    Changed,
}

/// After a transport failure: was `p` applied?
async fn resolve(members: &Members, p: &Pending) -> Result<Resolved, StoreError> {
    let state = members
        .call(|mut kv| {
            let request = RangeRequest {
                key: p.state_key.clone(),
                ..Default::default()
            };
            async move { kv.range(request).await }
        })
        .await?
        .kvs
        .into_iter()
        .next();
    // The state value carries this commit's newest run (its time and decision): it is ours
    // only if this transaction was applied, and then all of it was (a transaction is atomic).
    let state_rev = state.as_ref().map_or(0, |kv| kv.mod_revision);
    if state.is_some_and(|kv| kv.value == p.state_value) {
        Ok(Resolved::Applied)
    } else if state_rev == p.expected {
        Ok(Resolved::NotApplied)
    } else {
        Ok(Resolved::Changed)
    }
}

/// What `load_for_update` read, for `commit_after` ([`Seen::token`]).
struct Loaded(Option<StoredState>);

impl HpaStore for EtcdStore {
    fn load(&self, key: &str) -> Result<Option<HpaState>, StoreError> {
        Ok(self.read_state(key)?.0.map(|s| HpaState {
            history: s.history,
            next_seq: s.next_seq,
        }))
    }

    fn load_for_update(&self, key: &str) -> Result<(Option<HpaState>, Seen), StoreError> {
        let (stored, revision) = self.read_state(key)?;
        let state = stored.as_ref().map(|s| HpaState {
            history: s.history.clone(),
            next_seq: s.next_seq,
        });
        let seen = Seen {
            revision,
            next_seq: stored.as_ref().map_or(0, |s| s.next_seq),
            token: Some(Arc::new(Loaded(stored))),
        };
        Ok((state, seen))
    }

    /// Without a [`Seen`], the state is read first; only for callers that serialize writers
    /// themselves (the API uses [`HpaStore::commit_after`]).
    fn commit(
        &self,
        key: &str,
        history: &History,
        decision: &DecisionEntry,
    ) -> Result<(), StoreError> {
        let (_, seen) = self.load_for_update(key)?;
        self.commit_after(key, seen, history, decision)
    }

    /// The sled store's commit ([`SledStore`](super::SledStore)'s, same records and run
    /// rules) as one guarded etcd transaction: the state record with the new history and the
    /// newest run as `pending`; when the decision closes the previous run, that run's record
    /// under its final key and the deletes of runs beyond the count bound or the retention.
    fn commit_after(
        &self,
        key: &str,
        seen: Seen,
        history: &History,
        decision: &DecisionEntry,
    ) -> Result<(), StoreError> {
        let max_names = self.options.max_pod_names;
        let loaded = seen.token.as_ref().and_then(|t| t.downcast_ref::<Loaded>());
        let reread;
        let previous = match loaded {
            Some(Loaded(previous)) => previous.as_ref(),
            None => {
                let (state, revision) = self.read_state(key)?;
                if revision != seen.revision {
                    return Err(StoreError::Conflict {
                        key: key.to_owned(),
                    });
                }
                reread = state;
                reread.as_ref()
            }
        };
        let state_key = self.state_key(key);
        let mut ops = Vec::new();
        let extends = previous
            .and_then(|p| p.pending.as_ref())
            .filter(|p| p.same_outcome(decision))
            .filter(|_| previous.is_some_and(|p| p.log_len.is_some()));
        let next = if let Some(run) = extends {
            // The same outcome as the newest run: the run grows, nothing else is written.
            let mut extended = decision.clone();
            extended.run = Run {
                count: run.run.count.saturating_add(1),
                first_time: run.run.first_time,
            };
            extended.seq = run.seq;
            StoredState {
                history: History::default(),
                next_seq: previous.map_or(0, |p| p.next_seq),
                log_len: previous.and_then(|p| p.log_len),
                pending: Some(extended),
                logged_body: None,
            }
        } else {
            let seq = previous.map_or(0, |p| p.next_seq);
            let mut log = match previous.and_then(|p| p.log_len) {
                Some(0) | None if previous.is_none() => Vec::new(),
                _ => self.log_keys(key)?,
            };
            if let Some(pending) = previous.and_then(|p| p.pending.as_ref()) {
                let log_key = self.decision_key(key, pending.run.first_time, pending.seq);
                ops.push(RequestOp {
                    request: Some(Op::RequestPut(PutRequest {
                        key: log_key.clone(),
                        value: record::encode_binary(&hpa::run_to_record(pending, max_names)),
                        ..Default::default()
                    })),
                });
                if !log.contains(&log_key) {
                    log.push(log_key);
                }
            }
            // Trim as sled does: by count (the bound includes the new pending run) and by age
            // (a closed run ended before its successor began).
            let bound = self.options.decision_log_len.max(1);
            let excess = (log.len() + 1).saturating_sub(bound);
            let cutoff = decision.time.minus(self.options.decision_retention);
            let mut removed = 0;
            for (i, k) in log.iter().enumerate() {
                let successor_began = match log.get(i + 1) {
                    Some(next) => keys::decision_key_time(self.log_part(next)),
                    None => Some(decision.time),
                };
                let old = successor_began.is_some_and(|t| t <= cutoff);
                if removed < excess || old {
                    removed += 1;
                    // The run closed by this commit may go at once (log bound 1): then it is
                    // not written either (etcd refuses a put and a delete of one key).
                    ops.retain(|op: &RequestOp| {
                        !matches!(&op.request, Some(Op::RequestPut(put)) if &put.key == k)
                    });
                    ops.push(RequestOp {
                        request: Some(Op::RequestDeleteRange(DeleteRangeRequest {
                            key: k.clone(),
                            ..Default::default()
                        })),
                    });
                } else {
                    break;
                }
            }
            let mut fresh = decision.clone();
            fresh.run = Run {
                count: 1,
                first_time: decision.time,
            };
            fresh.seq = seq;
            StoredState {
                history: History::default(),
                next_seq: seq.saturating_add(1),
                log_len: Some((log.len() - removed) as u64),
                pending: Some(fresh),
                logged_body: None,
            }
        };
        let state_value = next.encode(history, max_names);
        ops.push(RequestOp {
            request: Some(Op::RequestPut(PutRequest {
                key: state_key.clone(),
                value: state_value.clone(),
                ..Default::default()
            })),
        });
        let bytes = ops
            .iter()
            .map(|op| match &op.request {
                Some(Op::RequestPut(p)) => p.key.len() + p.value.len() + 16,
                Some(Op::RequestDeleteRange(d)) => d.key.len() + 16,
                _ => 16,
            })
            .sum::<usize>()
            + 2 * state_key.len()
            + 32;
        let (done, result) = oneshot::channel();
        let pending = Pending {
            state_key,
            state_value,
            expected: seen.revision,
            ops,
            bytes,
            target: key.to_owned(),
            attempts: 0,
            resends: 0,
            done,
        };
        self.commits
            .send(pending)
            .map_err(|_| StoreError::Etcd("the etcd batcher stopped".to_owned()))?;
        // No timeout here: the batcher bounds each send, and sends at most MAX_ATTEMPTS times
        // after transport failures and MAX_RESENDS times after other targets' conflicts.
        let wait = async move {
            result
                .await
                .map_err(|_| StoreError::Etcd("the etcd batcher stopped".to_owned()))?
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let _ = tx.send(wait.await);
        });
        let recv = move || rx.recv();
        let received = match Handle::try_current() {
            Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(recv)
            }
            _ => recv(),
        };
        received.map_err(|_| StoreError::Etcd("the etcd client runtime stopped".to_owned()))?
    }

    /// As the sled store: the closed runs, then the pending one, at most `decision_log_len`.
    fn decisions(&self, key: &str) -> Result<Vec<DecisionEntry>, StoreError> {
        let pending = self.read_state(key)?.0.and_then(|s| s.pending);
        let prefix = self.decision_prefix(key);
        let response = self.range(RangeRequest {
            range_end: prefix_end(&prefix),
            key: prefix,
            ..Default::default()
        })?;
        let logged = response
            .kvs
            .iter()
            .map(|kv| Ok((self.log_part(&kv.key), &kv.value)));
        runs_with_pending(key, pending, logged, self.options.decision_log_len)
    }

    fn list_keys(&self, after: Option<&str>, limit: usize) -> Result<KeyPage, StoreError> {
        self.list(self.key(&[b"hpa/s/"]), after, limit)
    }

    fn delete(&self, key: &str) -> Result<bool, StoreError> {
        let prefix = self.decision_prefix(key);
        let deleted = self.delete_all(vec![
            DeleteRangeRequest {
                key: self.state_key(key),
                ..Default::default()
            },
            DeleteRangeRequest {
                range_end: prefix_end(&prefix),
                key: prefix,
                prev_kv: false,
            },
        ])?;
        Ok(deleted > 0)
    }
}

impl Db for EtcdStore {
    /// etcd's unavailability shows in no local state: probe on every tick.
    fn probe_while_healthy(&self) -> bool {
        true
    }

    /// Every write was acknowledged by etcd (a quorum) before it returned.
    fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn probe(&self) -> Result<(), StoreError> {
        // A linearizable read goes through the leader's read index: it succeeds only when a
        // quorum is reachable, i.e. when a write could succeed too.
        self.range(RangeRequest {
            key: self.key(&[b"health"]),
            count_only: true,
            ..Default::default()
        })
        .map(|_| ())
    }
}

impl Records for EtcdStore {
    fn get_record(&self, space: &Space, key: &str) -> Result<Option<Versioned>, StoreError> {
        Ok(self.get(self.record_key(space, key))?.map(|kv| Versioned {
            bytes: kv.value,
            revision: kv.mod_revision,
        }))
    }

    /// With `if_revision`: one transaction guarded by `mod_revision(key) == if_revision`
    /// (etcd compares a missing key's revisions as 0). A try whose answer was lost may have
    /// been applied, and its repeat then fails the guard: if the record now holds exactly
    /// our bytes, it was ours (acknowledged); otherwise another writer came first
    /// ([`StoreError::Conflict`]: the API re-reads and decides again).
    fn put_record(
        &self,
        space: &Space,
        key: &str,
        if_revision: Option<i64>,
        bytes: Vec<u8>,
    ) -> Result<(), StoreError> {
        let etcd_key = self.record_key(space, key);
        let put = PutRequest {
            key: etcd_key.clone(),
            value: bytes.clone(),
            ..Default::default()
        };
        let members = Arc::clone(&self.members);
        let Some(revision) = if_revision else {
            return self.block(async move {
                members
                    .call(|mut kv| {
                        let request = put.clone();
                        async move { kv.put(request).await }
                    })
                    .await
                    .map(|_| ())
            });
        };
        let request = TxnRequest {
            compare: vec![Compare {
                result: CompareResult::Equal as i32,
                target: CompareTarget::Mod as i32,
                key: etcd_key.clone(),
                target_union: Some(TargetUnion::ModRevision(revision)),
                range_end: vec![],
            }],
            success: vec![RequestOp {
                request: Some(Op::RequestPut(put)),
            }],
            failure: vec![],
        };
        let response = self.block(async move {
            members
                .call(|mut kv| {
                    let request = request.clone();
                    async move { kv.txn(request).await }
                })
                .await
        })?;
        if response.succeeded
            || self
                .get(etcd_key)?
                .is_some_and(|kv| kv.value == bytes && kv.mod_revision > revision)
        {
            return Ok(());
        }
        Err(StoreError::Conflict {
            key: key.to_owned(),
        })
    }

    fn delete_record(&self, space: &Space, key: &str) -> Result<bool, StoreError> {
        Ok(self.delete_all(vec![DeleteRangeRequest {
            key: self.record_key(space, key),
            ..Default::default()
        }])? > 0)
    }

    fn list_records(
        &self,
        space: &Space,
        after: Option<&str>,
        limit: usize,
    ) -> Result<KeyPage, StoreError> {
        self.list(self.key(&[space.etcd.as_bytes()]), after, limit)
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

    #[test]
    fn tls_options_must_be_complete() {
        assert!(matches!(tls_config(&EtcdTls::default()), Ok(None)));
        let only_cert = EtcdTls {
            ca: None,
            cert: Some("c".into()),
            key: Some("k".into()),
        };
        assert!(matches!(tls_config(&only_cert), Err(e) if e.contains("--etcd-ca")));
    }
}
