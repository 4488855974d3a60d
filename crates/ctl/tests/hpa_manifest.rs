//! `autoscalectl recommend --hpa`: the HorizontalPodAutoscaler manifests of the Kubernetes
//! documentation (tests/fixtures/hpa) read as the request's spec, field by field, and the
//! errors for what cannot be read naming the field.

use autoscaled_ctl::kube::hpa::parse_manifest;
use autoscaled_wire::pb::v1::{
    self as api, MetricSourceType as Source, MetricTargetType as Target, ScalingPolicyType,
    SelectPolicy,
};

fn fixture(name: &str) -> (api::HorizontalSpec, String) {
    let path = format!("{}/tests/fixtures/hpa/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    parse_manifest(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn target(kind: Target) -> api::MetricTarget {
    api::MetricTarget {
        r#type: kind as i32,
        ..Default::default()
    }
}

#[test]
fn the_walkthrough_hpa_with_its_status() {
    let (spec, key) = fixture("php-apache.yaml");
    assert_eq!(key, "default/php-apache");
    assert_eq!(spec.min_replicas, Some(1));
    assert_eq!(spec.max_replicas, 10);
    assert_eq!(spec.behavior, None, "no behavior: the legacy path");
    assert_eq!(
        spec.metrics,
        [api::MetricSpec {
            r#type: Source::Resource as i32,
            name: "cpu".into(),
            container: String::new(),
            target: Some(api::MetricTarget {
                average_utilization: Some(50),
                ..target(Target::Utilization)
            }),
            ..Default::default()
        }]
    );
}

#[test]
fn multiple_metrics_with_quantities_in_milli_units() {
    let (spec, key) = fixture("multiple-metrics.yaml");
    assert_eq!(key, "default/php-apache", "no namespace: default");
    let names: Vec<(i32, &str)> = spec
        .metrics
        .iter()
        .map(|m| (m.r#type, m.name.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            (Source::Resource as i32, "cpu"),
            (Source::Pods as i32, "packets-per-second"),
            (Source::Object as i32, "requests-per-second"),
        ]
    );
    // averageValue: 1k and value: 10k, as Quantity.MilliValue() gives them.
    assert_eq!(
        spec.metrics[1].target,
        Some(api::MetricTarget {
            average_value_milli: Some(1_000_000),
            ..target(Target::AverageValue)
        })
    );
    assert_eq!(
        spec.metrics[2].target,
        Some(api::MetricTarget {
            value_milli: Some(10_000_000),
            ..target(Target::Value)
        })
    );
}

#[test]
fn external_metric_with_a_plain_number() {
    let (spec, key) = fixture("external.yaml");
    assert_eq!(key, "jobs/worker");
    assert_eq!(spec.metrics[0].r#type, Source::External as i32);
    assert_eq!(spec.metrics[0].name, "queue_messages_ready");
    assert_eq!(
        spec.metrics[0].target.as_ref().unwrap().average_value_milli,
        Some(30_000)
    );
}

#[test]
fn behavior_policies_and_container_resource() {
    let (spec, _) = fixture("behavior.yaml");
    assert_eq!(spec.metrics[0].r#type, Source::ContainerResource as i32);
    assert_eq!(spec.metrics[0].container, "application");
    let behavior = spec.behavior.unwrap();
    let down = behavior.scale_down.unwrap();
    assert_eq!(down.stabilization_window_seconds, Some(300));
    assert_eq!(down.select_policy, SelectPolicy::Min as i32);
    assert!(down.policies_set);
    assert_eq!(
        down.policies,
        [
            api::ScalingPolicy {
                r#type: ScalingPolicyType::Pods as i32,
                value: 4,
                period_seconds: 60
            },
            api::ScalingPolicy {
                r#type: ScalingPolicyType::Percent as i32,
                value: 10,
                period_seconds: 60
            },
        ]
    );
    let up = behavior.scale_up.unwrap();
    assert_eq!(up.stabilization_window_seconds, Some(0));
    assert_eq!(up.select_policy, SelectPolicy::Max as i32);
    assert_eq!(up.policies.len(), 2);
}

#[test]
fn disabled_scale_down_and_binary_suffixes() {
    let (spec, key) = fixture("scale-down-disabled.yaml");
    assert_eq!(key, "default/cache");
    assert_eq!(spec.min_replicas, None, "absent: the server applies 1");
    let down = spec.behavior.unwrap().scale_down.unwrap();
    assert_eq!(down.select_policy, SelectPolicy::Disabled as i32);
    assert!(!down.policies_set, "no policies given: the defaults");
    assert_eq!(
        spec.metrics[0].target.as_ref().unwrap().average_value_milli,
        Some(500 * 1024 * 1024 * 1000)
    );
}

#[test]
fn errors_name_the_field() {
    let base = std::fs::read_to_string(format!(
        "{}/tests/fixtures/hpa/multiple-metrics.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    for (from, to, expected) in [
        (
            "averageValue: 1k",
            "averageValue: 1kb",
            "spec.metrics[1].pods.target.averageValue",
        ),
        (
            "type: Value",
            "type: Total",
            "spec.metrics[2].object.target.type",
        ),
        ("- type: Pods", "- type: Cheddar", "spec.metrics[1].type"),
        (
            "apiVersion: autoscaling/v2",
            "apiVersion: autoscaling/v1",
            "apiVersion",
        ),
        ("maxReplicas: 10", "maxReplicas: ten", "maxReplicas"),
    ] {
        let text = base.replacen(from, to, 1);
        assert_ne!(text, base, "{from}");
        let err = parse_manifest(&text).unwrap_err().to_string();
        assert!(
            err.contains(expected),
            "{to}: {err:?} does not name {expected}"
        );
    }
    let err = parse_manifest("apiVersion: v1\nkind: Service\n").unwrap_err();
    assert!(
        err.to_string().contains("no HorizontalPodAutoscaler"),
        "{err}"
    );
}
