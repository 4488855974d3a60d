//! The doors of the server, and what each is held to, in one place: the main listener
//! (gRPC over HTTP/2, and HTTP/JSON over HTTP/1.1 or h2c), the admin listener (metrics,
//! probes, the console) and the health-only listener.
//!
//! Per call, every door's requests pass the same code: the main listener's gRPC and Connect
//! calls the same tower stack (`server`: request metrics and refusal log, authentication,
//! load shedding with the buffered-bytes bound and the body timeout, wire limits), the
//! console's API calls that stack too (`console`). Per connection, every listener's
//! connections are accepted here ([`accept`]), under the limits of [`DoorLimits`]:
//!
//! * **a connection cap**: at the cap, the connection that has gone longest without any
//!   progress (an idle keep-alive connection, a peer that stopped reading) is closed for the
//!   new one; only when every connection made progress in the last [`EVICT_IDLE`] is the new
//!   connection refused. Stalled connections cannot lock others out (64 sockets that never
//!   read their pipelined `/metrics` answers held every admin slot for as long as they
//!   stayed);
//! * **a write timeout**: a write that makes no progress for `write_timeout` (the peer does
//!   not read) closes the connection;
//! * **header and body timeouts**: hyper's header read timeout (HTTP/1.1, idle keep-alive
//!   included) and the load shedding's body timeout (`overload`; the console's login form has
//!   its own).
//!
//! [`LIMITS`] lists every limit of every door, for the documentation and the tests that
//! generate one check per limit per door (`tests/doors.rs`).

use std::{
    collections::HashMap,
    io,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    task::{Context, Poll, Waker},
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::mpsc,
};
use tokio_stream::wrappers::ReceiverStream;

use crate::config::Config;

/// How long a connection must have gone without progress before a new connection at the cap
/// closes it.
pub(crate) const EVICT_IDLE: Duration = Duration::from_millis(250);

/// The connection limits of one door.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DoorLimits {
    /// The door's name, for the logs and metrics (`grpc`, `admin`, `health`).
    pub(crate) name: &'static str,
    /// Connections open at once.
    pub(crate) max_connections: usize,
    /// A write without progress for this long closes the connection.
    pub(crate) write_timeout: Duration,
    /// HTTP/1.1 request headers (and an idle keep-alive connection's next request) must
    /// arrive within this.
    pub(crate) header_timeout: Duration,
    /// A request body must arrive within this.
    pub(crate) body_timeout: Duration,
}

/// Connections of the admin listener at once.
pub(crate) const ADMIN_CONNECTIONS: usize = 64;
/// Connections of the health-only listener at once (probes open one each, and close it).
pub(crate) const HEALTH_CONNECTIONS: usize = 256;
/// Time allowed for the admin listener's request headers and bodies.
pub(crate) const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Time allowed for HTTP/1.1 request headers on the main listener (and for an idle
/// keep-alive connection's next request): hyper's, which tonic does not let us set.
pub(crate) const GRPC_HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// HTTP/2 streams one connection of the main listener may have open at once (tonic would
/// leave it unbounded).
pub(crate) const STREAMS_PER_CONNECTION: u32 = 1024;

/// The three doors' limits, from the configuration.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Doors {
    pub(crate) grpc: DoorLimits,
    pub(crate) admin: DoorLimits,
    pub(crate) health: DoorLimits,
}

impl Doors {
    pub(crate) fn of(config: &Config) -> Doors {
        let d = &config.doors;
        Doors {
            grpc: DoorLimits {
                name: "grpc",
                max_connections: d.max_connections,
                write_timeout: d.write_timeout,
                header_timeout: GRPC_HEADER_TIMEOUT,
                body_timeout: d.body_timeout,
            },
            admin: DoorLimits {
                name: "admin",
                max_connections: ADMIN_CONNECTIONS,
                write_timeout: d.write_timeout.min(ADMIN_TIMEOUT),
                header_timeout: ADMIN_TIMEOUT,
                body_timeout: ADMIN_TIMEOUT,
            },
            health: DoorLimits {
                name: "health",
                max_connections: HEALTH_CONNECTIONS,
                write_timeout: d.write_timeout,
                header_timeout: GRPC_HEADER_TIMEOUT,
                body_timeout: d.body_timeout,
            },
        }
    }
}

/// One limit as the documentation and the generated tests see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitRow {
    /// What is limited.
    pub limit: &'static str,
    /// The setting that sets it (a flag, or a constant of this module).
    pub setting: &'static str,
    /// The doors that apply it, by name (`grpc`, `connect`, `admin`, `health`).
    pub doors: &'static [&'static str],
}

const fn row(
    limit: &'static str,
    setting: &'static str,
    doors: &'static [&'static str],
) -> LimitRow {
    LimitRow {
        limit,
        setting,
        doors,
    }
}

/// Every limit and the doors that apply it. `tests/doors.rs` probes each (limit, door) pair
/// and fails for a pair whose door does not refuse.
#[rustfmt::skip]
pub const LIMITS: &[LimitRow] = &[
    row("connections", "--max-connections (admin 64, health 256)", &["grpc", "admin", "health"]),
    row("write_timeout", "--write-timeout-ms", &["grpc", "admin"]),
    row("header_timeout", "30 s (hyper's, through tonic); admin 5 s", &["connect", "admin"]),
    row("body_timeout", "--request-body-timeout-ms (admin 5 s)", &["grpc", "connect", "admin"]),
    row("message_bytes", "--max-message-bytes (admin: the login form, 4 KiB)", &["grpc", "connect", "admin"]),
    row("max_pods", "--max-pods (and the other counts of api::wire_limits)", &["grpc", "connect"]),
    row("max_batch_requests", "--max-batch-requests (a batch's pods count together against --max-pods)", &["grpc", "connect"]),
    row("buffered_bytes", "--max-buffered-request-bytes", &["grpc", "connect"]),
    row("authentication", "--authz (before any body is read)", &["grpc", "connect", "admin"]),
    row("host", "--allowed-hosts (without --authz)", &["connect", "admin"]),
    row("metrics_and_refusal_log", "autoscaled_grpc_requests_total, target autoscaled::refused", &["grpc", "connect"]),
];

/// What one connection shares with its door: when it last made progress, and the flag that
/// closes it.
#[derive(Debug)]
struct ConnState {
    /// Milliseconds since the door opened at the last read or write that moved bytes.
    progress_ms: AtomicU64,
    evicted: AtomicBool,
    /// The task to wake when it is evicted.
    waker: Mutex<Option<Waker>>,
}

/// The open connections of one door.
#[derive(Debug)]
struct Registry {
    limits: DoorLimits,
    opened: Instant,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<ConnState>>>,
}

impl Registry {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A place for a new connection: below the cap, or in place of the connection idle the
    /// longest (at least [`EVICT_IDLE`]); `None`: refused.
    fn admit(self: &Arc<Self>) -> Option<(u64, Arc<ConnState>)> {
        let now = self.now_ms();
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.len() >= self.limits.max_connections {
            let idle = u64::try_from(EVICT_IDLE.as_millis()).unwrap_or(u64::MAX);
            let victim = open
                .iter()
                .filter(|(_, c)| !c.evicted.load(Ordering::Relaxed))
                .map(|(id, c)| (*id, c.progress_ms.load(Ordering::Relaxed)))
                .filter(|(_, at)| now.saturating_sub(*at) >= idle)
                .min_by_key(|(_, at)| *at);
            let Some((victim, _)) = victim else {
                crate::metrics::door_refused(self.limits.name, "connections");
                return None;
            };
            if let Some(conn) = open.remove(&victim) {
                conn.evicted.store(true, Ordering::Relaxed);
                if let Some(w) = conn.waker.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    w.wake();
                }
                crate::metrics::door_refused(self.limits.name, "evicted");
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState {
            progress_ms: AtomicU64::new(now),
            evicted: AtomicBool::new(false),
            waker: Mutex::new(None),
        });
        open.insert(id, Arc::clone(&state));
        Some((id, state))
    }

    fn release(&self, id: u64) {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }
}

/// A connection held to its door's limits (see the module documentation).
pub(crate) struct Guarded<C> {
    io: C,
    id: u64,
    state: Arc<ConnState>,
    registry: Arc<Registry>,
    /// Set while a write makes no progress: when it fires, the connection is closed.
    stalled_write: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<C> Guarded<C> {
    fn progress(&mut self) {
        self.state
            .progress_ms
            .store(self.registry.now_ms(), Ordering::Relaxed);
    }

    fn parked(&self, cx: &Context<'_>) {
        *self.state.waker.lock().unwrap_or_else(|e| e.into_inner()) = Some(cx.waker().clone());
    }

    fn evicted(&self) -> Option<io::Error> {
        self.state.evicted.load(Ordering::Relaxed).then(|| {
            io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed for a new connection: this one was idle or stalled at the connection cap",
            )
        })
    }

    /// One write by `write` unless the connection was evicted: progress when it wrote, the
    /// write timeout while it is pending.
    fn write_with(
        &mut self,
        cx: &mut Context<'_>,
        write: impl FnOnce(Pin<&mut C>, &mut Context<'_>) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>>
    where
        C: Unpin,
    {
        if let Some(e) = self.evicted() {
            return Poll::Ready(Err(e));
        }
        match write(Pin::new(&mut self.io), cx) {
            Poll::Ready(Ok(n)) => {
                self.stalled_write = None;
                self.progress();
                Poll::Ready(Ok(n))
            }
            Poll::Pending => self.write_pending(cx),
            other => other,
        }
    }

    /// A pending write: the connection closes once it has been pending for the door's
    /// write timeout.
    fn write_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.parked(cx);
        let timeout = self.registry.limits.write_timeout;
        let sleep = self
            .stalled_write
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        if sleep.as_mut().poll(cx).is_ready() {
            crate::metrics::door_refused(self.registry.limits.name, "write_timeout");
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer did not read for the write timeout",
            )));
        }
        Poll::Pending
    }
}

impl<C> Drop for Guarded<C> {
    fn drop(&mut self) {
        self.registry.release(self.id);
    }
}

impl<C: AsyncRead + Unpin> AsyncRead for Guarded<C> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(e) = self.evicted() {
            return Poll::Ready(Err(e));
        }
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.progress();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                self.parked(cx);
                Poll::Pending
            }
            other => other,
        }
    }
}

impl<C: AsyncWrite + Unpin> AsyncWrite for Guarded<C> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.write_with(cx, |io, cx| io.poll_write(cx, data))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.write_with(cx, |io, cx| io.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(e) = self.evicted() {
            return Poll::Ready(Err(e));
        }
        match Pin::new(&mut self.io).poll_flush(cx) {
            Poll::Pending => self.write_pending(cx).map_ok(|_| ()),
            Poll::Ready(r) => {
                self.stalled_write = None;
                Poll::Ready(r)
            }
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Guarded<TcpStream> {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

impl tonic::transport::server::Connected for Guarded<crate::tls::TlsConn> {
    type ConnectInfo = crate::auth::Peer;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

/// A door: the registry its connections are counted in.
#[derive(Clone, Debug)]
pub(crate) struct Door {
    registry: Arc<Registry>,
}

impl Door {
    pub(crate) fn new(limits: DoorLimits) -> Door {
        Door {
            registry: Arc::new(Registry {
                limits,
                opened: Instant::now(),
                next_id: AtomicU64::new(0),
                open: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The door's limits.
    pub(crate) fn limits(&self) -> DoorLimits {
        self.registry.limits
    }

    /// `io` held to the door's limits, or `None` when the door is full of connections that
    /// all made progress lately (the caller drops `io`, closing it).
    pub(crate) fn guard<C>(&self, io: C) -> Option<Guarded<C>> {
        let (id, state) = self.registry.admit()?;
        Some(Guarded {
            io,
            id,
            state,
            registry: Arc::clone(&self.registry),
            stalled_write: None,
        })
    }
}

/// The connections of `listener` held to `door`'s limits, as a stream for tonic's
/// `serve_with_incoming_shutdown` (plaintext). The accept loop stops, closing the listener,
/// when the stream is dropped.
pub(crate) fn accept(
    listener: TcpListener,
    door: Door,
) -> ReceiverStream<Result<Guarded<TcpStream>, io::Error>> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = tx.closed() => break,
                accepted = listener.accept() => accepted,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // EMFILE and the like: back off instead of spinning (as hyper does).
                    tracing::warn!(door = door.limits().name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            // Nagle's algorithm would hold small responses back for the peer's delayed ACK.
            let _ = stream.set_nodelay(true);
            let Some(guarded) = door.guard(stream) else {
                continue;
            };
            if tx.send(Ok(guarded)).await.is_err() {
                break;
            }
        }
    });
    ReceiverStream::new(rx)
}

/// The handshaken TLS connections of `incoming` held to `door`'s limits.
pub(crate) fn guard_tls(
    mut incoming: ReceiverStream<Result<crate::tls::TlsConn, io::Error>>,
    door: Door,
) -> ReceiverStream<Result<Guarded<crate::tls::TlsConn>, io::Error>> {
    use tokio_stream::StreamExt;
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let next = tokio::select! {
                () = tx.closed() => break,
                next = incoming.next() => next,
            };
            let Some(conn) = next else { break };
            let conn = match conn {
                Ok(conn) => conn,
                Err(e) => {
                    if tx.send(Err(e)).await.is_err() {
                        break;
                    }
                    continue;
                }
            };
            let Some(guarded) = door.guard(conn) else {
                continue;
            };
            if tx.send(Ok(guarded)).await.is_err() {
                break;
            }
        }
    });
    ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize) -> DoorLimits {
        DoorLimits {
            name: "test",
            max_connections: max,
            write_timeout: Duration::from_millis(200),
            header_timeout: Duration::from_secs(1),
            body_timeout: Duration::from_secs(1),
        }
    }

    /// At the cap, the connection idle the longest makes room; one that is busy does not.
    #[tokio::test]
    async fn at_the_cap_the_idlest_connection_makes_room() {
        let door = Door::new(limits(2));
        let first = door.guard(()).unwrap();
        let mut second = door.guard(()).unwrap();
        // Both just opened: none idle long enough, the third is refused.
        assert!(door.guard(()).is_none());
        tokio::time::sleep(EVICT_IDLE + Duration::from_millis(50)).await;
        // The second moves bytes; the first stays idle.
        second.progress();
        let third = door.guard(()).unwrap();
        assert!(first.state.evicted.load(Ordering::Relaxed));
        assert!(!second.state.evicted.load(Ordering::Relaxed));
        drop((first, second, third));
        assert!(door.registry.open.lock().unwrap().is_empty());
    }

    /// A peer that does not read: the write fails after the write timeout.
    #[tokio::test]
    async fn a_write_the_peer_never_reads_times_out() {
        use tokio::io::AsyncWriteExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(addr).unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let door = Door::new(limits(4));
        let mut guarded = door.guard(server).unwrap();
        let chunk = vec![0u8; 1 << 20];
        let started = Instant::now();
        let result = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                guarded.write_all(&chunk).await?;
            }
            #[allow(unreachable_code)]
            Ok::<(), io::Error>(())
        })
        .await
        .expect("the write timeout fired");
        assert_eq!(result.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(client);
    }
}
