//! How the replicas of one deployment (etcd, several replicas) prove to each other that they
//! are: a secret they share (`--peer-secret-file`) signs (HMAC-SHA256) each replica's
//! registration in etcd and each call one replica forwards to another.
//!
//! * **Registrations**: a replica's entry under `replicas/` carries its address and the MAC of
//!   its id and address. An entry that does not verify (someone who can write the etcd prefix
//!   but does not hold the secret) is left out of the owners: no call is ever forwarded to
//!   it, so it never receives a caller's bearer token.
//! * **Forwarded calls**: the `autoscaled-forwarded` marker is the time and the MAC of the
//!   time, the method, and the caller's address and identity as the forwarding replica saw
//!   them (`autoscaled-forwarded-for`, `autoscaled-forwarded-identity`). The owner accepts a
//!   marker that verifies and is at most [`MAX_SKEW`] old: the call is then not forwarded
//!   again, and is audited with the caller's address (and, for a caller authenticated by its
//!   certificate, its identity). A marker that does not verify (a client that set it to pick
//!   which replica decides) is removed and counted, and the call goes on as any other.
//!
//! Without a secret, replicas do not forward (each decides the calls that reach it, every
//! write still guarded by the state's revision) and every marker is removed.

use std::{net::SocketAddr, path::Path, time::Duration};

use ring::hmac;

/// Marks a call one replica forwarded to another: `<unix ms>.<hex MAC>`.
pub(crate) const FORWARDED: &str = "autoscaled-forwarded";
/// The caller's address, as the forwarding replica saw it.
pub(crate) const FORWARDED_FOR: &str = "autoscaled-forwarded-for";
/// The caller's identity when its certificate gave it (a bearer token is forwarded as is and
/// authenticated again by the owner).
pub(crate) const FORWARDED_IDENTITY: &str = "autoscaled-forwarded-identity";
/// How old a forwarded call's marker may be.
pub(crate) const MAX_SKEW: Duration = Duration::from_secs(30);
/// The shortest secret accepted.
const MIN_SECRET_BYTES: usize = 32;

/// The deployment's shared secret, as a MAC key.
#[derive(Clone)]
pub struct PeerKey {
    key: hmac::Key,
}

impl std::fmt::Debug for PeerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerKey(..)")
    }
}

/// What a verified marker says of the caller of a forwarded call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Forwarded {
    /// The caller's address, as the forwarding replica saw it.
    pub(crate) remote: Option<SocketAddr>,
    /// The caller's certificate identity, as the forwarding replica authenticated it.
    pub(crate) identity: Option<String>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

impl PeerKey {
    /// The key of the secret in `path` (at least 32 bytes, surrounding whitespace ignored).
    pub fn load(path: &Path) -> Result<PeerKey, String> {
        let text =
            std::fs::read(path).map_err(|e| format!("peer_secret_file {}: {e}", path.display()))?;
        let secret = text.trim_ascii();
        if secret.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "peer_secret_file {}: the secret has {} bytes, fewer than {MIN_SECRET_BYTES}",
                path.display(),
                secret.len()
            ));
        }
        Ok(PeerKey::new(secret))
    }

    /// The key of `secret`.
    pub fn new(secret: &[u8]) -> PeerKey {
        PeerKey {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
        }
    }

    fn mac(&self, parts: &[&[u8]]) -> String {
        let mut context = hmac::Context::with_key(&self.key);
        for part in parts {
            context.update(&u64::try_from(part.len()).unwrap_or(u64::MAX).to_be_bytes());
            context.update(part);
        }
        hex(context.sign().as_ref())
    }

    fn verify(&self, parts: &[&[u8]], mac: &str) -> bool {
        let Some(tag) = unhex(mac) else {
            return false;
        };
        let mut message = Vec::new();
        for part in parts {
            message.extend_from_slice(&u64::try_from(part.len()).unwrap_or(u64::MAX).to_be_bytes());
            message.extend_from_slice(part);
        }
        hmac::verify(&self.key, &message, &tag).is_ok()
    }

    /// The registration value of replica `id` at `addr`: the address, a newline, the MAC.
    pub fn registration(&self, id: &str, addr: &str) -> String {
        let mac = self.mac(&[b"registration", id.as_bytes(), addr.as_bytes()]);
        format!("{addr}\n{mac}")
    }

    /// The address of a registration value that verifies for replica `id`.
    pub fn verify_registration(&self, id: &str, value: &str) -> Option<String> {
        let (addr, mac) = value.split_once('\n')?;
        self.verify(&[b"registration", id.as_bytes(), addr.as_bytes()], mac)
            .then(|| addr.to_owned())
    }

    /// The marker of a call to `path` forwarded now for a caller at `remote` with `identity`.
    pub(crate) fn marker(
        &self,
        path: &str,
        remote: Option<SocketAddr>,
        identity: Option<&str>,
        now_ms: u64,
    ) -> String {
        let remote = remote.map(|r| r.to_string()).unwrap_or_default();
        let mac = self.mac(&[
            b"forwarded",
            now_ms.to_string().as_bytes(),
            path.as_bytes(),
            remote.as_bytes(),
            identity.unwrap_or("").as_bytes(),
        ]);
        format!("{now_ms}.{mac}")
    }

    /// What a marker says of the caller, if it verifies for `path`, `remote` and `identity`
    /// (the values of the headers) and is at most [`MAX_SKEW`] from `now_ms`.
    pub(crate) fn verify_marker(
        &self,
        marker: &str,
        path: &str,
        remote: &str,
        identity: &str,
        now_ms: u64,
    ) -> Option<Forwarded> {
        let (at, mac) = marker.split_once('.')?;
        let at_ms: u64 = at.parse().ok()?;
        let skew = u64::try_from(MAX_SKEW.as_millis()).unwrap_or(u64::MAX);
        if now_ms.abs_diff(at_ms) > skew {
            return None;
        }
        self.verify(
            &[
                b"forwarded",
                at.as_bytes(),
                path.as_bytes(),
                remote.as_bytes(),
                identity.as_bytes(),
            ],
            mac,
        )
        .then(|| Forwarded {
            remote: remote.parse().ok(),
            identity: (!identity.is_empty()).then(|| identity.to_owned()),
        })
    }
}

/// Milliseconds since the epoch, for markers.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_and_markers_verify_only_with_the_secret() {
        let key = PeerKey::new(&[7u8; 32]);
        let other = PeerKey::new(&[8u8; 32]);
        let value = key.registration("r1", "10.0.0.1:50051");
        assert_eq!(
            key.verify_registration("r1", &value).as_deref(),
            Some("10.0.0.1:50051")
        );
        assert_eq!(other.verify_registration("r1", &value), None);
        assert_eq!(key.verify_registration("r2", &value), None);
        assert_eq!(key.verify_registration("r1", "10.0.0.9:50051"), None);
        let forged = value.replace("10.0.0.1", "10.6.6.6");
        assert_eq!(key.verify_registration("r1", &forged), None);

        let remote: SocketAddr = "192.0.2.7:40000".parse().unwrap();
        let path = "/autoscaled.v1.HorizontalAutoscaler/Recommend";
        let m = key.marker(path, Some(remote), Some("spiffe://a"), 1_000_000);
        let seen = key.verify_marker(&m, path, "192.0.2.7:40000", "spiffe://a", 1_000_500);
        assert_eq!(
            seen,
            Some(Forwarded {
                remote: Some(remote),
                identity: Some("spiffe://a".to_owned())
            })
        );
        // Another caller, another method, another key, too old, or a client's own value.
        assert!(
            key.verify_marker(&m, path, "192.0.2.8:40000", "spiffe://a", 1_000_500)
                .is_none()
        );
        assert!(
            key.verify_marker(&m, "/x/Y", "192.0.2.7:40000", "spiffe://a", 1_000_500)
                .is_none()
        );
        assert!(
            other
                .verify_marker(&m, path, "192.0.2.7:40000", "spiffe://a", 1_000_500)
                .is_none()
        );
        assert!(
            key.verify_marker(&m, path, "192.0.2.7:40000", "spiffe://a", 1_031_000)
                .is_none()
        );
        assert!(key.verify_marker("1", path, "", "", 1).is_none());
    }
}
