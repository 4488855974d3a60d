//! What-if on the command line: `autoscalectl simulate` (offline over a trace, or through a
//! server's `Simulate`), `autoscalectl record` (a recording proxy that writes the trace),
//! `autoscalectl report` (a self-contained HTML page of a target's history). The replay itself
//! is `api::simulate`; this module reads and writes files and draws.
//!
//! * [`trace`]: trace files (one `RecommendRequest` per line, proto3 JSON);
//! * [`plot`]: the SVG or PNG picture (plotters);
//! * `record`: the recording proxy;
//! * `report`: the HTML report.

pub mod plot;
pub(crate) mod record;
pub(crate) mod report;
pub mod trace;

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

use crate::client::{ClientError, OutputFormat};
use autoscaled_wire::pb::v1 as api;
use autoscaled_wire::simulate::{self, SimulateOptions};

/// `autoscalectl simulate`.
#[derive(Debug, clap::Args)]
pub(crate) struct SimulateArgs {
    /// Replay this trace offline, without a server (one RecommendRequest per line, proto3 JSON).
    #[arg(long, value_name = "FILE.jsonl", conflicts_with_all = ["addr", "target"])]
    pub(crate) trace: Option<PathBuf>,
    /// Server to ask (`host:port` or `http://host:port`) with --target, which replays its
    /// stored decision log. [default: $AUTOSCALED_ADDR, else 127.0.0.1:50051]
    #[arg(long, value_name = "ADDR")]
    pub(crate) addr: Option<String>,
    /// The target whose stored decisions to replay, through the server at --addr.
    #[arg(long, value_name = "KEY", conflicts_with = "trace")]
    pub(crate) target: Option<String>,
    /// The scaling group whose members' stored decisions to replay together, through the
    /// server at --addr, each under its recorded spec (docs/groups.md).
    #[arg(long, value_name = "NAME", conflicts_with_all = ["trace", "target", "spec", "plot"])]
    pub(crate) group: Option<String>,
    /// With --group: the capacity to replay under, in units. [default: the group's]
    #[arg(long, value_name = "UNITS", requires = "group")]
    pub(crate) capacity: Option<i64>,
    /// A HorizontalSpec in proto3 JSON replacing the recorded spec.
    #[arg(long, value_name = "SPEC.json")]
    pub(crate) spec: Option<PathBuf>,
    /// Measure both runs as if each scale-up served this long after its decision (`90s`,
    /// `5m`; at most 1h): adds the under-provisioned replica-minutes and the share of the
    /// time short. With a --spec whose `predictive` is on, what prediction would have done.
    #[arg(long, value_name = "DURATION", value_parser = startup_delay)]
    pub(crate) startup_delay: Option<prost_types::Duration>,
    /// Only steps at or after this RFC 3339 time.
    #[arg(long, value_name = "RFC3339")]
    pub(crate) from: Option<String>,
    /// Only steps before this RFC 3339 time.
    #[arg(long, value_name = "RFC3339")]
    pub(crate) to: Option<String>,
    #[arg(long, value_enum, default_value_t)]
    pub(crate) output: OutputFormat,
    /// Write the replica / metric picture here: SVG or PNG, by the file's extension.
    #[arg(long, value_name = "FILE.svg|FILE.png")]
    pub(crate) plot: Option<PathBuf>,
    /// TLS and token, as for `recommend` (with --target).
    #[command(flatten)]
    pub(crate) security: crate::client::security::ClientSecurity,
}

const SIMULATE_RESPONSE: &str = "autoscaled.v1.SimulateResponse";
const HORIZONTAL_SPEC: &str = "autoscaled.v1.HorizontalSpec";

fn usage(detail: impl Into<String>) -> ClientError {
    ClientError::Usage(detail.into())
}

fn read(path: &Path) -> Result<String, ClientError> {
    std::fs::read_to_string(path).map_err(|source| ClientError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn write(path: &Path, contents: impl AsRef<[u8]>) -> Result<(), ClientError> {
    std::fs::write(path, contents).map_err(|source| ClientError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn timestamp(
    flag: &str,
    value: Option<&str>,
) -> Result<Option<prost_types::Timestamp>, ClientError> {
    value
        .map(|v| {
            v.parse::<prost_types::Timestamp>()
                .map_err(|e| usage(format!("--{flag} {v:?} is not an RFC 3339 time: {e}")))
        })
        .transpose()
}

/// `--startup-delay`: whole seconds, minutes or hours (`300s`, `5m`, `1h`).
fn startup_delay(v: &str) -> Result<prost_types::Duration, String> {
    let (number, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len()));
    let n: i64 = number
        .parse()
        .map_err(|_| format!("{v:?}: give a whole number of s, m or h (e.g. 5m)"))?;
    let seconds = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("{v:?}: the unit is s, m or h")),
    };
    Ok(prost_types::Duration { seconds, nanos: 0 })
}

/// Reads a `--spec` file.
pub fn read_spec(path: &Path) -> Result<api::HorizontalSpec, ClientError> {
    trace::parse_json(&read(path)?, HORIZONTAL_SPEC, &path.display().to_string())
}

/// `autoscalectl simulate`: the response rendered, the plot written.
pub(crate) async fn simulate_command(args: SimulateArgs) -> Result<String, ClientError> {
    // An unknown picture format is a usage error before any replay runs.
    if let Some(path) = &args.plot {
        plot::Format::from_path(path)
            .map_err(|e| usage(format!("--plot {}: {e}", path.display())))?;
    }
    let spec = args.spec.as_deref().map(read_spec).transpose()?;
    let mut request = api::SimulateRequest {
        spec,
        from: timestamp("from", args.from.as_deref())?,
        to: timestamp("to", args.to.as_deref())?,
        startup_delay: args.startup_delay,
        ..Default::default()
    };
    // `recommend`'s default: the environment, else the local server.
    let addr = args.addr.clone().or_else(|| {
        args.target.as_ref().or(args.group.as_ref()).map(|_| {
            std::env::var("AUTOSCALED_ADDR")
                .unwrap_or_else(|_| autoscaled_wire::DEFAULT_LISTEN.to_owned())
        })
    });
    let (response, title) = match (&args.trace, &addr, &args.target) {
        (Some(path), _, _) => {
            request.trace = trace::read_trace(path)?;
            let response =
                simulate::simulate(&request, &SimulateOptions::default(), |_| Ok(Vec::new()))
                    .map_err(|e| ClientError::Rpc {
                        rpc: "Simulate (offline)",
                        code: e_code(&e),
                        message: e.to_string(),
                    })?;
            (response, format!("what-if: {}", path.display()))
        }
        (None, Some(addr), Some(target)) => {
            request.target_key = target.clone();
            let response = simulate_rpc(&args.security, addr, request).await?;
            (response, format!("what-if: {target}"))
        }
        (None, Some(addr), None) if args.group.is_some() => {
            request.group = args.group.clone().unwrap_or_default();
            request.group_capacity = args.capacity;
            let response = simulate_rpc(&args.security, addr, request).await?;
            return match args.output {
                OutputFormat::Json => crate::client::to_json(&response, SIMULATE_RESPONSE),
                OutputFormat::Text => Ok(describe_group(&response, args.capacity)),
            };
        }
        _ => {
            return Err(usage(
                "give --trace FILE, or --addr ADDR --target KEY, or --addr ADDR --group NAME",
            ));
        }
    };
    if let Some(path) = &args.plot {
        write_plot(path, &plot::Timeline::from_simulation(&title, &response))?;
    }
    match args.output {
        OutputFormat::Json => crate::client::to_json(&response, SIMULATE_RESPONSE),
        OutputFormat::Text => Ok(describe(&response)),
    }
}

/// `Simulate` through the server at `addr`.
async fn simulate_rpc(
    security: &crate::client::security::ClientSecurity,
    addr: &str,
    request: api::SimulateRequest,
) -> Result<api::SimulateResponse, ClientError> {
    Ok(security
        .horizontal(addr)
        .await?
        .simulate(request)
        .await
        .map_err(crate::client::rpc_error("Simulate"))?
        .into_inner())
}

/// A group's replay: per member its stored and simulated curves' summaries and last counts,
/// then the most units the group held, stored and simulated.
fn describe_group(r: &api::SimulateResponse, capacity: Option<i64>) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Capacity: {}",
        capacity.map_or_else(|| "the group's own".to_owned(), |c| format!("{c} units"))
    );
    let _ = writeln!(
        out,
        "{:<24} {:>7} {:>7} {:>13} {:>13} {:>7} {:>7}",
        "MEMBER", "STEPS", "LAST", "REPLICA-H", "SIM REPLICA-H", "SIM", "EVENTS"
    );
    for m in &r.members {
        let last = m.steps.last();
        let summary = m.summary.unwrap_or_default();
        let (stored, simulated) = (
            summary.stored.unwrap_or_default(),
            summary.simulated.unwrap_or_default(),
        );
        let _ = writeln!(
            out,
            "{:<24} {:>7} {:>7} {:>13.3} {:>13.3} {:>7} {:>7}",
            m.target_key,
            m.steps.len(),
            last.map_or(0, |s| s.stored_desired_replicas),
            stored.replica_hours,
            simulated.replica_hours,
            last.map_or(0, |s| s.simulated_desired_replicas),
            format!("{}/{}", stored.scale_events, simulated.scale_events),
        );
    }
    let most = |f: fn(&api::GroupHeldPoint) -> i64| r.group_held.iter().map(f).max().unwrap_or(0);
    let _ = writeln!(
        out,
        "Most units held: {} stored, {} simulated",
        most(|p| p.stored),
        most(|p| p.simulated)
    );
    if !r.fidelity.is_empty() {
        let _ = writeln!(out, "Fidelity: {}", r.fidelity);
    }
    out
}

fn e_code(e: &autoscaled_wire::status::ApiError) -> tonic::Code {
    tonic::Status::from(clone_error(e)).code()
}

fn clone_error(e: &autoscaled_wire::status::ApiError) -> autoscaled_wire::status::ApiError {
    use autoscaled_wire::status::ApiError;
    match e {
        ApiError::InvalidArgument(v) => ApiError::InvalidArgument(v.clone()),
        ApiError::ResourceExhausted { field, message } => ApiError::ResourceExhausted {
            field: field.clone(),
            message: message.clone(),
        },
        ApiError::TargetNotFound(k) => ApiError::TargetNotFound(k.clone()),
        ApiError::Overloaded {
            message,
            retry_after_ms,
        } => ApiError::Overloaded {
            message: message.clone(),
            retry_after_ms: *retry_after_ms,
        },
        ApiError::DeadlineExceeded(m) => ApiError::DeadlineExceeded(m.clone()),
        ApiError::FailedPrecondition(m) => ApiError::FailedPrecondition(m.clone()),
        ApiError::NotFound(m) => ApiError::NotFound(m.clone()),
        ApiError::Aborted(m) => ApiError::Aborted(m.clone()),
        ApiError::Store(_) | ApiError::Internal(_) => ApiError::Internal(e.to_string()),
    }
}

/// Writes the picture in the format named by the file's extension (`.svg` or `.png`).
pub(crate) fn write_plot(path: &Path, timeline: &plot::Timeline) -> Result<(), ClientError> {
    let format = plot::Format::from_path(path)
        .map_err(|e| usage(format!("--plot {}: {e}", path.display())))?;
    let (width, height) = (1000, 560);
    match format {
        plot::Format::Svg => {
            let svg =
                plot::svg(timeline, width, height).map_err(|e| usage(format!("plot: {e}")))?;
            write(path, &svg)
        }
        plot::Format::Png => {
            let png =
                plot::png(timeline, width, height).map_err(|e| usage(format!("plot: {e}")))?;
            write(path, &png)
        }
    }
}

/// The summary side by side, then one row per step.
pub fn describe(r: &api::SimulateResponse) -> String {
    let mut out = String::new();
    let default = api::RunSummary::default();
    let summary = r.summary.unwrap_or_default();
    let a = summary.stored.as_ref().unwrap_or(&default);
    let b = summary.simulated.as_ref().unwrap_or(&default);
    let mut rows: Vec<(&str, String, String)> = vec![
        (
            "replica-hours",
            format!("{:.2}", a.replica_hours),
            format!("{:.2}", b.replica_hours),
        ),
        (
            "scale events (up/down)",
            format!("{} ({}/{})", a.scale_events, a.scale_ups, a.scale_downs),
            format!("{} ({}/{})", b.scale_events, b.scale_ups, b.scale_downs),
        ),
        (
            "time above target",
            format!("{:.0}s", a.seconds_above_target),
            format!("{:.0}s", b.seconds_above_target),
        ),
        (
            "largest step",
            a.largest_step.to_string(),
            b.largest_step.to_string(),
        ),
        (
            "replicas min-max",
            format!("{}-{}", a.min_replicas, a.max_replicas),
            format!("{}-{}", b.min_replicas, b.max_replicas),
        ),
        (
            "steps",
            r.steps.len().to_string(),
            r.steps.len().to_string(),
        ),
    ];
    // Measured with a start-up delay only.
    if let (Some(x), Some(y)) = (
        a.under_provisioned_replica_minutes,
        b.under_provisioned_replica_minutes,
    ) {
        rows.push((
            "under-provisioned rep-min",
            format!("{x:.1}"),
            format!("{y:.1}"),
        ));
        rows.push((
            "time short",
            format!("{:.2}%", a.share_under_provisioned.unwrap_or(0.0) * 100.0),
            format!("{:.2}%", b.share_under_provisioned.unwrap_or(0.0) * 100.0),
        ));
    }
    let _ = writeln!(out, "{:<24} {:>14} {:>14}", "", "stored", "simulated");
    for (name, x, y) in rows {
        let _ = writeln!(out, "{name:<24} {x:>14} {y:>14}");
    }
    let _ = writeln!(out, "Fidelity: {}", r.fidelity);
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<22} {:>7} {:>7} {:>9}  {:<20} {:<20}",
        "TIME", "CURRENT", "STORED", "SIMULATED", "STORED LIMIT", "SIMULATED LIMIT"
    );
    for s in &r.steps {
        let t = s
            .evaluation_time
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        let marker = if s.stored_desired_replicas != s.simulated_desired_replicas {
            " *"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "{t:<22} {:>7} {:>7} {:>9}  {:<20} {:<20}{marker}{}",
            s.current_replicas,
            s.stored_desired_replicas,
            s.simulated_desired_replicas,
            s.stored_limited_by,
            s.simulated_limited_by,
            if s.dry_run { " (dry run)" } else { "" }
        );
    }
    out
}
