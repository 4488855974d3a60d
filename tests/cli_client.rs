//! The client subcommands of the real binary against the real binary: `recommend` (text and
//! JSON), `history`, and `conformance --grpc` with its summary line and exit status.

mod common;

use std::{path::Path, process::Output};

fn autoscaled(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_autoscaled"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

#[test]
fn recommend_and_history_print_the_decision() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(&dir.path().join("data"));
    let addr = server.addr.to_string();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/recommend.json");
    let example = example.to_str().unwrap();

    // 3 pods at 80% of a 50% target: ceil(3 × 1.6) = 5.
    let text = autoscaled(&["recommend", "--addr", &addr, "--file", example]);
    assert!(text.status.success(), "{text:?}");
    let out = stdout(&text);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| words(l) == ["Desired", "replicas:", "5"]),
        "{out}"
    );
    assert!(
        lines.iter().any(
            |l| l.contains("resource cpu on pods  (as a percentage of request):")
                && l.ends_with("80% (400m) / 50%")
        ),
        "{out}"
    );
    assert!(
        lines
            .iter()
            .any(|l| words(l).starts_with(&["AbleToScale", "True", "SucceededRescale"])),
        "{out}"
    );

    let json = autoscaled(&[
        "recommend",
        "--addr",
        &addr,
        "--file",
        example,
        "--output",
        "json",
    ]);
    assert!(json.status.success(), "{json:?}");
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(value["desiredReplicas"], 5);
    assert_eq!(value["recorded"], true);
    assert_eq!(value["metrics"][0]["currentAverageUtilization"], 80);

    let history = autoscaled(&[
        "history",
        "--addr",
        &addr,
        "nomad/prod/web",
        "--output",
        "json",
    ]);
    assert!(history.status.success(), "{history:?}");
    let value: serde_json::Value = serde_json::from_slice(&history.stdout).unwrap();
    // Two calls that decided the same: one run of two decisions.
    assert_eq!(value["decisions"].as_array().unwrap().len(), 1);
    assert_eq!(
        value["decisions"][0]["runCount"]
            .to_string()
            .trim_matches('"'),
        "2"
    );
    // The initial recommendation (3), then one proposal (5) per call.
    let replicas: Vec<i64> = value["recommendations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["replicas"].as_i64().unwrap())
        .collect();
    assert_eq!(replicas, [3, 5, 5]);
    let text = autoscaled(&["history", "--addr", &addr, "nomad/prod/web"]);
    assert!(
        stdout(&text)
            .lines()
            .any(|l| words(l) == ["Desired", "replicas:", "5"]),
        "{text:?}"
    );

    // Errors: exit 1 and a message naming the problem.
    let missing = autoscaled(&["history", "--addr", &addr, "no/such/target"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("NotFound"),
        "{missing:?}"
    );
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"targetKey": "a", "currentReplica": 1}"#).unwrap();
    let bad = autoscaled(&[
        "recommend",
        "--addr",
        &addr,
        "--file",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("currentReplica"),
        "{bad:?}"
    );
}

#[test]
fn conformance_grpc_prints_the_summary_last_and_exits_1_on_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(&dir.path().join("data"));
    let addr = server.addr.to_string();
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance/hpa");
    let cases = dir.path().join("cases");
    std::fs::create_dir(&cases).unwrap();
    for name in [
        "controller-scale-up.json",
        "behavior-prenormalized-desired-replicas-minreplicas.json",
    ] {
        std::fs::copy(shared.join(name), cases.join(name)).unwrap();
    }
    let run = autoscaled(&["conformance", "--grpc", &addr, cases.to_str().unwrap()]);
    assert!(run.status.success(), "{run:?}");
    let out = stdout(&run);
    assert_eq!(
        out.lines().last(),
        Some("1 passed, 0 failed, 1 skipped"),
        "{out}"
    );
    assert!(
        out.contains("SKIP ") && out.contains("prenormalized_desired_replicas"),
        "{out}"
    );

    let mut case: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(shared.join("controller-scale-up.json")).unwrap(),
    )
    .unwrap();
    case["steps"][0]["expect"]["desired_replicas"] = 99.into();
    std::fs::write(cases.join("controller-scale-up.json"), case.to_string()).unwrap();
    let run = autoscaled(&["conformance", "--grpc", &addr, cases.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    let out = stdout(&run);
    assert_eq!(
        out.lines().last(),
        Some("0 passed, 1 failed, 1 skipped"),
        "{out}"
    );
    assert!(
        out.contains("FAIL ") && out.contains("desired_replicas: expected 99"),
        "{out}"
    );
}
