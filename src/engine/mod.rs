//! The pure decision engines. No tokio, tonic, prost, sled, tracing, clock or environment:
//! everything a decision depends on, including `now`, is an argument.

pub mod vpa;
