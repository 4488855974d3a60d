//! Container resource policies and what they set on an aggregation
//! (`utils/vpa/api.go` `GetContainerResourcePolicy`,
//! `AggregateContainerState.UpdateFromPolicy`; specification section 7).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::amount::{Resource, Resources};
use super::settings::{MAX_DURATION, SettingsError, VpaSettings};
use crate::time::go::duration_nanos;

/// The container name of the default policy.
pub const DEFAULT_CONTAINER_NAME: &str = "*";

/// `ContainerScalingMode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContainerScalingMode {
    /// Recommend (the default).
    #[default]
    Auto,
    /// No recommendation for this container.
    Off,
}

/// `ContainerResourcePolicy`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContainerResourcePolicy {
    /// The container it applies to, or [`DEFAULT_CONTAINER_NAME`].
    pub container_name: String,
    /// `mode`; `None` means `Auto`.
    pub mode: Option<ContainerScalingMode>,
    /// `minAllowed`: lower clamp of the capped recommendation.
    pub min_allowed: Resources,
    /// `maxAllowed`: upper clamp (missing resources fall back to the global maximum).
    pub max_allowed: Resources,
    /// `controlledResources`; `None` means `[cpu, memory]`, an empty list means none.
    pub controlled_resources: Option<Vec<Resource>>,
    /// `memoryAggregationIntervalSeconds` (only with `PerVPAConfig`).
    pub memory_aggregation_interval: Option<Duration>,
    /// `memoryAggregationIntervalCount` (only with `PerVPAConfig`).
    pub memory_aggregation_interval_count: Option<i64>,
    /// `oomBumpUpRatio` (only with `PerVPAConfig`).
    pub oom_bump_up_ratio: Option<f64>,
    /// `oomMinBumpUp` in bytes (only with `PerVPAConfig`).
    pub oom_min_bump_up_bytes: Option<f64>,
}

/// `PodResourcePolicy`: the per-container policies of one VPA.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodResourcePolicy {
    /// `containerPolicies`.
    pub container_policies: Vec<ContainerResourcePolicy>,
}

impl PodResourcePolicy {
    /// `GetContainerResourcePolicy`: the policy named after the container, else the `*` one,
    /// else none.
    pub(crate) fn for_container(&self, container_name: &str) -> Option<&ContainerResourcePolicy> {
        let mut default = None;
        for p in &self.container_policies {
            if p.container_name == container_name {
                return Some(p);
            }
            if p.container_name == DEFAULT_CONTAINER_NAME {
                default = Some(p);
            }
        }
        default
    }

    /// Check the overrides a policy can carry; the first bad field is named.
    pub fn validate(&self) -> Result<(), SettingsError> {
        for p in &self.container_policies {
            if let Some(d) = p.memory_aggregation_interval
                && (d.is_zero() || d > MAX_DURATION)
            {
                return Err(SettingsError {
                    field: "container_policies.memory_aggregation_interval",
                    reason: format!("must be > 0 and <= 100 years, got {d:?}"),
                });
            }
            if let Some(c) = p.memory_aggregation_interval_count
                && !(0..=100_000).contains(&c)
            {
                return Err(SettingsError {
                    field: "container_policies.memory_aggregation_interval_count",
                    reason: format!("must be in [0, 100000], got {c}"),
                });
            }
            for (field, v) in [
                ("container_policies.oom_bump_up_ratio", p.oom_bump_up_ratio),
                (
                    "container_policies.oom_min_bump_up_bytes",
                    p.oom_min_bump_up_bytes,
                ),
            ] {
                if let Some(v) = v
                    && !(v.is_finite() && v >= 0.0)
                {
                    return Err(SettingsError {
                        field,
                        reason: format!("must be a finite number >= 0, got {v}"),
                    });
                }
            }
        }
        Ok(())
    }
}

/// What the settings and a container's policy set on its aggregation (upstream fields
/// `ScalingMode`, `ControlledResources` and the per-VPA overrides set by `UpdateFromPolicy`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AggregationPolicy {
    /// Scaling mode (`Auto` unless the policy says `Off`).
    pub scaling_mode: ContainerScalingMode,
    /// Whether CPU is controlled (recommended).
    pub controls_cpu: bool,
    /// Whether memory is controlled (recommended).
    pub controls_memory: bool,
    /// Memory aggregation interval, nanoseconds (> 0).
    pub memory_aggregation_interval_ns: i64,
    /// Memory aggregation interval count.
    pub memory_aggregation_interval_count: i64,
    /// OOM bump-up ratio.
    pub oom_bump_up_ratio: f64,
    /// OOM minimum bump-up, bytes.
    pub oom_min_bump_up_bytes: f64,
}

impl AggregationPolicy {
    /// `UpdateFromPolicy`: scaling mode and controlled resources always come from the policy
    /// (defaults without one); interval, count and OOM bump-up only with `PerVPAConfig`.
    pub fn resolve(settings: &VpaSettings, policy: Option<&ContainerResourcePolicy>) -> Self {
        let per_vpa = if settings.per_vpa_config {
            policy
        } else {
            None
        };
        let interval = per_vpa
            .and_then(|p| p.memory_aggregation_interval)
            .unwrap_or(settings.memory_aggregation_interval);
        let (controls_cpu, controls_memory) =
            match policy.and_then(|p| p.controlled_resources.as_ref()) {
                None => (true, true),
                Some(list) => (
                    list.contains(&Resource::Cpu),
                    list.contains(&Resource::Memory),
                ),
            };
        Self {
            scaling_mode: policy.and_then(|p| p.mode).unwrap_or_default(),
            controls_cpu,
            controls_memory,
            memory_aggregation_interval_ns: duration_nanos(interval).max(1),
            memory_aggregation_interval_count: per_vpa
                .and_then(|p| p.memory_aggregation_interval_count)
                .unwrap_or(settings.memory_aggregation_interval_count),
            oom_bump_up_ratio: per_vpa
                .and_then(|p| p.oom_bump_up_ratio)
                .unwrap_or(settings.oom_bump_up_ratio),
            oom_min_bump_up_bytes: per_vpa
                .and_then(|p| p.oom_min_bump_up_bytes)
                .unwrap_or(settings.oom_min_bump_up_bytes),
        }
    }

    /// `GetMemoryAggregationWindowLength`: interval × count, nanoseconds (saturating).
    pub const fn window_length_ns(&self) -> i64 {
        self.memory_aggregation_interval_ns
            .saturating_mul(self.memory_aggregation_interval_count)
    }

    /// Whether `resource` is controlled.
    pub const fn controls(&self, resource: Resource) -> bool {
        match resource {
            Resource::Cpu => self.controls_cpu,
            Resource::Memory => self.controls_memory,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_need_per_vpa_config_but_mode_and_resources_do_not() {
        let policy = ContainerResourcePolicy {
            container_name: "app".into(),
            mode: Some(ContainerScalingMode::Off),
            controlled_resources: Some(vec![]),
            oom_bump_up_ratio: Some(2.0),
            memory_aggregation_interval: Some(Duration::from_secs(3600)),
            ..Default::default()
        };
        let off = AggregationPolicy::resolve(&VpaSettings::default(), Some(&policy));
        assert_eq!(off.scaling_mode, ContainerScalingMode::Off);
        assert!(
            !off.controls_cpu && !off.controls_memory,
            "an empty list controls nothing"
        );
        assert_eq!(off.oom_bump_up_ratio, 1.2);
        assert_eq!(off.memory_aggregation_interval_ns, 86_400_000_000_000);
        let settings = VpaSettings {
            per_vpa_config: true,
            ..Default::default()
        };
        let on = AggregationPolicy::resolve(&settings, Some(&policy));
        assert_eq!(on.oom_bump_up_ratio, 2.0);
        assert_eq!(on.memory_aggregation_interval_ns, 3_600_000_000_000);
        assert_eq!(on.window_length_ns(), 8 * 3_600_000_000_000);
    }

    #[test]
    fn exact_name_wins_over_default_policy() {
        let p = PodResourcePolicy {
            container_policies: vec![
                ContainerResourcePolicy {
                    container_name: "*".into(),
                    ..Default::default()
                },
                ContainerResourcePolicy {
                    container_name: "app".into(),
                    ..Default::default()
                },
            ],
        };
        assert_eq!(
            p.for_container("app").map(|c| c.container_name.as_str()),
            Some("app")
        );
        assert_eq!(
            p.for_container("other").map(|c| c.container_name.as_str()),
            Some("*")
        );
        assert!(PodResourcePolicy::default().for_container("app").is_none());
    }
}
