//! One period's observations of a target, as the HPA controller would gather them: the
//! current count from the scheduler, the pods and their samples from Prometheus (or all of it
//! from a command), mapped onto the `RecommendRequest` fields `docs/adapters.md` describes.
//!
//! Instances are the series of the `ready` query (value 1: ready). Prometheus lags a scale by
//! seconds (its discovery applies target changes every 5 s), so its instance count is not the
//! replica count: `current_replicas` is the scheduler's, and the difference is handled as
//! Kubernetes handles the pods it lists:
//!
//! * fewer instances than replicas: the rest are started but not yet scraped, sent as
//!   `Pending` pods (unready in `groupPods`: 0 % on a scale-up, left out on a scale-down);
//! * more instances than replicas: the surplus among the instances that are not up (their
//!   process is gone; Prometheus still lists them until its next discovery update) is sent as
//!   being deleted (`deleting`: ignored, as a pod with a deletion timestamp).
//!
//! A query that fails makes its metric unavailable (`unavailable_metrics`: the metric's
//! `FailedGet*Metric`), never a zero; an instance without a sample is a missing pod.

use std::{
    collections::{BTreeMap, HashMap},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use autoscaled_wire::pb::v1 as pb;
use prost_types::Timestamp;

use crate::{
    config::{
        DEFAULT_RESOURCE_WINDOW, MetricQuery, PodQueries, PrometheusSource, Request, Source, Target,
    },
    http::Client,
    prometheus::{self, Sample, by_label, milli},
};

/// What the agent remembers of a target's instances between periods: when each was first
/// seen in its current readiness (the Ready condition's last transition, which Prometheus
/// does not give).
#[derive(Debug, Default)]
pub struct Memory {
    /// Per instance: its readiness, since when, and the start time it had then (a restart
    /// at the same address is a new instance).
    readiness: HashMap<String, (bool, SystemTime, Option<SystemTime>)>,
    /// When the agent last scaled the target down: for a while after, Prometheus still lists
    /// the stopped instances (its discovery applies changes every 5 s), some still up.
    pub scaled_down_at: Option<SystemTime>,
}

/// How long after its own scale-down the agent takes surplus instances that are still up as
/// the stopped ones: Prometheus' discovery lag (up to ~7 s measured) and a scrape.
const SCALE_DOWN_LAG: Duration = Duration::from_secs(15);

/// One failed query, for the log and the metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct QueryFailure {
    /// `ready`, `start_time`, `requests.cpu` or the metric's name.
    pub what: String,
    pub error: String,
}

/// The request (without `target_key` and `spec`, which the loop sets) and the failures.
pub struct Observed {
    pub request: pb::RecommendRequest,
    pub failures: Vec<QueryFailure>,
}

fn timestamp(t: SystemTime) -> Timestamp {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    Timestamp {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// A metric's samples, one per instance: their values, when Prometheus evaluated the query,
/// and the window the samples carry.
struct PerPod {
    values: BTreeMap<String, f64>,
    evaluated: f64,
    window: Option<Duration>,
}

/// Prometheus observations for `target` at `current` replicas, its metrics being `metrics`
/// (the spec's, or with a policy the policy's).
pub async fn from_prometheus(
    client: &Client,
    target: &Target,
    metrics: &[pb::MetricSpec],
    current: i32,
    memory: &mut Memory,
) -> Observed {
    let Source::Prometheus(source) = &target.source else {
        unreachable!("from_prometheus on a command source");
    };
    let PrometheusSource {
        url,
        timeout,
        pods,
        metrics: queries,
    } = source;
    let mut failures = Vec::new();
    let run = |q: String| {
        let client = client.clone();
        let url = url.clone();
        let timeout = *timeout;
        async move { prometheus::query(&client, &url, &q, timeout).await }
    };
    // Every query of the period at once: a period costs the slowest query, not their sum.
    let metric_queries: Vec<(String, MetricQuery)> = queries
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let metric_results =
        futures_util::future::join_all(metric_queries.iter().map(|(_, q)| run(q.query.clone())));
    let pod_results = async {
        match pods {
            Some(p) => Some(pod_queries(p, &run).await),
            None => None,
        }
    };
    let (metric_results, pod_results) = tokio::join!(metric_results, pod_results);

    let mut request = pb::RecommendRequest {
        current_replicas: current,
        ..Default::default()
    };
    let now = SystemTime::now();
    let mut per_pod: BTreeMap<String, PerPod> = BTreeMap::new();
    for ((name, query), result) in metric_queries.iter().zip(metric_results) {
        let spec = metrics.iter().find(|m| &m.name == name);
        let kind = spec.map_or(0, |m| m.r#type);
        match result {
            Err(error) => {
                request.unavailable_metrics.push(name.clone());
                failures.push(QueryFailure {
                    what: name.clone(),
                    error,
                });
            }
            Ok(samples) if kind == pb::MetricSourceType::Object as i32 => match samples.first() {
                Some(s) => {
                    request
                        .object_metrics_milli
                        .insert(name.clone(), milli(s.value));
                }
                None => {
                    request.unavailable_metrics.push(name.clone());
                    failures.push(QueryFailure {
                        what: name.clone(),
                        error: "the query returned no series".to_owned(),
                    });
                }
            },
            Ok(samples) if kind == pb::MetricSourceType::External as i32 => {
                // Each series is one value; the server sums them, as Kubernetes sums an
                // External metric's items.
                request.external_metrics.insert(
                    name.clone(),
                    pb::ExternalMetricValues {
                        values_milli: samples.iter().map(|s| milli(s.value)).collect(),
                    },
                );
            }
            Ok(samples) => {
                let label = pods.as_ref().map_or("instance", |p| p.label.as_str());
                // A Resource metric's samples carry metrics-server's window unless the file
                // gives one; a Pods metric's keep the custom metrics path's (none: the
                // server's default), which no Kubernetes rule reads.
                let window = if kind == pb::MetricSourceType::Resource as i32 {
                    Some(query.window.unwrap_or(DEFAULT_RESOURCE_WINDOW))
                } else {
                    query.window
                };
                per_pod.insert(
                    name.clone(),
                    PerPod {
                        values: by_label(&samples, label),
                        evaluated: samples.first().map_or_else(|| unix(now), |s| s.time),
                        window,
                    },
                );
            }
        }
    }
    if let (Some(queries), Some(results)) = (pods, pod_results) {
        let PodResults {
            ready,
            scraped,
            start,
            requests,
        } = results;
        let ready = match ready {
            Ok(r) => Some(by_label(&r, &queries.label)),
            Err(error) => {
                failures.push(QueryFailure {
                    what: "ready".to_owned(),
                    error,
                });
                None
            }
        };
        // When each instance was last scraped: the time its samples were taken. A failure
        // leaves the queries' evaluation times.
        let scraped = match scraped {
            Ok(s) => by_label(&s, &queries.label),
            Err(error) => {
                failures.push(QueryFailure {
                    what: "timestamp(ready)".to_owned(),
                    error,
                });
                BTreeMap::new()
            }
        };
        let start = match start {
            Some(Ok(s)) => by_label(&s, &queries.label),
            Some(Err(error)) => {
                failures.push(QueryFailure {
                    what: "start_time".to_owned(),
                    error,
                });
                BTreeMap::new()
            }
            None => BTreeMap::new(),
        };
        let mut request_values: BTreeMap<String, Result<BTreeMap<String, f64>, i64>> =
            BTreeMap::new();
        for (resource, r) in requests {
            match r {
                RequestResult::Milli(m) => {
                    request_values.insert(resource, Err(m));
                }
                RequestResult::Query(Ok(s)) => {
                    request_values.insert(resource, Ok(by_label(&s, &queries.label)));
                }
                RequestResult::Query(Err(error)) => failures.push(QueryFailure {
                    what: format!("requests.{resource}"),
                    error,
                }),
            }
        }
        match ready {
            None => {
                // Without the instance list no per-pod metric can be computed: each is
                // unavailable this period (Kubernetes: the pod lister failed).
                for name in per_pod.keys() {
                    if !request.unavailable_metrics.contains(name) {
                        request.unavailable_metrics.push(name.clone());
                    }
                }
            }
            Some(ready) => {
                request.pods = pods_of(
                    &target.key,
                    current,
                    &Instances {
                        ready: &ready,
                        scraped: &scraped,
                        start: &start,
                        requests: &request_values,
                    },
                    &per_pod,
                    now,
                    memory,
                );
            }
        }
    }
    Observed { request, failures }
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

fn from_unix(secs: f64) -> Option<SystemTime> {
    Duration::try_from_secs_f64(secs)
        .ok()
        .and_then(|d| UNIX_EPOCH.checked_add(d))
}

/// What Prometheus says of each instance, by the instance's label value.
struct Instances<'a> {
    ready: &'a BTreeMap<String, f64>,
    /// `timestamp(ready)`: the instance's last scrape (Unix seconds).
    scraped: &'a BTreeMap<String, f64>,
    start: &'a BTreeMap<String, f64>,
    requests: &'a BTreeMap<String, Result<BTreeMap<String, f64>, i64>>,
}

/// The pods: one per instance, then the placeholders and the deletions that reconcile the
/// instance count with the scheduler's.
fn pods_of(
    key: &str,
    current: i32,
    instances: &Instances<'_>,
    metrics: &BTreeMap<String, PerPod>,
    now: SystemTime,
    memory: &mut Memory,
) -> Vec<pb::PodSample> {
    let Instances {
        ready,
        scraped,
        start,
        requests,
    } = *instances;
    let mut pods = Vec::new();
    memory
        .readiness
        .retain(|instance, _| ready.contains_key(instance));
    for (instance, up) in ready {
        let is_ready = *up == 1.0;
        // A start time in the future (or in milliseconds) is no start time.
        let start_time = start
            .get(instance)
            .filter(|s| **s > 0.0)
            .and_then(|s| from_unix(*s))
            .filter(|t| *t <= now);
        let since = match memory.readiness.get(instance) {
            Some((r, since, started)) if *r == is_ready && *started == start_time => *since,
            // A new readiness, or a restart at the same address.
            Some(_) => now,
            // First seen: ready since it started, as far as anyone knows.
            None => start_time.filter(|_| is_ready).unwrap_or(now),
        };
        let since = start_time.map_or(since, |s| since.max(s));
        memory
            .readiness
            .insert(instance.clone(), (is_ready, since, start_time));
        let mut pod = pb::PodSample {
            name: instance.clone(),
            phase: pb::PodPhase::Running as i32,
            ready: Some(is_ready),
            ready_transition_time: Some(timestamp(since)),
            start_time: start_time.map(timestamp),
            ..Default::default()
        };
        for (resource, r) in requests {
            let value = match r {
                Err(m) => Some(*m),
                Ok(by_instance) => by_instance.get(instance).map(|v| milli(*v)),
            };
            if let Some(v) = value {
                pod.requests_milli.insert(resource.clone(), v);
            }
        }
        for (name, per) in metrics {
            if let Some(v) = per.values.get(instance) {
                // Taken at the instance's last scrape (metrics-server stamps a sample when
                // it measured it), never after the query's evaluation.
                let taken = scraped
                    .get(instance)
                    .map_or(per.evaluated, |t| t.min(per.evaluated));
                pod.metrics.insert(
                    name.clone(),
                    pb::MetricSample {
                        value_milli: Some(milli(*v)),
                        timestamp: from_unix(taken).map(timestamp),
                        window: per.window.map(|w| prost_types::Duration {
                            seconds: i64::try_from(w.as_secs()).unwrap_or(i64::MAX),
                            nanos: i32::try_from(w.subsec_nanos()).unwrap_or(0),
                        }),
                    },
                );
            }
        }
        pods.push(pod);
    }
    let current = usize::try_from(current).unwrap_or(0);
    if pods.len() > current {
        // Instances Prometheus lists beyond the replica count. Those not up are gone (their
        // process stopped; Prometheus drops them at its next discovery update): being
        // deleted, as a pod with a deletion timestamp. Those up count, as Kubernetes counts
        // every running pod (a rolling update or canaries run more than the count), except
        // just after the agent's own scale-down, when the surplus up ones are the stopped
        // instances not scraped since: the newest started, which a scale-down removes first
        // as a ReplicaSet does (`getPodsToDelete`).
        let just_scaled_down = memory
            .scaled_down_at
            .is_some_and(|t| now.duration_since(t).unwrap_or_default() < SCALE_DOWN_LAG);
        let mut order: Vec<usize> = (0..pods.len())
            .filter(|&i| pods[i].ready != Some(true) || just_scaled_down)
            .collect();
        order.sort_by_key(|&i| {
            let p = &pods[i];
            let started = p.start_time.map_or(i64::MAX, |t| t.seconds);
            (p.ready == Some(true), std::cmp::Reverse(started))
        });
        for &i in order.iter().take(pods.len() - current) {
            pods[i].deleting = true;
        }
    }
    // Started, not scraped yet: Pending, with the requests every instance has (a pending pod
    // has its spec's; Kubernetes sums the requests of every pod it lists, so one without
    // them fails a Utilization target with "missing request").
    let placeholder_requests: BTreeMap<String, i64> = requests
        .iter()
        .filter_map(|(resource, r)| {
            let value = match r {
                Err(m) => Some(*m),
                Ok(by_instance) => most_common(by_instance.values().map(|v| milli(*v))),
            };
            value.map(|v| (resource.clone(), v))
        })
        .collect();
    for i in pods.len()..current {
        pods.push(pb::PodSample {
            name: format!("{key}#unscraped-{}", i + 1),
            phase: pb::PodPhase::Pending as i32,
            requests_milli: placeholder_requests.clone().into_iter().collect(),
            ..Default::default()
        });
    }
    pods
}

/// The value most instances share (the smallest of equally common ones): what a new
/// instance of the same service requests.
fn most_common(values: impl Iterator<Item = i64>) -> Option<i64> {
    let mut counts: BTreeMap<i64, usize> = BTreeMap::new();
    for v in values {
        *counts.entry(v).or_default() += 1;
    }
    let most = counts.values().copied().max()?;
    counts.into_iter().find(|(_, n)| *n == most).map(|(v, _)| v)
}

struct PodResults {
    ready: Result<Vec<Sample>, String>,
    scraped: Result<Vec<Sample>, String>,
    start: Option<Result<Vec<Sample>, String>>,
    requests: Vec<(String, RequestResult)>,
}

enum RequestResult {
    Milli(i64),
    Query(Result<Vec<Sample>, String>),
}

async fn pod_queries<F, Fut>(p: &PodQueries, run: &F) -> PodResults
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Sample>, String>>,
{
    let start = async {
        match &p.start_time {
            Some(q) => Some(run(q.clone()).await),
            None => None,
        }
    };
    let requests =
        futures_util::future::join_all(p.requests.iter().map(|(resource, r)| async move {
            match r {
                Request::Milli(m) => (resource.clone(), RequestResult::Milli(*m)),
                Request::Query(q) => (resource.clone(), RequestResult::Query(run(q.clone()).await)),
            }
        }));
    // timestamp() of the ready series (`up`, a plain selector) is each instance's last scrape.
    let (ready, scraped, start, requests) = tokio::join!(
        run(p.ready.clone()),
        run(format!("timestamp({})", p.ready)),
        start,
        requests
    );
    PodResults {
        ready,
        scraped,
        start,
        requests,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, f64)]) -> BTreeMap<String, f64> {
        entries.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    fn load(values: BTreeMap<String, f64>, window: Option<Duration>) -> BTreeMap<String, PerPod> {
        BTreeMap::from([(
            "load".to_owned(),
            PerPod {
                values,
                evaluated: 2_000_000.0,
                window,
            },
        )])
    }

    fn pods(
        current: i32,
        ready: &BTreeMap<String, f64>,
        start: &BTreeMap<String, f64>,
        metrics: &BTreeMap<String, PerPod>,
        now: SystemTime,
        memory: &mut Memory,
    ) -> Vec<pb::PodSample> {
        pods_of(
            "web",
            current,
            &Instances {
                ready,
                scraped: &BTreeMap::new(),
                start,
                requests: &BTreeMap::new(),
            },
            metrics,
            now,
            memory,
        )
    }

    /// Two instances listed, three replicas: the third is a pending placeholder. Three listed
    /// (one down), two replicas: the one down is being deleted.
    #[test]
    fn instance_counts_are_reconciled_with_the_schedulers() {
        let mut memory = Memory::default();
        let now = SystemTime::now();
        let metrics = load(map(&[("a", 5.0), ("b", 7.0)]), None);
        let p = pods(
            3,
            &map(&[("a", 1.0), ("b", 1.0)]),
            &map(&[("a", 1000.0)]),
            &metrics,
            now,
            &mut memory,
        );
        assert_eq!(p.len(), 3);
        assert_eq!(p[2].phase, pb::PodPhase::Pending as i32);
        assert_eq!(p[0].metrics["load"].value_milli, Some(5000));
        assert!(p[1].start_time.is_none());

        let p = pods(
            2,
            &map(&[("a", 1.0), ("b", 1.0), ("c", 0.0)]),
            &BTreeMap::new(),
            &metrics,
            now,
            &mut memory,
        );
        assert_eq!(p.len(), 3);
        assert!(p[2].deleting && !p[0].deleting && !p[1].deleting);

        // All up and no scale-down of ours: every one counts (a rolling update).
        let all_up = map(&[("a", 1.0), ("b", 1.0), ("c", 1.0)]);
        let starts = map(&[("a", 100.0), ("b", 300.0), ("c", 200.0)]);
        let p = pods(2, &all_up, &starts, &metrics, now, &mut memory);
        assert!(p.iter().all(|p| !p.deleting));
        // All still up just after the agent scaled down (the stopped one not scraped since):
        // the newest started goes.
        memory.scaled_down_at = Some(now);
        let p = pods(2, &all_up, &starts, &metrics, now, &mut memory);
        let deleting: Vec<&str> = p
            .iter()
            .filter(|p| p.deleting)
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(deleting, ["b"]);
    }

    /// The Ready transition is when the agent first saw the current readiness.
    #[test]
    fn readiness_transitions_are_remembered() {
        let mut memory = Memory::default();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let t1 = t0 + Duration::from_secs(15);
        let none = BTreeMap::new();
        let no_metrics = BTreeMap::new();
        let p = pods(1, &map(&[("a", 0.0)]), &none, &no_metrics, t0, &mut memory);
        assert_eq!(p[0].ready_transition_time, Some(timestamp(t0)));
        let p = pods(1, &map(&[("a", 1.0)]), &none, &no_metrics, t1, &mut memory);
        assert_eq!(p[0].ready_transition_time, Some(timestamp(t1)));
        let later = t1 + Duration::from_secs(15);
        let p = pods(
            1,
            &map(&[("a", 1.0)]),
            &none,
            &no_metrics,
            later,
            &mut memory,
        );
        assert_eq!(p[0].ready_transition_time, Some(timestamp(t1)));
    }

    /// A sample is stamped when its instance was last scraped (never after the query's
    /// evaluation) and carries its metric's window; placeholders carry the requests every
    /// instance has, so a Utilization target can sum them.
    #[test]
    fn samples_carry_their_scrape_time_and_window_and_placeholders_their_requests() {
        let mut memory = Memory::default();
        let now = UNIX_EPOCH + Duration::from_secs(2_000_000);
        let metrics = load(
            map(&[("a", 0.7), ("b", 0.9)]),
            Some(Duration::from_secs(15)),
        );
        let requests = BTreeMap::from([
            ("cpu".to_owned(), Err(500)),
            (
                "memory".to_owned(),
                Ok(map(&[("a", 1.0), ("b", 1.0), ("c", 2.0)])),
            ),
        ]);
        let p = pods_of(
            "web",
            4,
            &Instances {
                ready: &map(&[("a", 1.0), ("b", 1.0)]),
                scraped: &map(&[("a", 1_999_999.25), ("b", 2_000_005.0)]),
                start: &BTreeMap::new(),
                requests: &requests,
            },
            &metrics,
            now,
            &mut memory,
        );
        let a = &p[0].metrics["load"];
        assert_eq!(
            a.timestamp,
            Some(Timestamp {
                seconds: 1_999_999,
                nanos: 250_000_000
            })
        );
        assert_eq!(a.window.map(|w| w.seconds), Some(15));
        // A scrape stamped after the evaluation: the evaluation's time.
        assert_eq!(
            p[1].metrics["load"].timestamp.map(|t| t.seconds),
            Some(2_000_000)
        );
        for placeholder in &p[2..] {
            assert_eq!(placeholder.phase, pb::PodPhase::Pending as i32);
            assert_eq!(placeholder.requests_milli.get("cpu"), Some(&500));
            assert_eq!(placeholder.requests_milli.get("memory"), Some(&1000));
        }
    }
}
