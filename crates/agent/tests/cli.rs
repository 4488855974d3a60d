//! `autoscaled-agent --check`: the configuration read as the agent reads it, each target's
//! state printed, exit 2 on a mistake (a file that does not parse, or a target skipped).

use std::process::Command;

fn check(config: &str, name: &str) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_autoscaled-agent"))
        .arg("--check")
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const TARGET: &str = r#"
[[targets]]
key = "KEY"
source = { command = ["cat", "observations.json"] }
actuator = { webhook = "http://127.0.0.1:8080/scale" }
spec = { max_replicas = 4, metrics = [{ type = "METRIC_SOURCE_TYPE_EXTERNAL", name = "queue", target = { type = "METRIC_TARGET_TYPE_VALUE", value_milli = 1000 } }] }
"#;

#[test]
fn check_prints_each_target_and_exits_2_on_a_mistake() {
    let good = TARGET.replace("KEY", "a");
    let typo = TARGET
        .replace("KEY", "b")
        .replace("actuator =", "actuatr =");
    let (code, stdout, _) = check(&format!("{good}{typo}"), "agent.toml");
    assert_eq!(code, 2, "{stdout}");
    assert!(stdout.contains("ok       a (every 15s)"), "{stdout}");
    assert!(
        stdout.contains("rejected targets[1] (b): unknown field `actuatr`"),
        "{stdout}"
    );

    let (code, stdout, _) = check(&good, "agent.toml");
    assert_eq!(code, 0, "{stdout}");

    let bad_spec = TARGET
        .replace("KEY", "c")
        .replace("max_replicas = 4", "max_replicas = -1");
    let (code, stdout, _) = check(&bad_spec, "agent.toml");
    assert_eq!(code, 2);
    assert!(stdout.contains("spec.max_replicas"), "{stdout}");

    let (code, _, stderr) = check("targets: [", "agent.yaml");
    assert_eq!(code, 2);
    assert!(stderr.starts_with("autoscaled-agent: "), "{stderr}");
    assert!(stderr.contains("agent.yaml"), "{stderr}");
}
