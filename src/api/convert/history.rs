//! `GetHistory` pages (issue 8 item 6): decision runs in pages, every response under the
//! default 4 MiB a gRPC client accepts.

use prost::Message;

use super::{decision_record, target_history};
use crate::{
    api::status::ApiError,
    engine::hpa::history::History,
    pb::v1 as pb,
    store::{DecisionPage, DecisionPageRequest},
};

/// Larger page sizes are capped here.
pub(crate) const MAX_HISTORY_PAGE_SIZE: usize = 1000;
/// What one response may hold: under the 4 MiB default of gRPC clients (grpcio, grpc-go,
/// tonic), with room for framing and headers.
pub(crate) const RESPONSE_BUDGET_BYTES: usize = 3 * 1024 * 1024 + 512 * 1024;

/// Reads `page_size` (0: as many as fit; negative: INVALID_ARGUMENT) and `page_token`.
pub(crate) fn history_page_request(
    req: &pb::GetHistoryRequest,
) -> Result<DecisionPageRequest, ApiError> {
    let size = match usize::try_from(req.page_size) {
        Err(_) => return Err(ApiError::field("page_size", "must not be negative")),
        Ok(0) => MAX_HISTORY_PAGE_SIZE,
        Ok(n) => n.min(MAX_HISTORY_PAGE_SIZE),
    };
    let after_seq =
        if req.page_token.is_empty() {
            None
        } else {
            let parsed = req
                .page_token
                .strip_prefix('r')
                .and_then(|hex| u64::from_str_radix(hex, 16).ok());
            Some(parsed.ok_or_else(|| {
                ApiError::field("page_token", "not a token returned by GetHistory")
            })?)
        };
    Ok(DecisionPageRequest {
        size,
        newest_first: req.newest_first,
        after_seq,
    })
}

/// The token that continues after the run at `seq`.
pub(crate) fn history_page_token(seq: u64) -> String {
    format!("r{seq:x}")
}

/// A `GetHistory` response for one page of runs, cut short (with a token) where the next run
/// would take the response over [`RESPONSE_BUDGET_BYTES`].
pub(crate) fn target_history_page(
    key: &str,
    history: &History,
    page: &DecisionPage,
) -> pb::TargetHistory {
    let mut out = target_history(key, history, &[]);
    let mut used = out.encoded_len();
    let mut cut = false;
    for e in &page.entries {
        let record = decision_record(e);
        let len = record.encoded_len();
        // Field tag and length prefix.
        let framed = len + 1 + prost::length_delimiter_len(len);
        if used + framed > RESPONSE_BUDGET_BYTES && !out.decisions.is_empty() {
            cut = true;
            break;
        }
        used += framed;
        out.decisions.push(record);
    }
    let last_seq = page
        .entries
        .get(out.decisions.len().saturating_sub(1))
        .map(|e| e.seq);
    if (cut || page.more)
        && let Some(seq) = last_seq
    {
        out.next_page_token = history_page_token(seq);
    }
    out
}
