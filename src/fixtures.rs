//! Request fixtures: the one place tests, benchmarks and examples build a `RecommendRequest`
//! or a `RecordUsageRequest` (issue 15: the same request was written by hand in a dozen
//! files, and the copies had started to drift).
//!
//! ```
//! use autoscaled::fixtures;
//!
//! // Ten ready pods using 600m of 1000m cpu against a 50 % utilization target,
//! // evaluated at a fixed instant (seconds since the Unix epoch).
//! let request = fixtures::recommend("prod/web")
//!     .pods(10)
//!     .cpu_usage_milli(600)
//!     .at(1_767_225_600)
//!     .build();
//! assert_eq!(request.current_replicas, 10);
//! assert_eq!(request.pods.len(), 10);
//! ```
//!
//! Every pod is `Running`, started `start_age` seconds before the evaluation instant,
//! ready since `ready_age` seconds before it (unless it is one of the last `unready`), and
//! carries one `cpu` sample taken `sample_age` seconds before it over a 60 s window: the
//! shape the metrics server hands the HPA controller
//! (`replica_calculator.go`, `GetResourceReplicas`). Without [`Recommend::at`] the
//! instant is the wall clock when [`Recommend::build`] runs and `evaluation_time` is left
//! unset, so a server judges the request by its own clock.

use std::time::{SystemTime, UNIX_EPOCH};

use prost_types::{Duration, Timestamp};

use crate::pb::v1 as pb;

/// A `Resource` metric on `cpu` with an `Utilization` target of `percent`.
pub fn cpu_utilization(percent: i32) -> pb::MetricSpec {
    pb::MetricSpec {
        r#type: pb::MetricSourceType::Resource as i32,
        name: "cpu".to_owned(),
        container: String::new(),
        target: Some(pb::MetricTarget {
            r#type: pb::MetricTargetType::Utilization as i32,
            average_utilization: Some(percent),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Seconds since the Unix epoch by the system clock (0 before 1970).
pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn ts(seconds: i64) -> Timestamp {
    Timestamp { seconds, nanos: 0 }
}

/// Starts a [`Recommend`] builder for `target_key`: one ready pod named `web-0` using 500m
/// of a 1000m cpu request, against a 50 % cpu utilization target, between 1 and 10
/// replicas, default behavior and settings.
pub fn recommend(target_key: impl Into<String>) -> Recommend {
    Recommend {
        target_key: target_key.into(),
        pods: 1,
        current_replicas: None,
        min_replicas: Some(1),
        max_replicas: 10,
        metrics: vec![cpu_utilization(50)],
        behavior: None,
        cpu_request_milli: 1000,
        usage: Box::new(|_| 500),
        unready: 0,
        names: Box::new(|i| format!("web-{i}")),
        at: None,
        ready_age: 3500,
        start_age: 3600,
        sample_age: Some(10),
    }
}

/// `pods` ready pods named `pod-{i}`, each using 250m of a 500m cpu request: exactly at
/// the 50 % target, so the answer is "stay" whatever the count; `max_replicas` is 100 000 so
/// any count fits. The request of the overload benchmark and of the reliability tests.
pub fn at_target(target_key: impl Into<String>, pods: usize) -> Recommend {
    recommend(target_key)
        .pods(pods)
        .replicas(Some(1), 100_000)
        .cpu_request_milli(500)
        .cpu_usage_milli(250)
        .pod_names(|i| format!("pod-{i}"))
}

/// Builder of a `RecommendRequest`; see the [module documentation](self).
pub struct Recommend {
    target_key: String,
    pods: usize,
    current_replicas: Option<i32>,
    min_replicas: Option<i32>,
    max_replicas: i32,
    metrics: Vec<pb::MetricSpec>,
    behavior: Option<pb::Behavior>,
    cpu_request_milli: i64,
    usage: Box<dyn Fn(usize) -> i64>,
    unready: usize,
    names: Box<dyn Fn(usize) -> String>,
    at: Option<i64>,
    ready_age: i64,
    start_age: i64,
    sample_age: Option<i64>,
}

impl Recommend {
    /// `n` pods; `current_replicas` follows unless set with [`Self::current_replicas`].
    pub fn pods(mut self, n: usize) -> Self {
        self.pods = n;
        self
    }

    /// The workload's current replica count, when it differs from the pod count.
    pub fn current_replicas(mut self, n: i32) -> Self {
        self.current_replicas = Some(n);
        self
    }

    /// `spec.min_replicas` and `spec.max_replicas`.
    pub fn replicas(mut self, min: Option<i32>, max: i32) -> Self {
        self.min_replicas = min;
        self.max_replicas = max;
        self
    }

    /// Replaces the single cpu metric by a cpu utilization target of `percent`.
    pub fn cpu_utilization(mut self, percent: i32) -> Self {
        self.metrics = vec![cpu_utilization(percent)];
        self
    }

    /// Replaces the spec's metrics (empty: the server's default, 80 % cpu, as Kubernetes).
    pub fn metrics(mut self, metrics: Vec<pb::MetricSpec>) -> Self {
        self.metrics = metrics;
        self
    }

    /// `spec.behavior` (unset: the legacy path with its 5 min downscale stabilization).
    pub fn behavior(mut self, behavior: pb::Behavior) -> Self {
        self.behavior = Some(behavior);
        self
    }

    /// Each pod's cpu request in milli-cpu.
    pub fn cpu_request_milli(mut self, milli: i64) -> Self {
        self.cpu_request_milli = milli;
        self
    }

    /// Every pod uses `milli` milli-cpu.
    pub fn cpu_usage_milli(self, milli: i64) -> Self {
        self.cpu_usage_by(move |_| milli)
    }

    /// Pod `i` uses `usage(i)` milli-cpu.
    pub fn cpu_usage_by(mut self, usage: impl Fn(usize) -> i64 + 'static) -> Self {
        self.usage = Box::new(usage);
        self
    }

    /// The last `n` pods are not ready.
    pub fn unready_last(mut self, n: usize) -> Self {
        self.unready = n;
        self
    }

    /// Pod `i` is named `name(i)` (default `web-{i}`).
    pub fn pod_names(mut self, name: impl Fn(usize) -> String + 'static) -> Self {
        self.names = Box::new(name);
        self
    }

    /// Evaluated at `unix_secs` (sets `evaluation_time`); pod times are relative to it.
    pub fn at(mut self, unix_secs: i64) -> Self {
        self.at = Some(unix_secs);
        self
    }

    /// Pods became ready `ready` seconds and started `start` seconds before the instant.
    pub fn ages(mut self, ready: i64, start: i64) -> Self {
        self.ready_age = ready;
        self.start_age = start;
        self
    }

    /// Samples were taken `age` seconds before the instant (`None`: no sample timestamp).
    pub fn sample_age(mut self, age: Option<i64>) -> Self {
        self.sample_age = age;
        self
    }

    /// The request.
    pub fn build(self) -> pb::RecommendRequest {
        let now = self.at.unwrap_or_else(now_secs);
        let pods = (0..self.pods)
            .map(|i| pb::PodSample {
                name: (self.names)(i),
                phase: pb::PodPhase::Running as i32,
                ready: Some(i + self.unready < self.pods),
                ready_transition_time: Some(ts(now - self.ready_age)),
                start_time: Some(ts(now - self.start_age)),
                requests_milli: [("cpu".to_owned(), self.cpu_request_milli)].into(),
                metrics: [(
                    "cpu".to_owned(),
                    pb::MetricSample {
                        value_milli: Some((self.usage)(i)),
                        timestamp: self.sample_age.map(|age| ts(now - age)),
                        window: Some(Duration {
                            seconds: 60,
                            nanos: 0,
                        }),
                    },
                )]
                .into(),
                ..Default::default()
            })
            .collect();
        pb::RecommendRequest {
            target_key: self.target_key,
            current_replicas: self
                .current_replicas
                .unwrap_or_else(|| i32::try_from(self.pods).unwrap_or(i32::MAX)),
            spec: Some(pb::HorizontalSpec {
                min_replicas: self.min_replicas,
                max_replicas: self.max_replicas,
                metrics: self.metrics,
                behavior: self.behavior,
                ..Default::default()
            }),
            pods,
            evaluation_time: self.at.map(ts),
            ..Default::default()
        }
    }
}

/// Starts a [`Usage`] builder for `target_key`: per-minute cpu and memory samples of one
/// container (`web-0`/`app`), ending at the evaluation instant, with no OOM and default
/// settings.
pub fn usage(target_key: impl Into<String>) -> Usage {
    Usage {
        target_key: target_key.into(),
        pod: "web-0".to_owned(),
        container: "app".to_owned(),
        minutes: 60,
        at: 0,
        oom_bytes: None,
        settings: None,
    }
}

/// Builder of a VPA `RecordUsageRequest`; see [`usage`].
pub struct Usage {
    target_key: String,
    pod: String,
    container: String,
    minutes: i64,
    at: i64,
    oom_bytes: Option<i64>,
    settings: Option<pb::VerticalSettings>,
}

impl Usage {
    /// The pod and container the samples describe.
    pub fn container(mut self, pod: &str, container: &str) -> Self {
        self.pod = pod.to_owned();
        self.container = container.to_owned();
        self
    }

    /// `n` minutes of samples, the first `n` minutes before the instant.
    pub fn minutes(mut self, n: i64) -> Self {
        self.minutes = n;
        self
    }

    /// Evaluated at `unix_secs` (sets `evaluation_time`).
    pub fn at(mut self, unix_secs: i64) -> Self {
        self.at = unix_secs;
        self
    }

    /// An OOM of the container at `memory_bytes`, one minute before the instant.
    pub fn oom(mut self, memory_bytes: i64) -> Self {
        self.oom_bytes = Some(memory_bytes);
        self
    }

    /// The target's VPA settings.
    pub fn settings(mut self, settings: pb::VerticalSettings) -> Self {
        self.settings = Some(settings);
        self
    }

    /// The request: minute `m` has cpu `200 + (31 m mod 170)` milli-cpu and memory
    /// `300 MiB + (7 m mod 50) MiB`, so the percentiles are spread but deterministic.
    pub fn build(self) -> pb::RecordUsageRequest {
        const MIB: i64 = 1024 * 1024;
        let start = self.at - self.minutes * 60;
        let mut samples = Vec::new();
        for m in 0..self.minutes {
            for (resource, value) in [
                (pb::Resource::Cpu, 200 + (m * 31) % 170),
                (pb::Resource::Memory, 300 * MIB + (m * 7) % 50 * MIB),
            ] {
                samples.push(pb::UsageSample {
                    pod: self.pod.clone(),
                    container: self.container.clone(),
                    resource: resource as i32,
                    value: value as f64,
                    timestamp: Some(ts(start + m * 60)),
                });
            }
        }
        pb::RecordUsageRequest {
            target_key: self.target_key,
            samples,
            oom_events: self
                .oom_bytes
                .map(|memory_bytes| pb::OomEvent {
                    pod: self.pod.clone(),
                    container: self.container.clone(),
                    timestamp: Some(ts(self.at - 60)),
                    memory_bytes,
                })
                .into_iter()
                .collect(),
            settings: self.settings,
            evaluation_time: Some(ts(self.at)),
        }
    }
}
