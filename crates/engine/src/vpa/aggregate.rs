//! `AggregateContainerState`: the histograms and CPU sample counters of all instances of one
//! container (`recommender/model/aggregate_container_state.go`; specification sections 6, 7).

use serde::{Deserialize, Serialize};

use super::amount::{ResourceAmount, bytes_from_memory_amount, cores_from_cpu_amount};
use super::checkpoint::{AggregateCheckpoint, SUPPORTED_CHECKPOINT_VERSION};
use super::decaying::DecayingHistogram;
use super::histogram::{HistogramError, HistogramOptions};
use super::settings::VpaSettings;
use crate::time::{
    Time,
    go::{duration_nanos, go_sub},
};

/// `minSampleWeight`: the weight of every CPU sample (constant since VPA 1.4.0).
pub(crate) const CPU_SAMPLE_WEIGHT: f64 = 0.1;
/// The weight of every memory peak (a literal upstream).
pub(crate) const MEMORY_PEAK_WEIGHT: f64 = 1.0;

/// Which histogram of an aggregation a call went to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HistogramKind {
    /// CPU usage, cores.
    Cpu,
    /// Memory peaks, bytes.
    Memory,
}

/// Whether a histogram call added or subtracted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HistogramOp {
    /// `AddSample`.
    Add,
    /// `SubtractSample`.
    Subtract,
}

/// One histogram call made by ingestion, with the weight before decay.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistogramCall {
    /// The histogram.
    pub histogram: HistogramKind,
    /// Add or subtract.
    pub op: HistogramOp,
    /// Value in the histogram's unit (cores or bytes).
    pub value: f64,
    /// Weight before decay.
    pub weight: f64,
    /// Time passed to the histogram.
    #[serde(with = "crate::time::serde_nanos")]
    pub at: Time,
}

/// Receives every histogram call ingestion makes. `()` ignores them (the production path,
/// compiled away); `Vec<HistogramCall>` records them (the upstream tests' mock histograms).
pub trait HistogramObserver {
    /// Called once per histogram add/subtract, in order.
    fn observe(&mut self, call: HistogramCall);
}

impl HistogramObserver for () {
    #[inline(always)]
    fn observe(&mut self, _call: HistogramCall) {}
}

impl HistogramObserver for Vec<HistogramCall> {
    fn observe(&mut self, call: HistogramCall) {
        self.push(call);
    }
}

/// Errors of aggregation-level operations.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AggregateError {
    /// A checkpoint version other than [`SUPPORTED_CHECKPOINT_VERSION`].
    #[error("unsupported checkpoint version {0:?}")]
    UnsupportedCheckpointVersion(String),
    /// A histogram of the checkpoint did not load.
    #[error("{histogram} histogram: {source}")]
    Histogram {
        /// `cpu_histogram` or `memory_histogram`.
        histogram: &'static str,
        /// Why.
        #[source]
        source: HistogramError,
    },
}

/// The aggregated usage of all instances of one container (per container name here).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AggregateContainerState {
    /// `AggregateCPUUsage`: CPU samples in cores, weight 0.1 each, decaying.
    pub cpu: DecayingHistogram,
    /// `AggregateMemoryPeaks`: one peak per container per interval in bytes, weight 1.0.
    pub memory: DecayingHistogram,
    /// `FirstSampleStart` (CPU samples only).
    #[serde(default, with = "crate::time::serde_nanos_option")]
    pub first_sample_start: Option<Time>,
    /// `LastSampleStart` (CPU samples only).
    #[serde(default, with = "crate::time::serde_nanos_option")]
    pub last_sample_start: Option<Time>,
    /// `TotalSamplesCount` (CPU samples only).
    pub total_samples_count: u64,
    /// `CreationTime`: when the aggregation was created (passed in; expiry of empty ones).
    #[serde(with = "crate::time::serde_nanos")]
    pub creation_time: Time,
}

impl AggregateContainerState {
    /// `NewAggregateContainerState`: empty decaying histograms with the default schemes and
    /// the settings' half-lives.
    pub fn new(settings: &VpaSettings, creation_time: Time) -> Self {
        Self::with_half_lives(
            duration_nanos(settings.cpu_histogram_decay_half_life),
            duration_nanos(settings.memory_histogram_decay_half_life),
            creation_time,
        )
    }

    /// As [`Self::new`] with explicit half-lives in nanoseconds (0: plain, non-decaying
    /// histograms, as some upstream estimator tests use).
    pub fn with_half_lives(
        cpu_half_life_ns: i64,
        memory_half_life_ns: i64,
        creation_time: Time,
    ) -> Self {
        Self {
            cpu: DecayingHistogram::new(HistogramOptions::cpu(), cpu_half_life_ns),
            memory: DecayingHistogram::new(HistogramOptions::memory(), memory_half_life_ns),
            first_sample_start: None,
            last_sample_start: None,
            total_samples_count: 0,
            creation_time,
        }
    }

    /// `addCPUSample`: usage in cores with weight 0.1, then the sample counters.
    pub fn add_cpu_sample(
        &mut self,
        at: Time,
        usage: ResourceAmount,
        obs: &mut impl HistogramObserver,
    ) {
        let cores = cores_from_cpu_amount(usage);
        obs.observe(HistogramCall {
            histogram: HistogramKind::Cpu,
            op: HistogramOp::Add,
            value: cores,
            weight: CPU_SAMPLE_WEIGHT,
            at,
        });
        // Weight 0.1 times a finite positive decay factor: cannot fail.
        let _ = self.cpu.add_sample(cores, CPU_SAMPLE_WEIGHT, at);
        if self.last_sample_start.is_none_or(|last| at > last) {
            self.last_sample_start = Some(at);
        }
        if self.first_sample_start.is_none_or(|first| at < first) {
            self.first_sample_start = Some(at);
        }
        self.total_samples_count = self.total_samples_count.saturating_add(1);
    }

    /// `AddSample` (a peak in bytes with weight 1.0 at `at`, an interval end) or
    /// `SubtractSample` (a peak added earlier at `at`) for memory.
    pub fn memory_peak(
        &mut self,
        op: HistogramOp,
        at: Time,
        usage: ResourceAmount,
        obs: &mut impl HistogramObserver,
    ) {
        let bytes = bytes_from_memory_amount(usage);
        obs.observe(HistogramCall {
            histogram: HistogramKind::Memory,
            op,
            value: bytes,
            weight: MEMORY_PEAK_WEIGHT,
            at,
        });
        let _ = match op {
            HistogramOp::Add => self.memory.add_sample(bytes, MEMORY_PEAK_WEIGHT, at),
            HistogramOp::Subtract => self.memory.subtract_sample(bytes, MEMORY_PEAK_WEIGHT, at),
        };
    }

    /// `MergeContainerState`: merge the histograms; earliest set first sample, latest last
    /// sample, counts summed. On error `self` may have merged the CPU histogram only.
    pub fn merge(&mut self, other: &AggregateContainerState) -> Result<(), HistogramError> {
        self.cpu.merge(&other.cpu)?;
        self.memory.merge(&other.memory)?;
        if self.first_sample_start.is_none()
            || other
                .first_sample_start
                .is_some_and(|o| self.first_sample_start.is_some_and(|s| o < s))
        {
            self.first_sample_start = other.first_sample_start;
        }
        if other
            .last_sample_start
            .is_some_and(|o| self.last_sample_start.is_none_or(|s| o > s))
        {
            self.last_sample_start = other.last_sample_start;
        }
        self.total_samples_count = self
            .total_samples_count
            .saturating_add(other.total_samples_count);
        Ok(())
    }

    /// `isExpired(now)`: with samples, `now − last_sample_start ≥ window`; without,
    /// `now − creation_time ≥ window` (window = interval × count).
    pub fn is_expired(&self, now: Time, window_length_ns: i64) -> bool {
        let since = if self.total_samples_count == 0 {
            now.nanos_since(self.creation_time)
        } else {
            go_sub(Some(now), self.last_sample_start)
        };
        since >= window_length_ns
    }

    /// `SaveToCheckpoint` (version "v3").
    pub fn save_checkpoint(&self) -> AggregateCheckpoint {
        AggregateCheckpoint {
            version: SUPPORTED_CHECKPOINT_VERSION.to_owned(),
            first_sample_start: self.first_sample_start,
            last_sample_start: self.last_sample_start,
            total_samples_count: self.total_samples_count,
            cpu_histogram: self.cpu.save_checkpoint(),
            memory_histogram: self.memory.save_checkpoint(),
        }
    }

    /// `LoadFromCheckpoint`: reject other versions; overwrite the counters and timestamps;
    /// load (add) the memory, then the CPU histogram.
    pub fn load_checkpoint(
        &mut self,
        checkpoint: &AggregateCheckpoint,
    ) -> Result<(), AggregateError> {
        if checkpoint.version != SUPPORTED_CHECKPOINT_VERSION {
            return Err(AggregateError::UnsupportedCheckpointVersion(
                checkpoint.version.clone(),
            ));
        }
        self.total_samples_count = checkpoint.total_samples_count;
        self.first_sample_start = checkpoint.first_sample_start;
        self.last_sample_start = checkpoint.last_sample_start;
        self.memory
            .load_checkpoint(Some(&checkpoint.memory_histogram))
            .map_err(|source| AggregateError::Histogram {
                histogram: "memory_histogram",
                source,
            })?;
        self.cpu
            .load_checkpoint(Some(&checkpoint.cpu_histogram))
            .map_err(|source| AggregateError::Histogram {
                histogram: "cpu_histogram",
                source,
            })?;
        Ok(())
    }
}
