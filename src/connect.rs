//! HTTP/JSON for callers without gRPC: the Connect protocol's unary calls
//! (<https://connectrpc.com/docs/protocol>) on the gRPC listener.
//!
//! `curl -H 'Content-Type: application/json' -d @req.json http://HOST:PORT/autoscaled.v1.HorizontalAutoscaler/Recommend`
//! answers the response in proto3 JSON; an error is a Connect error (an HTTP status and
//! `{"code": "invalid_argument", "message": ..., "details": [...]}`, each detail with its
//! `type`, its bytes in `value` and its JSON in `debug`, so the BadRequest's field violations
//! read as they do over gRPC).
//!
//! The layer turns such a request into the gRPC request it stands for (the JSON decoded to
//! the method's input type, framed, `connect-timeout-ms` as `grpc-timeout`) and hands it to
//! the layers inside, so a Connect call passes the same metrics, refusal log,
//! authentication, authorization, load shedding, deadlines, wire limits and handlers as a
//! gRPC call. The gRPC answer is turned back: the message to JSON, or the status (with its
//! `grpc-status-details-bin`) to a Connect error. Everything else (gRPC, and requests that
//! are neither) passes through untouched, except a plain HTTP request for a path that is
//! not a method, which gets a 404 saying what this port serves.
//!
//! `application/proto` (binary Connect) is accepted too. Streaming methods (health's Watch)
//! are not Connect unary calls: 415 for them, as the protocol says for an unsupported codec.

use std::{
    future::Future,
    pin::Pin,
    sync::OnceLock,
    task::{Context, Poll},
};

use base64::Engine;
use bytes::{Buf, Bytes};
use http_body_util::{BodyExt, Full, Limited};
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, SerializeOptions};
use tonic::{
    Code,
    codegen::http::{
        HeaderMap, HeaderValue, Method, Request as HttpRequest, Response as HttpResponse,
        StatusCode, header,
    },
};

use crate::config::Limits;

/// The descriptors of every service the port serves (ours, health) and of the error details.
pub(crate) fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        let mut pool = DescriptorPool::new();
        for set in [
            crate::pb::FILE_DESCRIPTOR_SET,
            crate::pb::RPC_FILE_DESCRIPTOR_SET,
            tonic_health::pb::FILE_DESCRIPTOR_SET,
        ] {
            // Built into the binary by build.rs: decoding cannot fail but for a build bug,
            // which the tests catch (`every_unary_method_is_reachable`).
            if let Err(e) = pool.decode_file_descriptor_set(set) {
                tracing::error!(error = %e, "connect: a descriptor set does not decode");
            }
        }
        pool
    })
}

/// The codec of a Connect unary request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Codec {
    Json,
    Proto,
}

impl Codec {
    fn of(headers: &HeaderMap) -> Option<Codec> {
        let ct = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
        let media = ct.split(';').next()?.trim().to_ascii_lowercase();
        match media.as_str() {
            "application/json" => Some(Codec::Json),
            "application/proto" => Some(Codec::Proto),
            _ => None,
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Codec::Json => "application/json",
            Codec::Proto => "application/proto",
        }
    }
}

/// The layer (outermost on the main listener).
#[derive(Clone, Debug)]
pub(crate) struct ConnectLayer {
    /// The largest request body read: the wire's message limit (a JSON body may be larger
    /// than the message it encodes, so twice it).
    max_body_bytes: usize,
    /// The authentication layer's state: a call is authenticated (headers only) before its
    /// body is read, as the gRPC path does.
    auth: std::sync::Arc<crate::auth::layer::AuthState>,
}

impl ConnectLayer {
    pub(crate) fn new(limits: &Limits, auth: crate::auth::layer::AuthState) -> Self {
        ConnectLayer {
            max_body_bytes: limits.max_message_bytes.saturating_mul(2),
            auth: std::sync::Arc::new(auth),
        }
    }
}

impl<S> tower::Layer<S> for ConnectLayer {
    type Service = Connect<S>;

    fn layer(&self, inner: S) -> Connect<S> {
        Connect {
            inner,
            max_body_bytes: self.max_body_bytes,
            auth: std::sync::Arc::clone(&self.auth),
        }
    }
}

/// See the module documentation.
#[derive(Clone, Debug)]
pub(crate) struct Connect<S> {
    inner: S,
    max_body_bytes: usize,
    auth: std::sync::Arc<crate::auth::layer::AuthState>,
}

type Body = tonic::body::Body;

impl<S> tower::Service<HttpRequest<Body>> for Connect<S>
where
    S: tower::Service<HttpRequest<Body>, Response = HttpResponse<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = HttpResponse<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: HttpRequest<Body>) -> Self::Future {
        let content_type = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        // gRPC-Web is not served: its clients cannot read HTTP/2 trailers.
        if content_type.starts_with("application/grpc-web") {
            let mut response = error(
                Code::Unimplemented,
                "gRPC-Web is not served: use gRPC, or Connect's unary calls (application/json)",
                Vec::new(),
            );
            *response.status_mut() = StatusCode::UNSUPPORTED_MEDIA_TYPE;
            return Box::pin(std::future::ready(Ok(response)));
        }
        if content_type.starts_with("application/grpc") {
            return Box::pin(self.inner.call(request));
        }
        // The inner service was polled ready for this call; a clone takes its place.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let max_body_bytes = self.max_body_bytes;
        let auth = std::sync::Arc::clone(&self.auth);
        Box::pin(async move { Ok(unary(inner, request, max_body_bytes, &auth).await) })
    }
}

/// A Connect error response.
fn error(code: Code, message: &str, details: Vec<serde_json::Value>) -> HttpResponse<Body> {
    let mut body = serde_json::json!({ "code": code_name(code), "message": message });
    if !details.is_empty() {
        body["details"] = serde_json::Value::Array(details);
    }
    json_response(http_status(code), &body)
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> HttpResponse<Body> {
    let mut response = HttpResponse::new(Body::new(Full::new(Bytes::from(body.to_string()))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// One unary call: check, transcode, call the gRPC stack, transcode back.
async fn unary<S>(
    mut inner: S,
    request: HttpRequest<Body>,
    max_body_bytes: usize,
    auth: &crate::auth::layer::AuthState,
) -> HttpResponse<Body>
where
    S: tower::Service<HttpRequest<Body>, Response = HttpResponse<Body>>,
{
    let path = request.uri().path().to_owned();
    let method = path
        .strip_prefix('/')
        .and_then(|p| p.split_once('/'))
        .and_then(|(service, method)| {
            pool()
                .get_service_by_name(service)?
                .methods()
                .find(|m| m.name() == method)
        });
    let Some(method) = method else {
        // An unknown path is a 404, as the protocol has it for a route nobody serves.
        let mut response = error(
            Code::Unimplemented,
            &format!(
                "{path:?} is not a method of this server. This port serves gRPC, and Connect's unary calls: POST proto3 JSON with Content-Type: application/json to /autoscaled.v1.HorizontalAutoscaler/Recommend (or another method; see proto/autoscaled/v1)"
            ),
            Vec::new(),
        );
        *response.status_mut() = StatusCode::NOT_FOUND;
        return response;
    };
    if request.method() != Method::POST {
        let mut response = error(
            Code::Unimplemented,
            "Connect unary calls are POST requests",
            Vec::new(),
        );
        *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return response;
    }
    let codec = Codec::of(request.headers());
    let Some(codec) =
        codec.filter(|_| !method.is_client_streaming() && !method.is_server_streaming())
    else {
        let mut response = error(
            Code::Unimplemented,
            "a Connect unary call has Content-Type: application/json (or application/proto), and the method must be unary",
            Vec::new(),
        );
        *response.status_mut() = StatusCode::UNSUPPORTED_MEDIA_TYPE;
        response.headers_mut().insert(
            tonic::codegen::http::HeaderName::from_static("accept-post"),
            HeaderValue::from_static("application/json, application/proto"),
        );
        return response;
    };
    // Compressed bodies are not supported (the protocol's answer: unimplemented, naming the
    // encodings that are).
    if request
        .headers()
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| v.as_bytes() != b"identity")
    {
        return error(
            Code::Unimplemented,
            "Content-Encoding is not supported: send the body uncompressed (supported: identity)",
            Vec::new(),
        );
    }
    // Credentials first, from the headers alone: an unauthenticated call has no body read.
    if let Err(status) = auth.admit(&request) {
        return error(status.code(), status.message(), Vec::new());
    }
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > max_body_bytes) {
        let what = format!(
            "request: the body is larger than {max_body_bytes} bytes (twice the server's max_message_bytes, --max-message-bytes / AUTOSCALED_MAX_MESSAGE_BYTES)"
        );
        return error(
            Code::ResourceExhausted,
            &what,
            vec![bad_request("request", &what)],
        );
    }
    let (mut parts, body) = request.into_parts();
    let bytes = match Limited::new(body, max_body_bytes).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            let too_large = e
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some();
            if too_large {
                let violation = bad_request(
                    "request",
                    &format!(
                        "the body is larger than {max_body_bytes} bytes (twice the server's max_message_bytes, --max-message-bytes / AUTOSCALED_MAX_MESSAGE_BYTES)"
                    ),
                );
                return error(
                    Code::ResourceExhausted,
                    &format!(
                        "request: the body is larger than {max_body_bytes} bytes (twice --max-message-bytes)"
                    ),
                    vec![violation],
                );
            }
            return error(
                Code::InvalidArgument,
                &format!("the request body could not be read: {e}"),
                Vec::new(),
            );
        }
    };
    let input = method.input();
    let message = match codec {
        Codec::Json => {
            let mut de = serde_json::Deserializer::from_slice(&bytes);
            DynamicMessage::deserialize(input.clone(), &mut de)
                .map_err(|e| e.to_string())
                .and_then(|m| de.end().map(|()| m).map_err(|e| e.to_string()))
        }
        Codec::Proto => {
            DynamicMessage::decode(input.clone(), bytes.as_ref()).map_err(|e| e.to_string())
        }
    };
    let message = match message {
        Ok(m) => m,
        Err(e) => {
            let what = format!(
                "the body is not a {} in proto3 JSON: {e}",
                input.full_name()
            );
            return error(
                Code::InvalidArgument,
                &what,
                vec![bad_request("body", &what)],
            );
        }
    };
    let encoded = message.encode_to_vec();
    let mut framed = Vec::with_capacity(encoded.len() + 5);
    framed.push(0);
    framed.extend_from_slice(
        &u32::try_from(encoded.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    framed.extend_from_slice(&encoded);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    parts
        .headers
        .insert(header::TE, HeaderValue::from_static("trailers"));
    parts.headers.remove(header::CONTENT_LENGTH);
    // A caller's own gRPC headers are not Connect's: only the ones set here go in.
    parts.headers.remove("grpc-timeout");
    let deadline = parts
        .headers
        .get("connect-timeout-ms")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.parse::<u64>().ok().filter(|_| v.len() <= 10));
    let deadline = match deadline {
        None => None,
        Some(Some(ms)) => Some(std::time::Duration::from_millis(ms)),
        Some(None) => {
            return error(
                Code::InvalidArgument,
                "connect-timeout-ms: at most 10 digits of milliseconds",
                Vec::new(),
            );
        }
    };
    if let Some(deadline) = deadline {
        // As `grpc-timeout` for the layers inside (load shedding reads it), at most 8 digits
        // per unit.
        let ms = deadline.as_millis();
        let timeout = if ms < 100_000_000 {
            format!("{ms}m")
        } else {
            format!("{}S", ms / 1000)
        };
        if let Ok(v) = HeaderValue::from_str(&timeout) {
            parts.headers.insert("grpc-timeout", v);
        }
    }
    let request = HttpRequest::from_parts(parts, Body::new(Full::new(Bytes::from(framed))));
    let call = async {
        match std::future::poll_fn(|cx| inner.poll_ready(cx)).await {
            Ok(()) => inner.call(request).await,
            Err(e) => Err(e),
        }
    };
    // tonic's own timer is outside this layer and never sees the header set here: the
    // deadline is kept here.
    let response = match deadline {
        Some(d) => match tokio::time::timeout(d, call).await {
            Ok(r) => r,
            Err(_) => {
                return error(
                    Code::DeadlineExceeded,
                    "the call did not finish within connect-timeout-ms",
                    Vec::new(),
                );
            }
        },
        None => call.await,
    };
    let Ok(response) = response else {
        return error(Code::Internal, "the gRPC stack failed", Vec::new());
    };
    answer(response, &method.output(), codec).await
}

/// The gRPC answer as a Connect answer.
async fn answer(
    response: HttpResponse<Body>,
    output: &MessageDescriptor,
    codec: Codec,
) -> HttpResponse<Body> {
    let (parts, body) = response.into_parts();
    let collected = match body.collect().await {
        Ok(c) => c,
        Err(e) => {
            return error(
                Code::Internal,
                &format!("the gRPC answer could not be read: {e}"),
                Vec::new(),
            );
        }
    };
    let trailers = collected.trailers().cloned();
    let mut data = collected.to_bytes();
    // Trailers-only (an error) carries the status in the headers.
    let status_headers = match &trailers {
        Some(t) if t.contains_key("grpc-status") => t,
        _ => &parts.headers,
    };
    let status = tonic::Status::from_header_map(status_headers);
    if let Some(status) = status.filter(|s| s.code() != Code::Ok) {
        let mut response = error(
            status.code(),
            status.message(),
            details_of(status.details()),
        );
        if let Some(ms) = parts
            .headers
            .get("grpc-retry-pushback-ms")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            && let Ok(v) = HeaderValue::from_str(&ms.div_ceil(1000).max(1).to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return response;
    }
    // One message: a 5-byte prefix (flag, length) and the bytes.
    if data.remaining() < 5 {
        return error(Code::Internal, "the gRPC answer had no message", Vec::new());
    }
    let _flag = data.get_u8();
    let len = data.get_u32() as usize;
    let bytes = data.slice(..len.min(data.len()));
    let body = match codec {
        Codec::Proto => bytes,
        Codec::Json => {
            let message = match DynamicMessage::decode(output.clone(), bytes) {
                Ok(m) => m,
                Err(e) => {
                    return error(
                        Code::Internal,
                        &format!("the answer does not decode: {e}"),
                        Vec::new(),
                    );
                }
            };
            let mut out = serde_json::Serializer::new(Vec::new());
            if let Err(e) = message.serialize_with_options(&mut out, &SerializeOptions::new()) {
                return error(
                    Code::Internal,
                    &format!("the answer does not encode: {e}"),
                    Vec::new(),
                );
            }
            Bytes::from(out.into_inner())
        }
    };
    let mut response = HttpResponse::new(Body::new(Full::new(body)));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(codec.content_type()),
    );
    response
}

/// A `google.rpc.BadRequest` detail naming one field, in Connect's detail form.
fn bad_request(field: &str, description: &str) -> serde_json::Value {
    let mut details = tonic_types::ErrorDetails::new();
    details.add_bad_request_violation(field, description);
    use tonic_types::StatusExt;
    let status = tonic::Status::with_error_details(Code::InvalidArgument, "", details);
    details_of(status.details())
        .into_iter()
        .next()
        .unwrap_or_default()
}

/// The details of a `grpc-status-details-bin` (a `google.rpc.Status`) in Connect's form:
/// `{"type": "google.rpc.BadRequest", "value": base64, "debug": {...}}`.
fn details_of(bytes: &[u8]) -> Vec<serde_json::Value> {
    if bytes.is_empty() {
        return Vec::new();
    }
    let Ok(status) = tonic_types::pb::Status::decode(bytes) else {
        return Vec::new();
    };
    status
        .details
        .iter()
        .map(|any| {
            let type_name = any.type_url.rsplit('/').next().unwrap_or(&any.type_url);
            let mut detail = serde_json::json!({
                "type": type_name,
                "value": base64::engine::general_purpose::STANDARD_NO_PAD.encode(&any.value),
            });
            if let Some(debug) = pool()
                .get_message_by_name(type_name)
                .and_then(|d| DynamicMessage::decode(d, any.value.as_slice()).ok())
                .and_then(|m| serde_json::to_value(&m).ok())
            {
                detail["debug"] = debug;
            }
            detail
        })
        .collect()
}

/// Connect's name of a code.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "canceled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid_argument",
        Code::DeadlineExceeded => "deadline_exceeded",
        Code::NotFound => "not_found",
        Code::AlreadyExists => "already_exists",
        Code::PermissionDenied => "permission_denied",
        Code::ResourceExhausted => "resource_exhausted",
        Code::FailedPrecondition => "failed_precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out_of_range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data_loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

/// The HTTP status Connect gives a code.
fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
            StatusCode::BAD_REQUEST
        }
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every unary method of the served services resolves in the pool (the descriptor sets
    /// decode), and the streaming one is known to be streaming.
    #[test]
    fn every_unary_method_is_reachable() {
        for (service, method) in [
            ("autoscaled.v1.HorizontalAutoscaler", "Recommend"),
            ("autoscaled.v1.HorizontalAutoscaler", "ReportScale"),
            ("autoscaled.v1.VerticalAutoscaler", "RecordUsage"),
            ("grpc.health.v1.Health", "Check"),
        ] {
            let m = pool()
                .get_service_by_name(service)
                .and_then(|s| s.methods().find(|m| m.name() == method))
                .unwrap_or_else(|| panic!("{service}/{method}"));
            assert!(!m.is_server_streaming());
        }
        assert!(
            pool()
                .get_message_by_name("google.rpc.BadRequest")
                .is_some()
        );
    }

    #[test]
    fn codes_map_as_connect_says() {
        assert_eq!(http_status(Code::InvalidArgument), StatusCode::BAD_REQUEST);
        assert_eq!(http_status(Code::Unauthenticated), StatusCode::UNAUTHORIZED);
        assert_eq!(
            http_status(Code::ResourceExhausted),
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(code_name(Code::Cancelled), "canceled");
    }
}
