//! Versioned records: every value the store writes is one version byte followed by the
//! record. A reader meeting a version it does not know refuses clearly instead of misreading.
//!
//! * version 1 ([`legacy`]): the engine's serde structs as JSON (format 1, builds up to the
//!   introduction of these records). Still read, never written: a target
//!   written by an older build migrates on its next write (migrate on read, so opening a
//!   folder costs no pass over it).
//! * version 2 ([`hpa`]): storage-only prost messages from `proto/store/v1/records.proto`
//!   ([`pb`]), with explicit conversions to and from the engine's types ([`codes`] for the
//!   enums), so that renaming an engine field or variant does not change what is on disk.
//!
//! * version 3 (HPA state records only): the version-2 `HpaState` whose newest run is held
//!   as a tail over the run's body logged in `hpa_decisions` ([`hpa::tail_of`]).
//! * version 4 (every HPA record, state and decision run; what this build writes): the same
//!   messages with fields an older reader would silently misread, so it must refuse them:
//!   each decision's readings, Kubernetes' message texts as codes
//!   ([`codes::MESSAGE_PREFIXES`]), recommendation times as differences of differences.
//!
//! The VPA state ([`vpa`]) is written as version 2 too; a version-1 (JSON) VPA record is
//! read as before and rewritten as version 2 by the target's next RecordUsage.

pub(crate) mod codes;
pub(crate) mod fleet;
pub(crate) mod hpa;
pub(crate) mod legacy;
pub(crate) mod vpa;

/// The storage-only messages (never served, never registered for reflection).
#[allow(clippy::all, missing_docs, unreachable_pub)] // generated
pub(crate) mod pb {
    tonic::include_proto!("autoscaled.store.v1");
}

use super::StoreError;

pub(crate) use legacy::decode;
#[cfg(test)]
pub(crate) use legacy::encode;

/// JSON records (format 1).
pub(crate) const VERSION_JSON: u8 = 1;
/// prost records (format 2).
pub(crate) const VERSION_BINARY: u8 = 2;

/// An HPA state record whose newest run is a tail over its logged body (`HpaState` with
/// `pending_tail`): the prost message of version 2, under its own version byte so that a
/// build that does not know tails refuses the record instead of missing the newest run.
pub(crate) const VERSION_STATE_TAIL: u8 = 3;

/// Every HPA record this build writes (state and decision runs).
pub(crate) const VERSION_HPA: u8 = 4;

/// The versions an HPA state record may have.
pub(crate) const STATE_VERSIONS: &[u8] = &[VERSION_BINARY, VERSION_STATE_TAIL, VERSION_HPA];
/// The versions an HPA decision-run record may have.
pub(crate) const DECISION_VERSIONS: &[u8] = &[VERSION_BINARY, VERSION_HPA];
/// The versions a VPA record may have.
pub(crate) const VPA_VERSIONS: &[u8] = &[VERSION_BINARY];

/// Encodes a prost record as `[VERSION_BINARY] ++ message`.
pub(crate) fn encode_binary<M: prost::Message>(message: &M) -> Vec<u8> {
    encode_versioned(VERSION_BINARY, message)
}

/// Encodes a prost record as `[version] ++ message`.
pub(crate) fn encode_versioned<M: prost::Message>(version: u8, message: &M) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + message.encoded_len());
    out.push(version);
    // Writing into a Vec cannot run out of room.
    let _ = message.encode(&mut out);
    out
}

/// A stored value split into its version and body.
pub(crate) enum Versioned<'a> {
    Json(&'a [u8]),
    Binary(&'a [u8]),
}

/// Splits a stored value; an empty value or a binary version not in `accepted` (the versions
/// this kind of record has: [`STATE_VERSIONS`], [`DECISION_VERSIONS`], [`VPA_VERSIONS`]) is
/// refused naming `key`, that version and the kind's newest. Every binary version's body is
/// one prost message (later versions add fields), so they all split as `Binary`.
pub(crate) fn versioned<'a>(
    kind: &'static str,
    key: &str,
    bytes: &'a [u8],
    accepted: &[u8],
) -> Result<Versioned<'a>, StoreError> {
    match bytes.split_first() {
        None => Err(corrupt(kind, key, "empty value")),
        Some((&VERSION_JSON, body)) => Ok(Versioned::Json(body)),
        Some((version, body)) if accepted.contains(version) => Ok(Versioned::Binary(body)),
        Some((&version, _)) => Err(StoreError::UnknownVersion {
            kind,
            key: key.to_owned(),
            version,
            supported: accepted.iter().copied().max().unwrap_or(VERSION_BINARY),
        }),
    }
}

/// Decodes a prost body, naming `key` when it does not decode.
pub(crate) fn decode_binary<M: prost::Message + Default>(
    kind: &'static str,
    key: &str,
    body: &[u8],
) -> Result<M, StoreError> {
    M::decode(body).map_err(|e| corrupt(kind, key, &e.to_string()))
}

/// A [`StoreError::Corrupt`] for `key`.
pub(crate) fn corrupt(kind: &'static str, key: &str, message: &str) -> StoreError {
    StoreError::Corrupt {
        kind,
        key: key.to_owned(),
        message: message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind reads its own versions and refuses the others, naming its newest: a state
    /// record reads 2, 3 (tails) and 4, a decision record 2 and 4, a VPA record only 2.
    #[test]
    fn versions_are_refused_unless_their_kind_has_them() {
        let refused =
            |kind, bytes: &[u8], accepted| match versioned(kind, "fleet/a", bytes, accepted) {
                Err(StoreError::UnknownVersion {
                    kind,
                    key,
                    version,
                    supported,
                }) => (kind, key, version, supported),
                Err(e) => panic!("{kind}: refused as {e}"),
                Ok(_) => panic!("{kind}: version {} accepted", bytes[0]),
            };
        for v in [VERSION_BINARY, VERSION_STATE_TAIL, VERSION_HPA] {
            assert!(matches!(
                versioned("state", "fleet/a", &[v, 8], STATE_VERSIONS),
                Ok(Versioned::Binary(&[8]))
            ));
        }
        for v in [VERSION_BINARY, VERSION_HPA] {
            assert!(matches!(
                versioned("decision", "fleet/a", &[v, 8], DECISION_VERSIONS),
                Ok(Versioned::Binary(&[8]))
            ));
        }
        assert!(matches!(
            versioned(
                "decision",
                "fleet/a",
                &[VERSION_JSON, b'{'],
                DECISION_VERSIONS
            ),
            Ok(Versioned::Json(b"{"))
        ));
        assert_eq!(
            refused("state", &[5, 8], STATE_VERSIONS),
            ("state", "fleet/a".to_owned(), 5, 4)
        );
        assert_eq!(
            refused("decision", &[VERSION_STATE_TAIL, 8], DECISION_VERSIONS),
            ("decision", "fleet/a".to_owned(), 3, 4)
        );
        assert_eq!(refused("vpa", &[VERSION_HPA, 8], VPA_VERSIONS).3, 2);
        assert_eq!(refused("vpa", &[0], VPA_VERSIONS).2, 0);
        assert!(matches!(
            versioned("state", "fleet/a", &[], STATE_VERSIONS),
            Err(StoreError::Corrupt { .. })
        ));
    }
}
