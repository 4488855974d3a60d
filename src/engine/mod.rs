//! The pure decision engines. No tokio, tonic, prost, sled, tracing, clock or environment:
//! everything a decision depends on, including `now`, is an argument, and the new history is
//! a return value.
//!
//! # Layout
//!
//! * [`spec`], [`observation`], [`settings`], [`history`], [`time`]: the inputs.
//! * [`hpa`]: the HorizontalPodAutoscaler decision (`hpa::evaluate`).
//! * [`condition`]: status conditions with Kubernetes' reasons.
//! * [`error`]: input that makes no sense.
//! * [`vpa`]: the VerticalPodAutoscaler recommender model (`vpa::VpaTarget`); self-contained.

pub mod condition;
pub mod error;
pub mod history;
pub mod hpa;
pub mod observation;
pub mod settings;
pub mod spec;
pub mod time;
pub mod vpa;
