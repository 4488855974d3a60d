//! autoscaled: the judgement of the Kubernetes autoscalers as a gRPC service. This package is
//! the server; the pure engines are `autoscaled-engine` (`crates/engine`, here as [`engine`]),
//! and the tools (`autoscalectl`: client, conformance runner, what-if, manifest reader,
//! recording proxy) are `crates/ctl`, which depends on this library and not the other way.
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
//!   status table, the per-key authorization check, the wire limits and the codec; the
//!   what-if replay over the wire (`api::simulate`).
//! * `auth` (authentication layer, authorization file, per-key check), `tls` (the TLS
//!   acceptor and certificate reload), `security` (loading and reloading both).
//! * `overload` (load shedding, deadlines), `drain` and `shutdown` (graceful stop),
//!   `metrics`, `telemetry`: the server layers; `admin`: the admin HTTP listener (`/metrics`,
//!   `/healthz`, `/readyz`).
//! * `config` (the only reader of the environment), `server`: wiring.
//! * `cli`: the clap command line of `autoscaled` and what each subcommand runs; `main.rs`
//!   stays thin.
//!
//! Dependencies point one way: engine ← store ← api ← server ← main, and this library ←
//! `autoscalectl`.
//!
//! # Visibility
//!
//! A module is `pub` here only if the binary, `autoscalectl`, `tests/`, `benches/` or
//! `examples/` use it; inside, `pub(crate)` is the default.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub(crate) mod admin;
pub mod api;
pub mod auth;
pub mod cli;
pub mod config;
pub(crate) mod connect;
pub(crate) mod console;
pub mod doors;
pub(crate) mod drain;
pub mod html;
/// The pure engines (`crates/engine`), under the name the server's modules use.
pub use autoscaled_engine as engine;
pub(crate) mod metrics;
pub(crate) mod overload;
pub mod pb;
pub mod peers;
pub mod security;
pub mod server;
pub mod shutdown;
pub mod store;
pub(crate) mod store_health;
pub(crate) mod telemetry;
pub(crate) mod tls;
