//! Wiring: the store, the services, health and reflection on one tonic server, and the
//! graceful shutdown (mini-redis `server::run(listener, shutdown)`; linkerd's bounded drain).
//!
//! Shutdown sequence: the shutdown future completes → health turns NOT_SERVING (so load
//! balancers and Kubernetes probes stop sending) → the server stops accepting and drains
//! in-flight requests for at most `shutdown_grace` → a final flush of the store.

use std::{
    future::Future,
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
    time::Instant,
};

use thiserror::Error;
use tokio::{net::TcpListener, sync::watch};
use tonic::codegen::http::{Request as HttpRequest, Response as HttpResponse};
use tonic_health::ServingStatus;

use crate::{
    api::{HorizontalService, HpaOptions, VerticalService, VpaOptions, authorized::Authorized},
    config::{Config, Durability as DurabilityMode, StoreKind},
    pb::{
        self,
        v1::{
            horizontal_autoscaler_server::{self, HorizontalAutoscalerServer},
            vertical_autoscaler_server::{self, VerticalAutoscalerServer},
        },
    },
    store::{
        FleetStore, HpaStore, Owners, SledStore, StoreError, VpaStore,
        durability::{Durability, Mode},
        etcd::{EtcdOptions, EtcdStore, EtcdTls},
        sled::SledOptions,
    },
};

/// Why serving stopped with an error.
#[derive(Debug, Error)]
pub enum ServeError {
    /// The store could not be opened or flushed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The reflection service could not be built from the descriptors.
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The transport failed.
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The listener has no local address.
    #[error("listener: {0}")]
    Listener(#[from] std::io::Error),
    /// The TLS or authorization files cannot be used.
    #[error(transparent)]
    Security(#[from] crate::security::SecurityError),
    /// A listener the server binds itself (`--health-listen`) cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// gRPC service names served (health reports each, plus "").
pub(crate) const SERVICE_NAMES: &[&str] = &[
    horizontal_autoscaler_server::SERVICE_NAME,
    vertical_autoscaler_server::SERVICE_NAME,
];

/// tonic rejects a request above `max_decoding_message_size` with OUT_OF_RANGE ("decoded
/// message length too large"); gRPC's convention (grpc-go, grpc-java) for a message over the
/// receive limit is RESOURCE_EXHAUSTED, which clients treat as "do not retry as is". The
/// answer keeps tonic's message (both sizes), names the setting, and carries a BadRequest
/// violation on `request`, as every other limit does.
fn message_too_large_is_resource_exhausted(
    response: HttpResponse<tonic::body::Body>,
) -> HttpResponse<tonic::body::Body> {
    let headers = response.headers();
    let too_large = headers.get("grpc-status").is_some_and(|s| s == "11")
        && headers
            .get("grpc-message")
            .and_then(|m| m.to_str().ok())
            .is_some_and(|m| m.contains("length%20too%20large") || m.contains("length too large"));
    if !too_large {
        return response;
    }
    let said = tonic::Status::from_header_map(headers)
        .map(|s| s.message().to_owned())
        .unwrap_or_default();
    let error = crate::api::status::ApiError::ResourceExhausted {
        field: "request".to_owned(),
        message: format!(
            "{said} (the server's max_message_bytes, --max-message-bytes / AUTOSCALED_MAX_MESSAGE_BYTES)"
        ),
    };
    tonic::Status::from(error).into_http()
}

/// HTTP/2 streams one connection to the health-only listener may have open.
const HEALTH_STREAMS_PER_CONNECTION: u32 = 16;
/// Counts and times every gRPC request by method and code ([`crate::metrics::grpc_request`]).
/// The code is the response's `grpc-status` header: tonic puts it there for every error
/// (trailers-only response), while a success carries it in the trailers, so a response
/// without the header is OK. The time is to the response headers, which for a unary call is
/// when the answer is ready. A path the router does not serve answers UNIMPLEMENTED and is
/// labelled `unknown`, so a client cannot grow the label set.
#[derive(Clone, Debug)]
struct RequestMetrics<S> {
    inner: S,
}

impl<S, B, RB: 'static> tower::Service<HttpRequest<B>> for RequestMetrics<S>
where
    S: tower::Service<HttpRequest<B>, Response = HttpResponse<RB>>,
    S::Future: Send + 'static,
    S::Error: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: HttpRequest<B>) -> Self::Future {
        let path = request.uri().path().to_owned();
        let identity = crate::auth::IdentitySlot::default();
        request.extensions_mut().insert(identity.clone());
        let peer = request
            .extensions()
            .get::<tonic::transport::server::TcpConnectInfo>()
            .and_then(tonic::transport::server::TcpConnectInfo::remote_addr)
            .or_else(|| {
                request
                    .extensions()
                    .get::<crate::auth::Peer>()
                    .and_then(|p| p.remote)
            });
        let started = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            if let Ok(response) = &result {
                // A Connect answer carries its code aside (it has no `grpc-status`).
                let connect_code = response
                    .extensions()
                    .get::<crate::connect::AnsweredCode>()
                    .map(|c| (c.0 as i32).to_string());
                let code = connect_code.as_deref().unwrap_or_else(|| {
                    response
                        .headers()
                        .get("grpc-status")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("0")
                });
                let method = if crate::auth::layer::known_method(&path) {
                    &path
                } else {
                    "unknown"
                };
                crate::metrics::grpc_request(method, code, started.elapsed());
                if code != "0" {
                    let identity = identity.0.get().map(|s| &**s);
                    log_refusal(method, code, peer, identity, response);
                }
            }
            result
        })
    }
}

/// Refused calls logged per second at most; the others are counted and the count is said
/// on the next line (a flood of bad requests must not flood the log).
const REFUSALS_LOGGED_PER_SECOND: u64 = 10;

/// One line for a call answered with an error: the peer, the identity (when it was
/// authenticated), the method (from the served set), the code and the start of the message
/// (which names the first field violation), so an operator can find which caller sends bad
/// requests. Rate-limited.
fn log_refusal<B>(
    method: &str,
    code: &str,
    peer: Option<std::net::SocketAddr>,
    identity: Option<&str>,
    response: &HttpResponse<B>,
) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static WINDOW: AtomicU64 = AtomicU64::new(0);
    static IN_WINDOW: AtomicU64 = AtomicU64::new(0);
    static SUPPRESSED: AtomicU64 = AtomicU64::new(0);
    let second = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if WINDOW.swap(second, Ordering::Relaxed) != second {
        IN_WINDOW.store(0, Ordering::Relaxed);
    }
    if IN_WINDOW.fetch_add(1, Ordering::Relaxed) >= REFUSALS_LOGGED_PER_SECOND {
        SUPPRESSED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let message = response
        .extensions()
        .get::<crate::connect::RefusalMessage>()
        .map(|m| m.0.clone())
        .or_else(|| {
            tonic::Status::from_header_map(response.headers()).map(|s| s.message().to_owned())
        })
        .map(|m| m.chars().take(200).collect::<String>())
        .unwrap_or_default();
    let code_name = code
        .parse::<i32>()
        .map(|c| format!("{:?}", tonic::Code::from_i32(c)))
        .unwrap_or_else(|_| code.to_owned());
    let suppressed = SUPPRESSED.swap(0, Ordering::Relaxed);
    let peer = peer.map_or_else(|| "-".to_owned(), |p| p.to_string());
    tracing::info!(
        target: "autoscaled::refused",
        peer = %peer,
        identity = identity.unwrap_or("-"),
        method,
        code = %code_name,
        detail = ?message,
        suppressed_before = suppressed,
        "call refused"
    );
}

/// How often the stored targets are counted for `autoscaled_targets` (between counts the
/// gauge follows this replica's own creations and deletions).
const TARGET_COUNT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// Counts the stored HPA and VPA targets now and every [`TARGET_COUNT_INTERVAL`]: a key scan
/// in pages of 1,000 (the other replicas sharing an etcd store change the count too).
async fn count_targets(hpa: Arc<dyn HpaStore>, vpa: Arc<dyn VpaStore>) {
    let mut tick = tokio::time::interval(TARGET_COUNT_INTERVAL);
    loop {
        tick.tick().await;
        let hpa_page = |after: Option<String>| {
            let hpa = Arc::clone(&hpa);
            async move { hpa.list_keys(after.as_deref(), 1000).await }
        };
        if let Some(n) = count_keys(hpa_page).await {
            crate::metrics::targets_stored("hpa", n);
        }
        let vpa_page = |after: Option<String>| {
            let vpa = Arc::clone(&vpa);
            async move { vpa.list_vertical_keys(after.as_deref(), 1000).await }
        };
        if let Some(n) = count_keys(vpa_page).await {
            crate::metrics::targets_stored("vpa", n);
        }
    }
}

/// The keys a paged listing gives over all its pages; `None` if a page failed.
async fn count_keys<F, Fut>(list: F) -> Option<usize>
where
    F: Fn(Option<String>) -> Fut,
    Fut: Future<Output = Result<crate::store::KeyPage, StoreError>>,
{
    let mut after: Option<String> = None;
    let mut count = 0;
    loop {
        let mut page = list(after.take()).await.ok()?;
        count += page.keys.len();
        if !page.more || page.keys.is_empty() {
            return Some(count);
        }
        after = page.keys.pop();
    }
}

/// Server reflection over our services, health, and the `google.rpc` error model our error
/// details use (so grpcurl decodes a `google.rpc.BadRequest` instead of printing its bytes).
/// Built twice: v1, and v1alpha for grpcurl 1.8.
fn reflection() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(pb::RPC_FILE_DESCRIPTOR_SET)
}

/// Opens the sled store of `config.data_dir`.
pub fn open_store(config: &Config) -> Result<Arc<SledStore>, StoreError> {
    SledStore::open(
        &config.data_dir,
        SledOptions {
            decision_log_len: config.decision_log_len,
            decision_retention: config.decision_retention,
            max_pod_names: config.max_pod_names,
            cache_bytes: config.cache_mb.saturating_mul(1024 * 1024),
        },
    )
    .map(Arc::new)
}

/// The store chosen by `config.store`, opened.
#[derive(Debug)]
pub(crate) enum OpenedStore {
    /// `--store sled`: the data folder, locked by this process.
    Sled(Arc<SledStore>),
    /// `--store etcd`: shared by the replicas; writes are guarded by `mod_revision`.
    Etcd(Arc<EtcdStore>),
}

/// Opens the store `config.store` names: the sled folder, or a (lazy) connection to etcd.
pub(crate) fn open_configured_store(config: &Config) -> Result<OpenedStore, StoreError> {
    Ok(match config.store {
        StoreKind::Sled => OpenedStore::Sled(open_store(config)?),
        StoreKind::Etcd => OpenedStore::Etcd(Arc::new(EtcdStore::connect(EtcdOptions {
            endpoints: config.etcd.endpoints.clone(),
            prefix: config.etcd.prefix.clone(),
            tls: EtcdTls {
                ca: config.etcd.ca.clone(),
                cert: config.etcd.cert.clone(),
                key: config.etcd.key.clone(),
            },
            decision_log_len: config.decision_log_len,
            decision_retention: config.decision_retention,
            max_pod_names: config.max_pod_names,
            ..EtcdOptions::default()
        })?)),
    })
}

/// What the admin listener and the server share while the server runs, one per server and
/// handed to both (two servers in one process, as in the tests, never see each other's):
/// whether it is ready (`/readyz`), and the console's way into its API.
#[derive(Default)]
pub struct Shared {
    ready: AtomicBool,
    pub(crate) console_api: crate::console::ApiSlot,
}

impl Shared {
    /// Records the serving status for `/readyz`: set where the gRPC health status is set
    /// (start of serving, the store-health watcher, shutdown).
    pub(crate) fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Whether `/readyz` answers 200.
    pub(crate) fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}

/// A server's first step: its configuration with the TLS and authorization files loaded
/// (unusable files are bad configuration, found before anything listens), and what its admin
/// listener shares with it.
pub struct Configured {
    config: Config,
    security: Arc<crate::security::Security>,
    shared: Arc<Shared>,
}

impl Configured {
    /// Loads `config`'s security files.
    pub fn load(config: Config) -> Result<Configured, ServeError> {
        let security = crate::security::Security::load(&config.security)?;
        Ok(Configured {
            config,
            security,
            shared: Arc::default(),
        })
    }

    /// What the admin listener of this server is given.
    pub(crate) fn shared(&self) -> Arc<Shared> {
        Arc::clone(&self.shared)
    }

    /// The configuration (the admin listener's address once it is bound goes back into it,
    /// for the start-up log line).
    pub(crate) fn config_mut(&mut self) -> &mut Config {
        &mut self.config
    }

    /// The server on `listener` (bound by the caller first, so that a busy port does not leave
    /// a new data folder behind): the health-only listener bound (`--health-listen`) and the
    /// store opened.
    pub async fn bind(self, listener: TcpListener) -> Result<Server, ServeError> {
        let health_listener = match self.config.security.health_listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| ServeError::Bind { addr, source })?,
            ),
            None => None,
        };
        let store = open_configured_store(&self.config)?;
        Ok(Server {
            config: self.config,
            listener,
            health_listener,
            store,
            security: self.security,
            shared: self.shared,
        })
    }
}

/// A server ready to serve: what it holds is what it serves with. `autoscaled serve` builds
/// one in steps ([`Configured::load`], [`Configured::bind`]) so that it can report each
/// listener; tests and examples in one call ([`Server::open`]).
pub struct Server {
    config: Config,
    listener: TcpListener,
    health_listener: Option<TcpListener>,
    store: OpenedStore,
    security: Arc<crate::security::Security>,
    shared: Arc<Shared>,
}

impl Server {
    /// `config`'s server on `listener`: its security files loaded, its health listener bound,
    /// its store opened.
    pub async fn open(listener: TcpListener, config: Config) -> Result<Server, ServeError> {
        Configured::load(config)?.bind(listener).await
    }

    /// The main listener's address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The health-only listener's address, when it has one.
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.health_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    /// Serves until `shutdown` completes, then drains for at most `config.shutdown_grace` and
    /// flushes the store. With etcd, this replica registers first: replicas share out the
    /// targets (`store::etcd::ownership`), and a call for another replica's target is
    /// forwarded there when the replicas share a secret to prove who they are (`peers`);
    /// without one, each replica decides what reaches it.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<(), ServeError> {
        let Server {
            config,
            listener,
            health_listener,
            store,
            security,
            shared,
        } = self;
        let parts = Parts {
            config,
            listener,
            health_listener,
            security,
            shared,
        };
        match store {
            OpenedStore::Sled(store) => parts.serve(store, Owners::none(), shutdown).await,
            OpenedStore::Etcd(store) => {
                let advertise = match &parts.config.etcd.advertise {
                    Some(addr) => Some(addr.clone()),
                    None => {
                        let local = parts.listener.local_addr()?;
                        (!local.ip().is_unspecified()).then(|| local.to_string())
                    }
                };
                let forward = parts.security.peer_link().is_some();
                if advertise.is_none() {
                    tracing::warn!(
                        "--listen is 0.0.0.0 or :: and --etcd-advertise is not set: other replicas \
                         cannot forward to this one (they decide its targets' calls themselves)"
                    );
                }
                let ownership = store.start_ownership(
                    advertise.unwrap_or_default(),
                    forward,
                    parts.security.peer_key().cloned(),
                );
                let served = parts
                    .serve(Arc::clone(&store), Owners::of(ownership), shutdown)
                    .await;
                store.deregister().await;
                served
            }
        }
    }
}

/// Opens the store and serves `config` on `listener` until `shutdown` completes: the tests'
/// and examples' one call ([`Server::open`], then [`Server::serve`]).
pub async fn serve(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    Server::open(listener, config).await?.serve(shutdown).await
}

/// A server's parts once its store is known.
struct Parts {
    config: Config,
    listener: TcpListener,
    health_listener: Option<TcpListener>,
    security: Arc<crate::security::Security>,
    shared: Arc<Shared>,
}

impl Parts {
    async fn serve<S: HpaStore + VpaStore + FleetStore>(
        self,
        store: Arc<S>,
        owners: Owners,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ServeError> {
        let Parts {
            config,
            listener,
            health_listener,
            security,
            shared,
        } = self;
        let vertical_store: Arc<dyn VpaStore> = store.clone();
        let fleet_store: Arc<dyn FleetStore> = store.clone();
        let vertical_count_store = Arc::clone(&vertical_store);
        let store: Arc<dyn HpaStore> = store;
        let local: SocketAddr = listener.local_addr()?;
        let mode = match config.durability {
            DurabilityMode::Strict => Mode::Strict,
            DurabilityMode::Relaxed => Mode::Relaxed {
                interval: config.flush_interval,
            },
        };
        let durability = Arc::new(Durability::start_with_delay(
            Arc::clone(&store),
            mode,
            config.commit_delay,
        ));
        let service = HorizontalService::new(
            Arc::clone(&store),
            Arc::clone(&durability),
            HpaOptions {
                defaults: config.hpa.clone(),
                limits: config.limits.clone(),
                trust_request_time: config.trust_request_time,
                history_retention: config.history_retention,
            },
            crate::engine::hpa::evaluate_within,
        )
        .with_fleet(fleet_store, config.fleet)
        .with_peers(security.peer_link())
        .with_owners(owners);
        let vertical = VerticalService::new(
            vertical_store,
            Arc::clone(&durability),
            VpaOptions {
                defaults: crate::engine::vpa::VpaSettings::default(),
                limits: config.limits.clone(),
                trust_request_time: config.trust_request_time,
                max_clock_skew: config.vpa_max_clock_skew,
            },
        );

        let health_reporter = tonic_health::server::HealthReporter::new();
        health_reporter
            .set_service_status("", ServingStatus::Serving)
            .await;
        for name in SERVICE_NAMES {
            health_reporter
                .set_service_status(*name, ServingStatus::Serving)
                .await;
        }
        if config.metrics_listen.is_some() {
            crate::metrics::set_per_target_cap(config.metrics_per_target);
            tokio::spawn(count_targets(
                Arc::clone(&store),
                Arc::clone(&vertical_count_store),
            ));
        }
        let reflection_v1 = reflection().build_v1()?;
        let reflection_v1alpha = reflection().build_v1alpha()?;
        let exposure = |e: crate::config::Exposure| e != crate::config::Exposure::Off;
        let serve_reflection = exposure(config.security.reflection);
        let enforce = security.enforcing();

        let (stop_tx, stop_rx) = watch::channel(false);
        // Watch streams end when shutdown starts, so they do not hold the drain.
        let watches = Arc::new(tokio::sync::Semaphore::new(crate::drain::MAX_WATCH_STREAMS));
        let health_service = || {
            crate::drain::health_server(
                health_reporter.clone(),
                stop_rx.clone(),
                Arc::clone(&watches),
            )
        };
        let main_health = exposure(config.security.health).then(health_service);
        // The one watcher of the store's health (sled: probes after a failed write; etcd: a
        // quorum read every tick).
        let _store_health = crate::store_health::spawn(
            durability.db(),
            health_reporter.clone(),
            Arc::clone(&shared),
            SERVICE_NAMES,
            stop_rx.clone(),
        );
        let mut server_stop = stop_rx.clone();
        let mut routes = tonic::service::RoutesBuilder::default();
        if let Some(health) = main_health {
            routes.add_service(health);
        }
        if serve_reflection {
            routes.add_service(reflection_v1);
            routes.add_service(reflection_v1alpha);
        }
        routes
            .add_service(
                HorizontalAutoscalerServer::new(Authorized::new(service, enforce))
                    .max_decoding_message_size(config.limits.max_message_bytes),
            )
            .add_service(
                VerticalAutoscalerServer::new(Authorized::new(vertical, enforce))
                    .max_decoding_message_size(config.limits.max_message_bytes),
            );
        let routes = routes.routes().prepare();
        // What every call passes, outermost first; the web console's calls pass it too
        // (`console`), so they are authenticated, authorized, shed and limited as gRPC is.
        // Browser-facing doors without an authorization file answer only the Host names they
        // are reached by (DNS rebinding).
        let hosts = crate::connect::HostCheck::new(!enforce, &config.doors.allowed_hosts);
        let stack = tower::ServiceBuilder::new()
            // Every call counted and every refusal logged, Connect's included.
            .layer(tower::layer::layer_fn(|inner| RequestMetrics { inner }))
            // Connect unary calls (HTTP/JSON): what needs no body is answered here, and the
            // answers from inside are turned back into Connect answers; the body is read by the
            // load shedding and decoded by the transcoder, innermost.
            .layer(crate::connect::ConnectLayer::new(hosts))
            .layer(tower::util::MapResponseLayer::new(
                message_too_large_is_resource_exhausted
                    as fn(HttpResponse<tonic::body::Body>) -> HttpResponse<tonic::body::Body>,
            ))
            // Authentication (bearer token or mTLS identity) and the verb of each method; the
            // per-key check is `api::authorized`. Inside the metrics layer, so refusals count;
            // before load shedding, so an unauthenticated call takes no slot and no body is read
            // for it, and the identity's share of the slots is known.
            .layer(crate::auth::AuthLayer::new(security.auth_state()))
            // Load shedding, deadlines, the body timeout and the buffered-bytes bound, the request
            // context and client protocol errors.
            .layer(crate::overload::OverloadLayer::new(&config))
            // A Connect call's body (read by now, within the limits) as the gRPC message.
            .layer(crate::connect::TranscodeLayer::new(&config.limits))
            .into_inner();
        // The console's API while this server serves (cleared when this function returns).
        let _console = shared
            .console_api
            .install(tower::Layer::layer(&stack, routes.clone()));
        // Ready once everything the admin listener answers with (the console's API) is in place.
        shared.set_ready(true);
        let doors = crate::doors::Doors::of(&config);
        let router = tonic::transport::Server::builder()
            // HTTP/1.1 too, for Connect's unary calls (curl, browsers); gRPC stays HTTP/2.
            .accept_http1(true)
            .max_concurrent_streams(Some(crate::doors::STREAMS_PER_CONNECTION))
            // A peer that vanished without closing (a cut network) is found and its connection
            // closed, instead of holding a place at the cap.
            .http2_keepalive_interval(Some(std::time::Duration::from_secs(60)))
            .http2_keepalive_timeout(Some(std::time::Duration::from_secs(20)))
            .layer(stack)
            .trace_fn(crate::telemetry::grpc_span);
        let stop_signal = async move {
            let _ = server_stop.wait_for(|stop| *stop).await;
        };
        let server: Pin<Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send>> =
            match security.tls() {
                Some(tls) => Box::pin(router.serve_with_incoming_shutdown(
                    routes,
                    crate::doors::guard_tls(
                        crate::tls::incoming(listener, Arc::clone(tls)),
                        crate::doors::Door::new(doors.grpc),
                    ),
                    stop_signal,
                )),
                None => {
                    let incoming =
                        crate::doors::accept(listener, crate::doors::Door::new(doors.grpc));
                    Box::pin(router.serve_with_incoming_shutdown(routes, incoming, stop_signal))
                }
            };
        tokio::pin!(server);
        tokio::pin!(shutdown);
        // The plaintext health-only listener answers until the main server has drained, so
        // probes see NOT_SERVING during the drain rather than a refused connection.
        let (health_stop_tx, health_stop_rx) = tokio::sync::oneshot::channel::<()>();
        let health_local = health_listener.as_ref().and_then(|l| l.local_addr().ok());
        let health_task = health_listener.map(|health_listener| {
            let incoming =
                crate::doors::accept(health_listener, crate::doors::Door::new(doors.health));
            // No credentials are asked here: bound the connections, and what one connection can
            // hold open (the Watch streams are bounded over every listener by the health service
            // itself).
            let router = tonic::transport::Server::builder()
                .max_concurrent_streams(Some(HEALTH_STREAMS_PER_CONNECTION))
                .concurrency_limit_per_connection(HEALTH_STREAMS_PER_CONNECTION as usize)
                .add_service(health_service());
            tokio::spawn(async move {
                if let Err(e) = router
                    .serve_with_incoming_shutdown(incoming, async {
                        let _ = health_stop_rx.await;
                    })
                    .await
                {
                    tracing::error!(error = %e, "health listener failed");
                }
            })
        });
        let reloader = security.spawn_reloader();
        let mode = crate::security::describe(&security);
        if security.tls().is_none() && !local.ip().is_loopback() {
            tracing::warn!(%local, "listening beyond loopback without TLS: requests, responses and any bearer tokens travel in plaintext (set --tls-cert and --tls-key)");
        }
        tracing::info!(%local, security = mode, store = ?config.store, durability = %config.durability, trust_request_time = config.trust_request_time, data_dir = %config.data_dir.display(), "serving");
        // One line per listener, so an operator sees each one that is up.
        if let Some(health) = health_local {
            tracing::info!(local = %health, "health listener up (grpc.health.v1.Health, plaintext, no credentials)");
        }
        if let Some(metrics) = config.metrics_listen {
            tracing::info!(local = %metrics, console = %format!("http://{metrics}/"), "admin listener up (GET / the console, /metrics, /healthz, /readyz)");
        }

        let mut triggered = false;
        let mut drain_deadline = stop_rx.clone();
        let grace = config.shutdown_grace;
        let drain_timer = async move {
            let _ = drain_deadline.wait_for(|stop| *stop).await;
            tokio::time::sleep(grace).await;
        };
        tokio::pin!(drain_timer);
        let result = loop {
            tokio::select! {
                result = &mut server => break result.map_err(ServeError::from),
                () = &mut shutdown, if !triggered => {
                    triggered = true;
                    tracing::info!(grace_secs = grace.as_secs_f64(), "shutting down: NOT_SERVING, draining");
                    health_reporter.set_service_status("", ServingStatus::NotServing).await;
                    shared.set_ready(false);
                    for name in SERVICE_NAMES {
                        health_reporter.set_service_status(*name, ServingStatus::NotServing).await;
                    }
                    let _ = stop_tx.send(true);
                }
                () = &mut drain_timer => {
                    tracing::warn!("drain timed out; dropping the remaining connections");
                    break Ok(());
                }
            }
        };
        let _ = health_stop_tx.send(());
        if let Some(task) = health_task {
            let _ = task.await;
        }
        if let Some(reloader) = reloader {
            reloader.abort();
        }
        let flushed = durability.flush_all().await;
        match &flushed {
            Ok(()) => tracing::info!("store flushed; stopped"),
            Err(e) => tracing::error!(error = %e, "final flush failed"),
        }
        result?;
        flushed?;
        Ok(())
    }
}
