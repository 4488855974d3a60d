//! The authorization file (`--authz FILE`, TOML): rules that give identities verbs on
//! target-key prefixes, and the bearer tokens (by their SHA-256, never in plain text) that
//! stand for identities. Anything no rule grants is denied.
//!
//! ```toml
//! [[rule]]
//! identity = "spiffe://example.org/team-a"   # a client certificate's URI SAN
//! verbs = ["recommend", "read", "write-usage", "delete", "configure"]
//! prefixes = ["team-a/"]
//!
//! [[rule]]
//! identity = "cn:auditor"                    # a certificate's subject CN (dns:NAME: a DNS SAN)
//! verbs = ["read"]
//! prefixes = [""]
//!
//! [[token]]
//! identity = "ci-bot"
//! sha256 = "<hex sha256 of the bearer token>"
//! ```
//!
//! Identities are typed by their source (`crate::tls::identity_of`): a URI (a URI SAN),
//! `dns:NAME` (a DNS SAN), `cn:NAME` (a subject CN), or a plain name, which only a
//! `[[token]]` of the same file stands for. A rule's plain name that no token declares is
//! loaded with a warning: it matches nothing (before identities were typed it matched a CN),
//! and it is what revoking a token by deleting its `[[token]]` leaves.
//!
//! The model is Kubernetes RBAC's reduced to what a decision service needs: a subject
//! (`identity`), verbs, and resources named by key prefix (RBAC's `resourceNames` are exact
//! names; a prefix is what gives a team every target it creates). As in RBAC, rules only add
//! permissions; there is no deny rule, so the order of rules does not matter.

use std::{collections::HashMap, fmt, sync::Arc};

use serde::Deserialize;
use thiserror::Error;

/// What a call does to a target, as the authorization file names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Verb {
    /// `Recommend` (dry runs included: a dry run reads the target's history) and
    /// `ReportScale` (the outcome of applying a Recommend).
    Recommend,
    /// `GetHistory`, `GetRecommendation`, `ListTargets`, `ListVerticalTargets`.
    Read,
    /// `RecordUsage`.
    WriteUsage,
    /// `DeleteTarget`, `DeleteVerticalTarget`.
    Delete,
    /// `PutPolicy`, `DeletePolicy`, `PutScalingGroup`, `DeleteScalingGroup`, on the policy's
    /// or group's name; a group's member keys, prefixes and policies need it too, so a team
    /// can only put a budget on its own targets. (`read` on a name: `GetPolicy`,
    /// `ListPolicies`, `GetScalingGroup`, `ListScalingGroups`, and a Recommend naming a
    /// policy.)
    Configure,
}

impl Verb {
    /// Every verb, in the order the file documents them.
    pub(crate) const ALL: [Verb; 5] = [
        Verb::Recommend,
        Verb::Read,
        Verb::WriteUsage,
        Verb::Delete,
        Verb::Configure,
    ];

    /// The name in the authorization file, in errors and in metric labels.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Verb::Recommend => "recommend",
            Verb::Read => "read",
            Verb::WriteUsage => "write-usage",
            Verb::Delete => "delete",
            Verb::Configure => "configure",
        }
    }

    fn parse(name: &str) -> Option<Verb> {
        Verb::ALL.into_iter().find(|v| v.as_str() == name)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where an identity comes from, by its spelling (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IdentityKind {
    /// A certificate's URI SAN: the URI itself.
    Uri,
    /// A certificate's DNS SAN: `dns:NAME`.
    Dns,
    /// A certificate's subject CN: `cn:NAME`.
    Cn,
    /// A plain name, which only a bearer token stands for.
    Token,
}

impl IdentityKind {
    fn of(identity: &str) -> IdentityKind {
        if identity.contains("://") {
            IdentityKind::Uri
        } else if identity.starts_with("dns:") {
            IdentityKind::Dns
        } else if identity.starts_with("cn:") {
            IdentityKind::Cn
        } else {
            IdentityKind::Token
        }
    }
}

/// Why an authorization file cannot be used. Each names the entry (`rule[i]`, `token[i]`).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PolicyError {
    /// Not valid TOML for the schema (unknown keys included).
    #[error("{0}")]
    Parse(String),
    /// A value is wrong; `entry` is e.g. `rule[2].verbs`.
    #[error("{entry}: {message}")]
    Invalid {
        /// Where in the file, e.g. `rule[2].verbs` or `token[0].sha256`.
        entry: String,
        /// The rule it breaks.
        message: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    rule: Vec<RuleEntry>,
    #[serde(default)]
    token: Vec<TokenEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleEntry {
    identity: String,
    verbs: Vec<String>,
    prefixes: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    identity: String,
    sha256: String,
}

/// One identity's grants: for each prefix, the verbs (a bit set of [`Verb::bit`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Grants {
    prefixes: Vec<(String, u8)>,
}

/// A parsed, validated authorization file.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Policy {
    grants: HashMap<Arc<str>, Grants>,
    tokens: HashMap<[u8; 32], Arc<str>>,
}

fn invalid(entry: String, message: impl Into<String>) -> PolicyError {
    PolicyError::Invalid {
        entry,
        message: message.into(),
    }
}

impl Policy {
    /// Parses and validates the text of an authorization file.
    pub(crate) fn parse(text: &str) -> Result<Policy, PolicyError> {
        let file: File = toml::from_str(text).map_err(|e| PolicyError::Parse(e.to_string()))?;
        let mut policy = Policy::default();
        for (i, token) in file.token.iter().enumerate() {
            if IdentityKind::of(&token.identity) != IdentityKind::Token {
                return Err(invalid(
                    format!("token[{i}].identity"),
                    "must be a plain name: a URI, dns:NAME and cn:NAME are certificate identities",
                ));
            }
        }
        for (i, rule) in file.rule.into_iter().enumerate() {
            if rule.identity.is_empty() {
                return Err(invalid(format!("rule[{i}].identity"), "must not be empty"));
            }
            if IdentityKind::of(&rule.identity) == IdentityKind::Token
                && !file.token.iter().any(|t| t.identity == rule.identity)
            {
                // A warning, not an error: revoking a token by deleting its [[token]] leaves
                // its rules, and that file must load (or the old token would keep working).
                tracing::warn!(
                    rule = i,
                    identity = ?rule.identity,
                    "a plain name stands only for a [[token]], and no token declares it: the rule matches no caller (write a certificate's URI SAN as the URI, a DNS SAN as dns:NAME, a subject CN as cn:NAME)"
                );
            }
            for prefix in &rule.prefixes {
                if !prefix.is_empty() && !prefix.ends_with('/') {
                    tracing::warn!(
                        rule = i,
                        prefix = ?prefix,
                        "an authorization prefix without a trailing slash also covers its siblings (\"team-a\" grants \"team-ab/...\"); end it with / unless that is meant"
                    );
                }
            }
            if rule.verbs.is_empty() {
                return Err(invalid(format!("rule[{i}].verbs"), "must not be empty"));
            }
            let mut bits = 0u8;
            for name in &rule.verbs {
                let verb = Verb::parse(name).ok_or_else(|| {
                    invalid(
                        format!("rule[{i}].verbs"),
                        format!(
                            "unknown verb {name:?}; the verbs are recommend, read, write-usage, delete"
                        ),
                    )
                })?;
                bits |= verb.bit();
            }
            if rule.prefixes.is_empty() {
                return Err(invalid(
                    format!("rule[{i}].prefixes"),
                    "must not be empty (\"\" grants every key)",
                ));
            }
            let grants = policy
                .grants
                .entry(Arc::from(rule.identity.as_str()))
                .or_default();
            for prefix in rule.prefixes {
                match grants.prefixes.iter_mut().find(|(p, _)| *p == prefix) {
                    Some((_, existing)) => *existing |= bits,
                    None => grants.prefixes.push((prefix, bits)),
                }
            }
        }
        for (i, token) in file.token.into_iter().enumerate() {
            if token.identity.is_empty() {
                return Err(invalid(format!("token[{i}].identity"), "must not be empty"));
            }
            let hash = parse_sha256(&token.sha256).ok_or_else(|| {
                invalid(
                    format!("token[{i}].sha256"),
                    "must be 64 hexadecimal digits (the SHA-256 of the token, e.g. `printf %s \"$TOKEN\" | sha256sum`)",
                )
            })?;
            if policy
                .tokens
                .insert(hash, Arc::from(token.identity.as_str()))
                .is_some()
            {
                return Err(invalid(
                    format!("token[{i}].sha256"),
                    "the same token hash is listed twice",
                ));
            }
        }
        Ok(policy)
    }

    /// Whether `identity` may do `verb` on `key`: some rule of that identity grants the verb
    /// on a prefix of the key.
    pub(crate) fn allows(&self, identity: &str, verb: Verb, key: &str) -> bool {
        self.grants.get(identity).is_some_and(|g| {
            g.prefixes
                .iter()
                .any(|(prefix, bits)| bits & verb.bit() != 0 && key.starts_with(prefix.as_str()))
        })
    }

    /// The prefixes under which `identity` may do `verb`, sorted, with every prefix that
    /// another one of the list already covers removed (so the ranges do not overlap).
    pub(crate) fn prefixes(&self, identity: &str, verb: Verb) -> Vec<String> {
        let Some(grants) = self.grants.get(identity) else {
            return Vec::new();
        };
        let mut all: Vec<&str> = grants
            .prefixes
            .iter()
            .filter(|(_, bits)| bits & verb.bit() != 0)
            .map(|(p, _)| p.as_str())
            .collect();
        all.sort_unstable();
        let mut out: Vec<String> = Vec::with_capacity(all.len());
        for prefix in all {
            // Sorted: a covering (shorter) prefix comes before everything it covers.
            if !out
                .last()
                .is_some_and(|last| prefix.starts_with(last.as_str()))
            {
                out.push(prefix.to_owned());
            }
        }
        out
    }

    /// The identity a bearer token stands for, if its SHA-256 is listed.
    pub(crate) fn token_identity(&self, token: &str) -> Option<&Arc<str>> {
        self.tokens.get(&sha256(token.as_bytes()))
    }

    /// Number of rules' identities and tokens (for the start-up log line).
    pub(crate) fn summary(&self) -> (usize, usize) {
        (self.grants.len(), self.tokens.len())
    }
}

/// SHA-256 of `data` (ring's, the provider rustls already uses).
pub(crate) fn sha256(data: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, data);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// Lowercase hex of a SHA-256 (what `sha256sum` prints).
pub fn sha256_hex(data: &[u8]) -> String {
    sha256(data).iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[[rule]]
identity = "spiffe://example.org/team-a"
verbs = ["recommend", "read", "write-usage", "delete", "configure"]
prefixes = ["team-a/"]

[[rule]]
identity = "ci-bot"
verbs = ["read"]
prefixes = ["team-a/", "team-b/", "team-a/x/"]

[[rule]]
identity = "ci-bot"
verbs = ["recommend"]
prefixes = ["team-b/"]

[[token]]
identity = "ci-bot"
sha256 = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"
"#;

    #[test]
    fn rules_grant_verbs_on_prefixes_and_nothing_else() {
        let p = Policy::parse(FILE).unwrap();
        let a = "spiffe://example.org/team-a";
        for verb in Verb::ALL {
            assert!(p.allows(a, verb, "team-a/web"), "{verb}");
            assert!(!p.allows(a, verb, "team-b/web"), "{verb}");
            assert!(
                !p.allows(a, verb, "team-a"),
                "{verb}: the prefix includes the slash"
            );
        }
        assert!(p.allows("ci-bot", Verb::Read, "team-b/x"));
        assert!(p.allows("ci-bot", Verb::Recommend, "team-b/x"));
        assert!(!p.allows("ci-bot", Verb::Recommend, "team-a/x"));
        assert!(!p.allows("ci-bot", Verb::Delete, "team-b/x"));
        assert!(!p.allows("nobody", Verb::Read, "team-a/x"));
        assert_eq!(p.prefixes("ci-bot", Verb::Read), ["team-a/", "team-b/"]);
        assert_eq!(p.prefixes("ci-bot", Verb::Delete), Vec::<String>::new());
    }

    #[test]
    fn tokens_are_matched_by_hash() {
        let p = Policy::parse(FILE).unwrap();
        // printf %s secret | sha256sum
        assert_eq!(
            sha256_hex(b"secret"),
            "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"
        );
        assert_eq!(p.token_identity("secret").map(|i| &**i), Some("ci-bot"));
        assert_eq!(p.token_identity("Secret"), None);
        assert_eq!(p.token_identity(""), None);
    }

    #[test]
    fn bad_files_name_the_entry() {
        for (text, wanted) in [
            (
                "[[rule]]\nidentity = \"cn:a\"\nverbs = [\"write\"]\nprefixes = [\"\"]",
                "rule[0].verbs",
            ),
            (
                "[[rule]]\nidentity = \"cn:a\"\nverbs = [\"read\"]\nprefixes = []",
                "rule[0].prefixes",
            ),
            (
                "[[token]]\nidentity = \"a\"\nsha256 = \"abc\"",
                "token[0].sha256",
            ),
            (
                "[[rule]]\nidentity = \"cn:a\"\nverbs = [\"read\"]\nprefix = [\"\"]",
                "prefix",
            ),
            ("[[rules]]\nidentity = \"a\"", "rules"),
        ] {
            let err = Policy::parse(text).unwrap_err().to_string();
            assert!(
                err.contains(wanted),
                "{text:?}: {err} does not name {wanted}"
            );
        }
        let twice = format!(
            "[[token]]\nidentity = \"a\"\nsha256 = \"{h}\"\n[[token]]\nidentity = \"b\"\nsha256 = \"{h}\"",
            h = sha256_hex(b"t")
        );
        assert!(
            Policy::parse(&twice)
                .unwrap_err()
                .to_string()
                .contains("token[1].sha256")
        );
    }

    /// Identities are typed by their source: a rule's plain name must be a token's, a token
    /// cannot take a certificate's spelling, and a certificate's CN or DNS SAN (`cn:`, `dns:`)
    /// never matches a token's rights or a URI SAN's.
    #[test]
    fn identities_are_typed_by_their_source() {
        let p = Policy::parse(FILE).unwrap();
        // A certificate whose CN is ci-bot is `cn:ci-bot`, not the token identity `ci-bot`.
        assert!(!p.allows("cn:ci-bot", Verb::Read, "team-b/x"));
        // A DNS SAN or a CN that spells team-a's URI is not team-a.
        assert!(!p.allows("dns:spiffe://example.org/team-a", Verb::Read, "team-a/x"));
        assert!(!p.allows("cn:spiffe://example.org/team-a", Verb::Read, "team-a/x"));
        for (text, wanted) in [
            (
                "[[token]]\nidentity = \"cn:x\"\nsha256 = \"2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b\"",
                "token[0].identity",
            ),
            (
                "[[token]]\nidentity = \"spiffe://example.org/x\"\nsha256 = \"2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b\"",
                "token[0].identity",
            ),
        ] {
            let err = Policy::parse(text).unwrap_err().to_string();
            assert!(err.contains(wanted), "{text:?}: {err}");
        }
        let ok = Policy::parse(
            "[[rule]]\nidentity = \"cn:auditor\"\nverbs = [\"read\"]\nprefixes = [\"\"]\n[[rule]]\nidentity = \"dns:web.example.org\"\nverbs = [\"read\"]\nprefixes = [\"web/\"]",
        )
        .unwrap();
        assert!(ok.allows("cn:auditor", Verb::Read, "any/key"));
        // A plain name no token declares loads (a revoked token's rules) and matches no
        // certificate.
        let p = Policy::parse(
            "[[rule]]\nidentity = \"auditor\"\nverbs = [\"read\"]\nprefixes = [\"\"]",
        )
        .unwrap();
        assert!(!p.allows("cn:auditor", Verb::Read, "x"));
        assert!(!ok.allows("auditor", Verb::Read, "any/key"));
        assert!(ok.allows("dns:web.example.org", Verb::Read, "web/x"));
    }

    #[test]
    fn an_empty_file_denies_everything() {
        let p = Policy::parse("").unwrap();
        assert!(!p.allows("a", Verb::Read, ""));
        assert_eq!(p.summary(), (0, 0));
    }
}
