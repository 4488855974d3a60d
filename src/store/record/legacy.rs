//! Version 1 records: one version byte, then the record as JSON (the engine's serde structs).
//! Read for folders of format 1; still written for the VPA state.

use serde::de::DeserializeOwned;

use super::StoreError;

/// The JSON encoding's version byte.
pub(crate) const VERSION: u8 = super::VERSION_JSON;

/// Encodes `value` as `[VERSION] ++ json`. Only tests write format 1 now (the stores write
/// format 2, [`super::encode_binary`]): they check that records written before it still read.
#[cfg(test)]
pub(crate) fn encode<T: serde::Serialize>(
    kind: &'static str,
    key: &str,
    value: &T,
) -> Result<Vec<u8>, StoreError> {
    let mut out = vec![VERSION];
    serde_json::to_writer(&mut out, value).map_err(|e| StoreError::Corrupt {
        kind,
        key: key.to_owned(),
        message: format!("cannot encode: {e}"),
    })?;
    Ok(out)
}

/// Decodes a value written by [`encode`].
pub(crate) fn decode<T: DeserializeOwned>(
    kind: &'static str,
    key: &str,
    bytes: &[u8],
) -> Result<T, StoreError> {
    match bytes.split_first() {
        None => Err(StoreError::Corrupt {
            kind,
            key: key.to_owned(),
            message: "empty value".to_owned(),
        }),
        Some((&VERSION, body)) => serde_json::from_slice(body).map_err(|e| StoreError::Corrupt {
            kind,
            key: key.to_owned(),
            message: e.to_string(),
        }),
        Some((&version, _)) => Err(StoreError::UnknownVersion {
            kind,
            key: key.to_owned(),
            version,
            supported: VERSION,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_unknown_versions() {
        let bytes = encode("state", "k", &vec![1, 2, 3]).unwrap();
        assert_eq!(bytes[0], VERSION);
        assert_eq!(
            decode::<Vec<i32>>("state", "k", &bytes).unwrap(),
            vec![1, 2, 3]
        );

        let mut future = bytes.clone();
        future[0] = 9;
        let err = decode::<Vec<i32>>("state", "k", &future).unwrap_err();
        assert!(matches!(
            err,
            StoreError::UnknownVersion {
                version: 9,
                supported: 1,
                ..
            }
        ));
        assert!(err.to_string().contains("encoding version 9"), "{err}");

        assert!(matches!(
            decode::<Vec<i32>>("state", "k", &[]),
            Err(StoreError::Corrupt { .. })
        ));
        assert!(matches!(
            decode::<Vec<i32>>("state", "k", &[VERSION, b'{']),
            Err(StoreError::Corrupt { .. })
        ));
    }
}

#[cfg(test)]
mod golden {
    use crate::{
        engine::{
            hpa::history::{History, Recommendation},
            time::Time,
        },
        store::HpaState,
    };

    /// A state record of format 1 exactly as builds before version 2 wrote it: it must keep
    /// reading (migrate on read).
    const GOLDEN_V1_STATE: &[u8] = b"\x01{\"history\":{\"recommendations\":[{\"replicas\":4,\"time\":1767225600000}],\"scale_up_events\":[],\"scale_down_events\":[]},\"next_seq\":3,\"log_len\":2}";

    #[test]
    fn version_1_golden_bytes_read() {
        let state: HpaState = super::decode("state", "k", GOLDEN_V1_STATE).unwrap();
        assert_eq!(
            state,
            HpaState {
                history: History {
                    recommendations: Some(vec![Recommendation {
                        replicas: 4,
                        time: Time::from_unix_millis(1_767_225_600_000),
                    }]),
                    ..History::default()
                },
                next_seq: 3,
            }
        );
    }
}
