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

mod support;

use std::{
    net::TcpListener,
    process::Command,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use support::*;

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
    let config = std::fs::read_to_string(root().join("examples/agent/prometheus.yml.in"))
        .unwrap()
        .replace("@DIR@", work.to_str().unwrap());
    let (_prometheus, prom_port) = start_prometheus(dir.path(), &config);
    let (server, addr) = start_server(dir.path());

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
delete_removed = true

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

[[targets]]
key = "e2e/shadow"
sync_period = "1s"
shadow = true
source = {{ command = ["cat", "{observations}"] }}
actuator = {{ command = ["false"] }}
spec = {{ max_replicas = 10, metrics = [{{ type = "METRIC_SOURCE_TYPE_EXTERNAL", name = "queue", target = {{ type = "METRIC_TARGET_TYPE_AVERAGE_VALUE", average_value_milli = 1000 }} }}] }}
"#,
        observations = observations.display(),
    );
    let agent_toml = dir.path().join("agent.toml");
    std::fs::write(&agent_toml, agent_config).unwrap();
    let agent = start_agent(&agent_toml);

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

    // Shadow: decided and recorded as if applied (2 → 3, then 3 held: the server's count is
    // what the shadow asked for), the actuator (which would fail) never run.
    let shadow = rt.block_on(history(&addr, "e2e/shadow")).unwrap();
    assert!(
        shadow.decisions.iter().all(|d| d.shadow)
            && shadow
                .decisions
                .iter()
                .all(|d| reason(d, "AbleToScale") != "FailedUpdateScale"),
        "{:?}",
        shadow.decisions
    );
    let newest = shadow.decisions.last().unwrap();
    assert_eq!((newest.current_replicas, newest.desired_replicas), (3, 3));
    assert!(
        agent
            .log()
            .contains("target.key=\"e2e/shadow\" current=3 desired=3 shadow=true")
    );

    // --check runs the queries: the bad PromQL is named by its field (--offline does not ask).
    let check_toml = dir.path().join("check.toml");
    std::fs::write(
        &check_toml,
        format!(
            r#"[prometheus]
url = "http://127.0.0.1:{prom_port}"
[[targets]]
key = "check/bad-query"
replicas = {{ command = ["echo", "1"] }}
actuator = {{ command = ["true"] }}
metrics = {{ queue = 'sum(worker_load{{' }}
spec = {{ max_replicas = 4, metrics = [{{ type = "METRIC_SOURCE_TYPE_EXTERNAL", name = "queue", target = {{ type = "METRIC_TARGET_TYPE_VALUE", value_milli = 1000 }} }}] }}
"#
        ),
    )
    .unwrap();
    let check = |offline: bool| {
        let mut c = Command::new(agent_binary());
        c.arg("--check").arg("--config").arg(&check_toml);
        if offline {
            c.arg("--offline");
        }
        let out = c.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, out) = check(false);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("rejected targets[0] (check/bad-query): metrics.queue: ")
            && out.contains("parse error"),
        "{out}"
    );
    let (code, out) = check(true);
    assert_eq!(code, Some(0), "{out}");

    // Reload: a file that does not parse leaves everything running; SIGHUP with a target
    // added starts it, and the worker target (unchanged) is not restarted.
    let good = std::fs::read_to_string(&agent_toml).unwrap();
    std::fs::write(&agent_toml, "[[targets]\nkey = ").unwrap();
    assert!(
        agent.wait_for_log("configuration not reloaded", Duration::from_secs(10)),
        "{}",
        agent.log()
    );
    // The shadow target removed from the file: deleted on the server (agent.delete_removed).
    let shadow_block = good
        .find("[[targets]]\nkey = \"e2e/shadow\"")
        .expect("the shadow target's block");
    let added = good[..shadow_block].to_owned()
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
    let end = Instant::now() + Duration::from_secs(15);
    while rt.block_on(history(&addr, "e2e/shadow")).is_some() {
        assert!(
            Instant::now() < end,
            "the removed target was not deleted: {}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let log = agent.log();
    assert!(log.contains("configuration reloaded"), "{log}");
    assert!(
        log.contains("target deleted on the server (removed from the file; agent.delete_removed)"),
        "{log}"
    );
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
