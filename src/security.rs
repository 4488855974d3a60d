//! The security material of a running server (TLS configuration, authorization file) and
//! its reloads: on SIGHUP, and every `security_reload_secs` when a file's content changed.
//! A reload that fails keeps what is in force, logs an error and counts
//! `autoscaled_security_reloads_total{result="error"}`; the listener is never dropped.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use thiserror::Error;

/// Re-exported because [`SecurityError::Tls`] carries it.
pub use crate::tls::TlsError;

use crate::{
    auth::{Policy, PolicyError, PolicyHandle, layer::AuthState, policy::sha256},
    config::SecurityConfig,
    tls::{TlsFiles, TlsState},
};

/// Why the security material cannot be loaded at start-up.
#[derive(Debug, Error)]
pub enum SecurityError {
    /// The TLS certificate, key or client CA cannot be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// `--authz` names a file that cannot be read.
    #[error("cannot read the authorization file {path}: {source}")]
    AuthzRead {
        /// The `--authz` file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The authorization file is read but invalid: the server refuses to start rather than
    /// run with a policy other than the one written.
    #[error("invalid authorization file {path}: {source}")]
    Authz {
        /// The `--authz` file.
        path: PathBuf,
        /// What is wrong in it.
        source: PolicyError,
    },
    /// SIGHUP (reload) cannot be handled, so reloads would silently not happen.
    #[error("cannot install the SIGHUP handler: {0}")]
    Signal(std::io::Error),
    /// `--peer-secret-file` or `--peer-ca` cannot be used.
    #[error("{0}")]
    Peers(String),
}

/// The authorization file and the fingerprint of the content in force.
#[derive(Debug)]
struct AuthzFile {
    path: PathBuf,
    handle: PolicyHandle,
    fingerprint: Mutex<[u8; 32]>,
}

fn read_policy(path: &Path) -> Result<(Policy, [u8; 32]), SecurityError> {
    let text = std::fs::read_to_string(path).map_err(|source| SecurityError::AuthzRead {
        path: path.to_path_buf(),
        source,
    })?;
    let policy = Policy::parse(&text).map_err(|source| SecurityError::Authz {
        path: path.to_path_buf(),
        source,
    })?;
    Ok((policy, sha256(text.as_bytes())))
}

/// What the server enforces, loaded from [`SecurityConfig`].
#[derive(Debug)]
pub struct Security {
    config: SecurityConfig,
    tls: Option<Arc<TlsState>>,
    authz: Option<AuthzFile>,
    /// The replicas' shared secret (`--peer-secret-file`).
    peers: Option<crate::peers::PeerKey>,
    /// How this replica forwards to the others (the secret, and TLS settings under TLS).
    link: Option<crate::api::forward::PeerLink>,
    #[cfg(unix)]
    hangup: Mutex<Option<tokio::signal::unix::Signal>>,
}

impl Security {
    /// Reads and checks every file. When TLS or an authorization file is configured, also
    /// installs the SIGHUP handler (so must run inside a Tokio runtime): do this before the
    /// server announces it listens, so that a SIGHUP right after reloads rather than kills.
    pub fn load(config: &SecurityConfig) -> Result<Arc<Security>, SecurityError> {
        let tls = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => Some(Arc::new(TlsState::load(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: config.tls_client_ca.clone(),
                client_auth: config.tls_client_auth,
            })?)),
            _ => None,
        };
        let authz = match &config.authz {
            Some(path) => {
                let (policy, fingerprint) = read_policy(path)?;
                Some(AuthzFile {
                    path: path.clone(),
                    handle: PolicyHandle::new(policy),
                    fingerprint: Mutex::new(fingerprint),
                })
            }
            None => None,
        };
        #[cfg(unix)]
        let hangup = if tls.is_some() || authz.is_some() {
            use tokio::signal::unix::{SignalKind, signal};
            Some(signal(SignalKind::hangup()).map_err(SecurityError::Signal)?)
        } else {
            None
        };
        let peers = config
            .peer_secret_file
            .as_deref()
            .map(crate::peers::PeerKey::load)
            .transpose()
            .map_err(SecurityError::Peers)?;
        let link = peer_link(config, peers.clone())?;
        Ok(Arc::new(Security {
            config: config.clone(),
            tls,
            authz,
            peers,
            link,
            #[cfg(unix)]
            hangup: Mutex::new(hangup),
        }))
    }

    /// The TLS state, when TLS is on.
    pub(crate) fn tls(&self) -> Option<&Arc<TlsState>> {
        self.tls.as_ref()
    }

    /// Whether an authorization file is enforced.
    pub(crate) fn enforcing(&self) -> bool {
        self.authz.is_some()
    }

    /// What the auth layer enforces.
    pub(crate) fn auth_state(&self) -> AuthState {
        AuthState {
            policy: self.authz.as_ref().map(|a| a.handle.clone()),
            reflection: self.config.reflection,
            health: self.config.health,
            peers: self.peers.clone(),
        }
    }

    /// The replicas' shared secret, when configured.
    pub(crate) fn peer_key(&self) -> Option<&crate::peers::PeerKey> {
        self.peers.as_ref()
    }

    /// How this replica forwards to the others.
    pub(crate) fn peer_link(&self) -> Option<crate::api::forward::PeerLink> {
        self.link.clone()
    }

    /// Re-reads the files; `force` rebuilds even if the contents did not change (SIGHUP).
    /// Errors are logged and counted, and leave the previous material in force.
    pub(crate) fn reload(&self, force: bool) {
        if let Some(tls) = &self.tls {
            match tls.reload(force) {
                Ok(true) => {
                    crate::metrics::security_reload("tls", true);
                    tracing::info!("TLS certificate reloaded");
                }
                Ok(false) => {}
                Err(e) => {
                    crate::metrics::security_reload("tls", false);
                    tracing::error!(error = %e, "TLS reload failed; the previous certificate stays in force");
                }
            }
        }
        if let Some(authz) = &self.authz {
            match read_policy(&authz.path) {
                Ok((policy, fingerprint)) => {
                    let mut current = authz.fingerprint.lock().unwrap_or_else(|e| e.into_inner());
                    if force || *current != fingerprint {
                        let (identities, tokens) = policy.summary();
                        authz.handle.replace(policy);
                        *current = fingerprint;
                        crate::metrics::security_reload("authz", true);
                        tracing::info!(identities, tokens, "authorization file reloaded");
                    }
                }
                Err(e) => {
                    crate::metrics::security_reload("authz", false);
                    tracing::error!(error = %e, "authorization reload failed; the previous rules stay in force");
                }
            }
        }
    }

    /// Starts the reload task (SIGHUP, and the periodic check); `None` when there is nothing
    /// to reload. Abort the handle when the server stops.
    pub(crate) fn spawn_reloader(self: &Arc<Self>) -> Option<tokio::task::JoinHandle<()>> {
        if self.tls.is_none() && self.authz.is_none() {
            return None;
        }
        let security = Arc::clone(self);
        #[cfg(unix)]
        let mut hangup = self.hangup.lock().unwrap_or_else(|e| e.into_inner()).take();
        let interval = self.config.reload_interval;
        Some(tokio::spawn(async move {
            let mut ticker = (!interval.is_zero()).then(|| {
                let mut t =
                    tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
                t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                t
            });
            loop {
                #[cfg(unix)]
                let hup = async {
                    match hangup.as_mut() {
                        Some(signal) => {
                            signal.recv().await;
                        }
                        None => std::future::pending::<()>().await,
                    }
                };
                #[cfg(not(unix))]
                let hup = std::future::pending::<()>();
                let tick = async {
                    match ticker.as_mut() {
                        Some(t) => {
                            t.tick().await;
                        }
                        None => std::future::pending::<()>().await,
                    }
                };
                tokio::select! {
                    () = hup => {
                        tracing::info!("SIGHUP received: reloading the TLS and authorization files");
                        security.reload(true);
                    }
                    () = tick => security.reload(false),
                }
            }
        }))
    }
}

/// A short description of the security set-up for the start-up log line.
pub(crate) fn describe(security: &Security) -> &'static str {
    match (
        security.tls.as_ref().map(|t| t.mutual()),
        security.enforcing(),
    ) {
        (None, false) => "plaintext",
        (None, true) => "plaintext+authz",
        (Some(false), false) => "tls",
        (Some(false), true) => "tls+authz",
        (Some(true), false) => "mtls",
        (Some(true), true) => "mtls+authz",
    }
}

/// How this replica forwards to the others: `None` without a shared secret, or under
/// TLS without a CA to check them against (`--peer-ca`, else `--tls-client-ca`).
fn peer_link(
    config: &SecurityConfig,
    key: Option<crate::peers::PeerKey>,
) -> Result<Option<crate::api::forward::PeerLink>, SecurityError> {
    let Some(key) = key else {
        return Ok(None);
    };
    let tls = match (&config.tls_cert, &config.tls_key) {
        (Some(cert), Some(private)) => {
            let Some(ca) = config.peer_ca.as_ref().or(config.tls_client_ca.as_ref()) else {
                tracing::warn!(
                    "TLS without --peer-ca or --tls-client-ca: replicas cannot check each other's certificates, so nothing is forwarded"
                );
                return Ok(None);
            };
            let read = |p: &std::path::Path| {
                std::fs::read(p).map_err(|e| SecurityError::Peers(format!("{}: {e}", p.display())))
            };
            Some(
                tonic::transport::ClientTlsConfig::new()
                    .ca_certificate(tonic::transport::Certificate::from_pem(read(ca)?))
                    .identity(tonic::transport::Identity::from_pem(
                        read(cert)?,
                        read(private)?,
                    )),
            )
        }
        _ => None,
    };
    Ok(Some(crate::api::forward::PeerLink { key, tls }))
}
