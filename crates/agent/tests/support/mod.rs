//! What the agent's end-to-end tests share: real processes (Prometheus, the server, the
//! agent, the example's workers and scheduler script) started on free loopback ports and
//! killed when dropped, and readers of the server's history.

#![allow(dead_code)]

use std::{
    io::{BufRead, BufReader, Read},
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use autoscaled_wire::pb::v1::{
    self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient,
};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn agent_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_autoscaled-agent"))
}

pub fn server_binary() -> PathBuf {
    let path = agent_binary().with_file_name("autoscaled");
    assert!(
        path.exists(),
        "{} is missing: run `cargo test --workspace`, or `cargo build --bin autoscaled` first",
        path.display()
    );
    path
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child killed (with its output kept) when dropped.
pub struct Proc {
    pub child: Child,
    log: Arc<Mutex<String>>,
}

impl Proc {
    pub fn spawn(mut command: Command) -> Proc {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn");
        let log = Arc::new(Mutex::new(String::new()));
        for stream in [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let mut l = log.lock().unwrap();
                    l.push_str(&line);
                    l.push('\n');
                }
            });
        }
        Proc { child, log }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn wait_for_log(&self, needle: &str, within: Duration) -> bool {
        let end = Instant::now() + within;
        while Instant::now() < end {
            if self.log().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Stops the workers whatever happens.
pub struct Workers(pub PathBuf);

impl Drop for Workers {
    fn drop(&mut self) {
        let _ = Command::new(root().join("examples/agent/scale.sh"))
            .arg(&self.0)
            .arg("stop-all")
            .status();
    }
}

pub fn scale_sh(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(root().join("examples/agent/scale.sh"))
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

pub fn prometheus_available() -> bool {
    autoscaled_fixtures::installed("prometheus", "scripts/prometheus-ci.sh install")
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub async fn history(addr: &str, key: &str) -> Option<pb::TargetHistory> {
    let mut client = HorizontalAutoscalerClient::connect(format!("http://{addr}"))
        .await
        .ok()?;
    client
        .get_history(pb::GetHistoryRequest {
            target_key: key.into(),
            ..Default::default()
        })
        .await
        .ok()
        .map(tonic::Response::into_inner)
}

pub fn reason<'a>(d: &'a pb::DecisionRecord, kind: &str) -> &'a str {
    d.conditions
        .iter()
        .find(|c| c.r#type == kind)
        .map_or("", |c| c.reason.as_str())
}

/// A request's body, read by its Content-Length.
pub fn read_request(stream: &mut std::net::TcpStream) -> String {
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).unwrap_or(0);
        if n == 0 {
            return String::new();
        }
        raw.extend_from_slice(&chunk[..n]);
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            while raw.len() < end + 4 + len {
                let n = stream.read(&mut chunk).unwrap_or(0);
                if n == 0 {
                    break;
                }
                raw.extend_from_slice(&chunk[..n]);
            }
            return String::from_utf8_lossy(&raw[end + 4..]).into_owned();
        }
    }
}

pub fn http_get(port: u16, path: &str) -> String {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// utime + stime of `pid` in seconds (`/proc/PID/stat`, at 100 ticks per second).
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// Debian's Prometheus on a free port with `config` (its `scrape_configs` and globals), its
/// data in `dir`.
pub fn start_prometheus(dir: &Path, config: &str) -> (Proc, u16) {
    let port = free_port();
    let file = dir.join("prometheus.yml");
    std::fs::write(&file, config).unwrap();
    let mut prom = Command::new("prometheus");
    prom.arg(format!("--config.file={}", file.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"));
    (Proc::spawn(prom), port)
}

/// The real server on a free port (its clock decides), its data in `dir/data`; the address.
pub fn start_server(dir: &Path) -> (Proc, String) {
    let port = free_port();
    let mut server = Command::new(server_binary());
    server
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .env("AUTOSCALED_LOG", "warn");
    let server = Proc::spawn(server);
    assert!(
        server.wait_for_log("listening", Duration::from_secs(20)),
        "server did not start: {}",
        server.log()
    );
    (server, format!("127.0.0.1:{port}"))
}

/// The agent on `config`, once it has started.
pub fn start_agent(config: &Path) -> Proc {
    let mut agent = Command::new(agent_binary());
    agent.arg("--config").arg(config);
    let agent = Proc::spawn(agent);
    assert!(
        agent.wait_for_log("agent started", Duration::from_secs(10)),
        "agent did not start: {}",
        agent.log()
    );
    agent
}
