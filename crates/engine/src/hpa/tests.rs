use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::{
    hpa::history::Recommendation,
    hpa::observation::{MetricSample, Pod},
    hpa::spec::{Behavior, MetricTarget},
};

const NOW: Time = Time::from_unix_secs(1_800_000_000);

fn cpu(target: i32) -> MetricSpec {
    MetricSpec::Resource {
        name: "cpu".into(),
        target: MetricTarget::utilization(target),
    }
}

fn spec(min: i32, max: i32, behavior: Option<Behavior>) -> HorizontalSpec {
    HorizontalSpec {
        min_replicas: Some(min),
        max_replicas: max,
        metrics: vec![cpu(50)],
        behavior,
        extensions: None,
        schedules: Vec::new(),
        predictive: None,
    }
}

/// `n` ready pods requesting 1000m cpu and using `usage` each.
fn observation(current: i32, n: usize, usage: i64) -> Observation {
    Observation {
        current_replicas: current,
        pods: (0..n)
            .map(|i| Pod {
                name: format!("p{i}"),
                ready: Some(true),
                ready_transition: Some(NOW.plus_secs(-1000)),
                start_time: Some(NOW.plus_secs(-1000)),
                requests: BTreeMap::from([("cpu".into(), 1000)]),
                metrics: BTreeMap::from([(
                    "cpu".into(),
                    MetricSample {
                        value: Some(usage),
                        timestamp: NOW,
                        window: Duration::from_secs(60),
                    },
                )]),
                ..Pod::default()
            })
            .collect(),
        ..Observation::default()
    }
}

fn reason(e: &Evaluation, t: ConditionType) -> Option<ConditionReason> {
    e.decision
        .conditions
        .iter()
        .find(|c| c.condition_type == t)
        .map(|c| c.reason)
}

#[test]
fn above_max_shortcut_stores_an_event_with_behavior_but_no_recommendation() {
    let s = spec(1, 4, Some(Behavior::default()));
    let history = History {
        recommendations: Some(vec![]),
        ..History::default()
    };
    let e = evaluate(
        &Settings::default(),
        &s,
        &observation(6, 6, 500),
        &history,
        NOW,
    )
    .unwrap();
    assert_eq!(e.decision.desired_replicas, 4);
    assert_eq!(e.decision.path, DecisionPath::AboveMaxReplicas);
    assert_eq!(e.history.recommendations, Some(vec![]));
    assert_eq!(e.history.scale_down_events.len(), 1);
    assert_eq!(e.history.scale_down_events[0].replica_change, 2);
    assert_eq!(
        reason(&e, ConditionType::AbleToScale),
        Some(ConditionReason::SucceededRescale)
    );
    assert_eq!(reason(&e, ConditionType::ScalingActive), None);
    assert_eq!(reason(&e, ConditionType::ScalingLimited), None);
    assert_eq!(
        e.decision.rescale_reason.as_deref(),
        Some(messages::ABOVE_MAX)
    );
}

#[test]
fn legacy_path_records_the_prenormalized_value_and_no_event() {
    // 3 pods at 100% of a 50% target: proposal 6.
    let e = evaluate(
        &Settings::default(),
        &spec(1, 10, None),
        &observation(3, 3, 1000),
        &History::default(),
        NOW,
    )
    .unwrap();
    assert_eq!(e.decision.desired_replicas, 6);
    assert_eq!(e.decision.prenormalized_replicas, Some(6));
    let recs = e.history.recommendations.unwrap();
    // recordInitialRecommendation (3), then the proposal appended (nothing expired).
    assert_eq!(
        recs,
        vec![
            Recommendation {
                replicas: 3,
                time: NOW
            },
            Recommendation {
                replicas: 6,
                time: NOW
            }
        ]
    );
    assert!(e.history.scale_up_events.is_empty());
    assert_eq!(
        e.decision.rescale_reason.as_deref(),
        Some("cpu resource utilization (percentage of request) above target")
    );
}

/// Algorithm document, section 10: without behavior, with a downscale stabilization of 0
/// and no stored recommendations, the `(current, now)` entry that
/// `recordInitialRecommendation` stores is strictly before `stabilizeRecommendation`'s
/// cutoff upstream, so it does not hold the count: the scale-down happens at once and the
/// initial entry's slot is reused.
#[test]
fn legacy_zero_downscale_window_ignores_the_initial_recommendation() {
    let settings = Settings {
        downscale_stabilization: Duration::ZERO,
        ..Settings::default()
    };
    // 4 pods at 10% of a 50% target: proposal 1.
    let e = evaluate(
        &settings,
        &spec(1, 10, None),
        &observation(4, 4, 100),
        &History::default(),
        NOW,
    )
    .unwrap();
    assert_eq!(e.decision.prenormalized_replicas, Some(1));
    assert_eq!(e.decision.stabilized_replicas, Some(1));
    assert_eq!(e.decision.desired_replicas, 1);
    assert_eq!(
        reason(&e, ConditionType::AbleToScale),
        Some(ConditionReason::SucceededRescale)
    );
    assert_eq!(
        e.history.recommendations,
        Some(vec![Recommendation {
            replicas: 1,
            time: NOW
        }])
    );
    // With a window of 1 s the initial entry counts and holds the count, as upstream.
    let one_second = Settings {
        downscale_stabilization: Duration::from_secs(1),
        ..Settings::default()
    };
    let held = evaluate(
        &one_second,
        &spec(1, 10, None),
        &observation(4, 4, 100),
        &History::default(),
        NOW,
    )
    .unwrap();
    assert_eq!(held.decision.stabilized_replicas, Some(4));
    assert_eq!(held.decision.desired_replicas, 4);
    assert_eq!(
        reason(&held, ConditionType::AbleToScale),
        Some(ConditionReason::ScaleDownStabilized)
    );
}

/// The same with behavior and both windows at 0: the initial entry is older than both
/// zero-width cutoffs (`stabilizeRecommendationWithBehaviors`' `Before`), so its slot is
/// reused instead of a stale 4 staying in the list for later, wider windows.
#[test]
fn behavior_zero_windows_reuse_the_initial_recommendation() {
    let zero = crate::hpa::spec::ScalingRules {
        stabilization_window_seconds: Some(0),
        ..crate::hpa::spec::ScalingRules::default()
    };
    let behavior = Behavior {
        scale_up: Some(zero.clone()),
        scale_down: Some(zero),
    };
    let e = evaluate(
        &Settings::default(),
        &spec(1, 10, Some(behavior)),
        &observation(4, 4, 100),
        &History::default(),
        NOW,
    )
    .unwrap();
    assert_eq!(e.decision.desired_replicas, 1);
    assert_eq!(
        e.history.recommendations,
        Some(vec![Recommendation {
            replicas: 1,
            time: NOW
        }])
    );
}

#[test]
fn metrics_failure_records_nothing_and_keeps_the_count() {
    let mut obs = observation(3, 3, 1000);
    obs.unavailable_metrics.insert("cpu".into());
    let history = History {
        recommendations: Some(vec![]),
        ..History::default()
    };
    let e = evaluate(
        &Settings::default(),
        &spec(1, 10, None),
        &obs,
        &history,
        NOW,
    )
    .unwrap();
    assert_eq!(e.decision.path, DecisionPath::MetricsFailed);
    assert_eq!(e.decision.desired_replicas, 3);
    assert!(e.decision.error.is_some());
    assert_eq!(e.history, history);
    assert_eq!(
        reason(&e, ConditionType::ScalingActive),
        Some(ConditionReason::FailedGetResourceMetric)
    );
}

#[test]
fn one_invalid_metric_blocks_a_scale_down_but_not_a_scale_up() {
    let mut s = spec(1, 10, None);
    s.metrics.push(MetricSpec::Unknown {
        type_name: "CheddarCheese".into(),
    });
    let history = History {
        recommendations: Some(vec![]),
        ..History::default()
    };
    let down = evaluate(
        &Settings::default(),
        &s,
        &observation(4, 4, 100),
        &history,
        NOW,
    )
    .unwrap();
    assert_eq!(down.decision.path, DecisionPath::MetricsFailed);
    assert_eq!(down.decision.desired_replicas, 4);
    let up = evaluate(
        &Settings::default(),
        &s,
        &observation(4, 4, 1000),
        &history,
        NOW,
    )
    .unwrap();
    assert_eq!(up.decision.desired_replicas, 8);
    assert!(
        up.decision
            .error
            .as_deref()
            .unwrap()
            .starts_with("invalid metrics (1 invalid out of 2), first error is: ")
    );
    assert_eq!(
        reason(&up, ConditionType::ScalingActive),
        Some(ConditionReason::ValidMetricFound)
    );
}

#[test]
fn disabled_when_scaled_to_zero_with_min_above_zero() {
    let e = evaluate(
        &Settings::default(),
        &spec(1, 10, Some(Behavior::default())),
        &observation(0, 0, 0),
        &History::default(),
        NOW,
    )
    .unwrap();
    assert_eq!(e.decision.path, DecisionPath::ScalingDisabled);
    assert_eq!(e.decision.desired_replicas, 0);
    assert_eq!(
        reason(&e, ConditionType::ScalingActive),
        Some(ConditionReason::ScalingDisabled)
    );
    // recordInitialRecommendation still ran.
    assert_eq!(e.history.recommendations.map(|r| r.len()), Some(1));
    assert!(e.history.scale_down_events.is_empty());
}

#[test]
fn invalid_input_is_rejected_with_its_field() {
    let e = evaluate(
        &Settings::default(),
        &spec(1, 10, None),
        &observation(-1, 0, 0),
        &History::default(),
        NOW,
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "current_replicas: must not be negative");
    let e = normalize_only(
        &Settings::default(),
        &spec(5, 3, None),
        3,
        3,
        &History::default(),
        NOW,
        Replayed::default(),
    )
    .unwrap_err();
    assert_eq!(e.field, "spec.max_replicas");
}
