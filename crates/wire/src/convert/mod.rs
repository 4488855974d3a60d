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
//! * [`wire`]: the violation collector, lazy field paths, and the wire's scalars (target key,
//!   timestamp, duration) shared by every RPC.
//! * [`hpa_request`]: `Recommend` proto → engine ([`RecommendInput`]).
//! * [`hpa_response`]: a decision and its parts engine → proto.
//! * [`hpa_warnings`]: the Recommend response's `warnings`, the pod fields a request left out
//!   that changed how Kubernetes' rules counted its pods.
//! * [`migration`]: the migration extensions, both directions.
//! * [`report`]: the `ReportScale` request and response.
//! * [`vpa_response`]: the `VerticalAutoscaler` responses.
//! * [`fleet`]: the names and rules of policies and scaling groups.
//!
//! What reads or writes a server's stored records (decision logs, pages, summaries, the VPA
//! request with its stored overrides) is the server's `api::convert`. The inverse directions
//! (engine → request, response → engine) are `autoscalectl`'s, in its
//! `conformance::convert`, beside their one user.

pub mod fleet;
pub mod hpa_request;
pub mod hpa_response;
pub mod hpa_warnings;
pub mod migration;
pub mod report;
pub mod vpa_response;
pub mod wire;

pub use hpa_request::{Context, RecommendInput, SettingsOverride, policy_spec, recommend_request};
pub use hpa_response::{metric_identity, recommend_response, to_timestamp};
pub use hpa_warnings::{MAX_WARNING_PODS, recommend_warnings};
pub use report::{ScaleReport, report_scale_request, report_scale_response};
pub use wire::{Violations, check_target_key, duration, engine_invalid, target_key, timestamp};
