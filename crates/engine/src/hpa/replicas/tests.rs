//! Unit tests of the replica calculator: the arithmetic at the edges (truncation, saturation,
//! overflow, NaN), the strict time comparisons of `groupPods`, and the failure reasons.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::hpa::observation::{Container, MetricSample};

const NOW: Time = Time::from_unix_secs(1_763_700_000);
const LONG_AGO: Time = Time::from_unix_secs(1_000_000_000);

fn tol(t: f64) -> Tolerances {
    Tolerances::uniform(t)
}

/// A pod Running and Ready for a long time, with a cpu request and (if given) a cpu sample.
fn pod(name: &str, request: Option<i64>, usage: Option<i64>) -> Pod {
    let mut p = Pod {
        name: name.to_string(),
        phase: PodPhase::Running,
        ready: Some(true),
        ready_transition: Some(LONG_AGO),
        start_time: Some(LONG_AGO),
        ..Pod::default()
    };
    if let Some(r) = request {
        p.requests.insert(CPU.to_string(), r);
    }
    if let Some(u) = usage {
        p.metrics
            .insert(CPU.to_string(), sample(Some(u), NOW.plus_secs(-5)));
    }
    p
}

fn sample(value: Option<i64>, timestamp: Time) -> MetricSample {
    MetricSample {
        value,
        timestamp,
        window: Duration::from_secs(60),
    }
}

fn obs(current: i32, pods: Vec<Pod>) -> Observation {
    Observation {
        current_replicas: current,
        pods,
        ..Observation::default()
    }
}

fn cpu_utilization(target: i32) -> MetricSpec {
    MetricSpec::Resource {
        name: CPU.to_string(),
        target: MetricTarget::utilization(target),
    }
}

fn value_target(kind: MetricTargetType, value: i64) -> MetricTarget {
    match kind {
        MetricTargetType::AverageValue => MetricTarget {
            target_type: kind,
            average_value: Some(value),
            ..MetricTarget::default()
        },
        _ => MetricTarget {
            target_type: kind,
            value: Some(value),
            ..MetricTarget::default()
        },
    }
}

fn run(metric: &MetricSpec, o: &Observation, t: Tolerances) -> MetricOutcome {
    replicas_for_metric(0, metric, o, &Settings::default(), t, NOW)
}

fn proposal(out: &MetricOutcome) -> &MetricProposal {
    out.result.as_ref().expect("a proposal")
}

fn failure(out: &MetricOutcome) -> &MetricFailure {
    out.result.as_ref().expect_err("a failure")
}

// --- Tolerances -------------------------------------------------------------------------------

#[test]
fn tolerance_bounds_are_inclusive_and_per_direction() {
    let t = Tolerances {
        scale_down: 0.25,
        scale_up: 0.5,
    };
    assert!(t.is_within(0.75));
    assert!(t.is_within(1.5));
    assert!(!t.is_within(0.749));
    assert!(!t.is_within(1.501));
    assert!(!t.is_within(f64::NAN));
}

// --- Resource utilization ----------------------------------------------------------------------

#[test]
fn utilization_is_truncated_before_the_ratio() {
    // 1500m of 2998m is 50.03 %; Kubernetes truncates to 50 %, so against a 50 % target the
    // ratio is exactly 1 and even a zero tolerance proposes no change. With the untruncated
    // ratio (1.0006) it would be ceil(1.0006 × 1) = 2.
    let o = obs(1, vec![pod("a", Some(2998), Some(1500))]);
    let out = run(&cpu_utilization(50), &o, tol(0.0));
    let p = proposal(&out);
    assert_eq!(p.current_average_utilization, Some(50));
    assert_eq!(p.usage_ratio, Some(1.0));
    assert_eq!(p.replicas, 1);
}

#[test]
fn utilization_sums_do_not_overflow_i64() {
    // Upstream's int64 sum of these would wrap; the exact sum gives 100 % and the true average.
    let o = obs(
        2,
        vec![
            pod("a", Some(i64::MAX), Some(i64::MAX)),
            pod("b", Some(i64::MAX), Some(i64::MAX)),
        ],
    );
    let p = proposal(&run(&cpu_utilization(100), &o, tol(0.1))).clone();
    assert_eq!(p.current_average_utilization, Some(100));
    assert_eq!(p.current_average_value, Some(i64::MAX));
    assert_eq!(p.replicas, 2);
}

#[test]
fn utilization_outside_i32_is_an_error_not_a_wrap() {
    let o = obs(1, vec![pod("a", Some(1), Some(i64::MAX))]);
    let out = run(&cpu_utilization(50), &o, tol(0.1));
    let f = failure(&out);
    assert_eq!(f.reason, ConditionReason::FailedGetResourceMetric);
    assert!(
        f.message.contains("outside the int32 range"),
        "{}",
        f.message
    );
}

#[test]
fn zero_target_saturates_instead_of_panicking() {
    let o = obs(3, vec![pod("a", Some(1000), Some(500))]);
    // 50 % ÷ 0 = +inf: the proposal saturates at i32::MAX.
    assert_eq!(
        proposal(&run(&cpu_utilization(0), &o, tol(0.1))).replicas,
        i32::MAX
    );
    // 0 % ÷ 0 = NaN: never within tolerance, and NaN converts to 0 rather than panicking.
    let idle = obs(3, vec![pod("a", Some(1000), Some(0))]);
    assert_eq!(
        proposal(&run(&cpu_utilization(0), &idle, tol(0.1))).replicas,
        0
    );
}

#[test]
fn missing_pods_on_scale_down_count_at_max_of_request_and_target() {
    // Two pods at 10 % of a 200 % target, one pod missing. The missing pod is taken at
    // 200 % of its 1000m request (2000m): (100+100+2000)/3000 = 73 % → ratio 0.365 →
    // ceil(0.365 × 3) = 2. At 100 % it would be 40 % → 0.2 → 1.
    let o = obs(
        3,
        vec![
            pod("a", Some(1000), Some(100)),
            pod("b", Some(1000), Some(100)),
            pod("c", Some(1000), None),
        ],
    );
    let out = run(&cpu_utilization(200), &o, tol(0.1));
    let p = proposal(&out);
    assert_eq!(
        p.current_average_utilization,
        Some(10),
        "status from the first pass"
    );
    assert_eq!(p.replicas, 2);
    assert_eq!(
        out.pod_groups.as_ref().map(|g| g.missing.clone()),
        Some(vec!["c".to_string()])
    );
}

#[test]
fn missing_fill_of_huge_request_saturates() {
    let o = obs(
        2,
        vec![
            pod("a", Some(1000), Some(100)),
            pod("b", Some(i64::MAX), None),
        ],
    );
    // request × 300 / 100 overflows i64; it saturates, and the exact sums carry on.
    let out = run(&cpu_utilization(300), &o, tol(0.1));
    assert!(out.result.is_ok(), "{:?}", out.result);
}

#[test]
fn unready_pods_count_zero_only_when_scaling_up() {
    // One ready pod at 100 % of a 50 % target (ratio 2) and one pending pod: the pending pod
    // counts as 0 %, so (1000 + 0) / 2000 = 50 % → within tolerance → no change.
    let mut pending = pod("p", Some(1000), None);
    pending.phase = PodPhase::Pending;
    let o = obs(2, vec![pod("a", Some(1000), Some(1000)), pending.clone()]);
    assert_eq!(
        proposal(&run(&cpu_utilization(50), &o, tol(0.1))).replicas,
        2
    );
    // Scaling down, the pending pod is left out: 10 % of 50 % → ceil(0.2 × 1) = 1.
    let o = obs(2, vec![pod("a", Some(1000), Some(100)), pending]);
    assert_eq!(
        proposal(&run(&cpu_utilization(50), &o, tol(0.1))).replicas,
        1
    );
}

#[test]
fn resource_failures_name_kubernetes_errors() {
    // No sample at all: the resource metrics API returned nothing.
    let o = obs(1, vec![pod("a", Some(1000), None)]);
    let f = failure(&run(&cpu_utilization(50), &o, tol(0.1))).clone();
    assert_eq!(
        f.message,
        "failed to get cpu utilization: unable to get metrics for resource cpu: no metrics returned from resource metrics API"
    );
    // No pods.
    let mut o = obs(1, vec![]);
    o.orphan_samples.insert(
        "gone".to_string(),
        BTreeMap::from([(CPU.to_string(), sample(Some(5), NOW))]),
    );
    let out = run(&cpu_utilization(50), &o, tol(0.1));
    assert!(failure(&out).message.ends_with(NO_PODS));
    assert_eq!(out.pod_groups, None);
    // Only an orphan sample: it is skipped against requests.
    o.pods.push(pod("a", Some(1000), None));
    let out = run(&cpu_utilization(50), &o, tol(0.1));
    assert!(
        failure(&out)
            .message
            .ends_with("no metrics returned matched known pods"),
        "{:?}",
        out.result
    );
    // Unavailable: the fetch fails, no grouping.
    let mut o = obs(1, vec![pod("a", Some(1000), Some(10))]);
    o.unavailable_metrics.insert(CPU.to_string());
    let out = run(&cpu_utilization(50), &o, tol(0.1));
    assert_eq!(
        failure(&out).reason,
        ConditionReason::FailedGetResourceMetric
    );
    assert!(
        failure(&out)
            .message
            .contains("unable to get metrics for resource cpu")
    );
    assert_eq!(out.pod_groups, None);
}

#[test]
fn target_without_its_field_fails_with_its_type_reason() {
    let empty = MetricTarget::default();
    let cases = [
        (
            MetricSpec::Resource {
                name: CPU.into(),
                target: empty.clone(),
            },
            ConditionReason::FailedGetResourceMetric,
        ),
        (
            MetricSpec::ContainerResource {
                name: CPU.into(),
                container: "app".into(),
                target: empty.clone(),
            },
            ConditionReason::FailedGetContainerResourceMetric,
        ),
        (
            MetricSpec::Pods {
                name: "qps".into(),
                target: empty.clone(),
            },
            ConditionReason::FailedGetPodsMetric,
        ),
        (
            MetricSpec::Object {
                name: "qps".into(),
                target: empty.clone(),
            },
            ConditionReason::FailedGetObjectMetric,
        ),
        (
            MetricSpec::External {
                name: "qps".into(),
                target: empty,
            },
            ConditionReason::FailedGetExternalMetric,
        ),
        (
            MetricSpec::Unknown {
                type_name: "Bogus".into(),
            },
            ConditionReason::InvalidMetricSourceType,
        ),
    ];
    let o = obs(1, vec![pod("a", Some(1000), Some(10))]);
    for (metric, reason) in cases {
        assert_eq!(
            failure(&run(&metric, &o, tol(0.1))).reason,
            reason,
            "{metric:?}"
        );
    }
}

// --- ContainerResource ----------------------------------------------------------------------

fn with_container(mut p: Pod, request: Option<i64>, usage: Option<i64>) -> Pod {
    let mut c = Container {
        name: "app".into(),
        ..Container::default()
    };
    if let Some(r) = request {
        c.requests.insert(CPU.into(), r);
    }
    if let Some(u) = usage {
        c.usage.insert(CPU.into(), u);
    }
    p.containers.push(c);
    p
}

#[test]
fn container_without_usage_is_missing_and_without_request_fails() {
    let metric = MetricSpec::ContainerResource {
        name: CPU.into(),
        container: "app".into(),
        target: MetricTarget {
            average_utilization: Some(50),
            ..MetricTarget::default()
        },
    };
    let a = with_container(pod("a", Some(5000), Some(4000)), Some(1000), Some(800));
    let b = with_container(pod("b", Some(5000), Some(4000)), Some(1000), None);
    let out = run(&metric, &obs(2, vec![a.clone(), b]), tol(0.1));
    // 80 % of the container request (not 80 % of the pod's); b is missing and counts 0 on
    // the way up: 800 / 2000 = 40 % → ratio 0.8 flips direction → no change.
    let p = proposal(&out);
    assert_eq!(p.current_average_utilization, Some(80));
    assert_eq!(p.replicas, 2);
    assert_eq!(
        out.pod_groups.as_ref().map(|g| g.missing.clone()),
        Some(vec!["b".to_string()])
    );
    let no_container = pod("c", Some(5000), Some(4000));
    let out = run(&metric, &obs(2, vec![a, no_container]), tol(0.1));
    let f = failure(&out);
    assert_eq!(f.reason, ConditionReason::FailedGetContainerResourceMetric);
    assert!(
        f.message.ends_with("container app not found in Pod c"),
        "{}",
        f.message
    );
}

// --- Pods metrics -----------------------------------------------------------------------------

#[test]
fn pods_average_counts_orphans_and_truncates() {
    let qps = |v| BTreeMap::from([("qps".to_string(), sample(Some(v), NOW))]);
    let mut a = pod("a", None, None);
    a.metrics = qps(1000);
    let mut b = pod("b", None, None);
    b.metrics = qps(1001);
    let mut o = obs(2, vec![a, b]);
    o.orphan_samples.insert("old".into(), qps(2000));
    let metric = MetricSpec::Pods {
        name: "qps".into(),
        target: value_target(MetricTargetType::AverageValue, 1000),
    };
    let out = run(&metric, &o, tol(0.1));
    // (1000 + 1001 + 2000) / 3 = 1333 (integer division), ratio 1.333 → ceil(1.333 × 2) = 3.
    let p = proposal(&out);
    assert_eq!(p.current_average_value, Some(1333));
    assert_eq!(p.replicas, 3);
}

// --- Object and External ------------------------------------------------------------------------

#[test]
fn object_value_scale_from_zero_ignores_pods_and_tolerance() {
    let mut o = obs(0, vec![]);
    o.object_metrics.insert("qps".into(), 1050);
    let metric = MetricSpec::Object {
        name: "qps".into(),
        target: value_target(MetricTargetType::Value, 1000),
    };
    // ratio 1.05 is within tolerance, yet from zero the proposal is ceil(1.05) = 2.
    assert_eq!(proposal(&run(&metric, &o, tol(0.1))).replicas, 2);
    // From zero a huge ratio saturates instead of wrapping.
    o.object_metrics.insert("qps".into(), i64::MAX);
    let huge = MetricSpec::Object {
        name: "qps".into(),
        target: value_target(MetricTargetType::Value, 1),
    };
    assert_eq!(proposal(&run(&huge, &o, tol(0.1))).replicas, i32::MAX);
    // With replicas but no pods, the ready-pod count fails.
    o.current_replicas = 2;
    let f = failure(&run(&huge, &o, tol(0.1))).clone();
    assert_eq!(f.reason, ConditionReason::FailedGetObjectMetric);
    assert!(
        f.message.contains("unable to calculate ready pods"),
        "{}",
        f.message
    );
}

#[test]
fn object_average_value_with_zero_status_replicas_is_defined() {
    let mut o = obs(0, vec![]);
    o.status_replicas = Some(0);
    o.object_metrics.insert("qps".into(), 3000);
    let metric = MetricSpec::Object {
        name: "qps".into(),
        target: value_target(MetricTargetType::AverageValue, 1000),
    };
    let out = run(&metric, &o, tol(0.1));
    let p = proposal(&out);
    assert_eq!(p.replicas, 3);
    assert_eq!(
        p.current_average_value,
        Some(i64::MAX),
        "3000 ÷ 0 saturates"
    );
}

#[test]
fn external_sums_saturate_as_upstream() {
    let value = MetricSpec::External {
        name: "q".into(),
        target: value_target(MetricTargetType::Value, 1000),
    };
    let per_pod = MetricSpec::External {
        name: "q".into(),
        target: value_target(MetricTargetType::AverageValue, 1000),
    };
    let mut o = obs(2, vec![pod("a", None, None), pod("b", None, None)]);

    // Value: a positive overflow stops at MaxInt64; the proposal caps at MaxInt32.
    o.external_metrics.insert("q".into(), vec![i64::MAX, 1, -5]);
    let p = proposal(&run(&value, &o, tol(0.1))).clone();
    assert_eq!(p.current_value, Some(i64::MAX));
    assert_eq!(p.replicas, i32::MAX);
    // Value: a negative overflow wraps, as Go's int64 addition does (only a positive one
    // is checked): MinInt64 - 1 is MaxInt64, and the proposal caps at MaxInt32.
    o.external_metrics.insert("q".into(), vec![i64::MIN, -1]);
    let p = proposal(&run(&value, &o, tol(0.1))).clone();
    assert_eq!(p.current_value, Some(i64::MAX));
    assert_eq!(p.replicas, i32::MAX);

    // AverageValue: a running sum that turns negative is taken as an overflow (MaxInt64),
    // also when a value is negative, as upstream does.
    o.external_metrics.insert("q".into(), vec![i64::MAX, 1]);
    let p = proposal(&run(&per_pod, &o, tol(0.1))).clone();
    assert_eq!(p.current_average_value, Some(i64::MAX));
    assert_eq!(p.replicas, i32::MAX);
    o.external_metrics.insert("q".into(), vec![-5]);
    assert_eq!(
        proposal(&run(&per_pod, &o, tol(0.1))).current_average_value,
        Some(i64::MAX)
    );

    // Empty list: a failed fetch.
    o.external_metrics.insert("q".into(), vec![]);
    let f = failure(&run(&per_pod, &o, tol(0.1))).clone();
    assert_eq!(f.reason, ConditionReason::FailedGetExternalMetric);
    assert!(
        f.message
            .ends_with("no metrics returned from external metrics API")
    );
}

// --- groupPods --------------------------------------------------------------------------------

fn group_one(p: Pod, settings: &Settings) -> PodGroups {
    group_pods(&obs(1, vec![p]), &cpu_utilization(50), settings, NOW)
}

fn settings(init_s: u64, delay_s: u64) -> Settings {
    Settings {
        cpu_initialization_period: Duration::from_secs(init_s),
        initial_readiness_delay: Duration::from_secs(delay_s),
        ..Settings::default()
    }
}

#[test]
fn initialization_period_ends_strictly() {
    let s = settings(120, 10);
    // start + 120 s == now: no longer initializing (After is strict). Not ready, turned so
    // exactly at start + delay: "never ready" needs start + delay strictly after the
    // transition, so the pod counts as ready.
    let mut p = pod("a", Some(1000), Some(500));
    p.start_time = Some(NOW.plus_secs(-120));
    p.ready = Some(false);
    p.ready_transition = Some(NOW.plus_secs(-110));
    assert_eq!(group_one(p.clone(), &s).ready_count, 1);
    // One second earlier transition: it never became ready.
    p.ready_transition = Some(NOW.plus_secs(-111));
    assert_eq!(group_one(p.clone(), &s).ready_count, 0);
    assert_eq!(group_one(p.clone(), &s).unready, vec!["a".to_string()]);
    // The same pod on a memory metric is ready: the rules are cpu only.
    let mem = MetricSpec::Resource {
        name: "memory".into(),
        target: MetricTarget::default(),
    };
    p.metrics.insert("memory".into(), sample(Some(1), NOW));
    assert_eq!(group_pods(&obs(1, vec![p]), &mem, &s, NOW).ready_count, 1);
}

#[test]
fn initializing_pod_needs_a_full_window_after_readiness() {
    let s = settings(120, 10);
    let mut p = pod("a", Some(1000), None);
    p.start_time = Some(NOW.plus_secs(-60));
    p.ready_transition = Some(NOW.plus_secs(-70));
    // Sample exactly one window (60 s) after the transition: not before it → ready.
    p.metrics
        .insert(CPU.into(), sample(Some(500), NOW.plus_secs(-10)));
    assert_eq!(group_one(p.clone(), &s).ready_count, 1);
    // One second earlier: stale → unready.
    p.metrics
        .insert(CPU.into(), sample(Some(500), NOW.plus_secs(-11)));
    assert_eq!(group_one(p.clone(), &s).unready, vec!["a".to_string()]);
    // No Ready condition or no start time: unready.
    p.metrics.insert(CPU.into(), sample(Some(500), NOW));
    p.ready = None;
    assert_eq!(group_one(p.clone(), &s).unready, vec!["a".to_string()]);
}

#[test]
fn grouping_order_ignored_then_pending_then_missing() {
    let s = Settings::default();
    let mut deleting_pending = pod("d", Some(1), Some(1));
    deleting_pending.deleting = true;
    deleting_pending.phase = PodPhase::Pending;
    let mut failed = pod("f", Some(1), None);
    failed.phase = PodPhase::Failed;
    let mut pending = pod("p", Some(1), None);
    pending.phase = PodPhase::Pending;
    let mut null_value = pod("n", Some(1), None);
    null_value.metrics.insert(CPU.into(), sample(None, NOW));
    let mut succeeded = pod("s", Some(1), Some(1));
    succeeded.phase = PodPhase::Succeeded;
    let o = obs(
        5,
        vec![deleting_pending, failed, pending, null_value, succeeded],
    );
    let g = group_pods(&o, &cpu_utilization(50), &s, NOW);
    assert_eq!(g.ignored, vec!["d".to_string(), "f".to_string()]);
    assert_eq!(g.unready, vec!["p".to_string()]);
    assert_eq!(
        g.missing,
        vec!["n".to_string()],
        "a null value is a missing pod"
    );
    assert_eq!(g.ready_count, 1, "Succeeded behaves like Running");
}

// --- No input panics --------------------------------------------------------------------------

fn any_metric() -> impl Strategy<Value = MetricSpec> {
    let target = (
        prop_oneof![
            Just(MetricTargetType::Utilization),
            Just(MetricTargetType::AverageValue),
            Just(MetricTargetType::Value)
        ],
        proptest::option::of(any::<i32>()),
        proptest::option::of(any::<i64>()),
        proptest::option::of(any::<i64>()),
    )
        .prop_map(|(target_type, u, a, v)| MetricTarget {
            target_type,
            average_utilization: u,
            average_value: a,
            value: v,
        });
    (0..6u8, target).prop_map(|(k, target)| match k {
        0 => MetricSpec::Resource {
            name: CPU.into(),
            target,
        },
        1 => MetricSpec::ContainerResource {
            name: CPU.into(),
            container: "app".into(),
            target,
        },
        2 => MetricSpec::Pods {
            name: CPU.into(),
            target,
        },
        3 => MetricSpec::Object {
            name: CPU.into(),
            target,
        },
        4 => MetricSpec::External {
            name: CPU.into(),
            target,
        },
        _ => MetricSpec::Unknown {
            type_name: "X".into(),
        },
    })
}

fn any_pod() -> impl Strategy<Value = Pod> {
    (
        0..5u8,
        any::<bool>(),
        proptest::option::of(any::<bool>()),
        proptest::option::of(-400..400i64),
        proptest::option::of(any::<i64>()),
        proptest::option::of(proptest::option::of(any::<i64>())),
        proptest::option::of((
            proptest::option::of(any::<i64>()),
            proptest::option::of(any::<i64>()),
        )),
    )
        .prop_map(
            |(phase, deleting, ready, start, request, usage, container)| {
                let mut p = pod("p", request, None);
                p.phase = [
                    PodPhase::Running,
                    PodPhase::Pending,
                    PodPhase::Succeeded,
                    PodPhase::Failed,
                    PodPhase::Unknown,
                ][usize::from(phase)];
                p.deleting = deleting;
                p.ready = ready;
                p.start_time = start.map(|s| NOW.plus_secs(s));
                p.ready_transition = start.map(|s| NOW.plus_secs(s / 2));
                if let Some(u) = usage {
                    p.metrics.insert(CPU.into(), sample(u, NOW.plus_secs(-1)));
                }
                if let Some((r, u)) = container {
                    p = with_container(p, r, u);
                }
                p
            },
        )
}

proptest! {
    #[test]
    fn no_input_panics(
        metric in any_metric(),
        pods in proptest::collection::vec(any_pod(), 0..5),
        current in any::<i32>(),
        status in proptest::option::of(any::<i32>()),
        object in proptest::option::of(any::<i64>()),
        external in proptest::collection::vec(any::<i64>(), 0..4),
        tolerance in prop_oneof![Just(0.0), Just(0.1), Just(f64::NAN), Just(f64::INFINITY)],
    ) {
        let mut pods = pods;
        for (i, p) in pods.iter_mut().enumerate() {
            p.name = format!("p{i}");
        }
        let mut o = obs(current, pods);
        o.status_replicas = status;
        if let Some(v) = object {
            o.object_metrics.insert(CPU.into(), v);
        }
        o.external_metrics.insert(CPU.into(), external);
        let out = replicas_for_metric(3, &metric, &o, &Settings::default(), tol(tolerance), NOW);
        prop_assert_eq!(out.index, 3);
        let g = group_pods(&o, &metric, &Settings::default(), NOW);
        let listed = g.unready.len() + g.missing.len() + g.ignored.len()
            + usize::try_from(g.ready_count).unwrap_or(0);
        prop_assert_eq!(listed, o.pods.len(), "every pod falls in exactly one group");
    }
}

#[test]
fn metric_error_wraps_as_compute_replicas_for_metric() {
    let o = obs(1, vec![pod("a", Some(1000), Some(10))]);
    let pods = MetricSpec::Pods {
        name: "qps".into(),
        target: value_target(MetricTargetType::AverageValue, 10),
    };
    let out = run(&pods, &o, tol(0.1));
    assert_eq!(
        metric_error(&pods, failure(&out)),
        "failed to get pods metric value: unable to get metric qps: no metrics returned from custom metrics API"
    );
    let external = MetricSpec::External {
        name: "q".into(),
        target: value_target(MetricTargetType::AverageValue, 10),
    };
    let out = run(&external, &o, tol(0.1));
    assert_eq!(
        metric_error(&external, failure(&out)),
        "failed to get q external metric: unable to get external metric q: no metrics returned from external metrics API"
    );
    let invalid = MetricSpec::external("q", MetricTarget::default());
    let out = run(&invalid, &o, tol(0.1));
    assert_eq!(metric_error(&invalid, failure(&out)), failure(&out).message);
}

// --- One pass against the per-step calculator ---------------------------------------------------

/// Small values as well as extreme ones, so that the fill-in paths (missing and unready pods
/// on a scale-down or scale-up) are reached, not only the overflow edges.
fn shrink(p: &mut Pod) {
    for v in p.requests.values_mut() {
        *v = v.rem_euclid(1_000);
    }
    for s in p.metrics.values_mut() {
        s.value = s.value.map(|v| v.rem_euclid(1_500));
    }
    for k in &mut p.containers {
        for v in k.requests.values_mut().chain(k.usage.values_mut()) {
            *v = v.rem_euclid(1_000);
        }
    }
}

proptest! {
    /// The one-pass walk (samples, `groupPods`, removal, requests and sums together) gives
    /// what the per-step calculator gave, result and groups alike, on random pod sets with
    /// orphans, every pod-based metric type and the CPU rules.
    #[test]
    fn one_pass_walk_matches_the_per_step_calculator(
        metric in any_metric(),
        pods in proptest::collection::vec(any_pod(), 0..9),
        orphans in proptest::collection::vec(proptest::option::of(any::<i64>()), 0..3),
        small in any::<bool>(),
        current in prop_oneof![0..12i32, any::<i32>()],
        tolerance in prop_oneof![Just(0.0), Just(0.1), Just(f64::NAN)],
        init_s in 0..400u64,
        delay_s in 0..400u64,
    ) {
        let mut pods = pods;
        for (i, p) in pods.iter_mut().enumerate() {
            p.name = format!("p{i}");
            if small {
                shrink(p);
            }
        }
        let mut o = obs(current, pods);
        for (i, v) in orphans.into_iter().enumerate() {
            let v = if small { v.map(|v| v.rem_euclid(1_500)) } else { v };
            o.orphan_samples.insert(
                format!("gone{i}"),
                BTreeMap::from([(CPU.to_string(), sample(v, NOW.plus_secs(-1)))]),
            );
        }
        let s = settings(init_s, delay_s);
        let ctx = Ctx { observation: &o, settings: &s, tolerances: tol(tolerance), now: NOW };
        let old = match &metric {
            MetricSpec::Resource { name, target } => Some(ctx.ref_resource_metric(name, None, target)),
            MetricSpec::ContainerResource { name, container, target } => {
                Some(ctx.ref_resource_metric(name, Some(container), target))
            }
            MetricSpec::Pods { name, target } => Some(ctx.ref_pods_metric(name, target)),
            _ => None,
        };
        if let Some((result, groups)) = old {
            let new = replicas_for_metric(0, &metric, &o, &s, tol(tolerance), NOW);
            // Debug text, so that a NaN ratio compares equal to itself.
            prop_assert_eq!(
                format!("{:?}", new.result.map_err(|f| f.message)),
                format!("{result:?}")
            );
            prop_assert_eq!(new.pod_groups, groups);
        }
        prop_assert_eq!(
            group_pods(&o, &metric, &s, NOW),
            reference::ref_group_pods(&o, &metric, &s, NOW)
        );
    }
}
