//! The extensions' data: what a spec asks for (`spec.extensions`) and what is kept between
//! evaluations (`History::extensions`). Apart from the rules in the sibling modules, so that
//! the spec and the history can hold them without depending on the rules.

use std::{collections::BTreeMap, time::Duration};

use serde::{Deserialize, Serialize};

use crate::time::Time;

// === spec ===

/// `spec.extensions`. Every part is optional. Scale to zero is not here: it is Kubernetes'
/// `HPAScaleToZero` gate, [`Settings::scale_to_zero`](crate::hpa::settings::Settings::scale_to_zero).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Extensions {
    /// KEDA activation: the 0↔1 (idle↔min) step is decided by activation thresholds.
    #[serde(default)]
    pub activation: Option<Activation>,
    /// KEDA-style fallback for the whole target.
    #[serde(default)]
    pub fallback: Option<TargetFallback>,
    /// KEDA's pause annotations.
    #[serde(default)]
    pub pause: Option<Pause>,
    /// List the pods to remove first on a scale-down.
    #[serde(default)]
    pub removal_candidates: bool,
    /// A pod sample older than this counts as missing.
    #[serde(default)]
    pub max_sample_age: Option<Duration>,
    /// Per-metric extensions by index in `spec.metrics`.
    #[serde(default)]
    pub metrics: BTreeMap<usize, MetricExtension>,
}

/// Per-metric extensions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricExtension {
    /// KEDA `activationThreshold` (milli-units): the metric is active when its value is
    /// strictly greater. Absent: 0.
    #[serde(default)]
    pub activation_threshold: Option<i64>,
    /// KEP-5679 fallback for this metric.
    #[serde(default)]
    pub fallback: Option<MetricFallback>,
}

/// KEDA `cooldownPeriod`, `initialCooldownPeriod`, `idleReplicaCount`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Activation {
    /// Default 300 s.
    pub cooldown_period: Duration,
    /// Default 0: counted from the target's first evaluation while it was never active.
    pub initial_cooldown_period: Duration,
    /// Below `min_replicas`; when set, an inactive target goes to this count instead of min.
    pub idle_replicas: Option<i32>,
    /// KEDA `autoscaling.keda.sh/force-activation`: active whatever the triggers say.
    #[serde(default)]
    pub force_activation: bool,
}

impl Default for Activation {
    fn default() -> Self {
        Activation {
            cooldown_period: Duration::from_secs(DEFAULT_COOLDOWN_SECS),
            initial_cooldown_period: Duration::ZERO,
            idle_replicas: None,
            force_activation: false,
        }
    }
}

/// KEDA's default `cooldownPeriod`.
pub const DEFAULT_COOLDOWN_SECS: u64 = 300;
/// KEP-5679's default and minimum `failureDurationSeconds`.
pub const MIN_FAILURE_DURATION_SECS: u64 = 180;

/// KEP-5679 `fallback` of one metric.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricFallback {
    /// At least 180 s (the default).
    pub failure_duration: Duration,
    /// Greater than 0.
    pub replicas: i32,
}

/// KEDA `spec.fallback`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetFallback {
    /// Fires when a metric's consecutive failures are strictly more than this.
    pub failure_threshold: u32,
    /// KEDA `fallback.replicas`: the count the target runs at while fallback is in force.
    pub replicas: i32,
    /// How `replicas` combines with the current count.
    pub behavior: FallbackBehavior,
}

/// KEDA `fallback.behavior`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum FallbackBehavior {
    /// `fallback.replicas` as is (KEDA's default).
    #[default]
    Static,
    /// Keep the current count: fallback freezes the target.
    CurrentReplicas,
    /// The higher of the current count and `fallback.replicas`: fallback never scales in.
    CurrentReplicasIfHigher,
    /// The lower of the current count and `fallback.replicas`: fallback never scales out.
    CurrentReplicasIfLower,
}

/// KEDA `autoscaling.keda.sh/paused-replicas`, `paused-scale-in`, `paused-scale-out`,
/// `paused`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Pause {
    /// `paused-replicas`: hold the target at this count, ahead of every other rule.
    pub paused_replicas: Option<i32>,
    /// `paused-scale-in`: decreases are suppressed.
    #[serde(default)]
    pub scale_in: bool,
    /// `paused-scale-out`: increases are suppressed.
    #[serde(default)]
    pub scale_out: bool,
    /// `paused: "true"`: the count stays as it is (`handlePaused`); `paused_replicas` wins.
    #[serde(default)]
    pub paused: bool,
}

// === state ===

/// What the extensions keep per target between evaluations (stored in
/// `History::extensions`). Bounded: one health entry per spec metric.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtensionState {
    /// Health by metric key ([`metric_key`](super::metric_key)); entries of metrics no longer in the spec are
    /// dropped.
    #[serde(default)]
    pub metric_health: BTreeMap<String, MetricHealth>,
    /// KEDA `lastActiveTime`.
    #[serde(default, with = "crate::time::serde_millis_option")]
    pub last_active_time: Option<Time>,
    /// The first evaluation with extensions (KEDA's creation time for
    /// `initialCooldownPeriod`).
    #[serde(default, with = "crate::time::serde_millis_option")]
    pub first_seen: Option<Time>,
    /// The target is at zero because we decided so (Kubernetes' `ScaledToZero=True`).
    #[serde(default)]
    pub scaled_to_zero: bool,
    /// The last HPA rescale set `ScaledToZero=False` (`NotScaledToZero`). The condition is
    /// part of the HPA's status, so it is reported on every later decision until the next
    /// rescale sets it again.
    #[serde(default)]
    pub not_scaled_to_zero: bool,
}

/// KEDA `status.health[metric]` and KEP-5679 `firstFailureTime`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricHealth {
    /// Consecutive evaluations in which the metric failed; reset by a success.
    pub consecutive_failures: u32,
    /// When the current run of failures began; cleared by a success.
    #[serde(default, with = "crate::time::serde_millis_option")]
    pub first_failure_time: Option<Time>,
}

// === report ===
