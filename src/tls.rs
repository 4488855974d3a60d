//! TLS on the main listener: our own accept loop over the `TcpListener` (tokio-rustls, ring
//! provider) feeding tonic's `serve_with_incoming_shutdown`, so that the certificate can be
//! replaced without dropping the listener.
//!
//! Each accepted connection is handshaken with the `ServerConfig` current at that moment;
//! a reload builds a whole new `ServerConfig` (chain, key, client CAs) and swaps it in, so
//! established connections keep theirs and the next ones get the new one, which is what
//! cert-manager's rotation needs. A reload that fails (a half-written file, a key that does
//! not match its certificate) keeps the previous material and is logged and counted.
//!
//! On an mTLS connection the caller's identity is taken from its certificate once, at the
//! handshake: the first URI SAN (a SPIFFE ID), else the first DNS SAN, else the subject CN
//! (the order Istio and SPIRE use; Kubernetes' own x509 authenticator takes the CN). It rides
//! in the connection's `ConnectInfo` ([`Peer`]), which tonic copies into every request.

use std::{
    io,
    net::SocketAddr,
    path::{Path, PathBuf},
    pin::Pin,
    sync::{Arc, RwLock},
    task::{Context, Poll},
    time::Duration,
};

use rustls::{RootCertStore, ServerConfig, server::WebPkiClientVerifier};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use thiserror::Error;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{Semaphore, mpsc},
};
use tokio_rustls::{TlsAcceptor, server::TlsStream};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

use crate::{auth::Peer, config::ClientAuth};

/// A client that connects and never completes the handshake is dropped after this long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// At most this many handshakes run at once; further connections wait in the listen backlog.
const MAX_PENDING_HANDSHAKES: usize = 256;

/// The files of the TLS configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TlsFiles {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
    pub(crate) client_ca: Option<PathBuf>,
    pub(crate) client_auth: ClientAuth,
}

/// Why the TLS material cannot be used.
#[derive(Debug, Error)]
pub enum TlsError {
    /// A certificate, key or CA file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// A file is read but holds no usable PEM item (no certificate, no private key).
    #[error("{path}: {message}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is missing or malformed.
        message: String,
    },
    /// rustls rejects the combination (e.g. the key does not match the certificate).
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// The client CA bundle (for mTLS) cannot build a verifier.
    #[error("client CA {path}: {message}")]
    ClientCa {
        /// The bundle.
        path: PathBuf,
        /// Why the verifier refuses it.
        message: String,
    },
}

/// The current `ServerConfig` and a fingerprint of the file contents it was built from.
#[derive(Debug)]
pub(crate) struct TlsState {
    files: TlsFiles,
    current: RwLock<(Arc<ServerConfig>, [u8; 32])>,
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn certs(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_path_buf(),
            message: "no CERTIFICATE in the file".to_owned(),
        });
    }
    Ok(certs)
}

/// The ring provider, explicitly: the process never depends on a default provider.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsFiles {
    /// Reads the files: their contents and the fingerprint of all of them together.
    fn read(&self) -> Result<(Vec<Vec<u8>>, [u8; 32]), TlsError> {
        let mut contents = vec![read(&self.cert)?, read(&self.key)?];
        if let Some(ca) = &self.client_ca {
            contents.push(read(ca)?);
        }
        let mut all = Vec::new();
        for c in &contents {
            all.extend_from_slice(&(c.len() as u64).to_le_bytes());
            all.extend_from_slice(c);
        }
        Ok((contents, crate::auth::policy::sha256(&all)))
    }

    /// Builds a `ServerConfig` from the file contents read by [`TlsFiles::read`].
    fn build(&self, contents: &[Vec<u8>]) -> Result<Arc<ServerConfig>, TlsError> {
        let chain = certs(&self.cert, &contents[0])?;
        let key = PrivateKeyDer::from_pem_slice(&contents[1]).map_err(|e| TlsError::Pem {
            path: self.key.clone(),
            message: format!("no usable PRIVATE KEY: {e}"),
        })?;
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?;
        let builder = match (&self.client_ca, contents.get(2)) {
            (Some(path), Some(pem)) => {
                let mut roots = RootCertStore::empty();
                for ca in certs(path, pem)? {
                    roots.add(ca).map_err(|e| TlsError::ClientCa {
                        path: path.clone(),
                        message: e.to_string(),
                    })?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
                let verifier = match self.client_auth {
                    ClientAuth::Require => verifier,
                    ClientAuth::Optional => verifier.allow_unauthenticated(),
                };
                let verifier = verifier.build().map_err(|e| TlsError::ClientCa {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
                builder.with_client_cert_verifier(verifier)
            }
            _ => builder.with_no_client_auth(),
        };
        let mut config = builder.with_single_cert(chain, key)?;
        // gRPC is HTTP/2 only; clients that negotiate ALPN (grpc-go, grpcurl) ask for h2.
        // HTTP/1.1 too: Connect's unary calls (curl --http1.1, browsers) on the TLS port.
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

impl TlsState {
    /// Reads and checks the files; any error stops the start-up.
    pub(crate) fn load(files: TlsFiles) -> Result<Self, TlsError> {
        let (contents, fingerprint) = files.read()?;
        let config = files.build(&contents)?;
        Ok(TlsState {
            files,
            current: RwLock::new((config, fingerprint)),
        })
    }

    /// Re-reads the files and swaps the configuration in if they changed (or if `force`).
    /// Returns whether it swapped. On error the previous configuration stays in force.
    pub(crate) fn reload(&self, force: bool) -> Result<bool, TlsError> {
        let (contents, fingerprint) = self.files.read()?;
        if !force && self.current.read().unwrap_or_else(|e| e.into_inner()).1 == fingerprint {
            return Ok(false);
        }
        let config = self.files.build(&contents)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = (config, fingerprint);
        Ok(true)
    }

    /// The acceptor for the next connection.
    fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(Arc::clone(
            &self.current.read().unwrap_or_else(|e| e.into_inner()).0,
        ))
    }

    /// Whether clients present certificates (mTLS).
    pub(crate) fn mutual(&self) -> bool {
        self.files.client_ca.is_some()
    }
}

/// The identity of a client certificate, typed by where it comes from, so that one source
/// can never pose as another: its first URI SAN as is (`spiffe://example.org/team-a`), else
/// its first DNS SAN as `dns:NAME`, else its subject CN as `cn:NAME`. Bearer tokens stand for
/// plain names (`ci-bot`), which no certificate can produce. A DNS SAN or a CN that spells a
/// URI is still `dns:` or `cn:`, never the URI identity. `None` when the certificate has none
/// of them (or does not parse, which the verifier already excludes).
pub(crate) fn identity_of(der: &[u8]) -> Option<String> {
    use x509_parser::{extensions::GeneralName, prelude::FromDer};
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(der).ok()?;
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        let names = &san.value.general_names;
        let uri = names.iter().find_map(|n| match n {
            GeneralName::URI(u) => Some((*u).to_owned()),
            _ => None,
        });
        let dns = names.iter().find_map(|n| match n {
            GeneralName::DNSName(d) => Some(format!("dns:{d}")),
            _ => None,
        });
        if let Some(identity) = uri.or(dns) {
            return Some(identity);
        }
    }
    cert.subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(|cn| format!("cn:{cn}"))
}

/// One accepted, handshaken TLS connection and what is known of its peer.
pub(crate) struct TlsConn {
    stream: TlsStream<TcpStream>,
    peer: Peer,
}

impl Connected for TlsConn {
    type ConnectInfo = Peer;

    fn connect_info(&self) -> Peer {
        self.peer.clone()
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// The stream of handshaken connections accepted on `listener`, for
/// `serve_with_incoming_shutdown`. The accept loop runs in its own task and stops (closing
/// the listener) when the stream is dropped, which tonic does when shutdown starts. Failed
/// handshakes (a plaintext client, an unknown CA, no client certificate under mTLS) are
/// logged at debug level and counted; they never reach the server.
pub(crate) fn incoming(
    listener: TcpListener,
    state: Arc<TlsState>,
) -> ReceiverStream<Result<TlsConn, io::Error>> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let permits = Arc::new(Semaphore::new(MAX_PENDING_HANDSHAKES));
        loop {
            let permit = tokio::select! {
                () = tx.closed() => break,
                permit = Arc::clone(&permits).acquire_owned() => match permit {
                    Ok(p) => p,
                    Err(_) => break,
                },
            };
            let accepted = tokio::select! {
                () = tx.closed() => break,
                accepted = listener.accept() => accepted,
            };
            let (tcp, remote) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and the like: back off instead of spinning (as hyper does).
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            // Nagle's algorithm would hold small responses back for the peer's delayed ACK.
            let _ = tcp.set_nodelay(true);
            let acceptor = state.acceptor();
            let tx = tx.clone();
            tokio::spawn(async move {
                let _permit = permit;
                handshake(acceptor, tcp, remote, tx).await;
            });
        }
    });
    ReceiverStream::new(rx)
}

async fn handshake(
    acceptor: TlsAcceptor,
    tcp: TcpStream,
    remote: SocketAddr,
    tx: mpsc::Sender<Result<TlsConn, io::Error>>,
) {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(stream)) => {
            let identity = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|leaf| identity_of(leaf.as_ref()))
                .map(Arc::from);
            let peer = Peer {
                remote: Some(remote),
                identity,
            };
            let _ = tx.send(Ok(TlsConn { stream, peer })).await;
        }
        Ok(Err(e)) => {
            crate::metrics::tls_handshake_failure();
            tracing::debug!(%remote, error = %e, "TLS handshake failed");
        }
        Err(_) => {
            crate::metrics::tls_handshake_failure();
            tracing::debug!(%remote, "TLS handshake timed out");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::identity_of;

    fn cert(configure: impl FnOnce(&mut rcgen::CertificateParams)) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        configure(&mut params);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    /// The review's attack: a DNS SAN, or a CN without SANs, that spells a SPIFFE URI is typed
    /// `dns:` / `cn:` and can never be the URI identity a rule names.
    #[test]
    fn identities_are_typed_by_their_source() {
        use rcgen::{DnType, SanType};
        let uri = cert(|p| {
            p.subject_alt_names = vec![
                SanType::DnsName("web.example.org".try_into().unwrap()),
                SanType::URI("spiffe://example.org/team-a".try_into().unwrap()),
            ];
        });
        assert_eq!(
            identity_of(&uri).as_deref(),
            Some("spiffe://example.org/team-a")
        );
        let dns = cert(|p| {
            p.subject_alt_names = vec![SanType::DnsName(
                "spiffe://example.org/team-b".try_into().unwrap(),
            )];
        });
        assert_eq!(
            identity_of(&dns).as_deref(),
            Some("dns:spiffe://example.org/team-b")
        );
        let cn = cert(|p| {
            p.distinguished_name
                .push(DnType::CommonName, "spiffe://example.org/team-b");
        });
        assert_eq!(
            identity_of(&cn).as_deref(),
            Some("cn:spiffe://example.org/team-b")
        );
        let bot = cert(|p| p.distinguished_name.push(DnType::CommonName, "ci-bot"));
        assert_eq!(identity_of(&bot).as_deref(), Some("cn:ci-bot"));
    }
}
