//! Group commit on etcd: commits of different targets that arrive while transactions are in
//! flight (at most [`MAX_TXNS_IN_FLIGHT`]) go together in the next one, within etcd's limits (`--max-txn-ops`,
//! `--max-request-bytes`); after a transport failure each commit is read back to learn whether
//! it was applied.

use std::{collections::VecDeque, sync::Arc};

use tokio::sync::{mpsc, oneshot};

use super::{
    MAX_ATTEMPTS, MAX_BATCH_BYTES, MAX_BATCH_OPS, MAX_RESENDS,
    members::{Members, etcd_error},
    ownership::Registration,
    pb::{
        Compare, RangeRequest, RequestOp, TxnRequest,
        compare::{CompareResult, CompareTarget, TargetUnion},
        request_op::Request as Op,
        response_op::Response as OpResponse,
    },
};
use crate::store::StoreError;

/// One commit waiting for the batcher: its guard, its operations, and the state value it
/// writes (to recognise it after a transport failure).
pub(super) struct Pending {
    pub(super) state_key: Vec<u8>,
    pub(super) state_value: Vec<u8>,
    pub(super) expected: i64,
    pub(super) ops: Vec<RequestOp>,
    pub(super) bytes: usize,
    pub(super) target: String,
    pub(super) attempts: u32,
    /// Sends again after a batch failed on another target's guard (at most [`MAX_RESENDS`]).
    pub(super) resends: u32,
    /// The state key's new `mod_revision` once etcd applied the commit.
    pub(super) done: oneshot::Sender<Result<i64, StoreError>>,
    /// Another key the commit writes (a scaling group's record, in `ops`) and the
    /// `mod_revision` it must still have. Two commits guarding the same key never share a
    /// transaction: the second would build on what the first replaces.
    pub(super) guard: Option<(Vec<u8>, i64)>,
}

impl Pending {
    fn compares(&self) -> impl Iterator<Item = (&Vec<u8>, i64)> {
        std::iter::once((&self.state_key, self.expected))
            .chain(self.guard.as_ref().map(|(k, r)| (k, *r)))
    }
}

/// Transactions in flight at once: one. etcd's cost is mostly per transaction (a Raft
/// proposal, its fsync on a quorum, the apply), so the commits that arrive while one is in flight
/// wait for it and go together in the next. `cargo bench --bench etcd_load` (16 in flight, one
/// run each on the 2-core machine) counted etcd's transactions per decision and the
/// throughput: with 4 in flight 0.39 to 0.82 transactions per decision (1 to 3 replicas on 3
/// members) and 1,461, 1,211 and 956 decisions/s; with 2, 0.23 to 0.57 and 1,621, 1,088 and
/// 1,021; with 1, 0.15 to 0.39 and 2,152, 1,531 and 1,376. A target has at most one commit
/// pending (the API serializes a target's calls).
pub(super) const MAX_TXNS_IN_FLIGHT: usize = 1;

/// Sends the queued commits, batching those that arrive while transactions are in flight.
pub(super) async fn batcher(
    members: Arc<Members>,
    registration: Arc<Registration>,
    mut rx: mpsc::UnboundedReceiver<Pending>,
) {
    let mut queue: VecDeque<Pending> = VecDeque::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_TXNS_IN_FLIGHT));
    // Commits a batch gives back (not applied, not conflicting), sent again first.
    let (again_tx, mut again_rx) = mpsc::unbounded_channel::<Vec<Pending>>();
    let mut open = true;
    loop {
        if queue.is_empty() {
            tokio::select! {
                p = rx.recv(), if open => match p {
                    Some(p) => queue.push_back(p),
                    None => open = false,
                },
                Some(again) = again_rx.recv() => {
                    for p in again.into_iter().rev() {
                        queue.push_front(p);
                    }
                }
            }
            if queue.is_empty() {
                if !open && slots.available_permits() == MAX_TXNS_IN_FLIGHT {
                    return;
                }
                continue;
            }
        }
        // Wait for a slot; what arrives meanwhile joins this batch.
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        while let Ok(again) = again_rx.try_recv() {
            for p in again.into_iter().rev() {
                queue.push_front(p);
            }
        }
        while let Ok(p) = rx.try_recv() {
            queue.push_back(p);
        }
        let mut batch: Vec<Pending> = Vec::new();
        let mut bytes = 0;
        let mut ops = 0;
        while let Some(p) = queue.front() {
            let guarded_twice = p.guard.as_ref().is_some_and(|(k, _)| {
                batch
                    .iter()
                    .any(|b| b.guard.as_ref().is_some_and(|(g, _)| g == k))
            });
            if !batch.is_empty()
                && (guarded_twice
                    || ops + p.ops.len() > MAX_BATCH_OPS
                    || bytes + p.bytes > MAX_BATCH_BYTES)
            {
                break;
            }
            bytes += p.bytes;
            ops += p.ops.len();
            batch.extend(queue.pop_front());
        }
        let (members, registration) = (Arc::clone(&members), Arc::clone(&registration));
        let again_tx = again_tx.clone();
        tokio::spawn(async move {
            let again = send_batch(&members, &registration, batch).await;
            if !again.is_empty() {
                let _ = again_tx.send(again);
            }
            drop(slot);
        });
    }
}

/// Sends one batch; returns the commits to send again (not applied, not conflicting).
async fn send_batch(
    members: &Members,
    registration: &Registration,
    batch: Vec<Pending>,
) -> Vec<Pending> {
    // Lapsed before anything was sent: declined, nothing written (the caller's replica, or
    // the one that forwarded the call, may decide it elsewhere).
    if registration.lapsed() {
        for p in batch {
            let _ = p.done.send(Err(StoreError::Lapsed));
        }
        return Vec::new();
    }
    let mut request = TxnRequest::default();
    for p in &batch {
        for (key, revision) in p.compares() {
            request.compare.push(Compare {
                result: CompareResult::Equal as i32,
                target: CompareTarget::Mod as i32,
                key: key.clone(),
                target_union: Some(TargetUnion::ModRevision(revision)),
                range_end: vec![],
            });
            request.failure.push(RequestOp {
                request: Some(Op::RequestRange(RangeRequest {
                    key: key.clone(),
                    keys_only: true,
                    ..Default::default()
                })),
            });
        }
        request.success.extend(p.ops.iter().cloned());
    }
    // A replica whose registration lapses meanwhile stops waiting: the other replicas own its
    // targets by then, and its callers (a replica that forwarded the call among them) learn
    // at once that this commit is not acknowledged.
    let result = tokio::select! {
        biased;
        result = members.once(|mut kv| async move { kv.txn(request).await }) => result,
        () = registration.lapse() => Err("no answer before this replica's registration lapsed".to_owned()),
    };
    let mut again = Vec::new();
    match result {
        Ok(response) if response.succeeded => {
            // Every key the transaction put has its revision.
            let revision = response.header.map_or(0, |h| h.revision);
            for p in batch {
                let _ = p.done.send(Ok(revision));
            }
        }
        Ok(response) => {
            // Some guard failed: the failure branch read every guarded key's revision, in
            // the order of the compares.
            let mut now = response.responses.into_iter().map(|r| match r.response {
                Some(OpResponse::ResponseRange(range)) => {
                    range.kvs.first().map_or(0, |kv| kv.mod_revision)
                }
                _ => -1,
            });
            for mut p in batch {
                let read: Vec<i64> = now.by_ref().take(p.compares().count()).collect();
                let unchanged = p.compares().map(|(_, expected)| expected).eq(read);
                if unchanged && p.resends + 1 < MAX_RESENDS {
                    p.resends += 1;
                    again.push(p);
                } else {
                    let _ = p.done.send(Err(StoreError::Conflict { key: p.target }));
                }
            }
        }
        Err(message) => {
            // Applied or not? Read each target back, unless the registration lapses first
            // (cut off from etcd: the read-back would wait out its tries too). Then not
            // acknowledged, outcome unknown.
            for mut p in batch {
                let resolved = tokio::select! {
                    biased;
                    resolved = resolve(members, &p) => resolved,
                    () = registration.lapse() => Err(etcd_error(
                        "this replica's registration lapsed",
                        "no answer from etcd",
                    )),
                };
                match resolved {
                    Ok(Resolved::Applied(revision)) => {
                        let _ = p.done.send(Ok(revision));
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
    /// With the state key's revision.
    Applied(i64),
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
        Ok(Resolved::Applied(state_rev))
    } else if state_rev == p.expected {
        Ok(Resolved::NotApplied)
    } else {
        Ok(Resolved::Changed)
    }
}
