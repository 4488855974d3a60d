//! The target page's pictures (the replica and metric charts, inline SVG drawn from the
//! decision runs) and its table of runs.

use super::*;

/// Seconds since the epoch of an RFC 3339 time as the API prints it.
pub(super) fn seconds(v: &Value) -> Option<f64> {
    let t = v.as_str()?;
    let (date, rest) = t.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let rest = rest.trim_end_matches('Z');
    let mut hms = rest.split(':');
    let (h, min) = (
        hms.next()?.parse::<i64>().ok()?,
        hms.next()?.parse::<i64>().ok()?,
    );
    let s: f64 = hms.next()?.parse().ok()?;
    // days_from_civil (Howard Hinnant).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3600 + min * 60) as f64 + s)
}

/// One series of a chart: its name, colour, dash pattern and points (time, value), drawn as
/// steps (a value that holds until the next point) or as a line between readings.
struct Series {
    name: String,
    color: &'static str,
    dash: &'static str,
    points: Vec<(f64, f64)>,
    step: bool,
}

/// The points of each run: its first and last decision, as a step (a run is one outcome).
fn run_points(runs: &[Value], value: impl Fn(&Value) -> Option<f64>) -> Vec<(f64, f64)> {
    let mut points = Vec::new();
    for r in runs {
        let (Some(first), Some(last)) = (
            seconds(&r["firstEvaluationTime"]).or_else(|| seconds(&r["evaluationTime"])),
            seconds(&r["evaluationTime"]),
        ) else {
            continue;
        };
        if let Some(v) = value(r) {
            points.push((first, v));
            if last > first {
                points.push((last, v));
            }
        }
    }
    points
}

pub(super) fn replica_chart(runs: &[Value]) -> String {
    let series = vec![
        Series {
            name: "current".into(),
            color: "#1f77b4",
            dash: "",
            points: run_points(runs, |r| {
                Some(int(&r["currentReplicas"]).unwrap_or(0) as f64)
            }),
            step: true,
        },
        Series {
            name: "desired".into(),
            color: "#ff7f0e",
            dash: "",
            points: run_points(runs, |r| {
                Some(int(&r["desiredReplicas"]).unwrap_or(0) as f64)
            }),
            step: true,
        },
        Series {
            name: "stabilized".into(),
            color: "#2ca02c",
            dash: "4 3",
            points: run_points(runs, |r| {
                int(&r["explanation"]["stabilizedReplicas"]).map(|v| v as f64)
            }),
            step: true,
        },
        Series {
            name: "scale-up limit".into(),
            color: "#d62728",
            dash: "2 3",
            points: run_points(runs, |r| {
                int(&r["explanation"]["scaleUpLimit"]).map(|v| v as f64)
            }),
            step: true,
        },
        Series {
            name: "scale-down limit".into(),
            color: "#9467bd",
            dash: "2 3",
            points: run_points(runs, |r| {
                int(&r["explanation"]["scaleDownLimit"]).map(|v| v as f64)
            }),
            step: true,
        },
    ];
    chart("replicas", "Replicas", &series)
}

pub(super) fn metric_chart(runs: &[Value], i: usize, target: &Value) -> String {
    let name = runs
        .last()
        .and_then(|r| r["metrics"][i]["name"].as_str())
        .unwrap_or("metric")
        .to_owned();
    // A point per decision, at what it observed (a run's `readings`, named like a metric
    // status's fields); a run recorded without readings has one point, its last decision's.
    let current: Vec<(f64, f64)> = runs
        .iter()
        .flat_map(|r| match r["readings"].as_array() {
            Some(readings) if !readings.is_empty() => readings
                .iter()
                .filter_map(|rd| {
                    let t = seconds(&rd["evaluationTime"])?;
                    Some((t, metric_values(&rd["metrics"][i], target).0?))
                })
                .collect::<Vec<_>>(),
            _ => seconds(&r["evaluationTime"])
                .zip(metric_values(&r["metrics"][i], target).0)
                .into_iter()
                .collect(),
        })
        .collect();
    let mut series = vec![Series {
        name: format!("{name} (each decision's reading)"),
        color: "#1f77b4",
        dash: "",
        points: current,
        step: false,
    }];
    if let Some(t) = metric_values(&Value::Null, target).1 {
        let xs: Vec<f64> = series[0].points.iter().map(|p| p.0).collect();
        if let (Some(first), Some(last)) = (xs.first(), xs.last()) {
            series.push(Series {
                name: "target".into(),
                color: "#7f7f7f",
                dash: "6 4",
                points: vec![(*first, t), (*last, t)],
                step: true,
            });
        }
    }
    let unit = if target["type"] == "METRIC_TARGET_TYPE_UTILIZATION" {
        " (% of request)"
    } else {
        ""
    };
    chart(&format!("metric-{i}"), &format!("{name}{unit}"), &series)
}

/// A line chart as inline SVG: time on x, 0 to the largest value on y.
fn chart(id: &str, title: &str, series: &[Series]) -> String {
    const W: f64 = 900.0;
    const H: f64 = 220.0;
    const L: f64 = 50.0;
    const R: f64 = 10.0;
    const T: f64 = 25.0;
    const B: f64 = 35.0;
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .collect();
    let mut out = format!("<h2>{}</h2>", esc(title));
    if all.is_empty() {
        out.push_str("<p>No decisions yet.</p>");
        return out;
    }
    let (x0, x1) = all
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let span = (x1 - x0).max(1.0);
    let ymax = all.iter().map(|p| p.1).fold(0.0_f64, f64::max).max(1.0) * 1.1;
    let x = |t: f64| L + (t - x0) / span * (W - L - R);
    let y = |v: f64| T + (1.0 - v / ymax) * (H - T - B);
    let _ = write!(
        out,
        "<svg id=\"{id}\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" xmlns=\"http://www.w3.org/2000/svg\" role=img><rect x=\"{L}\" y=\"{T}\" width=\"{}\" height=\"{}\" fill=\"#ffffff\" stroke=\"#cccccc\"/>",
        W - L - R,
        H - T - B
    );
    for k in 0..=4 {
        let v = ymax / 1.1 * f64::from(k) / 4.0;
        let _ = write!(
            out,
            "<line x1=\"{L}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#eeeeee\"/><text x=\"{}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">{}</text>",
            W - R,
            L - 4.0,
            y(v) + 4.0,
            fmt_num(v),
            y = y(v)
        );
    }
    let _ = write!(
        out,
        "<text x=\"{L}\" y=\"{}\" font-size=\"11\">{}</text><text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">{}</text>",
        H - 8.0,
        esc(&clock(x0)),
        W - R,
        H - 8.0,
        esc(&format!("{} (+{:.0} s)", clock(x1), span))
    );
    let mut legend_x = L;
    for s in series.iter().filter(|s| !s.points.is_empty()) {
        let mut d = String::new();
        for (i, (t, v)) in s.points.iter().enumerate() {
            if i == 0 {
                let _ = write!(d, "M{:.1},{:.1}", x(*t), y(*v));
            } else if s.step {
                // A step: the value holds until the next point.
                let _ = write!(d, " H{:.1} V{:.1}", x(*t), y(*v));
            } else {
                let _ = write!(d, " L{:.1},{:.1}", x(*t), y(*v));
            }
        }
        let _ = write!(
            out,
            "<path d=\"{d}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" stroke-dasharray=\"{}\"/>",
            s.color, s.dash
        );
        let _ = write!(
            out,
            "<rect x=\"{legend_x}\" y=\"6\" width=\"12\" height=\"4\" fill=\"{}\"/><text x=\"{}\" y=\"12\" font-size=\"11\">{}</text>",
            s.color,
            legend_x + 16.0,
            esc(&s.name)
        );
        legend_x += 24.0 + 7.0 * s.name.len() as f64;
    }
    out.push_str("</svg>");
    out
}

fn clock(t: f64) -> String {
    let s = t.rem_euclid(86_400.0) as i64;
    format!("{:02}:{:02}:{:02} UTC", s / 3600, s % 3600 / 60, s % 60)
}

/// The decision runs, newest first: when, how many, the counts, the reasons, why.
pub(super) fn runs_table(runs: &[Value]) -> String {
    let mut out = String::from(
        "<h2>Decisions</h2><table id=runs><thead><tr><th>From</th><th>To</th><th>Decisions</th><th>Replicas</th><th>AbleToScale</th><th>ScalingActive</th><th>ScalingLimited</th><th>Why</th></tr></thead><tbody>",
    );
    for r in runs.iter().rev().take(MAX_RUNS_LISTED) {
        let reason = |t: &str| {
            r["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == t)
                .map_or(String::new(), |c| {
                    format!(
                        "{} {}",
                        c["status"].as_str().unwrap_or(""),
                        c["reason"].as_str().unwrap_or("")
                    )
                })
        };
        let current = int(&r["currentReplicas"]).unwrap_or(0);
        let desired = int(&r["desiredReplicas"]).unwrap_or(0);
        let e = &r["explanation"];
        let why = if current == desired {
            e["limitedBy"]
                .as_str()
                .filter(|s| !s.is_empty())
                .unwrap_or("")
                .to_owned()
        } else {
            e["rescaleReason"].as_str().unwrap_or("").to_owned()
        };
        let class = if reason("AbleToScale").starts_with("False") {
            " class=failing"
        } else if reason("ScalingLimited").starts_with("True") {
            " class=limited"
        } else {
            ""
        };
        let _ = write!(
            out,
            "<tr{class}><td>{}</td><td>{}</td><td>{}</td><td>{current} → {desired}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(r["firstEvaluationTime"].as_str().unwrap_or("")),
            esc(r["evaluationTime"].as_str().unwrap_or("")),
            int(&r["runCount"]).unwrap_or(1),
            if r["shadow"] == true { " (shadow)" } else { "" },
            esc(&reason("AbleToScale")),
            esc(&reason("ScalingActive")),
            esc(&reason("ScalingLimited")),
            esc(&why)
        );
    }
    out.push_str("</tbody></table>");
    out
}

// ---- helpers -------------------------------------------------------------------------------
