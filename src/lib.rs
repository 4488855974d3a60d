//! autoscaled: the judgement of the Kubernetes autoscalers as a gRPC service.
//!
//! # Layout
//!
//! * [`engine`]: the pure decision engines (HPA in `engine::hpa`, VPA in `engine::vpa`):
//!   a snapshot, the history and `now` go in; a decision and the new history come out.
//! * `conformance`: runs the shared conformance cases through the engine (or a server).
//! * `store`: per-target history in sled.
//! * `api`: the tonic services; proto ↔ engine conversion at the boundary.
//! * `auth` (authentication layer, authorization file, per-key check), `tls` (the TLS
//!   acceptor and certificate reload), `security` (loading and reloading both): issue 10.
//! * `config` (the only reader of the environment), `telemetry`, `metrics`, `server`, `shutdown`: wiring.
//! * `kube`: Kubernetes quantities and HPA manifests for the command-line client.
//! * `whatif`: `simulate` / `record` / `report` on the command line (the replay is
//!   `api::simulate`).
//! * `cli`: the clap command line and what each subcommand runs; `main.rs` stays thin.
//!
//! Dependencies point one way: engine ← store ← api ← server ← main.
#![forbid(unsafe_code)]

pub mod api;
pub mod auth;
pub mod cli;
pub mod client;
pub mod client_migration;
pub mod client_security;
pub mod config;
pub mod conformance;
pub mod drain;
pub mod engine;
pub mod fixtures;
pub mod kube;
pub mod metrics;
pub mod overload;
pub mod pb;
pub mod security;
pub mod server;
pub mod shutdown;
pub mod store;
pub mod store_health;
pub mod telemetry;
pub mod tls;
pub mod whatif;
