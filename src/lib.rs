//! autoscaled: the judgement of the Kubernetes autoscalers as a gRPC service.
//!
//! # Layout
//!
//! The picture of one Recommend and one RecordUsage from the wire to the disk and back, where
//! the etcd backend differs, and who owns what: `docs/architecture.md`.
//!
//! * [`engine`]: the pure decision engines (HPA in `engine::hpa`, VPA in `engine::vpa`):
//!   a snapshot, the history and `now` go in; a decision and the new history come out.
//! * `store`: per-target history in sled (or etcd), with group commit.
//! * `api`: the tonic services; proto ↔ engine conversion at the boundary, the one error →
//!   status table, the per-key authorization check, the wire limits and the codec.
//! * `conformance`: runs the shared conformance cases through the engine (or a server).
//! * `auth` (authentication layer, authorization file, per-key check), `tls` (the TLS
//!   acceptor and certificate reload), `security` (loading and reloading both): issue 10.
//! * `overload` (load shedding, deadlines), `drain` and `shutdown` (graceful stop),
//!   `metrics`, `telemetry`: the server layers.
//! * `config` (the only reader of the environment), `server`: wiring.
//! * `client` (with `client_security`, `client_migration`), `kube` (quantities and HPA
//!   manifests), `whatif` (`simulate` / `record` / `report`; the replay is `api::simulate`).
//! * `cli`: the clap command line and what each subcommand runs; `main.rs` stays thin.
//!
//! Dependencies point one way: engine ← store ← api ← server ← main.
//!
//! # Visibility
//!
//! A module is `pub` here only if the binary, `tests/`, `benches/` or `examples/` use it, or
//! it is documented library API (the engine, the client); inside, `pub(crate)` is the default.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod api;
pub mod auth;
pub mod cli;
pub mod client;
pub(crate) mod client_migration;
pub mod client_security;
pub mod config;
pub mod conformance;
pub(crate) mod drain;
pub mod engine;
pub mod fixtures;
pub mod kube;
pub(crate) mod metrics;
pub(crate) mod overload;
pub mod pb;
pub mod security;
pub mod server;
pub(crate) mod shutdown;
pub mod store;
pub(crate) mod store_health;
pub(crate) mod telemetry;
pub(crate) mod tls;
pub mod whatif;
