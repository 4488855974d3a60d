use super::*;

const EXAMPLE: &str = include_str!("../../../../examples/recommend.json");

#[test]
fn example_request_parses_with_every_field_in_place() {
    let request = parse_recommend_request(EXAMPLE, "examples/recommend.json").unwrap();
    assert_eq!(request.target_key, "examples/web");
    assert_eq!(request.current_replicas, 3);
    let spec = request.spec.as_ref().unwrap();
    assert_eq!(spec.max_replicas, 10);
    assert_eq!(
        spec.metrics[0].r#type,
        api::MetricSourceType::Resource as i32
    );
    assert_eq!(
        spec.metrics[0].target.as_ref().unwrap().average_utilization,
        Some(50)
    );
    assert_eq!(request.pods.len(), 3);
    let pod = &request.pods[0];
    assert_eq!(pod.ready, Some(true));
    assert_eq!(pod.requests_milli["cpu"], 500);
    assert_eq!(pod.metrics["cpu"].value_milli, Some(400));
    assert_eq!(
        pod.metrics["cpu"].window,
        Some(prost_types::Duration {
            seconds: 60,
            nanos: 0
        })
    );
    assert!(pod.start_time.is_some());
}

#[test]
fn unknown_field_and_bad_enum_are_errors_naming_the_file() {
    let err =
        parse_recommend_request(r#"{"targetKey":"a","currentReplica":3}"#, "x.json").unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("x.json") && text.contains("currentReplica"),
        "{text}"
    );
    let err = parse_recommend_request(
        r#"{"spec":{"metrics":[{"type":"METRIC_SOURCE_TYPE_CHEDDAR"}]}}"#,
        "y.json",
    )
    .unwrap_err();
    assert!(matches!(err, ClientError::Json { .. }), "{err}");
}

#[test]
fn int64_fields_take_numbers_or_strings_and_snake_case_names() {
    let a = parse_recommend_request(
        r#"{"pods":[{"name":"p","requestsMilli":{"cpu":500}}]}"#,
        "a",
    )
    .unwrap();
    let b = parse_recommend_request(
        r#"{"pods":[{"name":"p","requests_milli":{"cpu":"500"}}]}"#,
        "b",
    )
    .unwrap();
    assert_eq!(a, b);
    assert_eq!(a.pods[0].requests_milli["cpu"], 500);
}

#[test]
fn json_output_leaves_out_defaults_like_grpcurl() {
    let response = api::RecommendResponse {
        desired_replicas: 0,
        recorded: true,
        conditions: vec![api::Condition {
            r#type: "AbleToScale".to_owned(),
            status: "True".to_owned(),
            reason: "ReadyForNewScale".to_owned(),
            message: "m".to_owned(),
        }],
        ..Default::default()
    };
    let json = to_json(&response, RECOMMEND_RESPONSE).unwrap();
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    // desired_replicas 0 is the default: left out, as grpcurl leaves it out.
    assert!(value.get("desiredReplicas").is_none(), "{json}");
    assert!(value.get("metrics").is_none(), "{json}");
    assert!(value.get("evaluationTime").is_none(), "{json}");
    assert_eq!(value["recorded"], true);
    assert_eq!(value["conditions"][0]["reason"], "ReadyForNewScale");
}

#[test]
fn warnings_print_the_field_the_pods_and_what_happened() {
    let warning = |pods: &[&str], total: u32| api::InputWarning {
        field: "pods[*].start_time".to_owned(),
        pods: pods.iter().map(|&p| p.to_owned()).collect(),
        pods_total: total,
        message: "no start time: unready for cpu".to_owned(),
    };
    assert_eq!(describe_warnings(&[]), "");
    assert_eq!(
        describe_warnings(&[warning(&["web-0"], 1), warning(&["a", "b"], 12)]),
        "Warnings:\n  pods[*].start_time: 1 pod (web-0)\n    no start time: unready for cpu\n  \
         pods[*].start_time: 12 pods (a, b and 10 more)\n    no start time: unready for cpu\n"
    );
}

#[test]
fn text_output_reads_like_kubectl_describe() {
    let request = parse_recommend_request(EXAMPLE, "example").unwrap();
    let response = api::RecommendResponse {
        desired_replicas: 5,
        conditions: vec![api::Condition {
            r#type: "AbleToScale".to_owned(),
            status: "True".to_owned(),
            reason: "SucceededRescale".to_owned(),
            message: "the HPA controller was able to update the target scale to 5".to_owned(),
        }],
        metrics: vec![api::MetricStatus {
            r#type: api::MetricSourceType::Resource as i32,
            name: "cpu".to_owned(),
            proposed_replicas: Some(5),
            current_average_utilization: Some(80),
            current_average_value_milli: Some(400),
            pod_groups: Some(api::PodGroups {
                ready_count: 2,
                unready: vec!["web-2".to_owned()],
                ..Default::default()
            }),
            ..Default::default()
        }],
        explanation: Some(api::Explanation {
            path: "Legacy".to_owned(),
            prenormalized_replicas: Some(5),
            stabilized_replicas: Some(5),
            scale_up_limit: Some(6),
            ..Default::default()
        }),
        ..Default::default()
    };
    let text = describe_recommendation(&request, &response);
    assert!(
        text.contains("resource cpu on pods  (as a percentage of request):  80% (400m) / 50%"),
        "{text}"
    );
    assert!(text.contains("Desired replicas:"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [
                    "AbleToScale",
                    "True",
                    "SucceededRescale",
                    "the",
                    "HPA",
                    "controller",
                    "was",
                    "able",
                    "to",
                    "update",
                    "the",
                    "target",
                    "scale",
                    "to",
                    "5"
                ]),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["cpu", "5", "2", "web-2", "<none>", "<none>"]),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["Scale-up", "limit:", "6"]),
        "{text}"
    );
}

#[test]
fn kubernetes_quantities_in_the_request_file() {
    let request = parse_recommend_request(
        r#"{"pods":[{"name":"p","requests":{"cpu":"500m","memory":"1Gi"},
            "requestsMilli":{},
            "metrics":{"cpu":{"value":"2"}}}],
            "spec":{"metrics":[{"target":{"averageValue":"1k","valueMilli":"250m"}}]},
            "externalMetrics":{"queue":{"values":[30,"1.5"]}}}"#,
        "q.json",
    );
    // `requests` and `requestsMilli` both given: the same field twice.
    let err = request.unwrap_err().to_string();
    assert!(err.contains("pods[0].requestsMilli: given twice"), "{err}");

    let request = parse_recommend_request(
        r#"{"pods":[{"name":"p","requests":{"cpu":"500m","memory":"1Gi"},
            "metrics":{"cpu":{"value":"2"}}},
            {"name":"q","requestsMilli":{"cpu":"250","memory":"1Mi"}}],
            "spec":{"metrics":[{"target":{"averageValue":"1k","valueMilli":"250m"}}]},
            "externalMetrics":{"queue":{"values":[30,"1.5"]}}}"#,
        "q.json",
    )
    .unwrap();
    let pod = &request.pods[0];
    assert_eq!(pod.requests_milli["cpu"], 500);
    assert_eq!(pod.requests_milli["memory"], 1024 * 1024 * 1024 * 1000);
    assert_eq!(pod.metrics["cpu"].value_milli, Some(2000));
    // A bare number in a ...Milli field keeps its wire meaning; a suffix is a quantity.
    assert_eq!(request.pods[1].requests_milli["cpu"], 250);
    assert_eq!(request.pods[1].requests_milli["memory"], 1024 * 1024 * 1000);
    let target = request.spec.as_ref().unwrap().metrics[0].target.unwrap();
    assert_eq!(target.average_value_milli, Some(1_000_000));
    assert_eq!(target.value_milli, Some(250));
    assert_eq!(
        request.external_metrics["queue"].values_milli,
        [30_000, 1_500]
    );

    for (json, field) in [
        (
            r#"{"pods":[{"name":"p","requests":{"cpu":"5OOm"}}]}"#,
            "pods[0].requests.cpu",
        ),
        (
            r#"{"pods":[{"name":"p","requestsMilli":{"cpu":"lots"}}]}"#,
            "pods[0].requestsMilli.cpu",
        ),
        (
            r#"{"spec":{"metrics":[{},{"target":{"averageValue":true}}]}}"#,
            "spec.metrics[1].target.averageValue",
        ),
    ] {
        let err = parse_recommend_request(json, "q.json")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(field) && err.contains("q.json"),
            "{json}: {err}"
        );
    }
}

#[test]
fn quantities_print_like_kubernetes() {
    assert_eq!(quantity(500), "500m");
    assert_eq!(quantity(2000), "2");
    assert_eq!(quantity(-1500), "-1500m");
}
