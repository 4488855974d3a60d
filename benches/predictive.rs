//! Predictive scale-up measured through the real server: each load trace of
//! `../shared/traces` (or `PREDICTIVE_TRACE_DIR`) decided every minute in a closed loop, where
//! a replica serves `D` (5 minutes) after the scale call that asked for it, with request times
//! trusted.
//!
//! The service, as `traces/README.md` reads a trace: its value is the total load, one replica
//! carries `K = p99.9 / 40` at its target, the load is held constant within a trace step. Each
//! run is one target of the release server, bounds 1..1000, Kubernetes' default behavior, with
//! the metric most users have (`PREDICTIVE_METRIC=cpu`, the default): a CPU Utilization target
//! of 50 % of a 1000m request, every pod listed (the ready ones sharing the load, sampled at
//! the decision over metrics-server's 15 s window; the starting ones not ready, sampled at 0,
//! started at their scale call), the load scaled so that one replica at the target carries
//! `K / h`; or (`PREDICTIVE_METRIC=external`) an External AverageValue metric of the load with
//! a target of `K / h`, which has no notion of starting replicas. At each decision the
//! orchestrator side (this bench) reports the replicas it runs (ready and starting), applies
//! the answer (a scale-up starts replicas that serve `D` later; a scale-down removes starting
//! replicas first, newest first) and integrates, over the next period:
//!
//! * **replica-hours**: replicas running (ready or starting);
//! * **under-provisioned replica-minutes**: `max(0, load / K − ready replicas)`, and the share
//!   of minutes with any.
//!
//! Runs: the reactive HPA's headroom curve (`h` = 1.0 … 2.0) and `spec.predictive` scale-up at
//! a few headrooms (`startup_delay` = D). A strategy is better when it lies below the
//! reactive curve; the comparison interpolates the reactive curve's Pareto frontier
//! (log-linear in shortfall) at the predictive run's replica-hours ("fewer at equal cost") and
//! at its shortfall ("cost at equal shortfall").
//!
//! `cargo bench --bench predictive`; `PREDICTIVE_TRACES` (file names, comma-separated),
//! `PREDICTIVE_METRIC` (`cpu` or `external`),
//! `PREDICTIVE_PERIOD` (s, default 60), `PREDICTIVE_DELAY` (s, default 300),
//! `PREDICTIVE_OUT` (CSV and SVG plots; default `target/predictive`). About 10 minutes on two
//! cores for the three traces (≈ 5.5 million decisions).

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use autoscaled::pb::v1::{self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient};
use tonic::transport::Channel;

#[path = "../tests/common/binary.rs"]
mod binary;

const REACTIVE_H: [f64; 12] = [
    1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.4, 1.5, 1.6, 1.75, 2.0,
];
const PREDICTIVE_H: [f64; 5] = [1.0, 1.1, 1.2, 1.3, 1.5];
const MAX_REPLICAS: i32 = 1000;

/// A trace on the decision grid.
struct Trace {
    name: String,
    times: Vec<i64>,
    load: Vec<f64>,
    k: f64,
}

/// One run's measures.
#[derive(Clone, Copy, Debug, Default)]
struct Measures {
    replica_hours: f64,
    short_replica_minutes: f64,
    short_share: f64,
    raised: u64,
    decisions: u64,
}

#[derive(Clone, Copy)]
struct Run {
    h: f64,
    predictive: bool,
    /// A CPU Utilization target with pods (else an External AverageValue metric).
    cpu: bool,
}

impl Run {
    /// How the run decides, as the tables and plots name it.
    fn kind(&self) -> &'static str {
        if self.predictive {
            "predictive"
        } else {
            "reactive"
        }
    }
}

fn main() -> anyhow::Result<()> {
    let dir = std::env::var("PREDICTIVE_TRACE_DIR").map_or_else(
        |_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/traces"),
        PathBuf::from,
    );
    let files = std::env::var("PREDICTIVE_TRACES").unwrap_or_else(|_| {
        "nyc_taxi.csv,twitter_volume_amzn.csv,rds_cpu_utilization_cc0c53.csv".into()
    });
    let period: i64 = env_or("PREDICTIVE_PERIOD", 60);
    let cpu = match std::env::var("PREDICTIVE_METRIC").as_deref() {
        Err(_) | Ok("cpu") => true,
        Ok("external") => false,
        Ok(other) => anyhow::bail!("PREDICTIVE_METRIC={other}: cpu or external"),
    };
    let delay: i64 = env_or("PREDICTIVE_DELAY", 300);
    let out = std::env::var("PREDICTIVE_OUT").map_or_else(
        |_| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/predictive"),
        PathBuf::from,
    );
    std::fs::create_dir_all(&out)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let data = tempfile::tempdir()?;
    let server = binary::start(&data.path().join("data"));
    println!(
        "period {period} s, start-up delay D = {delay} s, metric {}; server {}",
        if cpu {
            "cpu Utilization 50 % (pods listed)"
        } else {
            "External AverageValue"
        },
        server.addr
    );
    let mut summary = String::new();
    for file in files.split(',').map(str::trim).filter(|f| !f.is_empty()) {
        let trace = read_trace(&dir.join(file), period)?;
        let started = Instant::now();
        let results = runtime.block_on(run_trace(server.addr, &trace, period, delay, cpu))?;
        let report = report(&trace, &results);
        println!(
            "\n=== {} (K = {:.4}, {} decisions per run, {} runs, {:.0} s)\n{report}",
            trace.name,
            trace.k,
            trace.times.len(),
            results.len(),
            started.elapsed().as_secs_f64()
        );
        summary.push_str(&goal_line(&trace, &results));
        std::fs::write(out.join(format!("{}.csv", trace.name)), csv(&results))?;
        std::fs::write(
            out.join(format!("{}.svg", trace.name)),
            svg(&trace, &results, delay),
        )?;
    }
    println!("\n{summary}");
    println!("CSV and plots in {}", out.display());
    Ok(())
}

fn env_or(name: &str, default: i64) -> i64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `timestamp,value` rows (`YYYY-MM-DD HH:MM:SS`, UTC) held constant to the next row, sampled
/// every `period` seconds; `K` = the 99.9th percentile (linear interpolation) ÷ 40.
fn read_trace(path: &Path, period: i64) -> anyhow::Result<Trace> {
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut ts = Vec::new();
    let mut vs = Vec::new();
    for line in text.lines().skip(1).filter(|l| !l.is_empty()) {
        let (stamp, value) = line
            .split_once(',')
            .ok_or_else(|| anyhow::anyhow!("bad row {line:?}"))?;
        let n = |s: &str| s.parse::<i64>();
        let (date, time) = stamp
            .split_once(' ')
            .ok_or_else(|| anyhow::anyhow!("bad time {stamp:?}"))?;
        let d: Vec<i64> = date.split('-').map(n).collect::<Result<_, _>>()?;
        let t: Vec<i64> = time.split(':').map(n).collect::<Result<_, _>>()?;
        anyhow::ensure!(d.len() == 3 && t.len() == 3, "bad time {stamp:?}");
        ts.push(days_from_civil(d[0], d[1], d[2]) * 86_400 + t[0] * 3600 + t[1] * 60 + t[2]);
        vs.push(value.parse::<f64>()?);
    }
    anyhow::ensure!(ts.len() > 1, "{}: too few rows", path.display());
    let step = ts[1] - ts[0];
    let end = ts[ts.len() - 1] + step;
    let mut times = Vec::new();
    let mut load = Vec::new();
    let mut i = 0;
    let mut t = ts[0];
    while t < end {
        while i + 1 < ts.len() && ts[i + 1] <= t {
            i += 1;
        }
        times.push(t);
        load.push(vs[i]);
        t += period;
    }
    let mut sorted = vs.clone();
    sorted.sort_by(f64::total_cmp);
    let pos = 0.999 * (sorted.len() - 1) as f64;
    let (lo, frac) = (pos.floor() as usize, pos.fract());
    let p999 = sorted[lo] + frac * (sorted[(lo + 1).min(sorted.len() - 1)] - sorted[lo]);
    let name = path
        .file_stem()
        .map_or_else(|| "trace".into(), |s| s.to_string_lossy().into_owned());
    Ok(Trace {
        name,
        times,
        load,
        k: p999 / 40.0,
    })
}

/// Every run of one trace, concurrently, each a target of its own.
async fn run_trace(
    addr: std::net::SocketAddr,
    trace: &Trace,
    period: i64,
    delay: i64,
    cpu: bool,
) -> anyhow::Result<Vec<(Run, Measures)>> {
    let runs: Vec<Run> = REACTIVE_H
        .iter()
        .map(|&h| Run {
            h,
            predictive: false,
            cpu,
        })
        .chain(PREDICTIVE_H.iter().map(|&h| Run {
            h,
            predictive: true,
            cpu,
        }))
        .collect();
    let shared = Arc::new((trace.times.clone(), trace.load.clone(), trace.k));
    let mut tasks = Vec::new();
    for (i, run) in runs.iter().copied().enumerate() {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
            .connect()
            .await?;
        let key = format!("bench/{}/{}-{:.3}", trace.name, run.kind(), run.h);
        let shared = Arc::clone(&shared);
        tasks.push((
            i,
            tokio::spawn(async move {
                closed_loop(
                    channel, key, &shared.0, &shared.1, shared.2, run, period, delay,
                )
                .await
            }),
        ));
    }
    let mut results = Vec::new();
    for (i, task) in tasks {
        results.push((runs[i], task.await??));
    }
    Ok(results)
}

/// One run: the server decides, this side starts and removes replicas and integrates.
#[allow(clippy::too_many_arguments)]
async fn closed_loop(
    channel: Channel,
    key: String,
    times: &[i64],
    load: &[f64],
    k: f64,
    run: Run,
    period: i64,
    delay: i64,
) -> anyhow::Result<Measures> {
    let mut client = HorizontalAutoscalerClient::new(channel);
    let target_milli = (k / run.h * 1000.0).round().max(1.0) as i64;
    let target = target_milli as f64 / 1000.0;
    let first = ((load[0] / target).ceil() as i32).clamp(1, MAX_REPLICAS);
    let (mut ready, mut current) = (first, first);
    // (ready at, count), oldest first.
    let mut pending: std::collections::VecDeque<(i64, i32)> = Default::default();
    let mut m = Measures::default();
    let (mut run_sum, mut short_sum, mut short_n) = (0.0, 0.0, 0u64);
    let spec = pb::HorizontalSpec {
        min_replicas: Some(1),
        max_replicas: MAX_REPLICAS,
        metrics: vec![if run.cpu {
            pb::MetricSpec {
                r#type: pb::MetricSourceType::Resource as i32,
                name: "cpu".into(),
                target: Some(pb::MetricTarget {
                    r#type: pb::MetricTargetType::Utilization as i32,
                    average_utilization: Some(CPU_TARGET_PERCENT),
                    ..Default::default()
                }),
                ..Default::default()
            }
        } else {
            autoscaled_fixtures::external_average_value("load", target_milli)
        }],
        predictive: run.predictive.then_some(pb::Predictive {
            mode: pb::PredictiveMode::ScaleUp as i32,
            margin_percent: None,
            startup_delay: Some(prost_types::Duration {
                seconds: delay,
                nanos: 0,
            }),
        }),
        ..Default::default()
    };
    for (&t, &l) in times.iter().zip(load) {
        while pending.front().is_some_and(|&(at, _)| at <= t) {
            ready += pending.pop_front().map_or(0, |(_, n)| n);
        }
        let mut request = pb::RecommendRequest {
            target_key: key.clone(),
            current_replicas: current,
            spec: Some(spec.clone()),
            evaluation_time: Some(ts(t)),
            ..Default::default()
        };
        if run.cpu {
            // The load in millicores, one replica at the target carrying K / h.
            let usage = l / target * CPU_AT_TARGET_MILLI;
            request.pods = pods(t, ready, &pending, usage, delay);
        } else {
            request.external_metrics = [(
                "load".to_owned(),
                pb::ExternalMetricValues {
                    values_milli: vec![(l * 1000.0).round() as i64],
                },
            )]
            .into();
        }
        let response = call(&mut client, request).await?;
        if response.predictive.as_ref().is_some_and(|p| p.raised) {
            m.raised += 1;
        }
        let desired = response.desired_replicas;
        if desired > current {
            pending.push_back((t + delay, desired - current));
        } else if desired < current {
            let mut remove = current - desired;
            while remove > 0 {
                let Some(last) = pending.back_mut() else {
                    break;
                };
                let take = remove.min(last.1);
                last.1 -= take;
                remove -= take;
                if last.1 == 0 {
                    pending.pop_back();
                }
            }
            ready -= remove;
        }
        current = desired;
        run_sum += f64::from(current);
        let short = l / k - f64::from(ready);
        if short > 1e-9 {
            short_sum += short;
            short_n += 1;
        }
        m.decisions += 1;
    }
    m.replica_hours = run_sum * period as f64 / 3600.0;
    m.short_replica_minutes = short_sum * period as f64 / 60.0;
    m.short_share = short_n as f64 / times.len() as f64;
    Ok(m)
}

const CPU_REQUEST_MILLI: i64 = 1000;
const CPU_TARGET_PERCENT: i32 = 50;
/// What one replica uses at the target.
const CPU_AT_TARGET_MILLI: f64 = 500.0;

fn ts(seconds: i64) -> prost_types::Timestamp {
    prost_types::Timestamp { seconds, nanos: 0 }
}

/// The pods at `t`: `ready` serving ones sharing `usage` (millicores), sampled at `t` over
/// metrics-server's 15 s window, started long enough ago to be past the CPU initialization
/// period; and the starting ones of `pending` (ready at `.0`), started at their scale call
/// (`.0 − delay`), not ready, sampled at 0.
fn pods(
    t: i64,
    ready: i32,
    pending: &std::collections::VecDeque<(i64, i32)>,
    usage: f64,
    delay: i64,
) -> Vec<pb::PodSample> {
    let serving = usize::try_from(ready.max(0)).unwrap_or(0);
    let total = usage.round() as i64;
    let each = total / serving.max(1) as i64;
    let extra = total - each * serving as i64;
    let pod = |name: String, ready: bool, started: i64, value: i64| pb::PodSample {
        name,
        phase: pb::PodPhase::Running as i32,
        ready: Some(ready),
        ready_transition_time: Some(ts(if ready { started + delay } else { started })),
        start_time: Some(ts(started)),
        requests_milli: [("cpu".to_owned(), CPU_REQUEST_MILLI)].into(),
        metrics: [(
            "cpu".to_owned(),
            pb::MetricSample {
                value_milli: Some(value),
                timestamp: Some(ts(t)),
                window: Some(prost_types::Duration {
                    seconds: 15,
                    nanos: 0,
                }),
            },
        )]
        .into(),
        ..Default::default()
    };
    let mut out: Vec<pb::PodSample> = (0..serving)
        .map(|i| {
            let value = each + i64::from(i < usize::try_from(extra).unwrap_or(0));
            pod(format!("r{i}"), true, t - 3600, value)
        })
        .collect();
    let mut n = 0;
    for &(ready_at, count) in pending {
        for _ in 0..count {
            out.push(pod(format!("s{n}"), false, ready_at - delay, 0));
            n += 1;
        }
    }
    out
}

/// A Recommend, retried a few times on an overload answer (the server sheds load by design).
async fn call(
    client: &mut HorizontalAutoscalerClient<Channel>,
    request: pb::RecommendRequest,
) -> anyhow::Result<pb::RecommendResponse> {
    let mut wait = Duration::from_millis(5);
    for _ in 0..20 {
        match client.recommend(request.clone()).await {
            Ok(r) => return Ok(r.into_inner()),
            Err(s)
                if s.code() == tonic::Code::ResourceExhausted
                    || s.code() == tonic::Code::Unavailable =>
            {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_millis(500));
            }
            Err(s) => anyhow::bail!("{}: {s:?}", request.target_key),
        }
    }
    anyhow::bail!("{}: overloaded 20 times in a row", request.target_key)
}

/// The reactive curve's Pareto frontier: sorted by replica-hours, each point with less
/// shortfall than every cheaper one.
fn frontier(results: &[(Run, Measures)]) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = results
        .iter()
        .filter(|(r, _)| !r.predictive)
        .map(|(_, m)| (m.replica_hours, m.short_replica_minutes))
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (x, y) in points {
        if out.last().is_none_or(|&(_, last)| y < last) {
            out.push((x, y));
        }
    }
    out
}

fn lerp_log(y0: f64, y1: f64, w: f64) -> f64 {
    if y0 > 0.0 && y1 > 0.0 {
        (y0.ln() + w * (y1.ln() - y0.ln())).exp()
    } else {
        y0 + w * (y1 - y0)
    }
}

/// The frontier's shortfall at replica-hours `rh` (None outside its range).
fn short_at(frontier: &[(f64, f64)], rh: f64) -> Option<f64> {
    let (first, last) = (frontier.first()?, frontier.last()?);
    if rh < first.0 || rh > last.0 {
        return None;
    }
    frontier
        .windows(2)
        .find(|w| w[0].0 <= rh && rh <= w[1].0)
        .map_or(Some(last.1), |w| {
            Some(lerp_log(w[0].1, w[1].1, (rh - w[0].0) / (w[1].0 - w[0].0)))
        })
}

/// The frontier's replica-hours at shortfall `sf` (None outside its range).
fn cost_at(frontier: &[(f64, f64)], sf: f64) -> Option<f64> {
    let (first, last) = (frontier.first()?, frontier.last()?);
    if sf > first.1 || sf < last.1 {
        return None;
    }
    frontier
        .windows(2)
        .find(|w| w[1].1 <= sf && sf <= w[0].1)
        .map_or(Some(last.0), |w| {
            let ((x0, y0), (x1, y1)) = (w[0], w[1]);
            let weight = if y0 > 0.0 && y1 > 0.0 {
                (sf.ln() - y0.ln()) / (y1.ln() - y0.ln())
            } else {
                (sf - y0) / (y1 - y0)
            };
            Some(x0 + weight * (x1 - x0))
        })
}

fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "—".into(), |v| format!("{:+.1} %", v * 100.0))
}

fn report(trace: &Trace, results: &[(Run, Measures)]) -> String {
    let f = frontier(results);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| run | h | replica-hours | under-provisioned replica-minutes | minutes short | raised | shortfall vs reactive at equal cost | cost vs reactive at equal shortfall |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for (run, m) in results {
        let (fewer, cost) = if run.predictive {
            (
                pct(short_at(&f, m.replica_hours).map(|r| m.short_replica_minutes / r - 1.0)),
                pct(cost_at(&f, m.short_replica_minutes).map(|c| m.replica_hours / c - 1.0)),
            )
        } else {
            (String::new(), String::new())
        };
        let _ = writeln!(
            s,
            "| {} | {:.2} | {:.1} | {:.1} | {:.2} % | {} | {fewer} | {cost} |",
            run.kind(),
            run.h,
            m.replica_hours,
            m.short_replica_minutes,
            m.short_share * 100.0,
            m.raised
        );
    }
    let _ = trace;
    s
}

/// The goals of the issue, per trace: the best shortfall reduction at equal replica-hours and
/// the worst extra cost at equal shortfall over the predictive runs.
fn goal_line(trace: &Trace, results: &[(Run, Measures)]) -> String {
    let f = frontier(results);
    let predictive = results.iter().filter(|(r, _)| r.predictive);
    let fewer: Vec<(f64, f64)> = predictive
        .clone()
        .filter_map(|(r, m)| {
            short_at(&f, m.replica_hours).map(|x| (r.h, 1.0 - m.short_replica_minutes / x))
        })
        .collect();
    let cost: Vec<(f64, f64)> = predictive
        .filter_map(|(r, m)| {
            cost_at(&f, m.short_replica_minutes).map(|c| (r.h, m.replica_hours / c - 1.0))
        })
        .collect();
    let best = fewer.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1));
    let worst = cost.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1));
    format!(
        "{}: fewer under-provisioned replica-minutes at equal replica-hours: best {} (h = {}); replica-hours at equal shortfall: worst {} (h = {})\n",
        trace.name,
        best.map_or("—".into(), |b| format!("{:.1} %", b.1 * 100.0)),
        best.map_or("—".into(), |b| format!("{:.2}", b.0)),
        worst.map_or("—".into(), |w| format!("{:+.1} %", w.1 * 100.0)),
        worst.map_or("—".into(), |w| format!("{:.2}", w.0)),
    )
}

fn csv(results: &[(Run, Measures)]) -> String {
    let mut s = String::from(
        "run,h,replica_hours,under_provisioned_replica_minutes,share_minutes_short,raised,decisions\n",
    );
    for (run, m) in results {
        let _ = writeln!(
            s,
            "{},{},{:.3},{:.3},{:.5},{},{}",
            run.kind(),
            run.h,
            m.replica_hours,
            m.short_replica_minutes,
            m.short_share,
            m.raised,
            m.decisions
        );
    }
    s
}

/// Cost (replica-hours, x) against shortfall (under-provisioned replica-minutes, y, log
/// scale): the reactive curve as a line, the predictive runs as points.
fn svg(trace: &Trace, results: &[(Run, Measures)], delay: i64) -> String {
    let (w, h, pad) = (640.0, 420.0, 60.0);
    let xs: Vec<f64> = results.iter().map(|(_, m)| m.replica_hours).collect();
    let ys: Vec<f64> = results
        .iter()
        .map(|(_, m)| m.short_replica_minutes.max(1.0).log10())
        .collect();
    let (x0, x1) = (
        xs.iter().copied().fold(f64::INFINITY, f64::min),
        xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    );
    let (y0, y1) = (
        ys.iter().copied().fold(f64::INFINITY, f64::min).floor(),
        ys.iter().copied().fold(f64::NEG_INFINITY, f64::max).ceil(),
    );
    let px = |x: f64| pad + (x - x0) / (x1 - x0).max(1e-9) * (w - 2.0 * pad);
    let py = |y: f64| h - pad - (y - y0) / (y1 - y0).max(1e-9) * (h - 2.0 * pad);
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="20" text-anchor="middle" font-size="14">{} (D = {delay} s): cost against shortfall</text>
<line x1="{pad}" y1="{}" x2="{}" y2="{}" stroke="black"/>
<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{}" stroke="black"/>
<text x="{}" y="{}" text-anchor="middle">replica-hours</text>
<text x="15" y="{}" transform="rotate(-90 15 {})" text-anchor="middle">under-provisioned replica-minutes (log)</text>
"#,
        w / 2.0,
        trace.name,
        h - pad,
        w - pad,
        h - pad,
        h - pad,
        w / 2.0,
        h - 15.0,
        h / 2.0,
        h / 2.0
    );
    let mut decade = y0;
    while decade <= y1 {
        let _ = writeln!(
            s,
            r##"<line x1="{pad}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#ddd"/><text x="{2}" y="{3:.1}" text-anchor="end">{4}</text>"##,
            py(decade),
            w - pad,
            pad - 4.0,
            py(decade) + 4.0,
            10f64.powf(decade)
        );
        decade += 1.0;
    }
    for (frac, anchor) in [(0.0, "start"), (0.5, "middle"), (1.0, "end")] {
        let x = x0 + frac * (x1 - x0);
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="{anchor}">{x:.0}</text>"#,
            px(x),
            h - pad + 16.0
        );
    }
    let line: Vec<String> = results
        .iter()
        .zip(&ys)
        .filter(|((r, _), _)| !r.predictive)
        .map(|((_, m), y)| format!("{:.1},{:.1}", px(m.replica_hours), py(*y)))
        .collect();
    let _ = writeln!(
        s,
        r##"<polyline points="{}" fill="none" stroke="#1f77b4" stroke-width="2"/>"##,
        line.join(" ")
    );
    for ((run, m), y) in results.iter().zip(&ys) {
        let (color, r) = if run.predictive {
            ("#d62728", 5)
        } else {
            ("#1f77b4", 3)
        };
        let _ = writeln!(
            s,
            r#"<circle cx="{:.1}" cy="{:.1}" r="{r}" fill="{color}"><title>{} h={}</title></circle>"#,
            px(m.replica_hours),
            py(*y),
            run.kind(),
            run.h
        );
    }
    let _ = writeln!(
        s,
        r##"<circle cx="{0}" cy="40" r="3" fill="#1f77b4"/><text x="{1}" y="44">reactive HPA, headroom h = 1 … 2</text><circle cx="{0}" cy="58" r="5" fill="#d62728"/><text x="{1}" y="62">predictive scale-up</text>"##,
        w - 260.0,
        w - 250.0
    );
    s.push_str("</svg>\n");
    s
}
