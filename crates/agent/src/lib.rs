//! autoscaled-agent: the loop beside a scheduler without Kubernetes. Every sync period, per
//! target: the current count from the scheduler (a command), the observations from
//! Prometheus (or a command printing a RecommendRequest), the decision from autoscaled, the
//! scale through the scheduler's command (or a webhook), and its outcome reported back
//! (`ReportScale`). See docs/agent.md.

pub mod actuate;
pub mod batch;
pub mod check;
pub mod command;
pub mod config;
pub mod http;
pub mod metrics;
pub mod observe;
pub mod prometheus;
pub mod run;
