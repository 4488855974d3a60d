//! API defaulting of the HPA spec (`pkg/apis/autoscaling/v2/defaults.go`) and the controller's
//! own completions (`maybeInitScaleDownStabilizationWindow`, `tolerancesForHpa` in
//! `horizontal.go`).
//!
//! Callers hand the engine the spec as written; Kubernetes defaults it when it is stored, so
//! the engine does the same before deciding. The result is a [`DefaultedSpec`], in which
//! nothing the decision reads is optional any more.
// Re-enabled: the crate-wide lints are allowed on `engine::hpa` until its other files are done.
#![warn(missing_docs, unreachable_pub)]

use crate::{
    hpa::settings::Settings,
    hpa::spec::{
        Behavior, HorizontalSpec, MetricSpec, MetricTarget, MetricTargetType, ScalingPolicy,
        ScalingPolicyType, ScalingRules, SelectPolicy,
    },
};

use super::replicas::Tolerances;

/// `autoscaling.DefaultCPUUtilization`: the target of the metric an HPA without metrics gets.
pub const DEFAULT_CPU_UTILIZATION: i32 = 80;

/// `HPAScalingRules` with every field the normalization reads filled in.
#[derive(Clone, Debug, PartialEq)]
pub struct CompletedRules {
    /// The window `stabilizeRecommendationWithBehaviors` looks back over (0 for scale-up,
    /// 300 for scale-down unless set).
    pub stabilization_window_seconds: i32,
    /// How the policies combine (`Max` unless set): the most permissive one by default.
    pub select_policy: SelectPolicy,
    /// The rate policies (`GenerateHPAScale{Up,Down}Rules` defaults when none are given).
    pub policies: Vec<ScalingPolicy>,
    /// Per-direction tolerance (KEP-4951); `None`: the controller tolerance.
    pub tolerance: Option<f64>,
}

/// A behavior after `GenerateHPAScale{Up,Down}Rules` and
/// `maybeInitScaleDownStabilizationWindow`.
#[derive(Clone, Debug, PartialEq)]
pub struct CompletedBehavior {
    /// The rules for increases.
    pub scale_up: CompletedRules,
    /// The rules for decreases.
    pub scale_down: CompletedRules,
}

/// The spec after `SetDefaults_HorizontalPodAutoscaler`.
#[derive(Clone, Debug, PartialEq)]
pub struct DefaultedSpec {
    /// `minReplicas`, 1 when unset (`SetDefaults_HorizontalPodAutoscaler`).
    pub min_replicas: i32,
    /// `maxReplicas`, required by the API.
    pub max_replicas: i32,
    /// Never empty.
    pub metrics: Vec<MetricSpec>,
    /// `None`: the legacy normalization.
    pub behavior: Option<CompletedBehavior>,
}

/// `SetDefaults_HorizontalPodAutoscaler`: min 1, cpu at 80 % when no metric is given, and every
/// behavior field the user left out. The scale-down stabilization window, which the API leaves
/// unset, is completed from `settings.downscale_stabilization` as the controller does at the
/// start of every behavior normalization (`maybeInitScaleDownStabilizationWindow`).
pub fn set_defaults(spec: &HorizontalSpec, settings: &Settings) -> DefaultedSpec {
    let metrics = if spec.metrics.is_empty() {
        vec![default_metric()]
    } else {
        spec.metrics.clone()
    };
    let behavior = spec.behavior.as_ref().map(|behavior| {
        let mut completed = Behavior {
            scale_up: Some(generate_scale_up_rules(behavior.scale_up.as_ref())),
            scale_down: Some(generate_scale_down_rules(behavior.scale_down.as_ref())),
        };
        maybe_init_scale_down_stabilization_window(&mut completed, settings);
        CompletedBehavior {
            scale_up: complete(completed.scale_up.unwrap_or_default()),
            scale_down: complete(completed.scale_down.unwrap_or_default()),
        }
    });
    DefaultedSpec {
        min_replicas: spec.min_replicas.unwrap_or(1),
        max_replicas: spec.max_replicas,
        metrics,
        behavior,
    }
}

/// A spec's metrics as the controller reads them: an empty list is Kubernetes' default metric
/// ([`default_metric`]).
pub fn metrics_or_default(metrics: &[MetricSpec]) -> std::borrow::Cow<'_, [MetricSpec]> {
    if metrics.is_empty() {
        std::borrow::Cow::Owned(vec![default_metric()])
    } else {
        std::borrow::Cow::Borrowed(metrics)
    }
}

/// The metric `SetDefaults_HorizontalPodAutoscaler` adds to an HPA without metrics.
pub fn default_metric() -> MetricSpec {
    MetricSpec::Resource {
        name: "cpu".to_string(),
        target: MetricTarget {
            target_type: MetricTargetType::Utilization,
            average_utilization: Some(DEFAULT_CPU_UTILIZATION),
            average_value: None,
            value: None,
        },
    }
}

/// `GenerateHPAScaleUpRules`: window 0, select Max, policies `[{Pods, 4, 15 s},
/// {Percent, 100, 15 s}]`, each overridden by the user's non-nil field. A present but empty
/// policy list stays empty (only nil is replaced).
pub(crate) fn generate_scale_up_rules(rules: Option<&ScalingRules>) -> ScalingRules {
    let defaults = ScalingRules {
        stabilization_window_seconds: Some(0),
        select_policy: Some(SelectPolicy::Max),
        policies: Some(vec![
            ScalingPolicy {
                policy_type: ScalingPolicyType::Pods,
                value: 4,
                period_seconds: 15,
            },
            ScalingPolicy {
                policy_type: ScalingPolicyType::Percent,
                value: 100,
                period_seconds: 15,
            },
        ]),
        tolerance: None,
    };
    overlay(defaults, rules)
}

/// `GenerateHPAScaleDownRules`: window unset (the controller fills it in), select Max,
/// policies `[{Percent, 100, 15 s}]`, each overridden by the user's non-nil field.
pub(crate) fn generate_scale_down_rules(rules: Option<&ScalingRules>) -> ScalingRules {
    let defaults = ScalingRules {
        stabilization_window_seconds: None,
        select_policy: Some(SelectPolicy::Max),
        policies: Some(vec![ScalingPolicy {
            policy_type: ScalingPolicyType::Percent,
            value: 100,
            period_seconds: 15,
        }]),
        tolerance: None,
    };
    overlay(defaults, rules)
}

/// `maybeInitScaleDownStabilizationWindow`: a behavior whose scale-down rules have no window
/// gets the controller's `--horizontal-pod-autoscaler-downscale-stabilization`, in whole
/// seconds (`int32(window.Seconds())`, saturating here instead of wrapping).
pub(crate) fn maybe_init_scale_down_stabilization_window(
    behavior: &mut Behavior,
    settings: &Settings,
) {
    if let Some(scale_down) = behavior.scale_down.as_mut()
        && scale_down.stabilization_window_seconds.is_none()
    {
        let seconds = settings.downscale_stabilization.as_secs();
        scale_down.stabilization_window_seconds = Some(i32::try_from(seconds).unwrap_or(i32::MAX));
    }
}

/// `tolerancesForHpa`: both bounds default to the controller tolerance (a float flag); a
/// behavior's per-direction tolerance replaces it (the HPAConfigurableTolerance gate taken
/// as on), read as upstream reads that Quantity ([`quantity_approximate_float`]).
pub fn tolerances_for_hpa(spec: &DefaultedSpec, settings: &Settings) -> Tolerances {
    let mut tolerances = Tolerances {
        scale_down: settings.tolerance,
        scale_up: settings.tolerance,
    };
    if let Some(behavior) = &spec.behavior {
        if let Some(t) = behavior.scale_down.tolerance {
            tolerances.scale_down = quantity_approximate_float(t);
        }
        if let Some(t) = behavior.scale_up.tolerance {
            tolerances.scale_up = quantity_approximate_float(t);
        }
    }
    tolerances
}

/// `Quantity.AsApproximateFloat64` of the decimal `value × 10^-decimals` as the controller
/// holds it. The API server keeps quantities in canonical form, an integer times 10^-3k with
/// the smallest such k (`0.41` is `410m`, `1.5` is `1500m`, `2` is `2`), and the float is
/// `value × math.Pow10(-3k)`: 0.41000000000000003, not the double 0.41.
pub(crate) fn canonical_quantity_float(mut value: i64, decimals: u32) -> f64 {
    let mut k = decimals.div_ceil(3) * 3;
    value = value.saturating_mul(10i64.pow(k - decimals));
    while k > 0 && value % 1000 == 0 {
        value /= 1000;
        k -= 3;
    }
    if k == 0 {
        value as f64
    } else {
        // Go's Pow10(-k) is 1 / 10^k.
        value as f64 * (1.0 / 10f64.powi(k as i32))
    }
}

/// [`canonical_quantity_float`] of a behavior tolerance: a usage ratio of exactly 0.59 is
/// within a scale-down tolerance of 0.41. The decimal is the shortest one that reads back as
/// `t` (what a client wrote); beyond nano precision, or for a whole number, `t` is kept as
/// it is.
fn quantity_approximate_float(t: f64) -> f64 {
    let decimal = t.to_string();
    let Some((whole, fraction)) = decimal.split_once('.') else {
        return t;
    };
    if !t.is_finite() || fraction.len() > 9 {
        return t;
    }
    match format!("{whole}{fraction}").parse::<i64>() {
        Ok(value) => canonical_quantity_float(value, fraction.len() as u32),
        Err(_) => t,
    }
}

/// Copies every non-nil field of `user` onto `defaults`, as the `Generate*Rules` functions do.
fn overlay(mut defaults: ScalingRules, user: Option<&ScalingRules>) -> ScalingRules {
    if let Some(user) = user {
        if user.stabilization_window_seconds.is_some() {
            defaults.stabilization_window_seconds = user.stabilization_window_seconds;
        }
        if user.select_policy.is_some() {
            defaults.select_policy = user.select_policy;
        }
        if user.policies.is_some() {
            defaults.policies.clone_from(&user.policies);
        }
        if user.tolerance.is_some() {
            defaults.tolerance = user.tolerance;
        }
    }
    defaults
}

fn complete(rules: ScalingRules) -> CompletedRules {
    CompletedRules {
        stabilization_window_seconds: rules.stabilization_window_seconds.unwrap_or(0),
        select_policy: rules.select_policy.unwrap_or(SelectPolicy::Max),
        policies: rules.policies.unwrap_or_default(),
        tolerance: rules.tolerance,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn behavior_tolerances_read_as_canonical_quantities() {
        use super::quantity_approximate_float as q;
        // 410m × 10^-3: one ulp above the double 0.41.
        assert_eq!(q(0.41), 0.41000000000000003);
        assert_eq!(1.0 - q(0.41), 0.59);
        assert_ne!(1.0 - 0.41, 0.59);
        // Values the double already is.
        for t in [0.0, 0.1, 0.5, 1.0, 2.0, 0.34] {
            assert_eq!(q(t), t, "{t}");
        }
        // 12500u × 10^-6, and more than nano precision kept as is.
        assert_eq!(q(0.0125), 12_500.0 * (1.0 / 1e6));
        assert_eq!(q(1e-12), 1e-12);
        // Milli-units: whole ones lose their scale, fractional ones keep 10^-3.
        assert_eq!(canonical_quantity_float(30_000, 3), 30.0);
        assert_eq!(canonical_quantity_float(1_500, 3), 1_500.0 * (1.0 / 1e3));
    }

    fn spec(behavior: Option<Behavior>) -> HorizontalSpec {
        HorizontalSpec {
            min_replicas: None,
            max_replicas: 10,
            metrics: vec![],
            behavior,
            extensions: None,
            schedules: Vec::new(),
            predictive: None,
        }
    }

    #[test]
    fn empty_spec_gets_min_one_and_cpu_80() {
        let d = set_defaults(&spec(None), &Settings::default());
        assert_eq!(d.min_replicas, 1);
        assert_eq!(d.metrics, vec![default_metric()]);
        assert!(d.behavior.is_none());
    }

    #[test]
    fn empty_behavior_gets_kubernetes_rules_and_controller_window() {
        let settings = Settings {
            downscale_stabilization: Duration::from_secs(120),
            ..Settings::default()
        };
        let d = set_defaults(&spec(Some(Behavior::default())), &settings);
        let b = d.behavior.unwrap();
        assert_eq!(b.scale_up.stabilization_window_seconds, 0);
        assert_eq!(b.scale_up.policies.len(), 2);
        assert_eq!(b.scale_down.stabilization_window_seconds, 120);
        assert_eq!(b.scale_down.policies.len(), 1);
        assert_eq!(
            b.scale_down.policies[0].policy_type,
            ScalingPolicyType::Percent
        );
    }

    #[test]
    fn explicit_empty_policies_stay_empty_and_tolerances_override() {
        let behavior = Behavior {
            scale_up: Some(ScalingRules {
                policies: Some(vec![]),
                tolerance: Some(0.5),
                ..ScalingRules::default()
            }),
            scale_down: Some(ScalingRules {
                stabilization_window_seconds: Some(7),
                tolerance: Some(0.01),
                ..ScalingRules::default()
            }),
        };
        let settings = Settings::default();
        let d = set_defaults(&spec(Some(behavior)), &settings);
        let b = d.behavior.as_ref().unwrap();
        assert!(b.scale_up.policies.is_empty());
        assert_eq!(b.scale_down.stabilization_window_seconds, 7);
        let t = tolerances_for_hpa(&d, &settings);
        assert_eq!((t.scale_down, t.scale_up), (0.01, 0.5));
    }
}
