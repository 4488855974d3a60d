//! Helpers that start the real `autoscaled` binary and read its `autoscaled listening on ADDR`
//! line. Shared by the tests (through `tests/common`, also `crates/ctl/tests/common`) and the
//! benchmarks (through
//! `#[path = "../tests/common/binary.rs"] mod binary;`), which cannot import `tests/common`.
#![allow(dead_code)]

use std::{
    io::{BufRead, BufReader, Read},
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

/// The server binary: Cargo's own path in the server package's tests and benchmarks, and the
/// one beside `autoscalectl` in `crates/ctl`'s tests (one target folder; `cargo test
/// --workspace` builds both before it runs any test).
pub fn server_binary() -> PathBuf {
    if let Some(path) = option_env!("CARGO_BIN_EXE_autoscaled") {
        return path.into();
    }
    let Some(ctl) = option_env!("CARGO_BIN_EXE_autoscalectl") else {
        panic!("built as a test of the server package or of crates/ctl");
    };
    let path = Path::new(ctl).with_file_name("autoscaled");
    assert!(
        path.exists(),
        "{} is missing: run `cargo test --workspace`, or `cargo build --bin autoscaled` first",
        path.display()
    );
    path
}

/// A running `autoscaled serve`, killed with SIGKILL when dropped.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    /// The admin listener (`/metrics`), when the command has `--metrics-listen`.
    pub admin: Option<SocketAddr>,
    /// The health-only listener, when the command has `--health-listen`.
    pub health: Option<SocketAddr>,
}

impl Server {
    /// Sends SIGTERM (what Kubernetes sends) and waits for a clean exit.
    pub fn terminate(&mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
        let exit = self.child.wait().expect("the server exits");
        assert!(exit.success(), "exit status {exit}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn command(data_dir: &Path) -> Command {
    let mut command = Command::new(server_binary());
    command
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--trust-request-time",
            "--data-dir",
        ])
        .arg(data_dir)
        .env("AUTOSCALED_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Starts the binary and waits for `autoscaled listening on ADDR`.
pub fn start(data_dir: &Path) -> Server {
    spawn(command(data_dir))
}

/// Spawns `command` (the binary with `serve` arguments and piped stdout/stderr, as [`command`]
/// builds it) and waits for `autoscaled listening on ADDR`.
pub fn spawn(mut command: Command) -> Server {
    let mut child = command.spawn().expect("the binary starts");
    let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("stdout readable");
    let Some(addr) = line.trim().strip_prefix("autoscaled listening on ") else {
        let mut err = String::new();
        if let Some(mut stderr) = child.stderr.take() {
            let _ = stderr.read_to_string(&mut err);
        }
        let _ = child.kill();
        panic!("unexpected first line {line:?}; stderr: {err}");
    };
    let addr = addr.parse().expect("an address");
    // The next lines, in this order: the health listener's, the admin listener's.
    let mut next_line = |flag: &str, prefix: &str| {
        command.get_args().any(|a| a == flag).then(|| {
            let mut line = String::new();
            stdout.read_line(&mut line).expect("stdout readable");
            line.trim()
                .strip_prefix(prefix)
                .unwrap_or_else(|| panic!("unexpected line {line:?}, expected {prefix}ADDR"))
                .parse()
                .expect("an address")
        })
    };
    let health = next_line("--health-listen", "autoscaled health listening on ");
    let admin = next_line("--metrics-listen", "autoscaled admin listening on ");
    // Keep draining so the server never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    // Drained unless the caller sent it elsewhere (a file it reads).
    if let Some(mut stderr) = child.stderr.take() {
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    }
    Server {
        child,
        addr,
        admin,
        health,
    }
}

/// Copies a fixture data folder (a folder written by an earlier release) to `to`, so that a
/// test can start the binary on it without touching the checked-in copy.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
