//! HTTP/1.1 over hyper: the client for Prometheus' API and webhooks, and the listener for the
//! agent's own `/metrics` and `/healthz`.

use std::{convert::Infallible, net::SocketAddr, time::Duration};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, Response, StatusCode, body::Incoming, service::service_fn};
use hyper_util::{
    client::legacy::{Client as HyperClient, connect::HttpConnector},
    rt::{TokioExecutor, TokioIo},
};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

/// The largest response body read (a Prometheus answer for a few thousand instances).
const MAX_BODY_BYTES: usize = 8 << 20;

/// A shared HTTP client (keeps connections).
#[derive(Clone)]
pub struct Client {
    inner: HyperClient<HttpConnector, Full<Bytes>>,
}

/// A response: status and body (at most [`MAX_BODY_BYTES`]).
pub struct Answer {
    pub status: StatusCode,
    pub body: Bytes,
}

impl Default for Client {
    fn default() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(3)));
        Client {
            inner: HyperClient::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(30))
                .build(connector),
        }
    }
}

impl Client {
    /// One request with a deadline for the whole exchange.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        content_type: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Answer, String> {
        let request = Request::builder()
            .method(method)
            .uri(url)
            .header("content-type", content_type)
            .header(
                "user-agent",
                concat!("autoscaled-agent/", env!("CARGO_PKG_VERSION")),
            )
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("bad URL {}: {e}", shown(url)))?;
        let exchange = async {
            let response = self.inner.request(request).await.map_err(|e| {
                let mut text = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    text = format!("{text}: {s}");
                    source = s.source();
                }
                text
            })?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_BODY_BYTES)
                .collect()
                .await
                .map_err(|e| format!("reading the body: {e}"))?
                .to_bytes();
            Ok(Answer { status, body })
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(format!("no answer within {timeout:?}")),
        }
    }
}

/// `url` as it may be shown (logs, `--check`, the failure message the service stores):
/// scheme, host, port and path, without credentials, a query or a fragment, which may carry
/// secrets; a URL that does not parse is cut the same way by hand (everything up to the last
/// `@` before the query goes, so a password holding `/` or `@` does not show either).
pub fn shown(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let before_query = rest.split(['?', '#']).next().unwrap_or("");
    let without_user = before_query
        .rfind('@')
        .map_or(before_query, |i| &before_query[i + 1..]);
    let scheme: String = scheme
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        .collect();
    format!("{scheme}://{without_user}")
}

/// Percent-encodes a form value (`application/x-www-form-urlencoded`).
pub fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len() * 3);
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(char::from(b));
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Serves `/metrics` (the agent's Prometheus exposition) and `/healthz` on `listener` until
/// the process ends.
pub async fn serve_metrics(listener: TcpListener, handle: PrometheusHandle) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors, say: not a busy loop.
                tracing::warn!(error = %e, "metrics listener: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let handle = handle.clone();
                async move { Ok::<_, Infallible>(route(&req, &handle)) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .header_read_timeout(Duration::from_secs(5))
                .timer(hyper_util::rt::TokioTimer::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn route(req: &Request<Incoming>, handle: &PrometheusHandle) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, body: String| {
        Response::builder()
            .status(status)
            .header("content-type", "text/plain; version=0.0.4; charset=utf-8")
            .body(Full::new(Bytes::from(body)))
            .unwrap_or_default()
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".to_owned());
    }
    match req.uri().path() {
        "/metrics" => reply(StatusCode::OK, handle.render()),
        "/healthz" => reply(StatusCode::OK, "ok\n".to_owned()),
        _ => reply(
            StatusCode::NOT_FOUND,
            "not found: /metrics, /healthz\n".to_owned(),
        ),
    }
}

/// Binds the metrics listener.
pub async fn bind(addr: &str) -> Result<(TcpListener, SocketAddr), String> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    Ok((listener, local))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_secrets() {
        assert_eq!(
            shown("http://user:pw@hooks.example:8080/scale?token=s3cret"),
            "http://hooks.example:8080/scale"
        );
        // Malformed: a space in the host, a slash and an @ in the password.
        for url in [
            "http://u:PASS@bad host/x?token=Q",
            "http://u:P/A@SS@bad host/x?token=Q#frag",
            "u:PASS@host:80?token=Q",
        ] {
            let shown = shown(url);
            for secret in ["PASS", "P/A", "SS@", "Q", "frag"] {
                assert!(!shown.contains(secret), "{url} shown as {shown}");
            }
        }
    }

    #[test]
    fn form_encoding_keeps_queries_intact() {
        assert_eq!(form_encode(r#"up{job="w"}"#), "up%7Bjob%3D%22w%22%7D");
        assert_eq!(form_encode("a b+c"), "a%20b%2Bc");
    }
}
