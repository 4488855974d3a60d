//! An `autoscaling/v2` HorizontalPodAutoscaler manifest (YAML or JSON, as `kubectl get hpa -o
//! yaml` prints it or as written for `kubectl apply`) as the [`api::HorizontalSpec`] of a
//! Recommend, so that a team migrating from Kubernetes can use the manifests it has.
//!
//! The fields follow `k8s.io/api/autoscaling/v2` `types.go` (`HorizontalPodAutoscalerSpec`,
//! `MetricSpec`, `MetricTarget`, `HorizontalPodAutoscalerBehavior`, `HPAScalingRules`).
//! `scaleTargetRef`, `status` and metric label selectors have no counterpart here: the caller
//! sends the observations (pods, metric values by name) itself, so they are ignored. Quantities
//! (`averageValue: 500m`, `value: 1Gi`) become milli-units, exactly `Quantity.MilliValue()`.

use serde::Deserialize;
use thiserror::Error;

use super::quantity::parse_milli;
use autoscaled_wire::pb::v1 as api;

/// Why a manifest cannot be used as a spec.
#[derive(Debug, Error)]
pub enum ManifestError {
    /// Not YAML, or not shaped like a HorizontalPodAutoscaler (the message names the field).
    #[error("{0}")]
    Parse(String),
    /// Well-formed, but not something the spec can say.
    #[error("{field}: {message}")]
    Invalid {
        /// The manifest's field, in its own camelCase path (`spec.metrics[0].type`).
        field: String,
        /// Why it cannot be expressed.
        message: String,
    },
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ManifestError {
    ManifestError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

/// A Kubernetes quantity in YAML: a string (`500m`, `1Gi`) or a plain number.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Quantity {
    Text(String),
    Int(i64),
    Float(f64),
}

impl Quantity {
    fn milli(&self, field: &str) -> Result<i64, ManifestError> {
        let text = match self {
            Quantity::Text(s) => s.clone(),
            Quantity::Int(i) => i.to_string(),
            Quantity::Float(f) => f.to_string(),
        };
        parse_milli(&text).map_err(|e| invalid(field, e.to_string()))
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    metadata: Metadata,
    spec: Option<HpaSpec>,
}

#[derive(Debug, Default, Deserialize)]
struct Metadata {
    name: Option<String>,
    namespace: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HpaSpec {
    min_replicas: Option<i32>,
    max_replicas: i32,
    #[serde(default)]
    metrics: Vec<Metric>,
    behavior: Option<Behavior>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Metric {
    #[serde(rename = "type")]
    kind: String,
    resource: Option<ResourceSource>,
    container_resource: Option<ResourceSource>,
    pods: Option<NamedSource>,
    object: Option<NamedSource>,
    external: Option<NamedSource>,
}

#[derive(Debug, Deserialize)]
struct ResourceSource {
    name: String,
    container: Option<String>,
    target: Target,
}

#[derive(Debug, Deserialize)]
struct NamedSource {
    metric: MetricIdentifier,
    target: Target,
}

#[derive(Debug, Deserialize)]
struct MetricIdentifier {
    name: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Target {
    #[serde(rename = "type")]
    kind: String,
    average_utilization: Option<i32>,
    average_value: Option<Quantity>,
    value: Option<Quantity>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Behavior {
    scale_up: Option<Rules>,
    scale_down: Option<Rules>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Rules {
    stabilization_window_seconds: Option<i32>,
    select_policy: Option<String>,
    policies: Option<Vec<Policy>>,
    tolerance: Option<Quantity>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Policy {
    #[serde(rename = "type")]
    kind: String,
    value: i32,
    period_seconds: i32,
}

/// The spec of the HorizontalPodAutoscaler in `text` and its `namespace/name` (the default
/// target key). A multi-document file must hold exactly one HorizontalPodAutoscaler.
pub fn parse_manifest(text: &str) -> Result<(api::HorizontalSpec, String), ManifestError> {
    let mut found = Vec::new();
    for (index, document) in serde_norway::Deserializer::from_str(text).enumerate() {
        let value = serde_norway::Value::deserialize(document)
            .map_err(|e| ManifestError::Parse(format!("document {}: {e}", index + 1)))?;
        if value.is_null() {
            continue;
        }
        let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
        if kind == "HorizontalPodAutoscaler" {
            found.push(index);
        }
    }
    let index = match found.len() {
        1 => found.remove(0),
        0 => return Err(invalid("kind", "no HorizontalPodAutoscaler in the file")),
        n => {
            return Err(invalid(
                "kind",
                format!("{n} HorizontalPodAutoscalers in the file; give one"),
            ));
        }
    };
    // Decoded again from the text (not from the Value), so that errors carry the field's
    // path and line: `spec.maxReplicas: invalid type: string "ten", expected i32 at line 12`.
    let document = serde_norway::Deserializer::from_str(text)
        .nth(index)
        .ok_or_else(|| ManifestError::Parse("the document went missing".to_owned()))?;
    let manifest =
        Manifest::deserialize(document).map_err(|e| ManifestError::Parse(e.to_string()))?;
    to_spec(manifest)
}

fn to_spec(manifest: Manifest) -> Result<(api::HorizontalSpec, String), ManifestError> {
    match manifest.api_version.as_deref() {
        Some("autoscaling/v2") => {}
        other => {
            return Err(invalid(
                "apiVersion",
                format!(
                    "must be autoscaling/v2, got {:?} (kubectl get hpa NAME -o yaml prints v2)",
                    other.unwrap_or("")
                ),
            ));
        }
    }
    debug_assert_eq!(manifest.kind.as_deref(), Some("HorizontalPodAutoscaler"));
    let spec = manifest.spec.ok_or_else(|| invalid("spec", "missing"))?;
    let metrics = spec
        .metrics
        .iter()
        .enumerate()
        .map(|(i, m)| metric(m, &format!("spec.metrics[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let behavior = spec
        .behavior
        .map(|b| -> Result<api::Behavior, ManifestError> {
            Ok(api::Behavior {
                scale_up: b
                    .scale_up
                    .map(|r| rules(r, "spec.behavior.scaleUp"))
                    .transpose()?,
                scale_down: b
                    .scale_down
                    .map(|r| rules(r, "spec.behavior.scaleDown"))
                    .transpose()?,
            })
        })
        .transpose()?;
    let name = manifest.metadata.name.unwrap_or_default();
    let namespace = manifest
        .metadata
        .namespace
        .unwrap_or_else(|| "default".to_owned());
    let key = if name.is_empty() {
        String::new()
    } else {
        format!("{namespace}/{name}")
    };
    Ok((
        api::HorizontalSpec {
            min_replicas: spec.min_replicas,
            max_replicas: spec.max_replicas,
            metrics,
            behavior,
            settings: None,
            ..Default::default()
        },
        key,
    ))
}

fn metric(m: &Metric, field: &str) -> Result<api::MetricSpec, ManifestError> {
    use api::MetricSourceType as T;
    let missing = |name: &str| {
        invalid(
            format!("{field}.{name}"),
            format!("missing for type {}", m.kind),
        )
    };
    let (kind, name, container, target, source) = match m.kind.as_str() {
        "Resource" => {
            let r = m.resource.as_ref().ok_or_else(|| missing("resource"))?;
            (T::Resource, &r.name, String::new(), &r.target, "resource")
        }
        "ContainerResource" => {
            let r = m
                .container_resource
                .as_ref()
                .ok_or_else(|| missing("containerResource"))?;
            (
                T::ContainerResource,
                &r.name,
                r.container.clone().unwrap_or_default(),
                &r.target,
                "containerResource",
            )
        }
        "Pods" => {
            let p = m.pods.as_ref().ok_or_else(|| missing("pods"))?;
            (T::Pods, &p.metric.name, String::new(), &p.target, "pods")
        }
        "Object" => {
            let o = m.object.as_ref().ok_or_else(|| missing("object"))?;
            (
                T::Object,
                &o.metric.name,
                String::new(),
                &o.target,
                "object",
            )
        }
        "External" => {
            let e = m.external.as_ref().ok_or_else(|| missing("external"))?;
            (
                T::External,
                &e.metric.name,
                String::new(),
                &e.target,
                "external",
            )
        }
        other => {
            return Err(invalid(
                format!("{field}.type"),
                format!(
                    "unknown metric source type {other:?} (Resource, ContainerResource, Pods, Object, External)"
                ),
            ));
        }
    };
    let target_field = format!("{field}.{source}.target");
    Ok(api::MetricSpec {
        r#type: kind as i32,
        name: name.clone(),
        container,
        target: Some(metric_target(target, &target_field)?),
        ..Default::default()
    })
}

fn metric_target(t: &Target, field: &str) -> Result<api::MetricTarget, ManifestError> {
    use api::MetricTargetType as T;
    let kind = match t.kind.as_str() {
        "Utilization" => T::Utilization,
        "AverageValue" => T::AverageValue,
        "Value" => T::Value,
        other => {
            return Err(invalid(
                format!("{field}.type"),
                format!("unknown target type {other:?} (Utilization, AverageValue, Value)"),
            ));
        }
    };
    Ok(api::MetricTarget {
        r#type: kind as i32,
        average_utilization: t.average_utilization,
        average_value_milli: t
            .average_value
            .as_ref()
            .map(|q| q.milli(&format!("{field}.averageValue")))
            .transpose()?,
        value_milli: t
            .value
            .as_ref()
            .map(|q| q.milli(&format!("{field}.value")))
            .transpose()?,
    })
}

fn rules(r: Rules, field: &str) -> Result<api::ScalingRules, ManifestError> {
    let select_policy = match r.select_policy.as_deref() {
        None => api::SelectPolicy::Unspecified,
        Some("Max") => api::SelectPolicy::Max,
        Some("Min") => api::SelectPolicy::Min,
        Some("Disabled") => api::SelectPolicy::Disabled,
        Some(other) => {
            return Err(invalid(
                format!("{field}.selectPolicy"),
                format!("unknown select policy {other:?} (Max, Min, Disabled)"),
            ));
        }
    };
    let policies_set = r.policies.is_some();
    let policies = r
        .policies
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let r#type = match p.kind.as_str() {
                "Pods" => api::ScalingPolicyType::Pods,
                "Percent" => api::ScalingPolicyType::Percent,
                other => {
                    return Err(invalid(
                        format!("{field}.policies[{i}].type"),
                        format!("unknown policy type {other:?} (Pods, Percent)"),
                    ));
                }
            };
            Ok(api::ScalingPolicy {
                r#type: r#type as i32,
                value: p.value,
                period_seconds: p.period_seconds,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let tolerance = r
        .tolerance
        .map(|q| {
            q.milli(&format!("{field}.tolerance"))
                .map(|m| m as f64 / 1000.0)
        })
        .transpose()?;
    Ok(api::ScalingRules {
        stabilization_window_seconds: r.stabilization_window_seconds,
        select_policy: select_policy as i32,
        policies,
        policies_set,
        tolerance,
    })
}
