//! The process's shutdown signal: SIGTERM (what Kubernetes sends) or SIGINT (Ctrl-C), as
//! linkerd's `signal::shutdown` does. mini-redis' binary only handles Ctrl-C.
//!
//! The handlers are installed by [`Signals::install`], *before* the server announces that it
//! listens: a SIGTERM sent right after the announcement must start a graceful shutdown, not
//! kill the process with the default action.

/// Installed SIGTERM and SIGINT handlers.
#[derive(Debug)]
pub struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers; must run inside a tokio runtime.
    pub fn install() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Signals {
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Signals {})
        }
    }

    /// Completes on the first SIGTERM or SIGINT.
    pub async fn recv(mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => tracing::info!("SIGTERM received"),
            _ = self.int.recv() => tracing::info!("SIGINT received"),
        }
        #[cfg(not(unix))]
        {
            let _ = &mut self;
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
