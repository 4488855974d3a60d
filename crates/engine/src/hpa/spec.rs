//! The HorizontalPodAutoscaler spec, as the caller gives it (before API defaulting; the
//! engine applies `SetDefaults_HorizontalPodAutoscaler` itself, see `hpa::defaults`).

use serde::{Deserialize, Serialize};

/// `autoscaling/v2` `HorizontalPodAutoscalerSpec` without the scale target reference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HorizontalSpec {
    /// Absent: 1. May be 0 (alpha `HPAScaleToZero`).
    pub min_replicas: Option<i32>,
    /// The upper bound every normalization clamps to (`maxReplicas`); at least `min_replicas`.
    pub max_replicas: i32,
    /// Empty: cpu at 80% average utilization (`autoscaling.DefaultCPUUtilization`).
    pub metrics: Vec<MetricSpec>,
    /// Absent: the legacy normalization (`normalizeDesiredReplicas`). Present, even empty:
    /// `normalizeDesiredReplicasWithBehaviors` with every missing field defaulted.
    pub behavior: Option<Behavior>,
    /// The migration extensions (scale to zero, activation, fallback, pause, removal
    /// candidates, stale samples; `hpa::extensions`). `None`: exactly the HPA decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<super::extensions::types::Extensions>,
    /// Scheduled floors and ceilings (`hpa::schedule`; not a Kubernetes field). Empty: none,
    /// and the decision is exactly what it was without the field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schedules: Vec<super::schedule::Schedule>,
    /// Predictive scale-up (`hpa::predictive`; not a Kubernetes field). `None`: off, and the
    /// decision is exactly what it was without the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predictive: Option<super::predictive::PredictiveSpec>,
}

impl HorizontalSpec {
    /// A spec of bounds and metrics alone: the legacy normalization, no extension, schedule
    /// or prediction.
    pub fn new(min_replicas: Option<i32>, max_replicas: i32, metrics: Vec<MetricSpec>) -> Self {
        HorizontalSpec {
            min_replicas,
            max_replicas,
            metrics,
            behavior: None,
            extensions: None,
            schedules: Vec::new(),
            predictive: None,
        }
    }
}

/// One metric of the spec: its source and its target.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum MetricSpec {
    /// Resource usage of every pod (`ResourceMetricSource`).
    Resource {
        /// The resource (`cpu`, `memory`), matched against the pods' requests.
        name: String,
        /// Utilization or AverageValue (`computeStatusForResourceMetric`).
        target: MetricTarget,
    },
    /// Resource usage of one container of every pod (`ContainerResourceMetricSource`).
    ContainerResource {
        /// The resource (`cpu`, `memory`).
        name: String,
        /// The container whose usage and request count; the others are ignored.
        container: String,
        /// Utilization or AverageValue, as for `Resource`.
        target: MetricTarget,
    },
    /// A custom per-pod metric (`PodsMetricSource`).
    Pods {
        /// The metric name samples are matched by.
        name: String,
        /// AverageValue only (`GetMetricReplicas` over the pods).
        target: MetricTarget,
    },
    /// A metric describing one object (`ObjectMetricSource`).
    Object {
        /// The metric name samples are matched by.
        name: String,
        /// Value or AverageValue (`GetObjectMetricReplicas` / `GetObjectPerPodMetricReplicas`).
        target: MetricTarget,
    },
    /// A metric from outside the cluster (`ExternalMetricSource`).
    External {
        /// The metric name samples are matched by.
        name: String,
        /// Value or AverageValue (`GetExternalMetricReplicas` / `GetExternalPerPodMetricReplicas`).
        target: MetricTarget,
    },
    /// A source type Kubernetes does not know. Upstream's controller reports it as an invalid
    /// metric (ScalingActive False / InvalidMetricSourceType) rather than rejecting the spec.
    Unknown {
        /// The type as given, quoted in the condition's message.
        type_name: String,
    },
}

impl MetricSpec {
    /// The metric's target; `None` for a source type Kubernetes does not know.
    pub fn target(&self) -> Option<&MetricTarget> {
        match self {
            MetricSpec::Resource { target, .. }
            | MetricSpec::ContainerResource { target, .. }
            | MetricSpec::Pods { target, .. }
            | MetricSpec::Object { target, .. }
            | MetricSpec::External { target, .. } => Some(target),
            MetricSpec::Unknown { .. } => None,
        }
    }
}

impl MetricSpec {
    /// An External metric `name` with `target`.
    pub fn external(name: impl Into<String>, target: MetricTarget) -> Self {
        MetricSpec::External {
            name: name.into(),
            target,
        }
    }
}

impl MetricTarget {
    /// The target value of its type, in that type's unit (percent, or milli-units).
    pub fn value_of_type(&self) -> Option<i64> {
        match self.target_type {
            MetricTargetType::Utilization => self.average_utilization.map(i64::from),
            MetricTargetType::AverageValue => self.average_value,
            MetricTargetType::Value => self.value,
        }
    }
}

/// `MetricTarget`: which field is set decides the calculation (see `hpa::replicas`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricTarget {
    /// Which of the fields below the calculation reads; validation requires that one.
    pub target_type: MetricTargetType,
    /// Percent of the request (Utilization).
    pub average_utilization: Option<i32>,
    /// Milli-units per pod (AverageValue).
    pub average_value: Option<i64>,
    /// Milli-units in total (Value).
    pub value: Option<i64>,
}

impl MetricTarget {
    /// A Utilization target: `percent` of the pods' requests.
    pub fn utilization(percent: i32) -> Self {
        MetricTarget {
            target_type: MetricTargetType::Utilization,
            average_utilization: Some(percent),
            ..MetricTarget::default()
        }
    }

    /// An AverageValue target: `milli` milli-units per pod.
    pub fn average_value(milli: i64) -> Self {
        MetricTarget {
            target_type: MetricTargetType::AverageValue,
            average_value: Some(milli),
            ..MetricTarget::default()
        }
    }

    /// A Value target: `milli` milli-units in total.
    pub fn value(milli: i64) -> Self {
        MetricTarget {
            target_type: MetricTargetType::Value,
            value: Some(milli),
            ..MetricTarget::default()
        }
    }
}

/// `MetricTargetType`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetricTargetType {
    /// Percent of the pods' requests (`average_utilization`); resource metrics only.
    #[default]
    Utilization,
    /// Per pod (`average_value`): the total divided by the replica count.
    AverageValue,
    /// The total (`value`); object and external metrics only.
    Value,
}

/// `HorizontalPodAutoscalerBehavior`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Behavior {
    /// `scaleUp`; absent: `GenerateHPAScaleUpRules`' defaults (no window, 4 pods or 100 %
    /// per 15 s, Max).
    pub scale_up: Option<ScalingRules>,
    /// `scaleDown`; absent: `GenerateHPAScaleDownRules`' defaults (the controller's
    /// downscale stabilization, 100 % per 15 s, Max).
    pub scale_down: Option<ScalingRules>,
}

/// `HPAScalingRules`; every field optional, completed by `GenerateHPAScale{Up,Down}Rules`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ScalingRules {
    /// How far back recommendations are considered (`stabilizeRecommendationWithBehaviors`);
    /// 0 to 3600.
    pub stabilization_window_seconds: Option<i32>,
    /// How the policies' limits combine; absent: Max.
    pub select_policy: Option<SelectPolicy>,
    /// `None`: the default policies. `Some(vec![])`: no policy at all (no scaling that way).
    pub policies: Option<Vec<ScalingPolicy>>,
    /// KEP-4951 per-direction tolerance, replacing the controller tolerance on that side.
    pub tolerance: Option<f64>,
}

/// `ScalingPolicySelect`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SelectPolicy {
    /// The policy allowing the largest change (the default).
    #[default]
    Max,
    /// The policy allowing the smallest change.
    Min,
    /// No scaling in this direction at all.
    Disabled,
}

/// `HPAScalingPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScalingPolicy {
    /// Whether `value` counts pods or percent of the replicas at the period's start.
    pub policy_type: ScalingPolicyType,
    /// The change allowed per period; positive.
    pub value: i32,
    /// The sliding window the change is counted over (`getReplicasChangePerPeriod`); 1 to 1800.
    pub period_seconds: i32,
}

/// `HPAScalingPolicyType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScalingPolicyType {
    /// `value` pods per period.
    Pods,
    /// `value` percent of the replicas at the start of the period.
    Percent,
}
