//! `autoscalectl report`: one self-contained HTML page (inline SVG and CSS, no script, no
//! network) about a target: the replica and metric timeline of its logged decisions, its
//! conditions over time, and the explanation of every change; with `--spec`, the what-if
//! replay under that spec next to it.

use std::{fmt::Write as _, path::PathBuf};

use super::plot::{self, Timeline};
use crate::client::ClientError;
use autoscaled_wire::pb::v1 as api;

/// `autoscalectl report`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReportArgs {
    /// Server address (`host:port` or `http://host:port`).
    #[arg(long, value_name = "ADDR", env = "AUTOSCALED_ADDR", default_value = autoscaled_wire::DEFAULT_LISTEN)]
    pub(crate) addr: String,
    /// The target to report on.
    #[arg(long, value_name = "KEY")]
    pub(crate) target: String,
    /// The HTML file to write.
    #[arg(long, value_name = "FILE.html")]
    pub(crate) out: PathBuf,
    /// Also replay the stored decisions under this HorizontalSpec (proto3 JSON).
    #[arg(long, value_name = "SPEC.json")]
    pub(crate) spec: Option<PathBuf>,
    /// TLS and token, as for `recommend`.
    #[command(flatten)]
    pub(crate) security: crate::client::security::ClientSecurity,
}

/// `autoscalectl report`: fetches, renders, writes; returns a one-line confirmation.
pub(crate) async fn report_command(args: ReportArgs) -> Result<String, ClientError> {
    let spec = args.spec.as_deref().map(super::read_spec).transpose()?;
    let mut client = args.security.horizontal(&args.addr).await?;
    // Every page, oldest run first.
    let mut history = api::TargetHistory::default();
    let mut page_token = String::new();
    loop {
        let page = client
            .get_history(api::GetHistoryRequest {
                target_key: args.target.clone(),
                page_token: page_token.clone(),
                ..Default::default()
            })
            .await
            .map_err(|s| ClientError::Rpc {
                rpc: "GetHistory",
                code: s.code(),
                message: s.message().to_owned(),
            })?
            .into_inner();
        let next = page.next_page_token.clone();
        if page_token.is_empty() {
            history = page;
        } else {
            history.decisions.extend(page.decisions);
        }
        if next.is_empty() || next == page_token {
            break;
        }
        page_token = next;
    }
    history.next_page_token.clear();
    let simulation = match spec {
        None => None,
        Some(spec) => Some(
            client
                .simulate(api::SimulateRequest {
                    target_key: args.target.clone(),
                    spec: Some(spec),
                    ..Default::default()
                })
                .await
                .map_err(|s| ClientError::Rpc {
                    rpc: "Simulate",
                    code: s.code(),
                    message: s.message().to_owned(),
                })?
                .into_inner(),
        ),
    };
    let html = render(&history, simulation.as_ref());
    std::fs::write(&args.out, html).map_err(|source| ClientError::Read {
        path: args.out.display().to_string(),
        source,
    })?;
    Ok(format!(
        "wrote {} ({} decision runs)",
        args.out.display(),
        history.decisions.len()
    ))
}

/// HTML-escapes text (the server's, which its console uses too).
pub(crate) use autoscaled_wire::html::esc;

fn time(t: Option<&prost_types::Timestamp>) -> String {
    t.map(ToString::to_string).unwrap_or_default()
}

/// A metric status's reading and its unit.
fn reading(m: &api::MetricStatus) -> Option<(f64, &'static str)> {
    current_of(
        m.current_average_utilization,
        m.current_average_value_milli,
        m.current_value_milli,
    )
}

/// The first of a metric's current values that is set, in a plotted unit, and that unit.
fn current_of(
    utilization: Option<i32>,
    average_milli: Option<i64>,
    value_milli: Option<i64>,
) -> Option<(f64, &'static str)> {
    #[allow(clippy::cast_precision_loss)]
    if let Some(u) = utilization {
        Some((f64::from(u), "% of request"))
    } else if let Some(v) = average_milli {
        Some((v as f64 / 1000.0, "per pod"))
    } else {
        value_milli.map(|v| (v as f64 / 1000.0, "total"))
    }
}

fn metric_name(m: &api::MetricStatus) -> String {
    if m.container.is_empty() {
        m.name.clone()
    } else {
        format!("{}/{}", m.name, m.container)
    }
}

/// The timeline of a history's logged decisions.
pub(crate) fn history_timeline(h: &api::TargetHistory) -> Timeline {
    let mut labels: Vec<(String, &'static str)> = Vec::new();
    for d in &h.decisions {
        for m in &d.metrics {
            if let Some((_, unit)) = reading(m)
                && !labels.iter().any(|(n, _)| *n == metric_name(m))
            {
                labels.push((metric_name(m), unit));
            }
        }
    }
    labels.truncate(4);
    // A run is drawn at each of its decisions' readings (the same replicas throughout: the
    // same outcome), each metric at the value that decision observed. A run recorded without
    // readings stands for its first and its last decision, a metric drawn at the last alone
    // (its only reading), not flat across the run.
    let points: Vec<(i64, &api::DecisionRecord, Drawn)> = h
        .decisions
        .iter()
        .flat_map(|d| {
            let last = d.evaluation_time.map_or(0, |t| t.seconds);
            let first = d.first_evaluation_time.map_or(last, |t| t.seconds);
            let mut v = Vec::with_capacity(d.readings.len().max(2));
            let read_from = d
                .readings
                .first()
                .and_then(|r| r.evaluation_time)
                .map_or(last, |t| t.seconds);
            if d.run_count > d.readings.len() as u64 && first < read_from {
                v.push((first, d, Drawn::Replicas));
            }
            if d.readings.is_empty() {
                v.push((last, d, Drawn::Last));
            }
            v.extend(d.readings.iter().enumerate().map(|(k, r)| {
                (
                    r.evaluation_time.map_or(last, |t| t.seconds),
                    d,
                    Drawn::Reading(k),
                )
            }));
            v
        })
        .collect();
    Timeline {
        title: format!("{}: replicas and metrics", h.target_key),
        times: points.iter().map(|(t, _, _)| *t).collect(),
        current: points.iter().map(|(_, d, _)| d.current_replicas).collect(),
        stored: points.iter().map(|(_, d, _)| d.desired_replicas).collect(),
        simulated: None,
        metrics: labels
            .iter()
            .map(|(name, unit)| {
                (
                    format!("{name} ({unit})"),
                    points
                        .iter()
                        .map(|(_, d, drawn)| {
                            let j = d.metrics.iter().position(|m| metric_name(m) == *name)?;
                            match drawn {
                                Drawn::Replicas => None,
                                Drawn::Last => reading(&d.metrics[j]).map(|(v, _)| v),
                                Drawn::Reading(k) => {
                                    d.readings[*k].metrics.get(j).and_then(reading_value)
                                }
                            }
                        })
                        .collect(),
                )
            })
            .collect(),
        percent_of_target: false,
    }
}

/// What a point of a history timeline draws besides the replicas.
#[derive(Clone, Copy)]
enum Drawn {
    /// Nothing else (a run's first decision, recorded without its reading).
    Replicas,
    /// The run's last decision's metrics (a run recorded without readings).
    Last,
    /// The run's reading `k`.
    Reading(usize),
}

/// A decision's reading of one metric, in the unit of [`reading`].
fn reading_value(r: &api::MetricReading) -> Option<f64> {
    current_of(
        r.current_average_utilization,
        r.current_average_value_milli,
        r.current_value_milli,
    )
    .map(|(v, _)| v)
}

const CSS: &str = r#"
body{font-family:-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;margin:0;background:#f5f6f8;color:#1d2330}
header{background:#1f3b57;color:#fff;padding:18px 32px}
header h1{margin:0;font-size:22px;font-weight:600}
header p{margin:4px 0 0;opacity:.8;font-size:13px}
main{padding:20px 32px;max-width:1120px}
section{background:#fff;border-radius:8px;box-shadow:0 1px 3px rgba(0,0,0,.08);padding:16px 20px;margin-bottom:18px}
h2{font-size:16px;margin:0 0 12px;color:#1f3b57}
.cards{display:flex;gap:12px;flex-wrap:wrap}
.card{background:#eef3f8;border-radius:6px;padding:10px 14px;min-width:120px}
.card b{display:block;font-size:20px}
.card span{font-size:12px;color:#56627a}
svg{max-width:100%;height:auto}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid #e4e7ec;vertical-align:top}
th{background:#f0f2f5;font-weight:600}
.T{background:#e3f4e6;color:#17612a}.W{background:#fdf1d8;color:#8a5a00}.F{background:#fbe5e4;color:#9b1c1c}
.up{color:#17612a;font-weight:600}.down{color:#9b1c1c;font-weight:600}
.muted{color:#8892a6;font-size:13px}
td.t{white-space:nowrap;font-variant-numeric:tabular-nums}
"#;

/// The page.
pub(crate) fn render(h: &api::TargetHistory, simulation: Option<&api::SimulateResponse>) -> String {
    let mut out = String::new();
    let first = h.decisions.first().and_then(|d| {
        d.first_evaluation_time
            .as_ref()
            .or(d.evaluation_time.as_ref())
    });
    let decided: u64 = h.decisions.iter().map(|d| d.run_count.max(1)).sum();
    let last = h.decisions.last().and_then(|d| d.evaluation_time.as_ref());
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>autoscalectl report: {key}</title><style>{CSS}</style></head><body>\
<header><h1>Autoscaling report: {key}</h1><p>{decided} logged decisions in {n} runs, {from} to {to}</p></header><main>",
        key = esc(&h.target_key),
        n = h.decisions.len(),
        from = esc(&time(first)),
        to = esc(&time(last)),
    );

    // Summary cards.
    let changes: Vec<&api::DecisionRecord> = h
        .decisions
        .iter()
        .filter(|d| d.desired_replicas != d.current_replicas)
        .collect();
    let ups = changes
        .iter()
        .filter(|d| d.desired_replicas > d.current_replicas)
        .count();
    let min = h
        .decisions
        .iter()
        .map(|d| d.desired_replicas)
        .min()
        .unwrap_or(0);
    let max = h
        .decisions
        .iter()
        .map(|d| d.desired_replicas)
        .max()
        .unwrap_or(0);
    let _ = write!(
        out,
        "<section><h2>Summary</h2><div class=\"cards\">\
<div class=\"card\"><b>{decided}</b><span>decisions</span></div>\
<div class=\"card\"><b>{}</b><span>scale-ups</span></div>\
<div class=\"card\"><b>{}</b><span>scale-downs</span></div>\
<div class=\"card\"><b>{min}&ndash;{max}</b><span>desired replicas</span></div>\
<div class=\"card\"><b>{}</b><span>desired now</span></div></div></section>",
        ups,
        changes.len() - ups,
        h.decisions.last().map_or(0, |d| d.desired_replicas),
    );

    // Timeline.
    let _ = write!(out, "<section><h2>Replicas and metrics over time</h2>");
    if h.decisions.is_empty() {
        let _ = write!(out, "<p class=\"muted\">No logged decisions.</p>");
    } else {
        match plot::svg(&history_timeline(h), 1060, 480) {
            Ok(svg) => out.push_str(strip_xml_declaration(&svg)),
            Err(e) => {
                let _ = write!(out, "<p>cannot draw: {}</p>", esc(&e));
            }
        }
        let _ = write!(
            out,
            "<p class=\"muted\">Step lines: the count after each decision, held until the next. Dots: scale events. Metrics on the right axis in their own unit.</p>"
        );
    }
    out.push_str("</section>");

    if let Some(sim) = simulation {
        simulation_section(&mut out, h, sim);
    }
    conditions_section(&mut out, h);
    changes_section(&mut out, &changes);
    out.push_str("</main></body></html>\n");
    out
}

fn strip_xml_declaration(svg: &str) -> &str {
    match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => svg,
    }
}

fn simulation_section(out: &mut String, h: &api::TargetHistory, sim: &api::SimulateResponse) {
    let _ = write!(
        out,
        "<section><h2>What if: the same history under the given spec</h2>"
    );
    let timeline =
        Timeline::from_simulation(&format!("{}: stored vs simulated", h.target_key), sim);
    match plot::svg(&timeline, 1060, 480) {
        Ok(svg) => out.push_str(strip_xml_declaration(&svg)),
        Err(e) => {
            let _ = write!(out, "<p>cannot draw: {}</p>", esc(&e));
        }
    }
    let s = sim.summary.unwrap_or_default();
    let a = s.stored.unwrap_or_default();
    let b = s.simulated.unwrap_or_default();
    let _ = write!(
        out,
        "<table><tr><th></th><th>stored</th><th>simulated</th></tr>\
<tr><td>replica-hours</td><td>{:.2}</td><td>{:.2}</td></tr>\
<tr><td>scale events (up/down)</td><td>{} ({}/{})</td><td>{} ({}/{})</td></tr>\
<tr><td>time above target</td><td>{:.0} s</td><td>{:.0} s</td></tr>\
<tr><td>largest step</td><td>{}</td><td>{}</td></tr></table><p class=\"muted\">{}</p></section>",
        a.replica_hours,
        b.replica_hours,
        a.scale_events,
        a.scale_ups,
        a.scale_downs,
        b.scale_events,
        b.scale_ups,
        b.scale_downs,
        a.seconds_above_target,
        b.seconds_above_target,
        a.largest_step,
        b.largest_step,
        esc(&sim.fidelity),
    );
}

const CONDITION_TYPES: [&str; 3] = ["AbleToScale", "ScalingActive", "ScalingLimited"];

fn conditions_section(out: &mut String, h: &api::TargetHistory) {
    let _ = write!(
        out,
        "<section><h2>Conditions over time</h2><p class=\"muted\">One row each time a condition changed status or reason.</p><table><tr><th>time</th>"
    );
    for t in CONDITION_TYPES {
        let _ = write!(out, "<th>{t}</th>");
    }
    out.push_str("</tr>");
    let mut previous: Option<Vec<(String, String)>> = None;
    for d in &h.decisions {
        let state: Vec<(String, String)> = CONDITION_TYPES
            .iter()
            .map(|t| {
                d.conditions
                    .iter()
                    .find(|c| c.r#type == *t)
                    .map(|c| (c.status.clone(), c.reason.clone()))
                    .unwrap_or_default()
            })
            .collect();
        if previous.as_ref() == Some(&state) {
            continue;
        }
        // The run's first decision is when this state began.
        let began = d
            .first_evaluation_time
            .as_ref()
            .or(d.evaluation_time.as_ref());
        let _ = write!(out, "<tr><td class=\"t\">{}</td>", esc(&time(began)));
        for t in CONDITION_TYPES {
            match d.conditions.iter().find(|c| c.r#type == t) {
                Some(c) => {
                    // Green is healthy: ScalingLimited True is a warning, False is fine.
                    let class = match (t, c.status == "True") {
                        ("ScalingLimited", true) => "W",
                        ("ScalingLimited", false) | (_, true) => "T",
                        (_, false) => "F",
                    };
                    let _ = write!(
                        out,
                        "<td class=\"{class}\" title=\"{}\">{} {}</td>",
                        esc(&c.message),
                        esc(&c.status),
                        esc(&c.reason)
                    );
                }
                None => out.push_str("<td class=\"muted\">&ndash;</td>"),
            }
        }
        out.push_str("</tr>");
        previous = Some(state);
    }
    out.push_str("</table></section>");
}

fn changes_section(out: &mut String, changes: &[&api::DecisionRecord]) {
    let _ = write!(
        out,
        "<section><h2>Why each change</h2><table><tr><th>time</th><th>change</th><th>reason</th><th>how it was shaped</th><th>metrics</th></tr>"
    );
    if changes.is_empty() {
        out.push_str("<tr><td colspan=\"5\" class=\"muted\">No replica change in the logged decisions.</td></tr>");
    }
    for d in changes {
        let up = d.desired_replicas > d.current_replicas;
        let e = d.explanation.clone().unwrap_or_default();
        let mut shaped = vec![format!("path {}", e.path)];
        if let Some(p) = e.prenormalized_replicas {
            shaped.push(format!("metrics asked {p}"));
        }
        if let Some(s) = e.stabilized_replicas
            && Some(s) != e.prenormalized_replicas
        {
            shaped.push(format!("stabilized to {s}"));
        }
        if !e.limited_by.is_empty() {
            let limit = if up {
                e.scale_up_limit
            } else {
                e.scale_down_limit
            };
            shaped.push(match limit {
                Some(l) => format!("limited by {} ({l})", e.limited_by),
                None => format!("limited by {}", e.limited_by),
            });
        }
        let metrics: Vec<String> = d
            .metrics
            .iter()
            .map(|m| {
                let value = reading(m)
                    .map(|(v, unit)| format!("{v} {unit}"))
                    .unwrap_or_else(|| m.error_reason.clone());
                match m.proposed_replicas {
                    Some(p) => format!("{}: {value} &rarr; {p}", esc(&metric_name(m))),
                    None => format!("{}: {}", esc(&metric_name(m)), esc(&value)),
                }
            })
            .collect();
        let _ = write!(
            out,
            "<tr><td class=\"t\">{}</td><td class=\"{} t\">{} &rarr; {}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&time(d.evaluation_time.as_ref())),
            if up { "up" } else { "down" },
            d.current_replicas,
            d.desired_replicas,
            esc(&e.rescale_reason),
            esc(&shaped.join(", ")),
            metrics.join("<br>"),
        );
    }
    out.push_str("</table></section>");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Option<prost_types::Timestamp> {
        Some(prost_types::Timestamp { seconds, nanos: 0 })
    }

    fn cpu(percent: i32) -> api::MetricStatus {
        api::MetricStatus {
            name: "cpu".into(),
            current_average_utilization: Some(percent),
            ..Default::default()
        }
    }

    /// A run with readings is drawn at each decision's reading; a run recorded without them
    /// at its first decision (replicas only) and its last (its metric).
    #[test]
    fn a_run_is_drawn_at_each_reading() {
        let reading = |t, percent| api::DecisionReading {
            evaluation_time: at(t),
            metrics: vec![api::MetricReading {
                current_average_utilization: Some(percent),
                ..Default::default()
            }],
        };
        let h = api::TargetHistory {
            target_key: "web".into(),
            decisions: vec![
                api::DecisionRecord {
                    evaluation_time: at(30),
                    first_evaluation_time: at(0),
                    run_count: 3,
                    current_replicas: 2,
                    desired_replicas: 2,
                    metrics: vec![cpu(61)],
                    ..Default::default()
                },
                api::DecisionRecord {
                    evaluation_time: at(75),
                    first_evaluation_time: at(45),
                    run_count: 3,
                    current_replicas: 2,
                    desired_replicas: 3,
                    metrics: vec![cpu(99)],
                    readings: vec![reading(45, 92), reading(60, 98), reading(75, 99)],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let t = history_timeline(&h);
        assert_eq!(t.times, vec![0, 30, 45, 60, 75]);
        assert_eq!(t.stored, vec![2, 2, 3, 3, 3]);
        assert_eq!(
            t.metrics[0].1,
            vec![None, Some(61.0), Some(92.0), Some(98.0), Some(99.0)]
        );
    }
}
