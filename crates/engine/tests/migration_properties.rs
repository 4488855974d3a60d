//! Properties of the migration extensions (`engine::hpa::extensions`):
//!
//! * extensions that enable nothing never change a decision (count, conditions, stored
//!   recommendations and events) against the same spec without them;
//! * fallback never lowers the prenormalized proposal below a healthy metric's proposal.

use std::{collections::BTreeMap, time::Duration};

use autoscaled_engine::{
    hpa::history::History,
    hpa::observation::{MetricSample, Observation, Pod},
    hpa::settings::Settings,
    hpa::spec::{HorizontalSpec, MetricSpec, MetricTarget},
    hpa::{
        evaluate,
        extensions::{ExtensionState, Extensions, FallbackBehavior, TargetFallback},
    },
    time::Time,
};
use proptest::prelude::*;

const NOW: Time = Time::from_unix_secs(1_800_000_000);

fn metrics() -> Vec<MetricSpec> {
    vec![
        MetricSpec::Resource {
            name: "cpu".into(),
            target: MetricTarget::utilization(50),
        },
        MetricSpec::external("queue", MetricTarget::average_value(10_000)),
    ]
}

fn observation(current: i32, usages: &[i64], queue: Option<i64>) -> Observation {
    let mut o = Observation {
        current_replicas: current,
        pods: usages
            .iter()
            .enumerate()
            .map(|(i, u)| Pod {
                name: format!("p{i}"),
                ready: Some(true),
                ready_transition: Some(NOW.plus_secs(-3600)),
                start_time: Some(NOW.plus_secs(-3600)),
                requests: BTreeMap::from([("cpu".into(), 1000)]),
                metrics: BTreeMap::from([(
                    "cpu".into(),
                    MetricSample {
                        value: Some(*u),
                        timestamp: NOW,
                        window: Duration::from_secs(60),
                    },
                )]),
                ..Pod::default()
            })
            .collect(),
        ..Observation::default()
    };
    match queue {
        Some(q) => {
            o.external_metrics.insert("queue".into(), vec![q]);
        }
        None => {
            o.unavailable_metrics.insert("queue".into());
        }
    }
    o
}

fn settings(window: u64) -> Settings {
    Settings {
        downscale_stabilization: Duration::from_secs(window),
        ..Settings::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn extensions_that_enable_nothing_never_change_a_decision(
        min in 1..4i32,
        max in 4..20i32,
        usages in proptest::collection::vec(0..3000i64, 1..8),
        queue in proptest::option::of(0..200_000i64),
        window in prop_oneof![Just(0u64), Just(300u64)],
        previous in proptest::option::of(1..20i32),
    ) {
        let current = i32::try_from(usages.len()).unwrap();
        let base = HorizontalSpec {
            min_replicas: Some(min),
            max_replicas: max,
            metrics: metrics(),
            behavior: None,
            extensions: None,
            schedules: Vec::new(), predictive: None,
        };
        let with = HorizontalSpec { extensions: Some(Extensions::default()), ..base.clone() };
        let history = History {
            recommendations: previous.map(|r| vec![autoscaled_engine::hpa::history::Recommendation {
                replicas: r,
                time: NOW.plus_secs(-60),
            }]),
            ..History::default()
        };
        let o = observation(current, &usages, queue);
        let a = evaluate(&settings(window), &base, &o, &history, NOW).unwrap();
        let b = evaluate(&settings(window), &with, &o, &history, NOW).unwrap();
        prop_assert_eq!(a.decision.desired_replicas, b.decision.desired_replicas);
        prop_assert_eq!(&a.decision.conditions, &b.decision.conditions);
        prop_assert_eq!(&a.decision.metrics, &b.decision.metrics);
        prop_assert_eq!(a.decision.path, b.decision.path);
        prop_assert_eq!(&a.history.recommendations, &b.history.recommendations);
        prop_assert_eq!(&a.history.scale_up_events, &b.history.scale_up_events);
        prop_assert!(a.decision.extensions.is_none());
        // The HPAScaleToZero gate (on by default) keeps the state of its condition, and
        // nothing else; with the gate off nothing extra is stored.
        let gate_only = |s: &ExtensionState| {
            *s == ExtensionState {
                not_scaled_to_zero: s.not_scaled_to_zero,
                ..ExtensionState::default()
            }
        };
        prop_assert!(a.history.extensions.as_ref().is_none_or(gate_only));
        let off = Settings { scale_to_zero: false, ..settings(window) };
        let c = evaluate(&off, &base, &o, &history, NOW).unwrap();
        prop_assert_eq!(c.decision.desired_replicas, a.decision.desired_replicas);
        prop_assert!(c.decision.extensions.is_none());
        prop_assert!(c.history.extensions.is_none());
    }

    #[test]
    fn fallback_never_lowers_the_count_below_a_healthy_metrics_proposal(
        usages in proptest::collection::vec(0..3000i64, 1..8),
        replicas in 0..20i32,
        behavior in prop_oneof![
            Just(FallbackBehavior::Static),
            Just(FallbackBehavior::CurrentReplicas),
            Just(FallbackBehavior::CurrentReplicasIfHigher),
            Just(FallbackBehavior::CurrentReplicasIfLower),
        ],
        failures in 1..4usize,
    ) {
        let current = i32::try_from(usages.len()).unwrap();
        let spec = HorizontalSpec {
            min_replicas: Some(1),
            max_replicas: 50,
            metrics: metrics(),
            behavior: None,
            extensions: Some(Extensions {
                fallback: Some(TargetFallback { failure_threshold: 0, replicas, behavior }),
                ..Extensions::default()
            }),
            schedules: Vec::new(), predictive: None,
        };
        // The queue fails every time; cpu stays healthy.
        let mut history = History::default();
        for i in 0..failures {
            let at = NOW.plus_secs(15 * i as i64);
            let e = evaluate(&settings(0), &spec, &observation(current, &usages, None), &history, at)
                .unwrap();
            let healthy = e.decision.metrics[0].result.as_ref().map(|p| p.replicas).ok();
            if let (Some(h), Some(pre)) = (healthy, e.decision.prenormalized_replicas) {
                prop_assert!(pre >= h, "prenormalized {} below the healthy cpu proposal {}", pre, h);
            }
            history = e.history;
        }
    }
}
