//! Test certificates made with rcgen at run time: a CA, a server certificate for `localhost`
//! and 127.0.0.1, and client certificates whose identity is a URI SAN (SPIFFE ID), a DNS SAN
//! or a CN. Shared by `tests/security.rs` and `benches/load.rs` through `#[path]`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SanType};

/// A certificate authority that signs the others.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    pub pem: String,
}

/// A certificate and its private key, in PEM.
pub struct Leaf {
    pub cert: String,
    pub key: String,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let pem = issuer.pem();
        Ca { issuer, pem }
    }

    fn sign(&self, params: CertificateParams) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// A server certificate for `localhost` and 127.0.0.1.
    pub fn server(&self) -> Leaf {
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params
            .subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
        params
            .distinguished_name
            .push(DnType::CommonName, "autoscaled");
        self.sign(params)
    }

    /// A client certificate whose identity is the URI SAN `uri` (a SPIFFE ID).
    pub fn client_uri(&self, uri: &str) -> Leaf {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .subject_alt_names
            .push(SanType::URI(uri.try_into().unwrap()));
        params
            .distinguished_name
            .push(DnType::CommonName, "ignored-cn");
        self.sign(params)
    }

    /// A client certificate whose only SAN is the DNS name `name` (any string, e.g. one that
    /// spells a SPIFFE ID).
    pub fn client_dns(&self, name: &str) -> Leaf {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .subject_alt_names
            .push(SanType::DnsName(name.try_into().unwrap()));
        self.sign(params)
    }

    /// A client certificate with only a CN.
    pub fn client_cn(&self, cn: &str) -> Leaf {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        self.sign(params)
    }
}

/// Writes `contents` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

/// A tonic client TLS configuration trusting `ca_pem`, with an optional client certificate.
pub fn client_tls(ca_pem: &str, identity: Option<&Leaf>) -> tonic::transport::ClientTlsConfig {
    let mut tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ca_pem))
        .domain_name("localhost");
    if let Some(leaf) = identity {
        tls = tls.identity(tonic::transport::Identity::from_pem(&leaf.cert, &leaf.key));
    }
    tls
}
