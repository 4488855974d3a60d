//! The server's configuration: defaults, then a TOML file (`--config FILE`), then environment
//! variables `AUTOSCALED_*`, then flags (a flag beats its variable; clap reads both). This is
//! the only module that reads the environment.
//!
//! Every knob is documented with its unit and default, and `autoscaled serve --help` shows the
//! same text. `ServeArgs::load` turns the three sources into one validated [`Config`]; any
//! error is a `ConfigError`, which `main` reports and answers with exit status 64
//! (`EX_USAGE`), as linkerd2-proxy does for bad configuration.

use std::{
    fmt, fs,
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use clap::{Args, ValueEnum};
use serde::Deserialize;
use thiserror::Error;

use crate::engine::hpa::settings::Settings;

/// Default listen address: loopback only, the usual gRPC port.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:50051";
/// Default data folder, relative to the working directory.
pub(crate) const DEFAULT_DATA_DIR: &str = "./data";
/// Default relaxed-mode flush period.
pub(crate) const DEFAULT_FLUSH_INTERVAL_MS: u64 = 100;
/// Default gathering window of a strict group commit, microseconds (see
/// `store::durability`: only taken when several writes are already waiting).
pub(crate) const DEFAULT_COMMIT_DELAY_US: u64 = 1_000;
/// Upper bound of `commit_delay_us`: it adds to the latency of every write under load.
const MAX_COMMIT_DELAY_US: u64 = 100_000;
/// Default bound on the drain at shutdown.
pub(crate) const DEFAULT_SHUTDOWN_GRACE_SECS: u64 = 10;
/// Default history retention. Kubernetes' API caps stabilization windows at 3600 s and policy
/// periods at 1800 s, so one hour reaches every window a valid spec can ask for.
pub(crate) const DEFAULT_HISTORY_RETENTION_SECS: u64 = 3600;
/// Default maximum size of one decoded request (tonic's own default, 4 MiB).
pub(crate) const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
/// Default maximum number of pods in one request.
pub(crate) const DEFAULT_MAX_PODS: usize = 10_000;
/// Default maximum number of metrics in one spec.
pub(crate) const DEFAULT_MAX_METRICS: usize = 64;
/// Default maximum number of containers in one request (over all its pods).
pub(crate) const DEFAULT_MAX_CONTAINERS: usize = 100_000;
/// Default number of gRPC calls served at once (`crate::overload`).
pub(crate) const DEFAULT_MAX_CONCURRENT_REQUESTS: usize = 32;
/// Default number of calls waiting for a slot before new ones are refused.
pub(crate) const DEFAULT_MAX_QUEUED_REQUESTS: usize = 1024;
pub(crate) const DEFAULT_MAX_QUEUE_WAIT_MS: u64 = 1000;
pub(crate) const DEFAULT_MAX_BUFFERED_REQUEST_BYTES: usize = 64 * 1024 * 1024;
/// Default maximum number of VPA usage samples plus OOM events in one RecordUsage.
pub(crate) const DEFAULT_MAX_SAMPLES: usize = 100_000;
/// Default maximum length of a target key, in bytes.
pub(crate) const DEFAULT_MAX_KEY_BYTES: usize = 512;
/// Default bound on how far a VPA sample or OOM time may be ahead of the server clock.
pub(crate) const DEFAULT_VPA_MAX_CLOCK_SKEW_SECS: u64 = 300;
/// Default log filter (tracing-subscriber `EnvFilter` syntax).
pub(crate) const DEFAULT_LOG: &str = "info";
/// Default period of the check for changed TLS and authorization files.
pub(crate) const DEFAULT_SECURITY_RELOAD_SECS: u64 = 10;
/// Exit status for bad configuration (`EX_USAGE` of sysexits.h).
pub const EX_USAGE: i32 = 64;

/// Whether text logs are coloured: only when stderr is a terminal and `NO_COLOR` is unset or
/// empty (<https://no-color.org>), so a log file or a collector never gets ANSI escapes.
pub(crate) fn log_colour() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// How a Recommend waits for its write to reach the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// The response is sent only after a flush that covers the write. Concurrent requests share
    /// flushes (group commit), so the cost is one fsync per batch, not per call.
    #[default]
    Strict,
    /// The response is sent as soon as the write is in memory; the data is flushed every
    /// `flush_interval_ms`. RISK: a crash or power loss loses up to that many milliseconds of
    /// acknowledged decisions. After a restart the target's recommendations and scale events
    /// miss them, so a downscale stabilization window may not see a recent high recommendation
    /// (an early scale-down) and a rate policy may not count a recent scale event (a faster
    /// scale than the policy allows).
    Relaxed,
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Durability::Strict => "strict",
            Durability::Relaxed => "relaxed",
        })
    }
}

/// Where the history lives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// An embedded sled database in `data_dir`: one process owns it.
    #[default]
    Sled,
    /// An etcd v3 cluster shared by several replicas (see `docs/ha.md`).
    Etcd,
}

/// Default etcd endpoint (etcd's own default client URL).
pub const DEFAULT_ETCD_ENDPOINT: &str = "http://127.0.0.1:2379";
/// Default prefix of every key autoscaled writes to etcd.
pub const DEFAULT_ETCD_PREFIX: &str = "autoscaled/";

/// The etcd store's settings (used with `store = etcd`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdConfig {
    /// `--etcd-endpoints`: client URLs; the etcd client fails over between them.
    pub endpoints: Vec<String>,
    /// `--etcd-prefix`: every key starts with it, so deployments can share a cluster.
    pub prefix: String,
    /// `--etcd-ca`: the CA of the members' certificates; set, the connection uses TLS.
    pub ca: Option<PathBuf>,
    /// `--etcd-cert`: client certificate for etcd's `--client-cert-auth`.
    pub cert: Option<PathBuf>,
    /// `--etcd-key`: the private key of `cert`.
    pub key: Option<PathBuf>,
}

/// Log line format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Whether a service on the main port needs credentials (`--reflection`, `--health`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Exposure {
    /// Served to callers with an identity (a client certificate or a bearer token) when an
    /// authorization file is configured; to everyone otherwise.
    Auth,
    /// Served to everyone who can connect (TLS still applies).
    Open,
    /// Not served on the main port.
    Off,
}

/// Whether an mTLS client must present a certificate (`--tls-client-auth`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// The handshake fails without a certificate from `--tls-client-ca`.
    #[default]
    Require,
    /// A certificate, if presented, must come from `--tls-client-ca`; callers without one
    /// authenticate with a bearer token (or are anonymous, which `--authz` refuses).
    Optional,
}

/// `autoscaled serve` options. Each is also a TOML key of the same name (with `_`) in the
/// `--config` file and an `AUTOSCALED_*` variable. Absent everywhere: the documented default.
#[derive(Clone, Debug, Default, Args)]
pub(crate) struct ServeArgs {
    /// TOML configuration file; unknown keys are an error.
    #[arg(long, env = "AUTOSCALED_CONFIG", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Address to listen on (port 0: any free port; the real one is printed). [default: 127.0.0.1:50051]
    #[arg(long, env = "AUTOSCALED_LISTEN", value_name = "ADDR")]
    pub(crate) listen: Option<SocketAddr>,
    /// Where the history lives: sled (embedded, in --data-dir) or etcd (shared by several
    /// replicas, see docs/ha.md). [default: sled]
    #[arg(long, env = "AUTOSCALED_STORE", value_name = "STORE")]
    pub(crate) store: Option<StoreKind>,
    /// etcd client URLs, comma-separated (`http://` or `https://`). [default: http://127.0.0.1:2379]
    #[arg(long, env = "AUTOSCALED_ETCD_ENDPOINTS", value_name = "URLS")]
    pub(crate) etcd_endpoints: Option<String>,
    /// Prefix of every etcd key written (several deployments can share a cluster). [default: autoscaled/]
    #[arg(long, env = "AUTOSCALED_ETCD_PREFIX", value_name = "PREFIX")]
    pub(crate) etcd_prefix: Option<String>,
    /// PEM CA certificate that signed the etcd members' certificates (turns TLS on). [default: none]
    #[arg(long, env = "AUTOSCALED_ETCD_CA", value_name = "FILE")]
    pub(crate) etcd_ca: Option<PathBuf>,
    /// PEM client certificate for etcd's client-cert-auth (with --etcd-key). [default: none]
    #[arg(long, env = "AUTOSCALED_ETCD_CERT", value_name = "FILE")]
    pub(crate) etcd_cert: Option<PathBuf>,
    /// PEM private key of --etcd-cert. [default: none]
    #[arg(long, env = "AUTOSCALED_ETCD_KEY", value_name = "FILE")]
    pub(crate) etcd_key: Option<PathBuf>,
    /// Folder of the sled history database; created if missing, never replaced. [default: ./data]
    #[arg(long, env = "AUTOSCALED_DATA_DIR", value_name = "DIR")]
    pub(crate) data_dir: Option<PathBuf>,
    /// strict: answer after the write is flushed to disk (group commit); relaxed: flush
    /// periodically and risk losing the last --flush-interval-ms of decisions on a crash. [default: strict]
    #[arg(long, env = "AUTOSCALED_DURABILITY", value_name = "MODE")]
    pub(crate) durability: Option<Durability>,
    /// Relaxed mode's flush period, in milliseconds. [default: 100]
    #[arg(long, env = "AUTOSCALED_FLUSH_INTERVAL_MS", value_name = "MS")]
    pub(crate) flush_interval_ms: Option<u64>,
    /// Strict mode: when a flush is due while other writes are already waiting for one, wait
    /// this long first so that the calls being decided join it (fewer flushes, fewer bytes
    /// written per call, at most this much more latency under load; 0: flush at once).
    /// [default: 1000]
    #[arg(long, env = "AUTOSCALED_COMMIT_DELAY_US", value_name = "MICROSECONDS")]
    pub(crate) commit_delay_us: Option<u64>,
    /// Accept `evaluation_time` from requests (replays, tests); otherwise the server clock decides
    /// and a request carrying it is rejected. [default: false]
    #[arg(
        long,
        env = "AUTOSCALED_TRUST_REQUEST_TIME",
        num_args = 0..=1,
        default_missing_value = "true",
        value_name = "BOOL",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub(crate) trust_request_time: Option<bool>,
    /// Bound on the drain of in-flight requests at shutdown, in seconds. [default: 10]
    #[arg(long, env = "AUTOSCALED_SHUTDOWN_GRACE_SECS", value_name = "SECS")]
    pub(crate) shutdown_grace_secs: Option<u64>,
    /// Decisions kept per target (older ones are dropped). [default: 100]
    #[arg(long, env = "AUTOSCALED_DECISION_LOG_LEN", value_name = "N")]
    pub(crate) decision_log_len: Option<usize>,
    /// Recommendations and scale events older than this are pruned; at least 3600 (the
    /// longest stabilization window Kubernetes allows) and at least the downscale stabilization. [default: 3600]
    #[arg(long, env = "AUTOSCALED_HISTORY_RETENTION_SECS", value_name = "SECS")]
    pub(crate) history_retention_secs: Option<u64>,
    /// Decision runs that ended longer ago than this (before the target's newest decision)
    /// are dropped from the decision log. [default: 86400]
    #[arg(long, env = "AUTOSCALED_DECISION_RETENTION_SECS", value_name = "SECS")]
    pub(crate) decision_retention_secs: Option<u64>,
    /// Pod names kept per group (unready, missing, ignored) and metric in a logged decision;
    /// the totals are always kept. [default: 50]
    #[arg(long, env = "AUTOSCALED_MAX_POD_NAMES", value_name = "N")]
    pub(crate) max_pod_names: Option<usize>,
    /// sled's page cache in MiB; keep it well under the memory limit (the chart's 384 Mi
    /// limit fits the default). [default: 64]
    #[arg(long, env = "AUTOSCALED_CACHE_MB", value_name = "MIB")]
    pub(crate) cache_mb: Option<u64>,
    /// Maximum decoded request size, in bytes. [default: 4194304]
    #[arg(long, env = "AUTOSCALED_MAX_MESSAGE_BYTES", value_name = "BYTES")]
    pub(crate) max_message_bytes: Option<usize>,
    /// Maximum pods in one request. [default: 10000]
    #[arg(long, env = "AUTOSCALED_MAX_PODS", value_name = "N")]
    pub(crate) max_pods: Option<usize>,
    /// Maximum metrics in one spec. [default: 64]
    #[arg(long, env = "AUTOSCALED_MAX_METRICS", value_name = "N")]
    pub(crate) max_metrics: Option<usize>,
    /// Maximum target key length, in bytes. [default: 512]
    #[arg(long, env = "AUTOSCALED_MAX_KEY_BYTES", value_name = "BYTES")]
    pub(crate) max_key_bytes: Option<usize>,
    /// Maximum VPA usage samples plus OOM events in one RecordUsage, and pod metric, request
    /// and usage values in one Recommend. [default: 100000]
    #[arg(long, env = "AUTOSCALED_MAX_SAMPLES", value_name = "N")]
    pub(crate) max_samples: Option<usize>,
    /// Maximum containers in one request, over all its pods (and VPA container policies). [default: 100000]
    #[arg(long, env = "AUTOSCALED_MAX_CONTAINERS", value_name = "N")]
    pub(crate) max_containers: Option<usize>,
    /// gRPC calls served at once; more wait in a bounded queue. [default: 32]
    #[arg(long, env = "AUTOSCALED_MAX_CONCURRENT_REQUESTS", value_name = "N")]
    pub(crate) max_concurrent_requests: Option<usize>,
    /// Calls waiting for a slot at most; beyond, a call is refused with RESOURCE_EXHAUSTED and
    /// a retry delay (0: refuse as soon as every slot is busy). The queue is bounded by time
    /// first (--max-queue-wait-ms); this is a backstop. [default: 1024]
    #[arg(long, env = "AUTOSCALED_MAX_QUEUED_REQUESTS", value_name = "N")]
    pub(crate) max_queued_requests: Option<usize>,
    /// A call waits for a slot only while its expected wait (calls ahead × mean service time
    /// / slots) is at most this; beyond, it is refused at once with a retry delay. [default: 1000]
    #[arg(long, env = "AUTOSCALED_MAX_QUEUE_WAIT_MS", value_name = "MS")]
    pub(crate) max_queue_wait_ms: Option<u64>,
    /// Bytes of request bodies read ahead of their calls' slots, at most (a call's body is
    /// read whole before it queues, so that unread data never holds HTTP/2 flow control);
    /// past it a call is refused at once. [default: 67108864]
    #[arg(
        long,
        env = "AUTOSCALED_MAX_BUFFERED_REQUEST_BYTES",
        value_name = "BYTES"
    )]
    pub(crate) max_buffered_request_bytes: Option<usize>,
    /// VPA: how far a sample or OOM time may be ahead of the evaluation time (the server
    /// clock, or the request's with --trust-request-time), in seconds. [default: 300]
    #[arg(long, env = "AUTOSCALED_VPA_MAX_CLOCK_SKEW_SECS", value_name = "SECS")]
    pub(crate) vpa_max_clock_skew_secs: Option<u64>,
    /// Log filter, tracing `EnvFilter` syntax (e.g. `info,autoscaled=debug`). [default: info]
    #[arg(long, env = "AUTOSCALED_LOG", value_name = "FILTER")]
    pub(crate) log: Option<String>,
    /// Log format: text (coloured only on a terminal without NO_COLOR) or json. [default: text]
    #[arg(long, env = "AUTOSCALED_LOG_FORMAT", value_name = "FORMAT")]
    pub(crate) log_format: Option<LogFormat>,
    /// Export spans by OTLP/gRPC to this collector (e.g. `http://127.0.0.1:4317`), service name
    /// `autoscaled`; a caller's W3C `traceparent` is continued. [default: off]
    #[arg(long, env = "AUTOSCALED_OTLP_ENDPOINT", value_name = "URL")]
    pub(crate) otlp_endpoint: Option<String>,
    /// Serve Prometheus metrics on `http://ADDR/metrics` (e.g. `0.0.0.0:9090`). [default: off]
    #[arg(long, env = "AUTOSCALED_METRICS_LISTEN", value_name = "ADDR")]
    pub(crate) metrics_listen: Option<SocketAddr>,
    /// Server default of `--horizontal-pod-autoscaler-tolerance`. [default: 0.1]
    #[arg(long, env = "AUTOSCALED_HPA_TOLERANCE", value_name = "RATIO")]
    pub(crate) hpa_tolerance: Option<f64>,
    /// Server default of `--horizontal-pod-autoscaler-cpu-initialization-period`, seconds. [default: 300]
    #[arg(
        long,
        env = "AUTOSCALED_HPA_CPU_INITIALIZATION_PERIOD_SECS",
        value_name = "SECS"
    )]
    pub(crate) hpa_cpu_initialization_period_secs: Option<u64>,
    /// Server default of `--horizontal-pod-autoscaler-initial-readiness-delay`, seconds. [default: 30]
    #[arg(
        long,
        env = "AUTOSCALED_HPA_INITIAL_READINESS_DELAY_SECS",
        value_name = "SECS"
    )]
    pub(crate) hpa_initial_readiness_delay_secs: Option<u64>,
    /// Server default of `--horizontal-pod-autoscaler-downscale-stabilization`, seconds. [default: 300]
    #[arg(
        long,
        env = "AUTOSCALED_HPA_DOWNSCALE_STABILIZATION_SECS",
        value_name = "SECS"
    )]
    pub(crate) hpa_downscale_stabilization_secs: Option<u64>,
    /// Legacy scale-up limit factor (`scaleUpLimitFactor`). [default: 2.0]
    #[arg(
        long,
        env = "AUTOSCALED_HPA_SCALE_UP_LIMIT_FACTOR",
        value_name = "FACTOR"
    )]
    pub(crate) hpa_scale_up_limit_factor: Option<f64>,
    /// Legacy scale-up limit minimum (`scaleUpLimitMinimum`). [default: 4.0]
    #[arg(
        long,
        env = "AUTOSCALED_HPA_SCALE_UP_LIMIT_MINIMUM",
        value_name = "REPLICAS"
    )]
    pub(crate) hpa_scale_up_limit_minimum: Option<f64>,
    /// Kubernetes feature gates of the HPA controller, as kube-controller-manager takes them
    /// (`HPAScaleToZero=false`, comma-separated). Defaults are Kubernetes 1.37's:
    /// HPAScaleToZero (beta) on, HPAConfigurableTolerance (GA) locked on. A request's
    /// `spec.scale_to_zero` overrides HPAScaleToZero for its target. [default: 1.37's]
    #[arg(long, env = "AUTOSCALED_FEATURE_GATES", value_name = "GATE=BOOL,...")]
    pub(crate) feature_gates: Option<String>,
    /// Serve TLS with this certificate chain (PEM, leaf first). Re-read when it changes and on
    /// SIGHUP, without dropping the listener. Needs --tls-key. [default: off, plaintext]
    #[arg(long, env = "AUTOSCALED_TLS_CERT", value_name = "FILE")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// Private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "AUTOSCALED_TLS_KEY", value_name = "FILE")]
    pub(crate) tls_key: Option<PathBuf>,
    /// mTLS: clients present a certificate signed by a CA of this PEM bundle; the caller's
    /// identity is its URI SAN (SPIFFE ID), else its DNS SAN as dns:NAME, else its CN as cn:NAME. [default: off]
    #[arg(long, env = "AUTOSCALED_TLS_CLIENT_CA", value_name = "FILE")]
    pub(crate) tls_client_ca: Option<PathBuf>,
    /// With --tls-client-ca: `require` a client certificate in the handshake, or accept
    /// callers without one (`optional`; they then need a bearer token under --authz). [default: require]
    #[arg(long, env = "AUTOSCALED_TLS_CLIENT_AUTH", value_name = "MODE")]
    pub(crate) tls_client_auth: Option<ClientAuth>,
    /// Authorization file (TOML): rules that give identities verbs on target-key prefixes,
    /// and SHA-256 hashes of bearer tokens; whatever no rule grants is denied. Re-read like
    /// the certificate. [default: off, every call allowed]
    #[arg(long, env = "AUTOSCALED_AUTHZ", value_name = "FILE")]
    pub(crate) authz: Option<PathBuf>,
    /// Also serve the health service alone, in plaintext, on this address (Kubernetes `grpc:`
    /// probes cannot do TLS or send credentials). [default: off]
    #[arg(long, env = "AUTOSCALED_HEALTH_LISTEN", value_name = "ADDR")]
    pub(crate) health_listen: Option<SocketAddr>,
    /// Reflection on the main port: auth (callers with an identity), open, or off. [default: auth with --authz, else open]
    #[arg(long, env = "AUTOSCALED_REFLECTION", value_name = "MODE")]
    pub(crate) reflection: Option<Exposure>,
    /// Health on the main port: auth (callers with an identity), open, or off. [default: auth with --authz, else open]
    #[arg(long, env = "AUTOSCALED_HEALTH", value_name = "MODE")]
    pub(crate) health: Option<Exposure>,
    /// How often the TLS files and the authorization file are checked for changes, in
    /// seconds (0: only on SIGHUP). [default: 10]
    #[arg(long, env = "AUTOSCALED_SECURITY_RELOAD_SECS", value_name = "SECS")]
    pub(crate) security_reload_secs: Option<u64>,
}

/// The `--config` file: the same keys as the flags, every one optional.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<SocketAddr>,
    store: Option<StoreKind>,
    etcd_endpoints: Option<String>,
    etcd_prefix: Option<String>,
    etcd_ca: Option<PathBuf>,
    etcd_cert: Option<PathBuf>,
    etcd_key: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    durability: Option<Durability>,
    flush_interval_ms: Option<u64>,
    commit_delay_us: Option<u64>,
    trust_request_time: Option<bool>,
    shutdown_grace_secs: Option<u64>,
    decision_log_len: Option<usize>,
    history_retention_secs: Option<u64>,
    decision_retention_secs: Option<u64>,
    max_pod_names: Option<usize>,
    cache_mb: Option<u64>,
    max_message_bytes: Option<usize>,
    max_pods: Option<usize>,
    max_metrics: Option<usize>,
    max_key_bytes: Option<usize>,
    max_samples: Option<usize>,
    max_containers: Option<usize>,
    max_concurrent_requests: Option<usize>,
    max_queued_requests: Option<usize>,
    max_queue_wait_ms: Option<u64>,
    max_buffered_request_bytes: Option<usize>,
    vpa_max_clock_skew_secs: Option<u64>,
    log: Option<String>,
    log_format: Option<LogFormat>,
    otlp_endpoint: Option<String>,
    metrics_listen: Option<SocketAddr>,
    hpa_tolerance: Option<f64>,
    hpa_cpu_initialization_period_secs: Option<u64>,
    hpa_initial_readiness_delay_secs: Option<u64>,
    hpa_downscale_stabilization_secs: Option<u64>,
    hpa_scale_up_limit_factor: Option<f64>,
    hpa_scale_up_limit_minimum: Option<f64>,
    feature_gates: Option<String>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_client_ca: Option<PathBuf>,
    tls_client_auth: Option<ClientAuth>,
    authz: Option<PathBuf>,
    health_listen: Option<SocketAddr>,
    reflection: Option<Exposure>,
    health: Option<Exposure>,
    security_reload_secs: Option<u64>,
}

/// Request limits, enforced by `api::convert` (and the message size by tonic).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// `--max-message-bytes`: tonic refuses larger bodies before decoding them.
    pub max_message_bytes: usize,
    /// `--max-pods`: pods in one request; bounds the engine's per-request work.
    pub max_pods: usize,
    /// `--max-metrics`: metrics in one spec.
    pub max_metrics: usize,
    /// `--max-key-bytes`: a target key is a store key and a log field, so it stays short.
    pub max_key_bytes: usize,
    /// `--max-samples`: VPA samples and OOM events in one RecordUsage, and pod values in one
    /// Recommend.
    pub max_samples: usize,
    /// Containers in one request, over all its pods.
    pub max_containers: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_pods: DEFAULT_MAX_PODS,
            max_metrics: DEFAULT_MAX_METRICS,
            max_key_bytes: DEFAULT_MAX_KEY_BYTES,
            max_samples: DEFAULT_MAX_SAMPLES,
            max_containers: DEFAULT_MAX_CONTAINERS,
        }
    }
}

/// TLS, mTLS, authorization and the health listener (issue 10). All off by default: then the
/// server is plaintext and allows every call, as before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecurityConfig {
    /// `--tls-cert`: the server certificate chain (PEM); set, the main listener speaks TLS.
    pub tls_cert: Option<PathBuf>,
    /// `--tls-key`: its private key (PEM).
    pub tls_key: Option<PathBuf>,
    /// `--tls-client-ca`: CA bundle that client certificates are verified against (mTLS).
    pub tls_client_ca: Option<PathBuf>,
    /// `--tls-client-auth`: whether a client certificate is required or only verified if sent.
    pub tls_client_auth: ClientAuth,
    /// `--authz`: the authorization file; set, every call is authenticated and authorized.
    pub authz: Option<PathBuf>,
    /// `--health-listen`: a second, plaintext listener for kubelet probes when TLS is on.
    pub health_listen: Option<SocketAddr>,
    /// `--reflection`: who may use server reflection on the main listener.
    pub reflection: Exposure,
    /// `--health`: who may use the health service on the main listener.
    pub health: Exposure,
    /// Period of the check for changed files; zero: only SIGHUP.
    pub reload_interval: Duration,
}

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig {
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            tls_client_auth: ClientAuth::Require,
            authz: None,
            health_listen: None,
            reflection: Exposure::Open,
            health: Exposure::Open,
            reload_interval: Duration::from_secs(DEFAULT_SECURITY_RELOAD_SECS),
        }
    }
}

impl SecurityConfig {
    /// Whether TLS is on.
    pub fn tls(&self) -> bool {
        self.tls_cert.is_some()
    }
}

/// The validated configuration of `autoscaled serve`.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// `--listen`: the gRPC listener (port 0: any free port, printed at start).
    pub listen: SocketAddr,
    /// Where the history lives.
    pub store: StoreKind,
    /// The etcd store's settings (used with `store = etcd`).
    pub etcd: EtcdConfig,
    /// `--data-dir`: the sled database folder (created if missing, never replaced).
    pub data_dir: PathBuf,
    /// `--durability`: whether an answer waits for its write to reach the disk.
    pub durability: Durability,
    /// `--flush-interval-ms`: relaxed mode's flush period (what a crash may lose).
    pub flush_interval: Duration,
    /// `--commit-delay-us`: strict mode's gathering window before a flush under load.
    pub commit_delay: Duration,
    /// `--trust-request-time`: use the request's evaluation time instead of the server clock
    /// (replays and tests; a production server decides `now` itself).
    pub trust_request_time: bool,
    /// `--shutdown-grace-secs`: bound on the drain of in-flight calls at shutdown.
    pub shutdown_grace: Duration,
    /// `--decision-log-len`: decisions kept per target, so a target's log cannot grow without
    /// bound.
    pub decision_log_len: usize,
    /// Recommendations and scale events older than this are pruned (see `store::prune`).
    pub history_retention: Duration,
    /// Closed decision runs older than this are dropped (see `store::sled`).
    pub decision_retention: Duration,
    /// Pod names kept per group in a logged decision.
    pub max_pod_names: usize,
    /// sled's page cache, MiB.
    pub cache_mb: u64,
    /// Request size and count limits (`api::convert`, `api::wire_limits`).
    pub limits: Limits,
    /// Calls served at once and calls waiting (`crate::overload`).
    pub max_concurrent_requests: usize,
    /// `--max-queued-requests`: calls waiting for a slot; beyond, RESOURCE_EXHAUSTED with a
    /// retry delay.
    pub max_queued_requests: usize,
    /// `--max-queue-wait-ms`: the longest expected wait a call is queued for.
    pub max_queue_wait: Duration,
    /// `--max-buffered-request-bytes`: request bodies read ahead of their calls' slots.
    pub max_buffered_request_bytes: usize,
    /// `--log`: tracing `EnvFilter` directives.
    pub log: String,
    /// `--log-format`: text or JSON lines.
    pub log_format: LogFormat,
    /// OTLP/gRPC collector to export spans to; `None`: no export.
    pub otlp_endpoint: Option<String>,
    /// Where `/metrics` is served; `None`: no metrics.
    pub metrics_listen: Option<SocketAddr>,
    /// Server defaults of the HPA controller flags; `spec.settings` overrides them per target.
    pub hpa: Settings,
    /// VPA sample and OOM times may be at most this far ahead of the evaluation time.
    pub vpa_max_clock_skew: Duration,
    /// TLS, mTLS, authorization, health listener.
    pub security: SecurityConfig,
}

impl Config {
    /// The defaults with `data_dir` set: what tests start from.
    pub fn with_data_dir(data_dir: impl Into<PathBuf>) -> Self {
        let mut config = ServeArgs::default()
            .merge(FileConfig::default())
            .expect("the defaults are valid");
        config.data_dir = data_dir.into();
        config
    }
}

/// Why the configuration cannot be used.
#[derive(Debug, Error)]
pub(crate) enum ConfigError {
    /// The `--config` file cannot be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The `--config` file is not valid TOML for this schema.
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    /// A value is out of its range.
    #[error("invalid configuration: {key}: {message}")]
    Invalid { key: &'static str, message: String },
}

/// `--version`: the build, the Kubernetes version whose HPA controller defaults (flags and
/// feature gates) the server follows, and the KEDA versions its extensions follow.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (HPA: Kubernetes 1.37 controller defaults, HPAScaleToZero on; KEDA extensions: 2.19 and later)"
);

/// The HPA controller's feature gates, as `--feature-gates` sets them
/// (`k8s.io/component-base/featuregate`: `Name=bool` pairs, comma-separated; an unknown
/// gate, or a locked one set against its lock, is an error at start-up).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    /// `HPAScaleToZero`: alpha (off) up to 1.36, beta and on by default in 1.37.
    pub hpa_scale_to_zero: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        FeatureGates {
            hpa_scale_to_zero: true,
        }
    }
}

impl FeatureGates {
    /// Kubernetes 1.37's gates for the HPA: name, default, locked to its default.
    const KNOWN: [(&'static str, bool, bool); 2] = [
        ("HPAScaleToZero", true, false),
        ("HPAConfigurableTolerance", true, true),
    ];

    /// Parses `Name=bool,Name=bool` over the 1.37 defaults. Booleans are read as Go's
    /// `strconv.ParseBool` reads them, as kube-controller-manager does.
    pub fn parse(spec: &str) -> Result<FeatureGates, String> {
        let mut gates = FeatureGates::default();
        for pair in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((name, value)) = pair.split_once('=') else {
                return Err(format!(
                    "missing bool value for {pair:?} (write {pair}=true)"
                ));
            };
            let (name, value) = (name.trim(), value.trim());
            let value = match value {
                "1" | "t" | "T" | "true" | "TRUE" | "True" => true,
                "0" | "f" | "F" | "false" | "FALSE" | "False" => false,
                _ => return Err(format!("invalid value of {name}={value}, err: not a bool")),
            };
            let Some(&(_, default, locked)) = Self::KNOWN.iter().find(|(n, ..)| *n == name) else {
                let known: Vec<&str> = Self::KNOWN.iter().map(|(n, ..)| *n).collect();
                return Err(format!(
                    "unrecognized feature gate: {name} (known: {})",
                    known.join(", ")
                ));
            };
            if locked && value != default {
                return Err(format!(
                    "cannot set feature gate {name} to {value}, feature is locked to {default}"
                ));
            }
            if name == "HPAScaleToZero" {
                gates.hpa_scale_to_zero = value;
            }
        }
        Ok(gates)
    }
}

fn invalid(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.into(),
    }
}

impl ServeArgs {
    /// Reads the `--config` file if any, layers flags and environment over it, fills the
    /// defaults and validates the result.
    pub(crate) fn load(self) -> Result<Config, ConfigError> {
        let file = match &self.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        self.merge(file)
    }

    fn merge(self, file: FileConfig) -> Result<Config, ConfigError> {
        let defaults = Settings::default();
        let gates = FeatureGates::parse(
            self.feature_gates
                .as_deref()
                .or(file.feature_gates.as_deref())
                .unwrap_or(""),
        )
        .map_err(|message| invalid("feature_gates", message))?;
        let secs =
            |v: Option<u64>, default: Duration| v.map(Duration::from_secs).unwrap_or(default);
        let hpa = Settings {
            tolerance: self
                .hpa_tolerance
                .or(file.hpa_tolerance)
                .unwrap_or(defaults.tolerance),
            cpu_initialization_period: secs(
                self.hpa_cpu_initialization_period_secs
                    .or(file.hpa_cpu_initialization_period_secs),
                defaults.cpu_initialization_period,
            ),
            initial_readiness_delay: secs(
                self.hpa_initial_readiness_delay_secs
                    .or(file.hpa_initial_readiness_delay_secs),
                defaults.initial_readiness_delay,
            ),
            downscale_stabilization: secs(
                self.hpa_downscale_stabilization_secs
                    .or(file.hpa_downscale_stabilization_secs),
                defaults.downscale_stabilization,
            ),
            scale_up_limit_factor: self
                .hpa_scale_up_limit_factor
                .or(file.hpa_scale_up_limit_factor)
                .unwrap_or(defaults.scale_up_limit_factor),
            scale_up_limit_minimum: self
                .hpa_scale_up_limit_minimum
                .or(file.hpa_scale_up_limit_minimum)
                .unwrap_or(defaults.scale_up_limit_minimum),
            scale_to_zero: gates.hpa_scale_to_zero,
        };
        let authz = self.authz.or(file.authz);
        // With an authorization file, health and reflection need credentials unless opened.
        let default_exposure = if authz.is_some() {
            Exposure::Auth
        } else {
            Exposure::Open
        };
        let security = SecurityConfig {
            tls_cert: self.tls_cert.or(file.tls_cert),
            tls_key: self.tls_key.or(file.tls_key),
            tls_client_ca: self.tls_client_ca.or(file.tls_client_ca),
            tls_client_auth: self
                .tls_client_auth
                .or(file.tls_client_auth)
                .unwrap_or_default(),
            authz,
            health_listen: self.health_listen.or(file.health_listen),
            reflection: self
                .reflection
                .or(file.reflection)
                .unwrap_or(default_exposure),
            health: self.health.or(file.health).unwrap_or(default_exposure),
            reload_interval: secs(
                self.security_reload_secs.or(file.security_reload_secs),
                Duration::from_secs(DEFAULT_SECURITY_RELOAD_SECS),
            ),
        };
        let client_auth_given = self.tls_client_auth.or(file.tls_client_auth).is_some();
        let config = Config {
            security,
            store: self.store.or(file.store).unwrap_or_default(),
            etcd: EtcdConfig {
                endpoints: self
                    .etcd_endpoints
                    .or(file.etcd_endpoints)
                    .unwrap_or_else(|| DEFAULT_ETCD_ENDPOINT.to_owned())
                    .split(',')
                    .map(str::trim)
                    .filter(|e| !e.is_empty())
                    .map(str::to_owned)
                    .collect(),
                prefix: self
                    .etcd_prefix
                    .or(file.etcd_prefix)
                    .unwrap_or_else(|| DEFAULT_ETCD_PREFIX.to_owned()),
                ca: self.etcd_ca.or(file.etcd_ca),
                cert: self.etcd_cert.or(file.etcd_cert),
                key: self.etcd_key.or(file.etcd_key),
            },
            listen: match self.listen.or(file.listen) {
                Some(addr) => addr,
                None => DEFAULT_LISTEN
                    .parse()
                    .map_err(|_| invalid("listen", "bad built-in default"))?,
            },
            data_dir: self
                .data_dir
                .or(file.data_dir)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR)),
            durability: self.durability.or(file.durability).unwrap_or_default(),
            flush_interval: Duration::from_millis(
                self.flush_interval_ms
                    .or(file.flush_interval_ms)
                    .unwrap_or(DEFAULT_FLUSH_INTERVAL_MS),
            ),
            commit_delay: Duration::from_micros(
                self.commit_delay_us
                    .or(file.commit_delay_us)
                    .unwrap_or(DEFAULT_COMMIT_DELAY_US),
            ),
            trust_request_time: self
                .trust_request_time
                .or(file.trust_request_time)
                .unwrap_or(false),
            shutdown_grace: secs(
                self.shutdown_grace_secs.or(file.shutdown_grace_secs),
                Duration::from_secs(DEFAULT_SHUTDOWN_GRACE_SECS),
            ),
            decision_log_len: self
                .decision_log_len
                .or(file.decision_log_len)
                .unwrap_or(crate::store::DEFAULT_DECISION_LOG_LEN),
            history_retention: secs(
                self.history_retention_secs.or(file.history_retention_secs),
                Duration::from_secs(DEFAULT_HISTORY_RETENTION_SECS),
            ),
            decision_retention: secs(
                self.decision_retention_secs
                    .or(file.decision_retention_secs),
                crate::store::sled::DEFAULT_DECISION_RETENTION,
            ),
            max_pod_names: self
                .max_pod_names
                .or(file.max_pod_names)
                .unwrap_or(crate::store::sled::DEFAULT_MAX_POD_NAMES),
            cache_mb: self
                .cache_mb
                .or(file.cache_mb)
                .unwrap_or(crate::store::sled::DEFAULT_CACHE_BYTES / (1024 * 1024)),
            limits: Limits {
                max_message_bytes: self
                    .max_message_bytes
                    .or(file.max_message_bytes)
                    .unwrap_or(DEFAULT_MAX_MESSAGE_BYTES),
                max_pods: self.max_pods.or(file.max_pods).unwrap_or(DEFAULT_MAX_PODS),
                max_metrics: self
                    .max_metrics
                    .or(file.max_metrics)
                    .unwrap_or(DEFAULT_MAX_METRICS),
                max_key_bytes: self
                    .max_key_bytes
                    .or(file.max_key_bytes)
                    .unwrap_or(DEFAULT_MAX_KEY_BYTES),
                max_samples: self
                    .max_samples
                    .or(file.max_samples)
                    .unwrap_or(DEFAULT_MAX_SAMPLES),
                max_containers: self
                    .max_containers
                    .or(file.max_containers)
                    .unwrap_or(DEFAULT_MAX_CONTAINERS),
            },
            max_concurrent_requests: self
                .max_concurrent_requests
                .or(file.max_concurrent_requests)
                .unwrap_or(DEFAULT_MAX_CONCURRENT_REQUESTS),
            max_queued_requests: self
                .max_queued_requests
                .or(file.max_queued_requests)
                .unwrap_or(DEFAULT_MAX_QUEUED_REQUESTS),
            max_queue_wait: Duration::from_millis(
                self.max_queue_wait_ms
                    .or(file.max_queue_wait_ms)
                    .unwrap_or(DEFAULT_MAX_QUEUE_WAIT_MS),
            ),
            max_buffered_request_bytes: self
                .max_buffered_request_bytes
                .or(file.max_buffered_request_bytes)
                .unwrap_or(DEFAULT_MAX_BUFFERED_REQUEST_BYTES),
            log: self
                .log
                .or(file.log)
                .unwrap_or_else(|| DEFAULT_LOG.to_owned()),
            log_format: self.log_format.or(file.log_format).unwrap_or_default(),
            otlp_endpoint: self.otlp_endpoint.or(file.otlp_endpoint),
            metrics_listen: self.metrics_listen.or(file.metrics_listen),
            hpa,
            vpa_max_clock_skew: secs(
                self.vpa_max_clock_skew_secs
                    .or(file.vpa_max_clock_skew_secs),
                Duration::from_secs(DEFAULT_VPA_MAX_CLOCK_SKEW_SECS),
            ),
        };
        config.validate()?;
        config.validate_security(client_auth_given)?;
        Ok(config)
    }
}

impl Config {
    fn validate(&self) -> Result<(), ConfigError> {
        // `auth` means "callers with an identity", which only `--authz` checks: without it the
        // service would be open while the configuration says otherwise.
        for (key, exposure) in [
            ("reflection", self.security.reflection),
            ("health", self.security.health),
        ] {
            if exposure == Exposure::Auth && self.security.authz.is_none() {
                return Err(invalid(
                    key,
                    "auth needs --authz (without an authorization file nothing checks an identity); use open or off",
                ));
            }
        }
        if self.store == StoreKind::Etcd {
            if self.etcd.endpoints.is_empty() {
                return Err(invalid("etcd_endpoints", "must name at least one URL"));
            }
            if let Some(bad) = self
                .etcd
                .endpoints
                .iter()
                .find(|e| !(e.starts_with("http://") || e.starts_with("https://")))
            {
                return Err(invalid(
                    "etcd_endpoints",
                    format!("{bad:?} must start with http:// or https://"),
                ));
            }
            if self.etcd.cert.is_some() != self.etcd.key.is_some() {
                return Err(invalid("etcd_cert", "etcd_cert and etcd_key go together"));
            }
            if self.etcd.cert.is_some() && self.etcd.ca.is_none() {
                return Err(invalid("etcd_ca", "required with etcd_cert"));
            }
        }
        if self.data_dir.as_os_str().is_empty() {
            return Err(invalid("data_dir", "must not be empty"));
        }
        if self.durability == Durability::Relaxed && self.flush_interval.is_zero() {
            return Err(invalid("flush_interval_ms", "must be greater than 0"));
        }
        if self.commit_delay > Duration::from_micros(MAX_COMMIT_DELAY_US) {
            return Err(invalid(
                "commit_delay_us",
                format!("must be at most {MAX_COMMIT_DELAY_US}"),
            ));
        }
        if self.decision_log_len == 0 {
            return Err(invalid("decision_log_len", "must be greater than 0"));
        }
        if self.decision_retention.is_zero() {
            return Err(invalid("decision_retention_secs", "must be greater than 0"));
        }
        if self.cache_mb == 0 {
            return Err(invalid("cache_mb", "must be greater than 0"));
        }
        if self.history_retention < Duration::from_secs(DEFAULT_HISTORY_RETENTION_SECS) {
            return Err(invalid(
                "history_retention_secs",
                "must be at least 3600 (the longest stabilization window Kubernetes allows)",
            ));
        }
        if self.history_retention < self.hpa.downscale_stabilization {
            return Err(invalid(
                "history_retention_secs",
                "must be at least hpa_downscale_stabilization_secs",
            ));
        }
        if self.limits.max_message_bytes < 1024 {
            return Err(invalid("max_message_bytes", "must be at least 1024"));
        }
        if self.max_buffered_request_bytes < self.limits.max_message_bytes {
            return Err(invalid(
                "max_buffered_request_bytes",
                "must be at least max_message_bytes (one largest request must fit)",
            ));
        }
        for (key, v) in [
            ("max_pods", self.limits.max_pods),
            ("max_metrics", self.limits.max_metrics),
            ("max_key_bytes", self.limits.max_key_bytes),
            ("max_samples", self.limits.max_samples),
            ("max_containers", self.limits.max_containers),
            ("max_concurrent_requests", self.max_concurrent_requests),
        ] {
            if v == 0 {
                return Err(invalid(key, "must be greater than 0"));
            }
        }
        for (key, v) in [
            ("hpa_tolerance", self.hpa.tolerance),
            ("hpa_scale_up_limit_factor", self.hpa.scale_up_limit_factor),
            (
                "hpa_scale_up_limit_minimum",
                self.hpa.scale_up_limit_minimum,
            ),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(invalid(
                    key,
                    format!("must be a finite number >= 0, got {v}"),
                ));
            }
        }
        if let Some(endpoint) = &self.otlp_endpoint
            && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
        {
            return Err(invalid(
                "otlp_endpoint",
                format!("must be an http:// or https:// URL, got {endpoint:?}"),
            ));
        }
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log) {
            return Err(invalid("log", e.to_string()));
        }
        Ok(())
    }
}

impl Config {
    fn validate_security(&self, client_auth_given: bool) -> Result<(), ConfigError> {
        let s = &self.security;
        match (&s.tls_cert, &s.tls_key) {
            (Some(_), None) => return Err(invalid("tls_key", "--tls-cert needs --tls-key")),
            (None, Some(_)) => return Err(invalid("tls_cert", "--tls-key needs --tls-cert")),
            _ => {}
        }
        if s.tls_client_ca.is_some() && s.tls_cert.is_none() {
            return Err(invalid(
                "tls_client_ca",
                "mTLS needs TLS: set --tls-cert and --tls-key too",
            ));
        }
        if client_auth_given && s.tls_client_ca.is_none() {
            return Err(invalid(
                "tls_client_auth",
                "only applies with --tls-client-ca",
            ));
        }
        if let Some(health) = s.health_listen
            && health.port() != 0
            && health == self.listen
        {
            return Err(invalid("health_listen", "must differ from --listen"));
        }
        Ok(())
    }
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_owned(),
        message: e.message().to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_file(text: &str) -> Result<Config, ConfigError> {
        let file: FileConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: PathBuf::from("test.toml"),
            message: e.message().to_owned(),
        })?;
        ServeArgs::default().merge(file)
    }

    #[test]
    fn defaults_are_documented_values() {
        let c = parse_file("").unwrap();
        assert_eq!(c.listen, "127.0.0.1:50051".parse().unwrap());
        assert_eq!(c.data_dir, PathBuf::from("./data"));
        assert_eq!(c.durability, Durability::Strict);
        assert_eq!(c.shutdown_grace, Duration::from_secs(10));
        assert_eq!(c.decision_log_len, 100);
        assert!(!c.trust_request_time);
        assert_eq!(c.hpa, Settings::default());
        assert_eq!(c.vpa_max_clock_skew, Duration::from_secs(300));
        assert_eq!(c.limits.max_samples, 100_000);
        assert_eq!(c.limits.max_containers, 100_000);
        assert_eq!(c.max_concurrent_requests, 32);
        assert_eq!(c.max_queued_requests, 1024);
        assert_eq!(c.max_queue_wait, Duration::from_secs(1));
        assert_eq!(c.max_buffered_request_bytes, 64 << 20);
        assert_eq!(c.otlp_endpoint, None);
        assert_eq!(c.metrics_listen, None);
    }

    #[test]
    fn telemetry_keys_come_from_the_file_and_are_validated() {
        let c = parse_file("otlp_endpoint = \"http://collector:4317\"").unwrap();
        assert_eq!(c.otlp_endpoint.as_deref(), Some("http://collector:4317"));
        let err = parse_file("otlp_endpoint = \"collector:4317\"").unwrap_err();
        assert!(err.to_string().contains("otlp_endpoint"), "{err}");
        let c = parse_file("metrics_listen = \"0.0.0.0:9090\"").unwrap();
        assert_eq!(c.metrics_listen, Some("0.0.0.0:9090".parse().unwrap()));
        assert!(parse_file("metrics_listen = \"nowhere\"").is_err());
    }

    #[test]
    fn etcd_keys_come_from_the_file_and_flags_and_are_validated() {
        let c = parse_file("").unwrap();
        assert_eq!(c.store, StoreKind::Sled);
        assert_eq!(c.etcd.endpoints, ["http://127.0.0.1:2379"]);
        assert_eq!(c.etcd.prefix, "autoscaled/");
        let c = parse_file(
            "store = \"etcd\"\netcd_endpoints = \"https://a:2379, https://b:2379\"\netcd_prefix = \"x/\"\netcd_ca = \"ca.pem\"",
        )
        .unwrap();
        assert_eq!(c.store, StoreKind::Etcd);
        assert_eq!(c.etcd.endpoints, ["https://a:2379", "https://b:2379"]);
        assert_eq!(c.etcd.prefix, "x/");
        assert_eq!(c.etcd.ca, Some(PathBuf::from("ca.pem")));
        let file: FileConfig = toml::from_str("store = \"etcd\"").unwrap();
        let args = ServeArgs {
            store: Some(StoreKind::Sled),
            ..ServeArgs::default()
        };
        assert_eq!(args.merge(file).unwrap().store, StoreKind::Sled);
        for (text, key) in [
            (
                "store = \"etcd\"\netcd_endpoints = \" , \"",
                "etcd_endpoints",
            ),
            (
                "store = \"etcd\"\netcd_endpoints = \"a:2379\"",
                "etcd_endpoints",
            ),
            ("store = \"etcd\"\netcd_cert = \"c.pem\"", "etcd_cert"),
            (
                "store = \"etcd\"\netcd_cert = \"c.pem\"\netcd_key = \"k.pem\"",
                "etcd_ca",
            ),
        ] {
            let err = parse_file(text).unwrap_err();
            assert!(err.to_string().contains(key), "{text}: {err}");
        }
        assert!(parse_file("store = \"redis\"").is_err());
    }

    #[test]
    fn file_values_apply_and_flags_win() {
        let file: FileConfig = toml::from_str(
            "listen = \"0.0.0.0:9000\"\ndurability = \"relaxed\"\nhpa_tolerance = 0.2\n",
        )
        .unwrap();
        let args = ServeArgs {
            listen: Some("127.0.0.1:7000".parse().unwrap()),
            ..ServeArgs::default()
        };
        let c = args.merge(file).unwrap();
        assert_eq!(c.listen, "127.0.0.1:7000".parse().unwrap());
        assert_eq!(c.durability, Durability::Relaxed);
        assert_eq!(c.hpa.tolerance, 0.2);
    }

    #[test]
    fn feature_gates_default_to_kubernetes_1_37_and_are_checked_as_kubernetes_does() {
        // 1.37: HPAScaleToZero beta and on.
        assert!(parse_file("").unwrap().hpa.scale_to_zero);
        let c = parse_file("feature_gates = \"HPAScaleToZero=false\"").unwrap();
        assert!(!c.hpa.scale_to_zero);
        // The flag wins over the file, as for every knob.
        let file: FileConfig = toml::from_str("feature_gates = \"HPAScaleToZero=false\"").unwrap();
        let args = ServeArgs {
            feature_gates: Some("HPAScaleToZero=true".into()),
            ..ServeArgs::default()
        };
        assert!(args.merge(file).unwrap().hpa.scale_to_zero);
        assert_eq!(
            FeatureGates::parse(" HPAConfigurableTolerance=true , HPAScaleToZero=F ").unwrap(),
            FeatureGates {
                hpa_scale_to_zero: false
            }
        );
        for (spec, says) in [
            ("HPAScaleToZero", "missing bool value"),
            ("HPAScaleToZero=maybe", "not a bool"),
            (
                "HPAScaleTozero=true",
                "unrecognized feature gate: HPAScaleTozero",
            ),
            (
                "HPAConfigurableTolerance=false",
                "cannot set feature gate HPAConfigurableTolerance to false, feature is locked to true",
            ),
        ] {
            let e = FeatureGates::parse(spec).unwrap_err();
            assert!(e.contains(says), "{spec}: {e}");
            let e = parse_file(&format!("feature_gates = {spec:?}")).unwrap_err();
            assert!(e.to_string().contains("feature_gates"), "{e}");
        }
    }

    #[test]
    fn security_is_off_by_default_and_validated() {
        let c = parse_file("").unwrap();
        assert_eq!(c.security, SecurityConfig::default());
        assert!(!c.security.tls());
        let c = parse_file("authz = \"authz.toml\"").unwrap();
        assert_eq!(c.security.reflection, Exposure::Auth);
        assert_eq!(c.security.health, Exposure::Auth);
        let c = parse_file("authz = \"a.toml\"\nreflection = \"open\"\nhealth = \"off\"").unwrap();
        assert_eq!(c.security.reflection, Exposure::Open);
        assert_eq!(c.security.health, Exposure::Off);
        for (text, key) in [
            ("tls_cert = \"c.pem\"", "tls_key"),
            ("tls_key = \"k.pem\"", "tls_cert"),
            ("tls_client_ca = \"ca.pem\"", "tls_client_ca"),
            (
                "tls_cert = \"c\"\ntls_key = \"k\"\ntls_client_auth = \"optional\"",
                "tls_client_auth",
            ),
            (
                "listen = \"127.0.0.1:7000\"\nhealth_listen = \"127.0.0.1:7000\"",
                "health_listen",
            ),
            ("reflection = \"auth\"", "reflection"),
            (
                "max_buffered_request_bytes = 2048",
                "max_buffered_request_bytes",
            ),
            ("health = \"auth\"", "health"),
        ] {
            let err = parse_file(text).unwrap_err();
            assert!(
                err.to_string().contains(key),
                "{text}: {err} does not name {key}"
            );
        }
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_name() {
        let err = parse_file("listne = \"127.0.0.1:1\"").unwrap_err();
        assert!(err.to_string().contains("unknown field `listne`"), "{err}");
    }

    #[test]
    fn out_of_range_values_name_the_key() {
        for (text, key) in [
            ("decision_log_len = 0", "decision_log_len"),
            ("history_retention_secs = 60", "history_retention_secs"),
            ("hpa_tolerance = -1.0", "hpa_tolerance"),
            ("max_pods = 0", "max_pods"),
            ("max_samples = 0", "max_samples"),
            ("max_containers = 0", "max_containers"),
            ("max_concurrent_requests = 0", "max_concurrent_requests"),
            ("log = \"[[[\"", "log"),
            (
                "durability = \"relaxed\"\nflush_interval_ms = 0",
                "flush_interval_ms",
            ),
            ("commit_delay_us = 100001", "commit_delay_us"),
        ] {
            let err = parse_file(text).unwrap_err();
            assert!(
                err.to_string().contains(key),
                "{text}: {err} does not name {key}"
            );
        }
    }
}
