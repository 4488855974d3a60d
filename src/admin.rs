//! The admin HTTP listener (`--metrics-listen`): what an orchestrator's probes and a
//! Prometheus scraper ask of a process over plain HTTP, apart from the gRPC port.
//!
//! * `GET /metrics`: the Prometheus text exposition ([`crate::metrics`]) and the standard
//!   process metrics ([`process_metrics`]);
//! * `GET /healthz`: 200 while the process answers (liveness: nothing here can be fixed by
//!   waiting, so a failure means restart);
//! * `GET /readyz`: 200 while the server is SERVING, 503 otherwise: before it serves, while the
//!   store cannot write (the store-health watcher's verdict) and while it drains at shutdown.
//!   The same status as gRPC health's `""` service, for probes that speak only HTTP;
//! * `/`, `/targets/KEY`, `/login`, `/logout`: the web console ([`crate::console`]);
//! * any other path: 404; any other method: 405. `HEAD` is answered as `GET` without a body.
//!
//! HTTP/1.1 only, held to the admin door's limits (`doors`): at most
//! [`doors::ADMIN_CONNECTIONS`](crate::doors::ADMIN_CONNECTIONS) connections, the one idle or
//! stalled the longest closed for a new one at the cap (a client that pipelines requests and
//! never reads its answers cannot lock probes out); a write the client does not read within
//! the write timeout closes the connection; request headers, and an idle connection's next
//! request, must arrive within 5 s; no request body is read but the console's login form (at
//! most 4 KiB, within 5 s).

use std::{convert::Infallible, net::SocketAddr, sync::Arc, time::Duration};

use http_body_util::Full;
use hyper::{
    Method, Request, Response, StatusCode,
    body::{Bytes, Incoming},
    header::{CONTENT_TYPE, HeaderValue},
    service::service_fn,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics_exporter_prometheus::PrometheusHandle;

/// How often histograms are drained into the exposition (the exporter's own upkeep period).
const UPKEEP: Duration = Duration::from_secs(5);

/// Binds `listen` and serves the admin paths on the current Tokio runtime. Binding happens
/// here, synchronously, so that a busy port is a start-up error.
/// Returns the bound address (port 0 picks a free one).
pub(crate) fn serve(
    listen: SocketAddr,
    metrics: PrometheusHandle,
    door: crate::doors::DoorLimits,
    console: crate::console::Console,
) -> std::io::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind(listen)?;
    let local = listener.local_addr()?;
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
    tokio::spawn(accept_loop(
        listener,
        metrics,
        crate::doors::Door::new(door),
        Arc::new(console),
    ));
    Ok(local)
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    metrics: PrometheusHandle,
    door: crate::doors::Door,
    console: Arc<crate::console::Console>,
) {
    let header_timeout = door.limits().header_timeout;
    loop {
        let (stream, remote) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::debug!(error = %e, "admin listener: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(stream) = door.guard(stream) else {
            continue;
        };
        let metrics = metrics.clone();
        let console = Arc::clone(&console);
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let metrics = metrics.clone();
                let console = Arc::clone(&console);
                async move {
                    if crate::console::serves(request.uri().path()) {
                        return Ok::<_, Infallible>(
                            crate::console::answer(&console, request, Some(remote)).await,
                        );
                    }
                    Ok::<_, Infallible>(answer(&request, &metrics, console.shared.ready()))
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The response to one request.
fn answer(
    request: &Request<Incoming>,
    metrics: &PrometheusHandle,
    ready: bool,
) -> Response<Full<Bytes>> {
    let head = request.method() == Method::HEAD;
    if request.method() != Method::GET && !head {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n", head);
    }
    match request.uri().path() {
        "/metrics" => {
            let mut exposition = metrics.render();
            exposition.push_str(&process_metrics());
            let mut response = text(StatusCode::OK, &exposition, head);
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        }
        "/healthz" => text(StatusCode::OK, "ok\n", head),
        "/readyz" if ready => text(StatusCode::OK, "ok\n", head),
        "/readyz" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "not serving (starting, the store cannot write, or shutting down)\n",
            head,
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found (/metrics, /healthz, /readyz, and the console at /)\n",
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

/// The standard process metrics of Prometheus' client libraries (`process_cpu_seconds_total`,
/// `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_open_fds`,
/// `process_max_fds`, `process_start_time_seconds`, `process_threads`), read from `/proc` at
/// scrape time as client_golang's process collector reads them, so dashboards built for any
/// Prometheus-instrumented process work here. Empty where `/proc` is not available; a value
/// that cannot be read is left out rather than reported as 0.
pub(crate) fn process_metrics() -> String {
    /// `/proc/[pid]/stat` counts CPU time in clock ticks, USER_HZ, which the kernel's ABI
    /// fixes at 100 per second (`sysconf(_SC_CLK_TCK)`, `proc(5)`).
    const TICKS_PER_SECOND: f64 = 100.0;
    let mut out = String::new();
    let mut gauge = |name: &str, kind: &str, help: &str, value: Option<f64>| {
        if let Some(value) = value {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
            ));
        }
    };
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    // Fields after the command name (which may hold spaces), from field 3 (`state`) on.
    let fields: Vec<&str> = stat
        .as_deref()
        .and_then(|s| s.rsplit_once(") "))
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |n: usize| -> Option<f64> { fields.get(n - 3)?.parse().ok() };
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let status_kib = |key: &str| -> Option<f64> {
        let line = status.lines().find(|l| l.starts_with(key))?;
        let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024.0)
    };
    let boot_time = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<f64>().ok())
    });
    gauge(
        "process_cpu_seconds_total",
        "counter",
        "Total user and system CPU time spent in seconds.",
        field(14)
            .zip(field(15))
            .map(|(user, system)| (user + system) / TICKS_PER_SECOND),
    );
    gauge(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
        status_kib("VmRSS:"),
    );
    gauge(
        "process_virtual_memory_bytes",
        "gauge",
        "Virtual memory size in bytes.",
        status_kib("VmSize:"),
    );
    gauge(
        "process_threads",
        "gauge",
        "Number of OS threads in the process.",
        status
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|v| v.trim().parse().ok()),
    );
    gauge(
        "process_open_fds",
        "gauge",
        "Number of open file descriptors.",
        std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as f64),
    );
    gauge(
        "process_max_fds",
        "gauge",
        "Maximum number of open file descriptors.",
        std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("Max open files"))
                    .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
            }),
    );
    gauge(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since unix epoch in seconds.",
        field(22)
            .zip(boot_time)
            .map(|(ticks, boot)| boot + ticks / TICKS_PER_SECOND),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every process metric is present on Linux, once, with a plausible value.
    #[test]
    fn process_metrics_read_this_process() {
        let text = process_metrics();
        let value = |name: &str| -> f64 {
            let lines: Vec<&str> = text
                .lines()
                .filter(|l| l.split_whitespace().next() == Some(name))
                .collect();
            assert_eq!(lines.len(), 1, "{name}: {text}");
            lines[0].split_whitespace().nth(1).unwrap().parse().unwrap()
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let started = value("process_start_time_seconds");
        assert!(
            started <= now + 1.0 && started > now - 86_400.0,
            "{started} vs {now}"
        );
        assert!(value("process_resident_memory_bytes") > 1024.0 * 1024.0);
        assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
        assert!(value("process_open_fds") >= 3.0);
        assert!(value("process_max_fds") >= value("process_open_fds"));
        assert!(value("process_threads") >= 1.0);
        assert!(value("process_cpu_seconds_total") >= 0.0);
        assert!(
            text.contains("# TYPE process_cpu_seconds_total counter"),
            "{text}"
        );
    }
}
