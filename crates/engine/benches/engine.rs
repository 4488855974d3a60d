//! The pure HPA decision (`engine::hpa::evaluate`) for 10, 100 and 1,000 pods with one metric
//! (cpu utilization) and three (cpu utilization, a Pods metric, an External metric), on the
//! legacy path with a stored history.

use std::{
    collections::{BTreeMap, BTreeSet},
    hint::black_box,
    time::Duration,
};

use autoscaled_engine::{
    hpa,
    hpa::history::{History, Recommendation},
    hpa::observation::{MetricSample, Observation, Pod, PodPhase},
    hpa::settings::Settings,
    hpa::spec::{HorizontalSpec, MetricSpec, MetricTarget, MetricTargetType},
    time::Time,
};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

const NOW: Time = Time::from_unix_secs(1_767_225_600);

fn sample(value: i64) -> MetricSample {
    MetricSample {
        value: Some(value),
        timestamp: NOW.plus_secs(-10),
        window: Duration::from_secs(60),
    }
}

fn observation(pods: usize) -> Observation {
    Observation {
        current_replicas: i32::try_from(pods).expect("pod count fits"),
        status_replicas: None,
        pods: (0..pods)
            .map(|i| Pod {
                name: format!("pod-{i:05}"),
                phase: PodPhase::Running,
                deleting: false,
                ready: Some(true),
                ready_transition: Some(NOW.plus_secs(-3_000)),
                start_time: Some(NOW.plus_secs(-3_600)),
                requests: BTreeMap::from([("cpu".to_string(), 500)]),
                containers: vec![],
                metrics: BTreeMap::from([
                    ("cpu".to_string(), sample(300 + (i as i64 % 200))),
                    ("qps".to_string(), sample(9_000 + (i as i64 % 3_000))),
                ]),
            })
            .collect(),
        orphan_samples: BTreeMap::new(),
        object_metrics: BTreeMap::new(),
        external_metrics: BTreeMap::from([("queue".to_string(), vec![40_000, 60_000])]),
        unavailable_metrics: BTreeSet::new(),
    }
}

fn target(target_type: MetricTargetType) -> MetricTarget {
    MetricTarget {
        target_type,
        ..MetricTarget::default()
    }
}

fn spec(metrics: usize) -> HorizontalSpec {
    let all = [
        MetricSpec::Resource {
            name: "cpu".into(),
            target: MetricTarget {
                average_utilization: Some(60),
                ..target(MetricTargetType::Utilization)
            },
        },
        MetricSpec::Pods {
            name: "qps".into(),
            target: MetricTarget {
                average_value: Some(10_000),
                ..target(MetricTargetType::AverageValue)
            },
        },
        MetricSpec::External {
            name: "queue".into(),
            target: MetricTarget {
                value: Some(50_000),
                ..target(MetricTargetType::Value)
            },
        },
    ];
    HorizontalSpec::new(Some(1), 5_000, all[..metrics].to_vec())
}

fn history() -> History {
    History {
        recommendations: Some(
            (0..20)
                .map(|i| Recommendation {
                    replicas: 10 + i,
                    time: NOW.plus_secs(-15 * i64::from(i)),
                })
                .collect(),
        ),
        ..History::default()
    }
}

fn bench_evaluate(c: &mut Criterion) {
    let settings = Settings::default();
    let history = history();
    let mut group = c.benchmark_group("evaluate");
    for metrics in [1, 3] {
        let spec = spec(metrics);
        for pods in [10, 100, 1_000] {
            let obs = observation(pods);
            // The decision must be a real one, not a rejection.
            hpa::evaluate(&settings, &spec, &obs, &history, NOW).expect("valid benchmark input");
            group.bench_with_input(
                BenchmarkId::new(format!("{metrics}_metric"), pods),
                &obs,
                |b, obs| {
                    b.iter(|| {
                        hpa::evaluate(
                            black_box(&settings),
                            black_box(&spec),
                            black_box(obs),
                            black_box(&history),
                            NOW,
                        )
                    })
                },
            );
        }
    }
    group.finish();
}

/// What `spec.predictive` adds to a decision (10 pods, cpu): off, and `forecast_only` /
/// `scale_up` with a model warmed by two days of decisions a minute apart, decided a minute
/// after the last (so the model observes, forecasts and records, as at every cadence). The
/// history (the model included) is cloned by every evaluation, as it is by `Recommend`.
fn bench_predictive(c: &mut Criterion) {
    use hpa::predictive::{PredictiveMode, PredictiveSpec};
    let settings = Settings::default();
    let obs = observation(10);
    let mut group = c.benchmark_group("predictive");
    for mode in [
        None,
        Some(PredictiveMode::ForecastOnly),
        Some(PredictiveMode::ScaleUp),
    ] {
        let mut spec = spec(1);
        spec.predictive = mode.map(|mode| PredictiveSpec {
            mode,
            startup_delay: Duration::from_secs(300),
            margin_percent: 0,
        });
        let mut history = history();
        for minute in (1..=2 * 1440).rev() {
            let t = NOW.plus_secs(-60 * minute);
            history = hpa::evaluate(&settings, &spec, &obs, &history, t)
                .expect("valid benchmark input")
                .history;
        }
        let bytes: usize = history.predictive.as_ref().map_or(0, |p| {
            p.models.iter().map(|(_, m)| m.to_bytes().len()).sum()
        });
        eprintln!(
            "predictive {:?}: model state {bytes} bytes",
            mode.map(PredictiveMode::as_str)
        );
        group.bench_function(mode.map_or("off", PredictiveMode::as_str), |b| {
            b.iter(|| {
                hpa::evaluate(
                    black_box(&settings),
                    black_box(&spec),
                    black_box(&obs),
                    black_box(&history),
                    NOW,
                )
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_evaluate, bench_predictive);
criterion_main!(benches);
