//! The pure decision engines of autoscaled. No tokio, tonic, prost, sled, tracing, clock or
//! environment (this crate's manifest has no dependency that could do I/O): everything a
//! decision depends on, including `now`, is an argument, and the new history is a return value.
//!
//! # Layout
//!
//! One room per autoscaler, each owning its spec, observation, history, settings and
//! conditions, as upstream keeps `pkg/controller/podautoscaler` and
//! `vertical-pod-autoscaler/pkg/recommender` apart:
//!
//! * [`hpa`]: the HorizontalPodAutoscaler decision (`hpa::evaluate`), with `hpa::spec`,
//!   `hpa::observation`, `hpa::settings`, `hpa::history` and `hpa::prune` (which of it can go),
//!   `hpa::condition`;
//! * [`vpa`]: the VerticalPodAutoscaler recommender model (`vpa::VpaTarget`), with
//!   `vpa::target` (observations), `vpa::settings`, `vpa::aggregate` (its history);
//! * [`whatif`]: a target's past run again under another spec (the replay behind `Simulate`);
//! * [`time`]: the one instant both engines take as an argument;
//! * [`error`]: input that makes no sense.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod error;
pub mod hpa;
pub mod time;
pub mod vpa;
pub mod whatif;

#[cfg(test)]
mod test_support;
