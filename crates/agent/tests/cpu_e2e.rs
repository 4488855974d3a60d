//! The loop on the targets most users have, with real processes: a CPU Utilization target
//! (usage from `rate(process_cpu_seconds_total[15s])`, requests written as a quantity) and a
//! request-rate Pods target (`rate(http_requests_total[5s])`), each on its own pool of
//! `examples/agent/worker.py` instances whose simulated CPU and request counters the test
//! sets, scraped every second by Debian's Prometheus, the real server and the real agent.
//!
//! Each step is held against what Kubernetes decides with metrics-server's samples (a 15 s
//! window, stamped when measured) and the controller's defaults (a 5 minute CPU
//! initialization period, 10 % tolerance, scale-up by at most 4 pods or 100 % per 15 s):
//!
//! * two new workers at 170 % of their request: the first scale-up (2 → 6, the scale-up
//!   limit) once their first 15 s window has passed, not a minute later;
//! * the four new workers count once their own first window has passed (6 → 7 at 113 %);
//!   while they do not, nothing fails for want of their requests (placeholders carry them);
//! * the load falls: 7 → 2 only after the 30 s scale-down window;
//! * the request rate rises: the first scale-up within two sync periods, to ceil(45 / 10).
//!
//! The bounds are the Kubernetes timing plus Prometheus' discovery lag (up to ~6 s) and two
//! sync periods; the measured timeline is printed.

mod support;

use std::{
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use autoscaled_wire::pb::v1 as pb;
use support::*;

const SYNC: Duration = Duration::from_secs(5);

/// A pool of workers scraped as `job`.
fn pool(dir: &Path, job: &str) -> (std::path::PathBuf, Workers) {
    let work = dir.join(job);
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("job"), job).unwrap();
    (work.clone(), Workers(work))
}

/// One sample of a target every 500 ms: seconds since `t0`, the live workers, the newest
/// decision.
#[derive(Clone, Debug)]
struct Point {
    t: f64,
    live: i32,
    desired: i32,
}

fn record(
    addr: String,
    key: &'static str,
    work: std::path::PathBuf,
    t0: Instant,
    stop: Arc<Mutex<bool>>,
) -> (Arc<Mutex<Vec<Point>>>, std::thread::JoinHandle<()>) {
    let points = Arc::new(Mutex::new(Vec::new()));
    let out = Arc::clone(&points);
    let handle = std::thread::spawn(move || {
        let rt = runtime();
        while !*stop.lock().unwrap() {
            let live = scale_sh(&work, &["count"]).parse().unwrap_or(-1);
            let desired = rt
                .block_on(history(&addr, key))
                .and_then(|h| h.decisions.last().map(|d| d.desired_replicas))
                .unwrap_or(-1);
            out.lock().unwrap().push(Point {
                t: t0.elapsed().as_secs_f64(),
                live,
                desired,
            });
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    (points, handle)
}

/// When the pool first ran `want` workers, after `since` seconds, within `within` seconds of
/// it; the timeline on failure.
fn first_at(points: &Mutex<Vec<Point>>, want: i32, since: f64, within: f64, what: &str) -> f64 {
    let end = Instant::now() + Duration::from_secs_f64(within + 10.0);
    loop {
        let found = points
            .lock()
            .unwrap()
            .iter()
            .find(|p| p.t >= since && p.live == want)
            .map(|p| p.t);
        if let Some(t) = found {
            assert!(
                t - since <= within,
                "{what}: {want} workers {:.1} s after t={since:.1}, more than {within} s\n{}",
                t - since,
                timeline(points)
            );
            return t;
        }
        assert!(
            Instant::now() < end,
            "{what}: never {want} workers after t={since:.1}\n{}",
            timeline(points)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn timeline(points: &Mutex<Vec<Point>>) -> String {
    let mut out = String::new();
    let mut last = None;
    for p in points.lock().unwrap().iter() {
        if last != Some((p.live, p.desired)) {
            out.push_str(&format!(
                "t={:>6.1}s workers={} desired={}\n",
                p.t, p.live, p.desired
            ));
            last = Some((p.live, p.desired));
        }
    }
    out
}

/// Metric failures in decisions made `after` (Unix seconds) or later.
fn metric_errors(h: &pb::TargetHistory, after: f64) -> Vec<String> {
    h.decisions
        .iter()
        .filter(|d| {
            d.evaluation_time
                .is_some_and(|t| t.seconds as f64 + f64::from(t.nanos) / 1e9 >= after)
        })
        .flat_map(|d| d.metrics.iter())
        .filter(|m| !m.error.is_empty())
        .map(|m| format!("{}: {}", m.error_reason, m.error))
        .collect()
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn cpu_and_request_rate_targets_scale_as_kubernetes_with_metrics_server() {
    if !prometheus_available() {
        return;
    }
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let (cpu, _cpu_workers) = pool(dir.path(), "cpu");
    let (rps, _rps_workers) = pool(dir.path(), "rps");
    let scrape = |job: &str, work: &Path| {
        format!(
            "  - job_name: {job}\n    file_sd_configs:\n      - files: [\"{}\"]\n        refresh_interval: 1s\n",
            work.join("targets.json").display()
        )
    };
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n{}{}",
        scrape("cpu", &cpu),
        scrape("rps", &rps)
    );
    let (_prometheus, prom_port) = start_prometheus(dir.path(), &config);
    let (_server, addr) = start_server(dir.path());

    let scale = root().join("examples/agent/scale.sh");
    let scale = scale.to_str().unwrap();
    let target = |key: &str, work: &Path, metric: &str, spec: &str| {
        let w = work.to_str().unwrap();
        let job = work.file_name().unwrap().to_str().unwrap();
        format!(
            r#"
[[targets]]
key = "{key}"
sync_period = "5s"
replicas = {{ command = ["{scale}", "{w}", "count"] }}
actuator = {{ command = ["{scale}", "{w}", "set", "{{replicas}}"], timeout = "20s" }}
pods = {{ ready = 'up{{job="{job}"}}', start_time = 'process_start_time_seconds{{job="{job}"}}', requests = {{ cpu = "1000m" }} }}
metrics = {{ {metric} }}
spec = {spec}
"#
        )
    };
    let agent_config = format!(
        "[server]\naddr = \"{addr}\"\n\n[prometheus]\nurl = \"http://127.0.0.1:{prom_port}\"\n{}{}",
        target(
            "e2e/cpu",
            &cpu,
            r#"cpu = 'rate(process_cpu_seconds_total{job="cpu"}[15s])'"#,
            r#"{ min_replicas = 1, max_replicas = 8, metrics = [{ type = "METRIC_SOURCE_TYPE_RESOURCE", name = "cpu", target = { type = "METRIC_TARGET_TYPE_UTILIZATION", average_utilization = 50 } }], behavior = { scale_down = { stabilization_window_seconds = 30 } } }"#,
        ),
        target(
            "e2e/rps",
            &rps,
            r#"requests = 'rate(http_requests_total{job="rps"}[5s])'"#,
            r#"{ min_replicas = 1, max_replicas = 8, metrics = [{ type = "METRIC_SOURCE_TYPE_PODS", name = "requests", target = { type = "METRIC_TARGET_TYPE_AVERAGE_VALUE", average_value = "10" } }], behavior = { scale_down = { stabilization_window_seconds = 10 } } }"#,
        ),
    );
    let agent_toml = dir.path().join("agent.toml");
    std::fs::write(&agent_toml, agent_config).unwrap();

    // t = 0: the scheduler starts two CPU workers already under load (1.7 cores each against
    // a 1-core request at a 50 % target), and one request worker, idle.
    std::fs::write(cpu.join("cpu"), "3400").unwrap();
    std::fs::write(rps.join("rps"), "0").unwrap();
    let t0 = Instant::now();
    let t0_unix = unix_now();
    scale_sh(&cpu, &["set", "2"]);
    scale_sh(&rps, &["set", "1"]);
    let agent = start_agent(&agent_toml);
    let stop = Arc::new(Mutex::new(false));
    let (cpu_points, cpu_rec) = record(addr.clone(), "e2e/cpu", cpu.clone(), t0, stop.clone());
    let (rps_points, rps_rec) = record(addr.clone(), "e2e/rps", rps.clone(), t0, stop.clone());

    // Kubernetes counts a new pod's CPU once a sample's window lies after its readiness:
    // 15 s after it started with metrics-server. ceil(2 × 170 / 50) = 7, capped at 2 + 4.
    let discovery = 6.0;
    let periods = 2.0 * SYNC.as_secs_f64();
    let six = first_at(
        &cpu_points,
        6,
        0.0,
        15.0 + discovery + periods,
        "first scale-up",
    );
    // The four new workers count 15 s after they started: 6 at 113 % → 7.
    let seven = first_at(
        &cpu_points,
        7,
        six,
        15.0 + discovery + periods,
        "the new workers counted",
    );

    // The request rate rises: within two sync periods (and the 5 s rate window), ceil(45/10).
    let rise = t0.elapsed().as_secs_f64();
    std::fs::write(rps.join("rps"), "45").unwrap();
    let rps_up = points_first_change(&rps_points, rise, 1, 2.0 * SYNC.as_secs_f64() + 3.0);
    let five = first_at(&rps_points, 5, rise, 30.0, "request rate scale-up");

    // The CPU load falls: 7 × 86m = 17 % → ceil(7 × 0.17) = 2, after the 30 s window.
    let fall = t0.elapsed().as_secs_f64();
    std::fs::write(cpu.join("cpu"), "600").unwrap();
    let two = first_at(
        &cpu_points,
        2,
        fall,
        30.0 + 15.0 + periods + discovery,
        "scale-down",
    );
    assert!(
        two - fall >= 30.0,
        "scaled down {:.1} s after the fall, inside the 30 s window\n{}",
        two - fall,
        timeline(&cpu_points)
    );
    *stop.lock().unwrap() = true;
    cpu_rec.join().unwrap();
    rps_rec.join().unwrap();

    let cpu_history = rt.block_on(history(&addr, "e2e/cpu")).unwrap();
    let max = cpu_history
        .decisions
        .iter()
        .map(|d| d.desired_replicas)
        .max()
        .unwrap_or(0);
    assert_eq!(max, 7, "Kubernetes would not go past ceil(3400 / 500)");
    // Until the first workers' first window has passed, Kubernetes has no sample to count
    // either (FailedGetResourceMetric); after it, nothing fails, and never for want of the
    // requests of the workers Prometheus has not scraped yet.
    let all = metric_errors(&cpu_history, 0.0);
    assert!(
        !all.iter().any(|e| e.contains("missing request")),
        "{all:?}\n{}",
        agent.log()
    );
    // The periods that held for it said why, at INFO.
    assert!(
        agent
            .log()
            .contains("shadow=false conditions=ScalingActive False FailedGetResourceMetric"),
        "{}",
        agent.log()
    );
    let late = metric_errors(&cpu_history, t0_unix + 15.0 + discovery);
    assert!(
        late.is_empty(),
        "metric failures on the CPU target after its first window: {late:?}\n{}",
        agent.log()
    );
    eprintln!("--- CPU target (3400m on 2 workers at t=0, 600m from t={fall:.1}) ---");
    eprintln!("{}", timeline(&cpu_points));
    eprintln!("first scale-up at t={six:.1}s; 7 at t={seven:.1}s; 2 at t={two:.1}s");
    eprintln!("--- request-rate target (45/s from t={rise:.1}) ---");
    eprintln!("{}", timeline(&rps_points));
    eprintln!(
        "first scale-up {rps_up:.1} s after the rise; 5 at {:.1} s",
        five - rise
    );
}

/// Seconds after `since` when the newest decision first differed from `from`, at most
/// `within`.
fn points_first_change(points: &Mutex<Vec<Point>>, since: f64, from: i32, within: f64) -> f64 {
    let end = Instant::now() + Duration::from_secs_f64(within + 10.0);
    loop {
        let found = points
            .lock()
            .unwrap()
            .iter()
            .find(|p| p.t >= since && p.desired > from)
            .map(|p| p.t - since);
        if let Some(dt) = found {
            assert!(
                dt <= within,
                "the first scale-up {dt:.1} s after the rise, more than {within} s\n{}",
                timeline(points)
            );
            return dt;
        }
        assert!(
            Instant::now() < end,
            "no scale-up after the rise\n{}",
            timeline(points)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}
