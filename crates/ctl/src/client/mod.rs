//! The command-line client: `autoscalectl recommend` and `autoscalectl history`; the fleet
//! at a glance, `get targets` and `describe target`, in `fleet`.
//!
//! Requests are read, and responses optionally printed, in the proto3 JSON mapping (field
//! names in lowerCamelCase or as declared, enums by name, timestamps in RFC 3339, 64-bit
//! integers as strings or numbers), through `prost-reflect` and the descriptor set the build
//! embeds, so the files are the ones any other gRPC tool (grpcurl, a Go client) reads and
//! writes. The text output follows `kubectl describe hpa`, so that what operators know from
//! Kubernetes reads the same here.

pub(crate) mod migration;
pub mod policies;
pub mod security;
pub mod targets;

use std::{fmt::Write as _, path::Path, sync::OnceLock};

use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};
use thiserror::Error;
use tonic::transport::{Channel, Endpoint};

use autoscaled_wire::pb::{
    self,
    v1::{self as api, horizontal_autoscaler_client::HorizontalAutoscalerClient},
};

/// How a command prints its answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// In the manner of `kubectl describe hpa`.
    #[default]
    Text,
    /// The response message in the proto3 JSON mapping.
    Json,
}

/// Why a client command failed.
#[derive(Debug, Error)]
pub enum ClientError {
    /// A request, spec or trace file cannot be read (or a trace written).
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a valid proto3 JSON encoding of the message.
    #[error("{path} is not a valid {message} in proto3 JSON: {detail}")]
    Json {
        /// The file.
        path: String,
        /// The expected message type, e.g. `RecommendRequest`.
        message: &'static str,
        /// The decoder's complaint.
        detail: String,
    },
    /// A command-line argument that cannot be used (e.g. `--plot` with an unknown extension).
    #[error("{0}")]
    Usage(String),
    /// The `--hpa` manifest cannot be used as the spec.
    #[error("{path}: {detail}")]
    Manifest {
        /// The `--hpa` file.
        path: String,
        /// What cannot be expressed (see `kube::hpa::ManifestError`).
        detail: String,
    },
    /// `--addr` is not a URI tonic can connect to.
    #[error("invalid server address {addr:?}: {detail}")]
    Address {
        /// The address as given.
        addr: String,
        /// Why it is not a URI.
        detail: String,
    },
    /// The connection (TCP or TLS handshake) failed.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The address as given.
        addr: String,
        /// The transport error.
        source: tonic::transport::Error,
    },
    /// The server answered with a non-OK status.
    #[error("{rpc} failed: {code:?}: {message}{}", plaintext_hint(*code, message))]
    Rpc {
        /// The method, e.g. `Recommend`.
        rpc: &'static str,
        /// The gRPC status code.
        code: tonic::Code,
        /// The server's status message.
        message: String,
    },
    /// Only if the embedded descriptor set and the generated code disagree (a build defect).
    #[error("protobuf descriptor mismatch for {message}: {detail}")]
    Descriptor {
        /// The message type.
        message: &'static str,
        /// What disagrees.
        detail: String,
    },
}

const RECOMMEND_REQUEST: &str = "autoscaled.v1.RecommendRequest";
const RECOMMEND_RESPONSE: &str = "autoscaled.v1.RecommendResponse";
const TARGET_HISTORY: &str = "autoscaled.v1.TargetHistory";

/// The descriptors of `proto/`, decoded once.
fn descriptor_pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(pb::FILE_DESCRIPTOR_SET)
            .expect("the descriptor set embedded by build.rs decodes")
    })
}

fn descriptor(message: &'static str) -> Result<prost_reflect::MessageDescriptor, ClientError> {
    descriptor_pool()
        .get_message_by_name(message)
        .ok_or_else(|| ClientError::Descriptor {
            message,
            detail: "not in the descriptor set".to_owned(),
        })
}

/// Parses a `RecommendRequest` from proto3 JSON; `origin` names the source in errors.
/// Unknown fields are rejected, so a misspelt field is an error rather than silently absent.
pub fn parse_recommend_request(
    json: &str,
    origin: &str,
) -> Result<api::RecommendRequest, ClientError> {
    let json_error = |detail: String| ClientError::Json {
        path: origin.to_owned(),
        message: RECOMMEND_REQUEST,
        detail,
    };
    let descriptor = descriptor(RECOMMEND_REQUEST)?;
    // Syntax first (errors with line and column), then Kubernetes quantities (errors naming
    // the field), then the proto3 JSON mapping.
    let mut value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| json_error(e.to_string()))?;
    crate::kube::request_json::normalize_quantities(&descriptor, &mut value).map_err(json_error)?;
    let message = deserialize_named(descriptor, value).map_err(json_error)?;
    message
        .transcode_to::<api::RecommendRequest>()
        .map_err(|e| ClientError::Descriptor {
            message: RECOMMEND_REQUEST,
            detail: e.to_string(),
        })
}

/// `value` as a `descriptor` message; a failure names the field by its path
/// (`spec.metrics[0].target.type: unrecognized enum value ...`).
pub fn deserialize_named(
    descriptor: prost_reflect::MessageDescriptor,
    value: serde_json::Value,
) -> Result<DynamicMessage, String> {
    let mut track = serde_path_to_error::Track::new();
    let de = serde_path_to_error::Deserializer::new(value, &mut track);
    DynamicMessage::deserialize(descriptor, de).map_err(|e| {
        let path = track.path().to_string();
        if path == "." || path.is_empty() {
            e.to_string()
        } else {
            format!("{path}: {e}")
        }
    })
}

/// Reads and parses a `RecommendRequest` file.
pub fn read_recommend_request(path: &Path) -> Result<api::RecommendRequest, ClientError> {
    let json = std::fs::read_to_string(path).map_err(|source| ClientError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse_recommend_request(&json, &path.display().to_string())
}

/// `message` (of the proto type named `full_name`) in proto3 JSON, pretty-printed. Fields at
/// their default value are left out, as grpcurl and Go's `protojson` print them (a field with
/// explicit presence, such as `proposedReplicas`, is printed whenever it is set, even to 0).
pub fn to_json<M: prost::Message>(
    message: &M,
    full_name: &'static str,
) -> Result<String, ClientError> {
    let descriptor_error = |detail: String| ClientError::Descriptor {
        message: full_name,
        detail,
    };
    let dynamic =
        DynamicMessage::decode(descriptor(full_name)?, message.encode_to_vec().as_slice())
            .map_err(|e| descriptor_error(e.to_string()))?;
    let mut serializer = serde_json::Serializer::pretty(Vec::new());
    dynamic
        .serialize_with_options(
            &mut serializer,
            &SerializeOptions::new().skip_default_fields(true),
        )
        .map_err(|e| descriptor_error(e.to_string()))?;
    String::from_utf8(serializer.into_inner()).map_err(|e| descriptor_error(e.to_string()))
}

/// Connects to `addr` (`host:port` or an `http://` URI).
pub async fn connect(addr: &str) -> Result<HorizontalAutoscalerClient<Channel>, ClientError> {
    let uri = if addr.contains("://") {
        addr.to_owned()
    } else {
        format!("http://{addr}")
    };
    let endpoint = Endpoint::from_shared(uri).map_err(|e| ClientError::Address {
        addr: addr.to_owned(),
        detail: e.to_string(),
    })?;
    let channel = endpoint
        .connect()
        .await
        .map_err(|source| ClientError::Connect {
            addr: addr.to_owned(),
            source,
        })?;
    Ok(HorizontalAutoscalerClient::new(channel))
}

/// A plaintext client talking to a TLS port sees only an HTTP/2 protocol error or a broken
/// transport (the TLS record it reads back is no HTTP/2 frame): say what is likely wrong.
fn plaintext_hint(code: tonic::Code, message: &str) -> &'static str {
    let broken = (code == tonic::Code::Internal && message.contains("h2 protocol error"))
        || (code == tonic::Code::Unknown && message == "transport error");
    if broken {
        " (is the server using TLS? pass --ca FILE, or set AUTOSCALED_CA)"
    } else {
        ""
    }
}

pub(crate) fn rpc_error(rpc: &'static str) -> impl FnOnce(tonic::Status) -> ClientError {
    move |status| ClientError::Rpc {
        rpc,
        code: status.code(),
        message: status.message().to_owned(),
    }
}

/// Runs a client command to completion on a small runtime: its text on stdout and exit 0, or
/// the error on stderr and exit 1.
pub(crate) fn run(
    command: impl std::future::Future<Output = Result<String, ClientError>>,
) -> std::process::ExitCode {
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|runtime| runtime.block_on(command).map_err(|e| e.to_string()));
    match result {
        // A command that printed as it went (`get targets --watch`) returns nothing more.
        Ok(text) if text.is_empty() => std::process::ExitCode::SUCCESS,
        Ok(text) => print_stdout(text.trim_end()),
        Err(e) => {
            eprintln!("autoscalectl: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Prints `text` and a newline on stdout. A reader that went away (`autoscalectl history ... |
/// head`) ends the command quietly with status 0, as `ls | head` does, instead of the panic
/// of `println!`; any other write error is reported and exits 1.
pub(crate) fn print_stdout(text: &str) -> std::process::ExitCode {
    match write_out(&format!("{text}\n")) {
        Err(Failed) => std::process::ExitCode::FAILURE,
        Ok(_) => std::process::ExitCode::SUCCESS,
    }
}

/// Writes `text` on stdout as it is, flushed: false when stdout is gone (a reader that went
/// away, or a write error, reported), so that a command printing as it goes stops.
pub(crate) fn write_stdout(text: &str) -> bool {
    write_out(text) == Ok(true)
}

/// A write to stdout failed for another reason than a reader that went away; it was reported.
#[derive(Debug, PartialEq)]
struct Failed;

/// Writes `text` on stdout, flushed: `Ok(false)` when the reader went away (a broken pipe,
/// not an error), `Err` after reporting any other write error.
fn write_out(text: &str) -> Result<bool, Failed> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => {
            eprintln!("autoscalectl: cannot write to stdout: {e}");
            Err(Failed)
        }
    }
}

/// Reads the request of `autoscalectl recommend`: `file`, with the spec taken from the
/// `autoscaling/v2` HorizontalPodAutoscaler manifest `hpa` when given (then `file` must not
/// carry a spec, and an empty `targetKey` becomes the manifest's `namespace/name`).
pub(crate) fn read_request_with_manifest(
    file: &Path,
    hpa: Option<&Path>,
) -> Result<api::RecommendRequest, ClientError> {
    let mut request = read_recommend_request(file)?;
    let Some(manifest) = hpa else {
        return Ok(request);
    };
    let origin = manifest.display().to_string();
    let text = std::fs::read_to_string(manifest).map_err(|source| ClientError::Read {
        path: origin.clone(),
        source,
    })?;
    let (spec, key) =
        crate::kube::hpa::parse_manifest(&text).map_err(|e| ClientError::Manifest {
            path: origin.clone(),
            detail: e.to_string(),
        })?;
    if request.spec.is_some() {
        return Err(ClientError::Manifest {
            path: origin,
            detail: format!(
                "{} also has a spec; with --hpa the spec comes from the manifest only",
                file.display()
            ),
        });
    }
    request.spec = Some(spec);
    if request.target_key.is_empty() {
        request.target_key = key;
    }
    Ok(request)
}

/// `autoscalectl recommend`: sends the request in `file` (its spec from the manifest `hpa`, if
/// given) and renders the decision.
pub async fn recommend(
    addr: &str,
    security: &crate::client::security::ClientSecurity,
    file: &Path,
    hpa: Option<&Path>,
    mode: Mode,
    output: OutputFormat,
) -> Result<String, ClientError> {
    let mut request = read_request_with_manifest(file, hpa)?;
    request.shadow |= mode.shadow;
    request.dry_run |= mode.dry_run;
    let response = security
        .horizontal(addr)
        .await?
        .recommend(request.clone())
        .await
        .map_err(rpc_error("Recommend"))?
        .into_inner();
    match output {
        OutputFormat::Json => to_json(&response, RECOMMEND_RESPONSE),
        OutputFormat::Text => Ok(describe_recommendation(&request, &response)),
    }
}

/// How `recommend` asks: the file's own flags, or shadow mode, or a dry run.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mode {
    /// `--shadow`.
    pub shadow: bool,
    /// `--dry-run`.
    pub dry_run: bool,
}

/// `autoscalectl history`: fetches and renders the stored history of `target_key`.
pub async fn history(
    addr: &str,
    security: &crate::client::security::ClientSecurity,
    target_key: &str,
    output: OutputFormat,
) -> Result<String, ClientError> {
    let history = security
        .horizontal(addr)
        .await?
        .get_history(api::GetHistoryRequest {
            target_key: target_key.to_owned(),
            ..Default::default()
        })
        .await
        .map_err(rpc_error("GetHistory"))?
        .into_inner();
    match output {
        OutputFormat::Json => to_json(&history, TARGET_HISTORY),
        OutputFormat::Text => Ok(describe_history(&history)),
    }
}

/// A decision in the manner of `kubectl describe hpa`: metrics as current / target, the
/// replica bounds, desired replicas, the conditions table, then the explanation.
pub fn describe_recommendation(
    request: &api::RecommendRequest,
    response: &api::RecommendResponse,
) -> String {
    let spec = request.spec.clone().unwrap_or_default();
    let mut rows: Vec<(String, String)> = vec![
        ("Name:".to_owned(), request.target_key.clone()),
        (
            "Evaluation time:".to_owned(),
            timestamp(response.evaluation_time.as_ref()),
        ),
        (
            "Recorded:".to_owned(),
            if response.shadow {
                "true (shadow: as if applied; scale nothing)".to_owned()
            } else {
                response.recorded.to_string()
            },
        ),
        ("Metrics:".to_owned(), "( current / target )".to_owned()),
    ];
    for (index, status) in response.metrics.iter().enumerate() {
        let target = spec_metric_for(&spec, index, status).and_then(|m| m.target.as_ref());
        rows.push((
            format!("  {}:", metric_label(status, target)),
            metric_value(status, target),
        ));
    }
    if response.metrics.is_empty() {
        rows.push(("  <none evaluated>".to_owned(), String::new()));
    }
    rows.push((
        "Min replicas:".to_owned(),
        spec.min_replicas.unwrap_or(1).to_string(),
    ));
    rows.push(("Max replicas:".to_owned(), spec.max_replicas.to_string()));
    rows.push((
        "Behavior:".to_owned(),
        if spec.behavior.is_some() {
            "set"
        } else {
            "<none> (legacy)"
        }
        .to_owned(),
    ));
    rows.push((
        "Current replicas:".to_owned(),
        response
            .current_replicas
            .unwrap_or(request.current_replicas)
            .to_string(),
    ));
    rows.push((
        "Desired replicas:".to_owned(),
        response.desired_replicas.to_string(),
    ));
    rows.extend(policy_and_budget(
        response.policy.as_ref(),
        response.budget.as_ref(),
    ));
    rows.extend(schedule_rows(response.schedule.as_ref()));
    rows.extend(predictive_rows(response.predictive.as_ref()));
    let mut out = aligned(&rows);
    out.push_str(&describe_conditions(&response.conditions));
    out.push_str(&describe_warnings(&response.warnings));
    out.push_str(&describe_explanation(
        response.explanation.as_ref(),
        &response.metrics,
    ));
    out.push_str(&crate::client::migration::describe_extensions(
        response.extensions.as_ref(),
    ));
    out
}

/// The rows naming a decision's policy and what its scaling group did, when it has them.
pub(crate) fn policy_and_budget(
    policy: Option<&api::PolicyRef>,
    budget: Option<&api::BudgetReport>,
) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    if let Some(p) = policy {
        rows.push((
            "Policy:".to_owned(),
            format!("{} (version {})", p.name, p.version),
        ));
    }
    if let Some(b) = budget {
        rows.push((
            "Scaling group:".to_owned(),
            format!(
                "{}: {} uncapped, fair share {}, {} of {} units held ({} left, {} per replica)",
                b.group,
                b.uncapped_replicas,
                b.fair_share,
                b.used,
                b.capacity,
                b.residual,
                b.units_per_replica
            ),
        ));
    }
    rows
}

/// The rows saying what a decision's schedules did: the open ones and what they set, the
/// bounds in force, and when the next window opens or closes. None for a spec without
/// schedules.
pub(crate) fn schedule_rows(report: Option<&api::ScheduleReport>) -> Vec<(String, String)> {
    let Some(r) = report else {
        return Vec::new();
    };
    let mut open = Vec::new();
    for name in &r.applied {
        let mut what = Vec::new();
        if r.floor_by.contains(name) {
            what.push(format!("floor {}", r.floor.unwrap_or_default()));
        }
        if r.ceiling_by.contains(name) {
            what.push(format!("ceiling {}", r.ceiling.unwrap_or_default()));
        }
        open.push(if what.is_empty() {
            name.clone()
        } else {
            format!("{name} ({})", what.join(", "))
        });
    }
    let mut rows = vec![(
        "Schedules:".to_owned(),
        if open.is_empty() {
            "none open".to_owned()
        } else {
            let mut text = open.join(", ");
            if r.conflict {
                text.push_str(": the floor is above the ceiling and wins");
            }
            text
        },
    )];
    rows.push((
        "  Bounds in force:".to_owned(),
        format!("min {}, max {}", r.min_replicas, r.max_replicas),
    ));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    rows.push((
        "  Next change:".to_owned(),
        match &r.next_change {
            Some(t) if t.seconds >= now => format!(
                "{} (in {})",
                r.next_change_local,
                targets::age(
                    Some(&prost_types::Timestamp {
                        seconds: now,
                        nanos: 0
                    }),
                    t.seconds
                )
            ),
            Some(_) => format!("{} (passed since this decision)", r.next_change_local),
            None => "none within 366 days".to_owned(),
        },
    ));
    rows
}

/// The rows saying what predictive scale-up did in a decision, and how accurate its
/// forecaster has been. None without `spec.predictive`.
pub(crate) fn predictive_rows(report: Option<&api::PredictiveReport>) -> Vec<(String, String)> {
    let Some(p) = report else {
        return Vec::new();
    };
    let mode = match api::PredictiveMode::try_from(p.mode) {
        Ok(api::PredictiveMode::ForecastOnly) => "forecast only",
        Ok(api::PredictiveMode::ScaleUp) => "scale up",
        _ => "off",
    };
    let what = match (p.forecast_replicas, p.reactive_replicas) {
        (Some(f), Some(r)) if p.raised && mode == "scale up" => {
            format!(
                "raised to {f} from {r} ({} forecast of {})",
                p.model, p.metric
            )
        }
        (Some(f), Some(r)) if p.raised => {
            format!(
                "would have asked {f} instead of {r} ({} forecast of {})",
                p.model, p.metric
            )
        }
        (Some(f), _) => format!(
            "forecast {f}, not above the reactive count ({} forecast of {})",
            p.model, p.metric
        ),
        _ => format!("reactive: {}", p.reason),
    };
    let mut rows = vec![("Predictive:".to_owned(), format!("{mode}: {what}"))];
    if let (Some(load), Some(forecast)) = (p.load, p.forecast_load) {
        rows.push((
            "  Load:".to_owned(),
            format!("{load:.1} replicas at target now, up to {forecast:.1} forecast"),
        ));
    }
    rows.push((
        "  Accuracy:".to_owned(),
        p.wape.map_or_else(
            || "not scored yet".to_owned(),
            |w| format!("WAPE {:.1}% over about a day", w * 100.0),
        ),
    ));
    rows
}

/// The stored history of a target: the latest decision in full, then the stored
/// recommendations and scale events and one line per recorded decision.
pub fn describe_history(history: &api::TargetHistory) -> String {
    let mut rows = vec![("Name:".to_owned(), history.target_key.clone())];
    let Some(last) = history.decisions.last() else {
        rows.push(("Last evaluation:".to_owned(), "<none>".to_owned()));
        return aligned(&rows) + &describe_stored(history);
    };
    rows.push((
        "Last evaluation:".to_owned(),
        timestamp(last.evaluation_time.as_ref()),
    ));
    rows.push(("Metrics:".to_owned(), "( current )".to_owned()));
    for status in &last.metrics {
        rows.push((
            format!("  {}:", metric_label(status, None)),
            metric_value(status, None),
        ));
    }
    rows.push((
        "Current replicas:".to_owned(),
        last.current_replicas.to_string(),
    ));
    rows.push((
        "Desired replicas:".to_owned(),
        last.desired_replicas.to_string(),
    ));
    rows.extend(policy_and_budget(
        last.policy.as_ref(),
        last.budget.as_ref(),
    ));
    rows.extend(schedule_rows(last.schedule.as_ref()));
    rows.extend(predictive_rows(last.predictive.as_ref()));
    let mut out = aligned(&rows);
    out.push_str(&describe_conditions(&last.conditions));
    out.push_str(&describe_explanation(
        last.explanation.as_ref(),
        &last.metrics,
    ));
    out.push_str(&crate::client::migration::describe_extensions(
        last.extensions.as_ref(),
    ));
    out.push_str(&describe_stored(history));
    out
}

/// The stored recommendations and scale events, and one line per recorded decision.
fn describe_stored(history: &api::TargetHistory) -> String {
    let mut out = String::from("Recommendations (storage order):\n");
    out.push_str(&table(
        &["Time", "Replicas"],
        history
            .recommendations
            .iter()
            .map(|r| vec![timestamp(r.time.as_ref()), r.replicas.to_string()])
            .collect(),
    ));
    for (title, events) in [
        ("Scale-up events:", &history.scale_up_events),
        ("Scale-down events:", &history.scale_down_events),
    ] {
        out.push_str(title);
        out.push('\n');
        out.push_str(&table(
            &["Time", "Change", "Outdated"],
            events
                .iter()
                .map(|e| {
                    vec![
                        timestamp(e.time.as_ref()),
                        e.replica_change.to_string(),
                        e.outdated.to_string(),
                    ]
                })
                .collect(),
        ));
    }
    // Each row is a run of identical decisions: how many, and since when (a run of one has
    // the same first and last time).
    let decisions: u64 = history.decisions.iter().map(|d| d.run_count.max(1)).sum();
    out.push_str(&format!(
        "Decisions (oldest first; {decisions} in {} runs of identical decisions):\n",
        history.decisions.len()
    ));
    out.push_str(&runs_table(&history.decisions));
    out
}

/// Decision runs, one row each: the last decision's time, the counts, how many decisions the
/// run holds and since when (a run of one, or a record without run fields, is its own
/// decision), what its decisions observed (each metric's lowest and highest reading), the path
/// and the condition reasons. `history` and `describe target` both print it.
pub(crate) fn runs_table(decisions: &[api::DecisionRecord]) -> String {
    table(
        &[
            "Last", "Current", "Desired", "Run", "Since", "Observed", "Path", "Reasons",
        ],
        decisions
            .iter()
            .map(|d| {
                vec![
                    timestamp(d.evaluation_time.as_ref()),
                    d.current_replicas.to_string(),
                    d.desired_replicas.to_string(),
                    d.run_count.max(1).to_string(),
                    timestamp(
                        d.first_evaluation_time
                            .as_ref()
                            .or(d.evaluation_time.as_ref()),
                    ),
                    observed(d),
                    d.explanation
                        .as_ref()
                        .map(|e| e.path.clone())
                        .unwrap_or_default(),
                    d.conditions
                        .iter()
                        .map(|c| format!("{}={}", c.r#type, c.reason))
                        .collect::<Vec<_>>()
                        .join(" "),
                ]
            })
            .collect(),
    )
}

/// The spec metric a status reports on: the one at the same index when the type and name
/// agree (the server reports metrics in spec order), else the first with that type and name.
fn spec_metric_for<'a>(
    spec: &'a api::HorizontalSpec,
    index: usize,
    status: &api::MetricStatus,
) -> Option<&'a api::MetricSpec> {
    let same = |m: &&api::MetricSpec| {
        m.r#type == status.r#type && m.name == status.name && m.container == status.container
    };
    spec.metrics
        .get(index)
        .filter(same)
        .or_else(|| spec.metrics.iter().find(same))
}

/// kubectl's wording of a metric (`describeHorizontalPodAutoscalerV2`).
fn metric_label(status: &api::MetricStatus, target: Option<&api::MetricTarget>) -> String {
    let target_type = target.and_then(|t| api::MetricTargetType::try_from(t.r#type).ok());
    let utilization = target_type == Some(api::MetricTargetType::Utilization)
        || status.current_average_utilization.is_some();
    let value_kind = if target_type == Some(api::MetricTargetType::Value)
        || status.current_value_milli.is_some()
    {
        "(target value)"
    } else {
        "(target average value)"
    };
    match api::MetricSourceType::try_from(status.r#type) {
        Ok(api::MetricSourceType::Resource) if utilization => {
            format!(
                "resource {} on pods  (as a percentage of request)",
                status.name
            )
        }
        Ok(api::MetricSourceType::Resource) => format!("resource {} on pods", status.name),
        Ok(api::MetricSourceType::ContainerResource) if utilization => format!(
            "resource {} of container \"{}\" on pods  (as a percentage of request)",
            status.name, status.container
        ),
        Ok(api::MetricSourceType::ContainerResource) => {
            format!(
                "resource {} of container \"{}\" on pods",
                status.name, status.container
            )
        }
        Ok(api::MetricSourceType::Pods) => format!("\"{}\" on pods", status.name),
        Ok(api::MetricSourceType::Object) => format!("\"{}\" on object {value_kind}", status.name),
        Ok(api::MetricSourceType::External) => {
            format!("\"{}\" (external) {value_kind}", status.name)
        }
        Ok(api::MetricSourceType::Unspecified) | Err(_) => {
            format!("\"{}\" (unknown source type)", status.name)
        }
    }
}

/// `current / target`, `<unknown>` where a value is missing (as kubectl prints it).
fn metric_value(status: &api::MetricStatus, target: Option<&api::MetricTarget>) -> String {
    let unknown = || "<unknown>".to_owned();
    let current = if let Some(percent) = status.current_average_utilization {
        match status.current_average_value_milli {
            Some(value) => format!("{percent}% ({})", quantity(value)),
            None => format!("{percent}%"),
        }
    } else if let Some(value) = status.current_value_milli {
        quantity(value)
    } else if let Some(value) = status.current_average_value_milli {
        quantity(value)
    } else {
        unknown()
    };
    let Some(target) = target else {
        return current;
    };
    let wanted = match api::MetricTargetType::try_from(target.r#type) {
        Ok(api::MetricTargetType::Utilization) => {
            target.average_utilization.map(|p| format!("{p}%"))
        }
        Ok(api::MetricTargetType::AverageValue) => target.average_value_milli.map(quantity),
        Ok(api::MetricTargetType::Value) => target.value_milli.map(quantity),
        Ok(api::MetricTargetType::Unspecified) | Err(_) => None,
    };
    format!("{current} / {}", wanted.unwrap_or_else(unknown))
}

/// Each metric's range over a run's readings (`cpu 87-99%`), or its last decision's value
/// for a run recorded without readings; `-` without metrics.
fn observed(d: &api::DecisionRecord) -> String {
    let parts: Vec<String> = d
        .metrics
        .iter()
        .enumerate()
        .map(|(j, m)| {
            let mut values: Vec<(i64, bool)> = d
                .readings
                .iter()
                .filter_map(|r| r.metrics.get(j))
                .filter_map(|r| {
                    r.current_average_utilization
                        .map(|p| (i64::from(p), true))
                        .or(r.current_average_value_milli.map(|v| (v, false)))
                        .or(r.current_value_milli.map(|v| (v, false)))
                })
                .collect();
            if d.readings.is_empty() {
                values.extend(
                    m.current_average_utilization
                        .map(|p| (i64::from(p), true))
                        .or(m.current_value_milli.map(|v| (v, false)))
                        .or(m.current_average_value_milli.map(|v| (v, false))),
                );
            }
            let show = |(v, percent): (i64, bool)| {
                if percent {
                    format!("{v}%")
                } else {
                    quantity(v)
                }
            };
            let range = match (values.iter().min(), values.iter().max()) {
                (Some(lo), Some(hi)) if lo == hi => show(*lo),
                (Some(lo), Some(hi)) if lo.1 => format!("{}-{}", lo.0, show(*hi)),
                (Some(lo), Some(hi)) => format!("{}-{}", show(*lo), show(*hi)),
                _ => "<unknown>".to_owned(),
            };
            format!("{} {range}", m.name)
        })
        .collect();
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join(", ")
    }
}

/// A milli-unit quantity as Kubernetes prints it: whole units plainly, else with `m`.
fn quantity(milli: i64) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

fn timestamp(t: Option<&prost_types::Timestamp>) -> String {
    t.map_or_else(|| "<unset>".to_owned(), ToString::to_string)
}

fn describe_conditions(conditions: &[api::Condition]) -> String {
    let mut out = String::from("Conditions:\n");
    if conditions.is_empty() {
        out.push_str("  <none>\n");
        return out;
    }
    out.push_str(&table(
        &["Type", "Status", "Reason", "Message"],
        conditions
            .iter()
            .map(|c| {
                vec![
                    c.r#type.clone(),
                    c.status.clone(),
                    c.reason.clone(),
                    c.message.clone(),
                ]
            })
            .collect(),
    ));
    out
}

/// The fields the request left out that changed how pods were counted, one per field and
/// consequence: the path, the pods (the server lists at most 10 names and counts all), and
/// what the Kubernetes rules did. Nothing when there are none, so that a complete request
/// prints as before.
fn describe_warnings(warnings: &[api::InputWarning]) -> String {
    if warnings.is_empty() {
        return String::new();
    }
    let mut out = String::from("Warnings:\n");
    for w in warnings {
        let total = usize::try_from(w.pods_total)
            .unwrap_or(usize::MAX)
            .max(w.pods.len());
        let noun = if total == 1 { "pod" } else { "pods" };
        let more = total - w.pods.len();
        let names = if more > 0 {
            format!("{} and {more} more", w.pods.join(", "))
        } else {
            w.pods.join(", ")
        };
        let _ = writeln!(out, "  {}: {total} {noun} ({names})", w.field);
        let _ = writeln!(out, "    {}", w.message);
    }
    out
}

/// Why the decision came out as it did: the reconciliation branch, each metric's proposal or
/// failure with its pod groups, stabilization and the limits.
fn describe_explanation(
    explanation: Option<&api::Explanation>,
    metrics: &[api::MetricStatus],
) -> String {
    let mut out = String::from("Explanation:\n");
    let optional = |v: Option<i32>| v.map_or_else(|| "<none>".to_owned(), |v| v.to_string());
    let text = |s: &str| {
        if s.is_empty() {
            "<none>".to_owned()
        } else {
            s.to_owned()
        }
    };
    if let Some(e) = explanation {
        out.push_str(&aligned(&[
            ("  Path:".to_owned(), text(&e.path)),
            (
                "  Prenormalized replicas:".to_owned(),
                optional(e.prenormalized_replicas),
            ),
            (
                "  Stabilized replicas:".to_owned(),
                optional(e.stabilized_replicas),
            ),
            ("  Scale-up limit:".to_owned(), optional(e.scale_up_limit)),
            (
                "  Scale-down limit:".to_owned(),
                optional(e.scale_down_limit),
            ),
            ("  Limited by:".to_owned(), text(&e.limited_by)),
            ("  Rescale reason:".to_owned(), text(&e.rescale_reason)),
            ("  Error:".to_owned(), text(&e.error)),
        ]));
    } else {
        out.push_str("  <none>\n");
    }
    if !metrics.is_empty() {
        out.push_str("  Metric proposals:\n");
        let rows = metrics
            .iter()
            .map(|m| {
                let proposal = match m.proposed_replicas {
                    Some(r) => r.to_string(),
                    None => format!("failed ({}): {}", text(&m.error_reason), m.error),
                };
                let groups = m.pod_groups.as_ref();
                let names = |f: fn(&api::PodGroups) -> &Vec<String>| {
                    groups.map_or_else(|| "-".to_owned(), |g| list(f(g)))
                };
                vec![
                    metric_name(m),
                    proposal,
                    groups.map_or_else(|| "-".to_owned(), |g| g.ready_count.to_string()),
                    names(|g| &g.unready),
                    names(|g| &g.missing),
                    names(|g| &g.ignored),
                ]
            })
            .collect();
        let rendered = table(
            &[
                "Metric", "Replicas", "Ready", "Unready", "Missing", "Ignored",
            ],
            rows,
        );
        for line in rendered.lines() {
            let _ = writeln!(out, "  {line}");
        }
    }
    out
}

fn metric_name(m: &api::MetricStatus) -> String {
    if m.container.is_empty() {
        m.name.clone()
    } else {
        format!("{}/{}", m.name, m.container)
    }
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "<none>".to_owned()
    } else {
        names.join(",")
    }
}

/// `label value` rows with the values in one column.
fn aligned(rows: &[(String, String)]) -> String {
    let width = rows
        .iter()
        .map(|(label, _)| label.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (label, value) in rows {
        let line = format!("{label:<width$}  {value}");
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A kubectl-style table, indented by two spaces, headers underlined with dashes.
fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    if rows.is_empty() {
        return "  <none>\n".to_owned();
    }
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let underline: Vec<String> = headers
        .iter()
        .map(|h| "-".repeat(h.chars().count()))
        .collect();
    let header_row: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    let mut out = String::new();
    for row in std::iter::once(&header_row)
        .chain(std::iter::once(&underline))
        .chain(&rows)
    {
        let mut line = String::from("  ");
        for (cell, width) in row.iter().zip(&widths) {
            let _ = write!(line, "{cell:<width$}  ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests;
