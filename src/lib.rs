//! autoscaled: the judgement of the Kubernetes autoscalers as a gRPC service.
//!
//! # Layout
//!
//! * [`engine`]: the pure decision engines (HPA in `engine::hpa`, VPA in `engine::vpa`):
//!   a snapshot, the history and `now` go in; a decision and the new history come out.
//! * `conformance`: runs the shared conformance cases through the engine (or a server).
//! * `store`: per-target history in sled.
//! * `api`: the tonic services; proto ↔ engine conversion at the boundary.
//! * `config` (the only reader of the environment), `telemetry`, `metrics`, `server`, `shutdown`: wiring.
//! * `cli`: the clap command line and what each subcommand runs; `main.rs` stays thin.
//!
//! Dependencies point one way: engine ← store ← api ← server ← main.
#![forbid(unsafe_code)]

pub mod api;
pub mod cli;
pub mod client;
pub mod client_migration;
pub mod config;
pub mod conformance;
pub mod engine;
pub mod metrics;
pub mod pb;
pub mod server;
pub mod shutdown;
pub mod store;
pub mod telemetry;
