//! The gRPC API: thin tonic handlers over the engine and the store.
//!
//! * `authorized`: the per-key authorization check in front of both services;
//! * [`convert`]: proto ↔ engine, validating every field with its proto path;
//! * [`status`]: the one error → `tonic::Status` table;
//! * `hpa`: the `HorizontalAutoscaler` service, with `recommend` (one Recommend's steps once
//!   converted) and `fleet` (its policies and scaling groups);
//! * `vpa`: the `VerticalAutoscaler` service (conversion in `convert::vpa`);
//! * `commit`: the one write path of both (lock → load → decide → write → wait for the
//!   flush), with `locks` (per-target async locks) and `clock` (the one request clock);
//! * `overrides`: how the VPA settings layers combine (server, target, call);
//! * `wire_limits`, `context` (autoscaled-wire's, with its codec): decoding with count limits
//!   checked on the wire bytes, decode failures as INVALID_ARGUMENT, and the per-request
//!   context (limits, deadline, peer) the server layer sets.
//!
//! Only this layer reads the clock (for a Recommend: once to validate, again under the
//! target's lock) and passes `now` down.

pub(crate) mod authorized;
pub(crate) mod clock;
pub(crate) mod commit;
pub(crate) use autoscaled_wire::{context, wire_limits};
pub mod convert;
pub(crate) mod fleet;
pub mod forward;
pub(crate) mod hpa;
pub(crate) mod locks;
pub(crate) mod overrides;
pub(crate) mod recommend;
pub mod simulate;
pub mod status;
pub(crate) mod vpa;

pub use hpa::{HorizontalService, HpaOptions};
pub(crate) use vpa::{VerticalService, VpaOptions};
