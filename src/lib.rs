//! autoscaled: the judgement of the Kubernetes autoscalers as a gRPC service. This package is
//! the server; the pure engines are `autoscaled-engine` (`crates/engine`, here as [`engine`]),
//! the wire (generated code, codec, limits, conversion, the error table, the what-if replay
//! over the wire) is `autoscaled-wire` (`crates/wire`), and the tools (`autoscalectl`) and the
//! agent depend on the wire, not on this library.
//!
//! # Layout
//!
//! The picture of one Recommend and one RecordUsage from the wire to the disk and back, where
//! the etcd backend differs, and who owns what: `docs/architecture.md`.
//!
//! * [`engine`]: the pure decision engines (HPA in `engine::hpa`, VPA in `engine::vpa`):
//!   a snapshot, the history and `now` go in; a decision and the new history come out.
//! * `store`: per-target history in sled (or etcd), with group commit.
//! * `api`: the tonic services over the wire crate's conversion and error table (re-exported as
//!   `api::convert`, `api::status`, `api::simulate`, with the parts that read the store), the
//!   per-key authorization check.
//! * `auth` (authentication layer, authorization file, per-key check), `tls` (the TLS
//!   acceptor and certificate reload), `security` (loading and reloading both).
//! * `overload` (load shedding, deadlines), `drain` and `shutdown` (graceful stop),
//!   `metrics`, `telemetry`: the server layers; `admin`: the admin HTTP listener (`/metrics`,
//!   `/healthz`, `/readyz`).
//! * `config` (the only reader of the environment), `server`: wiring.
//! * `cli`: the clap command line of `autoscaled` and what each subcommand runs; `main.rs`
//!   stays thin.
//!
//! Dependencies point one way: engine ← wire ← store ← api ← server ← main; the tools and the
//! agent depend on the wire and the engine, never on this library.
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
/// The pure engines (`crates/engine`), under the name the server's modules use.
pub use autoscaled_engine as engine;
/// The escaping the console and the tools' reports share (autoscaled-wire's).
pub use autoscaled_wire::html;
pub(crate) mod metrics;
pub(crate) mod overload;
/// The generated `autoscaled.v1` code and its descriptor sets (autoscaled-wire's).
pub use autoscaled_wire::pb;
pub mod peers;
pub mod security;
pub mod server;
pub mod shutdown;
pub mod store;
pub(crate) mod store_health;
pub(crate) mod telemetry;
pub(crate) mod tls;
