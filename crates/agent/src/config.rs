//! The agent's configuration file (TOML, or YAML by extension): the server, the defaults,
//! Prometheus, and one entry per target.
//!
//! Each target is read on its own: a target with a mistake (an unknown field, a spec the
//! server would refuse, a bad duration) is reported with its index, key and field, and
//! skipped, while the others run. Only a file that cannot be parsed at all is refused whole.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

use autoscaled_wire::pb::v1 as pb;
use serde::Deserialize;
use serde_json::Value;

/// The default sync period, as the controller manager's `--horizontal-pod-autoscaler-sync-period`.
pub const DEFAULT_SYNC_PERIOD: Duration = Duration::from_secs(15);

/// A configuration file that cannot be read or parsed at all.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
}

/// The whole file: what applies to every target, the targets that are valid, and the
/// mistakes of the others.
#[derive(Clone, Debug)]
pub struct Config {
    pub server: ServerConfig,
    pub metrics_listen: Option<String>,
    /// Delete a target's history on the server when it is removed from the file.
    pub delete_removed: bool,
    pub prometheus: Option<PrometheusConfig>,
    pub targets: Vec<Target>,
    /// One line per target that was skipped: `targets[2] (web): unknown field ...`.
    pub rejected: Vec<String>,
}

/// Where the service is and how to reach it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// `host:port` or a URI (`https://` needs `ca`).
    #[serde(default = "default_addr")]
    pub addr: String,
    /// CA certificates (PEM) to verify the server with; turns TLS on.
    pub ca: Option<PathBuf>,
    /// Client certificate and key (PEM) for mTLS.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// A file holding the bearer token (read at each (re)load, never logged).
    pub token_file: Option<PathBuf>,
    /// Per call.
    #[serde(default = "default_call_timeout", with = "duration")]
    pub timeout: Duration,
}

fn default_addr() -> String {
    "http://127.0.0.1:50051".to_owned()
}

fn default_call_timeout() -> Duration {
    Duration::from_secs(10)
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            addr: default_addr(),
            ca: None,
            cert: None,
            key: None,
            token_file: None,
            timeout: default_call_timeout(),
        }
    }
}

/// Prometheus' HTTP API (instant queries).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrometheusConfig {
    /// e.g. `http://127.0.0.1:9090`.
    pub url: String,
    /// Per query.
    #[serde(default = "default_query_timeout", with = "duration")]
    pub timeout: Duration,
}

fn default_query_timeout() -> Duration {
    Duration::from_secs(5)
}

/// The file's top level.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTop {
    #[serde(default)]
    server: Option<ServerConfig>,
    #[serde(default)]
    agent: Option<AgentDefaults>,
    #[serde(default)]
    prometheus: Option<PrometheusConfig>,
    /// Read one by one (`TargetFile`), so that one mistake skips one target.
    #[serde(default, alias = "target")]
    targets: Vec<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentDefaults {
    #[serde(default, with = "opt_duration")]
    sync_period: Option<Duration>,
    /// `dry_run` is the field's earlier name.
    #[serde(default, alias = "dry_run")]
    shadow: Option<bool>,
    #[serde(default)]
    metrics_listen: Option<String>,
    #[serde(default)]
    delete_removed: bool,
}

/// One target as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetFile {
    key: String,
    /// The HorizontalSpec in proto3 JSON field names (`max_replicas`, `metrics`, `behavior`);
    /// with `policy`, merged over the policy's by the server.
    #[serde(default)]
    spec: Option<Value>,
    /// A policy's name (PutPolicy): its spec is the base, `spec` is merged over it.
    #[serde(default)]
    policy: Option<String>,
    #[serde(default, with = "opt_duration")]
    sync_period: Option<Duration>,
    /// `dry_run` is the field's earlier name.
    #[serde(default, alias = "dry_run")]
    shadow: Option<bool>,
    /// A command printing the current replica count (the scheduler's desired count).
    #[serde(default)]
    replicas: Option<CommandFile>,
    /// Instances from Prometheus.
    #[serde(default)]
    pods: Option<PodsFile>,
    /// One query per spec metric, by the metric's name (the resource for Resource metrics):
    /// the query, or `{ query, window }`.
    #[serde(default)]
    metrics: BTreeMap<String, Value>,
    /// Instead of Prometheus: a command printing a RecommendRequest in proto3 JSON.
    #[serde(default)]
    source: Option<CommandFile>,
    actuator: ActuatorFile,
    /// This target's Prometheus URL, if not the file's.
    #[serde(default)]
    prometheus: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommandFile {
    command: Vec<String>,
    #[serde(default, with = "opt_duration")]
    timeout: Option<Duration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PodsFile {
    /// One series per instance; value 1: ready.
    ready: String,
    /// Unix seconds the instance started, per instance.
    #[serde(default)]
    start_time: Option<String>,
    /// The label naming the instance.
    #[serde(default = "default_label")]
    label: String,
    /// Requests per resource: a number is milli-units for every instance, a quantity
    /// (`"500m"`, `"1"`, `"2Gi"`) the same in Kubernetes' units, any other string a query
    /// (base units per instance).
    #[serde(default)]
    requests: BTreeMap<String, Value>,
}

fn default_label() -> String {
    "instance".to_owned()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActuatorFile {
    #[serde(default)]
    command: Option<Vec<String>>,
    #[serde(default)]
    webhook: Option<String>,
    #[serde(default, with = "opt_duration")]
    timeout: Option<Duration>,
    /// Webhook: attempts after the first.
    #[serde(default)]
    retries: Option<u32>,
    /// Webhook: the first wait between attempts, doubled each time.
    #[serde(default, with = "opt_duration")]
    backoff: Option<Duration>,
}

/// A command: argv (no shell), with `{replicas}`, `{current}` and `{key}` replaced.
#[derive(Clone, Debug, PartialEq)]
pub struct CommandSpec {
    pub argv: Vec<String>,
    pub timeout: Duration,
}

/// How a target's observations are gathered.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    Prometheus(PrometheusSource),
    Command(CommandSpec),
}

/// A target observed through Prometheus: where, and its queries.
#[derive(Clone, Debug, PartialEq)]
pub struct PrometheusSource {
    pub url: String,
    pub timeout: Duration,
    pub pods: Option<PodQueries>,
    /// Spec metric name → its query.
    pub metrics: BTreeMap<String, MetricQuery>,
}

/// One metric's query, and the window its per-instance samples were measured over.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricQuery {
    pub query: String,
    /// As written; a Resource metric without one takes [`DEFAULT_RESOURCE_WINDOW`].
    pub window: Option<Duration>,
}

/// The window a Resource metric's samples carry unless the file says otherwise: what
/// metrics-server reports with its default `--metric-resolution` (15 s), the pipeline whose
/// samples Kubernetes' CPU start-up rule was written for (`groupPods`: a sample counts once
/// its window lies after the pod's Ready transition). The 1-minute default the server applies
/// to a sample without a window belongs to the custom metrics path.
pub const DEFAULT_RESOURCE_WINDOW: Duration = Duration::from_secs(15);

/// The per-instance queries.
#[derive(Clone, Debug, PartialEq)]
pub struct PodQueries {
    pub ready: String,
    pub start_time: Option<String>,
    pub label: String,
    pub requests: BTreeMap<String, Request>,
}

/// A resource request of every instance.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    Milli(i64),
    Query(String),
}

/// What applies a decision.
#[derive(Clone, Debug, PartialEq)]
pub enum Actuator {
    Command(CommandSpec),
    Webhook {
        url: String,
        timeout: Duration,
        retries: u32,
        backoff: Duration,
    },
}

/// One valid target.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    pub key: String,
    /// The spec as written: whole, or (with `policy`) the fields merged over the policy's.
    pub spec: pb::HorizontalSpec,
    pub policy: Option<String>,
    pub sync_period: Duration,
    /// Decisions are recorded as if applied, and nothing is scaled (the server's shadow mode).
    pub shadow: bool,
    pub replicas: Option<CommandSpec>,
    pub source: Source,
    pub actuator: Actuator,
}

impl Config {
    /// Reads `path` (`.yaml`/`.yml`: YAML, anything else: TOML).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let yaml = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        );
        Config::parse(&text, yaml, &path.display().to_string())
    }

    /// Parses the text of a configuration file; `origin` names it in errors.
    pub fn parse(text: &str, yaml: bool, origin: &str) -> Result<Config, ConfigError> {
        let parse_error = |message: String| ConfigError::Parse {
            path: origin.to_owned(),
            message,
        };
        let value: Value = if yaml {
            serde_norway::from_str(text).map_err(|e| parse_error(e.to_string()))?
        } else {
            toml::from_str(text).map_err(|e| parse_error(e.to_string().trim_end().to_owned()))?
        };
        let top: FileTop = read(value, "").map_err(parse_error)?;
        if top.prometheus.as_ref().is_some_and(|p| p.timeout.is_zero()) {
            return Err(parse_error(
                "prometheus.timeout: must be more than 0".to_owned(),
            ));
        }
        let defaults = top.agent.unwrap_or_default();
        let mut config = Config {
            server: top.server.unwrap_or_default(),
            metrics_listen: defaults.metrics_listen.clone(),
            delete_removed: defaults.delete_removed,
            prometheus: top.prometheus,
            targets: Vec::new(),
            rejected: Vec::new(),
        };
        let mut keys = std::collections::BTreeSet::new();
        for (i, raw) in top.targets.into_iter().enumerate() {
            let name = raw
                .get("key")
                .and_then(Value::as_str)
                .map_or_else(|| "no key".to_owned(), str::to_owned);
            match target(raw, &defaults, config.prometheus.as_ref()) {
                Ok(t) if !keys.insert(t.key.clone()) => config.rejected.push(format!(
                    "targets[{i}] ({name}): key: a second target with this key"
                )),
                Ok(t) => config.targets.push(t),
                Err(e) => config.rejected.push(format!("targets[{i}] ({name}): {e}")),
            }
        }
        Ok(config)
    }
}

/// `value` as a `T`, with a failure naming the field by its path (`spec.metrics[0].type`,
/// `sync_period`), under `prefix` when one is given.
fn read<T: serde::de::DeserializeOwned>(value: Value, prefix: &str) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let mut path = e.path().to_string();
        let inner = e.into_inner().to_string();
        // An unknown field is named by the message itself: the path is where it stands.
        if inner.starts_with("unknown field")
            && let Some(field) = inner.split('`').nth(1)
            && (path == field || path.ends_with(&format!(".{field}")))
        {
            path = path
                .strip_suffix(field)
                .unwrap_or("")
                .trim_end_matches('.')
                .to_owned();
            if path.is_empty() {
                path = ".".to_owned();
            }
        }
        match (prefix.is_empty(), path.as_str()) {
            (true, ".") => inner,
            (true, _) => format!("{path}: {inner}"),
            (false, ".") => format!("{prefix}: {inner}"),
            (false, _) => format!("{prefix}.{path}: {inner}"),
        }
    })
}

/// A metric's entry: the query, or `{ query, window }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MetricTable {
    query: String,
    #[serde(default, with = "opt_duration")]
    window: Option<Duration>,
}

fn metric_query(name: &str, value: Value) -> Result<MetricQuery, String> {
    match value {
        Value::String(query) => Ok(MetricQuery {
            query,
            window: None,
        }),
        table @ Value::Object(_) => {
            let t: MetricTable = read(table, &format!("metrics.{name}"))?;
            if t.window.is_some_and(|w| w.is_zero()) {
                return Err(format!("metrics.{name}.window: must be more than 0"));
            }
            Ok(MetricQuery {
                query: t.query,
                window: t.window,
            })
        }
        _ => Err(format!(
            "metrics.{name}: a query (string) or {{ query = \"...\", window = \"15s\" }}"
        )),
    }
}

/// A `pods.requests` entry: a number (milli-units), a Kubernetes quantity, or a query.
fn request(resource: &str, value: Value) -> Result<Request, String> {
    match value {
        Value::Number(n) => n
            .as_i64()
            .filter(|m| *m >= 0)
            .map(Request::Milli)
            .ok_or(format!(
                "pods.requests.{resource}: a number is milli-units, a non-negative integer"
            )),
        Value::String(text) => match autoscaled_ctl::kube::quantity::parse_milli(&text) {
            Ok(m) if m >= 0 => Ok(Request::Milli(m)),
            Ok(_) => Err(format!("pods.requests.{resource}: {text:?} is negative")),
            // Anything that is not a quantity is a query (`500m` is no PromQL expression).
            Err(_) => Ok(Request::Query(text)),
        },
        _ => Err(format!(
            "pods.requests.{resource}: a number (milli-units), a quantity (\"500m\") or a query (string)"
        )),
    }
}

/// An http:// URL that parses, with a host (the agent's HTTP client speaks plain HTTP). The
/// error never shows the URL's credentials or query, even when it does not parse.
fn http_url(url: &str, field: &str) -> Result<(), String> {
    let uri: hyper::Uri = url
        .parse()
        .map_err(|e| format!("{field}: {} is not a URL: {e}", crate::http::shown(url)))?;
    if uri.scheme_str() != Some("http") || uri.host().is_none() {
        return Err(format!(
            "{field}: an http:// URL with a host (https is not supported: put a TLS proxy on loopback)"
        ));
    }
    Ok(())
}

/// Per-instance metric types: the ones whose samples are the pods'.
fn per_pod(metric: &pb::MetricSpec) -> bool {
    metric.r#type == pb::MetricSourceType::Resource as i32
        || metric.r#type == pb::MetricSourceType::ContainerResource as i32
        || metric.r#type == pb::MetricSourceType::Pods as i32
}

/// The checks between a spec's metrics and a Prometheus source's queries, each naming the
/// field: at load when the file gives the metrics, each period when a policy does.
pub fn check_metrics(
    metrics: &[pb::MetricSpec],
    queries: &BTreeMap<String, MetricQuery>,
    pods: Option<&PodQueries>,
) -> Result<(), String> {
    if metrics.is_empty() {
        return Err(
            "spec.metrics: give the metrics (the agent has no default cpu query)".to_owned(),
        );
    }
    for metric in metrics {
        let name = &metric.name;
        let Some(query) = queries.get(name) else {
            return Err(format!(
                "metrics.{name}: the spec's metric {name:?} has no query"
            ));
        };
        if metric.r#type == pb::MetricSourceType::ContainerResource as i32 {
            return Err(format!(
                "metrics.{name}: ContainerResource metrics need a command source"
            ));
        }
        if query.window.is_some() && !per_pod(metric) {
            return Err(format!(
                "metrics.{name}.window: only per-instance metrics (Resource, Pods) carry a window"
            ));
        }
        if per_pod(metric) && pods.is_none() {
            return Err(format!(
                "pods: the {name} metric is per instance: give pods.ready (one series per instance)"
            ));
        }
        // Kubernetes counts no pod without a start time for cpu (`groupPods`: unready).
        if metric.r#type == pb::MetricSourceType::Resource as i32
            && name == "cpu"
            && pods.is_some_and(|p| p.start_time.is_none())
        {
            return Err("pods.start_time: a cpu metric needs each instance's start time (e.g. process_start_time_seconds): Kubernetes counts a pod without one as unready for cpu".to_owned());
        }
        let utilization = metric
            .target
            .as_ref()
            .is_some_and(|t| t.r#type == pb::MetricTargetType::Utilization as i32);
        if utilization && pods.is_some_and(|p| !p.requests.contains_key(name)) {
            return Err(format!(
                "pods.requests.{name}: a Utilization target is a share of each instance's request: give it (e.g. requests = {{ {name} = \"500m\" }})"
            ));
        }
    }
    for name in queries.keys() {
        if !metrics.iter().any(|m| &m.name == name) {
            return Err(format!(
                "metrics.{name}: no metric of the spec has this name"
            ));
        }
    }
    Ok(())
}

/// One target, checked: its fields, its spec (as the server converts it: the same field
/// names in the same errors), its source and actuator.
fn target(
    raw: Value,
    defaults: &AgentDefaults,
    prometheus: Option<&PrometheusConfig>,
) -> Result<Target, String> {
    let file: TargetFile = read(raw, "")?;
    let spec = match (file.spec, &file.policy) {
        (None, None) => {
            return Err(
                "spec: give the spec, or a policy (and the fields to merge over it)".to_owned(),
            );
        }
        (spec, None) => spec_checked(&file.key, spec.unwrap_or(Value::Null))?,
        (spec, Some(policy)) => {
            if policy.is_empty() {
                return Err("policy: the policy's name".to_owned());
            }
            spec_parsed(&file.key, spec.unwrap_or_else(|| serde_json::json!({})))?
        }
    };
    let sync_period = file
        .sync_period
        .or(defaults.sync_period)
        .unwrap_or(DEFAULT_SYNC_PERIOD);
    if sync_period < Duration::from_millis(100) {
        return Err("sync_period: must be at least 100ms".to_owned());
    }
    let command = |c: CommandFile, field: &str, default: Duration| {
        if c.command.is_empty() || c.command[0].is_empty() {
            return Err(format!("{field}.command: must name a program"));
        }
        let timeout = c.timeout.unwrap_or(default);
        if timeout.is_zero() {
            return Err(format!("{field}.timeout: must be more than 0"));
        }
        Ok(CommandSpec {
            argv: c.command,
            timeout,
        })
    };
    let source = match (file.source, file.pods, file.metrics.is_empty()) {
        (Some(c), None, true) if file.prometheus.is_none() => {
            Source::Command(command(c, "source", Duration::from_secs(10))?)
        }
        (Some(_), _, _) => {
            return Err("source: a command source takes no pods, metrics or prometheus".to_owned());
        }
        (None, pods, _) => {
            let url = file
                .prometheus
                .clone()
                .or_else(|| prometheus.map(|p| p.url.clone()))
                .ok_or("metrics: queries need a Prometheus ([prometheus] url, or the target's prometheus)")?;
            http_url(&url, "prometheus")?;
            let pods = pods
                .map(|p| -> Result<PodQueries, String> {
                    let requests = p
                        .requests
                        .into_iter()
                        .map(|(resource, v)| Ok((resource.clone(), request(&resource, v)?)))
                        .collect::<Result<_, String>>()?;
                    Ok(PodQueries {
                        ready: p.ready,
                        start_time: p.start_time,
                        label: p.label,
                        requests,
                    })
                })
                .transpose()?;
            let metrics = file
                .metrics
                .into_iter()
                .map(|(name, v)| Ok((name.clone(), metric_query(&name, v)?)))
                .collect::<Result<BTreeMap<_, _>, String>>()?;
            // With a policy and no metrics of its own, the policy's come from the server,
            // and the same checks run each period.
            if file.policy.is_none() || !spec.metrics.is_empty() {
                check_metrics(&spec.metrics, &metrics, pods.as_ref())?;
            }
            Source::Prometheus(PrometheusSource {
                url,
                timeout: prometheus.map_or_else(default_query_timeout, |p| p.timeout),
                pods,
                metrics,
            })
        }
    };
    if matches!(source, Source::Prometheus(_)) && file.replicas.is_none() {
        return Err("replicas: give the command that prints the current replica count (the scheduler's, not Prometheus' instance count, which lags a scale by seconds)".to_owned());
    }
    let replicas = file
        .replicas
        .map(|c| command(c, "replicas", Duration::from_secs(10)))
        .transpose()?;
    let a = file.actuator;
    let actuator = match (a.command, a.webhook) {
        (Some(argv), None) => {
            if a.retries.is_some() || a.backoff.is_some() {
                return Err("actuator: retries and backoff are for a webhook".to_owned());
            }
            Actuator::Command(command(
                CommandFile {
                    command: argv,
                    timeout: a.timeout,
                },
                "actuator",
                Duration::from_secs(60),
            )?)
        }
        (None, Some(url)) => {
            http_url(&url, "actuator.webhook")?;
            let timeout = a.timeout.unwrap_or(Duration::from_secs(10));
            if timeout.is_zero() {
                return Err("actuator.timeout: must be more than 0".to_owned());
            }
            Actuator::Webhook {
                url,
                timeout,
                retries: a.retries.unwrap_or(3).min(10),
                backoff: a
                    .backoff
                    .unwrap_or(Duration::from_secs(1))
                    .min(Duration::from_secs(60)),
            }
        }
        _ => return Err("actuator: give exactly one of command and webhook".to_owned()),
    };
    Ok(Target {
        key: file.key,
        spec,
        policy: file.policy,
        sync_period,
        shadow: file.shadow.or(defaults.shadow).unwrap_or(false),
        replicas,
        source,
        actuator,
    })
}

/// The spec from proto3 JSON (Kubernetes quantities accepted), its fields named `spec.…`.
fn spec_parsed(key: &str, spec: Value) -> Result<pb::HorizontalSpec, String> {
    let request = serde_json::json!({ "target_key": key, "spec": spec });
    let request = autoscaled_ctl::client::parse_recommend_request(&request.to_string(), "spec")
        .map_err(|e| match e {
            // The path names the field (`spec.metrics[0].target.type`).
            autoscaled_ctl::client::ClientError::Json { detail, .. } => {
                format!("{detail} (spec is a HorizontalSpec in proto3 JSON)")
            }
            other => other.to_string(),
        })?;
    Ok(request.spec.unwrap_or_default())
}

/// The whole spec, also checked by the server's own conversion (the same violations, named
/// `spec.…`, that Recommend would answer).
fn spec_checked(key: &str, spec: Value) -> Result<pb::HorizontalSpec, String> {
    if spec.is_null() {
        return Err("spec: missing".to_owned());
    }
    let spec = spec_parsed(key, spec)?;
    let limits = autoscaled_wire::Limits::default();
    let context = autoscaled_wire::convert::Context {
        limits: &limits,
        trust_request_time: false,
        server_now: autoscaled_engine::time::Time::from_unix_secs(1),
        history_retention: Duration::from_secs(3600),
        scale_to_zero: true,
    };
    let check = pb::RecommendRequest {
        target_key: key.to_owned(),
        current_replicas: 1,
        spec: Some(spec.clone()),
        ..Default::default()
    };
    if let Err(e) = autoscaled_wire::convert::recommend_request(check, &context) {
        return Err(e.to_string());
    }
    Ok(spec)
}

/// `15s`, `500ms`, `2m`, `1h`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 15s, 500ms, 2m)"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{text:?}: the unit is one of ms, s, m, h")),
    };
    if !(0.0..=86_400.0 * 7.0).contains(&secs) {
        return Err(format!("{text:?}: out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

mod duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, de::Error};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        super::parse_duration(&text).map_err(D::Error::custom)
    }
}

mod opt_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, de::Error};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let text = Option::<String>::deserialize(d)?;
        text.map(|t| super::parse_duration(&t).map_err(D::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[server]
addr = "127.0.0.1:50051"

[prometheus]
url = "http://127.0.0.1:9090"

[[targets]]
key = "demo/web"
sync_period = "2s"
replicas = { command = ["scale.sh", "count"] }
actuator = { command = ["scale.sh", "set", "{replicas}"], timeout = "20s" }
pods = { ready = 'up{job="web"}', start_time = 'process_start_time_seconds{job="web"}' }
metrics = { inflight = 'inflight{job="web"}' }
spec = { max_replicas = 10, metrics = [{ type = "METRIC_SOURCE_TYPE_PODS", name = "inflight", target = { type = "METRIC_TARGET_TYPE_AVERAGE_VALUE", average_value_milli = 5000 } }] }
"#;

    #[test]
    fn a_good_target_is_read_whole() {
        let c = Config::parse(GOOD, false, "agent.toml").unwrap();
        assert!(c.rejected.is_empty(), "{:?}", c.rejected);
        let t = &c.targets[0];
        assert_eq!(t.key, "demo/web");
        assert_eq!(t.sync_period, Duration::from_secs(2));
        assert_eq!(t.spec.max_replicas, 10);
        assert!(
            matches!(&t.source, Source::Prometheus(PrometheusSource { pods: Some(p), .. }) if p.label == "instance")
        );
        assert!(
            matches!(&t.actuator, Actuator::Command(c) if c.timeout == Duration::from_secs(20))
        );
    }

    /// One target with a typo is skipped with its field named; the others stay.
    #[test]
    fn a_typo_skips_one_target_and_names_the_field() {
        let second = GOOD
            .split("[[targets]]")
            .nth(1)
            .unwrap()
            .replace("demo/web", "demo/typo")
            .replace("replicas = {", "replcas = {");
        let text = format!("{GOOD}\n[[targets]]{second}");
        let c = Config::parse(&text, false, "agent.toml").unwrap();
        assert_eq!(c.targets.len(), 1);
        assert_eq!(c.rejected.len(), 1, "{:?}", c.rejected);
        assert!(
            c.rejected[0].starts_with("targets[1] (demo/typo): unknown field `replcas`"),
            "{}",
            c.rejected[0]
        );
    }

    #[test]
    fn a_spec_the_server_would_refuse_is_named_at_load() {
        let text = GOOD.replace("max_replicas = 10", "max_replicas = 0");
        let c = Config::parse(&text, false, "agent.toml").unwrap();
        assert!(c.targets.is_empty());
        assert!(
            c.rejected[0].contains("spec.max_replicas"),
            "{}",
            c.rejected[0]
        );
    }

    #[test]
    fn schedules_and_predictive_are_read_and_their_mistakes_named() {
        let extra = r#"max_replicas = 10, predictive = { mode = "PREDICTIVE_MODE_FORECAST_ONLY", startup_delay = "240s" }, schedules = [{ name = "day", start = "0 9 * * 1-5", end = "0 17 * * 1-5", time_zone = "Europe/Berlin", min_replicas = 4 }]"#;
        let c = Config::parse(
            &GOOD.replace("max_replicas = 10", extra),
            false,
            "agent.toml",
        )
        .unwrap();
        assert!(c.rejected.is_empty(), "{:?}", c.rejected);
        let spec = &c.targets[0].spec;
        let p = spec.predictive.as_ref().unwrap();
        assert_eq!(p.mode, pb::PredictiveMode::ForecastOnly as i32);
        assert_eq!(p.startup_delay.unwrap().seconds, 240);
        assert_eq!(spec.schedules[0].min_replicas, Some(4));
        for (from, to, field) in [
            ("240s", "7200s", "spec.predictive.startup_delay"),
            (
                "Europe/Berlin",
                "Nowhere/Atlantis",
                "spec.schedules[0].time_zone",
            ),
        ] {
            let text = GOOD.replace("max_replicas = 10", &extra.replace(from, to));
            let c = Config::parse(&text, false, "agent.toml").unwrap();
            assert!(c.targets.is_empty(), "{to}");
            assert!(c.rejected[0].contains(field), "{}", c.rejected[0]);
        }
    }

    #[test]
    fn a_file_that_does_not_parse_is_refused_whole() {
        let e = Config::parse("[server\naddr = 1", false, "agent.toml").unwrap_err();
        assert!(e.to_string().starts_with("agent.toml: "), "{e}");
    }

    #[test]
    fn yaml_reads_the_same() {
        let yaml = r#"
prometheus: { url: "http://127.0.0.1:9090" }
targets:
  - key: demo/web
    replicas: { command: [scale.sh, count] }
    actuator: { webhook: "http://127.0.0.1:8080/scale", retries: 2 }
    pods: { ready: 'up{job="web"}' }
    metrics: { inflight: 'inflight{job="web"}' }
    spec: { max_replicas: 10, metrics: [{ type: METRIC_SOURCE_TYPE_PODS, name: inflight, target: { type: METRIC_TARGET_TYPE_AVERAGE_VALUE, average_value_milli: 5000 } }] }
"#;
        let c = Config::parse(yaml, true, "agent.yaml").unwrap();
        assert!(c.rejected.is_empty(), "{:?}", c.rejected);
        assert!(matches!(
            &c.targets[0].actuator,
            Actuator::Webhook { retries: 2, .. }
        ));
        assert_eq!(c.targets[0].sync_period, DEFAULT_SYNC_PERIOD);
    }

    fn one_target(lines: &str) -> Result<Target, String> {
        let text = format!(
            "[prometheus]\nurl = \"http://127.0.0.1:9090\"\n[[targets]]\nkey = \"t\"\nreplicas = {{ command = [\"count\"] }}\nactuator = {{ command = [\"scale\", \"{{replicas}}\"] }}\n{lines}"
        );
        let c = Config::parse(&text, false, "agent.toml").unwrap();
        match (c.targets.first(), c.rejected.first()) {
            (Some(t), None) => Ok(t.clone()),
            (_, Some(r)) => Err(r.clone()),
            (None, None) => Err("nothing".into()),
        }
    }

    const CPU: &str = r#"spec = { max_replicas = 8, metrics = [{ type = "METRIC_SOURCE_TYPE_RESOURCE", name = "cpu", target = { type = "METRIC_TARGET_TYPE_UTILIZATION", average_utilization = 50 } }] }"#;

    /// Quantities where milli-units are expected; windows per metric; what a CPU Utilization
    /// target needs, each named.
    #[test]
    fn cpu_targets_take_quantities_and_windows_and_name_what_they_lack() {
        let pods = r#"pods = { ready = 'up', start_time = 'process_start_time_seconds', requests = { cpu = "1000m", memory = "1Gi", gpu = 2, custom = 'request_query' } }"#;
        let t = one_target(&format!(
            "{pods}\nmetrics = {{ cpu = {{ query = 'rate(x[1m])', window = \"1m\" }} }}\n{CPU}"
        ))
        .unwrap();
        let Source::Prometheus(PrometheusSource { pods, metrics, .. }) = &t.source else {
            panic!("{t:?}")
        };
        let requests = &pods.as_ref().unwrap().requests;
        assert_eq!(requests["cpu"], Request::Milli(1000));
        assert_eq!(requests["memory"], Request::Milli(1_073_741_824_000));
        assert_eq!(requests["gpu"], Request::Milli(2));
        assert_eq!(requests["custom"], Request::Query("request_query".into()));
        assert_eq!(metrics["cpu"].window, Some(Duration::from_secs(60)));

        let no_start = one_target(&format!(
            "pods = {{ ready = 'up', requests = {{ cpu = 500 }} }}\nmetrics = {{ cpu = 'x' }}\n{CPU}"
        ))
        .unwrap_err();
        assert!(no_start.contains("pods.start_time"), "{no_start}");
        let no_request = one_target(&format!(
            "pods = {{ ready = 'up', start_time = 's' }}\nmetrics = {{ cpu = 'x' }}\n{CPU}"
        ))
        .unwrap_err();
        assert!(no_request.contains("pods.requests.cpu"), "{no_request}");
        let external_window = one_target(
            r#"metrics = { queue = { query = 'q', window = "15s" } }
spec = { max_replicas = 4, metrics = [{ type = "METRIC_SOURCE_TYPE_EXTERNAL", name = "queue", target = { type = "METRIC_TARGET_TYPE_VALUE", value_milli = 1000 } }] }"#,
        )
        .unwrap_err();
        assert!(
            external_window.contains("metrics.queue.window"),
            "{external_window}"
        );
    }

    /// Messages name the field by its path: a bad enum deep in the spec, a duration without a
    /// unit, a malformed webhook URL (without its credentials or query).
    #[test]
    fn messages_name_the_field_and_hide_secrets() {
        let bad_enum = one_target(&CPU.replace("METRIC_TARGET_TYPE_UTILIZATION", "AVERAGE_VALUE"))
            .unwrap_err();
        assert!(
            bad_enum.contains("spec.metrics[0].target.type: ")
                && bad_enum.contains("AVERAGE_VALUE")
                && bad_enum.contains("HorizontalSpec"),
            "{bad_enum}"
        );
        let duration = one_target(&format!("sync_period = \"15\"\n{CPU}")).unwrap_err();
        assert!(duration.contains("sync_period: "), "{duration}");
        let text = "[[targets]]\nkey = \"w\"\nsource = { command = [\"cat\"] }\nactuator = { webhook = \"http://u:PASS@bad host/x?token=Q\" }\nspec = { max_replicas = 4 }\n";
        let c = Config::parse(text, false, "agent.toml").unwrap();
        let line = &c.rejected[0];
        assert!(line.contains("actuator.webhook"), "{line}");
        assert!(
            !line.contains("PASS") && !line.contains("token=Q"),
            "{line}"
        );
    }

    /// A target may name a policy instead of (or under) its spec; `dry_run` is shadow's
    /// earlier name.
    #[test]
    fn policies_and_shadow() {
        let t = one_target("policy = \"web-tier\"\nshadow = true\nmetrics = { cpu = 'x' }\npods = { ready = 'up' }").unwrap();
        assert_eq!(t.policy.as_deref(), Some("web-tier"));
        assert!(t.shadow && t.spec.metrics.is_empty());
        let t = one_target(&format!(
            "policy = \"web-tier\"\ndry_run = true\npods = {{ ready = 'up', start_time = 's', requests = {{ cpu = 500 }} }}\nmetrics = {{ cpu = 'x' }}\n{}",
            CPU.replace("max_replicas = 8, ", "")
        ))
        .unwrap();
        assert!(t.shadow && t.spec.max_replicas == 0 && t.spec.metrics.len() == 1);
        let neither = one_target("metrics = { cpu = 'x' }").unwrap_err();
        assert!(
            neither.contains("spec: give the spec, or a policy"),
            "{neither}"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("15").is_err());
        assert!(parse_duration("s").is_err());
    }
}
