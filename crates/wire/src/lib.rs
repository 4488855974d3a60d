//! autoscaled-wire: the wire of autoscaled, shared by the server (`autoscaled`), the tools
//! (`autoscalectl`), the agent and the test fixtures, so that none of them links another's
//! code it does not run.
//!
//! * [`pb`]: the generated `autoscaled.v1` messages, clients and services, and the descriptor
//!   sets (reflection, Connect's JSON, the tools' JSON);
//! * `codec` (the generated code's), [`wire_limits`], [`context`]: decoding with the count
//!   limits checked on the wire bytes, a body that does not decode as INVALID_ARGUMENT, and
//!   the per-request context (limits, deadline, peer) a server sets;
//! * [`limits`]: the request limits and their defaults;
//! * [`convert`]: proto ↔ engine, validating every field with its proto path;
//! * [`status`]: the one error → `tonic::Status` table (a server adds its store's failures
//!   through [`status::StoreFailure`]);
//! * [`simulate`]: the what-if replay over the wire (a trace, or decision runs a server
//!   loaded);
//! * [`html`]: the escaping the server's console and the tools' reports share.
//!
//! Dependencies: the pure engines (`autoscaled-engine`), prost and tonic's generated-code
//! support. No store, no listener: a server is built on this, not in it.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

/// The pure engines, under the name the modules here use.
use autoscaled_engine as engine;

pub(crate) mod codec;
pub mod context;
pub mod convert;
pub mod html;
pub mod limits;
pub mod pb;
pub mod simulate;
pub mod status;
pub mod wire_limits;

pub use limits::Limits;

/// Default listen address: loopback only, the usual gRPC port (the server's default, and the
/// server the tools call by default).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:50051";
/// Exit status for bad usage or configuration (`EX_USAGE` of sysexits.h).
pub const EX_USAGE: i32 = 64;
/// `--version` of the binaries: the build (every member of the workspace has the same
/// version), the Kubernetes version whose HPA controller defaults (flags and feature gates)
/// the server follows, and the KEDA versions its extensions follow.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (HPA: Kubernetes 1.37 controller defaults, HPAScaleToZero on; KEDA extensions: 2.19 and later)"
);
