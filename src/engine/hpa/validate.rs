//! Rejection of input that makes no sense, before any arithmetic runs.
//!
//! The rules are those of Kubernetes' API validation (`pkg/apis/autoscaling/validation`) where
//! they protect the arithmetic (bounds, positive targets and policies), plus what a snapshot
//! must satisfy (non-negative counts and requests, unique pod names). Fields are named with
//! the API's snake_case paths so the service can forward them as field violations.
//!
//! What Kubernetes' controller itself reports as a condition stays valid here: a metric of an
//! unknown source type (InvalidMetricSourceType) and a target lacking the field its
//! calculation needs (FailedGet*Metric).

use std::collections::HashSet;

use crate::engine::{
    error::InvalidInput,
    history::History,
    observation::Observation,
    settings::Settings,
    spec::{HorizontalSpec, MetricSpec, MetricTarget, ScalingRules},
};

const MUST_BE_POSITIVE: &str = "must be greater than 0";
const MUST_NOT_BE_NEGATIVE: &str = "must not be negative";
const MUST_NOT_BE_EMPTY: &str = "must not be empty";

fn err(field: impl Into<String>, description: &str) -> InvalidInput {
    InvalidInput::new(field, description)
}

/// Checks the controller settings.
pub fn validate_settings(settings: &Settings) -> Result<(), InvalidInput> {
    if !settings.tolerance.is_finite() || settings.tolerance < 0.0 {
        return Err(err("settings.tolerance", "must be a finite number >= 0"));
    }
    // Below 1 the legacy "scale-up limit" would sit below the current count and scale down
    // (or to zero) a target whose metrics ask for more.
    if !settings.scale_up_limit_factor.is_finite() || settings.scale_up_limit_factor < 1.0 {
        return Err(err(
            "settings.scale_up_limit_factor",
            "must be a finite number >= 1",
        ));
    }
    if !settings.scale_up_limit_minimum.is_finite() || settings.scale_up_limit_minimum < 1.0 {
        return Err(err(
            "settings.scale_up_limit_minimum",
            "must be a finite number >= 1",
        ));
    }
    Ok(())
}

/// Checks the spec (`ValidateHorizontalPodAutoscalerSpec` where it matters to the decision).
pub fn validate_spec(spec: &HorizontalSpec) -> Result<(), InvalidInput> {
    let min = spec.min_replicas.unwrap_or(1);
    if min < 0 {
        return Err(err("spec.min_replicas", MUST_NOT_BE_NEGATIVE));
    }
    if spec.max_replicas < 1 {
        return Err(err(
            "spec.max_replicas",
            "must be greater than or equal to 1",
        ));
    }
    if spec.max_replicas < min {
        return Err(err(
            "spec.max_replicas",
            "must be greater than or equal to min_replicas",
        ));
    }
    for (i, metric) in spec.metrics.iter().enumerate() {
        validate_metric(i, metric)?;
    }
    if let Some(behavior) = &spec.behavior {
        if let Some(rules) = &behavior.scale_up {
            validate_rules("spec.behavior.scale_up", rules)?;
        }
        if let Some(rules) = &behavior.scale_down {
            validate_rules("spec.behavior.scale_down", rules)?;
        }
    }
    Ok(())
}

fn validate_metric(i: usize, metric: &MetricSpec) -> Result<(), InvalidInput> {
    let path = format!("spec.metrics[{i}]");
    let (name, target) = match metric {
        MetricSpec::Resource { name, target }
        | MetricSpec::Pods { name, target }
        | MetricSpec::Object { name, target }
        | MetricSpec::External { name, target } => (name, target),
        MetricSpec::ContainerResource {
            name,
            container,
            target,
        } => {
            if container.is_empty() {
                return Err(err(format!("{path}.container"), MUST_NOT_BE_EMPTY));
            }
            (name, target)
        }
        // Upstream's controller reports an unknown type as ScalingActive False /
        // InvalidMetricSourceType; the decision handles it.
        MetricSpec::Unknown { .. } => return Ok(()),
    };
    if name.is_empty() {
        return Err(err(format!("{path}.name"), MUST_NOT_BE_EMPTY));
    }
    validate_target(&path, target)
}

fn validate_target(path: &str, target: &MetricTarget) -> Result<(), InvalidInput> {
    if let Some(u) = target.average_utilization
        && u <= 0
    {
        return Err(err(
            format!("{path}.target.average_utilization"),
            MUST_BE_POSITIVE,
        ));
    }
    if let Some(v) = target.average_value
        && v <= 0
    {
        return Err(err(
            format!("{path}.target.average_value_milli"),
            MUST_BE_POSITIVE,
        ));
    }
    if let Some(v) = target.value
        && v <= 0
    {
        return Err(err(format!("{path}.target.value_milli"), MUST_BE_POSITIVE));
    }
    Ok(())
}

fn validate_rules(path: &str, rules: &ScalingRules) -> Result<(), InvalidInput> {
    if let Some(w) = rules.stabilization_window_seconds
        && w < 0
    {
        return Err(err(
            format!("{path}.stabilization_window_seconds"),
            MUST_NOT_BE_NEGATIVE,
        ));
    }
    if let Some(t) = rules.tolerance
        && (!t.is_finite() || t < 0.0)
    {
        return Err(err(
            format!("{path}.tolerance"),
            "must be a finite number >= 0",
        ));
    }
    for (i, policy) in rules.policies.iter().flatten().enumerate() {
        if policy.value <= 0 {
            return Err(err(format!("{path}.policies[{i}].value"), MUST_BE_POSITIVE));
        }
        if policy.period_seconds <= 0 {
            return Err(err(
                format!("{path}.policies[{i}].period_seconds"),
                MUST_BE_POSITIVE,
            ));
        }
    }
    Ok(())
}

/// Checks the snapshot: counts, pod names, requests.
pub fn validate_observation(observation: &Observation) -> Result<(), InvalidInput> {
    if observation.current_replicas < 0 {
        return Err(err("current_replicas", MUST_NOT_BE_NEGATIVE));
    }
    if let Some(s) = observation.status_replicas
        && s < 0
    {
        return Err(err("status_replicas", MUST_NOT_BE_NEGATIVE));
    }
    // Uniqueness without hashing client-chosen strings (a keyed hash costs several times a
    // comparison per pod): a list in strictly ascending order (the common case) is unique as
    // it stands; any other is sorted (borrowed names, O(n log n) whatever the names). Only
    // when there is a duplicate does the loop below track a set, to report the first
    // offending index in the same order as a set would.
    let pods = &observation.pods;
    let sorted: Option<Vec<&str>> = if pods.windows(2).all(|w| w[0].name < w[1].name) {
        None
    } else {
        let mut names: Vec<&str> = pods.iter().map(|p| p.name.as_str()).collect();
        names.sort_unstable();
        Some(names)
    };
    let listed = |name: &str| match &sorted {
        None => pods.binary_search_by(|p| p.name.as_str().cmp(name)).is_ok(),
        Some(names) => names.binary_search(&name).is_ok(),
    };
    let mut seen = sorted
        .as_ref()
        .is_some_and(|names| names.windows(2).any(|w| w[0] == w[1]))
        .then(|| HashSet::with_capacity(pods.len()));
    for (i, pod) in observation.pods.iter().enumerate() {
        if pod.name.is_empty() {
            return Err(err(format!("pods[{i}].name"), MUST_NOT_BE_EMPTY));
        }
        if let Some(seen) = &mut seen
            && !seen.insert(pod.name.as_str())
        {
            return Err(err(format!("pods[{i}].name"), "duplicate pod name"));
        }
        for (resource, v) in &pod.requests {
            if *v < 0 {
                return Err(err(
                    format!("pods[{i}].requests_milli[{resource}]"),
                    MUST_NOT_BE_NEGATIVE,
                ));
            }
        }
        for (j, container) in pod.containers.iter().enumerate() {
            for (resource, v) in &container.requests {
                if *v < 0 {
                    return Err(err(
                        format!("pods[{i}].containers[{j}].requests_milli[{resource}]"),
                        MUST_NOT_BE_NEGATIVE,
                    ));
                }
            }
        }
    }
    // Sample values are not checked: any reading is possible (custom metrics may be
    // negative), and timestamps and windows are typed.
    for pod in observation.orphan_samples.keys() {
        if pod.is_empty() {
            return Err(err("orphan_pod_metrics.pod_name", MUST_NOT_BE_EMPTY));
        }
        if listed(pod.as_str()) {
            return Err(err(
                format!("orphan_pod_metrics[{pod}].pod_name"),
                "names a pod listed in pods",
            ));
        }
    }
    Ok(())
}

/// Checks the stored history: magnitudes are positive by construction.
pub fn validate_history(history: &History) -> Result<(), InvalidInput> {
    for (name, events) in [
        ("history.scale_up_events", &history.scale_up_events),
        ("history.scale_down_events", &history.scale_down_events),
    ] {
        for (i, e) in events.iter().enumerate() {
            if e.replica_change < 0 {
                return Err(err(
                    format!("{name}[{i}].replica_change"),
                    MUST_NOT_BE_NEGATIVE,
                ));
            }
        }
    }
    Ok(())
}

/// Everything an evaluation reads.
pub fn validate(
    settings: &Settings,
    spec: &HorizontalSpec,
    observation: &Observation,
    history: &History,
) -> Result<(), InvalidInput> {
    validate_settings(settings)?;
    validate_spec(spec)?;
    validate_observation(observation)?;
    validate_history(history)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{
        observation::Pod,
        spec::{Behavior, MetricTargetType, ScalingPolicy, ScalingPolicyType},
    };

    fn spec() -> HorizontalSpec {
        HorizontalSpec {
            min_replicas: Some(1),
            max_replicas: 10,
            metrics: vec![],
            behavior: None,
            extensions: None,
        }
    }

    fn field(r: Result<(), InvalidInput>) -> String {
        let e = r.unwrap_err();
        format!("{}: {}", e.field, e.description)
    }

    #[test]
    fn bounds() {
        let mut s = spec();
        s.max_replicas = 0;
        assert_eq!(
            field(validate_spec(&s)),
            "spec.max_replicas: must be greater than or equal to 1"
        );
        s.max_replicas = 2;
        s.min_replicas = Some(3);
        assert_eq!(
            field(validate_spec(&s)),
            "spec.max_replicas: must be greater than or equal to min_replicas"
        );
        s.min_replicas = Some(-1);
        assert_eq!(
            field(validate_spec(&s)),
            "spec.min_replicas: must not be negative"
        );
    }

    #[test]
    fn metric_targets_and_unknown_type() {
        let mut s = spec();
        s.metrics = vec![
            MetricSpec::Unknown {
                type_name: "CheddarCheese".into(),
            },
            MetricSpec::Resource {
                name: "cpu".into(),
                target: MetricTarget {
                    target_type: MetricTargetType::Utilization,
                    average_utilization: Some(0),
                    ..MetricTarget::default()
                },
            },
        ];
        assert_eq!(
            field(validate_spec(&s)),
            "spec.metrics[1].target.average_utilization: must be greater than 0"
        );
        s.metrics.pop();
        assert!(validate_spec(&s).is_ok());
    }

    #[test]
    fn policies() {
        let mut s = spec();
        s.behavior = Some(Behavior {
            scale_up: None,
            scale_down: Some(ScalingRules {
                policies: Some(vec![ScalingPolicy {
                    policy_type: ScalingPolicyType::Pods,
                    value: 1,
                    period_seconds: 0,
                }]),
                ..ScalingRules::default()
            }),
        });
        assert_eq!(
            field(validate_spec(&s)),
            "spec.behavior.scale_down.policies[0].period_seconds: must be greater than 0"
        );
    }

    #[test]
    fn observation_rules() {
        let mut o = Observation {
            current_replicas: -1,
            ..Observation::default()
        };
        assert_eq!(
            field(validate_observation(&o)),
            "current_replicas: must not be negative"
        );
        o.current_replicas = 3;
        o.pods = ["a", "b", "a"]
            .iter()
            .map(|n| Pod {
                name: n.to_string(),
                ..Pod::default()
            })
            .collect();
        assert_eq!(
            field(validate_observation(&o)),
            "pods[2].name: duplicate pod name"
        );
        let nan = Settings {
            tolerance: f64::NAN,
            ..Settings::default()
        };
        assert_eq!(
            field(validate_settings(&nan)),
            "settings.tolerance: must be a finite number >= 0"
        );
    }
}
