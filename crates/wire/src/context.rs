//! What the server layer knows about the request being served and the handlers and the codec
//! need: the limits to check the body against before it is decoded, the caller's deadline
//! (`grpc-timeout`) and the peer address for logs.
//!
//! tonic builds a codec per call with `Default::default()` and gives it only the bytes, so
//! the server layer (the server's `overload`) puts this context in a tokio task-local around the
//! service future: the body is decoded and the handler runs inside that future. Outside a
//! server (a client decoding a response, a unit test) there is no context: no wire limits,
//! no deadline.

use std::{future::Future, net::SocketAddr, sync::Arc, time::Instant};

use crate::limits::Limits;

/// The per-request context set by the server layer.
#[derive(Clone, Debug)]
pub struct RequestContext {
    /// The server's configured limits (`config.limits`).
    pub limits: Arc<Limits>,
    /// When the caller stops waiting (from `grpc-timeout`); `None`: no deadline.
    pub deadline: Option<Instant>,
    /// The caller's address, when the transport knows it.
    pub peer: Option<SocketAddr>,
}

tokio::task_local! {
    static CONTEXT: RequestContext;
}

/// Runs `future` with `context` visible to [`with`], [`deadline_passed`] and the codec.
pub fn scope<F: Future>(context: RequestContext, future: F) -> impl Future<Output = F::Output> {
    CONTEXT.scope(context, future)
}

/// `f` of the current request's context, or `None` outside a server request.
pub fn with<R>(f: impl FnOnce(&RequestContext) -> R) -> Option<R> {
    CONTEXT.try_with(f).ok()
}

/// Whether the caller's deadline has passed: the caller has given up, so the work must not be
/// done (checked before a commit, as grpc-go's `ctx.Err()` check before a side effect).
pub fn deadline_passed() -> bool {
    with(|c| c.deadline.is_some_and(|d| Instant::now() >= d)).unwrap_or(false)
}

/// `Err(DeadlineExceeded)` if the caller's deadline has passed: called right before a
/// commit, so that a caller who gave up is not answered with a write it never saw.
pub fn check_deadline() -> Result<(), crate::status::ApiError> {
    if deadline_passed() {
        return Err(crate::status::ApiError::DeadlineExceeded(
            "the call's deadline passed before its commit; nothing was stored".to_owned(),
        ));
    }
    Ok(())
}

/// The peer address for logs ("unknown" outside a server request).
pub fn peer() -> String {
    with(|c| c.peer.map(|p| p.to_string()))
        .flatten()
        .unwrap_or_else(|| "unknown".to_owned())
}
