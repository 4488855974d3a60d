//! `VerticalAutoscaler` requests, proto → engine (`engine::vpa`), in the style of the
//! horizontal side: every field is validated and named by its proto path (`samples[3].value`,
//! `policy.container_policies[0].min_allowed.cpu_millicores`), all violations of a request
//! are collected, and nothing reaches the engine or the store unless the whole request is
//! valid. The settings a call runs with are checked by the engine (`VpaSettings::validate`)
//! here too ([`effective_settings`]), so that the handler only calls it.

use std::time::Duration;

use prost_types::{Duration as PbDuration, Timestamp as PbTimestamp};

use super::wire::{Violations, check_target_key, duration};
use crate::{
    api::status::ApiError,
    config::Limits,
    engine::time::{Time, go::NANOS_PER_SECOND},
    engine::vpa::{
        amount::{MAX_RESOURCE_AMOUNT, Resource, Resources, resource_amount_from_float},
        policy::{ContainerResourcePolicy, ContainerScalingMode, PodResourcePolicy},
        settings::{
            Origin, VpaSettings, duration_violation, interval_count_violation,
            non_negative_violation, percentile_violation,
        },
        target::{Observation, OomEvent, UsageSample},
    },
    pb::v1 as pb,
    store::VpaOverrides,
};

/// What conversion of a vertical request needs besides the request.
#[derive(Clone, Debug)]
pub(crate) struct VerticalContext<'a> {
    pub limits: &'a Limits,
    /// Accept `evaluation_time` from the request.
    pub trust_request_time: bool,
    /// The server clock, read once by the handler.
    pub server_now: Time,
    /// Sample and OOM times may be at most this far ahead of the evaluation time.
    pub max_clock_skew: Duration,
    /// The server's settings, under the request's overrides.
    pub defaults: &'a VpaSettings,
}

/// A validated RecordUsage.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RecordUsageInput {
    pub target_key: String,
    /// Usage samples in time order (stable), then OOM events in time order: the order the VPA
    /// applies a loop's samples and OOMs in (`LoadRealTimeMetrics`, then the OOM channel).
    pub observations: Vec<Observation>,
    /// Present: replaces the target's stored overrides.
    pub settings: Option<VpaOverrides>,
    /// The ingestion instant.
    pub now: Time,
}

/// A validated GetRecommendation.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct GetRecommendationInput {
    pub target_key: String,
    pub policy: Option<PodResourcePolicy>,
    pub integer_cpu_containers: Vec<String>,
    /// Per-call overrides over the stored ones.
    pub settings: VpaOverrides,
}

/// Converts and validates a RecordUsage request.
pub(crate) fn record_usage_request(
    req: pb::RecordUsageRequest,
    ctx: &VerticalContext<'_>,
) -> Result<RecordUsageInput, ApiError> {
    let count = req.samples.len().saturating_add(req.oom_events.len());
    if count > ctx.limits.max_samples {
        return Err(ApiError::ResourceExhausted {
            field: "samples".to_owned(),
            message: format!(
                "{count} samples and OOM events exceed the limit of {} per request (max_samples)",
                ctx.limits.max_samples
            ),
        });
    }
    let mut v = Violations::default();
    check_target_key(&mut v, &req.target_key, ctx.limits);
    let now = match &req.evaluation_time {
        Some(_) if !ctx.trust_request_time => {
            v.add(
                "evaluation_time",
                "not accepted: this server uses its own clock (start it with --trust-request-time to accept request times)",
            );
            ctx.server_now
        }
        Some(t) => vpa_timestamp(&mut v, "evaluation_time", t).unwrap_or(ctx.server_now),
        None => ctx.server_now,
    };
    let latest =
        now.saturating_add_nanos(i64::try_from(ctx.max_clock_skew.as_nanos()).unwrap_or(i64::MAX));
    let mut samples = Vec::with_capacity(req.samples.len());
    for (i, s) in req.samples.iter().enumerate() {
        let path = format!("samples[{i}]");
        names(&mut v, &path, &s.pod, &s.container);
        let resource = resource(&mut v, &format!("{path}.resource"), s.resource);
        let usage = if !s.value.is_finite() {
            v.add(format!("{path}.value"), "must be a finite number");
            None
        } else if s.value < 0.0 {
            v.add(format!("{path}.value"), "must not be negative");
            None
        } else if s.value > MAX_RESOURCE_AMOUNT as f64 {
            v.add(format!("{path}.value"), "must be at most 1e14");
            None
        } else {
            // Millicores and bytes are the engine's units; truncation as upstream's
            // `CPUAmountFromCores` / `MemoryAmountFromBytes`.
            Some(resource_amount_from_float(s.value))
        };
        let at = sample_time(
            &mut v,
            &format!("{path}.timestamp"),
            s.timestamp.as_ref(),
            now,
            latest,
        );
        if let (Some(resource), Some(usage), Some(at)) = (resource, usage, at) {
            samples.push(UsageSample {
                pod: s.pod.clone(),
                container: s.container.clone(),
                resource,
                usage,
                at,
            });
        }
    }
    let mut ooms = Vec::with_capacity(req.oom_events.len());
    for (i, o) in req.oom_events.iter().enumerate() {
        let path = format!("oom_events[{i}]");
        names(&mut v, &path, &o.pod, &o.container);
        if o.memory_bytes < 0 {
            v.add(format!("{path}.memory_bytes"), "must not be negative");
        } else if o.memory_bytes > MAX_RESOURCE_AMOUNT {
            v.add(format!("{path}.memory_bytes"), "must be at most 1e14");
        }
        let at = sample_time(
            &mut v,
            &format!("{path}.timestamp"),
            o.timestamp.as_ref(),
            now,
            latest,
        );
        if let Some(at) = at {
            ooms.push(OomEvent {
                pod: o.pod.clone(),
                container: o.container.clone(),
                at,
                memory_bytes: o.memory_bytes,
            });
        }
    }
    let settings = req
        .settings
        .as_ref()
        .map(|s| vertical_settings(&mut v, "settings", s));
    // The overrides are checked on their own above and, once the request is valid, as the
    // settings they produce with the server's (the engine's rules).
    if v.is_empty()
        && let Some(overrides) = &settings
    {
        effective_settings(overrides, &VpaOverrides::default(), ctx.defaults)?;
    }
    samples.sort_by_key(|s| s.at);
    ooms.sort_by_key(|o| o.at);
    let observations = samples
        .into_iter()
        .map(Observation::Usage)
        .chain(ooms.into_iter().map(Observation::Oom))
        .collect();
    v.into_result(RecordUsageInput {
        target_key: req.target_key,
        observations,
        settings,
        now,
    })
}

/// Converts and validates a GetRecommendation request.
pub(crate) fn get_recommendation_request(
    req: pb::GetRecommendationRequest,
    limits: &Limits,
) -> Result<GetRecommendationInput, ApiError> {
    let mut v = Violations::default();
    check_target_key(&mut v, &req.target_key, limits);
    let policy = req.policy.as_ref().map(|p| pod_policy(&mut v, p));
    for (i, name) in req.integer_cpu_containers.iter().enumerate() {
        if name.is_empty() {
            v.add(format!("integer_cpu_containers[{i}]"), "must not be empty");
        }
    }
    let settings = req
        .settings
        .as_ref()
        .map(|s| vertical_settings(&mut v, "settings", s))
        .unwrap_or_default();
    v.into_result(GetRecommendationInput {
        target_key: req.target_key,
        policy,
        integer_cpu_containers: req.integer_cpu_containers,
        settings,
    })
}

fn names(v: &mut Violations, path: &str, pod: &str, container: &str) {
    if pod.is_empty() {
        v.add(format!("{path}.pod"), "must not be empty");
    }
    if container.is_empty() {
        v.add(format!("{path}.container"), "must not be empty");
    }
}

fn resource(v: &mut Violations, path: &str, value: i32) -> Option<Resource> {
    match pb::Resource::try_from(value) {
        Ok(pb::Resource::Cpu) => Some(Resource::Cpu),
        Ok(pb::Resource::Memory) => Some(Resource::Memory),
        Ok(pb::Resource::Unspecified) => {
            v.add(path, "must be RESOURCE_CPU or RESOURCE_MEMORY");
            None
        }
        Err(_) => {
            v.add(path, format!("unknown value {value}"));
            None
        }
    }
}

/// A protobuf `Timestamp` as engine nanoseconds (1677-09-21 … 2262-04-11, the `i64` range).
fn vpa_timestamp(v: &mut Violations, path: &str, t: &PbTimestamp) -> Option<Time> {
    if !(0..1_000_000_000).contains(&t.nanos) {
        v.add(path, "nanos must be between 0 and 999999999");
        return None;
    }
    match t
        .seconds
        .checked_mul(NANOS_PER_SECOND)
        .and_then(|n| n.checked_add(i64::from(t.nanos)))
    {
        Some(n) => Some(Time::from_unix_nanos(n)),
        None => {
            v.add(
                path,
                "must be between 1677-09-21T00:12:44Z and 2262-04-11T23:47:16Z",
            );
            None
        }
    }
}

/// A required sample time, not later than `latest` (evaluation time + allowed skew).
fn sample_time(
    v: &mut Violations,
    path: &str,
    t: Option<&PbTimestamp>,
    now: Time,
    latest: Time,
) -> Option<Time> {
    let Some(t) = t else {
        v.add(path, "must be set");
        return None;
    };
    let at = vpa_timestamp(v, path, t)?;
    if at > latest {
        let ahead_s = at.nanos_since(now) / NANOS_PER_SECOND;
        let skew_s = latest.nanos_since(now) / NANOS_PER_SECOND;
        v.add(
            path,
            format!(
                "is {ahead_s} s in the future of the evaluation time (more than the allowed clock skew of {skew_s} s)"
            ),
        );
        return None;
    }
    Some(at)
}

fn amounts(v: &mut Violations, path: &str, a: Option<&pb::ResourceAmounts>) -> Resources {
    let Some(a) = a else {
        return Resources::default();
    };
    for (field, x) in [
        ("cpu_millicores", a.cpu_millicores),
        ("memory_bytes", a.memory_bytes),
    ] {
        if let Some(x) = x
            && !(0..=MAX_RESOURCE_AMOUNT).contains(&x)
        {
            v.add(format!("{path}.{field}"), "must be between 0 and 1e14");
        }
    }
    Resources {
        cpu: a.cpu_millicores,
        memory: a.memory_bytes,
    }
}

fn pod_policy(v: &mut Violations, p: &pb::VerticalPolicy) -> PodResourcePolicy {
    let mut seen = std::collections::BTreeSet::new();
    let container_policies = p
        .container_policies
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let path = format!("policy.container_policies[{i}]");
            if c.container_name.is_empty() {
                v.add(format!("{path}.container_name"), "must not be empty");
            } else if !seen.insert(c.container_name.as_str()) {
                v.add(format!("{path}.container_name"), "duplicate container name");
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
            let min_allowed = amounts(v, &format!("{path}.min_allowed"), c.min_allowed.as_ref());
            let max_allowed = amounts(v, &format!("{path}.max_allowed"), c.max_allowed.as_ref());
            // The VPA admission rule (`validateVPA`): min must not exceed max.
            for (field, min, max) in [
                ("cpu_millicores", min_allowed.cpu, max_allowed.cpu),
                ("memory_bytes", min_allowed.memory, max_allowed.memory),
            ] {
                if let (Some(min), Some(max)) = (min, max)
                    && min > max
                {
                    v.add(
                        format!("{path}.max_allowed.{field}"),
                        "must not be less than min_allowed",
                    );
                }
            }
            let controlled_resources = if c.controlled_resources_set {
                Some(
                    c.controlled_resources
                        .iter()
                        .enumerate()
                        .filter_map(|(j, r)| {
                            resource(v, &format!("{path}.controlled_resources[{j}]"), *r)
                        })
                        .collect(),
                )
            } else {
                if !c.controlled_resources.is_empty() {
                    v.add(
                        format!("{path}.controlled_resources_set"),
                        "must be true when controlled_resources is given",
                    );
                }
                None
            };
            ContainerResourcePolicy {
                container_name: c.container_name.clone(),
                mode,
                min_allowed,
                max_allowed,
                controlled_resources,
                ..ContainerResourcePolicy::default()
            }
        })
        .collect();
    PodResourcePolicy { container_policies }
}

/// `VerticalSettings` → overrides, each present field held to the engine's rule for a
/// request's value (`engine::vpa::settings`, `Origin::Request`).
fn vertical_settings(v: &mut Violations, path: &str, s: &pb::VerticalSettings) -> VpaOverrides {
    // The rules are the engine's (`engine::vpa::settings`), for a request's values.
    let mut o = VpaOverrides::default();
    // `o.field = check("field", s.field)` for each field: a violation is named by the field.
    macro_rules! each {
        ($check:ident: $($field:ident),*) => {
            $( o.$field = $check(stringify!($field), s.$field.as_ref()); )*
        };
    }
    let mut percentile = |field: &str, x: Option<&f64>| {
        let x = x.copied();
        if let Some(d) = x.and_then(|x| percentile_violation(x, Origin::Request)) {
            v.add(format!("{path}.{field}"), d);
            return None;
        }
        x
    };
    each!(percentile: target_cpu_percentile, target_memory_percentile);
    each!(percentile: lower_bound_cpu_percentile, lower_bound_memory_percentile);
    each!(percentile: upper_bound_cpu_percentile, upper_bound_memory_percentile);
    let mut ratio = |field: &str, x: Option<&f64>| {
        let x = x.copied();
        if let Some(d) = x.and_then(|x| non_negative_violation(x, Origin::Request)) {
            v.add(format!("{path}.{field}"), d);
            return None;
        }
        x
    };
    each!(ratio: safety_margin_fraction, oom_bump_up_ratio);
    let mut non_negative = |field: &str, x: Option<&i64>| {
        if let Some(&x) = x
            && x < 0
        {
            v.add(format!("{path}.{field}"), "must not be negative");
            return None;
        }
        x.map(|&x| x as f64)
    };
    each!(non_negative: pod_min_cpu_millicores, pod_min_memory_mb, oom_min_bump_up_bytes);
    let mut positive = |field: &str, d: Option<&PbDuration>| {
        let p = format!("{path}.{field}");
        let d = duration(v, &p, d?)?;
        if let Some(reason) = duration_violation(d, Origin::Request) {
            v.add(p, reason);
            return None;
        }
        Some(d)
    };
    each!(positive: confidence_interval_cpu, confidence_interval_memory);
    each!(positive: cpu_histogram_decay_half_life, memory_histogram_decay_half_life);
    each!(positive: memory_aggregation_interval);
    let memory_aggregation_interval_count = s.memory_aggregation_interval_count.map(i64::from);
    let memory_aggregation_interval_count = match memory_aggregation_interval_count
        .and_then(|c| interval_count_violation(c, Origin::Request))
    {
        Some(reason) => {
            v.add(format!("{path}.memory_aggregation_interval_count"), reason);
            None
        }
        None => memory_aggregation_interval_count,
    };
    let container_recommendation_max_allowed =
        s.container_recommendation_max_allowed.as_ref().map(|a| {
            amounts(
                v,
                &format!("{path}.container_recommendation_max_allowed"),
                Some(a),
            )
        });
    o.memory_aggregation_interval_count = memory_aggregation_interval_count;
    o.container_recommendation_max_allowed = container_recommendation_max_allowed;
    o.round_cpu_millicores = s.round_cpu_millicores;
    o.round_memory_bytes = s.round_memory_bytes;
    o.cpu_integer_post_processor_enabled = s.cpu_integer_post_processor_enabled;
    o
}

/// The settings a call runs with: `call` over `stored` over the server's `defaults`, checked
/// by the engine (`VpaSettings::validate`), a rejection named by its proto path.
pub(crate) fn effective_settings(
    call: &VpaOverrides,
    stored: &VpaOverrides,
    defaults: &VpaSettings,
) -> Result<VpaSettings, ApiError> {
    let settings = call.over(stored).apply(defaults);
    settings.validate().map_err(settings_invalid)?;
    Ok(settings)
}

/// A settings rejection of the engine (`VpaSettings::validate`), under its proto path.
pub(crate) fn settings_invalid(e: crate::engine::vpa::settings::SettingsError) -> ApiError {
    let field = match e.field {
        "container_recommendation_max_allowed.cpu" => {
            "settings.container_recommendation_max_allowed.cpu_millicores".to_owned()
        }
        "container_recommendation_max_allowed.memory" => {
            "settings.container_recommendation_max_allowed.memory_bytes".to_owned()
        }
        other => format!("settings.{other}"),
    };
    ApiError::field(field, e.reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    static DEFAULTS: std::sync::LazyLock<VpaSettings> =
        std::sync::LazyLock::new(VpaSettings::default);

    fn ctx(limits: &Limits) -> VerticalContext<'_> {
        VerticalContext {
            limits,
            trust_request_time: false,
            server_now: Time::from_unix_seconds(1_800_000_000),
            max_clock_skew: Duration::from_secs(300),
            defaults: &DEFAULTS,
        }
    }

    fn ts(secs: i64) -> Option<PbTimestamp> {
        Some(PbTimestamp {
            seconds: secs,
            nanos: 0,
        })
    }

    #[test]
    fn samples_are_ordered_by_time_then_ooms_and_skew_is_inclusive() {
        let limits = Limits::default();
        let sample = |secs, value| pb::UsageSample {
            pod: "p".into(),
            container: "c".into(),
            resource: pb::Resource::Cpu as i32,
            value,
            timestamp: ts(secs),
        };
        let req = pb::RecordUsageRequest {
            target_key: "k".into(),
            samples: vec![sample(1_800_000_300, 2.0), sample(1_799_999_000, 1.9)],
            oom_events: vec![pb::OomEvent {
                pod: "p".into(),
                container: "c".into(),
                timestamp: ts(1_799_000_000),
                memory_bytes: 5,
            }],
            ..Default::default()
        };
        let input = record_usage_request(req, &ctx(&limits)).unwrap();
        let kinds: Vec<String> = input
            .observations
            .iter()
            .map(|o| match o {
                Observation::Usage(s) => format!("u{}", s.usage),
                Observation::Oom(o) => format!("o{}", o.memory_bytes),
            })
            .collect();
        assert_eq!(kinds, ["u1", "u2", "o5"]);
    }

    /// The settings overrides produce are the engine's to check, in conversion, not the
    /// handler's: a bad server value under a present override is named by its wire path.
    #[test]
    fn overrides_are_checked_with_the_settings_they_produce() {
        let limits = Limits::default();
        let defaults = VpaSettings {
            safety_margin_fraction: f64::NAN,
            ..VpaSettings::default()
        };
        let mut c = ctx(&limits);
        c.defaults = &defaults;
        let req = |settings| pb::RecordUsageRequest {
            target_key: "k".into(),
            settings,
            ..Default::default()
        };
        assert!(record_usage_request(req(None), &c).is_ok());
        let overrides = pb::VerticalSettings {
            target_cpu_percentile: Some(0.8),
            ..Default::default()
        };
        match record_usage_request(req(Some(overrides)), &c) {
            Err(ApiError::InvalidArgument(v)) => {
                assert_eq!(v.len(), 1);
                assert_eq!(v[0].field, "settings.safety_margin_fraction");
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
        let stored = VpaOverrides {
            safety_margin_fraction: Some(0.1),
            ..VpaOverrides::default()
        };
        let ok = effective_settings(&VpaOverrides::default(), &stored, &defaults).unwrap();
        assert_eq!(ok.safety_margin_fraction, 0.1);
    }

    #[test]
    fn too_many_samples_are_resource_exhausted() {
        let limits = Limits {
            max_samples: 10,
            ..Limits::default()
        };
        let req = pb::RecordUsageRequest {
            target_key: "k".into(),
            samples: vec![pb::UsageSample::default(); 11],
            ..Default::default()
        };
        assert!(matches!(
            record_usage_request(req, &ctx(&limits)),
            Err(ApiError::ResourceExhausted { .. })
        ));
    }
}
