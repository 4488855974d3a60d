//! The tower layer that authenticates every call before routing (see the module above).
//!
//! Per call: find what the path is (one of our methods and its verb, health, reflection, or
//! something the router will answer UNIMPLEMENTED); take the identity from the bearer token if
//! the `authorization` metadata is present (a present but unknown token is UNAUTHENTICATED,
//! never silently ignored), else from the mTLS certificate of the connection; refuse a call
//! that needs an identity and has none; attach the [`Caller`] for the per-key check.
//!
//! Like grpc-go's `credentials` + interceptor pair, but as one layer: the handlers only see
//! calls that passed it.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use tonic::{
    Status,
    codegen::http::{Request as HttpRequest, Response as HttpResponse},
};

use super::{Caller, Peer, PolicyHandle, Verb};
use crate::config::Exposure;

/// What the layer enforces. Built once by the server from the configuration.
#[derive(Clone, Debug)]
pub(crate) struct AuthState {
    /// The authorization file; `None`: no `--authz` (every call is allowed, tokens ignored).
    pub(crate) policy: Option<PolicyHandle>,
    /// Whether reflection on the main port needs an identity.
    pub(crate) reflection: Exposure,
    /// Whether health on the main port needs an identity.
    pub(crate) health: Exposure,
    /// The replicas' shared secret: a forwarded call's marker is accepted only when it
    /// verifies with it (`peers`).
    pub(crate) peers: Option<crate::peers::PeerKey>,
}

/// What a request path is, for authorization.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// One of our methods, with its verb.
    Method(Verb),
    /// A path of one of our services that has no verb (a method added without one): refused
    /// with PERMISSION_DENIED while an authorization file is configured (fail closed).
    Unmapped,
    Health,
    Reflection,
    /// Anything else: the router answers UNIMPLEMENTED.
    Other,
}

/// The verb of each method of our services. A new RPC must be added here (the test
/// `every_method_of_the_descriptor_set_has_a_verb` fails until it is).
pub(crate) fn route(path: &str) -> Route {
    let Some((service, method)) = path.strip_prefix('/').and_then(|p| p.split_once('/')) else {
        return Route::Other;
    };
    match service {
        "autoscaled.v1.HorizontalAutoscaler" => match method {
            "Recommend" | "RecommendBatch" | "ReportScale" => Route::Method(Verb::Recommend),
            "GetHistory" | "ListTargets" | "Simulate" => Route::Method(Verb::Read),
            "DeleteTarget" => Route::Method(Verb::Delete),
            "GetPolicy" | "ListPolicies" | "GetScalingGroup" | "ListScalingGroups" => {
                Route::Method(Verb::Read)
            }
            "PutPolicy" | "DeletePolicy" | "PutScalingGroup" | "DeleteScalingGroup" => {
                Route::Method(Verb::Configure)
            }
            _ => Route::Unmapped,
        },
        "autoscaled.v1.VerticalAutoscaler" => match method {
            "RecordUsage" => Route::Method(Verb::WriteUsage),
            "GetRecommendation" | "ListVerticalTargets" => Route::Method(Verb::Read),
            "DeleteVerticalTarget" => Route::Method(Verb::Delete),
            _ => Route::Unmapped,
        },
        "grpc.health.v1.Health" => Route::Health,
        "grpc.reflection.v1.ServerReflection" | "grpc.reflection.v1alpha.ServerReflection" => {
            Route::Reflection
        }
        _ => Route::Other,
    }
}

/// Whether `path` is a method this server serves: one of ours (with a verb), health's two,
/// or reflection's. Only these become metric labels, so a client cannot grow the label set
/// by calling made-up methods, whether they are refused here or answered UNIMPLEMENTED.
pub(crate) fn known_method(path: &str) -> bool {
    matches!(route(path), Route::Method(_))
        || matches!(
            path,
            "/grpc.health.v1.Health/Check"
                | "/grpc.health.v1.Health/Watch"
                | "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
                | "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
        )
}

/// An audit line for a call refused before it reached a handler (`UNAUTHENTICATED` or
/// `PERMISSION_DENIED` in this layer). The path is the request URI's, which HTTP already
/// keeps free of control characters; it is quoted all the same, as every caller-given field.
fn audit_refusal(
    path: &str,
    identity: Option<&str>,
    remote: Option<std::net::SocketAddr>,
    why: &str,
) {
    tracing::info!(
        target: "autoscaled::audit",
        path = ?path,
        identity = ?identity.unwrap_or("-"),
        remote = %remote.map_or_else(|| "-".to_owned(), |a| a.to_string()),
        outcome = "refused",
        "{why}"
    );
}

/// The layer; see [`Auth`].
#[derive(Clone, Debug)]
pub(crate) struct AuthLayer {
    state: Arc<AuthState>,
}

impl AuthLayer {
    pub(crate) fn new(state: AuthState) -> Self {
        AuthLayer {
            state: Arc::new(state),
        }
    }
}

impl<S> tower::Layer<S> for AuthLayer {
    type Service = Auth<S>;

    fn layer(&self, inner: S) -> Auth<S> {
        Auth {
            inner,
            state: Arc::clone(&self.state),
        }
    }
}

/// The service of [`AuthLayer`].
#[derive(Clone, Debug)]
pub(crate) struct Auth<S> {
    inner: S,
    state: Arc<AuthState>,
}

/// The token of an `authorization: Bearer TOKEN` value (scheme case-insensitive, RFC 6750).
fn bearer(value: &[u8]) -> Option<&str> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

impl AuthState {
    /// The caller of a call another replica forwarded, when its marker verifies with the
    /// replicas' secret; the marker's headers are removed either way, so a marker a client
    /// set is ignored (and counted), never trusted.
    fn forwarded(
        &self,
        headers: &mut tonic::codegen::http::HeaderMap,
        path: &str,
    ) -> Option<crate::peers::Forwarded> {
        use crate::peers::{FORWARDED, FORWARDED_FOR, FORWARDED_IDENTITY};
        let marker = headers.remove(FORWARDED)?;
        let text = |v: Option<tonic::codegen::http::HeaderValue>| {
            v.and_then(|v| v.to_str().ok().map(str::to_owned))
                .unwrap_or_default()
        };
        let remote = text(headers.remove(FORWARDED_FOR));
        let identity = text(headers.remove(FORWARDED_IDENTITY));
        let verified = self.peers.as_ref().and_then(|key| {
            key.verify_marker(
                marker.to_str().ok()?,
                path,
                &remote,
                &identity,
                crate::peers::now_ms(),
            )
        });
        if verified.is_none() {
            crate::metrics::door_refused("grpc", "forwarded_marker");
            tracing::debug!(path, "a forwarded marker that does not verify: ignored");
        }
        verified
    }

    /// Authenticates `request` (headers only: gRPC and HTTP/JSON calls alike reach it before
    /// their bodies are read) and returns the caller, or the status to answer with.
    pub(crate) fn admit<B>(&self, request: &HttpRequest<B>) -> Result<Caller, Status> {
        let peer = request.extensions().get::<Peer>();
        let forwarded = request.extensions().get::<crate::peers::Forwarded>();
        // A call another replica forwarded (its marker verified): the caller's address as
        // that replica saw it. Else TLS (and the console) say who connected in `Peer`, a
        // plaintext connection in its TCP information: every audit line has the address.
        let remote = forwarded
            .and_then(|f| f.remote)
            .or_else(|| peer.and_then(|p| p.remote))
            .or_else(|| {
                request
                    .extensions()
                    .get::<tonic::transport::server::TcpConnectInfo>()
                    .and_then(tonic::transport::server::TcpConnectInfo::remote_addr)
            });
        // Who the certificate says the caller is: for a forwarded call, the caller's, not the
        // forwarding replica's.
        let certified: Option<Arc<str>> = match forwarded {
            Some(f) => f.identity.as_deref().map(Arc::from),
            None => peer.and_then(|p| p.identity.clone()),
        };
        let Some(handle) = &self.policy else {
            // No authorization file: nobody is refused; the certificate identity (if any) is
            // still known, for the audit log.
            return Ok(Caller {
                identity: certified.clone(),
                policy: None,
                remote,
            });
        };
        let route = route(request.uri().path());
        let needs_identity = match route {
            Route::Method(_) | Route::Unmapped => true,
            Route::Health => self.health == Exposure::Auth,
            Route::Reflection => self.reflection == Exposure::Auth,
            Route::Other => false,
        };
        let policy = handle.current();
        if !needs_identity {
            // Open health or reflection, or a path nobody serves: no credential is checked
            // (a stale token must not break a probe).
            return Ok(Caller {
                identity: certified.clone(),
                policy: Some(policy),
                remote,
            });
        }
        let identity = match request.headers().get("authorization") {
            Some(value) => {
                let Some(token) = bearer(value.as_bytes()) else {
                    crate::metrics::authn_failure("malformed");
                    audit_refusal(
                        request.uri().path(),
                        None,
                        remote,
                        "malformed authorization metadata",
                    );
                    return Err(Status::unauthenticated(
                        "the authorization metadata must be `Bearer TOKEN`",
                    ));
                };
                match policy.token_identity(token) {
                    Some(identity) => Some(Arc::clone(identity)),
                    None => {
                        crate::metrics::authn_failure("bad_token");
                        audit_refusal(request.uri().path(), None, remote, "unknown bearer token");
                        return Err(Status::unauthenticated("unknown or revoked bearer token"));
                    }
                }
            }
            None => certified.clone(),
        };
        if identity.is_none() {
            crate::metrics::authn_failure("missing");
            audit_refusal(request.uri().path(), None, remote, "no credentials");
            return Err(Status::unauthenticated(
                "no credentials: present a client certificate or an `authorization: Bearer` token",
            ));
        }
        if route == Route::Unmapped {
            crate::metrics::authz_denied("unmapped");
            audit_refusal(
                request.uri().path(),
                identity.as_deref(),
                remote,
                "method without a verb in the authorization model",
            );
            return Err(Status::permission_denied(format!(
                "{} has no verb in the authorization model",
                request.uri().path()
            )));
        }
        Ok(Caller {
            identity,
            policy: Some(policy),
            remote,
        })
    }
}

impl<S, B> tower::Service<HttpRequest<B>> for Auth<S>
where
    S: tower::Service<HttpRequest<B>, Response = HttpResponse<tonic::body::Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: HttpRequest<B>) -> Self::Future {
        let path = request.uri().path().to_owned();
        if let Some(forwarded) = self.state.forwarded(request.headers_mut(), &path) {
            request.extensions_mut().insert(forwarded);
        }
        match self.state.admit(&request) {
            Ok(caller) => {
                if let (Some(slot), Some(identity)) = (
                    request.extensions().get::<super::IdentitySlot>(),
                    &caller.identity,
                ) {
                    let _ = slot.0.set(Arc::clone(identity));
                }
                request.extensions_mut().insert(caller);
                Box::pin(self.inner.call(request))
            }
            Err(status) => {
                let response = status.into_http::<tonic::body::Body>();
                Box::pin(std::future::ready(Ok(response)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A forwarded call whose marker verifies is the caller's (its address and certificate
    /// identity as the forwarding replica saw them); any other marker is removed and the call
    /// is the connection's.
    #[test]
    fn a_forwarded_marker_counts_only_when_it_verifies() {
        use crate::peers::{FORWARDED, FORWARDED_FOR, FORWARDED_IDENTITY, PeerKey};
        let key = PeerKey::new(&[3u8; 32]);
        let state = AuthState {
            policy: None,
            reflection: Exposure::Open,
            health: Exposure::Open,
            peers: Some(key.clone()),
        };
        let path = "/autoscaled.v1.HorizontalAutoscaler/Recommend";
        let caller: std::net::SocketAddr = "192.0.2.1:5000".parse().unwrap();
        let replica: std::net::SocketAddr = "10.0.0.2:40000".parse().unwrap();
        let request = |marker: &str| {
            let mut r = HttpRequest::builder().uri(path).body(()).unwrap();
            r.headers_mut().insert(FORWARDED, marker.parse().unwrap());
            r.headers_mut()
                .insert(FORWARDED_FOR, caller.to_string().parse().unwrap());
            r.headers_mut()
                .insert(FORWARDED_IDENTITY, "spiffe://caller".parse().unwrap());
            r.extensions_mut().insert(Peer {
                remote: Some(replica),
                identity: Some(Arc::from("spiffe://replica")),
            });
            r
        };
        let good = key.marker(
            path,
            Some(caller),
            Some("spiffe://caller"),
            crate::peers::now_ms(),
        );
        for (marker, forwarded) in [(good.as_str(), true), ("1.00", false)] {
            let mut r = request(marker);
            let path = r.uri().path().to_owned();
            let seen = state.forwarded(r.headers_mut(), &path);
            assert_eq!(seen.is_some(), forwarded, "{marker}");
            assert!(!r.headers().contains_key(FORWARDED));
            assert!(!r.headers().contains_key(FORWARDED_FOR));
            if let Some(f) = seen {
                r.extensions_mut().insert(f);
            }
            let caller_seen = state.admit(&r).unwrap();
            if forwarded {
                assert_eq!(caller_seen.remote, Some(caller));
                assert_eq!(caller_seen.identity.as_deref(), Some("spiffe://caller"));
            } else {
                assert_eq!(caller_seen.remote, Some(replica));
                assert_eq!(caller_seen.identity.as_deref(), Some("spiffe://replica"));
            }
        }
    }

    #[test]
    fn bearer_values() {
        assert_eq!(bearer(b"Bearer abc"), Some("abc"));
        assert_eq!(bearer(b"bearer  abc "), Some("abc"));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b"abc"), None);
        assert_eq!(bearer(&[0xff, 0x20, 0x61]), None);
    }

    /// Every method of the services in the embedded descriptor set has a verb, so a new RPC
    /// cannot be added without deciding who may call it.
    #[test]
    fn every_method_of_the_descriptor_set_has_a_verb() {
        let pool = prost_reflect::DescriptorPool::decode(crate::pb::FILE_DESCRIPTOR_SET).unwrap();
        let mut methods = 0;
        for service in pool.services() {
            for method in service.methods() {
                let path = format!("/{}/{}", service.full_name(), method.name());
                assert!(
                    matches!(route(&path), Route::Method(_)),
                    "{path} has no verb in auth::layer::route"
                );
                methods += 1;
            }
        }
        assert!(methods >= 8, "{methods}");
        assert_eq!(route("/grpc.health.v1.Health/Check"), Route::Health);
        assert_eq!(
            route("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"),
            Route::Reflection
        );
        assert_eq!(
            route("/autoscaled.v1.HorizontalAutoscaler/Nope"),
            Route::Unmapped
        );
        assert_eq!(route("/x.Y/Z"), Route::Other);
        assert_eq!(route("nonsense"), Route::Other);
    }
}
