//! The admin HTTP listener (`--metrics-listen`): what an orchestrator's probes and a
//! Prometheus scraper ask of a process over plain HTTP, apart from the gRPC port.
//!
//! * `GET /metrics`: the Prometheus text exposition ([`crate::metrics`]);
//! * `GET /healthz`: 200 while the process answers (liveness: nothing here can be fixed by
//!   waiting, so a failure means restart);
//! * `GET /readyz`: 200 while the server is SERVING, 503 otherwise: before it serves, while the
//!   store cannot write (the store-health watcher's verdict) and while it drains at shutdown.
//!   The same status as gRPC health's `""` service, for probes that speak only HTTP;
//! * any other path: 404; any other method: 405. `HEAD` is answered as `GET` without a body.
//!
//! HTTP/1.1 only, bounded: at most [`MAX_CONNECTIONS`] connections at once (more wait in the
//! kernel's backlog), request headers must arrive within [`HEADER_TIMEOUT`], and no request
//! body is read.

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use http_body_util::Full;
use hyper::{
    Method, Request, Response, StatusCode,
    body::{Bytes, Incoming},
    header::{CONTENT_TYPE, HeaderValue},
    service::service_fn,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::Semaphore;

/// Connections served at once.
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// Time allowed for a request's headers.
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// How often histograms are drained into the exposition (the exporter's own upkeep period).
const UPKEEP: Duration = Duration::from_secs(5);

/// Whether `/readyz` answers 200: the process-wide serving status, set where the gRPC health
/// status is set (start of serving, the store-health watcher, shutdown).
static READY: AtomicBool = AtomicBool::new(false);

/// Records the serving status for `/readyz`.
pub(crate) fn set_ready(ready: bool) {
    READY.store(ready, Ordering::Relaxed);
}

/// Binds `listen` and serves the admin paths on the current Tokio runtime. Binding happens
/// here, synchronously, so that a busy port is a start-up error.
pub(crate) fn serve(listen: SocketAddr, metrics: PrometheusHandle) -> std::io::Result<()> {
    let listener = std::net::TcpListener::bind(listen)?;
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let upkeep = metrics.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(UPKEEP);
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    tokio::spawn(accept_loop(listener, metrics));
    Ok(())
}

async fn accept_loop(listener: tokio::net::TcpListener, metrics: PrometheusHandle) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::debug!(error = %e, "admin listener: accept failed");
                continue;
            }
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let metrics = metrics.clone();
                async move { Ok::<_, Infallible>(answer(&request, &metrics)) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            drop(permit);
        });
    }
}

/// The response to one request.
fn answer(request: &Request<Incoming>, metrics: &PrometheusHandle) -> Response<Full<Bytes>> {
    let head = request.method() == Method::HEAD;
    if request.method() != Method::GET && !head {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n", head);
    }
    match request.uri().path() {
        "/metrics" => {
            let mut response = text(StatusCode::OK, &metrics.render(), head);
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        }
        "/healthz" => text(StatusCode::OK, "ok\n", head),
        "/readyz" if READY.load(Ordering::Relaxed) => text(StatusCode::OK, "ok\n", head),
        "/readyz" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "not serving (starting, the store cannot write, or shutting down)\n",
            head,
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found (/metrics, /healthz, /readyz)\n",
            head,
        ),
    }
}

fn text(status: StatusCode, body: &str, head: bool) -> Response<Full<Bytes>> {
    let body = if head {
        Bytes::new()
    } else {
        Bytes::copy_from_slice(body.as_bytes())
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
