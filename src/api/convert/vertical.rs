//! Proto ↔ engine conversion for the `VerticalAutoscaler` service, with the same field-path
//! violations as the horizontal side (`samples[3].timestamp`, `settings.safety_margin_fraction`).

use prost_types::Timestamp;

use super::{Violations, check_target_key, duration};
use crate::{
    api::status::ApiError,
    config::Limits,
    engine::{
        error::InvalidInput,
        vpa::{
            ContainerResourcePolicy, ContainerScalingMode, Observation, OomEvent,
            PodResourcePolicy, RecommendedPodResources, Resource, Resources, Timestamp as VpaTime,
            UsageSample, VpaSettings,
            amount::{cpu_amount_from_cores, memory_amount_from_bytes},
        },
    },
    pb::v1 as pb,
    store::VerticalOverrides,
};

/// A validated RecordUsage request.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordUsageInput {
    pub target_key: String,
    /// Usage samples then OOM events, in request order (the order the VPA feeds them).
    pub observations: Vec<Observation>,
    /// New overrides for the target, replacing the stored ones when present.
    pub settings: Option<VerticalOverrides>,
}

/// A validated GetRecommendation request.
#[derive(Clone, Debug, PartialEq)]
pub struct RecommendationInput {
    pub target_key: String,
    pub policy: Option<PodResourcePolicy>,
    pub integer_cpu_containers: Vec<String>,
}

/// `VpaTime` (nanoseconds since 1970, 1677..2262) from a protobuf `Timestamp`.
fn vpa_time(v: &mut Violations, path: &str, t: Option<&Timestamp>) -> VpaTime {
    let Some(t) = t else {
        v.add(path, "must be set");
        return VpaTime::from_unix_nanos(0);
    };
    if !(0..1_000_000_000).contains(&t.nanos) {
        v.add(path, "nanos must be between 0 and 999999999");
        return VpaTime::from_unix_nanos(0);
    }
    match t
        .seconds
        .checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(i64::from(t.nanos)))
    {
        Some(n) => VpaTime::from_unix_nanos(n),
        None => {
            v.add(path, "must be between 1677-09-21 and 2262-04-11");
            VpaTime::from_unix_nanos(0)
        }
    }
}

fn names(v: &mut Violations, path: &str, pod: &str, container: &str) {
    if pod.is_empty() {
        v.add(format!("{path}.pod"), "must not be empty");
    }
    if container.is_empty() {
        v.add(format!("{path}.container"), "must not be empty");
    }
}

/// Converts and validates a RecordUsage request.
pub fn record_usage_request(
    req: pb::RecordUsageRequest,
    limits: &Limits,
) -> Result<RecordUsageInput, ApiError> {
    let count = req.samples.len().saturating_add(req.oom_events.len());
    if count > limits.max_samples {
        return Err(ApiError::ResourceExhausted {
            field: "samples".to_owned(),
            message: format!(
                "{count} samples and OOM events exceed the limit of {} per request (max_samples)",
                limits.max_samples
            ),
        });
    }
    let mut v = Violations::default();
    check_target_key(&mut v, &req.target_key, limits);
    let mut observations = Vec::with_capacity(count);
    for (i, s) in req.samples.iter().enumerate() {
        let path = format!("samples[{i}]");
        names(&mut v, &path, &s.pod, &s.container);
        let resource = match pb::Resource::try_from(s.resource) {
            Ok(pb::Resource::Cpu) => Resource::Cpu,
            Ok(pb::Resource::Memory) => Resource::Memory,
            Ok(pb::Resource::Unspecified) => {
                v.add(format!("{path}.resource"), "must be set");
                Resource::Cpu
            }
            Err(_) => {
                v.add(
                    format!("{path}.resource"),
                    format!("unknown value {}", s.resource),
                );
                Resource::Cpu
            }
        };
        if !s.value.is_finite() {
            v.add(format!("{path}.value"), "must be a finite number");
        }
        // CPU arrives in millicores; upstream converts cores with `CPUAmountFromCores`.
        let usage = match resource {
            Resource::Cpu => cpu_amount_from_cores(s.value / 1000.0),
            Resource::Memory => memory_amount_from_bytes(s.value),
        };
        let at = vpa_time(&mut v, &format!("{path}.timestamp"), s.timestamp.as_ref());
        observations.push(Observation::Usage(UsageSample {
            pod: s.pod.clone(),
            container: s.container.clone(),
            resource,
            usage,
            at,
        }));
    }
    for (i, o) in req.oom_events.iter().enumerate() {
        let path = format!("oom_events[{i}]");
        names(&mut v, &path, &o.pod, &o.container);
        if o.memory_bytes < 0 {
            v.add(format!("{path}.memory_bytes"), "must not be negative");
        }
        let at = vpa_time(&mut v, &format!("{path}.timestamp"), o.timestamp.as_ref());
        observations.push(Observation::Oom(OomEvent {
            pod: o.pod.clone(),
            container: o.container.clone(),
            at,
            memory_bytes: o.memory_bytes,
        }));
    }
    let settings = req.settings.as_ref().map(|s| overrides(&mut v, s));
    v.into_result(RecordUsageInput {
        target_key: req.target_key,
        observations,
        settings,
    })
}

fn overrides(v: &mut Violations, s: &pb::VerticalSettings) -> VerticalOverrides {
    let d = |v: &mut Violations, name: &str, x: &Option<prost_types::Duration>| {
        x.as_ref()
            .and_then(|x| duration(v, &format!("settings.{name}"), x))
    };
    VerticalOverrides {
        target_cpu_percentile: s.target_cpu_percentile,
        target_memory_percentile: s.target_memory_percentile,
        lower_bound_cpu_percentile: s.lower_bound_cpu_percentile,
        lower_bound_memory_percentile: s.lower_bound_memory_percentile,
        upper_bound_cpu_percentile: s.upper_bound_cpu_percentile,
        upper_bound_memory_percentile: s.upper_bound_memory_percentile,
        safety_margin_fraction: s.safety_margin_fraction,
        pod_min_cpu_millicores: s.pod_min_cpu_millicores.map(|x| x as f64),
        pod_min_memory_mb: s.pod_min_memory_mb.map(|x| x as f64),
        confidence_interval_cpu: d(v, "confidence_interval_cpu", &s.confidence_interval_cpu),
        confidence_interval_memory: d(
            v,
            "confidence_interval_memory",
            &s.confidence_interval_memory,
        ),
        cpu_histogram_decay_half_life: d(
            v,
            "cpu_histogram_decay_half_life",
            &s.cpu_histogram_decay_half_life,
        ),
        memory_histogram_decay_half_life: d(
            v,
            "memory_histogram_decay_half_life",
            &s.memory_histogram_decay_half_life,
        ),
        memory_aggregation_interval: d(
            v,
            "memory_aggregation_interval",
            &s.memory_aggregation_interval,
        ),
        memory_aggregation_interval_count: s.memory_aggregation_interval_count.map(i64::from),
        oom_bump_up_ratio: s.oom_bump_up_ratio,
        oom_min_bump_up_bytes: s.oom_min_bump_up_bytes.map(|x| x as f64),
    }
}

/// The server defaults with a target's overrides applied, validated
/// (`VpaSettings::validate`; a bad field is reported as `settings.<field>`).
pub fn effective_settings(
    defaults: &VpaSettings,
    o: &VerticalOverrides,
) -> Result<VpaSettings, ApiError> {
    let mut s = defaults.clone();
    macro_rules! apply {
        ($($f:ident),*) => { $( if let Some(x) = o.$f { s.$f = x; } )* };
    }
    apply!(
        target_cpu_percentile,
        target_memory_percentile,
        lower_bound_cpu_percentile,
        lower_bound_memory_percentile,
        upper_bound_cpu_percentile,
        upper_bound_memory_percentile,
        safety_margin_fraction,
        pod_min_cpu_millicores,
        pod_min_memory_mb,
        confidence_interval_cpu,
        confidence_interval_memory,
        cpu_histogram_decay_half_life,
        memory_histogram_decay_half_life,
        memory_aggregation_interval,
        memory_aggregation_interval_count,
        oom_bump_up_ratio,
        oom_min_bump_up_bytes
    );
    s.validate().map_err(|e| {
        ApiError::InvalidArgument(vec![InvalidInput::new(
            format!("settings.{}", e.field),
            e.reason,
        )])
    })?;
    Ok(s)
}

/// Converts and validates a GetRecommendation request.
pub fn recommendation_request(
    req: pb::GetRecommendationRequest,
    limits: &Limits,
) -> Result<RecommendationInput, ApiError> {
    let mut v = Violations::default();
    check_target_key(&mut v, &req.target_key, limits);
    let policy = req.policy.as_ref().map(|p| PodResourcePolicy {
        container_policies: p
            .container_policies
            .iter()
            .enumerate()
            .map(|(i, c)| container_policy(&mut v, &format!("policy.container_policies[{i}]"), c))
            .collect(),
    });
    for (i, c) in req.integer_cpu_containers.iter().enumerate() {
        if c.is_empty() {
            v.add(format!("integer_cpu_containers[{i}]"), "must not be empty");
        }
    }
    v.into_result(RecommendationInput {
        target_key: req.target_key,
        policy,
        integer_cpu_containers: req.integer_cpu_containers,
    })
}

fn amounts(v: &mut Violations, path: &str, a: Option<&pb::ResourceAmounts>) -> Resources {
    let Some(a) = a else {
        return Resources::default();
    };
    if a.cpu_millicores.is_some_and(|x| x < 0) {
        v.add(format!("{path}.cpu_millicores"), "must not be negative");
    }
    if a.memory_bytes.is_some_and(|x| x < 0) {
        v.add(format!("{path}.memory_bytes"), "must not be negative");
    }
    Resources {
        cpu: a.cpu_millicores,
        memory: a.memory_bytes,
    }
}

fn container_policy(
    v: &mut Violations,
    path: &str,
    c: &pb::ContainerResourcePolicy,
) -> ContainerResourcePolicy {
    if c.container_name.is_empty() {
        v.add(format!("{path}.container_name"), "must not be empty");
    }
    let mode = match pb::ContainerScalingMode::try_from(c.mode) {
        Ok(pb::ContainerScalingMode::Unspecified) => None,
        Ok(pb::ContainerScalingMode::Auto) => Some(ContainerScalingMode::Auto),
        Ok(pb::ContainerScalingMode::Off) => Some(ContainerScalingMode::Off),
        Err(_) => {
            v.add(format!("{path}.mode"), format!("unknown value {}", c.mode));
            None
        }
    };
    let mut controlled = Vec::with_capacity(c.controlled_resources.len());
    for (i, r) in c.controlled_resources.iter().enumerate() {
        match pb::Resource::try_from(*r) {
            Ok(pb::Resource::Cpu) => controlled.push(Resource::Cpu),
            Ok(pb::Resource::Memory) => controlled.push(Resource::Memory),
            Ok(pb::Resource::Unspecified) => {
                v.add(format!("{path}.controlled_resources[{i}]"), "must be set")
            }
            Err(_) => v.add(
                format!("{path}.controlled_resources[{i}]"),
                format!("unknown value {r}"),
            ),
        }
    }
    ContainerResourcePolicy {
        container_name: c.container_name.clone(),
        mode,
        min_allowed: amounts(v, &format!("{path}.min_allowed"), c.min_allowed.as_ref()),
        max_allowed: amounts(v, &format!("{path}.max_allowed"), c.max_allowed.as_ref()),
        controlled_resources: (c.controlled_resources_set || !controlled.is_empty())
            .then_some(controlled),
        ..ContainerResourcePolicy::default()
    }
}

fn resource_amounts(r: &Resources) -> pb::ResourceAmounts {
    pb::ResourceAmounts {
        cpu_millicores: r.cpu,
        memory_bytes: r.memory,
    }
}

/// The GetRecommendation response, containers sorted by name.
pub fn vertical_recommendation(
    key: &str,
    r: &RecommendedPodResources,
) -> pb::VerticalRecommendation {
    let mut containers: Vec<_> = r
        .containers
        .iter()
        .map(|c| pb::ContainerRecommendation {
            container_name: c.container_name.clone(),
            target: Some(resource_amounts(&c.target)),
            lower_bound: Some(resource_amounts(&c.lower_bound)),
            upper_bound: Some(resource_amounts(&c.upper_bound)),
            uncapped_target: Some(resource_amounts(&c.uncapped_target)),
        })
        .collect();
    containers.sort_by(|a, b| a.container_name.cmp(&b.container_name));
    pb::VerticalRecommendation {
        target_key: key.to_owned(),
        containers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(e: ApiError) -> Vec<String> {
        match e {
            ApiError::InvalidArgument(v) => v.into_iter().map(|v| v.field).collect(),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn samples_are_validated_with_their_paths() {
        let req = pb::RecordUsageRequest {
            target_key: "k".into(),
            samples: vec![
                pb::UsageSample {
                    pod: "p".into(),
                    container: "c".into(),
                    resource: pb::Resource::Cpu as i32,
                    value: 250.0,
                    timestamp: Some(Timestamp {
                        seconds: 10,
                        nanos: 5,
                    }),
                },
                pb::UsageSample {
                    pod: String::new(),
                    container: "c".into(),
                    resource: 9,
                    value: f64::NAN,
                    timestamp: None,
                },
            ],
            oom_events: vec![],
            settings: None,
        };
        let err = record_usage_request(req.clone(), &Limits::default()).unwrap_err();
        assert_eq!(
            fields(err),
            [
                "samples[1].pod",
                "samples[1].resource",
                "samples[1].value",
                "samples[1].timestamp"
            ]
        );
        let mut ok = req;
        ok.samples.truncate(1);
        let input = record_usage_request(ok, &Limits::default()).unwrap();
        let Observation::Usage(s) = &input.observations[0] else {
            panic!("not a usage sample");
        };
        assert_eq!(s.usage, 250);
        assert_eq!(s.at, VpaTime::from_unix_nanos(10_000_000_005));
    }

    #[test]
    fn bad_settings_name_the_field() {
        let o = VerticalOverrides {
            safety_margin_fraction: Some(-1.0),
            ..VerticalOverrides::default()
        };
        let err = effective_settings(&VpaSettings::default(), &o).unwrap_err();
        assert_eq!(fields(err), ["settings.safety_margin_fraction"]);
        let ok = VerticalOverrides {
            target_cpu_percentile: Some(0.5),
            ..VerticalOverrides::default()
        };
        assert_eq!(
            effective_settings(&VpaSettings::default(), &ok)
                .unwrap()
                .target_cpu_percentile,
            0.5
        );
    }
}
