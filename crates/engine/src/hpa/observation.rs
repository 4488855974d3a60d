//! One reconciliation's snapshot of the scale target: what Kubernetes reads from the scale
//! subresource, the pod lister and the metrics APIs. Quantities are milli-units
//! (`Quantity.MilliValue()`).

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use serde::{Deserialize, Serialize};

use crate::time::Time;

/// The inputs of one evaluation besides spec, settings, history and `now`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// `scale.spec.replicas`.
    pub current_replicas: i32,
    /// `scale.status.replicas`; absent: `current_replicas`.
    pub status_replicas: Option<i32>,
    /// The pods selected by the target.
    pub pods: Vec<Pod>,
    /// Samples the metrics API returned for pods not in `pods`: pod → metric → sample.
    pub orphan_samples: BTreeMap<String, BTreeMap<String, MetricSample>>,
    /// Object metric values by metric name.
    pub object_metrics: BTreeMap<String, i64>,
    /// External metric values by metric name, summed as Kubernetes does.
    pub external_metrics: BTreeMap<String, Vec<i64>>,
    /// Metrics (or resource names) whose fetch failed.
    pub unavailable_metrics: BTreeSet<String>,
}

/// A selected pod and its samples.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Pod {
    /// `metadata.name`: identifies the pod in samples, groups and removal candidates.
    pub name: String,
    /// `status.phase`: failed pods are ignored (`groupPods`).
    pub phase: PodPhase,
    /// Has a deletion timestamp.
    pub deleting: bool,
    /// The Ready condition; `None` when the pod has none.
    pub ready: Option<bool>,
    /// Last transition of the Ready condition.
    #[serde(default, with = "crate::time::serde_millis_option")]
    pub ready_transition: Option<Time>,
    /// `status.startTime`; `None` when unset.
    #[serde(default, with = "crate::time::serde_millis_option")]
    pub start_time: Option<Time>,
    /// Requests by resource, summed over containers as `calculateRequests` does; a missing
    /// resource means the pod has no request for it.
    pub requests: BTreeMap<String, i64>,
    /// Per-container requests and usage (ContainerResource metrics).
    pub containers: Vec<Container>,
    /// Samples by metric or resource name.
    pub metrics: BTreeMap<String, MetricSample>,
}

/// `PodPhase`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum PodPhase {
    /// Bound and running (the default, as most callers only send running pods).
    #[default]
    Running,
    /// Accepted, not yet running: counted as not ready.
    Pending,
    /// Terminated successfully.
    Succeeded,
    /// Terminated in failure: ignored by `groupPods`.
    Failed,
    /// The kubelet could not report the phase.
    Unknown,
}

/// A container's requests and usage by resource.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Container {
    /// The container's name, as a ContainerResource metric names it.
    pub name: String,
    /// Requests by resource (milli-units).
    pub requests: BTreeMap<String, i64>,
    /// Usage by resource (milli-units), from the metrics API.
    pub usage: BTreeMap<String, i64>,
}

/// A metrics API sample.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricSample {
    /// `None`: the API has an item for the pod but no pod-level value (a container lacks the
    /// resource), so the pod is missing for a Resource metric.
    pub value: Option<i64>,
    /// When the sample was taken: with `window`, decides whether a recently ready pod's
    /// sample counts (`groupPods`).
    #[serde(with = "crate::time::serde_millis")]
    pub timestamp: Time,
    /// The interval the sample averages over.
    pub window: Duration,
}
