//! Ingestion throughput of the VPA engine (samples per second through `VpaTarget`), the cost
//! of a recommendation, and the serialized size of one container's aggregate state.

use std::hint::black_box;

use autoscaled_engine::time::Time;
use autoscaled_engine::vpa::{Observation, Resource, UsageSample, VpaSettings, VpaTarget};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};

/// 2024-01-01T00:00:00Z.
const T0: i64 = 1_704_067_200;
/// Eight days of one sample a minute.
const SAMPLES: usize = 11_520;

fn series(resource: Resource) -> Vec<Observation> {
    (0..SAMPLES)
        .map(|i| {
            let usage = match resource {
                Resource::Cpu => 100 + (i as i64 * 37) % 900,
                Resource::Memory => 200_000_000 + (i as i64 * 7_919_993) % 300_000_000,
            };
            Observation::Usage(UsageSample {
                pod: "pod-1".into(),
                container: "app".into(),
                resource,
                usage,
                at: Time::from_unix_seconds(T0 + 60 * i as i64),
            })
        })
        .collect()
}

fn ingestion(c: &mut Criterion) {
    let settings = VpaSettings::default();
    let now = Time::from_unix_seconds(T0);
    let mut group = c.benchmark_group("vpa_ingest");
    group.throughput(Throughput::Elements(SAMPLES as u64));
    for (name, resource) in [
        ("cpu_samples", Resource::Cpu),
        ("memory_samples", Resource::Memory),
    ] {
        let obs = series(resource);
        group.bench_function(name, |b| {
            b.iter_batched(
                VpaTarget::default,
                |mut target| black_box(target.record_samples(&obs, None, &settings, now)),
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();

    let mut target = VpaTarget::default();
    let mut all = series(Resource::Cpu);
    all.extend(series(Resource::Memory));
    target.record_samples(&all, None, &settings, now);
    c.bench_function("vpa_recommend_one_container", |b| {
        b.iter(|| black_box(target.recommend(None, &[], &settings)))
    });

    let agg = &target.aggregates["app"];
    let nonzero = |h: &autoscaled_engine::vpa::histogram::Histogram| {
        (0..h.options().num_buckets())
            .filter(|b| h.bucket_weight(*b) != 0.0)
            .count()
    };
    println!(
        "non-zero buckets stored: cpu {}, memory {}",
        nonzero(agg.cpu.histogram()),
        nonzero(agg.memory.histogram())
    );
    let aggregate = serde_json::to_vec(agg).expect("serializable");
    let instance = serde_json::to_vec(&target.containers["pod-1"]["app"]).expect("serializable");
    let whole = serde_json::to_vec(&target).expect("serializable");
    println!(
        "serialized size (serde_json, after 8 days of 1/min CPU + memory samples): \
         aggregate state of one container = {} bytes, container instance state = {} bytes, \
         whole VpaTarget = {} bytes",
        aggregate.len(),
        instance.len(),
        whole.len()
    );
}

criterion_group!(benches, ingestion);
criterion_main!(benches);
