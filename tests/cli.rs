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
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes with this statement: the server serves on with its stdout closed.
    let line = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .next()
        .expect("a first line")
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
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    // stderr is a pipe, not a terminal: log lines without ANSI colour codes.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("serving"), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes in a pipe: {stderr:?}"
    );
}

#[test]
fn a_busy_port_is_one_line_and_leaves_no_data_folder() {
    let dir = tempfile::tempdir().unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let data = dir.path().join("data");
    let out = autoscaled()
        .args([
            "serve",
            "--listen",
            &busy.local_addr().unwrap().to_string(),
            "--data-dir",
        ])
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(
        stderr.starts_with("autoscaled: cannot listen on 127.0.0.1:"),
        "{stderr}"
    );
    assert!(!data.exists(), "a failed start created {}", data.display());
    assert!(out.stdout.is_empty(), "{out:?}");
}

#[test]
fn the_readme_configuration_table_is_generated_from_the_flags() {
    let out = autoscaled().arg("config-table").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let table = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--config FILE",
        "--flush-interval-ms MS",
        "--hpa-tolerance RATIO",
        "--log-format FORMAT",
    ] {
        assert!(table.contains(flag), "{flag} missing:\n{table}");
    }
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let section = readme
        .split("<!-- config-table:begin -->\n")
        .nth(1)
        .and_then(|rest| rest.split("<!-- config-table:end -->").next())
        .expect("README.md has the config-table markers");
    assert_eq!(
        section, table,
        "README.md's configuration table is stale: replace it by the output of `autoscaled config-table`"
    );
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
