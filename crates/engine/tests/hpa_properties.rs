//! Invariants of the HPA decision over generated input (algorithm document, sections 3 and 5):
//! bounds, the tolerance band, determinism, the policy limits, and no panic on any input.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use autoscaled_engine::{
    hpa::history::{History, Recommendation, ScaleEvent},
    hpa::observation::{Container, MetricSample, Observation, Pod, PodPhase},
    hpa::settings::Settings,
    hpa::spec::*,
    hpa::{self, DecisionPath, Evaluation},
    time::Time,
};
use proptest::{collection, option, prelude::*};

const NOW: Time = Time::from_unix_secs(1_767_225_600);

// === generators ===

fn arb_time() -> impl Strategy<Value = Time> {
    prop_oneof![
        19 => (-4_000i64..100).prop_map(|s| NOW.plus_secs(s)),
        1 => any::<i64>().prop_map(Time::from_unix_millis),
    ]
}

fn arb_quantity() -> impl Strategy<Value = i64> {
    prop_oneof![19 => 0i64..5_000, 1 => any::<i64>()]
}

fn arb_sample() -> impl Strategy<Value = MetricSample> {
    (option::of(arb_quantity()), arb_time(), 0u64..120).prop_map(|(value, timestamp, w)| {
        MetricSample {
            value,
            timestamp,
            window: Duration::from_secs(w),
        }
    })
}

const NAMES: [&str; 3] = ["cpu", "memory", "qps"];

fn arb_name() -> impl Strategy<Value = String> {
    prop::sample::select(&NAMES[..]).prop_map(str::to_string)
}

fn arb_resources() -> impl Strategy<Value = BTreeMap<String, i64>> {
    collection::btree_map(arb_name(), arb_quantity(), 0..3)
}

fn arb_pod() -> impl Strategy<Value = Pod> {
    (
        (
            prop::sample::select(vec![
                PodPhase::Running,
                PodPhase::Pending,
                PodPhase::Succeeded,
                PodPhase::Failed,
                PodPhase::Unknown,
            ]),
            any::<bool>(),
            option::of(any::<bool>()),
            option::of(arb_time()),
            option::of(arb_time()),
        ),
        arb_resources(),
        collection::vec(
            (
                prop::sample::select(vec!["app", "sidecar"]),
                arb_resources(),
                arb_resources(),
            ),
            0..3,
        ),
        collection::btree_map(arb_name(), arb_sample(), 0..3),
    )
        .prop_map(
            |((phase, deleting, ready, ready_transition, start_time), requests, cs, metrics)| Pod {
                name: String::new(),
                phase,
                deleting,
                ready,
                ready_transition,
                start_time,
                requests,
                containers: cs
                    .into_iter()
                    .map(|(name, requests, usage)| Container {
                        name: name.to_string(),
                        requests,
                        usage,
                    })
                    .collect(),
                metrics,
            },
        )
}

fn arb_target() -> impl Strategy<Value = MetricTarget> {
    (
        prop::sample::select(vec![
            MetricTargetType::Utilization,
            MetricTargetType::AverageValue,
            MetricTargetType::Value,
        ]),
        option::of(prop_oneof![19 => 1i32..200, 1 => any::<i32>()]),
        option::of(prop_oneof![19 => 1i64..20_000, 1 => any::<i64>()]),
        option::of(prop_oneof![19 => 1i64..20_000, 1 => any::<i64>()]),
    )
        .prop_map(
            |(target_type, average_utilization, average_value, value)| MetricTarget {
                target_type,
                average_utilization,
                average_value,
                value,
            },
        )
}

fn arb_metric() -> impl Strategy<Value = MetricSpec> {
    prop_oneof![
        (arb_name(), arb_target()).prop_map(|(name, target)| MetricSpec::Resource { name, target }),
        (arb_name(), arb_target()).prop_map(|(name, target)| MetricSpec::ContainerResource {
            name,
            container: "app".into(),
            target
        }),
        (arb_name(), arb_target()).prop_map(|(name, target)| MetricSpec::Pods { name, target }),
        (arb_name(), arb_target()).prop_map(|(name, target)| MetricSpec::Object { name, target }),
        (arb_name(), arb_target()).prop_map(|(name, target)| MetricSpec::External { name, target }),
        Just(MetricSpec::Unknown {
            type_name: "CheddarCheese".into()
        }),
    ]
}

fn arb_policy() -> impl Strategy<Value = ScalingPolicy> {
    (
        prop::sample::select(vec![ScalingPolicyType::Pods, ScalingPolicyType::Percent]),
        prop_oneof![19 => 1i32..300, 1 => any::<i32>()],
        prop_oneof![19 => 1i32..600, 1 => any::<i32>()],
    )
        .prop_map(|(policy_type, value, period_seconds)| ScalingPolicy {
            policy_type,
            value,
            period_seconds,
        })
}

fn arb_rules() -> impl Strategy<Value = ScalingRules> {
    (
        option::of(prop_oneof![19 => 0i32..600, 1 => any::<i32>()]),
        option::of(prop::sample::select(vec![
            SelectPolicy::Max,
            SelectPolicy::Min,
            SelectPolicy::Disabled,
        ])),
        option::of(collection::vec(arb_policy(), 0..4)),
        option::of(prop_oneof![19 => 0.0f64..0.5, 1 => any::<f64>()]),
    )
        .prop_map(
            |(stabilization_window_seconds, select_policy, policies, tolerance)| ScalingRules {
                stabilization_window_seconds,
                select_policy,
                policies,
                tolerance,
            },
        )
}

fn arb_behavior() -> impl Strategy<Value = Option<Behavior>> {
    option::of((option::of(arb_rules()), option::of(arb_rules())).prop_map(
        |(scale_up, scale_down)| Behavior {
            scale_up,
            scale_down,
        },
    ))
}

fn arb_spec() -> impl Strategy<Value = HorizontalSpec> {
    (
        option::of(prop_oneof![19 => 0i32..10, 1 => any::<i32>()]),
        prop_oneof![19 => 10i32..80, 1 => any::<i32>()],
        collection::vec(arb_metric(), 0..4),
        arb_behavior(),
    )
        .prop_map(
            |(min_replicas, max_replicas, metrics, behavior)| HorizontalSpec {
                min_replicas,
                max_replicas,
                metrics,
                behavior,
                extensions: None,
                schedules: Vec::new(),
                predictive: None,
            },
        )
}

fn arb_settings() -> impl Strategy<Value = Settings> {
    (
        prop_oneof![19 => 0.0f64..0.5, 1 => any::<f64>()],
        0u64..600,
        0u64..60,
        0u64..900,
        prop_oneof![19 => 1.0f64..10.0, 1 => any::<f64>()],
        prop_oneof![19 => 1.0f64..10.0, 1 => any::<f64>()],
        any::<bool>(),
    )
        .prop_map(
            |(tolerance, cpu, delay, down, factor, minimum, scale_to_zero)| Settings {
                tolerance,
                cpu_initialization_period: Duration::from_secs(cpu),
                initial_readiness_delay: Duration::from_secs(delay),
                downscale_stabilization: Duration::from_secs(down),
                scale_up_limit_factor: factor,
                scale_up_limit_minimum: minimum,
                scale_to_zero,
            },
        )
}

fn arb_observation() -> impl Strategy<Value = Observation> {
    (
        prop_oneof![19 => 0i32..30, 1 => any::<i32>()],
        option::of(prop_oneof![19 => 0i32..30, 1 => any::<i32>()]),
        collection::vec(arb_pod(), 0..8),
        prop::bool::weighted(0.05),
        collection::btree_map(arb_name(), arb_quantity(), 0..3),
        collection::btree_map(arb_name(), collection::vec(arb_quantity(), 0..3), 0..3),
        collection::btree_set(arb_name(), 0..2),
        collection::btree_map(arb_name(), arb_sample(), 0..2),
    )
        .prop_map(
            |(current, status, mut pods, dup, object, external, unavailable, orphan)| {
                for (i, pod) in pods.iter_mut().enumerate() {
                    pod.name = format!("pod-{i}");
                }
                if dup && pods.len() > 1 {
                    pods[1].name = "pod-0".into();
                }
                Observation {
                    current_replicas: current,
                    status_replicas: status,
                    pods,
                    orphan_samples: BTreeMap::from([("orphan".to_string(), orphan)]),
                    object_metrics: object,
                    external_metrics: external,
                    unavailable_metrics: unavailable,
                }
            },
        )
}

fn arb_history() -> impl Strategy<Value = History> {
    fn event() -> impl Strategy<Value = ScaleEvent> {
        (
            prop_oneof![19 => 1i32..20, 1 => any::<i32>()],
            arb_time(),
            any::<bool>(),
        )
            .prop_map(|(replica_change, time, outdated)| ScaleEvent {
                replica_change,
                time,
                outdated,
            })
    }
    (
        option::of(collection::vec(
            (prop_oneof![19 => 0i32..60, 1 => any::<i32>()], arb_time())
                .prop_map(|(replicas, time)| Recommendation { replicas, time }),
            0..6,
        )),
        collection::vec(event(), 0..5),
        collection::vec(event(), 0..5),
    )
        .prop_map(
            |(recommendations, scale_up_events, scale_down_events)| History {
                recommendations,
                scale_up_events,
                scale_down_events,
                extensions: None,
                predictive: None,
            },
        )
}

/// A CPU-utilization spec with sane bounds, for the properties that need a valid decision.
/// Valid under either `HPAScaleToZero` setting: a cpu-only spec has min 1 or more.
fn arb_valid_spec() -> impl Strategy<Value = HorizontalSpec> {
    (1i32..5, 0i32..40, 10i32..150, arb_behavior()).prop_map(|(min, span, target, behavior)| {
        HorizontalSpec {
            min_replicas: Some(min),
            max_replicas: (min + span).max(1),
            metrics: vec![cpu_utilization(target)],
            behavior: behavior.map(sanitize_behavior),
            extensions: None,
            schedules: Vec::new(),
            predictive: None,
        }
    })
}

fn sanitize_rules(mut r: ScalingRules) -> ScalingRules {
    r.stabilization_window_seconds = r.stabilization_window_seconds.map(|w| w.rem_euclid(3600));
    r.tolerance = r
        .tolerance
        .map(|t| if t.is_finite() { t.abs() } else { 0.1 });
    if let Some(policies) = r.policies.as_mut() {
        for p in policies {
            p.value = p.value.rem_euclid(1000).max(1);
            p.period_seconds = p.period_seconds.rem_euclid(1800).max(1);
        }
    }
    r
}

fn sanitize_behavior(b: Behavior) -> Behavior {
    Behavior {
        scale_up: b.scale_up.map(sanitize_rules),
        scale_down: b.scale_down.map(sanitize_rules),
    }
}

fn sanitize_history(mut h: History) -> History {
    for r in h.recommendations.iter_mut().flatten() {
        r.replicas = r.replicas.rem_euclid(100);
    }
    for e in h
        .scale_up_events
        .iter_mut()
        .chain(h.scale_down_events.iter_mut())
    {
        e.replica_change = e.replica_change.rem_euclid(50);
    }
    h
}

fn cpu_utilization(target: i32) -> MetricSpec {
    MetricSpec::Resource {
        name: "cpu".into(),
        target: MetricTarget::utilization(target),
    }
}

/// `n` ready pods, long started, each requesting 1000m cpu and using `usage[i]`.
fn ready_pods(usages: &[i64]) -> Vec<Pod> {
    usages
        .iter()
        .enumerate()
        .map(|(i, &usage)| Pod {
            name: format!("pod-{i}"),
            phase: PodPhase::Running,
            deleting: false,
            ready: Some(true),
            ready_transition: Some(NOW.plus_secs(-3000)),
            start_time: Some(NOW.plus_secs(-3000)),
            requests: BTreeMap::from([("cpu".to_string(), 1000)]),
            containers: vec![],
            metrics: BTreeMap::from([(
                "cpu".to_string(),
                MetricSample {
                    value: Some(usage),
                    timestamp: NOW.plus_secs(-5),
                    window: Duration::from_secs(60),
                },
            )]),
        })
        .collect()
}

fn observation(current: i32, usages: &[i64]) -> Observation {
    Observation {
        current_replicas: current,
        status_replicas: None,
        pods: ready_pods(usages),
        orphan_samples: BTreeMap::new(),
        object_metrics: BTreeMap::new(),
        external_metrics: BTreeMap::new(),
        unavailable_metrics: BTreeSet::new(),
    }
}

fn within_bounds(spec: &HorizontalSpec, e: &Evaluation) -> Result<(), TestCaseError> {
    let min = spec.min_replicas.unwrap_or(1);
    let d = &e.decision;
    if d.path != DecisionPath::ScalingDisabled {
        prop_assert!(
            min <= d.desired_replicas && d.desired_replicas <= spec.max_replicas,
            "desired {} outside [{min}, {}] on path {:?}",
            d.desired_replicas,
            spec.max_replicas,
            d.path
        );
    } else {
        prop_assert_eq!(d.desired_replicas, 0);
    }
    Ok(())
}

/// The rate limit in force was respected (sections 5.1 and 5.2). On the behavior path the
/// direction is that of the stabilized value (`convertDesiredReplicasWithBehaviorRate`).
fn within_limits(spec: &HorizontalSpec, e: &Evaluation) -> Result<(), TestCaseError> {
    let d = &e.decision;
    let current = d.current_replicas;
    let min = spec.min_replicas.unwrap_or(1);
    let up = d.scale_up_limit;
    match d.path {
        DecisionPath::Legacy => {
            let up = up.expect("a normalization reports its scale-up limit");
            if d.desired_replicas > current {
                prop_assert!(
                    d.desired_replicas <= up.min(spec.max_replicas).max(min),
                    "legacy scale-up to {} beyond the limit {up}",
                    d.desired_replicas
                );
            }
        }
        DecisionPath::Behavior => {
            let up = up.expect("a normalization reports its scale-up limit");
            let down = d
                .scale_down_limit
                .expect("behavior reports its scale-down limit");
            let stabilized = d
                .stabilized_replicas
                .expect("behavior reports the stabilized value");
            if stabilized > current {
                prop_assert!(
                    d.desired_replicas <= up.max(current),
                    "scale-up to {} beyond the policy limit {up} (current {current})",
                    d.desired_replicas
                );
            } else if stabilized < current {
                prop_assert!(
                    d.desired_replicas >= down.min(current),
                    "scale-down to {} beyond the policy limit {down} (current {current})",
                    d.desired_replicas
                );
            } else {
                prop_assert_eq!(d.desired_replicas, current);
            }
        }
        _ => {}
    }
    Ok(())
}

// === reference model of the behavior's rate limits ===

/// The Kubernetes defaults of one direction's policies (`GenerateHPAScaleUpRules`,
/// `GenerateHPAScaleDownRules`): up, 4 pods or 100 % per 15 s (the larger); down, 100 % per
/// 15 s.
fn default_policies(up: bool) -> Vec<ScalingPolicy> {
    let policy = |policy_type, value| ScalingPolicy {
        policy_type,
        value,
        period_seconds: 15,
    };
    if up {
        vec![
            policy(ScalingPolicyType::Pods, 4),
            policy(ScalingPolicyType::Percent, 100),
        ]
    } else {
        vec![policy(ScalingPolicyType::Percent, 100)]
    }
}

/// `getReplicasChangePerPeriod`: the magnitudes of the events strictly after `now - period`.
fn change_in_period(events: &[ScaleEvent], period_seconds: i32) -> i64 {
    let cutoff = NOW.plus_secs(-i64::from(period_seconds));
    events
        .iter()
        .filter(|e| e.time > cutoff)
        .map(|e| i64::from(e.replica_change))
        .sum()
}

/// `calculateScaleUpLimitWithScalingRules` (up) or `calculateScaleDownLimitWithBehaviors`
/// (down), written from the algorithm document, section 5, with nothing of the engine.
fn reference_limit(rules: Option<&ScalingRules>, up: bool, current: i32, h: &History) -> i64 {
    let select = rules.and_then(|r| r.select_policy).unwrap_or_default();
    if select == SelectPolicy::Disabled {
        return i64::from(current);
    }
    let policies = rules
        .and_then(|r| r.policies.clone())
        .unwrap_or_else(|| default_policies(up));
    // "Max" picks the largest change: the highest ceiling up, the lowest floor down.
    let pick_max_change = select == SelectPolicy::Max;
    let mut result: Option<i64> = None;
    for p in &policies {
        let added = change_in_period(&h.scale_up_events, p.period_seconds);
        let removed = change_in_period(&h.scale_down_events, p.period_seconds);
        let start = i64::from(current) - added + removed;
        let value = i64::from(p.value);
        let proposal = match (p.policy_type, up) {
            (ScalingPolicyType::Pods, true) => start + value,
            (ScalingPolicyType::Pods, false) => start - value,
            (ScalingPolicyType::Percent, true) => {
                (start as f64 * (1.0 + value as f64 / 100.0)).ceil() as i32 as i64
            }
            (ScalingPolicyType::Percent, false) => {
                (start as f64 * (1.0 - value as f64 / 100.0)) as i32 as i64
            }
        };
        let wider = if up == pick_max_change {
            proposal.max(result.unwrap_or(i64::MIN))
        } else {
            proposal.min(result.unwrap_or(i64::MAX))
        };
        result = Some(wider);
    }
    result.unwrap_or(if up == pick_max_change {
        i64::from(i32::MIN)
    } else {
        i64::from(i32::MAX)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Any input is either rejected with a field or decided; never a panic. A decision stays
    /// within [min, max] except when scaling is disabled.
    #[test]
    fn evaluate_never_panics_and_respects_bounds(
        settings in arb_settings(),
        spec in arb_spec(),
        observation in arb_observation(),
        history in arb_history(),
    ) {
        match hpa::evaluate(&settings, &spec, &observation, &history, NOW) {
            Err(e) => prop_assert!(!e.field.is_empty()),
            Ok(e) => {
                within_bounds(&spec, &e)?;
                within_limits(&spec, &e)?;
            }
        }
    }

    /// The prenormalized entry point is as robust, and respects bounds and limits too.
    #[test]
    fn normalize_only_never_panics_and_respects_limits(
        settings in arb_settings(),
        spec in arb_spec(),
        current in prop_oneof![19 => 0i32..60, 1 => any::<i32>()],
        prenormalized in prop_oneof![19 => 0i32..200, 1 => any::<i32>()],
        history in arb_history(),
    ) {
        if let Ok(e) = hpa::normalize_only(
            &settings,
            &spec,
            current,
            prenormalized,
            &history,
            NOW,
            hpa::Replayed::default(),
        ) {
            within_limits(&spec, &e)?;
            let min = spec.min_replicas.unwrap_or(1);
            // Inside the bounds whenever the current count is (the shortcuts are skipped).
            if (min..=spec.max_replicas).contains(&current) {
                within_bounds(&spec, &e)?;
            }
        }
    }

    /// Every pod at a utilization within the tolerance band and nothing set aside: the count
    /// stays, on both paths, and nothing scales.
    #[test]
    fn no_change_inside_tolerance(
        spec in arb_valid_spec(),
        current_offset in 0i32..40,
        utilization_step in 0u32..=100,
    ) {
        let settings = Settings::default();
        let min = spec.min_replicas.unwrap_or(1).max(1);
        let current = (min + current_offset).min(spec.max_replicas);
        let MetricSpec::Resource { target, .. } = &spec.metrics[0] else { unreachable!() };
        let target_pct = f64::from(target.average_utilization.unwrap());
        // A whole percentage in [target × 0.9, target × 1.1] (the band of tolerance 0.1).
        let low = (target_pct * 0.9).ceil();
        let high = (target_pct * 1.1).floor();
        let pct = low + (high - low) * f64::from(utilization_step) / 100.0;
        let usage = (pct.round() as i64) * 10; // of a 1000m request
        let usages = vec![usage; current as usize];
        let mut spec = spec;
        // Per-direction tolerances replace the band; keep the controller's here.
        if let Some(b) = spec.behavior.as_mut() {
            for r in [b.scale_up.as_mut(), b.scale_down.as_mut()].into_iter().flatten() {
                r.tolerance = None;
            }
        }
        let e = hpa::evaluate(&settings, &spec, &observation(current, &usages), &History::default(), NOW)
            .expect("valid input");
        prop_assert_eq!(e.decision.desired_replicas, current, "{:?}", e.decision);
        prop_assert!(e.history.scale_up_events.is_empty() && e.history.scale_down_events.is_empty());
    }

    /// The same snapshot evaluated twice at the same instant gives the same decision and
    /// history (a dry run followed by the real call agree), and re-evaluating with the
    /// returned history at the same instant is itself deterministic.
    #[test]
    fn deterministic(
        spec in arb_valid_spec(),
        usages in collection::vec(0i64..3000, 1..12),
        history in arb_history().prop_map(sanitize_history),
    ) {
        let settings = Settings::default();
        let current = (usages.len() as i32).clamp(spec.min_replicas.unwrap_or(1), spec.max_replicas);
        let obs = observation(current, &usages);
        let first = hpa::evaluate(&settings, &spec, &obs, &history, NOW).expect("valid input");
        let dry_run = hpa::evaluate(&settings, &spec, &obs, &history, NOW).expect("valid input");
        prop_assert_eq!(&first, &dry_run);
        let again = hpa::evaluate(&settings, &spec, &obs, &first.history, NOW).expect("valid input");
        let again_2 = hpa::evaluate(&settings, &spec, &obs, &first.history, NOW).expect("valid input");
        prop_assert_eq!(&again, &again_2);
        within_bounds(&spec, &first)?;
        within_limits(&spec, &first)?;
    }

    /// With a behavior, a scale-up never exceeds the policy limit in force and a scale-down
    /// never goes below it, whatever the stored events. The limits are computed here, from
    /// the policies and the events ([`reference_limit`]), not taken from the engine's report.
    #[test]
    fn policy_limits_hold_with_history(
        spec in arb_valid_spec(),
        behavior in arb_behavior().prop_filter("behavior", Option::is_some),
        usages in collection::vec(0i64..5000, 1..20),
        history in arb_history().prop_map(sanitize_history),
    ) {
        let mut spec = spec;
        spec.behavior = behavior.map(sanitize_behavior);
        let current = (usages.len() as i32).clamp(spec.min_replicas.unwrap_or(1), spec.max_replicas);
        let e = hpa::evaluate(&Settings::default(), &spec, &observation(current, &usages), &history, NOW)
            .expect("valid input");
        within_bounds(&spec, &e)?;
        within_limits(&spec, &e)?;
        let d = &e.decision;
        if d.path == DecisionPath::Behavior {
            let b = spec.behavior.as_ref().unwrap();
            let up = reference_limit(b.scale_up.as_ref(), true, current, &history);
            let down = reference_limit(b.scale_down.as_ref(), false, current, &history);
            let stabilized = d.stabilized_replicas.expect("behavior reports it");
            let desired = i64::from(d.desired_replicas);
            let current = i64::from(current);
            let (min, max) = (i64::from(spec.min_replicas.unwrap_or(1)), i64::from(spec.max_replicas));
            if stabilized > d.current_replicas {
                prop_assert_eq!(desired, i64::from(stabilized).min(max).min(up.max(current)).max(min),
                    "scale-up: reference limit {}", up);
            } else if stabilized < d.current_replicas {
                prop_assert_eq!(desired, i64::from(stabilized).max(min).max(down.min(current)).min(max),
                    "scale-down: reference limit {}", down);
            }
        }
    }
}
