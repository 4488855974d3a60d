//! The server layer in front of every gRPC call: load shedding with a bounded queue, the
//! caller's deadline, and the per-request context of `api::context`.
//!
//! Without it, 200 concurrent 5,000-pod Recommends queued without bound (p99 12.5 s) and, with
//! a 2 s client deadline, 93 % of the work was done for callers who had already gone
//! (goodput 37 → 7 calls/s, issue 8). Now:
//!
//! * a call's request body is read whole before the call takes a slot or a place in the
//!   queue, within a memory bound (`max_buffered_request_bytes`; past it a call is refused at
//!   once, never made to wait with its body unread). A cap on the calls reading at once (two
//!   slots' worth) was tried: it sheds more at 10× open-loop load, but clients that retry
//!   without backoff then spend the server on refusals (61 % of capacity at 1,000 streams,
//!   against 81 % without it). On HTTP/2 the unread data of a waiting
//!   call holds the connection's flow-control window: when slots were taken as the headers
//!   arrived, calls waiting in the queue held the window that the running calls' bodies
//!   needed, and just past the limit 5,000-pod Recommends stalled until their deadlines while
//!   the server idled;
//! * at most `max_concurrent_requests` calls of our services run at once; more wait (FIFO, a
//!   tokio `Semaphore`) while their expected wait (calls ahead × mean service time / slots) is
//!   within `max_queue_wait_ms`, and at most `max_queued_requests` of them. A call beyond is
//!   refused at once with RESOURCE_EXHAUSTED, a retry delay in the message and gRFC A6's
//!   `grpc-retry-pushback-ms` (Envoy's and grpc-go's overload answers are the same code). The
//!   queue is bounded by time, so a burst that drains in well under a second is never refused;
//! * a call whose `grpc-timeout` cannot be met is not queued: its expected wait (calls ahead ×
//!   mean service time / slots) plus its own service time already passes the deadline, so it is refused at once, the
//!   caller can retry elsewhere while it still has time (the "deadline-aware admission" of
//!   Google's SRE book, ch. 21-22);
//! * a call that leaves the queue with less time left than a mean call takes is answered
//!   DEADLINE_EXCEEDED without running, and a Recommend or RecordUsage checks the deadline
//!   again before its commit (`api::context::deadline_passed`): work for a caller who gave
//!   up is dropped, not done. (tonic's own `grpc-timeout` timer, outside this layer, drops a
//!   call still waiting when its deadline passes.)
//!
//! * with an authorization file, one identity holds at most half the slots (at least one):
//!   its further calls wait for one of its own, so a tenant's burst, or its long Simulates,
//!   cannot take every slot from the others. (The authentication layer runs first, so
//!   unauthenticated calls never take a slot or have their bodies read.)
//!
//! Health and reflection are not limited: probes must answer under overload.
//!
//! The layer also sets the [`RequestContext`] (limits, deadline, peer) around the call, and
//! answers the protocol errors tonic reports as INTERNAL for a malformed body outside our
//! codec (framing: a truncated message, a bad compression flag, no message; health and
//! reflection bodies that do not decode) with INVALID_ARGUMENT: they are the client's mistake.

use std::{
    future::Future,
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::{
    Status,
    codegen::http::{HeaderMap, HeaderValue, Request as HttpRequest, Response as HttpResponse},
    transport::server::TcpConnectInfo,
};

use crate::{
    api::{
        context::{self, RequestContext},
        status::ApiError,
    },
    config::{Config, Limits},
};

/// Paths of the services the limit applies to.
const LIMITED_PREFIX: &str = "/autoscaled.v1.";

/// The shared state of the limit.
#[derive(Debug)]
struct Shared {
    limits: Arc<Limits>,
    slots: Arc<Semaphore>,
    max_concurrent: usize,
    max_queued: usize,
    /// The longest expected wait a call is queued for.
    max_queue_wait: Duration,
    /// Bytes of request bodies read ahead of their calls' slots (`max_buffered_request_bytes`).
    buffered: Arc<Semaphore>,
    /// A body must arrive within this (`request_body_timeout_ms`): a client trickling it
    /// holds no bytes and no place for longer.
    body_timeout: Duration,
    /// Slots one identity may hold at once: half of them, at least one.
    identity_share: usize,
    /// Each identity's share, while it has calls in flight (entries of idle identities are
    /// dropped as the map grows, so it stays bounded by the callers of the moment).
    identities: std::sync::Mutex<std::collections::HashMap<Arc<str>, Arc<Semaphore>>>,
    queued: AtomicUsize,
    /// Calls whose bodies are being read, ahead of the queue.
    reading: AtomicUsize,
    /// Exponentially weighted mean time a call holds a slot, in microseconds.
    mean_service_us: AtomicU64,
}

impl Shared {
    fn mean_service(&self) -> Duration {
        Duration::from_micros(self.mean_service_us.load(Ordering::Relaxed))
    }

    /// How long the `position`-th call in the queue waits for a slot, by the mean so far.
    fn expected_wait(&self, position: usize) -> Duration {
        self.mean_service()
            .mul_f64(position as f64 / self.max_concurrent as f64)
    }

    fn record(&self, took: Duration) {
        let took = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        // EWMA with weight 1/8, updated without a lock (a lost update only delays the mean).
        let old = self.mean_service_us.load(Ordering::Relaxed);
        let new = if old == 0 {
            took
        } else {
            old - old / 8 + took / 8
        };
        self.mean_service_us.store(new, Ordering::Relaxed);
    }

    fn overloaded(&self, why: &str, position: usize) -> ApiError {
        // The time for the queue ahead to drain, at least 10 ms.
        let retry_after_ms = u64::try_from(self.expected_wait(position).as_millis())
            .unwrap_or(u64::MAX)
            .max(10);
        ApiError::Overloaded {
            message: format!(
                "server overloaded ({why}: {} calls running, {} queued); retry after about {retry_after_ms} ms, with backoff",
                self.max_concurrent,
                self.queued.load(Ordering::Relaxed),
            ),
            retry_after_ms,
        }
    }

    /// A place in `identity`'s share of the slots; waits while the identity holds its share
    /// (within the same deadline rule as the queue).
    async fn identity_place(
        &self,
        identity: &Arc<str>,
        deadline: Option<Instant>,
    ) -> Result<OwnedSemaphorePermit, ApiError> {
        let share = {
            let mut map = self.identities.lock().unwrap_or_else(|e| e.into_inner());
            if map.len() >= 1024 {
                // Idle identities hold every permit and no other reference.
                map.retain(|_, s| {
                    Arc::strong_count(s) > 1 || s.available_permits() < self.identity_share
                });
            }
            Arc::clone(
                map.entry(Arc::clone(identity))
                    .or_insert_with(|| Arc::new(Semaphore::new(self.identity_share))),
            )
        };
        if let Ok(permit) = Arc::clone(&share).try_acquire_owned() {
            return Ok(permit);
        }
        if let Some(deadline) = deadline
            && Instant::now() + self.mean_service() > deadline
        {
            return Err(self.overloaded("the caller's share of the slots is in use", 0));
        }
        let wait = share.acquire_owned();
        match deadline {
            None => Ok(wait.await.expect("never closed")),
            Some(deadline) => tokio::time::timeout_at(deadline.into(), wait)
                .await
                .map(|p| p.expect("never closed"))
                .map_err(|_| {
                    ApiError::DeadlineExceeded(
                        "the call's deadline passed while the caller's other calls held its share of the slots"
                            .to_owned(),
                    )
                }),
        }
    }

    /// The early refusal, when a call's headers arrive: if every slot is busy and the calls
    /// already waiting or being read fill the queue (by count or by expected wait), or leave
    /// no time for the call's deadline, it is refused before its body is read. Refusing is
    /// cheap and closes the stream, which gives its flow-control window back; only calls
    /// that will be queued have their bodies read.
    fn refuse_early(&self, deadline: Option<Instant>) -> Result<(), ApiError> {
        if self.slots.available_permits() > 0 {
            return Ok(());
        }
        let position =
            self.queued.load(Ordering::Relaxed) + self.reading.load(Ordering::Relaxed) + 1;
        self.queue_place(position, deadline)
    }

    /// Whether the `position`-th waiting call may wait: within the count bound, the longest
    /// queue wait and its deadline (the "deadline-aware admission" of the module docs).
    fn queue_place(&self, position: usize, deadline: Option<Instant>) -> Result<(), ApiError> {
        if position > self.max_queued {
            return Err(self.overloaded("queue full", position));
        }
        if self.expected_wait(position) > self.max_queue_wait {
            return Err(
                self.overloaded("the expected wait exceeds the longest queue wait", position)
            );
        }
        if let Some(deadline) = deadline
            && Instant::now() + self.expected_wait(position) + self.mean_service() > deadline
        {
            return Err(self.overloaded("the expected wait exceeds the call's deadline", position));
        }
        Ok(())
    }

    /// A slot for a call with `deadline`, waiting in the queue if there is room.
    async fn admit(&self, deadline: Option<Instant>) -> Result<OwnedSemaphorePermit, ApiError> {
        if let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() {
            return Ok(permit);
        }
        let position = self.queued.fetch_add(1, Ordering::Relaxed) + 1;
        let _queued = Dequeue(&self.queued);
        self.queue_place(position, deadline)?;
        let permit = Arc::clone(&self.slots)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        if let Some(deadline) = deadline
            && Instant::now() + self.mean_service() > deadline
        {
            return Err(ApiError::DeadlineExceeded(
                "the call's deadline passed (or is too close) while it waited for a slot; not served"
                    .to_owned(),
            ));
        }
        Ok(permit)
    }

    /// Reads the whole request body (a unary call's one message) into memory, counted against
    /// the buffered-bytes bound; the permit is held until the call ends. A body larger than
    /// the message limit is not read further: the rest follows unread, and the decoder
    /// refuses it as it always did. Past the memory bound the call is refused at once.
    async fn read_body(
        &self,
        request: HttpRequest<tonic::body::Body>,
    ) -> Result<(HttpRequest<tonic::body::Body>, Option<OwnedSemaphorePermit>), Status> {
        use http_body_util_lite::next_frame;
        let (parts, mut body) = request.into_parts();
        // The message and its 5-byte gRPC frame header.
        let limit = self.limits.max_message_bytes.saturating_add(5);
        // A body declared larger than any message is refused before a byte of it is read
        // (an HTTP/JSON call says its length; gRPC usually does not).
        let declared = parts
            .headers
            .get(tonic::codegen::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|n| n > limit) {
            return Err(Status::from(ApiError::ResourceExhausted {
                field: "request".to_owned(),
                message: format!(
                    "the body is larger than {} bytes (the server's max_message_bytes, --max-message-bytes / AUTOSCALED_MAX_MESSAGE_BYTES)",
                    self.limits.max_message_bytes
                ),
            }));
        }
        let mut chunks = std::collections::VecDeque::new();
        let mut read = 0usize;
        let mut held: Option<OwnedSemaphorePermit> = None;
        let mut rest = None;
        let deadline = tokio::time::Instant::now() + self.body_timeout;
        loop {
            let frame = match tokio::time::timeout_at(deadline, next_frame(&mut body)).await {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(_) => {
                    crate::metrics::door_refused("grpc", "body_timeout");
                    return Err(Status::deadline_exceeded(format!(
                        "the request body did not arrive within {:?} (--request-body-timeout-ms)",
                        self.body_timeout
                    )));
                }
            };
            // The client reset the stream or the connection broke: nobody waits for an answer.
            let frame = frame.map_err(|e| {
                Status::cancelled(format!("the request body ended with an error: {e}"))
            })?;
            let Ok(data) = frame.into_data() else {
                continue; // request trailers: gRPC sends none
            };
            let n = u32::try_from(data.len()).unwrap_or(u32::MAX);
            let permit = Arc::clone(&self.buffered)
                .try_acquire_many_owned(n)
                .map_err(|_| {
                    Status::from(self.overloaded("request bodies in memory at their bound", 0))
                })?;
            match held.as_mut() {
                Some(h) => h.merge(permit),
                None => held = Some(permit),
            }
            read += data.len();
            chunks.push_back(data);
            if read > limit {
                rest = Some(body);
                break;
            }
        }
        let body = tonic::body::Body::new(Buffered { chunks, rest });
        Ok((HttpRequest::from_parts(parts, body), held))
    }
}

/// A request body read ahead: the chunks read, then what was left unread (if anything).
struct Buffered {
    chunks: std::collections::VecDeque<tonic::codegen::Bytes>,
    rest: Option<tonic::body::Body>,
}

impl http_body::Body for Buffered {
    type Data = tonic::codegen::Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if let Some(chunk) = self.chunks.pop_front() {
            return Poll::Ready(Some(Ok(http_body::Frame::data(chunk))));
        }
        match self.rest.as_mut() {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty() && self.rest.as_ref().is_none_or(|r| r.is_end_stream())
    }
}

/// `BodyExt::frame` without the dependency: the next frame of a body.
mod http_body_util_lite {
    use std::{future::poll_fn, pin::Pin};

    pub(super) async fn next_frame<B: http_body::Body + Unpin>(
        body: &mut B,
    ) -> Option<Result<http_body::Frame<B::Data>, B::Error>> {
        poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await
    }
}

/// Decrements the queue length when a queued call leaves it (served, refused or cancelled).
struct Dequeue<'a>(&'a AtomicUsize);

impl Drop for Dequeue<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The layer, built once per server from the configuration.
#[derive(Clone, Debug)]
pub(crate) struct OverloadLayer {
    shared: Arc<Shared>,
}

impl OverloadLayer {
    /// `config.max_concurrent_requests` slots, `config.max_queued_requests` waiting,
    /// `config.limits` for the codec.
    pub(crate) fn new(config: &Config) -> Self {
        OverloadLayer {
            shared: Arc::new(Shared {
                limits: Arc::new(config.limits.clone()),
                slots: Arc::new(Semaphore::new(config.max_concurrent_requests)),
                max_concurrent: config.max_concurrent_requests,
                max_queued: config.max_queued_requests,
                max_queue_wait: config.max_queue_wait,
                buffered: Arc::new(Semaphore::new(config.max_buffered_request_bytes)),
                body_timeout: config.doors.body_timeout,
                identity_share: (config.max_concurrent_requests / 2).max(1),
                identities: std::sync::Mutex::new(std::collections::HashMap::new()),
                queued: AtomicUsize::new(0),
                reading: AtomicUsize::new(0),
                mean_service_us: AtomicU64::new(0),
            }),
        }
    }
}

impl<S> tower::Layer<S> for OverloadLayer {
    type Service = Overload<S>;

    fn layer(&self, inner: S) -> Overload<S> {
        Overload {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// See the module documentation.
#[derive(Clone, Debug)]
pub(crate) struct Overload<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> tower::Service<HttpRequest<tonic::body::Body>> for Overload<S>
where
    S: tower::Service<HttpRequest<tonic::body::Body>, Response = HttpResponse<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: HttpRequest<tonic::body::Body>) -> Self::Future {
        let path = request.uri().path().to_owned();
        let limited = path.starts_with(LIMITED_PREFIX);
        let deadline = grpc_timeout(request.headers()).map(|t| Instant::now() + t);
        let peer: Option<SocketAddr> = request
            .extensions()
            .get::<TcpConnectInfo>()
            .and_then(TcpConnectInfo::remote_addr);
        // Only under an authorization file (a policy is attached): without one every caller
        // is anonymous and shares the whole server.
        let identity: Option<Arc<str>> = request
            .extensions()
            .get::<crate::auth::Caller>()
            .filter(|c| c.policy.is_some())
            .and_then(|c| c.identity.clone());
        let context = RequestContext {
            limits: Arc::clone(&self.shared.limits),
            deadline,
            peer,
        };
        // The clone-and-swap of tower's docs: `self.inner` was polled ready, the clone was not.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            // Refused early (headers only), or the body first, then the slot: see the module
            // documentation.
            if limited && let Err(e) = shared.refuse_early(deadline) {
                tracing::debug!(peer = ?peer, error = %e, "call refused");
                return Ok(Status::from(e).into_http());
            }
            let (request, _buffered) = if limited {
                let _reading = {
                    shared.reading.fetch_add(1, Ordering::Relaxed);
                    Dequeue(&shared.reading)
                };
                match shared.read_body(request).await {
                    Ok(read) => read,
                    Err(status) => {
                        tracing::debug!(peer = ?peer, error = %status.message(), "call refused");
                        return Ok(status.into_http());
                    }
                }
            } else {
                (request, None)
            };
            let _place = match (&identity, limited) {
                (Some(identity), true) => match shared.identity_place(identity, deadline).await {
                    Ok(place) => Some(place),
                    Err(e) => {
                        tracing::debug!(peer = ?peer, error = %e, "call refused");
                        return Ok(Status::from(e).into_http());
                    }
                },
                _ => None,
            };
            let _slot = if limited {
                match shared.admit(deadline).await {
                    Ok(slot) => Some(slot),
                    Err(e) => {
                        tracing::debug!(peer = ?peer, error = %e, "call refused");
                        return Ok(Status::from(e).into_http());
                    }
                }
            } else {
                None
            };
            let started = Instant::now();
            let response = context::scope(context, inner.call(request)).await?;
            if limited {
                shared.record(started.elapsed());
            }
            Ok(client_protocol_errors_are_invalid_argument(
                response, peer, &path,
            ))
        })
    }
}

/// `grpc-timeout` (gRPC over HTTP/2: at most 8 digits and a unit H, M, S, m, u or n).
fn grpc_timeout(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    if value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The (percent-encoded) starts of the INTERNAL messages tonic and tonic-prost give for a
/// request body the client got wrong (`tonic::codec::decode`, `tonic::server::Grpc::unary`,
/// `tonic_prost::codec::from_decode_error`).
const CLIENT_PROTOCOL_ERRORS: &[&str] = &[
    "failed%20to%20decode%20Protobuf%20message",
    "protocol%20error:",
    "Unexpected%20EOF%20decoding%20stream",
    "Missing%20request%20message",
];

/// Streaming services whose request errors travel in the trailers (server reflection: a
/// bidirectional stream answers its headers before it reads the first request).
const STREAMING_PREFIX: &str = "/grpc.reflection.";

/// INTERNAL → INVALID_ARGUMENT for [`CLIENT_PROTOCOL_ERRORS`], in the headers of a
/// trailers-only response or, for [`STREAMING_PREFIX`] services, in the trailers.
fn client_protocol_errors_are_invalid_argument(
    mut response: HttpResponse<tonic::body::Body>,
    peer: Option<SocketAddr>,
    path: &str,
) -> HttpResponse<tonic::body::Body> {
    if remap(response.headers_mut(), peer) || !path.starts_with(STREAMING_PREFIX) {
        return response;
    }
    response.map(|inner| tonic::body::Body::new(RemapTrailers { inner, peer }))
}

/// Rewrites a client protocol error's status in `headers`; true if it did.
fn remap(headers: &mut HeaderMap, peer: Option<SocketAddr>) -> bool {
    let client_error = headers.get("grpc-status").is_some_and(|s| s == "13")
        && headers
            .get("grpc-message")
            .and_then(|m| m.to_str().ok())
            .is_some_and(|m| CLIENT_PROTOCOL_ERRORS.iter().any(|p| m.starts_with(p)));
    if client_error {
        tracing::debug!(peer = ?peer, message = ?headers.get("grpc-message"), "malformed request body");
        headers.insert("grpc-status", HeaderValue::from_static("3"));
    }
    client_error
}

/// A response body whose trailers go through [`remap`].
struct RemapTrailers {
    inner: tonic::body::Body,
    peer: Option<SocketAddr>,
}

impl http_body::Body for RemapTrailers {
    type Data = tonic::codegen::Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let peer = self.peer;
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(match frame.into_trailers() {
                Ok(mut trailers) => {
                    remap(&mut trailers, peer);
                    http_body::Frame::trailers(trailers)
                }
                Err(frame) => frame,
            }))),
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_units() {
        let parse = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert("grpc-timeout", HeaderValue::from_str(v).unwrap());
            grpc_timeout(&h)
        };
        assert_eq!(parse("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse("150m"), Some(Duration::from_millis(150)));
        assert_eq!(parse("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse("123456789S"), None);
        assert_eq!(parse("S"), None);
        assert_eq!(parse("5x"), None);
    }

    fn shared(max_concurrent: usize, max_queued: usize) -> Arc<Shared> {
        let mut config = Config::with_data_dir("unused");
        config.max_concurrent_requests = max_concurrent;
        config.max_queued_requests = max_queued;
        OverloadLayer::new(&config).shared
    }

    #[tokio::test]
    async fn a_full_queue_sheds_with_a_retry_delay() {
        let shared = shared(1, 1);
        shared.record(Duration::from_millis(100));
        let running = shared.admit(None).await.unwrap();
        let queued = {
            let shared = Arc::clone(&shared);
            tokio::spawn(async move { shared.admit(None).await.map(drop) })
        };
        while shared.queued.load(Ordering::Relaxed) == 0 {
            tokio::task::yield_now().await;
        }
        let refused = shared.admit(None).await.unwrap_err();
        let status = Status::from(refused);
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(status.message().contains("retry after about"), "{status:?}");
        assert!(status.metadata().get("grpc-retry-pushback-ms").is_some());
        drop(running);
        queued.await.unwrap().unwrap();
        assert_eq!(shared.queued.load(Ordering::Relaxed), 0);
    }

    /// One identity holds at most half the slots: its next call waits for one of its own
    /// while another identity's call is admitted at once.
    #[tokio::test]
    async fn one_identity_cannot_take_every_slot() {
        let shared = shared(2, 10);
        let (a, b): (Arc<str>, Arc<str>) = ("team-a".into(), "team-b".into());
        let a_place = shared.identity_place(&a, None).await.unwrap();
        let a_slot = shared.admit(None).await.unwrap();
        let a_again = {
            let (shared, a) = (Arc::clone(&shared), Arc::clone(&a));
            tokio::spawn(async move { shared.identity_place(&a, None).await.map(drop) })
        };
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!a_again.is_finished(), "team-a took more than its share");
        // team-b: at once, and a slot is free for it.
        let b_place = shared.identity_place(&b, None).await.unwrap();
        let b_slot = Arc::clone(&shared.slots).try_acquire_owned().unwrap();
        // A deadline too close for a wait is refused, not queued.
        let soon = Instant::now();
        assert!(shared.identity_place(&a, Some(soon)).await.is_err());
        drop((a_place, a_slot));
        a_again.await.unwrap().unwrap();
        drop((b_place, b_slot));
    }

    #[tokio::test]
    async fn the_queue_is_bounded_by_the_expected_wait() {
        // One slot, 100 ms a call, a 1 s bound: the 10th waiting call (1 s) is queued, the
        // 11th (1.1 s) is refused at once, whatever the count bound.
        let shared = shared(1, 1000);
        shared.record(Duration::from_millis(100));
        let running = shared.admit(None).await.unwrap();
        let waiting: Vec<_> = (0..10)
            .map(|_| {
                let shared = Arc::clone(&shared);
                tokio::spawn(async move { shared.admit(None).await.map(drop) })
            })
            .collect();
        while shared.queued.load(Ordering::Relaxed) < 10 {
            tokio::task::yield_now().await;
        }
        let status = Status::from(shared.admit(None).await.unwrap_err());
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
        assert!(
            status.message().contains("longest queue wait"),
            "{status:?}"
        );
        drop(running);
        for w in waiting {
            w.await.unwrap().unwrap();
        }
    }

    #[tokio::test]
    async fn a_deadline_shorter_than_the_wait_is_refused_at_once() {
        let shared = shared(1, 10);
        shared.record(Duration::from_secs(1));
        let _running = shared.admit(None).await.unwrap();
        let soon = Instant::now() + Duration::from_millis(100);
        let status = Status::from(shared.admit(Some(soon)).await.unwrap_err());
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
        assert!(status.message().contains("deadline"), "{status:?}");
    }
}
