//! Writes of a target made by the replica that owns it: a `Recommend` or `ReportScale` for a
//! target another replica owns (`store::Owners`: etcd with several replicas) is sent on
//! to that replica with the caller's credentials and deadline, and its answer returned as is.
//! The owner decides from memory without reading etcd; the replicas do not overwrite each
//! other's targets.
//!
//! Handled here instead, as before ownership: dry runs (nothing is written), calls another
//! replica already forwarded (their views of the owners may differ for a moment: no second
//! hop), and calls whose owner cannot be connected to (a replica that stopped and whose lease
//! has not expired yet): every commit is guarded by the state's revision, so deciding here is
//! always correct, only slower. A call the owner received and did not answer (killed
//! mid-call) fails as it would have had the caller sent it there itself.
//!
//! A forwarded call is signed with the deployment's shared secret (`peers`): the owner
//! accepts it as forwarded (no second hop, the caller's address and certificate identity in
//! its audit) only when the marker verifies. Without a secret nothing is forwarded. Under TLS
//! the hop is TLS too: the owner's certificate checked against `--peer-ca` (or the client CA),
//! this replica's own certificate presented as its client certificate.

use std::{collections::HashMap, sync::Mutex, time::Duration};

use tonic::{
    Code, Request, Response, Status,
    metadata::{MetadataMap, MetadataValue},
    transport::{Channel, Endpoint},
};

use crate::{
    pb::v1::horizontal_autoscaler_client::HorizontalAutoscalerClient,
    peers::{FORWARDED, FORWARDED_FOR, FORWARDED_IDENTITY, Forwarded, PeerKey},
};
/// On a forwarded call's answer: the owner's address, so that a client can send the target's
/// next calls there itself and save the hop (the etcd bench's client does).
pub const OWNER: &str = "autoscaled-owner";

/// The caller's headers a forwarded call keeps: who it is. (How long it may take is what is
/// left of the caller's deadline: [`Forwarder::onward`].)
const KEPT: &[&str] = &["authorization"];

/// The bound on a forwarded call whose caller set no deadline.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How this replica reaches the others: the secret that signs what it forwards, and, under
/// TLS, the hop's TLS settings.
#[derive(Clone, Debug)]
pub(crate) struct PeerLink {
    pub(crate) key: PeerKey,
    /// `None`: plaintext hops.
    pub(crate) tls: Option<tonic::transport::ClientTlsConfig>,
}

/// One lazily connected client per owner address; nothing is forwarded without a
/// [`PeerLink`].
#[derive(Default)]
pub(crate) struct Forwarder {
    link: Option<PeerLink>,
    clients: Mutex<HashMap<String, HorizontalAutoscalerClient<Channel>>>,
}

impl Forwarder {
    /// A forwarder over `link`.
    pub(crate) fn new(link: Option<PeerLink>) -> Self {
        Forwarder {
            link,
            clients: Mutex::default(),
        }
    }

    fn client(&self, owner: &str) -> Option<HorizontalAutoscalerClient<Channel>> {
        let link = self.link.as_ref()?;
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = clients.get(owner) {
            return Some(c.clone());
        }
        let scheme = if link.tls.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{owner}"))
            .ok()?
            .connect_timeout(Duration::from_millis(500))
            .tcp_nodelay(true);
        if let Some(tls) = &link.tls {
            endpoint = endpoint.tls_config(tls.clone()).ok()?;
        }
        // The owner is a verified replica whose answers its own limits bound, as they would
        // be had the caller called it; tonic's 4 MiB default could refuse a large batch's
        // answer after the owner committed every decision in it.
        let client = HorizontalAutoscalerClient::new(endpoint.connect_lazy())
            .max_decoding_message_size(usize::MAX);
        clients.insert(owner.to_owned(), client.clone());
        Some(client)
    }

    /// The request to send on: the message, the kept headers, the signed mark with the
    /// caller's address (and certificate identity, when no token says who it is), and what is
    /// left of the caller's deadline (a batch's requests sent alone after their owner refused
    /// the batch have less than the caller gave); a caller without a deadline gets
    /// [`DEFAULT_TIMEOUT`] for the hop.
    fn onward<T: Clone>(key: &PeerKey, path: &str, request: &Request<T>) -> Request<T> {
        let mut onward = Request::new(request.get_ref().clone());
        let left = crate::api::context::with(|c| c.deadline)
            .flatten()
            .map(|d| d.saturating_duration_since(std::time::Instant::now()));
        onward.set_timeout(left.unwrap_or(DEFAULT_TIMEOUT));
        copy_kept(request.metadata(), onward.metadata_mut());
        let caller = request.extensions().get::<crate::auth::Caller>();
        let remote = caller.and_then(|c| c.remote);
        let identity = caller
            .and_then(|c| c.identity.as_deref())
            .filter(|_| !request.metadata().contains_key("authorization"));
        let marker = key.marker(path, remote, identity, crate::peers::now_ms());
        let metadata = onward.metadata_mut();
        if let Ok(v) = marker.parse() {
            metadata.insert(FORWARDED, v);
        }
        if let Some(v) = remote.and_then(|r| r.to_string().parse().ok()) {
            metadata.insert(FORWARDED_FOR, v);
        }
        if let Some(v) = identity.and_then(|i| MetadataValue::try_from(i).ok()) {
            metadata.insert(FORWARDED_IDENTITY, v);
        }
        onward
    }

    /// The owner's answer to a call to `path` this replica received, or `None` when it is to
    /// be handled here (see the module).
    pub(crate) async fn call<T, R, F, Fut>(
        &self,
        owner: Option<String>,
        path: &str,
        request: &Request<T>,
        send: F,
    ) -> Option<Result<Response<R>, Status>>
    where
        T: Clone + Writes,
        R: Writes,
        F: FnOnce(HorizontalAutoscalerClient<Channel>, Request<T>) -> Fut,
        Fut: Future<Output = Result<Response<R>, Status>>,
    {
        // Forwarded by another replica (the marker verified, `auth::layer`): no second hop.
        if request.extensions().get::<Forwarded>().is_some() {
            return None;
        }
        let key = &self.link.as_ref()?.key;
        // An owner without an address (it listens on every interface and was not told its
        // own): decided here.
        let owner = owner.filter(|o| !o.is_empty())?;
        let client = self.client(&owner)?;
        // Boxed: a client call's future is several KiB, which every Recommend's future
        // would otherwise carry (and copy each time it moves), forwarded or not.
        match Box::pin(send(client, Self::onward(key, path, request))).await {
            Ok(mut response) => {
                // A batch's requests the owner declined are decided here (`recommend_owned_by`).
                let writes = request.get_ref().writes();
                let declined = response.get_ref().declined().min(writes);
                crate::metrics::forwarded(true, writes - declined);
                crate::metrics::forwarded(false, declined);
                if let Ok(value) = owner.parse() {
                    response.metadata_mut().insert(OWNER, value);
                }
                Some(Ok(response))
            }
            // The call never reached the owner (it stopped, or cannot be reached), or the
            // owner declined it untouched (cut off from etcd): decided here. A call that did
            // reach it may have been committed there, so any other failure (the owner killed
            // mid-call) is the caller's answer, as it would be had the caller called the owner
            // itself: deciding again here could log it twice.
            Err(status) if never_sent(&status) || crate::api::status::declined(&status) => {
                crate::metrics::forwarded(false, request.get_ref().writes());
                tracing::debug!(%owner, error = %status.message(), "owner unreachable or declined: deciding here");
                None
            }
            Err(status) => Some(Err(status)),
        }
    }
}

/// What a forwarded call counts in `autoscaled_hpa_forwarded_total`: the writes its request
/// carries (a batch's requests each count, as they would have as calls of their own), of
/// which its answer says how many the owner declined untouched (decided here instead).
pub(crate) trait Writes {
    fn writes(&self) -> u64 {
        1
    }
    fn declined(&self) -> u64 {
        0
    }
}

impl Writes for crate::pb::v1::RecommendRequest {}
impl Writes for crate::pb::v1::RecommendResponse {}
impl Writes for crate::pb::v1::ReportScaleRequest {}
impl Writes for crate::pb::v1::ReportScaleResponse {}

impl Writes for crate::pb::v1::RecommendBatchRequest {
    fn writes(&self) -> u64 {
        self.requests.len() as u64
    }
}

impl Writes for crate::pb::v1::RecommendBatchResponse {
    fn declined(&self) -> u64 {
        use crate::pb::v1::recommend_batch_result::Result;
        let declined = |r: &&crate::pb::v1::RecommendBatchResult| matches!(&r.result, Some(Result::Error(e)) if e.declined);
        self.results.iter().filter(declined).count() as u64
    }
}

/// The connection to the owner could not be made: the request was never sent.
fn never_sent(status: &Status) -> bool {
    if status.code() != Code::Unavailable {
        return false;
    }
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(status);
    while let Some(e) = source {
        if format!("{e:?}").starts_with("ConnectError") {
            return true;
        }
        source = e.source();
    }
    false
}

fn copy_kept(from: &MetadataMap, to: &mut MetadataMap) {
    for name in KEPT {
        if let Some(v) = from.get(*name) {
            to.insert(*name, v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::Arc,
        time::{Duration, Instant},
    };

    use super::*;
    use crate::api::context::{self, RequestContext};

    fn timeout_of<T>(request: &Request<T>) -> Option<String> {
        let value = request.metadata().get("grpc-timeout")?;
        Some(value.to_str().ok()?.to_owned())
    }

    /// The hop gets what is left of the caller's deadline, not the `grpc-timeout` it came with
    /// (a batch's requests sent alone after a refused batch have spent some of it), and the
    /// default bound without one.
    #[tokio::test]
    async fn a_forwarded_call_carries_what_is_left_of_the_deadline() {
        let key = PeerKey::new(b"a secret of the test");
        let mut request = Request::new(crate::pb::v1::RecommendRequest::default());
        request.set_timeout(Duration::from_secs(10));
        let context = RequestContext {
            limits: Arc::default(),
            deadline: Some(Instant::now() + Duration::from_millis(1500)),
            peer: None,
        };
        let onward =
            context::scope(context, async { Forwarder::onward(&key, "/p", &request) }).await;
        let left: u64 = timeout_of(&onward)
            .and_then(|t| t.strip_suffix('u').map(str::to_owned))
            .and_then(|t| t.parse().ok())
            .expect("a timeout in microseconds");
        assert!((1_000_000..=1_500_000).contains(&left), "{left} µs");
        // Outside a call with a deadline: the default bound.
        let onward = Forwarder::onward(&key, "/p", &Request::new(()));
        assert_eq!(timeout_of(&onward).as_deref(), Some("30000000u"));
    }
}
