//! TLS to the etcd members (`--etcd-ca`, `--etcd-cert`, `--etcd-key`).

use std::path::PathBuf;

use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// TLS to etcd: a CA to verify the members, and a client certificate and key if etcd
/// requires client authentication (`--client-cert-auth`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtcdTls {
    /// `--etcd-ca`: PEM CA the members' certificates are verified against; required as soon
    /// as any TLS file is given.
    pub ca: Option<PathBuf>,
    /// `--etcd-cert`: PEM client certificate, for etcd's `--client-cert-auth`.
    pub cert: Option<PathBuf>,
    /// `--etcd-key`: PEM private key of `cert`; given together with it.
    pub key: Option<PathBuf>,
}

/// The client TLS configuration of `tls`; `None` without any file (plain connections).
pub(super) fn tls_config(tls: &EtcdTls) -> Result<Option<ClientTlsConfig>, String> {
    if tls.ca.is_none() && tls.cert.is_none() && tls.key.is_none() {
        return Ok(None);
    }
    let read = |what: &str, path: &PathBuf| {
        std::fs::read(path)
            .map_err(|e| format!("cannot read the etcd {what} {}: {e}", path.display()))
    };
    let mut config = ClientTlsConfig::new();
    match &tls.ca {
        Some(ca) => config = config.ca_certificate(Certificate::from_pem(read("CA", ca)?)),
        None => return Err("--etcd-ca is required with --etcd-cert/--etcd-key".to_owned()),
    }
    match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => {
            config = config.identity(Identity::from_pem(
                read("client certificate", cert)?,
                read("client key", key)?,
            ));
        }
        (None, None) => {}
        _ => return Err("--etcd-cert and --etcd-key go together".to_owned()),
    }
    Ok(Some(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_options_must_be_complete() {
        assert!(matches!(tls_config(&EtcdTls::default()), Ok(None)));
        let only_cert = EtcdTls {
            ca: None,
            cert: Some("c".into()),
            key: Some("k".into()),
        };
        assert!(matches!(tls_config(&only_cert), Err(e) if e.contains("--etcd-ca")));
    }
}
