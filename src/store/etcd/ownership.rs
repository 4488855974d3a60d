//! Which replica owns which target: every replica registers itself under
//! `<prefix>replicas/<id>` (its address for other replicas) with an etcd lease it keeps alive,
//! reads the live registrations every [`POLL`], and a target belongs to the live replica with
//! the highest rendezvous score for it ([`score`]). When a replica stops (or loses etcd), its
//! lease expires within the TTL and its targets spread over the others; when one joins, it
//! takes about 1/n of them from each.
//!
//! Ownership is an optimization, never a guarantee: two replicas may briefly disagree (each
//! reads the registrations on its own clock), and every commit stays guarded by the state
//! key's `mod_revision`, so the worst a disagreement costs is a conflict and a decision made
//! again. What it buys: the owner keeps its targets' state in memory and decides without
//! reading etcd ([`super::EtcdStore`]'s cache), and the replicas do not keep overwriting each
//! other's targets.

use std::{
    collections::hash_map::RandomState,
    hash::{BuildHasher, Hasher},
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, AtomicI64, Ordering},
    },
    time::Duration,
};

use tokio_stream::wrappers::ReceiverStream;

use super::{
    EtcdStore,
    pb::{LeaseGrantRequest, LeaseKeepAliveRequest, LeaseRevokeRequest, PutRequest, RangeRequest},
    prefix_end,
};

/// How often the live registrations are read.
pub const POLL: Duration = Duration::from_millis(250);
/// How often the registration's lease is kept alive.
const KEEP_ALIVE: Duration = Duration::from_millis(500);
/// The lease asked for, in seconds (etcd raises it to its minimum: 1.5 election timeouts,
/// 2 s with its default 1 s election timeout).
pub const LEASE_TTL_SECS: i64 = 2;

/// When this replica's registration expires in etcd, as far as it knows: the lease's TTL
/// after the last grant or keep-alive etcd answered. Once it has expired the other replicas
/// own this one's targets (they read the registrations without it), so this one
/// declines to decide ([`StoreError::Lapsed`](crate::store::StoreError::Lapsed)) until it
/// has registered again: a replica cut off from etcd then answers at once instead of
/// waiting for commits that cannot be made, and a forwarding replica decides in its place.
#[derive(Debug)]
pub(super) struct Registration {
    base: std::time::Instant,
    /// Milliseconds after `base`; 0: never registered (a store without replicas, or before
    /// the first registration), which never lapses.
    expires_ms: AtomicI64,
}

/// How long past its estimated expiry a registration still counts as live. A new etcd leader
/// extends every lease, so keep-alives that went unanswered through an election have not lost
/// the registration; the estimate counts from the last keep-alive asked for (at most
/// [`KEEP_ALIVE`] before an election starts), so with the 2 s lease it tolerates elections of
/// 2 s, twice etcd's default election timeout, before declining. Longer, and a cut-off
/// replica would keep the calls forwarded to it waiting longer.
const LAPSE_GRACE_MS: i64 = 500;

impl Registration {
    pub(super) fn new() -> Self {
        Registration {
            base: std::time::Instant::now(),
            expires_ms: AtomicI64::new(0),
        }
    }

    fn now_ms(&self) -> i64 {
        i64::try_from(self.base.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    /// etcd answered a keep-alive with `ttl_secs` left, to a request sent at `sent_ms`
    /// ([`Self::now_ms`]): the lease runs at most that long from the request. An answer
    /// arriving late never moves the expiry back.
    fn renewed(&self, sent_ms: i64, ttl_secs: i64) {
        let until = sent_ms.saturating_add(ttl_secs.saturating_mul(1000)).max(1);
        self.expires_ms.fetch_max(until, Ordering::Relaxed);
    }

    /// A new lease, asked for at `sent_ms`, with `ttl_secs`: its expiry replaces the old one's.
    fn granted(&self, sent_ms: i64, ttl_secs: i64) {
        let until = sent_ms.saturating_add(ttl_secs.saturating_mul(1000)).max(1);
        self.expires_ms.store(until, Ordering::Relaxed);
    }

    /// Whether the registration has expired (it was made once, and not renewed in time,
    /// [`LAPSE_GRACE_MS`] included).
    pub(super) fn lapsed(&self) -> bool {
        let until = self.expires_ms.load(Ordering::Relaxed);
        until != 0 && self.now_ms() > until.saturating_add(LAPSE_GRACE_MS)
    }

    /// Returns once the registration has lapsed (never, for one never made): a renewal
    /// meanwhile moves the moment on.
    pub(super) async fn lapse(&self) {
        loop {
            let until = self.expires_ms.load(Ordering::Relaxed);
            if until == 0 {
                std::future::pending::<()>().await;
            }
            let left = until
                .saturating_add(LAPSE_GRACE_MS)
                .saturating_sub(self.now_ms());
            if left < 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(left.unsigned_abs() + 1)).await;
        }
    }
}

/// A replica: its id and the address other replicas reach it at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replica {
    /// Random per process (a restarted replica is a new one).
    pub id: String,
    /// `host:port` of its gRPC listener.
    pub addr: String,
}

/// This replica's view of who owns what.
#[derive(Debug)]
pub struct Ownership {
    me: Replica,
    /// The live replicas as last read (this one included while its registration is live);
    /// empty until the first read, when every target counts as this replica's.
    live: RwLock<Arc<Vec<Replica>>>,
    /// The lease of this replica's registration (0: none).
    lease: AtomicI64,
    /// Set by [`EtcdStore::deregister`]: the registration task stops.
    stopped: AtomicBool,
    /// Whether calls for other replicas' targets are forwarded to them
    /// ([`crate::store::Owners`]); without, each replica decides what reaches it
    /// and only caches what it owns.
    pub forward: bool,
    /// The replicas' shared secret: this replica's registration is signed with it, and a
    /// registration that does not verify is left out of the owners (`peers`).
    key: Option<crate::peers::PeerKey>,
}

/// The rendezvous score of `replica` for `target`: FNV-1a over both, then splitmix64's
/// finalizer so that close ids spread. Stable across builds and platforms (every replica
/// must compute the same owner), unlike `std`'s hasher.
pub fn score(replica: &str, target: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in replica.bytes().chain([0xff]).chain(target.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

impl Ownership {
    /// A view for a replica reachable at `addr`, with a fresh random id.
    pub fn new(addr: String, forward: bool, key: Option<crate::peers::PeerKey>) -> Self {
        let id = format!("{:016x}", RandomState::new().build_hasher().finish());
        Ownership {
            me: Replica { id, addr },
            live: RwLock::new(Arc::new(Vec::new())),
            lease: AtomicI64::new(0),
            stopped: AtomicBool::new(false),
            forward,
            key,
        }
    }

    /// The value this replica registers: its address, signed when the replicas share a
    /// secret.
    fn registration(&self) -> String {
        match &self.key {
            Some(key) => key.registration(&self.me.id, &self.me.addr),
            None => self.me.addr.clone(),
        }
    }

    /// The replica a registration value stands for: with a secret, only one that verifies
    /// (an entry written by someone without the secret is never an owner, so never forwarded
    /// to); without, the address (before any newline).
    fn replica(&self, id: String, value: &str) -> Option<Replica> {
        let addr = match &self.key {
            Some(key) => {
                let verified = key.verify_registration(&id, value);
                if verified.is_none() {
                    crate::metrics::door_refused("peer", "registration");
                    tracing::warn!(replica = %id, "a replica registration that does not verify with the shared secret: left out");
                }
                verified?
            }
            None => value.split('\n').next().unwrap_or("").to_owned(),
        };
        Some(Replica { id, addr })
    }

    /// This replica.
    pub fn me(&self) -> &Replica {
        &self.me
    }

    /// The live replicas as last read.
    pub fn live(&self) -> Arc<Vec<Replica>> {
        Arc::clone(
            &self
                .live
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    fn set_live(&self, live: Vec<Replica>) {
        *self
            .live
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(live);
    }

    /// The owner of `target` among the live replicas; `None` when it is this replica (or no
    /// registration has been read yet).
    pub fn owner_of(&self, target: &str) -> Option<Replica> {
        let live = self.live();
        let owner = live.iter().max_by_key(|r| score(&r.id, target))?;
        (owner.id != self.me.id).then(|| owner.clone())
    }

    /// Whether this replica owns `target` ([`Self::owner_of`] is `None`).
    pub fn owns(&self, target: &str) -> bool {
        self.owner_of(target).is_none()
    }
}

impl EtcdStore {
    fn replicas_prefix(&self) -> Vec<u8> {
        self.key(&[b"replicas/"])
    }

    /// Registers this replica (reachable at `addr`) and keeps its view of the live replicas
    /// current, in a task of the current runtime, for as long as the store lives. The store's
    /// cache then holds the targets this replica owns.
    /// `forward`: calls for other replicas' targets go to them ([`Ownership::forward`]).
    pub fn start_ownership(
        self: &Arc<Self>,
        addr: String,
        forward: bool,
        key: Option<crate::peers::PeerKey>,
    ) -> Arc<Ownership> {
        let ownership = Arc::new(Ownership::new(addr, forward, key));
        let _ = self.ownership.set(Arc::clone(&ownership));
        let store = Arc::downgrade(self);
        let view = Arc::clone(&ownership);
        tokio::spawn(async move {
            // The lease, and whether its keep-alive stream still runs.
            let mut lease: Option<(i64, Arc<AtomicBool>)> = None;
            loop {
                let Some(store) = store.upgrade() else {
                    return;
                };
                if view.stopped.load(Ordering::Relaxed) {
                    return;
                }
                if lease
                    .as_ref()
                    .is_some_and(|(_, alive)| !alive.load(Ordering::Relaxed))
                {
                    // The keep-alive stream ended: register again.
                    lease = None;
                }
                if lease.is_none() {
                    match store.register(view.me(), view.registration()).await {
                        Ok(l) => {
                            view.lease.store(l.0, Ordering::Relaxed);
                            lease = Some(l);
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot register this replica in etcd")
                        }
                    }
                }
                match store.read_replicas(&view).await {
                    Ok(live) => {
                        if lease.is_some() && !live.iter().any(|r| r.id == view.me().id) {
                            // Our lease expired (a long pause, a partition): register again.
                            if let Some((_, alive)) = lease.take() {
                                alive.store(false, Ordering::Relaxed);
                            }
                        }
                        view.set_live(live);
                    }
                    Err(e) => tracing::debug!(error = %e, "cannot read the replicas"),
                }
                drop(store);
                tokio::time::sleep(POLL).await;
            }
        });
        ownership
    }

    /// Grants a lease, puts this replica's registration under it and keeps it alive (a
    /// keep-alive every [`KEEP_ALIVE`] from a task of its own, so that a slow read of the
    /// registrations never delays one); returns the lease and a flag that turns false when
    /// the keep-alive stream has ended (set it false to end it).
    async fn register(
        &self,
        me: &Replica,
        value: String,
    ) -> Result<(i64, Arc<AtomicBool>), String> {
        let mut lease_client = self.members.lease_client();
        let granted_at = self.registration.now_ms();
        let grant = tokio::time::timeout(
            self.options.request_timeout,
            lease_client.lease_grant(LeaseGrantRequest {
                ttl: LEASE_TTL_SECS,
                id: 0,
            }),
        )
        .await
        .map_err(|_| "lease grant timed out".to_owned())?
        .map_err(|s| s.message().to_owned())?
        .into_inner();
        if !grant.error.is_empty() {
            return Err(grant.error);
        }
        let id = grant.id;
        let registration = Arc::clone(&self.registration);
        let key = self.key(&[b"replicas/", me.id.as_bytes()]);
        let value = value.into_bytes();
        self.members
            .call(|mut kv| {
                let request = PutRequest {
                    key: key.clone(),
                    value: value.clone(),
                    lease: id,
                    ..Default::default()
                };
                async move { kv.put(request).await }
            })
            .await
            .map_err(|e| e.to_string())?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        // etcd answers the stream's headers with its first answer: ask at once.
        let asked = Arc::new(AtomicI64::new(self.registration.now_ms()));
        tx.try_send(LeaseKeepAliveRequest { id })
            .map_err(|e| e.to_string())?;
        let mut responses = tokio::time::timeout(
            self.options.request_timeout,
            lease_client.lease_keep_alive(ReceiverStream::new(rx)),
        )
        .await
        .map_err(|_| "lease keep-alive stream: no answer".to_owned())?
        .map_err(|s| s.message().to_owned())?
        .into_inner();
        registration.granted(granted_at, grant.ttl);
        let alive = Arc::new(AtomicBool::new(true));
        // Ask every KEEP_ALIVE until the stream ends or the registration is given up; a full
        // channel means the stream is not read any more.
        {
            let (alive, asked, registration) = (
                Arc::clone(&alive),
                Arc::clone(&asked),
                Arc::clone(&registration),
            );
            tokio::spawn(async move {
                while alive.load(Ordering::Relaxed) {
                    tokio::time::sleep(KEEP_ALIVE).await;
                    asked.store(registration.now_ms(), Ordering::Relaxed);
                    if tx.try_send(LeaseKeepAliveRequest { id }).is_err() {
                        alive.store(false, Ordering::Relaxed);
                    }
                }
            });
        }
        // Drain the answers, each renewing the registration from when it was asked for; the
        // stream ends when etcd or the member goes away, and the loop registers again.
        {
            let alive = Arc::clone(&alive);
            tokio::spawn(async move {
                while let Ok(Some(answer)) = responses.message().await {
                    if answer.ttl <= 0 || !alive.load(Ordering::Relaxed) {
                        break;
                    }
                    registration.renewed(asked.load(Ordering::Relaxed), answer.ttl);
                }
                alive.store(false, Ordering::Relaxed);
            });
        }
        tracing::info!(replica = %me.id, addr = %me.addr, lease = id, ttl = grant.ttl, "registered this replica in etcd");
        Ok((id, alive))
    }

    /// The live registrations, sorted by id.
    async fn read_replicas(&self, view: &Ownership) -> Result<Vec<Replica>, String> {
        let prefix = self.replicas_prefix();
        let response = self
            .members
            .once(|mut kv| {
                let request = RangeRequest {
                    range_end: prefix_end(&prefix),
                    key: prefix.clone(),
                    ..Default::default()
                };
                async move { kv.range(request).await }
            })
            .await?;
        let mut live: Vec<Replica> = response
            .kvs
            .into_iter()
            .filter_map(|kv| {
                let id = String::from_utf8(kv.key.get(prefix.len()..)?.to_vec()).ok()?;
                let value = String::from_utf8(kv.value).ok()?;
                view.replica(id, &value)
            })
            .collect();
        live.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(live)
    }

    /// Revokes this replica's registration (a clean stop: its targets move at once instead of
    /// after the lease's TTL). Best effort.
    pub async fn deregister(&self) {
        let Some(ownership) = self.ownership.get() else {
            return;
        };
        ownership.stopped.store(true, Ordering::Relaxed);
        let lease = ownership.lease.swap(0, Ordering::Relaxed);
        if lease == 0 {
            return;
        }
        let mut lease_client = self.members.lease_client();
        let _ = tokio::time::timeout(
            self.options.request_timeout,
            lease_client.lease_revoke(LeaseRevokeRequest { id: lease }),
        )
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registration never made never lapses; one renewed with time left has not lapsed;
    /// one whose time ran out has, and `lapse` returns then.
    #[tokio::test]
    async fn a_registration_lapses_only_once_made_and_not_renewed() {
        let r = Registration::new();
        assert!(!r.lapsed());
        assert!(
            tokio::time::timeout(Duration::from_millis(50), r.lapse())
                .await
                .is_err(),
            "a registration never made lapsed"
        );
        r.granted(r.now_ms(), LEASE_TTL_SECS);
        assert!(!r.lapsed());
        // An answer to an older request never moves the expiry back.
        r.renewed(0, 0);
        assert!(!r.lapsed());
        // A new lease without time left: lapsed once the grace has passed.
        r.granted(r.now_ms(), 0);
        assert!(!r.lapsed(), "within the grace");
        tokio::time::timeout(Duration::from_secs(5), r.lapse())
            .await
            .expect("a registration without time left lapses");
        assert!(r.lapsed());
        r.renewed(r.now_ms(), LEASE_TTL_SECS);
        assert!(!r.lapsed(), "renewed again");
    }

    fn replica(id: &str) -> Replica {
        Replica {
            id: id.into(),
            addr: format!("{id}:1"),
        }
    }

    /// Each replica of three owns about a third of the targets; when one leaves, only its
    /// targets move (to the others), and the others' stay where they were.
    #[test]
    fn rendezvous_spreads_targets_and_moves_only_the_leavers() {
        let view = |me: &str, ids: &[&str]| {
            let o = Ownership::new(format!("{me}:1"), true, None);
            let o = Ownership {
                me: replica(me),
                ..o
            };
            o.set_live(ids.iter().map(|id| replica(id)).collect());
            o
        };
        let three = view("a", &["a", "b", "c"]);
        let two = view("a", &["a", "b"]);
        let targets: Vec<String> = (0..3000).map(|i| format!("fleet/{i:05}")).collect();
        let owner = |v: &Ownership, t: &str| v.owner_of(t).map_or("a".to_owned(), |r| r.id);
        let mut counts = std::collections::HashMap::new();
        for t in &targets {
            *counts.entry(owner(&three, t)).or_insert(0) += 1;
        }
        for id in ["a", "b", "c"] {
            let n = counts[id];
            assert!((800..1200).contains(&n), "{id} owns {n} of 3000");
        }
        for t in &targets {
            let before = owner(&three, t);
            if before != "c" {
                assert_eq!(owner(&two, t), before, "{t} moved without need");
            }
        }
        // No view read yet: everything is this replica's.
        let empty = view("a", &[]);
        assert!(targets.iter().all(|t| empty.owns(t)));
    }
}
