//! The VPA record (version 2): explicit conversions between the engine's VPA model
//! ([`VpaState`]: [`VpaTarget`] and the stored overrides) and the storage-only messages
//! of `proto/store/v1/records.proto` ([`pb::VpaState`]). Renaming an engine field changes
//! nothing on disk; the conversions are the only place that knows both.
//!
//! Compact by construction: times are varint nanoseconds, a histogram keeps only its
//! non-zero buckets (index deltas and weights as packed lists) and names the recommender's
//! two default bucket schemes by a code instead of spelling them out.

use std::{collections::BTreeMap, time::Duration};

use super::pb;
use crate::{
    engine::time::Time,
    engine::vpa::{
        aggregate::AggregateContainerState,
        amount::Resources,
        container::ContainerState,
        decaying::DecayingHistogram,
        histogram::{Histogram, HistogramOptions},
        target::VpaTarget,
    },
    store::{VpaOverrides, VpaState},
};

const SCHEME_CPU: u32 = 1;
const SCHEME_MEMORY: u32 = 2;
const SCHEME_LINEAR: u32 = 3;
const SCHEME_EXPONENTIAL: u32 = 4;

/// The record of `state`.
pub(crate) fn state_to_record(state: &VpaState) -> pb::VpaState {
    pb::VpaState {
        engine_format: state.format,
        overrides: Some(overrides_to_record(&state.overrides)),
        aggregates: state
            .target
            .aggregates
            .iter()
            .map(|(name, a)| pb::VpaAggregate {
                container: name.clone(),
                cpu: Some(histogram_to_record(&a.cpu)),
                memory: Some(histogram_to_record(&a.memory)),
                first_sample_start: a.first_sample_start.map(Time::unix_nanos),
                last_sample_start: a.last_sample_start.map(Time::unix_nanos),
                total_samples_count: a.total_samples_count,
                creation_time: a.creation_time.unix_nanos(),
            })
            .collect(),
        pods: state
            .target
            .containers
            .iter()
            .map(|(pod, containers)| pb::VpaPod {
                pod: pod.clone(),
                containers: containers
                    .iter()
                    .map(|(name, c)| pb::VpaContainer {
                        container: name.clone(),
                        last_cpu_sample_start: c.last_cpu_sample_start.map(Time::unix_nanos),
                        memory_peak: c.memory_peak,
                        oom_peak: c.oom_peak,
                        window_end: c.window_end.map(Time::unix_nanos),
                        last_memory_sample_start: c.last_memory_sample_start.map(Time::unix_nanos),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// The state of a record; a message that no model could have produced is refused.
pub(crate) fn state_from_record(r: &pb::VpaState) -> Result<VpaState, String> {
    let mut aggregates = BTreeMap::new();
    for a in &r.aggregates {
        let histogram = |h: &Option<pb::VpaHistogram>, what: &str| {
            histogram_from_record(
                h.as_ref()
                    .ok_or_else(|| format!("{what} histogram missing"))?,
            )
        };
        aggregates.insert(
            a.container.clone(),
            AggregateContainerState {
                cpu: histogram(&a.cpu, "cpu")?,
                memory: histogram(&a.memory, "memory")?,
                first_sample_start: a.first_sample_start.map(Time::from_unix_nanos),
                last_sample_start: a.last_sample_start.map(Time::from_unix_nanos),
                total_samples_count: a.total_samples_count,
                creation_time: Time::from_unix_nanos(a.creation_time),
            },
        );
    }
    let containers = r
        .pods
        .iter()
        .map(|p| {
            let containers = p
                .containers
                .iter()
                .map(|c| {
                    (
                        c.container.clone(),
                        ContainerState {
                            last_cpu_sample_start: c
                                .last_cpu_sample_start
                                .map(Time::from_unix_nanos),
                            memory_peak: c.memory_peak,
                            oom_peak: c.oom_peak,
                            window_end: c.window_end.map(Time::from_unix_nanos),
                            last_memory_sample_start: c
                                .last_memory_sample_start
                                .map(Time::from_unix_nanos),
                        },
                    )
                })
                .collect();
            (p.pod.clone(), containers)
        })
        .collect();
    Ok(VpaState {
        format: r.engine_format,
        overrides: overrides_from_record(r.overrides.as_ref().unwrap_or(&Default::default()))?,
        target: VpaTarget {
            aggregates,
            containers,
        },
    })
}

fn histogram_to_record(d: &DecayingHistogram) -> pb::VpaHistogram {
    let h = d.histogram();
    let mut r = pb::VpaHistogram {
        total_weight: h.total_weight(),
        min_bucket: u32::try_from(h.min_bucket()).unwrap_or(u32::MAX),
        max_bucket: u32::try_from(h.max_bucket()).unwrap_or(u32::MAX),
        half_life_ns: d.half_life_ns(),
        reference: d.reference().map(Time::unix_nanos),
        ..Default::default()
    };
    let options = *h.options();
    if options == HistogramOptions::cpu() {
        r.scheme = SCHEME_CPU;
    } else if options == HistogramOptions::memory() {
        r.scheme = SCHEME_MEMORY;
    } else {
        match options {
            HistogramOptions::Linear {
                num_buckets,
                bucket_size,
                epsilon,
            } => {
                r.scheme = SCHEME_LINEAR;
                r.num_buckets = num_buckets as u64;
                r.bucket_size = bucket_size;
                r.epsilon = epsilon;
            }
            HistogramOptions::Exponential {
                num_buckets,
                first_bucket_size,
                ratio,
                epsilon,
            } => {
                r.scheme = SCHEME_EXPONENTIAL;
                r.num_buckets = num_buckets as u64;
                r.first_bucket_size = first_bucket_size;
                r.ratio = ratio;
                r.epsilon = epsilon;
            }
        }
    }
    let mut previous = 0u32;
    for i in 0..options.num_buckets() {
        let w = h.bucket_weight(i);
        if w != 0.0 {
            let index = u32::try_from(i).unwrap_or(u32::MAX);
            r.bucket_index_deltas.push(index - previous);
            r.bucket_weights.push(w);
            previous = index;
        }
    }
    r
}

fn histogram_from_record(r: &pb::VpaHistogram) -> Result<DecayingHistogram, String> {
    let num_buckets = || usize::try_from(r.num_buckets).map_err(|e| e.to_string());
    let options = match r.scheme {
        SCHEME_CPU => HistogramOptions::cpu(),
        SCHEME_MEMORY => HistogramOptions::memory(),
        SCHEME_LINEAR => HistogramOptions::Linear {
            num_buckets: num_buckets()?,
            bucket_size: r.bucket_size,
            epsilon: r.epsilon,
        },
        SCHEME_EXPONENTIAL => HistogramOptions::Exponential {
            num_buckets: num_buckets()?,
            first_bucket_size: r.first_bucket_size,
            ratio: r.ratio,
            epsilon: r.epsilon,
        },
        other => return Err(format!("unknown histogram scheme {other}")),
    };
    if r.bucket_index_deltas.len() != r.bucket_weights.len() {
        return Err("histogram bucket lists differ in length".to_owned());
    }
    let mut index = 0u32;
    let mut buckets = Vec::with_capacity(r.bucket_weights.len());
    for (delta, &w) in r.bucket_index_deltas.iter().zip(&r.bucket_weights) {
        index = index
            .checked_add(*delta)
            .ok_or("histogram bucket index overflows")?;
        buckets.push((index, w));
    }
    let histogram =
        Histogram::from_parts(options, r.total_weight, r.min_bucket, r.max_bucket, buckets)
            .map_err(|e| e.to_string())?;
    Ok(DecayingHistogram::from_parts(
        histogram,
        r.half_life_ns,
        r.reference.map(Time::from_unix_nanos),
    ))
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn overrides_to_record(o: &VpaOverrides) -> pb::VpaOverrides {
    pb::VpaOverrides {
        target_cpu_percentile: o.target_cpu_percentile,
        target_memory_percentile: o.target_memory_percentile,
        lower_bound_cpu_percentile: o.lower_bound_cpu_percentile,
        lower_bound_memory_percentile: o.lower_bound_memory_percentile,
        upper_bound_cpu_percentile: o.upper_bound_cpu_percentile,
        upper_bound_memory_percentile: o.upper_bound_memory_percentile,
        safety_margin_fraction: o.safety_margin_fraction,
        pod_min_cpu_millicores: o.pod_min_cpu_millicores,
        pod_min_memory_mb: o.pod_min_memory_mb,
        confidence_interval_cpu: o.confidence_interval_cpu.map(nanos),
        confidence_interval_memory: o.confidence_interval_memory.map(nanos),
        cpu_histogram_decay_half_life: o.cpu_histogram_decay_half_life.map(nanos),
        memory_histogram_decay_half_life: o.memory_histogram_decay_half_life.map(nanos),
        memory_aggregation_interval: o.memory_aggregation_interval.map(nanos),
        memory_aggregation_interval_count: o.memory_aggregation_interval_count,
        oom_bump_up_ratio: o.oom_bump_up_ratio,
        oom_min_bump_up_bytes: o.oom_min_bump_up_bytes,
        round_cpu_millicores: o.round_cpu_millicores,
        round_memory_bytes: o.round_memory_bytes,
        container_recommendation_max_allowed: o.container_recommendation_max_allowed.map(|r| {
            pb::VpaResources {
                cpu: r.cpu,
                memory: r.memory,
            }
        }),
        cpu_integer_post_processor_enabled: o.cpu_integer_post_processor_enabled,
    }
}

fn overrides_from_record(r: &pb::VpaOverrides) -> Result<VpaOverrides, String> {
    let d = |n: Option<u64>| n.map(Duration::from_nanos);
    Ok(VpaOverrides {
        target_cpu_percentile: r.target_cpu_percentile,
        target_memory_percentile: r.target_memory_percentile,
        lower_bound_cpu_percentile: r.lower_bound_cpu_percentile,
        lower_bound_memory_percentile: r.lower_bound_memory_percentile,
        upper_bound_cpu_percentile: r.upper_bound_cpu_percentile,
        upper_bound_memory_percentile: r.upper_bound_memory_percentile,
        safety_margin_fraction: r.safety_margin_fraction,
        pod_min_cpu_millicores: r.pod_min_cpu_millicores,
        pod_min_memory_mb: r.pod_min_memory_mb,
        confidence_interval_cpu: d(r.confidence_interval_cpu),
        confidence_interval_memory: d(r.confidence_interval_memory),
        cpu_histogram_decay_half_life: d(r.cpu_histogram_decay_half_life),
        memory_histogram_decay_half_life: d(r.memory_histogram_decay_half_life),
        memory_aggregation_interval: d(r.memory_aggregation_interval),
        memory_aggregation_interval_count: r.memory_aggregation_interval_count,
        oom_bump_up_ratio: r.oom_bump_up_ratio,
        oom_min_bump_up_bytes: r.oom_min_bump_up_bytes,
        round_cpu_millicores: r.round_cpu_millicores,
        round_memory_bytes: r.round_memory_bytes,
        container_recommendation_max_allowed: r.container_recommendation_max_allowed.map(|m| {
            Resources {
                cpu: m.cpu,
                memory: m.memory,
            }
        }),
        cpu_integer_post_processor_enabled: r.cpu_integer_post_processor_enabled,
    })
}
