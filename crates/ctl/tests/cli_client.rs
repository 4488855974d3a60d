//! The client subcommands of the real binary against the real binary: `recommend` (text and
//! JSON), `history`, `get targets` and `describe target`, and `conformance --grpc` with its
//! summary line and exit status.

mod common;

use std::{path::Path, process::Output};

fn autoscaled(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_autoscalectl"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// One HTTP/1.1 request with a JSON body (empty: none): the status and the body.
fn http(addr: std::net::SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

#[test]
fn recommend_and_history_print_the_decision() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(&dir.path().join("data"));
    let addr = server.addr.to_string();
    let example =
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("examples/recommend.json");
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
    // A complete request: no warnings block.
    assert!(!out.contains("Warnings:"), "{out}");

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
        "examples/web",
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
    let text = autoscaled(&["history", "--addr", &addr, "examples/web"]);
    assert!(
        stdout(&text)
            .lines()
            .any(|l| words(l) == ["Desired", "replicas:", "5"]),
        "{text:?}"
    );
    // The run shows as what it is: two decisions, since the first one, and what they observed.
    assert!(
        stdout(&text).contains("Decisions (oldest first; 2 in 1 runs of identical decisions):"),
        "{text:?}"
    );
    assert_eq!(
        value["decisions"][0]["readings"].as_array().unwrap().len(),
        2
    );
    assert!(
        stdout(&text).lines().any(|l| l.contains("Observed"))
            && stdout(&text).lines().any(|l| l.contains("cpu 80%")),
        "{text:?}"
    );
    // AUTOSCALED_ADDR stands for --addr in every client subcommand (history, and simulate and
    // report, which default to it as recommend does).
    let with_env = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_autoscalectl"))
            .args(args)
            .env("AUTOSCALED_ADDR", &addr)
            .output()
            .expect("the binary runs")
    };
    let text = with_env(&["history", "examples/web"]);
    assert!(stdout(&text).contains("Desired replicas"), "{text:?}");
    let text = with_env(&["simulate", "--target", "examples/web"]);
    assert!(text.status.success(), "{text:?}");
    let page = dir.path().join("report.html");
    let text = with_env(&[
        "report",
        "--target",
        "examples/web",
        "--out",
        page.to_str().unwrap(),
    ]);
    assert!(text.status.success() && page.exists(), "{text:?}");

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

/// What a first adapter sends: pods with a name, a cpu request and a cpu sample, nothing
/// else. Every pod is unready for cpu under the Kubernetes rules, the metric fails, and the
/// text names the fields that caused it and the pods; the JSON carries the same.
#[test]
fn recommend_prints_the_fields_a_naive_request_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(&dir.path().join("data"));
    let addr = server.addr.to_string();
    let pod = |name: &str| {
        format!(
            r#"{{"name": "{name}", "requestsMilli": {{"cpu": "500"}},
                "metrics": {{"cpu": {{"valueMilli": "400"}}}}}}"#
        )
    };
    let pods: Vec<String> = (0..12).map(|i| pod(&format!("web-{i}"))).collect();
    let request = format!(
        r#"{{"targetKey": "naive/web", "currentReplicas": 12, "dryRun": true,
            "spec": {{"maxReplicas": 20, "metrics": [{{"type": "METRIC_SOURCE_TYPE_RESOURCE",
              "name": "cpu", "target": {{"type": "METRIC_TARGET_TYPE_UTILIZATION",
              "averageUtilization": 50}}}}]}},
            "pods": [{}]}}"#,
        pods.join(",")
    );
    let file = dir.path().join("naive.json");
    std::fs::write(&file, request).unwrap();
    let file = file.to_str().unwrap();

    let text = autoscaled(&["recommend", "--addr", &addr, "--file", file]);
    assert!(text.status.success(), "{text:?}");
    let out = stdout(&text);
    assert!(
        out.lines().any(|l| words(l).starts_with(&[
            "ScalingActive",
            "False",
            "FailedGetResourceMetric"
        ])),
        "{out}"
    );
    let block: Vec<&str> = out
        .lines()
        .skip_while(|l| *l != "Warnings:")
        .take(5)
        .collect();
    let names = "(web-0, web-1, web-2, web-3, web-4, web-5, web-6, web-7, web-8, web-9 and 2 more)";
    assert_eq!(block[0], "Warnings:", "{out}");
    assert_eq!(
        block[1],
        format!("  pods[*].ready: 12 pods {names}"),
        "{out}"
    );
    assert!(
        block[2]
            .starts_with("    no Ready condition: Kubernetes counts the pod as unready for cpu"),
        "{out}"
    );
    assert_eq!(
        block[3],
        format!("  pods[*].start_time: 12 pods {names}"),
        "{out}"
    );
    assert!(block[4].starts_with("    no start time:"), "{out}");

    let json = autoscaled(&[
        "recommend",
        "--addr",
        &addr,
        "--file",
        file,
        "--output",
        "json",
    ]);
    assert!(json.status.success(), "{json:?}");
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(value["warnings"][0]["field"], "pods[*].ready");
    assert_eq!(value["warnings"][0]["podsTotal"], 12);
    assert_eq!(value["warnings"][0]["pods"].as_array().unwrap().len(), 10);
    assert_eq!(value["warnings"][1]["field"], "pods[*].start_time");
}

#[test]
fn get_targets_lists_the_fleet_and_describe_target_shows_one() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(&dir.path().join("data"));
    let addr = server.addr.to_string();
    let example =
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("examples/recommend.json");
    let example = std::fs::read_to_string(example).unwrap();
    // examples/recommend.json under three keys (3 pods at 80% of 50%: 5), the first twice.
    for key in ["prod/web", "prod/web", "prod/api", "staging/web"] {
        let file = dir.path().join("request.json");
        std::fs::write(
            &file,
            example.replace("\"examples/web\"", &format!("{key:?}")),
        )
        .unwrap();
        let out = autoscaled(&[
            "recommend",
            "--addr",
            &addr,
            "--file",
            file.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{out:?}");
    }

    let table = autoscaled(&["get", "targets", "--addr", &addr]);
    assert!(table.status.success(), "{table:?}");
    let out = stdout(&table);
    let lines: Vec<Vec<&str>> = out.lines().map(words).collect();
    assert_eq!(
        lines[0],
        [
            "NAME", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "DESIRED", "LAST", "STATUS"
        ],
        "{out}"
    );
    let names: Vec<&str> = lines[1..].iter().map(|l| l[0]).collect();
    assert_eq!(names, ["prod/api", "prod/web", "staging/web"], "{out}");
    // NAME, `cpu: 80%/50%`, min, max, replicas, desired.
    assert_eq!(
        lines[2][..7],
        ["prod/web", "cpu:", "80%/50%", "1", "10", "3", "5"],
        "{out}"
    );

    let wide = autoscaled(&[
        "get", "targets", "--addr", &addr, "--prefix", "prod/", "-o", "wide",
    ]);
    let out = stdout(&wide);
    let lines: Vec<Vec<&str>> = out.lines().map(words).collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].ends_with(&["RUN", "SINCE", "PATH", "ABLE", "ACTIVE", "LIMITED"]));
    // prod/web decided the same twice: a run of 2.
    let run = lines[0].iter().position(|h| *h == "RUN").unwrap() + 1;
    assert_eq!(lines[2][run], "2", "{out}");

    let json = autoscaled(&["get", "targets", "--addr", &addr, "-o", "json"]);
    assert!(json.status.success(), "{json:?}");
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let summaries = value["summaries"].as_array().unwrap();
    assert_eq!(summaries.len(), 3);
    assert_eq!(summaries[1]["targetKey"], "prod/web");
    assert_eq!(summaries[1]["desiredReplicas"], 5);
    assert_eq!(
        summaries[1]["metrics"][0]["target"]["averageUtilization"],
        50
    );
    let yaml = autoscaled(&[
        "get", "targets", "--addr", &addr, "-o", "yaml", "--prefix", "staging/",
    ]);
    let out = stdout(&yaml);
    assert!(out.contains("targetKey: staging/web"), "{out}");

    // --watch: two listings, one interval apart, then it stops by itself.
    let watched = autoscaled(&[
        "get",
        "targets",
        "--addr",
        &addr,
        "--prefix",
        "prod/api",
        "--watch",
        "--interval",
        "1",
        "--rounds",
        "2",
    ]);
    assert!(watched.status.success(), "{watched:?}");
    let out = stdout(&watched);
    assert_eq!(out.matches("NAME").count(), 2, "{out}");
    assert_eq!(out.matches("prod/api").count(), 2, "{out}");

    let described = autoscaled(&["describe", "target", "prod/web", "--addr", &addr]);
    assert!(described.status.success(), "{described:?}");
    let out = stdout(&described);
    for line in [
        vec!["Name:", "prod/web"],
        vec!["Min", "replicas:", "1"],
        vec!["Max", "replicas:", "10"],
        vec!["Desired", "replicas:", "5"],
    ] {
        assert!(out.lines().any(|l| words(l) == line), "{line:?} in {out}");
    }
    assert!(
        out.lines().any(|l| l.ends_with("80% (400m) / 50%")),
        "{out}"
    );
    assert!(out.contains("2 time(s) in a row since"), "{out}");
    assert!(
        out.lines()
            .any(|l| words(l).starts_with(&["AbleToScale", "True", "SucceededRescale"])),
        "{out}"
    );
    assert!(out.contains("Recent decisions (newest first):"), "{out}");

    // AUTOSCALED_ADDR stands for --addr; a missing target is exit 1 naming it.
    let missing = std::process::Command::new(env!("CARGO_BIN_EXE_autoscalectl"))
        .args(["describe", "target", "prod/we"])
        .env("AUTOSCALED_ADDR", &addr)
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1), "{missing:?}");
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("\"prod/we\""),
        "{missing:?}"
    );
    let bad = autoscaled(&["get", "targets", "--addr", &addr, "--prefix", "a\u{7}"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("prefix"),
        "{bad:?}"
    );
}

#[test]
fn conformance_grpc_prints_the_summary_last_and_exits_1_on_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(&dir.path().join("data"));
    let addr = server.addr.to_string();
    let shared =
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("../shared/conformance/hpa");
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

/// The first-hour papercuts (issue 14): a closed pipe, quantities, an HPA manifest, JSON
/// without defaults, and `conformance --grpc` against a server on its own clock.
#[test]
fn first_hour_client_behaviour() {
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(&dir.path().join("data"));
    let addr = server.addr.to_string();
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let example = |name: &str| root.join("examples").join(name).display().to_string();

    // The HPA walkthrough's manifest as the spec, pod samples with Kubernetes quantities:
    // 450m of 200m is 225% of a 50% target (9 replicas); the legacy limit holds 2 at 4.
    let run = autoscaled(&[
        "recommend",
        "--addr",
        &addr,
        "--hpa",
        &example("hpa.yaml"),
        "--file",
        &example("observations.json"),
    ]);
    assert!(run.status.success(), "{run:?}");
    let out = stdout(&run);
    assert!(
        out.lines()
            .any(|l| words(l) == ["Name:", "default/php-apache"]),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| words(l) == ["Desired", "replicas:", "4"]),
        "{out}"
    );
    assert!(out.contains("225% (450m) / 50%"), "{out}");

    // JSON leaves out what grpcurl leaves out: empty strings, false, absent messages.
    let json = autoscaled(&[
        "history",
        "--addr",
        &addr,
        "default/php-apache",
        "--output",
        "json",
    ]);
    assert!(json.status.success(), "{json:?}");
    let text = stdout(&json);
    for default in ["\"\"", "false", "\"container\"", "\"error\""] {
        assert!(!text.contains(default), "{default} printed:\n{text}");
    }
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["decisions"][0]["desiredReplicas"], 4);

    // A reader that goes away: quiet, status 0, no panic (was "failed printing to stdout:
    // Broken pipe", exit 101). The read end is closed before the client gets its answer.
    let mut child = Command::new(env!("CARGO_BIN_EXE_autoscalectl"))
        .args([
            "history",
            "--addr",
            &addr,
            "default/php-apache",
            "--output",
            "json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let closed = child.wait_with_output().unwrap();
    assert_eq!(closed.status.code(), Some(0), "{closed:?}");
    assert!(closed.stderr.is_empty(), "{closed:?}");

    // A bad quantity names the field; nothing is sent.
    let bad = autoscaled(&[
        "recommend",
        "--addr",
        &addr,
        "--file",
        &example("bad-quantity.json"),
    ]);
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("pods[0].requests.cpu") && err.contains("\"5OOm\""),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    // --hpa with a file that has a spec of its own: refused, naming both.
    let both = autoscaled(&[
        "recommend",
        "--addr",
        &addr,
        "--hpa",
        &example("hpa.yaml"),
        "--file",
        &example("recommend.json"),
    ]);
    assert_eq!(both.status.code(), Some(1), "{both:?}");
    assert!(
        String::from_utf8_lossy(&both.stderr).contains("also has a spec"),
        "{both:?}"
    );

    // Shadow: recorded (shown as such), the next decision starting from its count.
    let shadow = autoscaled(&[
        "recommend",
        "--addr",
        &addr,
        "--shadow",
        "--file",
        &example("recommend.json"),
    ]);
    assert!(shadow.status.success(), "{shadow:?}");
    let out = stdout(&shadow);
    assert!(
        out.lines()
            .any(|l| l.starts_with("Recorded:") && l.contains("shadow")),
        "{out}"
    );
    let listed = stdout(&autoscaled(&["get", "targets", "--addr", &addr]));
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("examples/web") && l.contains("shadow:")),
        "{listed}"
    );
    let described = stdout(&autoscaled(&[
        "describe",
        "target",
        "examples/web",
        "--addr",
        &addr,
    ]));
    assert!(
        described.contains("Mode:") && described.contains("shadow"),
        "{described}"
    );

    // delete target: the history goes, the listing forgets it, a second delete is NOT_FOUND.
    let deleted = autoscaled(&["delete", "target", "examples/web", "--addr", &addr]);
    assert!(deleted.status.success(), "{deleted:?}");
    assert_eq!(stdout(&deleted).trim(), "target/examples/web deleted");
    let listed = stdout(&autoscaled(&["get", "targets", "--addr", &addr]));
    assert!(!listed.contains("examples/web"), "{listed}");
    let again = autoscaled(&["delete", "target", "examples/web", "--addr", &addr]);
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("NotFound"),
        "{again:?}"
    );
}

#[test]
fn conformance_grpc_stops_at_once_against_a_server_on_its_own_clock() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = std::process::Command::new(common::server_binary());
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .env("AUTOSCALED_LOG", "warn")
        .env_remove("AUTOSCALED_TRUST_REQUEST_TIME")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let server = common::spawn(command);
    let shared =
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("../shared/conformance/hpa");
    let run = autoscaled(&[
        "conformance",
        "--grpc",
        &server.addr.to_string(),
        shared.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    assert!(run.stdout.is_empty(), "no case is run: {}", stdout(&run));
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--trust-request-time"), "{err}");
}

/// Policies and scaling groups from the command line: `apply -f` the example file,
/// `get policies`, `get groups`, a Recommend naming the policy (capped by the group),
/// `describe group`, `history` showing both, `delete` refused then forced.
#[test]
fn apply_get_describe_and_delete_policies_and_groups() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = common::command(&dir.path().join("data"));
    command.args(["--metrics-listen", "127.0.0.1:0"]);
    let server = common::spawn(command);
    let addr = server.addr.to_string();
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let file = root.join("examples/groups/gpus.yaml");
    let applied = autoscaled(&["apply", "-f", file.to_str().unwrap(), "--addr", &addr]);
    assert!(applied.status.success(), "{applied:?}");
    assert_eq!(
        stdout(&applied),
        "policy/gpu-tier: version 1\nscalinggroup/gpus: version 1\n"
    );
    // The same file again changes nothing; a changed policy is version 2.
    let again = autoscaled(&["apply", "-f", file.to_str().unwrap(), "--addr", &addr]);
    assert_eq!(stdout(&again), stdout(&applied));
    let changed = dir.path().join("changed.yaml");
    std::fs::write(
        &changed,
        std::fs::read_to_string(&file).unwrap().replace(
            "maxReplicas: 20",
            "maxReplicas: 20\n  removalCandidates: true",
        ),
    )
    .unwrap();
    let again = autoscaled(&["apply", "-f", changed.to_str().unwrap(), "--addr", &addr]);
    assert!(
        stdout(&again).contains("policy/gpu-tier: version 2"),
        "{again:?}"
    );

    let policies = stdout(&autoscaled(&["get", "policies", "--addr", &addr]));
    let lines: Vec<Vec<&str>> = policies.lines().map(words).collect();
    assert_eq!(
        lines[0],
        ["NAME", "VERSION", "MIN", "MAX", "METRICS", "AGE"]
    );
    assert_eq!(
        lines[1][..5],
        ["gpu-tier", "2", "1", "20", "queue"],
        "{policies}"
    );

    // inference/a wants 6, alone in a group of 10: 1 -> 4 (the legacy scale-up limit), then
    // capacity lowered to 3 caps it.
    let request = root.join("examples/groups/inference-a.json");
    let out = autoscaled(&[
        "recommend",
        "--addr",
        &addr,
        "--file",
        request.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains("Policy:") && text.contains("gpu-tier (version 2)"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("Scaling group:") && l.contains("gpus: 4 uncapped")),
        "{text}"
    );
    let lowered = dir.path().join("lowered.yaml");
    std::fs::write(
        &lowered,
        "kind: ScalingGroup\nname: gpus\ncapacity: 3\nmemberPolicies: [gpu-tier]\n",
    )
    .unwrap();
    let applied = autoscaled(&["apply", "-f", lowered.to_str().unwrap(), "--addr", &addr]);
    assert!(applied.status.success(), "{applied:?}");
    let out = stdout(&autoscaled(&[
        "recommend",
        "--addr",
        &addr,
        "--file",
        request.to_str().unwrap(),
    ]));
    assert!(
        out.lines()
            .any(|l| words(l).starts_with(&["ScalingLimited", "True", "BudgetLimited"])),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| words(l) == ["Desired", "replicas:", "3"]),
        "{out}"
    );

    let groups = stdout(&autoscaled(&["get", "groups", "--addr", &addr]));
    let lines: Vec<Vec<&str>> = groups.lines().map(words).collect();
    assert_eq!(
        lines[0],
        ["NAME", "CAPACITY", "USED", "RESIDUAL", "MEMBERS", "SELECTS"]
    );
    assert_eq!(
        lines[1],
        ["gpus", "3", "3", "0", "1", "policy=gpu-tier"],
        "{groups}"
    );
    let described = stdout(&autoscaled(&["describe", "group", "gpus", "--addr", &addr]));
    assert!(
        described
            .lines()
            .any(|l| words(l) == ["inference/a", "4", "1", "3", "3", "1", "1", "3"]),
        "{described}"
    );
    // What-if: the group's stored decisions again under 8 GPUs.
    let replay = stdout(&autoscaled(&[
        "simulate",
        "--addr",
        &addr,
        "--group",
        "gpus",
        "--capacity",
        "8",
    ]));
    assert!(replay.starts_with("Capacity: 8 units"), "{replay}");
    assert!(
        replay
            .lines()
            .any(|l| l.starts_with("inference/a") && words(l)[1] == "2"),
        "{replay}"
    );
    assert!(
        replay.contains("Most units held: 4 stored, 4 simulated"),
        "{replay}"
    );
    let history = stdout(&autoscaled(&["history", "--addr", &addr, "inference/a"]));
    assert!(history.contains("gpu-tier (version 2)"), "{history}");
    // The console's target page says the same.
    let (status, page) = http(server.admin.unwrap(), "GET", "/targets/inference%2Fa", "");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("Policy: gpu-tier (version 2)"), "{page}");
    assert!(
        page.contains("Scaling group gpus: 4 uncapped, fair share 3, 3 of 3 units held"),
        "{page}"
    );
    // HTTP/JSON (Connect) on the gRPC port: a bad group is a 400 naming the field.
    let (status, body) = http(
        server.addr,
        "POST",
        "/autoscaled.v1.HorizontalAutoscaler/PutScalingGroup",
        r#"{"group": {"name": "gpus", "capacity": 0, "memberPrefixes": ["x/"]}}"#,
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("group.capacity"), "{body}");

    let refused = autoscaled(&["delete", "policy", "gpu-tier", "--addr", &addr]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("FailedPrecondition"),
        "{refused:?}"
    );
    let forced = autoscaled(&["delete", "policy", "gpu-tier", "--force", "--addr", &addr]);
    assert_eq!(stdout(&forced), "policy/gpu-tier deleted\n", "{forced:?}");
    let deleted = autoscaled(&["delete", "group", "gpus", "--addr", &addr]);
    assert_eq!(
        stdout(&deleted),
        "scalinggroup/gpus deleted\n",
        "{deleted:?}"
    );
    let empty = stdout(&autoscaled(&["get", "groups", "--addr", &addr]));
    assert_eq!(empty.lines().count(), 1, "{empty}");
}
