//! Rejection of input that makes no sense, before any arithmetic runs: the one HPA validator.
//!
//! There are two rule sets, chosen with [`Rules`]:
//!
//! * [`Rules::Api`]: what Kubernetes' API server admits (`ValidateHorizontalPodAutoscalerSpec`,
//!   `validateMetricTarget`, `validateScalingRules`, `validateScalingPolicy` in
//!   `pkg/apis/autoscaling/validation/validation.go`). The service checks requests with it
//!   (`api::convert`), while it builds these engine types.
//! * [`Rules::Controller`]: the subset the controller's arithmetic needs. `evaluate` checks with
//!   it, because the conformance fixtures are upstream controller tests, which bypass the API
//!   server (e.g. a 4000 s stabilization window or a target lacking the field its type needs:
//!   the controller reports the latter as a FailedGet*Metric condition).
//!
//! Every check lives here once; the rule sets differ only where written below. Paths are
//! relative to the checked value and in the engine's names (`metrics[0].target.average_value`,
//! `behavior.scale_up.policies[1].period_seconds`, `tolerance`); the service adds its wire
//! prefix and suffixes (`spec.`, `_milli`).
//!
//! What Kubernetes' controller itself reports as a condition stays valid under both rule sets:
//! a metric of an unknown source type (InvalidMetricSourceType).
// Re-enabled: the crate-wide lints are allowed on `engine::hpa` until its other files are done.
#![warn(missing_docs, unreachable_pub)]

use std::collections::HashSet;

use crate::{
    error::InvalidInput,
    hpa::history::History,
    hpa::observation::Observation,
    hpa::settings::Settings,
    hpa::spec::{
        HorizontalSpec, MetricSpec, MetricTarget, MetricTargetType, ScalingPolicy, ScalingRules,
    },
};

const MUST_BE_POSITIVE: &str = "must be greater than 0";
const MUST_NOT_BE_NEGATIVE: &str = "must not be negative";
const MUST_NOT_BE_EMPTY: &str = "must not be empty";
const FINITE_NON_NEGATIVE: &str = "must be a finite number >= 0";
const FINITE_AT_LEAST_ONE: &str = "must be a finite number >= 1";

/// Kubernetes' `MaxStabilizationWindowSeconds`.
pub const MAX_STABILIZATION_WINDOW_SECONDS: i32 = 3600;
/// Kubernetes' `MaxPeriodSeconds` for scaling policies.
pub const MAX_PERIOD_SECONDS: i32 = 1800;

/// Which rule set a check applies (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rules {
    /// The API server's validation: what a client may send.
    Api,
    /// What the controller's arithmetic needs: what a fixture may hold.
    Controller,
}

fn err(field: impl Into<String>, description: impl Into<String>) -> InvalidInput {
    InvalidInput::new(field, description)
}

/// A controller tolerance (the global one or a per-direction one): finite and not negative.
pub fn tolerance_violation(x: f64) -> Option<&'static str> {
    (!x.is_finite() || x < 0.0).then_some(FINITE_NON_NEGATIVE)
}

/// The legacy scale-up limit's factor or minimum (`scaleUpLimitFactor` = 2 and
/// `scaleUpLimitMinimum` = 4 are constants in upstream's `horizontal.go`, so Kubernetes has no
/// rule for them): at least 1, since `max(factor × current, minimum)` below 1 would sit below
/// the current count and scale down (or to zero) a target whose metrics ask for more.
pub fn scale_up_limit_violation(x: f64) -> Option<&'static str> {
    (!x.is_finite() || x < 1.0).then_some(FINITE_AT_LEAST_ONE)
}

/// Every violation of the controller settings; paths relative to the settings.
pub fn settings_violations(settings: &Settings) -> Vec<InvalidInput> {
    [
        ("tolerance", tolerance_violation(settings.tolerance)),
        (
            "scale_up_limit_factor",
            scale_up_limit_violation(settings.scale_up_limit_factor),
        ),
        (
            "scale_up_limit_minimum",
            scale_up_limit_violation(settings.scale_up_limit_minimum),
        ),
    ]
    .into_iter()
    .filter_map(|(field, d)| d.map(|d| err(field, d)))
    .collect()
}

/// Checks the controller settings: the first violation, under `settings.`.
pub fn validate_settings(settings: &Settings) -> Result<(), InvalidInput> {
    first(settings_violations(settings), "settings.")
}

fn first(violations: Vec<InvalidInput>, prefix: &str) -> Result<(), InvalidInput> {
    match violations.into_iter().next() {
        None => Ok(()),
        Some(v) => Err(err(format!("{prefix}{}", v.field), v.description)),
    }
}

/// `min_replicas` and `max_replicas` (`ValidateHorizontalPodAutoscalerSpec`). Whether a
/// minimum of 0 is admitted depends on the `HPAScaleToZero` gate: [`min_replicas_violation`].
pub fn bounds_violations(min_replicas: Option<i32>, max_replicas: i32) -> Vec<InvalidInput> {
    let mut out = Vec::new();
    let min = min_replicas.unwrap_or(1);
    if min < 0 {
        out.push(err("min_replicas", MUST_NOT_BE_NEGATIVE));
    }
    if max_replicas < 1 {
        out.push(err("max_replicas", "must be greater than or equal to 1"));
    } else if max_replicas < min {
        out.push(err(
            "max_replicas",
            "must be greater than or equal to min_replicas",
        ));
    }
    out
}

/// `min_replicas` against the `HPAScaleToZero` gate, as the API server checks it
/// (`validateMinReplicas` in `ValidateHorizontalPodAutoscalerSpec`): with the gate off the
/// lower bound is 1; with it on, 0 is admitted only when at least one metric is Object or
/// External (CPU and memory need running pods to wake a target).
pub fn min_replicas_violation(
    min_replicas: Option<i32>,
    metrics: &[MetricSpec],
    scale_to_zero: bool,
) -> Option<InvalidInput> {
    if min_replicas != Some(0) {
        return None;
    }
    if !scale_to_zero {
        Some(err(
            "min_replicas",
            "must be greater than or equal to 1 (0 needs the HPAScaleToZero feature gate)",
        ))
    } else if !has_object_or_external(metrics) {
        Some(err(
            "min_replicas",
            "may be 0 only when at least one Object or External metric is configured",
        ))
    } else {
        None
    }
}

/// Whether any metric is Object or External: the metrics that can wake a target at zero
/// (`hasObjectOrExternalMetrics`).
pub(crate) fn has_object_or_external(metrics: &[MetricSpec]) -> bool {
    metrics
        .iter()
        .any(|m| matches!(m, MetricSpec::Object { .. } | MetricSpec::External { .. }))
}

/// One metric, at `metrics[index]`: name, container, the target's values (each set one must
/// be positive, `validateMetricTarget`) and, under [`Rules::Api`], the target type: allowed
/// for the source (`validateResourceSource`, `validatePodsSource`, `validateObjectSource`,
/// `validateExternalSource`) and with the field it selects set.
pub fn metric_violations(index: usize, metric: &MetricSpec, rules: Rules) -> Vec<InvalidInput> {
    let mut out = Vec::new();
    let path = format!("metrics[{index}]");
    let (source, name, target) = match metric {
        MetricSpec::Resource { name, target } => ("Resource", name, target),
        MetricSpec::Pods { name, target } => ("Pods", name, target),
        MetricSpec::Object { name, target } => ("Object", name, target),
        MetricSpec::External { name, target } => ("External", name, target),
        MetricSpec::ContainerResource { name, target, .. } => ("ContainerResource", name, target),
        // Upstream's controller reports an unknown type as ScalingActive False /
        // InvalidMetricSourceType; the decision handles it.
        MetricSpec::Unknown { .. } => return out,
    };
    if name.is_empty() {
        out.push(err(format!("{path}.name"), MUST_NOT_BE_EMPTY));
    }
    if let MetricSpec::ContainerResource { container, .. } = metric
        && container.is_empty()
    {
        out.push(err(format!("{path}.container"), MUST_NOT_BE_EMPTY));
    }
    target_violations(&mut out, &format!("{path}.target"), source, target, rules);
    out
}

fn target_violations(
    out: &mut Vec<InvalidInput>,
    path: &str,
    source: &str,
    t: &MetricTarget,
    rules: Rules,
) {
    use MetricTargetType as T;
    if t.average_utilization.is_some_and(|u| u < 1) {
        out.push(err(format!("{path}.average_utilization"), MUST_BE_POSITIVE));
    }
    if t.average_value.is_some_and(|x| x < 1) {
        out.push(err(format!("{path}.average_value"), MUST_BE_POSITIVE));
    }
    if t.value.is_some_and(|x| x < 1) {
        out.push(err(format!("{path}.value"), MUST_BE_POSITIVE));
    }
    if rules == Rules::Controller {
        return;
    }
    let allowed: &[T] = match source {
        "Resource" | "ContainerResource" => &[T::Utilization, T::AverageValue],
        "Pods" => &[T::AverageValue],
        _ => &[T::Value, T::AverageValue],
    };
    let tt = t.target_type;
    if !allowed.contains(&tt) {
        out.push(err(
            format!("{path}.type"),
            format!("{tt:?} is not valid for a {source} metric"),
        ));
        return;
    }
    let (field, set) = match tt {
        T::Utilization => ("average_utilization", t.average_utilization.is_some()),
        T::AverageValue => ("average_value", t.average_value.is_some()),
        T::Value => ("value", t.value.is_some()),
    };
    if !set {
        out.push(err(
            format!("{path}.{field}"),
            format!("must be set for a {tt:?} target"),
        ));
    }
}

/// A scaling direction's stabilization window (`validateScalingRules`): under [`Rules::Api`]
/// within 0 ..= [`MAX_STABILIZATION_WINDOW_SECONDS`], under [`Rules::Controller`] not negative.
pub fn window_violation(seconds: i32, rules: Rules) -> Option<String> {
    match rules {
        Rules::Api => (!(0..=MAX_STABILIZATION_WINDOW_SECONDS).contains(&seconds))
            .then(|| format!("must be between 0 and {MAX_STABILIZATION_WINDOW_SECONDS}")),
        Rules::Controller => (seconds < 0).then(|| MUST_NOT_BE_NEGATIVE.to_owned()),
    }
}

/// One scaling policy (`validateScalingPolicy`), paths `value` and `period_seconds`: the value
/// positive; the period under [`Rules::Api`] within 1 ..= [`MAX_PERIOD_SECONDS`], under
/// [`Rules::Controller`] positive.
pub fn policy_violations(policy: &ScalingPolicy, rules: Rules) -> Vec<InvalidInput> {
    let mut out = Vec::new();
    if policy.value < 1 {
        out.push(err("value", MUST_BE_POSITIVE));
    }
    match rules {
        Rules::Api if !(1..=MAX_PERIOD_SECONDS).contains(&policy.period_seconds) => {
            out.push(err(
                "period_seconds",
                format!("must be between 1 and {MAX_PERIOD_SECONDS}"),
            ));
        }
        Rules::Controller if policy.period_seconds < 1 => {
            out.push(err("period_seconds", MUST_BE_POSITIVE));
        }
        _ => {}
    }
    out
}

/// One direction's rules, paths relative to them (`stabilization_window_seconds`,
/// `policies[i].value`, `tolerance`).
pub fn rules_violations(r: &ScalingRules, rules: Rules) -> Vec<InvalidInput> {
    let mut out = Vec::new();
    if let Some(d) = r
        .stabilization_window_seconds
        .and_then(|w| window_violation(w, rules))
    {
        out.push(err("stabilization_window_seconds", d));
    }
    for (i, policy) in r.policies.iter().flatten().enumerate() {
        for v in policy_violations(policy, rules) {
            out.push(err(format!("policies[{i}].{}", v.field), v.description));
        }
    }
    if let Some(d) = r.tolerance.and_then(tolerance_violation) {
        out.push(err("tolerance", d));
    }
    out
}

/// Every violation of the spec, paths relative to it (`max_replicas`,
/// `metrics[1].target.average_utilization`, `behavior.scale_down.policies[0].period_seconds`).
pub fn spec_violations(spec: &HorizontalSpec, rules: Rules) -> Vec<InvalidInput> {
    let mut out = bounds_violations(spec.min_replicas, spec.max_replicas);
    if let Some(p) = &spec.predictive
        && let Err(e) = super::predictive::validate(p)
    {
        out.push(e);
    }
    for (i, metric) in spec.metrics.iter().enumerate() {
        out.extend(metric_violations(i, metric, rules));
    }
    if let Some(behavior) = &spec.behavior {
        for (direction, r) in [
            ("scale_up", &behavior.scale_up),
            ("scale_down", &behavior.scale_down),
        ] {
            for v in r.iter().flat_map(|r| rules_violations(r, rules)) {
                out.push(err(
                    format!("behavior.{direction}.{}", v.field),
                    v.description,
                ));
            }
        }
    }
    out
}

/// Checks the spec under [`Rules::Controller`]: the first violation, under `spec.`.
pub fn validate_spec(spec: &HorizontalSpec) -> Result<(), InvalidInput> {
    first(spec_violations(spec, Rules::Controller), "spec.")
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
    use crate::{
        hpa::observation::Pod,
        hpa::spec::{Behavior, ScalingPolicy, ScalingPolicyType},
    };

    fn spec() -> HorizontalSpec {
        HorizontalSpec::new(Some(1), 10, vec![])
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
                target: MetricTarget::utilization(0),
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
    fn the_api_rules_are_stricter_than_the_controller_rules() {
        let mut s = spec();
        s.metrics = vec![MetricSpec::Pods {
            name: "qps".into(),
            target: MetricTarget::utilization(50),
        }];
        s.behavior = Some(Behavior {
            scale_up: Some(ScalingRules {
                stabilization_window_seconds: Some(4000),
                policies: Some(vec![ScalingPolicy {
                    policy_type: ScalingPolicyType::Pods,
                    value: 0,
                    period_seconds: 1801,
                }]),
                ..ScalingRules::default()
            }),
            scale_down: None,
        });
        let api: Vec<String> = spec_violations(&s, Rules::Api)
            .into_iter()
            .map(|e| format!("{}: {}", e.field, e.description))
            .collect();
        assert_eq!(
            api,
            [
                "metrics[0].target.type: Utilization is not valid for a Pods metric",
                "behavior.scale_up.stabilization_window_seconds: must be between 0 and 3600",
                "behavior.scale_up.policies[0].value: must be greater than 0",
                "behavior.scale_up.policies[0].period_seconds: must be between 1 and 1800",
            ]
        );
        assert_eq!(
            field(validate_spec(&s)),
            "spec.behavior.scale_up.policies[0].value: must be greater than 0"
        );
        let limit = Settings {
            scale_up_limit_factor: 0.5,
            ..Settings::default()
        };
        assert_eq!(
            field(validate_settings(&limit)),
            "settings.scale_up_limit_factor: must be a finite number >= 1"
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
