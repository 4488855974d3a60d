//! HTTP/JSON for callers without gRPC: the Connect protocol's unary calls
//! (<https://connectrpc.com/docs/protocol>) on the gRPC listener.
//!
//! `curl -H 'Content-Type: application/json' -d @req.json http://HOST:PORT/autoscaled.v1.HorizontalAutoscaler/Recommend`
//! answers the response in proto3 JSON; an error is a Connect error (an HTTP status and
//! `{"code": "invalid_argument", "message": ..., "details": [...]}`, each detail with its
//! `type`, its bytes in `value` and its JSON in `debug`, so the BadRequest's field violations
//! read as they do over gRPC).
//!
//! A Connect call passes the same layers as a gRPC call, in the same order, from the same
//! code: the request metrics and the refusal log, authentication, load shedding with the
//! buffered-bytes bound, the body timeout and the deadline, the wire limits, authorization
//! and the handlers. Two layers of this module stand around them:
//!
//! * [`ConnectLayer`], at the edge: recognises a Connect call, answers what needs no body (an
//!   unknown path, a method that is not POST, an unsupported codec or `Content-Encoding`, a
//!   `Host` that a browser-facing door of a server without authorization does not answer),
//!   carries `connect-timeout-ms` as `grpc-timeout`, and turns the gRPC answer from inside
//!   back into a Connect answer (the message to JSON, or the status with its details);
//! * [`TranscodeLayer`], inside the load shedding: the body, read by then within the message
//!   limit and counted against the buffered bytes, becomes the gRPC message. A proto body is
//!   the message already; a JSON body has its counts (pods, containers, samples, metrics)
//!   checked on the JSON itself before anything is built from it (`wire_limits::check_json`),
//!   so an HTTP/JSON call is refused at the cost of a scan, as a gRPC call is.
//!
//! Everything else (gRPC, and requests that are neither) passes through untouched, except a
//! plain HTTP request for a path that is not a method, which gets a 404 saying what this
//! port serves. Streaming methods (health's Watch) are not Connect unary calls: 415 for
//! them, as the protocol says for an unsupported codec.

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

/// What the edge learned of a Connect call, for the transcoder inside the limits.
#[derive(Clone, Debug)]
pub(crate) struct ConnectCall {
    codec: Codec,
    input: MessageDescriptor,
}

/// The gRPC code a Connect answer stands for (it carries no `grpc-status`), for the request
/// metrics and the refusal log outside.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AnsweredCode(pub(crate) Code);

/// A Connect error's message, for the refusal log.
#[derive(Clone, Debug)]
pub(crate) struct RefusalMessage(pub(crate) String);

/// Which `Host` a browser-facing door (Connect here, the console on the admin listener)
/// answers when no authorization file protects it: a page the operator visits cannot reach
/// it through a name rebound to 127.0.0.1 (DNS rebinding), since such a request carries the
/// attacker's name. IP literals and `localhost` are always allowed (rebinding needs a name);
/// `--allowed-hosts` adds the names the server is reached by.
#[derive(Clone, Debug, Default)]
pub(crate) struct HostCheck {
    /// Checked at all: off when an authorization file is enforced (credentials protect).
    enforce: bool,
    /// Extra names (lowercase, without port).
    allowed: Vec<String>,
}

impl HostCheck {
    pub(crate) fn new(enforce: bool, allowed: &[String]) -> Self {
        HostCheck {
            enforce,
            allowed: allowed.iter().map(|h| h.to_ascii_lowercase()).collect(),
        }
    }

    /// Whether a request with these headers (and this URI, for HTTP/2's `:authority`) may be
    /// answered.
    pub(crate) fn allows(&self, headers: &HeaderMap, uri: &tonic::codegen::http::Uri) -> bool {
        if !self.enforce {
            return true;
        }
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .or_else(|| uri.authority().map(|a| a.as_str().to_owned()));
        let Some(host) = host else {
            return true; // not a browser: browsers always send one
        };
        let name = match host.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(""),
            None => host.rsplit_once(':').map_or(host.as_str(), |(h, _)| h),
        }
        .trim_end_matches('.')
        .to_ascii_lowercase();
        name.parse::<std::net::IpAddr>().is_ok()
            || name == "localhost"
            || name.ends_with(".localhost")
            || self.allowed.contains(&name)
    }

    /// The refusal of a request whose Host is not allowed.
    pub(crate) fn refusal(headers: &HeaderMap) -> String {
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let host: String = host.chars().take(100).collect();
        format!(
            "Host {host:?} is not a name this server answers browsers at: without an authorization file only IP addresses and localhost are (DNS rebinding); name the others with --allowed-hosts"
        )
    }
}

/// The layer at the edge of the main listener (inside the request metrics): it recognises a
/// Connect call, answers what needs no body (an unknown path, a method that is not POST, an
/// unsupported codec or encoding, a Host a browser-facing door does not answer), sets the
/// deadline, and turns the gRPC answer from inside back into a Connect answer. The body is
/// read by the load shedding inside, within its limits, and decoded by [`TranscodeLayer`].
#[derive(Clone, Debug)]
pub(crate) struct ConnectLayer {
    hosts: std::sync::Arc<HostCheck>,
}

impl ConnectLayer {
    pub(crate) fn new(hosts: HostCheck) -> Self {
        ConnectLayer {
            hosts: std::sync::Arc::new(hosts),
        }
    }
}

impl<S> tower::Layer<S> for ConnectLayer {
    type Service = Connect<S>;

    fn layer(&self, inner: S) -> Connect<S> {
        Connect {
            inner,
            hosts: std::sync::Arc::clone(&self.hosts),
        }
    }
}

/// See [`ConnectLayer`].
#[derive(Clone, Debug)]
pub(crate) struct Connect<S> {
    inner: S,
    hosts: std::sync::Arc<HostCheck>,
}

type Body = tonic::body::Body;

/// A Connect answer, marked with the code it stands for.
fn answered(mut response: HttpResponse<Body>, code: Code) -> HttpResponse<Body> {
    response.extensions_mut().insert(AnsweredCode(code));
    response
}

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
        let hosts = std::sync::Arc::clone(&self.hosts);
        Box::pin(async move { Ok(unary(inner, request, &hosts).await) })
    }
}

/// A Connect error response.
fn error(code: Code, message: &str, details: Vec<serde_json::Value>) -> HttpResponse<Body> {
    let mut body = serde_json::json!({ "code": code_name(code), "message": message });
    if !details.is_empty() {
        body["details"] = serde_json::Value::Array(details);
    }
    let mut response = answered(json_response(http_status(code), &body), code);
    response
        .extensions_mut()
        .insert(RefusalMessage(message.to_owned()));
    response
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

/// One unary call at the edge: check what needs no body, pass it in, answer in Connect.
async fn unary<S>(
    mut inner: S,
    mut request: HttpRequest<Body>,
    hosts: &HostCheck,
) -> HttpResponse<Body>
where
    S: tower::Service<HttpRequest<Body>, Response = HttpResponse<Body>>,
{
    if !hosts.allows(request.headers(), request.uri()) {
        return error(
            Code::PermissionDenied,
            &HostCheck::refusal(request.headers()),
            Vec::new(),
        );
    }
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
    // A caller's own gRPC headers are not Connect's: only the ones set here go in.
    request.headers_mut().remove("grpc-timeout");
    let deadline = request
        .headers()
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
            request.headers_mut().insert("grpc-timeout", v);
        }
    }
    request.extensions_mut().insert(ConnectCall {
        codec,
        input: method.input(),
    });
    let call = async {
        match std::future::poll_fn(|cx| inner.poll_ready(cx)).await {
            Ok(()) => inner.call(request).await,
            Err(e) => Err(e),
        }
    };
    // tonic's own timer is outside this layer and never sees the header set here: the
    // deadline is kept here (the body's reading included).
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

/// The layer inside the load shedding that turns a Connect call's body (read by then, within
/// the limits every call has) into the gRPC message it stands for: a proto body is the
/// message already, framed as is (the codec inside checks its counts on the wire bytes, as
/// for gRPC); a JSON body has its counts checked on the JSON itself
/// (`api::wire_limits::check_json`) before anything is built from it, then becomes the
/// message. Calls that are not Connect pass untouched.
#[derive(Clone, Debug)]
pub(crate) struct TranscodeLayer {
    limits: std::sync::Arc<Limits>,
}

impl TranscodeLayer {
    pub(crate) fn new(limits: &Limits) -> Self {
        TranscodeLayer {
            limits: std::sync::Arc::new(limits.clone()),
        }
    }
}

impl<S> tower::Layer<S> for TranscodeLayer {
    type Service = Transcode<S>;

    fn layer(&self, inner: S) -> Transcode<S> {
        Transcode {
            inner,
            limits: std::sync::Arc::clone(&self.limits),
        }
    }
}

/// See [`TranscodeLayer`].
#[derive(Clone, Debug)]
pub(crate) struct Transcode<S> {
    inner: S,
    limits: std::sync::Arc<Limits>,
}

impl<S> tower::Service<HttpRequest<Body>> for Transcode<S>
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
        let Some(call) = request.extensions().get::<ConnectCall>().cloned() else {
            return Box::pin(self.inner.call(request));
        };
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let limits = std::sync::Arc::clone(&self.limits);
        Box::pin(async move {
            let request = match transcode(request, &call, &limits).await {
                Ok(request) => request,
                Err(status) => return Ok(status.into_http()),
            };
            std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            inner.call(request).await
        })
    }
}

/// A Connect request as the gRPC request it stands for.
async fn transcode(
    request: HttpRequest<Body>,
    call: &ConnectCall,
    limits: &Limits,
) -> Result<HttpRequest<Body>, tonic::Status> {
    let (mut parts, body) = request.into_parts();
    // The same bound as a gRPC message's; the load shedding has already read at most this
    // (and counted it against the buffered bytes), the rest left unread.
    let max = limits.max_message_bytes;
    let too_large = || {
        tonic::Status::from(crate::api::status::ApiError::ResourceExhausted {
            field: "request".to_owned(),
            message: format!(
                "the body is larger than {max} bytes (the server's max_message_bytes, --max-message-bytes / AUTOSCALED_MAX_MESSAGE_BYTES)"
            ),
        })
    };
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(too_large());
    }
    let bytes = match Limited::new(body, max).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                return Err(too_large());
            }
            // The load shedding's own answer (a deadline, a dropped body) is a Status.
            if let Ok(status) = e.downcast::<tonic::Status>() {
                return Err(*status);
            }
            return Err(tonic::Status::invalid_argument(
                "the request body could not be read",
            ));
        }
    };
    let message = match call.codec {
        // Already the message: the codec inside counts it on the wire, before decoding.
        Codec::Proto => bytes,
        Codec::Json => {
            if let Some(schema) = crate::api::wire_limits::schema_named(call.input.full_name()) {
                crate::api::wire_limits::check_json(schema, &bytes, limits)
                    .map_err(tonic::Status::from)?;
            }
            let mut de = serde_json::Deserializer::from_slice(&bytes);
            let decoded = DynamicMessage::deserialize(call.input.clone(), &mut de)
                .map_err(|e| e.to_string())
                .and_then(|m| de.end().map(|()| m).map_err(|e| e.to_string()));
            let message = decoded.map_err(|e| {
                let what = format!(
                    "the body is not a {} in proto3 JSON: {e}",
                    call.input.full_name()
                );
                tonic::Status::from(crate::api::status::ApiError::field("body", what))
            })?;
            Bytes::from(message.encode_to_vec())
        }
    };
    let mut framed = Vec::with_capacity(message.len() + 5);
    framed.push(0);
    framed.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    framed.extend_from_slice(&message);
    drop(message);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    parts
        .headers
        .insert(header::TE, HeaderValue::from_static("trailers"));
    parts.headers.remove(header::CONTENT_LENGTH);
    Ok(HttpRequest::from_parts(
        parts,
        Body::new(Full::new(Bytes::from(framed))),
    ))
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
        if let Some(ms) = crate::api::status::retry_after_ms(&status)
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
    answered(response, Code::Ok)
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
            ("autoscaled.v1.HorizontalAutoscaler", "RecommendBatch"),
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
