//! Proto ↔ engine for the migration extensions (issue 12; `engine::hpa::extensions`). A spec
//! with none of the extension fields set converts to `extensions: None`, so its decision is
//! exactly the HPA's.

use std::time::Duration;

use super::{Violations, duration, to_timestamp};
use crate::{
    engine::hpa::extensions::{
        Activation, ExtensionReport, ExtensionState, Extensions, FallbackBehavior,
        MIN_FAILURE_DURATION_SECS, MetricExtension, MetricFallback, Pause, TargetFallback,
        removal::RemovalCandidate,
    },
    pb::v1 as pb,
};

/// `spec.{activation, fallback, pause, removal_candidates, max_sample_age}` and
/// `spec.metrics[i].{activation_threshold_milli, fallback}`; `None` when none is set.
pub(super) fn extensions(v: &mut Violations, spec: &pb::HorizontalSpec) -> Option<Extensions> {
    let mut metrics = std::collections::BTreeMap::new();
    for (i, m) in spec.metrics.iter().enumerate() {
        if m.activation_threshold_milli.is_none() && m.fallback.is_none() {
            continue;
        }
        let fallback = m.fallback.as_ref().map(|f| {
            let path = format!("spec.metrics[{i}].fallback");
            let failure_duration = match &f.failure_duration {
                None => Duration::from_secs(MIN_FAILURE_DURATION_SECS),
                Some(d) => duration(v, format!("{path}.failure_duration"), d)
                    .unwrap_or(Duration::from_secs(MIN_FAILURE_DURATION_SECS)),
            };
            if failure_duration < Duration::from_secs(MIN_FAILURE_DURATION_SECS) {
                v.add(
                    format!("{path}.failure_duration"),
                    format!("must be at least {MIN_FAILURE_DURATION_SECS} s"),
                );
            }
            if f.replicas <= 0 {
                v.add(format!("{path}.replicas"), "must be greater than 0");
            }
            MetricFallback {
                failure_duration,
                replicas: f.replicas,
            }
        });
        metrics.insert(
            i,
            MetricExtension {
                activation_threshold: m.activation_threshold_milli,
                fallback,
            },
        );
    }
    let activation = spec.activation.as_ref().map(|a| {
        let mut d = |field: &str, value: &Option<prost_types::Duration>, default: u64| match value {
            None => Duration::from_secs(default),
            Some(x) => duration(v, format!("spec.activation.{field}"), x)
                .unwrap_or(Duration::from_secs(default)),
        };
        let cooldown_period = d(
            "cooldown_period",
            &a.cooldown_period,
            crate::engine::hpa::extensions::DEFAULT_COOLDOWN_SECS,
        );
        let initial_cooldown_period = d("initial_cooldown_period", &a.initial_cooldown_period, 0);
        Activation {
            cooldown_period,
            initial_cooldown_period,
            idle_replicas: a.idle_replicas,
            force_activation: a.force_activation,
        }
    });
    let fallback = spec.fallback.as_ref().map(|f| {
        if f.failure_threshold < 0 {
            v.add("spec.fallback.failure_threshold", "must not be negative");
        }
        if f.replicas < 0 {
            v.add("spec.fallback.replicas", "must not be negative");
        }
        use pb::FallbackBehavior as B;
        let behavior = match B::try_from(f.behavior) {
            Ok(B::Unspecified | B::Static) => FallbackBehavior::Static,
            Ok(B::CurrentReplicas) => FallbackBehavior::CurrentReplicas,
            Ok(B::CurrentReplicasIfHigher) => FallbackBehavior::CurrentReplicasIfHigher,
            Ok(B::CurrentReplicasIfLower) => FallbackBehavior::CurrentReplicasIfLower,
            Err(_) => {
                v.add(
                    "spec.fallback.behavior",
                    format!("unknown value {}", f.behavior),
                );
                FallbackBehavior::Static
            }
        };
        TargetFallback {
            failure_threshold: u32::try_from(f.failure_threshold).unwrap_or(0),
            replicas: f.replicas,
            behavior,
        }
    });
    let pause = spec.pause.as_ref().map(|p| {
        if p.paused_replicas.is_some_and(|r| r < 0) {
            v.add("spec.pause.paused_replicas", "must not be negative");
        }
        Pause {
            paused_replicas: p.paused_replicas,
            scale_in: p.scale_in,
            scale_out: p.scale_out,
            paused: p.paused,
        }
    });
    let max_sample_age = spec.max_sample_age.as_ref().and_then(|d| {
        let age = duration(v, "spec.max_sample_age", d)?;
        if age.is_zero() {
            v.add("spec.max_sample_age", "must be greater than 0");
        }
        Some(age)
    });
    let ext = Extensions {
        activation,
        fallback,
        pause,
        removal_candidates: spec.removal_candidates,
        max_sample_age,
        metrics,
    };
    (ext != Extensions::default()).then_some(ext)
}

/// The pods a scale-down would remove first, as the API reports them.
pub fn removal_candidates(c: &[RemovalCandidate]) -> Vec<pb::RemovalCandidate> {
    c.iter()
        .map(|c| pb::RemovalCandidate {
            pod: c.pod.clone(),
            reason: c.reason.as_str().to_owned(),
            usage_ratio: c.usage_ratio,
        })
        .collect()
}

/// The migration extensions' stored state, as `GetHistory` shows it.
pub fn state(s: &ExtensionState) -> pb::ExtensionState {
    pb::ExtensionState {
        metric_health: s
            .metric_health
            .iter()
            .map(|(k, h)| pb::MetricHealth {
                metric: k.clone(),
                consecutive_failures: h.consecutive_failures,
                first_failure_time: h.first_failure_time.map(to_timestamp),
            })
            .collect(),
        last_active_time: s.last_active_time.map(to_timestamp),
        first_seen: s.first_seen.map(to_timestamp),
        scaled_to_zero: s.scaled_to_zero,
        not_scaled_to_zero: s.not_scaled_to_zero,
    }
}

/// What the migration extensions did to a decision.
pub fn report(r: &ExtensionReport) -> pb::ExtensionReport {
    pb::ExtensionReport {
        rules: r
            .rules
            .iter()
            .map(|f| pb::FiredRule {
                rule: f.rule.clone(),
                detail: f.detail.clone(),
            })
            .collect(),
        active: r.active,
        fallback_metrics: r
            .fallback_metrics
            .iter()
            .map(|i| u32::try_from(*i).unwrap_or(u32::MAX))
            .collect(),
        stale_samples: r.stale_samples,
        removal_candidates: removal_candidates(&r.removal_candidates),
        state: Some(state(&r.state)),
    }
}
