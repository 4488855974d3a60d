//! The process's shutdown signal: SIGTERM (what Kubernetes sends) or SIGINT (Ctrl-C), as
//! linkerd's `signal::shutdown` does. mini-redis' binary only handles Ctrl-C.

/// Completes on the first SIGTERM or SIGINT. If a handler cannot be installed, that signal is
/// ignored (logged) and the other still works.
pub async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                None
            }
        };
        let term = async {
            match term.as_mut() {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = term => tracing::info!("SIGTERM received"),
            r = tokio::signal::ctrl_c() => match r {
                Ok(()) => tracing::info!("SIGINT received"),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for SIGINT");
                    std::future::pending::<()>().await;
                }
            },
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
