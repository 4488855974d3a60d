//! Checkpoints: the VPA's persisted state format (`VerticalPodAutoscalerCheckpoint` status,
//! version "v3"; `SaveToCheckpoint`/`LoadFromCheckpoint` in `recommender/model/` and
//! `recommender/util/`; specification section 11).
//!
//! These are the upstream checkpoint semantics, lossy by design (bucket weights are rescaled
//! to integers ≤ 10000 and small buckets dropped). They let a caller import or export VPA
//! checkpoints; the service's own persistence serializes the full model state instead.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::time::Time;

/// `MaxCheckpointWeight`: the largest stored bucket weight.
pub const MAX_CHECKPOINT_WEIGHT: u32 = 10_000;

/// `SupportedCheckpointVersion`.
pub const SUPPORTED_CHECKPOINT_VERSION: &str = "v3";

/// Upstream `HistogramCheckpoint`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HistogramCheckpoint {
    /// `referenceTimestamp` of a decaying histogram; `None` is Go's zero time (unset).
    #[serde(default, with = "crate::time::serde_nanos_option")]
    pub reference: Option<Time>,
    /// `bucketWeights`: bucket index → integer weight (upstream `map[int]uint32`; a negative
    /// index is representable so that loading can reject it as upstream does).
    #[serde(default)]
    pub bucket_weights: BTreeMap<i64, u32>,
    /// `totalWeight`: the exact total weight, including dropped and sub-epsilon weight.
    #[serde(default)]
    pub total_weight: f64,
}

/// Upstream `VerticalPodAutoscalerCheckpointStatus` (without `lastUpdateTime`, which is the
/// writer's wall clock and never read back).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AggregateCheckpoint {
    /// `version`; only [`SUPPORTED_CHECKPOINT_VERSION`] loads.
    pub version: String,
    /// `firstSampleStart` (`None`: unset).
    #[serde(default, with = "crate::time::serde_nanos_option")]
    pub first_sample_start: Option<Time>,
    /// `lastSampleStart` (`None`: unset).
    #[serde(default, with = "crate::time::serde_nanos_option")]
    pub last_sample_start: Option<Time>,
    /// `totalSamplesCount` (CPU samples).
    #[serde(default)]
    pub total_samples_count: u64,
    /// `cpuHistogram`.
    #[serde(default)]
    pub cpu_histogram: HistogramCheckpoint,
    /// `memoryHistogram`.
    #[serde(default)]
    pub memory_histogram: HistogramCheckpoint,
}
