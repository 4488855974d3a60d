//! Proto ↔ engine conversion is autoscaled-wire's ([`autoscaled_wire::convert`], re-exported
//! here so every path stays `api::convert::<name>`); what reads or writes the store's types is
//! here:
//!
//! * `hpa_records`: logged decisions and a target's history, store → proto;
//! * `history`: `GetHistory` paging over the decision log;
//! * `page`: `List*` page sizes and tokens;
//! * `summary`: `ListTargets` summaries (each target's newest run) and their page budget;
//! * `fleet`: policies and scaling groups as stored, both directions;
//! * `vpa_request` (with the stored overrides), also under `vpa` with the responses.

pub use autoscaled_wire::convert::{
    Context, MAX_WARNING_PODS, RecommendInput, ScaleReport, SettingsOverride, Violations,
    check_target_key, duration, engine_invalid, hpa_request, hpa_response, hpa_warnings,
    metric_identity, migration, policy_spec, recommend_request, recommend_response,
    recommend_warnings, report, report_scale_request, report_scale_response, target_key, timestamp,
    to_timestamp, vpa_response, wire,
};

pub(crate) mod fleet;
pub(crate) mod history;
pub(crate) mod hpa_records;
pub(crate) mod page;
pub(crate) mod summary;
pub(crate) mod vpa;
pub(crate) mod vpa_request;

pub use hpa_records::target_history;
pub(crate) use hpa_records::{decision_record, policy_ref};
pub(crate) use page::{next_page_token, page_request, page_token};
