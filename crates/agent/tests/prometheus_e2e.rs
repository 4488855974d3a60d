//! The whole loop with real processes: Debian's Prometheus scraping real worker processes
//! (`examples/agent/worker.py`) whose load the test sets, the real `autoscaled` server, and
//! the real `autoscaled-agent` whose command actuator (`examples/agent/scale.sh`) starts and
//! stops those workers and rewrites Prometheus' file-based discovery.
//!
//! * load goes up: the fleet grows to the count the HPA formula gives (ceil(load / target));
//! * load goes down: it shrinks only after the scale-down stabilization window (the stored
//!   decisions show ScaleDownStabilized first);
//! * the scheduler refuses: the decision shows FailedUpdateScale with its message, no scale
//!   event is stored for it, and a later period retries and succeeds;
//! * beside it, a target whose query is wrong, one whose Prometheus is down, one whose
//!   actuator hangs, and one with a typo each get a clear message, and the first target is
//!   not disturbed.
//!
//! Without `prometheus` installed the test prints SKIPPED, except under `CI=true`, where it
//! fails (`scripts/prometheus-ci.sh install` installs it).

use std::{
    io::{BufRead, BufReader, Read},
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use autoscaled::pb::v1::{self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn agent_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_autoscaled-agent"))
}

fn server_binary() -> PathBuf {
    let path = agent_binary().with_file_name("autoscaled");
    assert!(
        path.exists(),
        "{} is missing: run `cargo test --workspace`, or `cargo build --bin autoscaled` first",
        path.display()
    );
    path
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child killed (with its output kept) when dropped.
struct Proc {
    child: Child,
    log: Arc<Mutex<String>>,
}

impl Proc {
    fn spawn(mut command: Command) -> Proc {
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

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn wait_for_log(&self, needle: &str, within: Duration) -> bool {
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
struct Workers(PathBuf);

impl Drop for Workers {
    fn drop(&mut self) {
        let _ = Command::new(root().join("examples/agent/scale.sh"))
            .arg(&self.0)
            .arg("stop-all")
            .status();
    }
}

fn scale_sh(dir: &Path, args: &[&str]) -> String {
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

fn prometheus_available() -> bool {
    let found = Command::new("prometheus")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "prometheus is not installed (scripts/prometheus-ci.sh install)"
        );
        eprintln!("SKIPPED: prometheus is not installed (scripts/prometheus-ci.sh install)");
    }
    found
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn history(addr: &str, key: &str) -> Option<pb::TargetHistory> {
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

fn reason<'a>(d: &'a pb::DecisionRecord, kind: &str) -> &'a str {
    d.conditions
        .iter()
        .find(|c| c.r#type == kind)
        .map_or("", |c| c.reason.as_str())
}

#[test]
fn the_agent_scales_real_workers_from_real_prometheus() {
    if !prometheus_available() {
        return;
    }
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let _workers = Workers(work.clone());
    std::fs::write(work.join("load"), "0").unwrap();
    scale_sh(&work, &["set", "1"]);

    // Prometheus, scraping the workers every second through file-based discovery.
    let prom_port = free_port();
    let config = std::fs::read_to_string(root().join("examples/agent/prometheus.yml.in"))
        .unwrap()
        .replace("@DIR@", work.to_str().unwrap());
    std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
    let mut prom = Command::new("prometheus");
    prom.arg(format!(
        "--config.file={}",
        dir.path().join("prometheus.yml").display()
    ))
    .arg(format!(
        "--storage.tsdb.path={}",
        dir.path().join("tsdb").display()
    ))
    .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"));
    let _prometheus = Proc::spawn(prom);

    // The server (its clock decides), on a free port.
    let server_port = free_port();
    let mut server = Command::new(server_binary());
    server
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--listen")
        .arg(format!("127.0.0.1:{server_port}"))
        .env("AUTOSCALED_LOG", "warn");
    let server = Proc::spawn(server);
    assert!(
        server.wait_for_log("listening", Duration::from_secs(20)),
        "server did not start: {}",
        server.log()
    );
    let addr = format!("127.0.0.1:{server_port}");

    // The agent: the worker target, and four targets that go wrong in four ways.
    // A command source (a RecommendRequest in proto3 JSON) and a webhook actuator that
    // answers 503 once, then 200: the agent retries, and reports the scale as applied.
    let observations = dir.path().join("observations.json");
    std::fs::write(
        &observations,
        r#"{"currentReplicas": 2, "externalMetrics": {"queue": {"valuesMilli": ["3000"]}}}"#,
    )
    .unwrap();
    let hook = TcpListener::bind("127.0.0.1:0").unwrap();
    let hook_port = hook.local_addr().unwrap().port();
    let hook_calls = Arc::new(Mutex::new(Vec::<String>::new()));
    {
        let hook_calls = Arc::clone(&hook_calls);
        std::thread::spawn(move || {
            for stream in hook.incoming() {
                let Ok(mut stream) = stream else { continue };
                let body = read_request(&mut stream);
                let n = {
                    let mut calls = hook_calls.lock().unwrap();
                    calls.push(body);
                    calls.len()
                };
                let reply = if n == 1 {
                    "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy"
                } else {
                    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                };
                let _ = std::io::Write::write_all(&mut stream, reply.as_bytes());
            }
        });
    }
    let scale = root().join("examples/agent/scale.sh");
    let scale = scale.to_str().unwrap();
    let work_s = work.to_str().unwrap();
    let metrics_port = free_port();
    let agent_config = format!(
        r#"
[server]
addr = "{addr}"

[agent]
metrics_listen = "127.0.0.1:{metrics_port}"

[prometheus]
url = "http://127.0.0.1:{prom_port}"

[[targets]]
key = "e2e/worker"
sync_period = "1s"
replicas = {{ command = ["{scale}", "{work_s}", "count"] }}
actuator = {{ command = ["{scale}", "{work_s}", "set", "{{replicas}}"], timeout = "20s" }}
pods = {{ ready = 'up{{job="worker"}}', start_time = 'process_start_time_seconds{{job="worker"}}' }}
metrics = {{ worker_load = 'worker_load{{job="worker"}}' }}
[targets.spec]
min_replicas = 1
max_replicas = 8
metrics = [{{ type = "METRIC_SOURCE_TYPE_PODS", name = "worker_load", target = {{ type = "METRIC_TARGET_TYPE_AVERAGE_VALUE", average_value_milli = 10000 }} }}]
behavior = {{ scale_down = {{ stabilization_window_seconds = 8 }} }}

[[targets]]
key = "e2e/bad-query"
sync_period = "1s"
replicas = {{ command = ["echo", "1"] }}
actuator = {{ command = ["true"] }}
metrics = {{ queue = 'sum(worker_load{{' }}
spec = {{ max_replicas = 4, metrics = [{{ type = "METRIC_SOURCE_TYPE_EXTERNAL", name = "queue", target = {{ type = "METRIC_TARGET_TYPE_VALUE", value_milli = 1000 }} }}] }}

[[targets]]
key = "e2e/prometheus-down"
sync_period = "1s"
prometheus = "http://127.0.0.1:1"
replicas = {{ command = ["echo", "1"] }}
actuator = {{ command = ["true"] }}
metrics = {{ queue = 'vector(5)' }}
spec = {{ max_replicas = 4, metrics = [{{ type = "METRIC_SOURCE_TYPE_EXTERNAL", name = "queue", target = {{ type = "METRIC_TARGET_TYPE_VALUE", value_milli = 1000 }} }}] }}

[[targets]]
key = "e2e/hang"
sync_period = "1s"
replicas = {{ command = ["echo", "1"] }}
actuator = {{ command = ["sleep", "60"], timeout = "1s" }}
metrics = {{ queue = 'vector(3)' }}
spec = {{ max_replicas = 4, behavior = {{}}, metrics = [{{ type = "METRIC_SOURCE_TYPE_EXTERNAL", name = "queue", target = {{ type = "METRIC_TARGET_TYPE_AVERAGE_VALUE", average_value_milli = 1000 }} }}] }}

[[targets]]
key = "e2e/typo"
qurey = "up"
replicas = {{ command = ["echo", "1"] }}
actuator = {{ command = ["true"] }}
spec = {{ max_replicas = 4 }}

[[targets]]
key = "e2e/command"
sync_period = "1s"
source = {{ command = ["cat", "{observations}"] }}
actuator = {{ webhook = "http://127.0.0.1:{hook_port}/scale", timeout = "2s", retries = 2, backoff = "100ms" }}
spec = {{ max_replicas = 10, metrics = [{{ type = "METRIC_SOURCE_TYPE_EXTERNAL", name = "queue", target = {{ type = "METRIC_TARGET_TYPE_AVERAGE_VALUE", average_value_milli = 1000 }} }}] }}
"#,
        observations = observations.display(),
    );
    let agent_toml = dir.path().join("agent.toml");
    std::fs::write(&agent_toml, agent_config).unwrap();
    let mut agent = Command::new(agent_binary());
    agent.arg("--config").arg(&agent_toml);
    let agent = Proc::spawn(agent);
    assert!(
        agent.wait_for_log("agent started", Duration::from_secs(10)),
        "agent did not start: {}",
        agent.log()
    );

    let started = Instant::now();
    let timeline = Mutex::new(Vec::<String>::new());
    let desired_of = |key: &str| {
        rt.block_on(history(&addr, key))
            .and_then(|h| h.decisions.last().cloned())
    };
    // Waits until the live worker count is `want`, recording the timeline each second.
    let converge = |load: f64, want: &str, within: Duration| {
        let end = Instant::now() + within;
        loop {
            let live = scale_sh(&work, &["count"]);
            let desired = desired_of("e2e/worker").map_or(-1, |d| d.desired_replicas);
            timeline.lock().unwrap().push(format!(
                "t={:>5.1}s load={load:>4} replicas={live} desired={desired}",
                started.elapsed().as_secs_f64()
            ));
            if live == want {
                return;
            }
            assert!(
                Instant::now() < end,
                "no convergence to {want}: {}\n--- agent log ---\n{}",
                timeline.lock().unwrap().join("\n"),
                agent.log()
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    };
    let set_load = |load: f64| std::fs::write(work.join("load"), load.to_string()).unwrap();

    // Load 45 against 10 per worker: ceil(45 / 10) = 5 (the default scale-up policies allow
    // 1 → 5: 4 pods per 15 s).
    set_load(45.0);
    converge(45.0, "5", Duration::from_secs(60));
    // Load 10: 1 worker, but only after the 8 s scale-down stabilization window.
    set_load(10.0);
    converge(10.0, "1", Duration::from_secs(60));
    let h = rt.block_on(history(&addr, "e2e/worker")).unwrap();
    let stabilized = h
        .decisions
        .iter()
        .any(|d| d.current_replicas == 5 && reason(d, "AbleToScale") == "ScaleDownStabilized");
    assert!(
        stabilized,
        "no ScaleDownStabilized decision before the scale-down: {:#?}",
        h.decisions
    );

    // The scheduler refuses: FailedUpdateScale with its message, no scale event stored.
    std::fs::write(work.join("fail"), "quota exceeded").unwrap();
    set_load(30.0);
    let end = Instant::now() + Duration::from_secs(60);
    let failed = loop {
        let h = rt.block_on(history(&addr, "e2e/worker")).unwrap();
        if let Some(d) = h
            .decisions
            .iter()
            .rev()
            .find(|d| reason(d, "AbleToScale") == "FailedUpdateScale")
        {
            break (d.clone(), h);
        }
        assert!(
            Instant::now() < end,
            "no FailedUpdateScale: {}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let (decision, h) = failed;
    let message = &decision
        .conditions
        .iter()
        .find(|c| c.r#type == "AbleToScale")
        .unwrap()
        .message;
    assert!(
        message.contains("scale refused: quota exceeded"),
        "{message}"
    );
    assert!(decision.desired_replicas > decision.current_replicas);
    assert!(
        !h.scale_up_events
            .iter()
            .any(|e| e.time == decision.evaluation_time),
        "a scale event was stored for the failed scale: {:?}",
        h.scale_up_events
    );
    assert_eq!(scale_sh(&work, &["count"]), "1");
    // The scheduler accepts again: the next period retries. ceil(30 / 10) = 3.
    std::fs::remove_file(work.join("fail")).unwrap();
    converge(30.0, "3", Duration::from_secs(60));

    // The other targets: each failed in its own way, with its own message.
    let log = agent.log();
    assert!(
        log.contains("targets[4] (e2e/typo): unknown field `qurey`"),
        "{log}"
    );
    assert!(
        log.contains("parse error"),
        "the bad query's PromQL error: {log}"
    );
    assert!(log.contains("unreachable"), "Prometheus down: {log}");
    let bad = desired_of("e2e/bad-query").expect("the bad-query target decided");
    assert_eq!(reason(&bad, "ScalingActive"), "FailedGetExternalMetric");
    let down = desired_of("e2e/prometheus-down").expect("the prometheus-down target decided");
    assert_eq!(reason(&down, "ScalingActive"), "FailedGetExternalMetric");
    let hang = rt.block_on(history(&addr, "e2e/hang")).unwrap();
    let hung = hang
        .decisions
        .iter()
        .find(|d| reason(d, "AbleToScale") == "FailedUpdateScale")
        .expect("the hung actuator reported");
    assert!(
        hung.conditions
            .iter()
            .any(|c| c.message.contains("did not finish")),
        "{:?}",
        hung.conditions
    );
    assert!(desired_of("e2e/typo").is_none(), "the rejected target ran");
    // The command source and the webhook: 2 → ceil(3000 / 1000) = 3, applied after a retry.
    let command = rt.block_on(history(&addr, "e2e/command")).unwrap();
    let first = command
        .decisions
        .first()
        .expect("the command target decided");
    assert_eq!((first.current_replicas, first.desired_replicas), (2, 3));
    assert!(
        command
            .decisions
            .iter()
            .all(|d| reason(d, "AbleToScale") == "SucceededRescale"),
        "{:?}",
        command.decisions
    );
    let calls = hook_calls.lock().unwrap().clone();
    assert!(calls.len() >= 2, "{calls:?}");
    let body: serde_json::Value = serde_json::from_str(&calls[1]).unwrap();
    assert_eq!(body["target_key"], "e2e/command");
    assert_eq!(
        (
            body["current_replicas"].as_i64(),
            body["desired_replicas"].as_i64()
        ),
        (Some(2), Some(3))
    );
    assert!(
        body["evaluation_time"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{body}"
    );

    // Reload: a file that does not parse leaves everything running; SIGHUP with a target
    // added starts it, and the worker target (unchanged) is not restarted.
    let good = std::fs::read_to_string(&agent_toml).unwrap();
    std::fs::write(&agent_toml, "[[targets]\nkey = ").unwrap();
    assert!(
        agent.wait_for_log("configuration not reloaded", Duration::from_secs(10)),
        "{}",
        agent.log()
    );
    let added = good.clone()
        + r#"
[[targets]]
key = "e2e/added"
sync_period = "1s"
replicas = { command = ["echo", "2"] }
actuator = { command = ["true"] }
metrics = { queue = 'vector(2)' }
spec = { max_replicas = 4, metrics = [{ type = "METRIC_SOURCE_TYPE_EXTERNAL", name = "queue", target = { type = "METRIC_TARGET_TYPE_VALUE", value_milli = 1000 } }] }
"#;
    std::fs::write(&agent_toml, added).unwrap();
    Command::new("kill")
        .args(["-HUP", &agent.child.id().to_string()])
        .status()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(15);
    while desired_of("e2e/added").is_none() {
        assert!(
            Instant::now() < end,
            "the added target never decided: {}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let log = agent.log();
    assert!(log.contains("configuration reloaded"), "{log}");
    assert_eq!(
        log.matches("target started target.key=\"e2e/worker\"")
            .count(),
        1,
        "the unchanged target was restarted by the reload:\n{log}"
    );

    // The agent's own metrics.
    let metrics = http_get(metrics_port, "/metrics");
    for needle in [
        r#"autoscaled_agent_scales_total{target="e2e/worker",direction="up",result="failed"}"#,
        r#"autoscaled_agent_scales_total{target="e2e/worker",direction="down",result="applied"}"#,
        r#"autoscaled_agent_query_failures_total{target="e2e/prometheus-down",query="queue"}"#,
        r#"autoscaled_agent_targets{state="rejected"} 1"#,
    ] {
        assert!(metrics.contains(needle), "{needle} not in:\n{metrics}");
    }

    // What the agent cost: its own CPU time per target-period (children excluded).
    let periods: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("autoscaled_agent_periods_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    let cpu = cpu_seconds(agent.child.id());
    eprintln!("--- convergence (replicas against load) ---");
    eprintln!("{}", timeline.lock().unwrap().join("\n"));
    eprintln!(
        "agent: {periods} target-periods, {cpu:.3} s CPU of its own, {:.2} ms per target-period",
        cpu * 1000.0 / periods.max(1.0)
    );

    // SIGTERM: a clean stop.
    let mut agent = agent;
    Command::new("kill")
        .args(["-TERM", &agent.child.id().to_string()])
        .status()
        .unwrap();
    let status = agent.child.wait().unwrap();
    assert!(status.success(), "agent exit {status}: {}", agent.log());
    assert!(agent.wait_for_log("stopped", Duration::from_secs(5)));
    drop(server);
}

/// A request's body, read by its Content-Length.
fn read_request(stream: &mut std::net::TcpStream) -> String {
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

fn http_get(port: u16, path: &str) -> String {
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
fn cpu_seconds(pid: u32) -> f64 {
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
