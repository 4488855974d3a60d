//! The `autoscaled` binary as the `clients` branch uses it: the listening line, SIGTERM, and
//! configuration errors (exit 64).

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
};

fn autoscaled() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_autoscaled"));
    // Only what a test sets explicitly reaches the binary's configuration.
    for (key, _) in std::env::vars() {
        if key.starts_with("AUTOSCALED_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

#[test]
fn serve_prints_the_real_address_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = autoscaled()
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim_end()
        .strip_prefix("autoscaled listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    assert_eq!(addr.ip().to_string(), "127.0.0.1");
    assert_ne!(addr.port(), 0);
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

#[test]
fn help_shows_every_default() {
    let out = autoscaled().args(["serve", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for expected in [
        "[default: 127.0.0.1:50051]",
        "[default: ./data]",
        "[default: strict]",
        "[default: 10]",
        "[default: 100]",
        "[default: 0.1]",
        "AUTOSCALED_LISTEN",
        "AUTOSCALED_TRUST_REQUEST_TIME",
    ] {
        assert!(help.contains(expected), "--help lacks {expected}:\n{help}");
    }
}

#[test]
fn bad_configuration_exits_64_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("autoscaled.toml");
    std::fs::write(&file, "listen = \"127.0.0.1:0\"\nmax_podz = 3\n").unwrap();
    let cases: Vec<(Command, &str)> = vec![
        (
            {
                let mut c = autoscaled();
                c.args(["serve", "--config"]).arg(&file);
                c
            },
            "max_podz",
        ),
        (
            {
                let mut c = autoscaled();
                c.args(["serve"]).env("AUTOSCALED_MAX_PODS", "0");
                c
            },
            "max_pods",
        ),
        (
            {
                let mut c = autoscaled();
                c.args(["serve", "--durability", "sometimes"]);
                c
            },
            "sometimes",
        ),
        (
            {
                let mut c = autoscaled();
                c.args(["serve", "--listen", "nowhere"]);
                c
            },
            "nowhere",
        ),
    ];
    for (mut cmd, expected) in cases {
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{cmd:?}: {stderr}");
        assert!(stderr.contains(expected), "{cmd:?}: {stderr}");
    }
}
