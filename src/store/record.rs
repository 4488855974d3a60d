//! Versioned value encoding: one version byte, then the record as JSON. A reader meeting a
//! version it does not know refuses clearly instead of misreading (an upgrade path can add
//! version 2 and keep reading 1).

use serde::{Serialize, de::DeserializeOwned};

use super::StoreError;

/// The encoding written by this build.
pub const VERSION: u8 = 1;

/// Encodes `value` as `[VERSION] ++ json`.
pub fn encode<T: Serialize>(
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
pub fn decode<T: DeserializeOwned>(
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
        future[0] = 2;
        let err = decode::<Vec<i32>>("state", "k", &future).unwrap_err();
        assert!(matches!(
            err,
            StoreError::UnknownVersion {
                version: 2,
                supported: 1,
                ..
            }
        ));
        assert!(err.to_string().contains("encoding version 2"), "{err}");

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
