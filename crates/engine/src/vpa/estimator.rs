//! Estimators (`recommender/logic/estimator.go`; specification section 8): a base amount
//! (a constant or a histogram percentile) wrapped by margin, confidence multiplier and
//! minimum, each stage truncating to an integer amount.

use serde::{Deserialize, Serialize};

use super::aggregate::AggregateContainerState;
use super::amount::{
    Resource, ResourceAmount, cpu_amount_from_cores, memory_amount_from_bytes, scale_resource,
};
use super::gomath::go_pow;
use crate::time::go::go_sub;

/// Nanoseconds in a minute.
const NANOS_PER_MINUTE: i64 = 60_000_000_000;

/// `getConfidence`: `min(lifespan / I, samples / I-in-minutes)`, from CPU samples only.
/// About N after N days of one sample per minute; 0 without samples.
pub fn confidence(state: &AggregateContainerState, interval_ns: i64) -> f64 {
    let interval_ns = interval_ns.max(1);
    let lifespan =
        go_sub(state.last_sample_start, state.first_sample_start) as f64 / interval_ns as f64;
    // Go's `Duration.Minutes()`.
    let minutes =
        (interval_ns / NANOS_PER_MINUTE) as f64 + (interval_ns % NANOS_PER_MINUTE) as f64 / 60e9;
    let density = state.total_samples_count as f64 / minutes;
    lifespan.min(density)
}

/// The innermost estimator of a chain.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum EstimatorBase {
    /// `NewConstEstimator`: a fixed amount.
    Constant(ResourceAmount),
    /// `percentileCPUEstimator` / `percentileMemoryEstimator`: the end of the bucket holding
    /// this percentile of the aggregation's histogram, truncated to an amount.
    Percentile(f64),
}

/// A wrapper around the estimate so far.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum EstimatorStep {
    /// `cpuMarginEstimator` / `memoryMarginEstimator`: `x + trunc(x × fraction)`.
    Margin(f64),
    /// `cpuConfidenceMultiplier` / `memoryConfidenceMultiplier`:
    /// `trunc(x × (1 + multiplier / confidence)^exponent)`.
    ConfidenceMultiplier {
        /// m.
        multiplier: f64,
        /// e.
        exponent: f64,
        /// Confidence interval, nanoseconds.
        interval_ns: i64,
    },
    /// `WithCPUMinResource` / `WithMemoryMinResource`: `max(x, min)`.
    Min(ResourceAmount),
}

/// One resource's estimator: a base and the wrappers applied to it, innermost first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EstimatorChain {
    /// The base.
    pub base: EstimatorBase,
    /// Wrappers, innermost first.
    pub steps: Vec<EstimatorStep>,
}

impl EstimatorChain {
    /// Estimate `resource` for `state`.
    pub fn estimate(&self, resource: Resource, state: &AggregateContainerState) -> ResourceAmount {
        let base = match self.base {
            EstimatorBase::Constant(amount) => amount,
            EstimatorBase::Percentile(p) => percentile_amount(resource, state, p),
        };
        self.steps
            .iter()
            .fold(base, |x, step| apply_step(*step, x, state))
    }
}

/// The percentile estimator for `resource`.
pub(crate) fn percentile_amount(
    resource: Resource,
    state: &AggregateContainerState,
    p: f64,
) -> ResourceAmount {
    match resource {
        Resource::Cpu => cpu_amount_from_cores(state.cpu.percentile(p)),
        Resource::Memory => memory_amount_from_bytes(state.memory.percentile(p)),
    }
}

/// One wrapper applied to `x`.
pub(crate) fn apply_step(
    step: EstimatorStep,
    x: ResourceAmount,
    state: &AggregateContainerState,
) -> ResourceAmount {
    match step {
        EstimatorStep::Margin(fraction) => x.saturating_add(scale_resource(x, fraction)),
        EstimatorStep::ConfidenceMultiplier {
            multiplier,
            exponent,
            interval_ns,
        } => {
            let c = confidence(state, interval_ns);
            scale_resource(x, go_pow(1.0 + multiplier / c, exponent))
        }
        EstimatorStep::Min(min) => x.max(min),
    }
}
