//! The recommender's parameters (`recommender/config/config.go`,
//! `recommender/model/aggregations_config.go`; specification section 12).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::amount::Resources;

/// Longest duration accepted for any interval or half-life (about 100 years): keeps every
/// nanosecond computation far inside `i64`.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 366 * 86_400);

/// Every flag of the VPA recommender that changes its numbers. `Default` gives the
/// Kubernetes defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct VpaSettings {
    /// `--target-cpu-percentile` (0.9): CPU percentile of the target.
    pub target_cpu_percentile: f64,
    /// `--target-memory-percentile` (0.9): memory-peak percentile of the target.
    pub target_memory_percentile: f64,
    /// `--recommendation-lower-bound-cpu-percentile` (0.5).
    pub lower_bound_cpu_percentile: f64,
    /// `--recommendation-lower-bound-memory-percentile` (0.5).
    pub lower_bound_memory_percentile: f64,
    /// `--recommendation-upper-bound-cpu-percentile` (0.95).
    pub upper_bound_cpu_percentile: f64,
    /// `--recommendation-upper-bound-memory-percentile` (0.95).
    pub upper_bound_memory_percentile: f64,
    /// `--recommendation-margin-fraction` (0.15): safety margin added to every bound.
    pub safety_margin_fraction: f64,
    /// `--pod-recommendation-min-cpu-millicores` (25): pod minimum, split over containers.
    pub pod_min_cpu_millicores: f64,
    /// `--pod-recommendation-min-memory-mb` (250, in MiB): pod minimum, split over containers.
    pub pod_min_memory_mb: f64,
    /// `--confidence-interval-cpu` (24h): time unit of the CPU confidence.
    pub confidence_interval_cpu: Duration,
    /// `--confidence-interval-memory` (24h): time unit of the memory confidence.
    pub confidence_interval_memory: Duration,
    /// `--cpu-histogram-decay-half-life` (24h).
    pub cpu_histogram_decay_half_life: Duration,
    /// `--memory-histogram-decay-half-life` (24h).
    pub memory_histogram_decay_half_life: Duration,
    /// `--memory-aggregation-interval` (24h): one memory peak per container per interval.
    pub memory_aggregation_interval: Duration,
    /// `--memory-aggregation-interval-count` (8): interval × count is the expiry window.
    pub memory_aggregation_interval_count: i64,
    /// `--oom-bump-up-ratio` (1.2): an OOM records `used × ratio` at least.
    pub oom_bump_up_ratio: f64,
    /// `--oom-min-bump-up-bytes` (100 MiB): an OOM records `used + this` at least.
    pub oom_min_bump_up_bytes: f64,
    /// `--round-cpu-millicores` (1): round CPU output up to a multiple of this.
    pub round_cpu_millicores: i64,
    /// `--round-memory-bytes` (1): round memory output up to a multiple of this.
    pub round_memory_bytes: i64,
    /// `--container-recommendation-max-allowed-cpu` / `-memory` (unset): global maximum,
    /// used for resources a container policy's `maxAllowed` lacks.
    pub container_recommendation_max_allowed: Resources,
    /// `--cpu-integer-post-processor-enabled` (false): allow whole-core CPU rounding for
    /// opted-in containers.
    pub cpu_integer_post_processor_enabled: bool,
    /// Feature gate `PerVPAConfig` (false): honour the per-container overrides of the memory
    /// aggregation interval/count and OOM bump-up in the container policy.
    pub per_vpa_config: bool,
}

impl Default for VpaSettings {
    fn default() -> Self {
        let day = Duration::from_secs(86_400);
        Self {
            target_cpu_percentile: 0.9,
            target_memory_percentile: 0.9,
            lower_bound_cpu_percentile: 0.5,
            lower_bound_memory_percentile: 0.5,
            upper_bound_cpu_percentile: 0.95,
            upper_bound_memory_percentile: 0.95,
            safety_margin_fraction: 0.15,
            pod_min_cpu_millicores: 25.0,
            pod_min_memory_mb: 250.0,
            confidence_interval_cpu: day,
            confidence_interval_memory: day,
            cpu_histogram_decay_half_life: day,
            memory_histogram_decay_half_life: day,
            memory_aggregation_interval: day,
            memory_aggregation_interval_count: 8,
            oom_bump_up_ratio: 1.2,
            oom_min_bump_up_bytes: 104_857_600.0,
            round_cpu_millicores: 1,
            round_memory_bytes: 1,
            container_recommendation_max_allowed: Resources::default(),
            cpu_integer_post_processor_enabled: false,
            per_vpa_config: false,
        }
    }
}

/// A setting out of range.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("invalid VPA setting {field}: {reason}")]
pub struct SettingsError {
    /// The field (as named in [`VpaSettings`]).
    pub field: &'static str,
    /// What is wrong.
    pub reason: String,
}

/// Whose values a rule checks. The rules are written once, here; a request is held to a
/// tighter range where a value would be a client's mistake that the server's flags (and
/// upstream's recommender, whose flags are not validated) let through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A request's overrides (`api::convert`).
    Request,
    /// The server's flags and the conformance fixtures ([`VpaSettings::validate`]).
    Flags,
}

/// A percentile: finite and not negative; from a request also at most 1.
pub fn percentile_violation(x: f64, origin: Origin) -> Option<String> {
    match origin {
        Origin::Request => (!(x.is_finite() && (0.0..=1.0).contains(&x)))
            .then(|| "must be a number between 0 and 1".to_owned()),
        Origin::Flags => non_negative_violation(x, origin),
    }
}

/// A ratio, fraction or amount: finite and not negative.
pub fn non_negative_violation(x: f64, origin: Origin) -> Option<String> {
    if x.is_finite() && x >= 0.0 {
        return None;
    }
    Some(match origin {
        Origin::Request => "must be a finite number >= 0".to_owned(),
        Origin::Flags => format!("must be a finite number >= 0, got {x}"),
    })
}

/// An interval or half-life: above zero and at most [`MAX_DURATION`].
pub fn duration_violation(d: Duration, origin: Origin) -> Option<String> {
    if !d.is_zero() && d <= MAX_DURATION {
        return None;
    }
    Some(match origin {
        Origin::Request => "must be greater than 0 and at most 100 years".to_owned(),
        Origin::Flags => format!("must be > 0 and <= 100 years, got {d:?}"),
    })
}

/// `memory_aggregation_interval_count`: at most 100 000; from a request at least 1 (0 would
/// expire every aggregation at once), from the flags at least 0.
pub fn interval_count_violation(count: i64, origin: Origin) -> Option<String> {
    match origin {
        Origin::Request => {
            (!(1..=100_000).contains(&count)).then(|| "must be between 1 and 100000".to_owned())
        }
        Origin::Flags => (!(0..=100_000).contains(&count))
            .then(|| format!("must be in [0, 100000], got {count}")),
    }
}

fn check(field: &'static str, violation: Option<String>) -> Result<(), SettingsError> {
    match violation {
        None => Ok(()),
        Some(reason) => Err(SettingsError { field, reason }),
    }
}

impl VpaSettings {
    /// Check every field; the first bad one is named. Rounding scales ≤ 0 are accepted and,
    /// as upstream, leave the output unrounded.
    pub fn validate(&self) -> Result<(), SettingsError> {
        for (field, v) in [
            ("target_cpu_percentile", self.target_cpu_percentile),
            ("target_memory_percentile", self.target_memory_percentile),
            (
                "lower_bound_cpu_percentile",
                self.lower_bound_cpu_percentile,
            ),
            (
                "lower_bound_memory_percentile",
                self.lower_bound_memory_percentile,
            ),
            (
                "upper_bound_cpu_percentile",
                self.upper_bound_cpu_percentile,
            ),
            (
                "upper_bound_memory_percentile",
                self.upper_bound_memory_percentile,
            ),
        ] {
            check(field, percentile_violation(v, Origin::Flags))?;
        }
        for (field, v) in [
            ("safety_margin_fraction", self.safety_margin_fraction),
            ("pod_min_cpu_millicores", self.pod_min_cpu_millicores),
            ("pod_min_memory_mb", self.pod_min_memory_mb),
            ("oom_bump_up_ratio", self.oom_bump_up_ratio),
            ("oom_min_bump_up_bytes", self.oom_min_bump_up_bytes),
        ] {
            check(field, non_negative_violation(v, Origin::Flags))?;
        }
        for (field, d) in [
            ("confidence_interval_cpu", self.confidence_interval_cpu),
            (
                "confidence_interval_memory",
                self.confidence_interval_memory,
            ),
            (
                "cpu_histogram_decay_half_life",
                self.cpu_histogram_decay_half_life,
            ),
            (
                "memory_histogram_decay_half_life",
                self.memory_histogram_decay_half_life,
            ),
            (
                "memory_aggregation_interval",
                self.memory_aggregation_interval,
            ),
        ] {
            check(field, duration_violation(d, Origin::Flags))?;
        }
        check(
            "memory_aggregation_interval_count",
            interval_count_violation(self.memory_aggregation_interval_count, Origin::Flags),
        )?;
        for (field, v) in [
            (
                "container_recommendation_max_allowed.cpu",
                self.container_recommendation_max_allowed.cpu,
            ),
            (
                "container_recommendation_max_allowed.memory",
                self.container_recommendation_max_allowed.memory,
            ),
        ] {
            if let Some(v) = v
                && v < 0
            {
                return Err(SettingsError {
                    field,
                    reason: format!("must be >= 0, got {v}"),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_held_to_the_tighter_range_of_the_same_rule() {
        assert!(percentile_violation(1.5, Origin::Request).is_some());
        assert_eq!(percentile_violation(1.5, Origin::Flags), None);
        assert!(interval_count_violation(0, Origin::Request).is_some());
        assert_eq!(interval_count_violation(0, Origin::Flags), None);
        for origin in [Origin::Request, Origin::Flags] {
            assert!(percentile_violation(f64::NAN, origin).is_some());
            assert!(duration_violation(Duration::ZERO, origin).is_some());
            assert!(interval_count_violation(100_001, origin).is_some());
        }
        let settings = VpaSettings {
            lower_bound_memory_percentile: -1.0,
            ..VpaSettings::default()
        };
        assert_eq!(
            settings.validate().unwrap_err().to_string(),
            "invalid VPA setting lower_bound_memory_percentile: must be a finite number >= 0, got -1"
        );
        assert_eq!(VpaSettings::default().validate(), Ok(()));
    }
}
