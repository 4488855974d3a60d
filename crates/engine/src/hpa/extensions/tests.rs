//! Worked multi-step scenarios through the engine: each step feeds the returned history into
//! the next, as the service does.

use std::{collections::BTreeMap, time::Duration};

use super::{removal::RemovalReason, *};
use crate::{
    hpa::condition::{ConditionReason, ConditionType},
    hpa::history::History,
    hpa::observation::{MetricSample, Observation, Pod, PodPhase},
    hpa::settings::Settings,
    hpa::spec::{HorizontalSpec, MetricSpec, MetricTarget},
    hpa::{DecisionPath, Evaluation, evaluate},
    time::Time,
};

const T0: Time = Time::from_unix_secs(1_800_000_000);

fn queue() -> MetricSpec {
    MetricSpec::external("queue", MetricTarget::average_value(10_000))
}

fn cpu() -> MetricSpec {
    MetricSpec::Resource {
        name: "cpu".into(),
        target: MetricTarget::utilization(50),
    }
}

fn spec(min: i32, metrics: Vec<MetricSpec>, ext: Extensions) -> HorizontalSpec {
    HorizontalSpec {
        min_replicas: Some(min),
        max_replicas: 10,
        metrics,
        behavior: None,
        extensions: Some(ext),
        schedules: Vec::new(),
        predictive: None,
    }
}

/// Min 0, a queue, no extension: scale to zero is the gate's ([`gate_on`]).
fn scale_to_zero_spec() -> HorizontalSpec {
    HorizontalSpec {
        extensions: None,
        ..spec(0, vec![queue()], Extensions::default())
    }
}

/// A queue-only spec with `pause` and, if given, KEDA activation.
fn paused_spec(min: i32, activation: Option<Activation>, pause: Pause) -> HorizontalSpec {
    spec(
        min,
        vec![queue()],
        Extensions {
            activation,
            pause: Some(pause),
            ..Extensions::default()
        },
    )
}

/// `n` ready pods using `usage` of 1000m cpu each, sampled at `at`.
fn pods(n: usize, usage: i64, at: Time) -> Vec<Pod> {
    (0..n)
        .map(|i| Pod {
            name: format!("p{i}"),
            ready: Some(true),
            ready_transition: Some(at.plus_secs(-3600)),
            start_time: Some(at.plus_secs(-3600 + i as i64)),
            requests: BTreeMap::from([("cpu".into(), 1000)]),
            metrics: BTreeMap::from([(
                "cpu".into(),
                MetricSample {
                    value: Some(usage),
                    timestamp: at,
                    window: Duration::from_secs(60),
                },
            )]),
            ..Pod::default()
        })
        .collect()
}

fn obs(current: i32, queue_milli: Option<i64>, at: Time) -> Observation {
    let mut o = Observation {
        current_replicas: current,
        pods: pods(current.max(0) as usize, 500, at),
        ..Observation::default()
    };
    match queue_milli {
        Some(v) => {
            o.external_metrics.insert("queue".into(), vec![v]);
        }
        None => {
            o.unavailable_metrics.insert("queue".into());
        }
    }
    o
}

/// Zero downscale stabilization so that each step shows the rule, not the window; the
/// `HPAScaleToZero` gate off (Kubernetes 1.36), so that KEDA's rules show alone.
fn settings() -> Settings {
    Settings {
        downscale_stabilization: Duration::ZERO,
        scale_to_zero: false,
        ..Settings::default()
    }
}

/// [`settings`] with the `HPAScaleToZero` gate on (Kubernetes 1.37's default).
fn gate_on() -> Settings {
    Settings {
        scale_to_zero: true,
        ..settings()
    }
}

fn step(s: &HorizontalSpec, o: &Observation, h: &History, at: Time) -> Evaluation {
    evaluate(&settings(), s, o, h, at).unwrap()
}

fn step_on(s: &HorizontalSpec, o: &Observation, h: &History, at: Time) -> Evaluation {
    evaluate(&gate_on(), s, o, h, at).unwrap()
}

fn condition(e: &Evaluation, t: ConditionType) -> Option<(bool, ConditionReason)> {
    e.decision
        .conditions
        .iter()
        .find(|c| c.condition_type == t)
        .map(|c| (c.status, c.reason))
}

fn rules(e: &Evaluation) -> Vec<String> {
    e.decision
        .extensions
        .as_ref()
        .map(|r| r.rules.iter().map(|f| f.rule.clone()).collect())
        .unwrap_or_default()
}

#[test]
fn min_zero_without_object_or_external_metric_is_invalid_with_scale_to_zero() {
    let e = evaluate(
        &gate_on(),
        &spec(0, vec![cpu()], Extensions::default()),
        &obs(2, Some(0), T0),
        &History::default(),
        T0,
    )
    .unwrap_err();
    assert_eq!(e.field, "spec.min_replicas");
}

#[test]
fn scale_to_zero_and_wake_on_an_external_metric() {
    let s = scale_to_zero_spec();
    // 2 replicas, empty queue: to zero, ScaledToZero True, stored.
    let e1 = step_on(&s, &obs(2, Some(0), T0), &History::default(), T0);
    assert_eq!(e1.decision.desired_replicas, 0);
    assert_eq!(
        condition(&e1, ConditionType::ScaledToZero),
        Some((true, ConditionReason::ScaledToZero))
    );
    assert!(e1.history.extensions.as_ref().unwrap().scaled_to_zero);
    // At zero, still empty: stays, condition kept.
    let t1 = T0.plus_secs(30);
    let e2 = step_on(&s, &obs(0, Some(0), t1), &e1.history, t1);
    assert_eq!(e2.decision.desired_replicas, 0);
    assert_eq!(
        condition(&e2, ConditionType::ScaledToZero),
        Some((true, ConditionReason::ScaledToZero))
    );
    // 25 items per 10 target: wakes to 3, NotScaledToZero.
    let t2 = T0.plus_secs(60);
    let e3 = step_on(&s, &obs(0, Some(25_000), t2), &e2.history, t2);
    assert_eq!(e3.decision.desired_replicas, 3);
    assert_eq!(
        condition(&e3, ConditionType::ScaledToZero),
        Some((false, ConditionReason::NotScaledToZero))
    );
    assert!(!e3.history.extensions.as_ref().unwrap().scaled_to_zero);
}

#[test]
fn a_target_at_zero_that_we_did_not_scale_to_zero_is_not_woken() {
    let s = scale_to_zero_spec();
    let e = step_on(&s, &obs(0, Some(50_000), T0), &History::default(), T0);
    assert_eq!(e.decision.path, DecisionPath::PausedAtZero);
    assert_eq!(e.decision.desired_replicas, 0);
    assert_eq!(
        condition(&e, ConditionType::ScalingActive),
        Some((false, ConditionReason::ScalingDisabled))
    );
    assert_eq!(condition(&e, ConditionType::ScaledToZero), None);
}

#[test]
fn activation_with_cooldown_then_idle_and_wake() {
    let s = spec(
        0,
        vec![queue()],
        Extensions {
            activation: Some(Activation {
                cooldown_period: Duration::from_secs(300),
                ..Activation::default()
            }),
            metrics: BTreeMap::from([(
                0,
                MetricExtension {
                    activation_threshold: Some(5_000),
                    fallback: None,
                },
            )]),
            ..Extensions::default()
        },
    );
    // Active (20 > 5): the HPA decides 1..N: 20/10 → 2.
    let e1 = step(&s, &obs(2, Some(20_000), T0), &History::default(), T0);
    assert_eq!(e1.decision.desired_replicas, 2);
    assert_eq!(
        condition(&e1, ConditionType::Active),
        Some((true, ConditionReason::ScalerActive))
    );
    assert_eq!(
        e1.history.extensions.as_ref().unwrap().last_active_time,
        Some(T0)
    );
    // 4 is not above the activation threshold 5: inactive, cooling down; the HPA (min 1)
    // goes to 1.
    let t1 = T0.plus_secs(100);
    let e2 = step(&s, &obs(2, Some(4_000), t1), &e1.history, t1);
    assert_eq!(
        condition(&e2, ConditionType::Active),
        Some((false, ConditionReason::ScalerCooldown))
    );
    assert_eq!(e2.decision.desired_replicas, 1);
    // 299 s after the last activity: still cooling down.
    let t2 = T0.plus_secs(299);
    let e3 = step(&s, &obs(1, Some(4_000), t2), &e2.history, t2);
    assert_eq!(e3.decision.desired_replicas, 1);
    assert!(rules(&e3).contains(&"activation.cooldown".to_owned()));
    // 300 s: KEDA's `lastActiveTime + cooldown` is not yet strictly before now.
    let t3 = T0.plus_secs(300);
    let e3 = step(&s, &obs(1, Some(4_000), t3), &e3.history, t3);
    assert_eq!(e3.decision.desired_replicas, 1);
    assert!(rules(&e3).contains(&"activation.cooldown".to_owned()));
    // 301 s: to zero.
    let t3 = T0.plus_secs(301);
    let e4 = step(&s, &obs(1, Some(4_000), t3), &e3.history, t3);
    assert_eq!(e4.decision.desired_replicas, 0);
    assert_eq!(e4.decision.path, DecisionPath::Activation);
    assert!(e4.history.extensions.as_ref().unwrap().scaled_to_zero);
    // At zero and active again: to max(min, 1) = 1, not to the HPA's 3.
    let t4 = T0.plus_secs(400);
    let e5 = step(&s, &obs(0, Some(30_000), t4), &e4.history, t4);
    assert_eq!(e5.decision.desired_replicas, 1);
    assert!(rules(&e5).contains(&"activation.wake".to_owned()));
}

#[test]
fn idle_replicas_after_the_cooldown() {
    let s = spec(
        2,
        vec![queue()],
        Extensions {
            activation: Some(Activation {
                cooldown_period: Duration::from_secs(60),
                idle_replicas: Some(0),
                ..Activation::default()
            }),
            ..Extensions::default()
        },
    );
    let e1 = step(&s, &obs(3, Some(0), T0), &History::default(), T0);
    // Never active, initial cooldown 0: straight to idle.
    assert_eq!(e1.decision.desired_replicas, 0);
    let t1 = T0.plus_secs(10);
    let e2 = step(&s, &obs(0, Some(1), t1), &e1.history, t1);
    // Active below min with idle set: to min.
    assert_eq!(e2.decision.desired_replicas, 2);
}

fn keda(behavior: FallbackBehavior) -> Extensions {
    Extensions {
        fallback: Some(TargetFallback {
            failure_threshold: 2,
            replicas: 6,
            behavior,
        }),
        ..Extensions::default()
    }
}

/// Three failed evaluations of the only metric: the third fires (3 > 2).
fn failing_run(s: &HorizontalSpec, current: i32) -> Vec<Evaluation> {
    let mut h = History::default();
    let mut out = Vec::new();
    for i in 0..3 {
        let at = T0.plus_secs(30 * i);
        let e = step(s, &obs(current, None, at), &h, at);
        h = e.history.clone();
        out.push(e);
    }
    out
}

#[test]
fn keda_fallback_static_fires_after_the_threshold_when_every_metric_fails() {
    let s = spec(1, vec![queue()], keda(FallbackBehavior::Static));
    let run = failing_run(&s, 3);
    assert_eq!(run[0].decision.desired_replicas, 3);
    assert_eq!(run[0].decision.path, DecisionPath::MetricsFailed);
    assert_eq!(
        condition(&run[1], ConditionType::Fallback),
        Some((false, ConditionReason::NoFallbackFound))
    );
    let last = &run[2];
    assert_eq!(last.decision.desired_replicas, 6);
    assert_eq!(
        condition(last, ConditionType::Fallback),
        Some((true, ConditionReason::FallbackExists))
    );
    let state = last.history.extensions.as_ref().unwrap();
    assert_eq!(
        state.metric_health["External/queue"].consecutive_failures,
        3
    );
    // A success resets the count.
    let at = T0.plus_secs(100);
    let ok = step(&s, &obs(6, Some(60_000), at), &last.history, at);
    assert!(
        ok.history
            .extensions
            .as_ref()
            .unwrap()
            .metric_health
            .is_empty()
    );
}

#[test]
fn keda_fallback_behaviors() {
    for (behavior, current, expected) in [
        (FallbackBehavior::CurrentReplicas, 3, 3),
        (FallbackBehavior::CurrentReplicasIfHigher, 3, 6),
        (FallbackBehavior::CurrentReplicasIfHigher, 8, 8),
        (FallbackBehavior::CurrentReplicasIfLower, 3, 3),
        (FallbackBehavior::CurrentReplicasIfLower, 8, 6),
    ] {
        let s = spec(1, vec![queue()], keda(behavior));
        let run = failing_run(&s, current);
        assert_eq!(
            run[2].decision.desired_replicas, expected,
            "{behavior:?} at {current}"
        );
    }
}

#[test]
fn keda_fallback_never_overrides_a_higher_healthy_metric() {
    // cpu at 500m of a 50% target on 8 pods proposes 8; the failed queue falls back to 6.
    let s = spec(1, vec![cpu(), queue()], keda(FallbackBehavior::Static));
    let mut h = History::default();
    let mut last = None;
    for i in 0..3 {
        let at = T0.plus_secs(30 * i);
        let mut o = obs(8, None, at);
        o.pods = pods(8, 500, at);
        let e = step(&s, &o, &h, at);
        h = e.history.clone();
        last = Some(e);
    }
    assert_eq!(last.unwrap().decision.desired_replicas, 8);
}

#[test]
fn fallback_wakes_a_target_from_zero() {
    let mut ext = keda(FallbackBehavior::Static);
    ext.activation = Some(Activation::default());
    let s = spec(0, vec![queue()], ext);
    let run = failing_run(&s, 0);
    assert_eq!(run[1].decision.desired_replicas, 0);
    // Fallback counts as active: wake to 1 (activation's step), the HPA takes it from there.
    assert_eq!(run[2].decision.desired_replicas, 1);
    assert_eq!(
        run[2].decision.extensions.as_ref().unwrap().active,
        Some(true)
    );
}

#[test]
fn kep5679_metric_fallback_after_the_failure_duration() {
    let s = spec(
        1,
        vec![queue()],
        Extensions {
            metrics: BTreeMap::from([(
                0,
                MetricExtension {
                    activation_threshold: None,
                    fallback: Some(MetricFallback {
                        failure_duration: Duration::from_secs(180),
                        replicas: 5,
                    }),
                },
            )]),
            ..Extensions::default()
        },
    );
    let e1 = step(&s, &obs(3, None, T0), &History::default(), T0);
    assert_eq!(e1.decision.desired_replicas, 3);
    assert_eq!(
        condition(&e1, ConditionType::ExternalMetricFallbackActive),
        Some((false, ConditionReason::FallbackInactive))
    );
    let t1 = T0.plus_secs(179);
    let e2 = step(&s, &obs(3, None, t1), &e1.history, t1);
    assert_eq!(e2.decision.desired_replicas, 3);
    let t2 = T0.plus_secs(180);
    let e3 = step(&s, &obs(3, None, t2), &e2.history, t2);
    assert_eq!(e3.decision.desired_replicas, 5);
    assert_eq!(
        condition(&e3, ConditionType::ExternalMetricFallbackActive),
        Some((true, ConditionReason::FallbackActive))
    );
    assert_eq!(
        e3.history.extensions.as_ref().unwrap().metric_health["External/queue"].first_failure_time,
        Some(T0)
    );
}

#[test]
fn pause_replicas_scale_in_and_scale_out() {
    let paused = paused_spec(
        1,
        None,
        Pause {
            paused_replicas: Some(4),
            ..Pause::default()
        },
    );
    let e = step(&paused, &obs(2, Some(90_000), T0), &History::default(), T0);
    assert_eq!(e.decision.desired_replicas, 4);
    assert_eq!(e.decision.path, DecisionPath::Paused);
    assert_eq!(
        condition(&e, ConditionType::Paused),
        Some((true, ConditionReason::ScaledObjectPaused))
    );
    let no_in = paused_spec(
        1,
        None,
        Pause {
            scale_in: true,
            ..Pause::default()
        },
    );
    // Would go to 1; held at 4. Scaling out still works.
    let e = step(&no_in, &obs(4, Some(5_000), T0), &History::default(), T0);
    assert_eq!(e.decision.desired_replicas, 4);
    assert_eq!(
        condition(&e, ConditionType::Paused),
        Some((true, ConditionReason::ScaleInPaused))
    );
    let e = step(&no_in, &obs(4, Some(80_000), T0), &History::default(), T0);
    assert_eq!(e.decision.desired_replicas, 8);
    let no_out = paused_spec(
        1,
        None,
        Pause {
            scale_out: true,
            ..Pause::default()
        },
    );
    let e = step(&no_out, &obs(4, Some(80_000), T0), &History::default(), T0);
    assert_eq!(e.decision.desired_replicas, 4);
    assert_eq!(
        condition(&e, ConditionType::Paused),
        Some((true, ConditionReason::ScaleOutPaused))
    );
    let e = step(&no_out, &obs(4, Some(5_000), T0), &History::default(), T0);
    assert_eq!(e.decision.desired_replicas, 1);
}

#[test]
fn removal_candidates_are_ordered_and_bounded() {
    let s = spec(
        1,
        vec![cpu()],
        Extensions {
            removal_candidates: true,
            ..Extensions::default()
        },
    );
    let mut o = obs(8, Some(0), T0);
    o.external_metrics.clear();
    // p0..p7 at 100m of 1000m: proposal ceil(8 × 0.2) = 2 → remove 6.
    for p in &mut o.pods {
        p.metrics.get_mut("cpu").unwrap().value = Some(100);
    }
    o.pods[0].deleting = true; // excluded
    o.pods[1].phase = PodPhase::Failed; // excluded
    o.pods[2].phase = PodPhase::Pending;
    o.pods[2].ready = Some(false);
    o.pods[3].ready = Some(false);
    o.pods[4].metrics.clear(); // missing
    o.pods[5].metrics.get_mut("cpu").unwrap().value = Some(50); // lowest
    let e = step(&s, &o, &History::default(), T0);
    let d = &e.decision;
    let candidates = &d.extensions.as_ref().unwrap().removal_candidates;
    let limit = (d.current_replicas - d.desired_replicas) as usize;
    assert!(candidates.len() <= limit);
    let got: Vec<(&str, RemovalReason)> = candidates
        .iter()
        .map(|c| (c.pod.as_str(), c.reason))
        .collect();
    // p6 and p7 tie at 0.1: the youngest (p7 started last) first.
    let expected = [
        ("p3", RemovalReason::NotReady),
        ("p2", RemovalReason::Pending),
        ("p4", RemovalReason::MissingMetrics),
        ("p5", RemovalReason::LowestUsage),
        ("p7", RemovalReason::LowestUsage),
        ("p6", RemovalReason::LowestUsage),
    ];
    assert_eq!(got, expected[..got.len()].to_vec());
    assert!(!got.iter().any(|(p, _)| *p == "p0" || *p == "p1"));
}

#[test]
fn stale_samples_count_as_missing_and_let_fallback_apply() {
    let ext = Extensions {
        max_sample_age: Some(Duration::from_secs(120)),
        metrics: BTreeMap::from([(
            0,
            MetricExtension {
                activation_threshold: None,
                fallback: Some(MetricFallback {
                    failure_duration: Duration::from_secs(180),
                    replicas: 6,
                }),
            },
        )]),
        ..Extensions::default()
    };
    let s = spec(1, vec![cpu()], ext);
    // Samples 10 min old: every cpu sample is stale, the metric fails (no scaling), and
    // 180 s later, still stale, the metric's fallback proposes 6.
    let stale = |at: Time| {
        let mut o = obs(3, Some(0), at);
        o.pods = pods(3, 1000, at.plus_secs(-600));
        o
    };
    let e = step(&s, &stale(T0), &History::default(), T0);
    let report = e.decision.extensions.as_ref().unwrap();
    assert_eq!(report.stale_samples, 3);
    assert_eq!(e.decision.desired_replicas, 3);
    let t1 = T0.plus_secs(180);
    let e = step(&s, &stale(t1), &e.history, t1);
    assert_eq!(e.decision.desired_replicas, 6);
    // Fresh samples are used: 3 pods at 100% of a 50% target → 6 as well, without fallback.
    let o = Observation {
        pods: pods(3, 1000, T0.plus_secs(-60)),
        ..stale(T0)
    };
    let e = step(&s, &o, &History::default(), T0);
    assert_eq!(e.decision.extensions.as_ref().unwrap().stale_samples, 0);
    assert!(
        e.decision
            .extensions
            .as_ref()
            .unwrap()
            .fallback_metrics
            .is_empty()
    );
}

#[test]
fn keda_fallback_is_for_external_metrics_only() {
    // KEDA's fallback acts on its scalers' External metrics, never on cpu or memory: a
    // failing cpu metric beside a healthy queue is not replaced, however many failures.
    let mut ext = keda(FallbackBehavior::Static);
    ext.fallback.as_mut().unwrap().failure_threshold = 0;
    let s = spec(1, vec![cpu(), queue()], ext);
    let mut o = obs(3, Some(30_000), T0);
    for p in &mut o.pods {
        p.metrics.clear();
    }
    let e = step(&s, &o, &History::default(), T0);
    assert!(
        e.decision
            .extensions
            .as_ref()
            .unwrap()
            .fallback_metrics
            .is_empty()
    );
}

/// KEDA `TestCheckFallbackValid` ("CPU trigger - invalid", "Memory trigger - invalid",
/// "Multiple triggers with one CPU and one valid - valid") and the webhook test "shouldn't
/// validate the so creation when the fallback is configured and only cpu/memory triggers are
/// used": a fallback needs a trigger that is not cpu or memory.
#[test]
fn check_fallback_valid_needs_a_trigger_that_is_not_cpu_or_memory() {
    let ext = keda(FallbackBehavior::Static);
    let e = evaluate(
        &settings(),
        &spec(1, vec![cpu()], ext.clone()),
        &obs(3, Some(0), T0),
        &History::default(),
        T0,
    )
    .unwrap_err();
    assert_eq!(e.field, "spec.fallback");
    // The default metric (cpu at 80 %) is a cpu trigger too.
    let e = evaluate(
        &settings(),
        &spec(1, vec![], ext.clone()),
        &obs(3, Some(0), T0),
        &History::default(),
        T0,
    )
    .unwrap_err();
    assert_eq!(e.field, "spec.fallback");
    assert!(
        evaluate(
            &settings(),
            &spec(1, vec![cpu(), queue()], ext),
            &obs(3, Some(0), T0),
            &History::default(),
            T0,
        )
        .is_ok()
    );
}

/// KEDA `CheckReplicaCountBoundsAreValid` with `GetHPAMinReplicas` (`TestGetHPAReplicas`
/// "Zero min, default max"): a `minReplicaCount` of 0 is read as 1, so idle 0 with min 0 is
/// admitted and idle 1 with min 0 is not (`IdleReplicaCount=1 must be less than
/// MinReplicaCount=1`).
#[test]
fn check_replica_count_bounds_read_min_zero_as_one() {
    let with_idle = |min: i32, idle: i32| {
        spec(
            min,
            vec![queue()],
            Extensions {
                activation: Some(Activation {
                    idle_replicas: Some(idle),
                    ..Activation::default()
                }),
                ..Extensions::default()
            },
        )
    };
    let run = |s: &HorizontalSpec| {
        evaluate(
            &settings(),
            s,
            &obs(2, Some(0), T0),
            &History::default(),
            T0,
        )
    };
    // Min 0, idle 0: admitted; inactive with the initial cooldown of 0, to idle (0).
    let e = run(&with_idle(0, 0)).unwrap();
    assert_eq!(e.decision.desired_replicas, 0);
    assert_eq!(
        run(&with_idle(0, 1)).unwrap_err().field,
        "spec.activation.idle_replicas"
    );
    assert_eq!(
        run(&with_idle(2, 2)).unwrap_err().field,
        "spec.activation.idle_replicas"
    );
    assert!(run(&with_idle(2, 0)).is_ok());
}

/// KEDA 2.19 (#7244, `getScalerState` in `pkg/scaling/scale_handler.go` with
/// `GetMetricsWithFallback`, and `RequestScale`'s default branch in
/// `pkg/scaling/executor/scale_scaledobjects.go`): a fallback in force is an active trigger,
/// not an error, so it refreshes `lastActiveTime`. Cooldown 300 s, the metric failing from
/// 15 s to 240 s (the fallback in force from the third failure), idle from 255 s: the
/// cooldown counts from 240 s, so the target holds at 540 s and goes to zero after.
#[test]
fn fallback_in_force_refreshes_the_last_active_time_keda_7244() {
    let mut ext = keda(FallbackBehavior::Static);
    ext.activation = Some(Activation::default());
    let s = spec(0, vec![queue()], ext);
    let mut h = History::default();
    let at_secs = |t: i64, queue: Option<i64>, h: &mut History| {
        let at = T0.plus_secs(t);
        let e = step(&s, &obs(2, queue, at), h, at);
        *h = e.history.clone();
        e
    };
    at_secs(0, Some(20_000), &mut h);
    let mut t = 15;
    while t <= 240 {
        let e = at_secs(t, None, &mut h);
        let state = e.history.extensions.as_ref().unwrap();
        if state.metric_health["External/queue"].consecutive_failures > 2 {
            // In force: active, and the time is refreshed.
            assert_eq!(state.last_active_time, Some(T0.plus_secs(t)), "at {t} s");
            assert_eq!(
                condition(&e, ConditionType::Active),
                Some((true, ConditionReason::ScalerActive))
            );
        }
        t += 15;
    }
    while t <= 540 {
        let e = at_secs(t, Some(0), &mut h);
        assert_ne!(e.decision.desired_replicas, 0, "at {t} s");
        assert_eq!(
            condition(&e, ConditionType::Active),
            Some((false, ConditionReason::ScalerCooldown)),
            "at {t} s"
        );
        t += 15;
    }
    let e = at_secs(555, Some(0), &mut h);
    assert_eq!(e.decision.desired_replicas, 0);
}

#[test]
fn keda_fallback_reaches_the_hpa_as_a_metric_value() {
    // AverageValue: the value is target × R, so the HPA's tolerance applies: R = 21 at 20
    // replicas is a ratio of 1.05, within 0.1, and the count stays.
    let mut ext = keda(FallbackBehavior::Static);
    let f = ext.fallback.as_mut().unwrap();
    f.failure_threshold = 0;
    f.replicas = 21;
    let s = HorizontalSpec {
        max_replicas: 30,
        ..spec(1, vec![queue()], ext.clone())
    };
    let e = step(&s, &obs(20, None, T0), &History::default(), T0);
    assert_eq!(e.decision.desired_replicas, 20);
    assert_eq!(
        e.decision.extensions.as_ref().unwrap().fallback_metrics,
        vec![0]
    );
    assert_eq!(e.decision.metrics[0].result.as_ref().unwrap().replicas, 20);
    // 30 at 20 replicas (ratio 1.5): 30.
    ext.fallback.as_mut().unwrap().replicas = 30;
    let s = HorizontalSpec {
        max_replicas: 30,
        ..spec(1, vec![queue()], ext.clone())
    };
    let e = step(&s, &obs(20, None, T0), &History::default(), T0);
    assert_eq!(e.decision.desired_replicas, 30);
    // Value target: target × R / ready; with no ready replica KEDA cannot fall back and the
    // metric stays failed, though the Fallback condition says it is in force.
    let value_queue = MetricSpec::external("queue", MetricTarget::value(10_000));
    ext.fallback.as_mut().unwrap().replicas = 6;
    let s = spec(1, vec![value_queue], ext);
    let e = step(&s, &obs(3, None, T0), &History::default(), T0);
    assert_eq!(e.decision.desired_replicas, 6);
    let mut unready = obs(3, None, T0);
    for p in &mut unready.pods {
        p.ready = Some(false);
    }
    let e = step(&s, &unready, &History::default(), T0);
    assert_eq!(e.decision.desired_replicas, 3);
    assert_eq!(e.decision.path, DecisionPath::MetricsFailed);
    assert_eq!(
        condition(&e, ConditionType::Fallback),
        Some((true, ConditionReason::FallbackExists))
    );
}

#[test]
fn empty_extensions_decide_as_the_hpa() {
    let base = HorizontalSpec {
        extensions: None,
        ..spec(1, vec![cpu(), queue()], Extensions::default())
    };
    let with = spec(1, vec![cpu(), queue()], Extensions::default());
    for (current, q) in [(2, Some(50_000)), (5, Some(0)), (3, None)] {
        let o = obs(current, q, T0);
        let a = step(&base, &o, &History::default(), T0);
        let b = step(&with, &o, &History::default(), T0);
        assert_eq!(a.decision.desired_replicas, b.decision.desired_replicas);
        assert_eq!(a.decision.conditions, b.decision.conditions);
        assert_eq!(a.history.recommendations, b.history.recommendations);
    }
}

/// Min 0, KEDA activation with the default 300 s cooldown, a queue and a second External
/// trigger `jobs` (both AverageValue 10).
fn two_triggers(ext_fallback: Option<TargetFallback>) -> HorizontalSpec {
    let jobs = MetricSpec::external("jobs", MetricTarget::average_value(10_000));
    spec(
        0,
        vec![queue(), jobs],
        Extensions {
            activation: Some(Activation::default()),
            fallback: ext_fallback,
            ..Extensions::default()
        },
    )
}

fn with_jobs(mut o: Observation, jobs_milli: Option<i64>) -> Observation {
    match jobs_milli {
        Some(v) => {
            o.external_metrics.insert("jobs".into(), vec![v]);
        }
        None => {
            o.unavailable_metrics.insert("jobs".into());
        }
    }
    o
}

#[test]
fn a_failing_trigger_never_takes_a_target_to_zero() {
    // KEDA `RequestScale`: inactive with `isError` and no fallback is Ready False /
    // `TriggerError`, not `scaleToZeroOrIdle`.
    let s = two_triggers(None);
    let mut h = History::default();
    for i in 0..4 {
        let at = T0.plus_secs(400 * i);
        let e = step(&s, &with_jobs(obs(3, Some(0), at), None), &h, at);
        // The HPA decides, and it does not scale down while a metric fails
        // (`computeReplicasForMetrics`); activation does not take it to zero either.
        assert_eq!(e.decision.desired_replicas, 3, "step {i}");
        assert_eq!(
            condition(&e, ConditionType::Active),
            Some((false, ConditionReason::ScalerNotActive))
        );
        assert!(rules(&e).contains(&"activation.trigger_error".to_owned()));
        h = e.history;
    }
    // Once the trigger answers again (and the cooldown, counted from creation, is long
    // over), the idle target goes to zero.
    let at = T0.plus_secs(2000);
    let e = step(&s, &with_jobs(obs(3, Some(0), at), Some(0)), &h, at);
    assert_eq!(e.decision.desired_replicas, 0);
    // A fallback of 0 replicas is no fallback to KEDA here: the idle rule applies.
    let zero = two_triggers(Some(TargetFallback {
        failure_threshold: 3,
        replicas: 0,
        behavior: FallbackBehavior::Static,
    }));
    let e = step(
        &zero,
        &with_jobs(obs(1, Some(0), T0), None),
        &History::default(),
        T0,
    );
    assert_eq!(e.decision.desired_replicas, 0);
}

#[test]
fn a_failing_trigger_does_not_refresh_the_last_active_time() {
    let s = two_triggers(None);
    // Active and healthy: last active now.
    let e1 = step(
        &s,
        &with_jobs(obs(2, Some(20_000), T0), Some(0)),
        &History::default(),
        T0,
    );
    assert_eq!(
        e1.history.extensions.as_ref().unwrap().last_active_time,
        Some(T0)
    );
    // Active (queue) while jobs fails: KEDA's `PartialTriggerError`, the time stays.
    let t1 = T0.plus_secs(200);
    let e2 = step(
        &s,
        &with_jobs(obs(2, Some(20_000), t1), None),
        &e1.history,
        t1,
    );
    assert_eq!(e2.decision.desired_replicas, 2);
    assert_eq!(
        condition(&e2, ConditionType::Active),
        Some((true, ConditionReason::ScalerActive))
    );
    assert_eq!(
        e2.history.extensions.as_ref().unwrap().last_active_time,
        Some(T0)
    );
    // Both idle and healthy 301 s after the last activity without error: to zero (it would
    // still be cooling down had the failing evaluation refreshed the time).
    let t2 = T0.plus_secs(301);
    let e3 = step(
        &s,
        &with_jobs(obs(1, Some(0), t2), Some(0)),
        &e2.history,
        t2,
    );
    assert_eq!(e3.decision.desired_replicas, 0);
}

#[test]
fn pause_in_activation_as_keda_applies_it() {
    let s_in = paused_spec(
        0,
        Some(Activation::default()),
        Pause {
            scale_in: true,
            ..Pause::default()
        },
    );
    // Never active with an initial cooldown of 0, it would scale in at once; with scale-in
    // paused `scaleToZeroOrIdle` returns first: `ScalerNotActive`, never `ScalerCooldown`,
    // and the count stays.
    let e = step(&s_in, &obs(2, Some(0), T0), &History::default(), T0);
    assert_eq!(e.decision.desired_replicas, 2);
    assert_eq!(
        condition(&e, ConditionType::Active),
        Some((false, ConditionReason::ScalerNotActive))
    );
    // Scale-out paused does not stop KEDA from setting min on an inactive target below it.
    let s_out = paused_spec(
        2,
        Some(Activation::default()),
        Pause {
            scale_out: true,
            ..Pause::default()
        },
    );
    let e = step(&s_out, &obs(0, Some(0), T0), &History::default(), T0);
    assert_eq!(e.decision.desired_replicas, 2);
    assert!(rules(&e).contains(&"activation.min".to_owned()));
    // But it does stop the wake of an active one.
    let e = step(&s_out, &obs(0, Some(50_000), T0), &History::default(), T0);
    assert_eq!(e.decision.desired_replicas, 0);
    assert_eq!(
        e.history.extensions.as_ref().unwrap().last_active_time,
        None
    );
}

#[test]
fn scaled_to_zero_is_false_after_every_rescale_that_is_not_to_zero() {
    let s = scale_to_zero_spec();
    // 3 → 5 on 50 items: `NotScaledToZero`, as upstream sets after any other rescale.
    let e = step_on(&s, &obs(3, Some(50_000), T0), &History::default(), T0);
    assert_eq!(e.decision.desired_replicas, 5);
    assert_eq!(
        condition(&e, ConditionType::ScaledToZero),
        Some((false, ConditionReason::NotScaledToZero))
    );
    // No rescale: the condition stays as the last rescale set it (it is HPA status).
    let t1 = T0.plus_secs(15);
    let e = step_on(&s, &obs(5, Some(50_000), t1), &e.history, t1);
    assert_eq!(e.decision.desired_replicas, 5);
    assert_eq!(
        condition(&e, ConditionType::ScaledToZero),
        Some((false, ConditionReason::NotScaledToZero))
    );
    // The gate off (Kubernetes 1.36): the HPA sets no ScaledToZero condition at all.
    let e = step(
        &spec(1, vec![queue()], Extensions::default()),
        &obs(3, Some(50_000), T0),
        &History::default(),
        T0,
    );
    assert_eq!(e.decision.desired_replicas, 5);
    assert_eq!(condition(&e, ConditionType::ScaledToZero), None);
}

#[test]
fn a_target_we_scaled_to_zero_wakes_when_min_is_raised() {
    let s0 = scale_to_zero_spec();
    let e1 = step_on(&s0, &obs(2, Some(0), T0), &History::default(), T0);
    assert_eq!(e1.decision.desired_replicas, 0);
    // min raised to 2 while at zero, queue still empty: `shouldComputeMetricsForZeroReplicas`
    // (min != 0 and ScaledToZero True) computes the metrics, and the result is raised to min.
    let mut s2 = s0.clone();
    s2.min_replicas = Some(2);
    let t1 = T0.plus_secs(30);
    let e2 = step_on(&s2, &obs(0, Some(0), t1), &e1.history, t1);
    assert_eq!(e2.decision.desired_replicas, 2);
    assert_eq!(
        condition(&e2, ConditionType::ScaledToZero),
        Some((false, ConditionReason::NotScaledToZero))
    );
    assert!(!e2.history.extensions.as_ref().unwrap().scaled_to_zero);
    // With 40 items the metric decides (4 > min).
    let e3 = step_on(&s2, &obs(0, Some(40_000), t1), &e1.history, t1);
    assert_eq!(e3.decision.desired_replicas, 4);
    // A target at zero that we did not scale there stays disabled with min 2.
    let e4 = step_on(&s2, &obs(0, Some(40_000), t1), &History::default(), t1);
    assert_eq!(e4.decision.desired_replicas, 0);
    assert_eq!(e4.decision.path, DecisionPath::ScalingDisabled);
}

#[test]
fn pause_of_one_direction_is_keda_hpa_with_that_select_policy_disabled() {
    let no_out = |min: i32| {
        paused_spec(
            min,
            None,
            Pause {
                scale_out: true,
                ..Pause::default()
            },
        )
    };
    // The rate limit holds the count, with the HPA's own condition.
    let e = step(
        &no_out(1),
        &obs(4, Some(80_000), T0),
        &History::default(),
        T0,
    );
    assert_eq!(e.decision.desired_replicas, 4);
    assert_eq!(e.decision.path, DecisionPath::Behavior);
    assert_eq!(
        condition(&e, ConditionType::ScalingLimited),
        Some((true, ConditionReason::ScaleUpLimit))
    );
    // Below min the HPA's correction ignores behavior: to min, paused or not.
    let e = step(
        &no_out(3),
        &obs(1, Some(80_000), T0),
        &History::default(),
        T0,
    );
    assert_eq!(e.decision.desired_replicas, 3);
    assert_eq!(e.decision.path, DecisionPath::BelowMinReplicas);
    // Scale-in paused on a spec without behavior: KEDA's HPA now has one, so the scale-up
    // rate is behavior's default (4 pods or 100 % per 15 s: 1 → 5), not the legacy limit
    // (max(2 × 1, 4) = 4).
    let no_in = paused_spec(
        1,
        None,
        Pause {
            scale_in: true,
            ..Pause::default()
        },
    );
    let e = step(&no_in, &obs(1, Some(100_000), T0), &History::default(), T0);
    assert_eq!(e.decision.desired_replicas, 5);
}

#[test]
fn activation_steps_are_not_hpa_scale_events() {
    // A scale-up policy of 1 pod per 60 s: KEDA's wake 0 → 1 is not the HPA's rescale, so it
    // does not use up the policy (`storeScaleEvent` runs after the HPA's own update only).
    let mut s = spec(
        0,
        vec![queue()],
        Extensions {
            activation: Some(Activation::default()),
            ..Extensions::default()
        },
    );
    s.behavior = Some(crate::hpa::spec::Behavior {
        scale_up: Some(crate::hpa::spec::ScalingRules {
            stabilization_window_seconds: Some(0),
            select_policy: None,
            policies: Some(vec![crate::hpa::spec::ScalingPolicy {
                policy_type: crate::hpa::spec::ScalingPolicyType::Pods,
                value: 1,
                period_seconds: 60,
            }]),
            tolerance: None,
        }),
        scale_down: None,
    });
    let e1 = step(&s, &obs(0, Some(50_000), T0), &History::default(), T0);
    assert_eq!(e1.decision.desired_replicas, 1);
    assert!(e1.history.scale_up_events.is_empty());
    let t1 = T0.plus_secs(15);
    let e2 = step(&s, &obs(1, Some(50_000), t1), &e1.history, t1);
    assert_eq!(e2.decision.desired_replicas, 2);
    assert_eq!(e2.history.scale_up_events.len(), 1);
}

#[test]
fn paused_holds_the_current_count_and_paused_replicas_wins() {
    let paused = |replicas: Option<i32>| {
        paused_spec(
            1,
            None,
            Pause {
                paused: true,
                paused_replicas: replicas,
                ..Pause::default()
            },
        )
    };
    // 90 items would take 2 replicas to 9: held at 2.
    let e = step(
        &paused(None),
        &obs(2, Some(90_000), T0),
        &History::default(),
        T0,
    );
    assert_eq!(e.decision.desired_replicas, 2);
    assert_eq!(e.decision.path, DecisionPath::Paused);
    assert_eq!(
        condition(&e, ConditionType::Paused),
        Some((true, ConditionReason::ScaledObjectPaused))
    );
    let e = step(
        &paused(Some(5)),
        &obs(2, Some(90_000), T0),
        &History::default(),
        T0,
    );
    assert_eq!(e.decision.desired_replicas, 5);
}

#[test]
fn forced_activation_wakes_and_keeps_a_target_active() {
    let s = spec(
        0,
        vec![queue()],
        Extensions {
            activation: Some(Activation {
                force_activation: true,
                ..Activation::default()
            }),
            ..Extensions::default()
        },
    );
    // An empty queue at zero: woken to 1 anyway. KEDA's wake is not an HPA rescale, and the
    // zero was not ours: no ScaledToZero condition.
    let e = step(&s, &obs(0, Some(0), T0), &History::default(), T0);
    assert_eq!(e.decision.desired_replicas, 1);
    assert_eq!(e.decision.extensions.as_ref().unwrap().active, Some(true));
    assert_eq!(condition(&e, ConditionType::ScaledToZero), None);
    // Long after: never idle, the HPA (min 1) decides.
    let t1 = T0.plus_secs(3600);
    let e = step(&s, &obs(3, Some(0), t1), &e.history, t1);
    assert_eq!(e.decision.desired_replicas, 1);
    assert_eq!(
        condition(&e, ConditionType::Active),
        Some((true, ConditionReason::ScalerActive))
    );
}
