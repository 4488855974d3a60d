//! The HorizontalPodAutoscaler spec, as the caller gives it (before API defaulting; the
//! engine applies `SetDefaults_HorizontalPodAutoscaler` itself, see `hpa::defaults`).

use serde::{Deserialize, Serialize};

/// `autoscaling/v2` `HorizontalPodAutoscalerSpec` without the scale target reference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HorizontalSpec {
    /// Absent: 1. May be 0 (alpha `HPAScaleToZero`).
    pub min_replicas: Option<i32>,
    pub max_replicas: i32,
    /// Empty: cpu at 80% average utilization (`autoscaling.DefaultCPUUtilization`).
    pub metrics: Vec<MetricSpec>,
    /// Absent: the legacy normalization (`normalizeDesiredReplicas`). Present, even empty:
    /// `normalizeDesiredReplicasWithBehaviors` with every missing field defaulted.
    pub behavior: Option<Behavior>,
    /// The migration extensions (scale to zero, activation, fallback, pause, removal
    /// candidates, stale samples; `hpa::extensions`). `None`: exactly the HPA decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<super::hpa::extensions::Extensions>,
}

/// One metric of the spec: its source and its target.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum MetricSpec {
    /// Resource usage of every pod (`ResourceMetricSource`).
    Resource { name: String, target: MetricTarget },
    /// Resource usage of one container of every pod (`ContainerResourceMetricSource`).
    ContainerResource {
        name: String,
        container: String,
        target: MetricTarget,
    },
    /// A custom per-pod metric (`PodsMetricSource`).
    Pods { name: String, target: MetricTarget },
    /// A metric describing one object (`ObjectMetricSource`).
    Object { name: String, target: MetricTarget },
    /// A metric from outside the cluster (`ExternalMetricSource`).
    External { name: String, target: MetricTarget },
    /// A source type Kubernetes does not know. Upstream's controller reports it as an invalid
    /// metric (ScalingActive False / InvalidMetricSourceType) rather than rejecting the spec.
    Unknown { type_name: String },
}

/// `MetricTarget`: which field is set decides the calculation (see `hpa::replicas`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricTarget {
    pub target_type: MetricTargetType,
    /// Percent of the request (Utilization).
    pub average_utilization: Option<i32>,
    /// Milli-units per pod (AverageValue).
    pub average_value: Option<i64>,
    /// Milli-units in total (Value).
    pub value: Option<i64>,
}

/// `MetricTargetType`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetricTargetType {
    #[default]
    Utilization,
    AverageValue,
    Value,
}

/// `HorizontalPodAutoscalerBehavior`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Behavior {
    pub scale_up: Option<ScalingRules>,
    pub scale_down: Option<ScalingRules>,
}

/// `HPAScalingRules`; every field optional, completed by `GenerateHPAScale{Up,Down}Rules`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ScalingRules {
    pub stabilization_window_seconds: Option<i32>,
    pub select_policy: Option<SelectPolicy>,
    /// `None`: the default policies. `Some(vec![])`: no policy at all (no scaling that way).
    pub policies: Option<Vec<ScalingPolicy>>,
    /// KEP-4951 per-direction tolerance, replacing the controller tolerance on that side.
    pub tolerance: Option<f64>,
}

/// `ScalingPolicySelect`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SelectPolicy {
    #[default]
    Max,
    Min,
    Disabled,
}

/// `HPAScalingPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScalingPolicy {
    pub policy_type: ScalingPolicyType,
    pub value: i32,
    pub period_seconds: i32,
}

/// `HPAScalingPolicyType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScalingPolicyType {
    Pods,
    Percent,
}
