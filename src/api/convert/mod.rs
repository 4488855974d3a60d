//! Proto ↔ engine conversion at the boundary (tonic-health's `ServingStatus` ↔ `pb`; quickwit's
//! `populate_problem`): wire types never enter the engine.
//!
//! Conversion validates every field and names it by its proto path, in snake_case with
//! indexes and map keys (`spec.metrics[1].target.average_utilization`,
//! `pods[0].metrics[cpu].window`), so that each violation can go to the client as a
//! `google.rpc.BadRequest` field violation. All violations of a request are collected, not
//! only the first. The rules on engine values are the engine's (`engine::hpa::validate`,
//! `VpaSettings::validate`), run while the values are built; what only the wire has (enum
//! values, required messages, timestamp and duration ranges) is checked here.
//!
//! # Layout
//!
//! * `wire`: the violation collector, lazy field paths, and the wire's scalars (target key,
//!   timestamp, duration) shared by every RPC.
//! * `hpa_request`: `Recommend` proto → engine ([`RecommendInput`]).
//! * `hpa_response`: decisions, logged decisions and histories engine → proto.
//! * `hpa_warnings`: the Recommend response's `warnings`, the pod fields a request left out
//!   that changed how Kubernetes' rules counted its pods.
//! * `history`: `GetHistory` paging over the decision log.
//! * `migration`: the migration extensions, both directions.
//! * `vpa_request` / `vpa_response`: the `VerticalAutoscaler` RPCs, also under `vpa`.
//! * `page`: `List*` page sizes and tokens.
//! * `summary`: `ListTargets` summaries (each target's newest run) and their page budget.
//!
//! The inverse directions (engine → request, response → engine) are `autoscalectl`'s, in its
//! `conformance::convert`, beside their one user.
//!
//! Every name other modules use stays at `api::convert::<name>` through the re-exports below.

pub(crate) mod fleet;
pub(crate) mod history;
pub(crate) mod hpa_request;
pub(crate) mod hpa_response;
pub(crate) mod hpa_warnings;
pub(crate) mod migration;
pub(crate) mod page;
pub(crate) mod report;
pub(crate) mod summary;
pub(crate) mod vpa;
pub(crate) mod vpa_request;
pub(crate) mod vpa_response;
pub(crate) mod wire;

// Public: `tests/api_properties.rs` drives one Recommend through both conversions, and
// `autoscalectl`'s gRPC conformance executor inverts them (its `conformance::convert`).
pub use hpa_request::{Context, RecommendInput, SettingsOverride, recommend_request};
pub(crate) use hpa_response::{decision_record, policy_ref};
pub use hpa_response::{metric_identity, recommend_response, target_history, to_timestamp};
pub use hpa_warnings::{MAX_WARNING_PODS, recommend_warnings};
pub(crate) use page::{next_page_token, page_request, page_token};
pub use report::{ScaleReport, report_scale_request, report_scale_response};
use wire::duration;
pub use wire::{Violations, timestamp};
pub(crate) use wire::{engine_invalid, target_key};
