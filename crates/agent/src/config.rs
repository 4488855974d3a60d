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

use autoscaled::pb::v1 as pb;
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
    #[serde(default)]
    dry_run: Option<bool>,
    #[serde(default)]
    metrics_listen: Option<String>,
}

/// One target as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetFile {
    key: String,
    /// The HorizontalSpec in proto3 JSON field names (`max_replicas`, `metrics`, `behavior`).
    spec: Value,
    #[serde(default, with = "opt_duration")]
    sync_period: Option<Duration>,
    #[serde(default)]
    dry_run: Option<bool>,
    /// A command printing the current replica count (the scheduler's desired count).
    #[serde(default)]
    replicas: Option<CommandFile>,
    /// Instances from Prometheus.
    #[serde(default)]
    pods: Option<PodsFile>,
    /// One query per spec metric, by the metric's name (the resource for Resource metrics).
    #[serde(default)]
    metrics: BTreeMap<String, String>,
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
    /// Requests per resource: a number is milli-units for every instance, a string a query
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
    Prometheus {
        url: String,
        timeout: Duration,
        pods: Option<PodQueries>,
        /// Spec metric name → query.
        metrics: BTreeMap<String, String>,
    },
    Command(CommandSpec),
}

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
    pub spec: pb::HorizontalSpec,
    pub sync_period: Duration,
    pub dry_run: bool,
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
        let top: FileTop = serde_json::from_value(value).map_err(|e| parse_error(e.to_string()))?;
        if top.prometheus.as_ref().is_some_and(|p| p.timeout.is_zero()) {
            return Err(parse_error(
                "prometheus.timeout: must be more than 0".to_owned(),
            ));
        }
        let defaults = top.agent.unwrap_or_default();
        let mut config = Config {
            server: top.server.unwrap_or_default(),
            metrics_listen: defaults.metrics_listen.clone(),
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

/// One target, checked: its fields, its spec (as the server converts it: the same field
/// names in the same errors), its source and actuator.
fn target(
    raw: Value,
    defaults: &AgentDefaults,
    prometheus: Option<&PrometheusConfig>,
) -> Result<Target, String> {
    let file: TargetFile = serde_json::from_value(raw).map_err(|e| e.to_string())?;
    let spec = spec(&file.key, file.spec)?;
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
    // An http:// URL that parses, with a host (the agent's HTTP client speaks plain HTTP).
    let http_url = |url: &str, field: &str| -> Result<(), String> {
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e| format!("{field}: {url:?} is not a URL: {e}"))?;
        if uri.scheme_str() != Some("http") || uri.host().is_none() {
            return Err(format!(
                "{field}: an http:// URL with a host (https is not supported: put a TLS proxy on loopback)"
            ));
        }
        Ok(())
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
                    let mut requests = BTreeMap::new();
                    for (resource, v) in p.requests {
                        let r = match v {
                            Value::Number(n) => Request::Milli(n.as_i64().filter(|m| *m >= 0).ok_or(
                                format!("pods.requests.{resource}: a number is milli-units, a non-negative integer"),
                            )?),
                            Value::String(q) => Request::Query(q),
                            _ => {
                                return Err(format!(
                                    "pods.requests.{resource}: a number (milli-units) or a query (string)"
                                ));
                            }
                        };
                        requests.insert(resource, r);
                    }
                    Ok(PodQueries {
                        ready: p.ready,
                        start_time: p.start_time,
                        label: p.label,
                        requests,
                    })
                })
                .transpose()?;
            for metric in &spec.metrics {
                let per_pod = metric.r#type == pb::MetricSourceType::Resource as i32
                    || metric.r#type == pb::MetricSourceType::ContainerResource as i32
                    || metric.r#type == pb::MetricSourceType::Pods as i32;
                if !file.metrics.contains_key(&metric.name) {
                    return Err(format!(
                        "metrics.{}: the spec's metric {:?} has no query",
                        metric.name, metric.name
                    ));
                }
                if metric.r#type == pb::MetricSourceType::ContainerResource as i32 {
                    return Err(format!(
                        "metrics.{}: ContainerResource metrics need a command source",
                        metric.name
                    ));
                }
                if per_pod && pods.is_none() {
                    return Err(format!(
                        "pods: the {} metric is per instance: give pods.ready (one series per instance)",
                        metric.name
                    ));
                }
            }
            if spec.metrics.is_empty() {
                return Err(
                    "spec.metrics: give the metrics (the agent has no default cpu query)"
                        .to_owned(),
                );
            }
            for name in file.metrics.keys() {
                if !spec.metrics.iter().any(|m| &m.name == name) {
                    return Err(format!(
                        "metrics.{name}: no metric of the spec has this name"
                    ));
                }
            }
            Source::Prometheus {
                url,
                timeout: prometheus.map_or_else(default_query_timeout, |p| p.timeout),
                pods,
                metrics: file.metrics,
            }
        }
    };
    if matches!(source, Source::Prometheus { .. }) && file.replicas.is_none() {
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
        sync_period,
        dry_run: file.dry_run.or(defaults.dry_run).unwrap_or(false),
        replicas,
        source,
        actuator,
    })
}

/// The spec from proto3 JSON, checked by the server's own conversion (the same violations,
/// named `spec.…`, that Recommend would answer).
fn spec(key: &str, spec: Value) -> Result<pb::HorizontalSpec, String> {
    let request = serde_json::json!({ "target_key": key, "spec": spec });
    let request = autoscaled_ctl::client::parse_recommend_request(&request.to_string(), "spec")
        .map_err(|e| e.to_string())?;
    let limits = autoscaled::config::Limits::default();
    let context = autoscaled::api::convert::Context {
        limits: &limits,
        trust_request_time: false,
        server_now: autoscaled::engine::time::Time::from_unix_secs(1),
        history_retention: Duration::from_secs(3600),
        scale_to_zero: true,
    };
    let mut check = request.clone();
    check.current_replicas = 1;
    if let Err(e) = autoscaled::api::convert::recommend_request(check, &context) {
        return Err(e.to_string());
    }
    request.spec.ok_or_else(|| "spec: missing".to_owned())
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
            matches!(&t.source, Source::Prometheus { pods: Some(p), .. } if p.label == "instance")
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

    #[test]
    fn durations() {
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("15").is_err());
        assert!(parse_duration("s").is_err());
    }
}
