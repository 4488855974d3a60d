//! Failover between the etcd members: one lazily connected client per member, the one in
//! use, and the two ways of sending a request (once, for a transaction that must not be
//! repeated blindly; or member after member, for an idempotent one).

use std::{
    future::Future,
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use tonic::transport::Channel;

use super::pb::{TxnRequest, TxnResponse, kv_client::KvClient, lease_client::LeaseClient};
use crate::store::StoreError;

/// One lazily connected client per member, and the one in use. A request that fails in
/// transport (member killed, partitioned, no leader, no answer within the per-try timeout)
/// moves to the next member. tonic's `Channel::balance_list` was not used: after a member is
/// SIGKILLed it kept routing calls to it (they hung until our timeout), so decisions stalled.
pub(super) struct Members {
    pub(super) clients: Vec<KvClient<Channel>>,
    /// The same members' channels, for the other services (leases).
    pub(super) channels: Vec<Channel>,
    pub(super) current: AtomicUsize,
    pub(super) per_try: Duration,
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
    /// The Lease service of the member in use.
    pub(super) fn lease_client(&self) -> LeaseClient<Channel> {
        let i = self.current.load(Ordering::Relaxed) % self.channels.len();
        LeaseClient::new(self.channels[i].clone())
    }

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
    pub(super) async fn once<T, F, Fut>(&self, op: F) -> Result<T, String>
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
    pub(super) async fn call<T, F, Fut>(&self, op: F) -> Result<T, StoreError>
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

impl Members {
    /// [`Self::call`] with a transaction whose repetition is harmless (its guards make a
    /// repeat fail or do nothing twice).
    pub(super) async fn txn(&self, request: TxnRequest) -> Result<TxnResponse, StoreError> {
        self.call(|mut kv| {
            let request = request.clone();
            async move { kv.txn(request).await }
        })
        .await
    }
}

pub(super) fn etcd_error(context: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Etcd(format!("{context}: {e}"))
}
