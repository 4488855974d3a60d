//! Never panic on input: arbitrary Recommend requests (numbers across their whole range,
//! extreme timestamps and durations, unknown enum values) go through conversion and, when
//! accepted, the engine; the result is a decision or a named field violation.

use std::{collections::BTreeMap, time::Duration};

use autoscaled::{
    api::{
        convert::{self, Context},
        status::ApiError,
    },
    config::Limits,
    engine::{hpa, hpa::history::History, hpa::settings::Settings, time::Time},
    pb::v1 as pb,
};
use proptest::prelude::*;
use prost_types::{Duration as PbDuration, Timestamp};

fn timestamp() -> impl Strategy<Value = Option<Timestamp>> {
    prop_oneof![
        1 => Just(None),
        1 => (any::<i64>(), any::<i32>()).prop_map(|(seconds, nanos)| Some(Timestamp { seconds, nanos })),
        2 => (-62_135_596_800i64..253_402_300_799, 0..1_000_000_000i32)
            .prop_map(|(seconds, nanos)| Some(Timestamp { seconds, nanos })),
        8 => (1_799_990_000i64..1_800_000_100, 0..1_000_000_000i32)
            .prop_map(|(seconds, nanos)| Some(Timestamp { seconds, nanos })),
    ]
}

fn duration() -> impl Strategy<Value = Option<PbDuration>> {
    prop_oneof![
        4 => Just(None),
        1 => (any::<i64>(), any::<i32>()).prop_map(|(seconds, nanos)| Some(PbDuration { seconds, nanos })),
        8 => (0..4_000i64).prop_map(|seconds| Some(PbDuration { seconds, nanos: 0 })),
    ]
}

fn small_or_any_i32() -> impl Strategy<Value = i32> {
    prop_oneof![30 => 0..20i32, 1 => -3..0i32, 1 => any::<i32>()]
}

fn small_or_any_i64() -> impl Strategy<Value = i64> {
    prop_oneof![30 => 0..5_000i64, 1 => -3..0i64, 1 => any::<i64>()]
}

fn metric() -> impl Strategy<Value = pb::MetricSpec> {
    (
        prop_oneof![20 => 1..6i32, 1 => -1..7i32],
        prop_oneof![8 => Just("cpu".to_owned()), 2 => Just("memory".to_owned()), 2 => Just("qps".to_owned()), 1 => Just(String::new())],
        prop_oneof![20 => 1..4i32, 1 => -1..5i32],
        proptest::option::of(small_or_any_i32()),
        proptest::option::of(small_or_any_i64()),
        proptest::option::of(small_or_any_i64()),
    )
        .prop_map(|(source, name, target_type, util, avg, value)| pb::MetricSpec {
            r#type: source,
            name,
            container: "app".into(),
            target: Some(pb::MetricTarget {
                r#type: target_type,
                average_utilization: util,
                average_value_milli: avg,
                value_milli: value,
            }),
            ..Default::default()
        })
}

fn rules() -> impl Strategy<Value = pb::ScalingRules> {
    (
        proptest::option::of(small_or_any_i32()),
        prop_oneof![20 => 0..4i32, 1 => -1..5i32],
        proptest::collection::vec(
            (
                prop_oneof![20 => 1..3i32, 1 => -1..4i32],
                small_or_any_i32(),
                prop_oneof![20 => 1..1800i32, 1 => any::<i32>()],
            ),
            0..3,
        ),
        any::<bool>(),
        proptest::option::of(prop_oneof![1 => Just(f64::NAN), 1 => Just(-1.0), 20 => 0.0..2.0f64]),
    )
        .prop_map(
            |(window, select, policies, set, tolerance)| pb::ScalingRules {
                stabilization_window_seconds: window,
                select_policy: select,
                policies: policies
                    .into_iter()
                    .map(|(t, value, period_seconds)| pb::ScalingPolicy {
                        r#type: t,
                        value,
                        period_seconds,
                    })
                    .collect(),
                policies_set: set,
                tolerance,
            },
        )
}

fn pod() -> impl Strategy<Value = pb::PodSample> {
    (
        prop_oneof![
            Just("a".to_owned()),
            Just("b".to_owned()),
            Just("c".to_owned())
        ],
        prop_oneof![20 => 0..6i32, 1 => -1..7i32],
        proptest::option::of(any::<bool>()),
        timestamp(),
        timestamp(),
        small_or_any_i64(),
        proptest::option::of(small_or_any_i64()),
        timestamp(),
        duration(),
    )
        .prop_map(
            |(name, phase, ready, transition, start, request, value, sampled, window)| {
                pb::PodSample {
                    name,
                    phase,
                    ready,
                    ready_transition_time: transition,
                    start_time: start,
                    requests_milli: BTreeMap::from([("cpu".to_owned(), request)]),
                    metrics: BTreeMap::from([(
                        "cpu".to_owned(),
                        pb::MetricSample {
                            value_milli: value,
                            timestamp: sampled,
                            window,
                        },
                    )]),
                    ..Default::default()
                }
            },
        )
}

fn request() -> impl Strategy<Value = pb::RecommendRequest> {
    (
        small_or_any_i32(),
        proptest::option::of(small_or_any_i32()),
        proptest::option::of(small_or_any_i32()),
        small_or_any_i32(),
        proptest::collection::vec(metric(), 0..3),
        proptest::option::of((proptest::option::of(rules()), proptest::option::of(rules()))),
        (
            proptest::option::of(
                prop_oneof![1 => Just(f64::INFINITY), 20 => 0.0..3.0f64, 1 => -1.0..0.0f64],
            ),
            duration(),
        ),
        proptest::collection::vec(pod(), 0..4),
        prop_oneof![6 => Just(None), 1 => timestamp()],
    )
        .prop_map(
            |(
                current,
                status,
                min,
                max,
                metrics,
                behavior,
                (tolerance, downscale),
                mut pods,
                at,
            )| {
                // Mostly distinct pod names (a duplicate is one rejection among many).
                if current % 7 != 0 {
                    for (i, p) in pods.iter_mut().enumerate() {
                        p.name = format!("pod-{i}");
                    }
                }
                pb::RecommendRequest {
                    target_key: "prop/target".into(),
                    current_replicas: current,
                    status_replicas: status,
                    spec: Some(pb::HorizontalSpec {
                        min_replicas: min,
                        max_replicas: max,
                        metrics,
                        behavior: behavior.map(|(scale_up, scale_down)| pb::Behavior {
                            scale_up,
                            scale_down,
                        }),
                        settings: Some(pb::ControllerSettings {
                            tolerance,
                            downscale_stabilization: downscale,
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    pods,
                    object_metrics_milli: BTreeMap::from([("qps".to_owned(), 7)]),
                    evaluation_time: at,
                    ..Default::default()
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5000))]

    #[test]
    fn arbitrary_requests_never_panic(req in request(), trust in any::<bool>()) {
        let limits = Limits::default();
        let ctx = Context {
            limits: &limits,
            trust_request_time: trust,
            server_now: Time::from_unix_secs(1_800_000_000),
            history_retention: Duration::from_secs(3600),
            scale_to_zero: true,
        };
        match convert::recommend_request(req, &ctx) {
            Err(ApiError::InvalidArgument(violations)) => {
                prop_assert!(!violations.is_empty());
                for v in violations {
                    prop_assert!(!v.field.is_empty() && !v.description.is_empty());
                }
            }
            Err(other) => prop_assert!(false, "unexpected error {other:?}"),
            Ok(input) => {
                let settings = input.settings.apply(&Settings::default());
                if let Ok(evaluation) = hpa::evaluate(
                    &settings,
                    &input.spec,
                    &input.observation,
                    &History::default(),
                    input.now,
                ) {
                    let response = convert::recommend_response(
                        &evaluation.decision,
                        &input.spec.metrics,
                        input.now,
                        true,
                    );
                    prop_assert!(response.desired_replicas >= 0);
                }
            }
        }
    }
}

/// Whether the field a warning names is absent on the pod: a warning that names a field the
/// pod carries would send an adapter author looking for the wrong thing.
fn field_absent(pod: &pb::PodSample, field: &str) -> bool {
    let metric = |rest: &str| rest.split(']').next().unwrap_or_default().to_owned();
    match field {
        "pods[*].ready" => pod.ready.is_none(),
        "pods[*].start_time" => pod.start_time.is_none(),
        "pods[*].ready_transition_time" => {
            pod.ready == Some(false) && pod.ready_transition_time.is_none()
        }
        f if f.ends_with("].value_milli") => {
            let name = metric(f.trim_start_matches("pods[*].metrics["));
            pod.metrics
                .get(&name)
                .is_some_and(|s| s.value_milli.is_none())
        }
        f if f.starts_with("pods[*].metrics[") => !pod
            .metrics
            .contains_key(&metric(&f["pods[*].metrics[".len()..])),
        // Container usage: the generated pods carry no containers.
        f if f.starts_with("pods[*].containers") => pod.containers.is_empty(),
        _ => false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// The warnings are read off the request and the decision, after it: the decision is the
    /// same, to the byte, as one taken without them; the decision's response has none of its
    /// own; every warning is bounded and names pods of the request that lack the field.
    #[test]
    fn warnings_never_change_the_decision(req in request()) {
        let limits = Limits::default();
        let ctx = Context {
            limits: &limits,
            trust_request_time: false,
            server_now: Time::from_unix_secs(1_800_000_000),
            history_retention: Duration::from_secs(3600),
            scale_to_zero: true,
        };
        let pods = req.pods.clone();
        let Ok(input) = convert::recommend_request(req, &ctx) else {
            return Ok(());
        };
        let settings = input.settings.apply(&Settings::default());
        let decide = || hpa::evaluate(
            &settings,
            &input.spec,
            &input.observation,
            &History::default(),
            input.now,
        );
        let Ok(without) = decide() else {
            return Ok(());
        };
        let before = serde_json::to_vec(&without.decision).unwrap();
        let warnings = convert::recommend_warnings(
            &input.spec,
            &input.observation,
            &settings,
            &without.decision,
            input.now,
        );
        let with = decide().unwrap();
        prop_assert_eq!(&serde_json::to_vec(&with.decision).unwrap(), &before);
        prop_assert_eq!(&serde_json::to_vec(&without.decision).unwrap(), &before);
        prop_assert_eq!(&with.history, &without.history);

        // The decision's response carries none: the handler adds them, nothing else differs.
        let plain = convert::recommend_response(&with.decision, &input.spec.metrics, input.now, true);
        prop_assert!(plain.warnings.is_empty());

        if with.decision.metrics.is_empty() {
            prop_assert!(warnings.is_empty(), "{warnings:?}");
        }
        for w in &warnings {
            prop_assert!(w.pods_total >= 1 && !w.message.is_empty(), "{w:?}");
            prop_assert_eq!(
                w.pods.len(),
                usize::try_from(w.pods_total).unwrap().min(convert::MAX_WARNING_PODS)
            );
            for name in &w.pods {
                let pod = pods.iter().find(|p| &p.name == name);
                prop_assert!(pod.is_some(), "{name} is not in the request");
                prop_assert!(field_absent(pod.unwrap(), &w.field), "{w:?} on {pod:?}");
            }
        }
    }
}
