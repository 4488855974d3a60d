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
//!
//! The VPA state ([`vpa`]) is written as version 2 too; a version-1 (JSON) VPA record is
//! read as before and rewritten as version 2 by the target's next RecordUsage.

pub(crate) mod codes;
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

/// Splits a stored value; an empty value or a version newer than `newest` (the newest
/// version this kind of record has: [`VERSION_STATE_TAIL`] for HPA state records,
/// [`VERSION_BINARY`] for the others) is refused naming `key` and that version. A version-3
/// body is the version-2 message (with the state's tail), so it splits as `Binary`.
pub(crate) fn versioned<'a>(
    kind: &'static str,
    key: &str,
    bytes: &'a [u8],
    newest: u8,
) -> Result<Versioned<'a>, StoreError> {
    match bytes.split_first() {
        None => Err(corrupt(kind, key, "empty value")),
        Some((&VERSION_JSON, body)) => Ok(Versioned::Json(body)),
        Some((&version, body)) if (VERSION_BINARY..=newest).contains(&version) => {
            Ok(Versioned::Binary(body))
        }
        Some((&version, _)) => Err(StoreError::UnknownVersion {
            kind,
            key: key.to_owned(),
            version,
            supported: newest,
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

    /// Each kind refuses versions beyond its own newest, and names that newest: a state
    /// record reads version 3 (tails), a decision or VPA record only up to 2.
    #[test]
    fn versions_are_refused_beyond_the_newest_of_their_kind() {
        let refused = |kind, bytes: &[u8], newest| match versioned(kind, "fleet/a", bytes, newest) {
            Err(StoreError::UnknownVersion {
                kind,
                key,
                version,
                supported,
            }) => (kind, key, version, supported),
            Err(e) => panic!("{kind}: refused as {e}"),
            Ok(_) => panic!("{kind}: version {} accepted", bytes[0]),
        };
        assert!(matches!(
            versioned(
                "state",
                "fleet/a",
                &[VERSION_STATE_TAIL, 8],
                VERSION_STATE_TAIL
            ),
            Ok(Versioned::Binary(&[8]))
        ));
        assert!(matches!(
            versioned("state", "fleet/a", &[VERSION_BINARY, 8], VERSION_STATE_TAIL),
            Ok(Versioned::Binary(&[8]))
        ));
        assert!(matches!(
            versioned("decision", "fleet/a", &[VERSION_JSON, b'{'], VERSION_BINARY),
            Ok(Versioned::Json(b"{"))
        ));
        assert_eq!(
            refused("state", &[4, 8], VERSION_STATE_TAIL),
            ("state", "fleet/a".to_owned(), 4, 3)
        );
        assert_eq!(
            refused("decision", &[VERSION_STATE_TAIL, 8], VERSION_BINARY),
            ("decision", "fleet/a".to_owned(), 3, 2)
        );
        assert_eq!(refused("vpa", &[0], VERSION_BINARY).2, 0);
        assert!(matches!(
            versioned("state", "fleet/a", &[], VERSION_STATE_TAIL),
            Err(StoreError::Corrupt { .. })
        ));
    }
}
