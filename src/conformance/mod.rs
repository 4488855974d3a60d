//! Runs the shared conformance cases (`../shared/conformance`) through the engines; used by
//! `cargo test` and by the `autoscaled conformance DIR` command.

pub mod vpa;
