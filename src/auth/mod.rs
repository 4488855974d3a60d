//! Authentication and authorization, enforced in one place:
//!
//! * `layer::AuthLayer` (a tower layer in front of every service) authenticates the call (the
//!   bearer token of the `authorization` metadata, else the mTLS identity of the connection),
//!   answers UNAUTHENTICATED when a call that needs an identity has none, keeps health and
//!   reflection open or closed as configured, and puts the `Caller` in the request's
//!   extensions;
//! * `authorize` is the one per-call check of a verb on a target key, called by the
//!   `api::authorized` wrappers (the key is inside the request body, which the layer does not
//!   decode) before the handler runs; `KeyFilter` restricts the List RPCs to readable keys.
//!
//! A denial is PERMISSION_DENIED naming the verb and the key, counted in
//! `autoscaled_authz_denied_total`, and logged on the `autoscaled::audit` target with the
//! identity, as is every delete (see `audit`).
//!
//! This module depends only on `config` (the enums of the flags) and `metrics`, so the API
//! layer can call it.

pub(crate) mod layer;
pub mod policy;

use std::{
    net::SocketAddr,
    sync::{Arc, RwLock},
};

use tonic::Status;

pub(crate) use layer::AuthLayer;
pub(crate) use policy::{Policy, PolicyError, Verb};

/// What the transport knows of the caller: the remote address and, on an mTLS connection, the
/// identity of its certificate (URI SAN, else DNS SAN, else CN). The TLS acceptor makes it the
/// connection's `ConnectInfo`, which tonic copies into every request's extensions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Peer {
    pub(crate) remote: Option<SocketAddr>,
    pub(crate) identity: Option<Arc<str>>,
}

/// Where the authentication layer leaves the caller's identity for the layers outside it
/// (the refusal log in `server`), which see the request before it is authenticated.
#[derive(Clone, Debug, Default)]
pub(crate) struct IdentitySlot(pub(crate) Arc<std::sync::OnceLock<Arc<str>>>);

/// The authenticated caller of one request, put in the request's extensions by the layer.
#[derive(Clone, Debug)]
pub(crate) struct Caller {
    /// The token's identity, else the certificate's; `None` when neither was given (only
    /// possible when no authorization file is configured).
    pub(crate) identity: Option<Arc<str>>,
    /// The authorization file in force when the call arrived (a reload during the call does
    /// not change it); `None`: no `--authz`, everything is allowed.
    pub(crate) policy: Option<Arc<Policy>>,
    /// The remote address, for the audit log.
    pub(crate) remote: Option<SocketAddr>,
}

/// The current authorization file, swapped whole by a reload.
#[derive(Clone, Debug)]
pub(crate) struct PolicyHandle(Arc<RwLock<Arc<Policy>>>);

impl PolicyHandle {
    pub(crate) fn new(policy: Policy) -> Self {
        PolicyHandle(Arc::new(RwLock::new(Arc::new(policy))))
    }

    /// The policy in force now.
    pub(crate) fn current(&self) -> Arc<Policy> {
        // A poisoned lock only means a writer panicked between two whole values: the value
        // inside is still one complete policy.
        Arc::clone(&self.0.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Replaces the policy; calls already admitted keep the one they started with.
    pub(crate) fn replace(&self, policy: Policy) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
    }
}

/// Longest part of a key quoted in an error message or a log line. Keys are bounded by
/// `max_key_bytes` only after this check, and a `grpc-message` must stay small.
const MAX_QUOTED_KEY_BYTES: usize = 256;

/// `key`, cut at [`MAX_QUOTED_KEY_BYTES`] on a character boundary (with `…` when cut).
pub(crate) fn quoted_key(key: &str) -> String {
    if key.len() <= MAX_QUOTED_KEY_BYTES {
        return key.to_owned();
    }
    let mut end = MAX_QUOTED_KEY_BYTES;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &key[..end])
}

/// One audit record on the `autoscaled::audit` log target: who did what to which key, and
/// the outcome (`allowed`, `denied`, or the gRPC code of a failed delete). The key and the
/// identity come from the caller, so they are written quoted and escaped (`Debug`): a line
/// break or a NUL in them can never start a line of its own in the log.
pub(crate) fn audit(caller: Option<&Caller>, verb: Verb, key: &str, outcome: &str) {
    let identity = caller.and_then(|c| c.identity.as_deref()).unwrap_or("-");
    let remote = caller
        .and_then(|c| c.remote)
        .map_or_else(|| "-".to_owned(), |a| a.to_string());
    tracing::info!(
        target: "autoscaled::audit",
        identity = ?identity,
        verb = verb.as_str(),
        key = ?quoted_key(key),
        outcome,
        remote = %remote,
        "audit"
    );
}

/// The per-call check: may the caller do `verb` on `key`? `enforce` is whether an
/// authorization file is configured; without one every call is allowed (today's behaviour).
/// A missing caller while enforcing is UNAUTHENTICATED (fail closed: the layer did not run).
pub(crate) fn authorize(
    caller: Option<&Caller>,
    enforce: bool,
    verb: Verb,
    key: &str,
) -> Result<(), Status> {
    if !enforce {
        return Ok(());
    }
    let (Some(caller), Some(policy)) = (caller, caller.and_then(|c| c.policy.as_ref())) else {
        crate::metrics::authn_failure("missing");
        return Err(Status::unauthenticated("no credentials"));
    };
    let Some(identity) = caller.identity.as_deref() else {
        crate::metrics::authn_failure("missing");
        return Err(Status::unauthenticated(
            "no credentials: present a client certificate or an `authorization: Bearer` token",
        ));
    };
    if policy.allows(identity, verb, key) {
        return Ok(());
    }
    crate::metrics::authz_denied(verb.as_str());
    audit(Some(caller), verb, key, "denied");
    Err(Status::permission_denied(format!(
        "{identity} may not {verb} target {:?}",
        quoted_key(key)
    )))
}

/// Which keys a List RPC may return: those under the prefixes where the caller may read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeyFilter {
    /// `None`: every key (no authorization file). Otherwise sorted, non-overlapping prefixes.
    prefixes: Option<Vec<String>>,
    /// The longest key the server stores (`--max-key-bytes`): a scan positioned after a
    /// string longer than that, just below a prefix, starts exactly at the prefix.
    max_key_bytes: usize,
}

impl KeyFilter {
    /// Every key.
    pub(crate) fn all() -> Self {
        KeyFilter {
            prefixes: None,
            max_key_bytes: crate::config::DEFAULT_MAX_KEY_BYTES,
        }
    }

    /// The same filter for a server whose keys are at most `max_key_bytes` long.
    pub(crate) fn with_max_key_bytes(mut self, max_key_bytes: usize) -> Self {
        self.max_key_bytes = max_key_bytes;
        self
    }

    /// The keys `caller` may `verb` (read, for the List RPCs). Fails like `authorize` when
    /// enforcing and the caller has no identity.
    pub(crate) fn for_caller(
        caller: Option<&Caller>,
        enforce: bool,
        verb: Verb,
    ) -> Result<Self, Status> {
        if !enforce {
            return Ok(KeyFilter::all());
        }
        let (Some(identity), Some(policy)) = (
            caller.and_then(|c| c.identity.as_deref()),
            caller.and_then(|c| c.policy.as_ref()),
        ) else {
            crate::metrics::authn_failure("missing");
            return Err(Status::unauthenticated("no credentials"));
        };
        Ok(KeyFilter {
            prefixes: Some(policy.prefixes(identity, verb)),
            max_key_bytes: crate::config::DEFAULT_MAX_KEY_BYTES,
        })
    }

    /// The prefixes the filter lets through; `None`: every key.
    pub(crate) fn allowed_prefixes(&self) -> Option<&[String]> {
        self.prefixes.as_deref()
    }

    /// Under explicit prefixes (tests).
    #[cfg(test)]
    pub(crate) fn prefixes(prefixes: Vec<String>) -> Self {
        let mut policy_like: Vec<String> = prefixes;
        policy_like.sort_unstable();
        let mut out: Vec<String> = Vec::new();
        for p in policy_like {
            if !out.last().is_some_and(|last| p.starts_with(last.as_str())) {
                out.push(p);
            }
        }
        KeyFilter {
            prefixes: Some(out),
            max_key_bytes: crate::config::DEFAULT_MAX_KEY_BYTES,
        }
    }

    /// The keys of this filter that also start with `prefix` (a List request's `prefix`):
    /// each of the caller's prefixes that `prefix` extends becomes `prefix`, each that
    /// extends `prefix` stays, the others go. The result is again sorted and disjoint, so the
    /// scan of [`Self::resume_after`] skips everything outside both.
    pub(crate) fn within(self, prefix: &str) -> Self {
        if prefix.is_empty() {
            return self;
        }
        let prefixes = match self.prefixes {
            None => vec![prefix.to_owned()],
            Some(mine) => {
                let mut out: Vec<String> = mine
                    .into_iter()
                    .filter_map(|p| {
                        if prefix.starts_with(p.as_str()) {
                            Some(prefix.to_owned())
                        } else if p.starts_with(prefix) {
                            Some(p)
                        } else {
                            None
                        }
                    })
                    .collect();
                out.sort_unstable();
                out.dedup();
                out
            }
        };
        KeyFilter {
            prefixes: Some(prefixes),
            max_key_bytes: self.max_key_bytes,
        }
    }

    /// Whether the filter lets every key through.
    pub(crate) fn is_all(&self) -> bool {
        self.prefixes.is_none()
    }

    /// Whether `key` may be listed.
    pub(crate) fn allows(&self, key: &str) -> bool {
        match &self.prefixes {
            None => true,
            Some(prefixes) => prefixes.iter().any(|p| key.starts_with(p.as_str())),
        }
    }

    /// Where a scan of the key space that has passed `after` (exclusive; `None`: nothing
    /// passed yet) should continue: `Some(None)` from the start, `Some(Some(k))` after `k`,
    /// `None` when no listable key can follow. Skips the gaps between prefixes: keys under a
    /// prefix `P` are contiguous in byte order, and the scan starts after [`just_before`]
    /// `P`, so it reads no key outside the caller's prefixes (`team-a-big/…` sorts between
    /// `team-a` and `team-a/`) and a page token never holds a foreign key.
    pub(crate) fn resume_after(&self, after: Option<&str>) -> Option<Option<String>> {
        let Some(prefixes) = &self.prefixes else {
            return Some(after.map(str::to_owned));
        };
        let position = after.unwrap_or("");
        // The first range the scan is inside of or before (ranges are sorted and disjoint).
        let prefix = prefixes
            .iter()
            .find(|p| position.starts_with(p.as_str()) || p.as_str() > position)?;
        if position.starts_with(prefix.as_str()) {
            return Some(after.map(str::to_owned));
        }
        let before = just_before(prefix, self.max_key_bytes);
        if after.is_some_and(|a| a >= before.as_str()) {
            return Some(after.map(str::to_owned));
        }
        Some(Some(before).filter(|b| !b.is_empty()))
    }
}

/// A string after which the first key in byte order is the first key starting with `prefix`,
/// for keys of at most `max_key_bytes`: `prefix` with its last character replaced by the one
/// before it, then U+10FFFF (the largest character) until longer than any key. A key that
/// starts with the replaced character and stays at most `max_key_bytes` long sorts before it.
fn just_before(prefix: &str, max_key_bytes: usize) -> String {
    let mut chars = prefix.chars();
    let Some(last) = chars.next_back() else {
        return String::new();
    };
    let mut out = chars.as_str().to_owned();
    if last == '\0' {
        // Nothing sorts between the rest and the rest followed by NUL.
        return out;
    }
    let mut code = u32::from(last) - 1;
    if (0xD800..=0xDFFF).contains(&code) {
        code = 0xD7FF;
    }
    out.push(char::from_u32(code).unwrap_or('\0'));
    while out.len() <= max_key_bytes {
        out.push(char::MAX);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(identity: Option<&str>, policy: &str) -> Caller {
        Caller {
            identity: identity.map(Arc::from),
            policy: Some(Arc::new(Policy::parse(policy).unwrap())),
            remote: None,
        }
    }

    const TEAM_A: &str =
        "[[rule]]\nidentity = \"cn:a\"\nverbs = [\"read\", \"delete\"]\nprefixes = [\"team-a/\"]\n";

    #[test]
    fn a_request_prefix_narrows_the_callers_prefixes() {
        let mine = KeyFilter::prefixes(vec!["team-a/".into(), "team-b/x/".into()]);
        // Inside one of the caller's prefixes: that prefix narrows to the request's.
        let f = mine.clone().within("team-a/web");
        assert!(f.allows("team-a/web-1") && !f.allows("team-a/api") && !f.allows("team-b/x/1"));
        // Wider than some of them: those stay, the others go.
        let f = mine.clone().within("team-");
        assert!(f.allows("team-a/1") && f.allows("team-b/x/1") && !f.allows("team-b/y"));
        // Outside all of them: nothing.
        let f = mine.clone().within("team-c/");
        assert!(!f.allows("team-c/1") && !f.is_all());
        assert_eq!(f.resume_after(None), None);
        // No authorization file: the request's prefix alone.
        let f = KeyFilter::all().within("ns/");
        assert!(f.allows("ns/web") && !f.allows("other") && !f.is_all());
        assert!(KeyFilter::all().within("").is_all());
        assert_eq!(mine.clone().within(""), mine);
    }

    #[test]
    fn authorize_names_the_verb_and_the_key() {
        let c = caller(Some("cn:a"), TEAM_A);
        assert!(authorize(Some(&c), true, Verb::Read, "team-a/web").is_ok());
        let denied = authorize(Some(&c), true, Verb::Recommend, "team-a/web").unwrap_err();
        assert_eq!(denied.code(), tonic::Code::PermissionDenied);
        assert!(
            denied.message().contains("recommend") && denied.message().contains("team-a/web"),
            "{}",
            denied.message()
        );
        let denied = authorize(Some(&c), true, Verb::Delete, "team-b/web").unwrap_err();
        assert_eq!(denied.code(), tonic::Code::PermissionDenied);
        assert!(denied.message().contains("\"team-b/web\""));
        // No identity, or no caller at all, while enforcing: UNAUTHENTICATED.
        let anonymous = caller(None, TEAM_A);
        assert_eq!(
            authorize(Some(&anonymous), true, Verb::Read, "team-a/web")
                .unwrap_err()
                .code(),
            tonic::Code::Unauthenticated
        );
        assert_eq!(
            authorize(None, true, Verb::Read, "x").unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        // Not enforcing: everything, as before the authorization file existed.
        assert!(authorize(None, false, Verb::Delete, "anything").is_ok());
    }

    #[test]
    fn long_keys_are_cut_in_messages() {
        let c = caller(Some("cn:a"), TEAM_A);
        let key = "ü".repeat(10_000);
        let denied = authorize(Some(&c), true, Verb::Read, &key).unwrap_err();
        assert!(denied.message().len() < 400, "{}", denied.message().len());
        assert!(denied.message().contains('…'));
    }

    #[test]
    fn key_filter_jumps_between_prefixes() {
        let f = KeyFilter::prefixes(vec!["team-b/".into(), "team-a/".into(), "team-a/x".into()]);
        assert!(f.allows("team-a/web") && f.allows("team-b/") && !f.allows("team-c/x"));
        let before = |p: &str| Some(Some(just_before(p, crate::config::DEFAULT_MAX_KEY_BYTES)));
        // From the start: just before team-a/ (after every key of 512 bytes or less that is
        // less than "team-a/", such as "team-a-big/1" and "team-a.z").
        assert_eq!(f.resume_after(None), before("team-a/"));
        let start = just_before("team-a/", 512);
        assert!(start.starts_with("team-a.") && start.len() > 512);
        for key in [
            "team-a",
            "team-a-big/1",
            "team-a.z",
            &format!("team-a.{}", "\u{10FFFF}".repeat(126)),
        ] {
            assert!(key < start.as_str() && key.len() <= 512, "{key:?}");
        }
        assert!("team-a/" > start.as_str());
        // Inside a range: continue where we are.
        assert_eq!(
            f.resume_after(Some("team-a/web")),
            Some(Some("team-a/web".into()))
        );
        // Between ranges: jump to just before the next one.
        assert_eq!(f.resume_after(Some("team-a0")), before("team-b/"));
        // Past the jump point already: stay.
        let past = format!("{}\u{10FFFF}", just_before("team-b/", 512));
        assert_eq!(f.resume_after(Some(&past)), Some(Some(past.clone())));
        // After the last range: done.
        assert_eq!(f.resume_after(Some("team-c")), None);
        assert_eq!(KeyFilter::prefixes(vec![]).resume_after(None), None);
        // The empty prefix is every key.
        let every = KeyFilter::prefixes(vec!["".into(), "x/".into()]);
        assert_eq!(every.resume_after(None), Some(None));
        assert_eq!(every.resume_after(Some("q")), Some(Some("q".into())));
        // A one-character prefix starts just before it ("a" and every key under it are
        // passed), and the prefix "\\0" from the beginning.
        assert_eq!(
            KeyFilter::prefixes(vec!["b".into()]).resume_after(None),
            before("b")
        );
        assert_eq!(
            KeyFilter::prefixes(vec!["\0".into()]).resume_after(None),
            Some(None)
        );
    }
}
