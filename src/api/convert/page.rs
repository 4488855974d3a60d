//! Page tokens of the `List*` RPCs: opaque to clients, the hex of the key to start after.

use crate::api::status::ApiError;

/// Page size when a `List*` request gives none (0).
const DEFAULT_PAGE_SIZE: usize = 100;
/// Larger page sizes are capped here.
const MAX_PAGE_SIZE: usize = 1000;

/// A `List*` request's page: how many keys, and the key to start after.
pub(crate) struct PageRequest {
    pub size: usize,
    pub after: Option<String>,
}

/// Reads `page_size` (0: the default; negative: INVALID_ARGUMENT; capped) and `page_token`.
pub(crate) fn page_request(page_size: i32, page_token: &str) -> Result<PageRequest, ApiError> {
    let size = match usize::try_from(page_size) {
        Err(_) => return Err(ApiError::field("page_size", "must not be negative")),
        Ok(0) => DEFAULT_PAGE_SIZE,
        Ok(n) => n.min(MAX_PAGE_SIZE),
    };
    Ok(PageRequest {
        size,
        after: parse_page_token(page_token)?,
    })
}

/// The `next_page_token` of a page: after its last key when more follow, else empty.
pub(crate) fn next_page_token(page: &crate::store::KeyPage) -> String {
    match (page.more, page.keys.last()) {
        (true, Some(last)) => page_token(last),
        _ => String::new(),
    }
}

/// An opaque page token for "after this key": the key's bytes in hex.
pub(crate) fn page_token(after: &str) -> String {
    after.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Decodes [`page_token`]; an empty token is the first page.
pub(crate) fn parse_page_token(token: &str) -> Result<Option<String>, ApiError> {
    if token.is_empty() {
        return Ok(None);
    }
    let invalid = || ApiError::field("page_token", "not a token returned by ListTargets");
    if !token.len().is_multiple_of(2) {
        return Err(invalid());
    }
    let bytes = (0..token.len())
        .step_by(2)
        .map(|i| {
            token
                .get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(invalid)?;
    String::from_utf8(bytes).map(Some).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_tokens_round_trip_and_garbage_is_rejected() {
        for key in ["a", "ns/web", "ü/x"] {
            assert_eq!(
                parse_page_token(&page_token(key)).unwrap().as_deref(),
                Some(key)
            );
        }
        assert_eq!(parse_page_token("").unwrap(), None);
        for bad in ["zz", "abc", "ff"] {
            assert!(parse_page_token(bad).is_err(), "{bad}");
        }
    }
}
