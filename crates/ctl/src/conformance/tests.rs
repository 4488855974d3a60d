//! The runner against mutated copies of the shared cases: what it reports and how.

use super::*;

/// A shared case with one expectation changed, written to `dir`.
fn mutated(dir: &Path, case: &str, change: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    let src = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("../shared/conformance/hpa")
        .join(case);
    let mut value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src).unwrap()).unwrap();
    change(&mut value);
    let path = dir.join(case);
    std::fs::write(&path, value.to_string()).unwrap();
    path
}

fn failure(path: &Path) -> String {
    match run_case_file(path).status {
        Status::Failed(why) => why,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn reports_the_first_differing_field() {
    let dir = tempfile::tempdir().unwrap();
    let p = mutated(dir.path(), "controller-scale-up.json", |v| {
        v["steps"][0]["expect"]["desired_replicas"] = 99.into();
    });
    assert!(
        failure(&p).starts_with("step 0: desired_replicas: expected 99, got "),
        "{}",
        failure(&p)
    );
    let p = mutated(dir.path(), "group-missing-pod.json", |v| {
        v["steps"][0]["expect"]["pod_groups"]["missing"] = serde_json::json!([]);
    });
    assert_eq!(
        failure(&p),
        "step 0: pod_groups[cpu].missing: expected [], got [\"epicurus\"]"
    );
    let p = mutated(
        dir.path(),
        "legacy-stabilize-stabilize-old-recommendations.json",
        |v| v["steps"][0]["expect"]["recommendations_count_after"] = 5.into(),
    );
    assert_eq!(
        failure(&p),
        "step 0: recommendations_count_after: expected 5, got 4"
    );
    let p = mutated(
        dir.path(),
        "controller-condition-invalid-source-type.json",
        |v| {
            v["steps"][0]["expect"]["conditions"][1]["reason"] = "Other".into();
        },
    );
    assert_eq!(
        failure(&p),
        "step 0: conditions[ScalingActive]: expected false Other, got false InvalidMetricSourceType"
    );
    let p = mutated(dir.path(), "calc-resource-scale-up.json", |v| {
        v["steps"][0]["expect"]["unknown_field"] = 1.into();
    });
    assert!(
        failure(&p).contains("unknown field `unknown_field`"),
        "{}",
        failure(&p)
    );
}

#[test]
fn report_counts_and_dispatches_vpa_cases() {
    let dir = tempfile::tempdir().unwrap();
    mutated(dir.path(), "controller-scale-up.json", |_| {});
    mutated(dir.path(), "calc-resource-scale-up.json", |v| {
        v["steps"][0]["expect"]["metrics"][0]["replicas"] = 1000.into();
    });
    // A file with `kind` goes to the VPA runner, which rejects an unknown kind.
    std::fs::write(dir.path().join("vpa.json"), r#"{"kind": "x", "name": "v"}"#).unwrap();
    let report = run_dir(dir.path());
    assert_eq!(
        (report.passed(), report.failed(), report.skipped()),
        (1, 2, 0)
    );
    assert!(
        report
            .failing_lines()
            .iter()
            .any(|l| l.contains("vpa.json: kind: unknown kind")),
        "{report}"
    );
    let text = report.to_string();
    assert!(text.ends_with("\n1 passed, 2 failed"), "{text}");
    assert!(text.starts_with("FAIL "), "{text}");
}

#[test]
fn later_steps_see_the_history_of_earlier_ones() {
    // controller-upscale-cap scales 3 -> 24 under a 700 %/60 s policy; the scale event it
    // stores holds the next step at 24 until the 60 s period has passed.
    let dir = tempfile::tempdir().unwrap();
    let p = mutated(dir.path(), "controller-upscale-cap.json", |v| {
        let first = v["steps"][0].clone();
        let pod = first["pods"][0].clone();
        let step = |at: i64, expect: serde_json::Value| {
            let mut s = first.clone();
            s["at_s"] = at.into();
            s["current_replicas"] = 24.into();
            s["status_replicas"] = 24.into();
            s["pods"] = (0..24)
                .map(|i| {
                    let mut p = pod.clone();
                    p["name"] = format!("p{i}").into();
                    p
                })
                .collect::<Vec<_>>()
                .into();
            s["expect"] = expect;
            s
        };
        let held = step(
            30,
            serde_json::json!({"desired_replicas": 24, "scale_up_limit": 24,
                "conditions": [{"type": "ScalingLimited", "status": true, "reason": "ScaleUpLimit"}]}),
        );
        let released = step(
            61,
            serde_json::json!({"desired_replicas": 100, "scale_up_limit": 192,
                "conditions": [{"type": "ScalingLimited", "status": true, "reason": "TooManyReplicas"}]}),
        );
        v["steps"] = serde_json::json!([first, held, released]);
    });
    assert_eq!(run_case_file(&p).status, Status::Passed);
}

#[test]
fn malformed_cases_fail_with_their_file_name() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
    write("a-not-json.json", "{");
    write("b-not-an-object.json", "[1, 2]");
    write(
        "c-hpa-unknown-field.json",
        r#"{"name": "c", "spec": {"max_replicas": 1}, "steps": [], "extra": 1}"#,
    );
    write(
        "d-vpa-kind-not-a-string.json",
        r#"{"name": "d", "kind": 7}"#,
    );
    write(
        "e-vpa-bad-setting.json",
        r#"{"name": "e", "kind": "amount", "settings": {"nope": 1}}"#,
    );
    write(
        "f-vpa-huge-series.json",
        r#"{"name": "f", "kind": "recommender", "series": [{"pod": "p", "container": "c",
            "resource": "cpu", "from_s": 0, "step_s": 60, "count": 1000000000000,
            "values": [1]}]}"#,
    );
    let report = run_dir(dir.path());
    let lines = report.failing_lines();
    assert_eq!(
        (report.passed(), report.failed(), report.skipped()),
        (0, 6, 0),
        "{report}"
    );
    for (line, (file, why)) in lines.iter().zip([
        ("a-not-json.json", "invalid JSON"),
        ("b-not-an-object.json", "invalid case"),
        ("c-hpa-unknown-field.json", "unknown field `extra`"),
        ("d-vpa-kind-not-a-string.json", "kind: not a string"),
        ("e-vpa-bad-setting.json", "settings: nope: unknown setting"),
        (
            "f-vpa-huge-series.json",
            "series.count: 1000000000000 exceeds",
        ),
    ]) {
        assert!(
            line.starts_with("FAIL ") && line.contains(file) && line.contains(why),
            "{file}: {line}"
        );
    }
}
