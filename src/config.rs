//! The server's configuration: defaults, then a TOML file (`--config FILE`), then environment
//! variables `AUTOSCALED_*`, then flags (a flag beats its variable; clap reads both). This is
//! the only module that reads the environment.
//!
//! Every knob is declared once, in the `knobs!` table below: its name, type, value name,
//! default and documentation make the flag, the variable, the TOML key and the `--help` text
//! (with its unit and default), so they cannot drift apart. `ServeArgs::load` turns the three
//! sources into one validated [`Config`]; any error is a `ConfigError`, which `main` reports
//! and answers with exit status 64 (`EX_USAGE`), as linkerd2-proxy does for bad configuration.

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

pub(crate) use autoscaled_wire::limits::{
    DEFAULT_MAX_BATCH_REQUESTS, DEFAULT_MAX_CONTAINERS, DEFAULT_MAX_KEY_BYTES,
    DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_METRICS, DEFAULT_MAX_PODS, DEFAULT_MAX_SAMPLES,
};
pub use autoscaled_wire::{DEFAULT_LISTEN, EX_USAGE, Limits, VERSION};
/// Upper bound of `commit_delay_us`: it adds to the latency of every write under load.
const MAX_COMMIT_DELAY_US: u64 = 100_000;
/// Default history retention. Kubernetes' API caps stabilization windows at 3600 s and policy
/// periods at 1800 s, so one hour reaches every window a valid spec can ask for.
pub(crate) const DEFAULT_HISTORY_RETENTION_SECS: u64 = 3600;
/// Default period of the check for changed TLS and authorization files.
pub(crate) const DEFAULT_SECURITY_RELOAD_SECS: u64 = 10;

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
    /// `--etcd-advertise`: where other replicas reach this one (`host:port`); `None`: the
    /// listener's address when it names a host.
    pub advertise: Option<String>,
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

/// `autoscaled serve`'s knobs. Each entry is one knob:
///
/// ```text
/// /// Help text (its unit; no `[default: ...]`, that is added).
/// name: Type, "VALUE_NAME", default EXPR;
/// ```
///
/// The name makes the flag (`--name-with-dashes`), the TOML key of the `--config` file (`name`)
/// and the variable (`AUTOSCALED_NAME`). After the merge a knob with a `default` is a `Type`,
/// one without stays an `Option<Type>` (nothing set anywhere: `None`). The help text ends in
/// `[default: ...]`, written from the default value; `shown EXPR` writes that text instead,
/// for a knob whose default is no single value (decided after the merge, or off). `clap(...)`
/// adds arguments to the flag. The derived values (`Settings`, `SecurityConfig`, `Limits`,
/// durations) are built from the merged knobs in `ServeArgs::merge`.
macro_rules! knobs {
    ($(
        $(#[doc = $doc:literal])*
        $name:ident: $ty:ty, $value_name:literal
        $(, default $default:expr)?
        $(, shown $shown:expr)?
        $(, clap($($clap:tt)*))?;
    )*) => {
        /// `autoscaled serve` options. Each is also a TOML key of the same name (with `_`) in
        /// the `--config` file and an `AUTOSCALED_*` variable. Absent everywhere: the
        /// documented default.
        #[derive(Clone, Debug, Default, Args)]
        pub(crate) struct ServeArgs {
            /// TOML configuration file; unknown keys are an error.
            #[arg(long, env = "AUTOSCALED_CONFIG", value_name = "FILE")]
            pub(crate) config: Option<PathBuf>,
            $(
                #[arg(
                    long,
                    env = env_var!($name),
                    value_name = $value_name,
                    help = help_text(
                        &[$($doc),*],
                        knob_shown!($ty $(, default $default)? $(, shown $shown)?),
                    )
                    $(, $($clap)*)?
                )]
                pub(crate) $name: Option<$ty>,
            )*
        }

        /// The `--config` file: the same keys as the flags, every one optional.
        #[derive(Clone, Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct FileConfig {
            $($name: Option<$ty>,)*
        }

        /// Every knob merged: the flag (or its variable), else the file, else the default.
        struct Knobs {
            $($name: knob_type!($ty $(, default $default)?),)*
        }

        impl ServeArgs {
            /// Layers the flags (and variables) over the file and fills the defaults.
            fn knobs(self, file: FileConfig) -> Knobs {
                Knobs {
                    $($name: knob_value!(self.$name.or(file.$name) $(, default $default)?),)*
                }
            }
        }
    };
}

/// A knob's type after the merge: with a default, the value; without, an `Option`.
macro_rules! knob_type {
    ($ty:ty) => { Option<$ty> };
    ($ty:ty, default $default:expr) => { $ty };
}

/// A knob's value after the merge: the first of flag and file, else the default.
macro_rules! knob_value {
    ($given:expr) => {
        $given
    };
    ($given:expr, default $default:expr) => {
        match $given {
            Some(value) => value,
            None => $default,
        }
    };
}

/// The text of a knob's `[default: ...]`, if it has one.
macro_rules! knob_shown {
    ($ty:ty $(, default $default:expr)?, shown $shown:expr) => {
        Some(Shown::shown(&$shown))
    };
    ($ty:ty, default $default:expr) => {{
        let default: $ty = $default;
        Some(default.shown())
    }};
    ($ty:ty) => {
        None
    };
}

/// A knob's variable, `AUTOSCALED_` and its name in capitals, made at compile time.
macro_rules! env_var {
    ($name:ident) => {{
        const NAME: &str = concat!("AUTOSCALED_", stringify!($name));
        const UPPER: [u8; NAME.len()] = ascii_uppercase(NAME);
        const VAR: &str = match std::str::from_utf8(&UPPER) {
            Ok(var) => var,
            Err(_) => panic!("a knob's name is ASCII"),
        };
        VAR
    }};
}

/// `name` in ASCII capitals, as an array of its length (`env_var!` makes a `&str` of it).
const fn ascii_uppercase<const N: usize>(name: &str) -> [u8; N] {
    let bytes = name.as_bytes();
    let mut upper = [0; N];
    let mut i = 0;
    while i < N {
        upper[i] = bytes[i].to_ascii_uppercase();
        i += 1;
    }
    upper
}

/// A knob's help text: its doc comment as clap makes one of a single paragraph (lines trimmed
/// and joined by spaces, one final period dropped), then `[default: ...]` if it has one.
fn help_text(doc: &[&str], shown: Option<String>) -> String {
    let mut help = doc
        .iter()
        .map(|line| line.trim())
        .collect::<Vec<_>>()
        .join(" ");
    match shown {
        Some(default) => {
            help.push_str(" [default: ");
            help.push_str(&default);
            help.push(']');
        }
        None => {
            if help.ends_with('.') && !help.ends_with("..") {
                help.pop();
            }
        }
    }
    help
}

/// How a default reads in the help text's `[default: ...]`.
trait Shown {
    fn shown(&self) -> String;
}

macro_rules! shown_by_display {
    ($($ty:ty),*) => {
        $(impl Shown for $ty {
            fn shown(&self) -> String {
                self.to_string()
            }
        })*
    };
}
shown_by_display!(&str, String, bool, u64, usize, SocketAddr);

impl Shown for f64 {
    /// With its decimal point (`2.0`, not `2`): a ratio reads as one.
    fn shown(&self) -> String {
        format!("{self:?}")
    }
}

impl Shown for PathBuf {
    fn shown(&self) -> String {
        self.display().to_string()
    }
}

macro_rules! shown_by_value_name {
    ($($ty:ty),*) => {
        $(impl Shown for $ty {
            /// The name the flag takes.
            fn shown(&self) -> String {
                self.to_possible_value()
                    .map(|value| value.get_name().to_owned())
                    .unwrap_or_default()
            }
        })*
    };
}
shown_by_value_name!(StoreKind, Durability, LogFormat, ClientAuth, Exposure);

knobs! {
    /// Address to listen on (port 0: any free port; the real one is printed).
    listen: SocketAddr, "ADDR",
        default DEFAULT_LISTEN.parse().expect("DEFAULT_LISTEN is an address");
    /// Where the history lives: sled (embedded, in --data-dir) or etcd (shared by several
    /// replicas, see docs/ha.md).
    store: StoreKind, "STORE", default StoreKind::default();
    /// etcd client URLs, comma-separated (`http://` or `https://`).
    etcd_endpoints: String, "URLS", default DEFAULT_ETCD_ENDPOINT.to_owned();
    /// Prefix of every etcd key written (several deployments can share a cluster).
    etcd_prefix: String, "PREFIX", default DEFAULT_ETCD_PREFIX.to_owned();
    /// PEM CA certificate that signed the etcd members' certificates (turns TLS on).
    etcd_ca: PathBuf, "FILE", shown "none";
    /// PEM client certificate for etcd's client-cert-auth (with --etcd-key).
    etcd_cert: PathBuf, "FILE", shown "none";
    /// PEM private key of --etcd-cert.
    etcd_key: PathBuf, "FILE", shown "none";
    /// With several replicas on etcd: the host:port other replicas reach this one's gRPC
    /// listener at; a target's decisions are made by the replica that owns it, and a call
    /// reaching another replica is forwarded there (with --peer-secret-file).
    etcd_advertise: String, "HOST:PORT", shown "the --listen address unless 0.0.0.0 or ::";
    /// A file holding the secret (at least 32 bytes) the replicas of one deployment share:
    /// it signs their registrations in etcd and the calls they forward to each other; without
    /// it, replicas forward nothing (each decides the calls that reach it).
    peer_secret_file: PathBuf, "FILE", shown "off, no forwarding";
    /// Under TLS: the CA bundle the other replicas' certificates are checked against when a
    /// call is forwarded to them (this replica presents its own --tls-cert).
    peer_ca: PathBuf, "FILE", shown "--tls-client-ca";
    /// Folder of the sled history database; created if missing, never replaced.
    // Relative to the working directory.
    data_dir: PathBuf, "DIR", default PathBuf::from("./data");
    /// strict: answer after the write is flushed to disk (group commit); relaxed: flush
    /// periodically and risk losing the last --flush-interval-ms of decisions on a crash.
    durability: Durability, "MODE", default Durability::default();
    /// Relaxed mode's flush period, in milliseconds.
    flush_interval_ms: u64, "MS", default 100;
    /// Strict mode: when a flush is due while other writes are already waiting for one, wait
    /// this long first so that the calls being decided join it (fewer flushes, fewer bytes
    /// written per call, at most this much more latency under load; 0: flush at once).
    // See `store::durability`: the window is only taken when several writes already wait.
    commit_delay_us: u64, "MICROSECONDS", default 1_000;
    /// Accept `evaluation_time` from requests (replays, tests); otherwise the server clock decides
    /// and a request carrying it is rejected.
    trust_request_time: bool, "BOOL", default false, clap(
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new()
    );
    /// Bound on the drain of in-flight requests at shutdown, in seconds.
    shutdown_grace_secs: u64, "SECS", default 10;
    /// Decisions kept per target (older ones are dropped).
    decision_log_len: usize, "N", default crate::store::DEFAULT_DECISION_LOG_LEN;
    /// Recommendations and scale events older than this are pruned; at least 3600 (the
    /// longest stabilization window Kubernetes allows) and at least the downscale stabilization.
    history_retention_secs: u64, "SECS", default DEFAULT_HISTORY_RETENTION_SECS;
    /// Decision runs that ended longer ago than this (before the target's newest decision)
    /// are dropped from the decision log.
    decision_retention_secs: u64, "SECS",
        default crate::store::sled::DEFAULT_DECISION_RETENTION.as_secs();
    /// Pod names kept per group (unready, missing, ignored) and metric in a logged decision;
    /// the totals are always kept.
    max_pod_names: usize, "N", default crate::store::sled::DEFAULT_MAX_POD_NAMES;
    /// sled's page cache in MiB; keep it well under the memory limit (the chart's 384 Mi
    /// limit fits the default).
    cache_mb: u64, "MIB", default crate::store::sled::DEFAULT_CACHE_BYTES / (1024 * 1024);
    /// Maximum decoded request size, in bytes.
    max_message_bytes: usize, "BYTES", default DEFAULT_MAX_MESSAGE_BYTES;
    /// Maximum pods in one request.
    max_pods: usize, "N", default DEFAULT_MAX_PODS;
    /// Maximum metrics in one spec.
    max_metrics: usize, "N", default DEFAULT_MAX_METRICS;
    /// Maximum target key length, in bytes.
    max_key_bytes: usize, "BYTES", default DEFAULT_MAX_KEY_BYTES;
    /// Maximum VPA usage samples plus OOM events in one RecordUsage, and pod metric, request
    /// and usage values in one Recommend.
    max_samples: usize, "N", default DEFAULT_MAX_SAMPLES;
    /// Maximum containers in one request, over all its pods (and VPA container policies).
    max_containers: usize, "N", default DEFAULT_MAX_CONTAINERS;
    /// Maximum requests in one RecommendBatch (their pods, containers and values count
    /// together against the limits above).
    max_batch_requests: usize, "N", default DEFAULT_MAX_BATCH_REQUESTS;
    /// gRPC calls served at once; more wait in a bounded queue.
    max_concurrent_requests: usize, "N", default 32;
    /// Calls waiting for a slot at most; beyond, a call is refused with RESOURCE_EXHAUSTED and
    /// a retry delay (0: refuse as soon as every slot is busy). The queue is bounded by time
    /// first (--max-queue-wait-ms); this is a backstop.
    max_queued_requests: usize, "N", default 1024;
    /// A call waits for a slot only while its expected wait (calls ahead × mean service time
    /// / slots) is at most this; beyond, it is refused at once with a retry delay.
    max_queue_wait_ms: u64, "MS", default 1000;
    /// Bytes of request bodies read ahead of their calls' slots, at most (a call's body is
    /// read whole before it queues, so that unread data never holds HTTP/2 flow control);
    /// past it a call is refused at once.
    max_buffered_request_bytes: usize, "BYTES", default 64 * 1024 * 1024;
    /// Connections the main listener keeps open at once; at the cap the one idle (or stalled)
    /// the longest is closed for a new one, or the new one is refused (docs/security.md).
    max_connections: usize, "N", default 10_000;
    /// A write to a client that makes no progress for this long (the client does not read)
    /// closes its connection, on every listener (admin: at most 5 s).
    write_timeout_ms: u64, "MS", default 10_000;
    /// A request's body must arrive within this, gRPC and HTTP/JSON alike (admin: 5 s);
    /// beyond, the call is refused with DEADLINE_EXCEEDED.
    request_body_timeout_ms: u64, "MS", default 10_000;
    /// With --authz: scaling groups one identity may put (the store holds 1,000 at most).
    max_groups_per_identity: usize, "N", default FleetLimits::default().groups_per_identity;
    /// With --authz: policies one identity may put (the store holds 10,000 at most).
    max_policies_per_identity: usize, "N", default FleetLimits::default().policies_per_identity;
    /// With --authz: bytes of definitions (policies' specs, groups' names and selectors) one
    /// identity's policies and groups may hold together.
    max_fleet_bytes_per_identity: usize, "BYTES",
        default FleetLimits::default().bytes_per_identity;
    /// Without --authz: the host names (comma-separated) a browser may reach the HTTP/JSON
    /// calls and the console at, besides IP addresses and localhost; other Host headers are
    /// refused (DNS rebinding). With --authz every Host is answered: credentials protect.
    allowed_hosts: String, "NAMES", shown "IP addresses and localhost";
    /// VPA: how far a sample or OOM time may be ahead of the evaluation time (the server
    /// clock, or the request's with --trust-request-time), in seconds.
    vpa_max_clock_skew_secs: u64, "SECS", default 300;
    /// Log filter, tracing `EnvFilter` syntax (e.g. `info,autoscaled=debug`).
    log: String, "FILTER", default "info".to_owned();
    /// Log format: text (coloured only on a terminal without NO_COLOR) or json.
    log_format: LogFormat, "FORMAT", default LogFormat::default();
    /// Export spans by OTLP/gRPC to this collector (e.g. `http://127.0.0.1:4317`), service name
    /// `autoscaled`; a caller's W3C `traceparent` is continued.
    otlp_endpoint: String, "URL", shown "off";
    /// Serve the admin HTTP listener here (e.g. `0.0.0.0:9090`): Prometheus metrics on
    /// `/metrics`, probes on `/healthz` and `/readyz`.
    metrics_listen: SocketAddr, "ADDR", shown "off";
    /// Export per-target gauges (`autoscaled_target_replicas`, `autoscaled_target_limited`)
    /// for at most this many targets, the first decided; 0: none. Each adds three series.
    metrics_per_target: usize, "N", default 0;
    /// Server default of `--horizontal-pod-autoscaler-tolerance`.
    hpa_tolerance: f64, "RATIO", default Settings::default().tolerance;
    /// Server default of `--horizontal-pod-autoscaler-cpu-initialization-period`, seconds.
    hpa_cpu_initialization_period_secs: u64, "SECS",
        default Settings::default().cpu_initialization_period.as_secs();
    /// Server default of `--horizontal-pod-autoscaler-initial-readiness-delay`, seconds.
    hpa_initial_readiness_delay_secs: u64, "SECS",
        default Settings::default().initial_readiness_delay.as_secs();
    /// Server default of `--horizontal-pod-autoscaler-downscale-stabilization`, seconds.
    hpa_downscale_stabilization_secs: u64, "SECS",
        default Settings::default().downscale_stabilization.as_secs();
    /// Legacy scale-up limit factor (`scaleUpLimitFactor`).
    hpa_scale_up_limit_factor: f64, "FACTOR", default Settings::default().scale_up_limit_factor;
    /// Legacy scale-up limit minimum (`scaleUpLimitMinimum`).
    hpa_scale_up_limit_minimum: f64, "REPLICAS",
        default Settings::default().scale_up_limit_minimum;
    /// Kubernetes feature gates of the HPA controller, as kube-controller-manager takes them
    /// (`HPAScaleToZero=false`, comma-separated). Defaults are Kubernetes 1.37's:
    /// HPAScaleToZero (beta) on, HPAConfigurableTolerance (GA) locked on. A request's
    /// `spec.scale_to_zero` overrides HPAScaleToZero for its target.
    feature_gates: String, "GATE=BOOL,...", shown "1.37's";
    /// Serve TLS with this certificate chain (PEM, leaf first). Re-read when it changes and on
    /// SIGHUP, without dropping the listener. Needs --tls-key.
    tls_cert: PathBuf, "FILE", shown "off, plaintext";
    /// Private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    tls_key: PathBuf, "FILE";
    /// mTLS: clients present a certificate signed by a CA of this PEM bundle; the caller's
    /// identity is its URI SAN (SPIFFE ID), else its DNS SAN as dns:NAME, else its CN as cn:NAME.
    tls_client_ca: PathBuf, "FILE", shown "off";
    /// With --tls-client-ca: `require` a client certificate in the handshake, or accept
    /// callers without one (`optional`; they then need a bearer token under --authz).
    // No default after the merge: only applies with --tls-client-ca, so whether it was given
    // is checked.
    tls_client_auth: ClientAuth, "MODE", shown ClientAuth::default();
    /// Authorization file (TOML): rules that give identities verbs on target-key prefixes,
    /// and SHA-256 hashes of bearer tokens; whatever no rule grants is denied. Re-read like
    /// the certificate.
    authz: PathBuf, "FILE", shown "off, every call allowed";
    /// Also serve the health service alone, in plaintext, on this address (Kubernetes `grpc:`
    /// probes cannot do TLS or send credentials).
    health_listen: SocketAddr, "ADDR", shown "off";
    /// Reflection on the main port: auth (callers with an identity), open, or off.
    reflection: Exposure, "MODE", shown "auth with --authz, else open";
    /// Health on the main port: auth (callers with an identity), open, or off.
    health: Exposure, "MODE", shown "auth with --authz, else open";
    /// How often the TLS files and the authorization file are checked for changes, in
    /// seconds (0: only on SIGHUP).
    security_reload_secs: u64, "SECS", default DEFAULT_SECURITY_RELOAD_SECS;
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
    /// `--peer-secret-file`: the secret the replicas of one deployment share (etcd): it signs
    /// their registrations and the calls they forward to each other (`peers`).
    pub peer_secret_file: Option<PathBuf>,
    /// `--peer-ca`: under TLS, the CA the other replicas' certificates are checked against
    /// when forwarding to them (default: `--tls-client-ca`).
    pub peer_ca: Option<PathBuf>,
}

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig {
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            tls_client_auth: ClientAuth::Require,
            authz: None,
            peer_secret_file: None,
            peer_ca: None,
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

/// What one identity may hold (`--max-*-per-identity`), with an authorization file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FleetLimits {
    /// Scaling groups one identity may have put.
    pub groups_per_identity: usize,
    /// Policies one identity may have put.
    pub policies_per_identity: usize,
    /// Bytes of definitions (policies' specs, groups' names and selectors) one identity's
    /// policies and groups may hold together.
    pub bytes_per_identity: usize,
}

impl Default for FleetLimits {
    fn default() -> Self {
        FleetLimits {
            groups_per_identity: 100,
            policies_per_identity: 1000,
            bytes_per_identity: 1 << 20,
        }
    }
}

/// The listeners' connection and request limits (`crate::doors`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DoorConfig {
    /// `--max-connections`: the main listener's connections at once.
    pub max_connections: usize,
    /// `--write-timeout-ms`.
    pub write_timeout: Duration,
    /// `--request-body-timeout-ms`.
    pub body_timeout: Duration,
    /// `--allowed-hosts`: names besides IP addresses and localhost (lowercase).
    pub allowed_hosts: Vec<String>,
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
    /// Recommendations and scale events older than this are pruned (see `engine::hpa::prune`).
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
    /// What the listeners hold their connections and requests to (`doors`).
    pub doors: DoorConfig,
    /// What one identity's policies and scaling groups may hold (`api::fleet`).
    pub fleet: FleetLimits,
    /// `--log`: tracing `EnvFilter` directives.
    pub log: String,
    /// `--log-format`: text or JSON lines.
    pub log_format: LogFormat,
    /// OTLP/gRPC collector to export spans to; `None`: no export.
    pub otlp_endpoint: Option<String>,
    /// Where `/metrics` is served; `None`: no metrics.
    pub metrics_listen: Option<SocketAddr>,
    /// Targets that get per-target gauges, at most (0: none).
    pub metrics_per_target: usize,
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
        let knobs = self.knobs(file);
        let gates = FeatureGates::parse(knobs.feature_gates.as_deref().unwrap_or(""))
            .map_err(|message| invalid("feature_gates", message))?;
        let hpa = Settings {
            tolerance: knobs.hpa_tolerance,
            cpu_initialization_period: Duration::from_secs(
                knobs.hpa_cpu_initialization_period_secs,
            ),
            initial_readiness_delay: Duration::from_secs(knobs.hpa_initial_readiness_delay_secs),
            downscale_stabilization: Duration::from_secs(knobs.hpa_downscale_stabilization_secs),
            scale_up_limit_factor: knobs.hpa_scale_up_limit_factor,
            scale_up_limit_minimum: knobs.hpa_scale_up_limit_minimum,
            scale_to_zero: gates.hpa_scale_to_zero,
        };
        // With an authorization file, health and reflection need credentials unless opened.
        let default_exposure = if knobs.authz.is_some() {
            Exposure::Auth
        } else {
            Exposure::Open
        };
        let security = SecurityConfig {
            tls_cert: knobs.tls_cert,
            tls_key: knobs.tls_key,
            tls_client_ca: knobs.tls_client_ca,
            tls_client_auth: knobs.tls_client_auth.unwrap_or_default(),
            authz: knobs.authz,
            peer_secret_file: knobs.peer_secret_file,
            peer_ca: knobs.peer_ca,
            health_listen: knobs.health_listen,
            reflection: knobs.reflection.unwrap_or(default_exposure),
            health: knobs.health.unwrap_or(default_exposure),
            reload_interval: Duration::from_secs(knobs.security_reload_secs),
        };
        let client_auth_given = knobs.tls_client_auth.is_some();
        let config = Config {
            security,
            store: knobs.store,
            etcd: EtcdConfig {
                endpoints: knobs
                    .etcd_endpoints
                    .split(',')
                    .map(str::trim)
                    .filter(|e| !e.is_empty())
                    .map(str::to_owned)
                    .collect(),
                prefix: knobs.etcd_prefix,
                ca: knobs.etcd_ca,
                cert: knobs.etcd_cert,
                key: knobs.etcd_key,
                advertise: knobs.etcd_advertise,
            },
            listen: knobs.listen,
            data_dir: knobs.data_dir,
            durability: knobs.durability,
            flush_interval: Duration::from_millis(knobs.flush_interval_ms),
            commit_delay: Duration::from_micros(knobs.commit_delay_us),
            trust_request_time: knobs.trust_request_time,
            shutdown_grace: Duration::from_secs(knobs.shutdown_grace_secs),
            decision_log_len: knobs.decision_log_len,
            history_retention: Duration::from_secs(knobs.history_retention_secs),
            decision_retention: Duration::from_secs(knobs.decision_retention_secs),
            max_pod_names: knobs.max_pod_names,
            cache_mb: knobs.cache_mb,
            limits: Limits {
                max_message_bytes: knobs.max_message_bytes,
                max_pods: knobs.max_pods,
                max_metrics: knobs.max_metrics,
                max_key_bytes: knobs.max_key_bytes,
                max_samples: knobs.max_samples,
                max_containers: knobs.max_containers,
                max_batch_requests: knobs.max_batch_requests,
            },
            max_concurrent_requests: knobs.max_concurrent_requests,
            max_queued_requests: knobs.max_queued_requests,
            max_queue_wait: Duration::from_millis(knobs.max_queue_wait_ms),
            max_buffered_request_bytes: knobs.max_buffered_request_bytes,
            fleet: FleetLimits {
                groups_per_identity: knobs.max_groups_per_identity,
                policies_per_identity: knobs.max_policies_per_identity,
                bytes_per_identity: knobs.max_fleet_bytes_per_identity,
            },
            doors: DoorConfig {
                max_connections: knobs.max_connections,
                write_timeout: Duration::from_millis(knobs.write_timeout_ms),
                body_timeout: Duration::from_millis(knobs.request_body_timeout_ms),
                allowed_hosts: knobs
                    .allowed_hosts
                    .as_deref()
                    .unwrap_or("")
                    .split(',')
                    .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
                    .filter(|h| !h.is_empty())
                    .collect(),
            },
            log: knobs.log,
            log_format: knobs.log_format,
            otlp_endpoint: knobs.otlp_endpoint,
            metrics_listen: knobs.metrics_listen,
            metrics_per_target: knobs.metrics_per_target,
            hpa,
            vpa_max_clock_skew: Duration::from_secs(knobs.vpa_max_clock_skew_secs),
        };
        config.validate()?;
        config.validate_security(client_auth_given)?;
        Ok(config)
    }
}

impl Config {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.doors.max_connections == 0 {
            return Err(invalid("max_connections", "must be at least 1"));
        }
        for (key, value) in [
            ("write_timeout_ms", self.doors.write_timeout),
            ("request_body_timeout_ms", self.doors.body_timeout),
        ] {
            if value < Duration::from_millis(100) {
                return Err(invalid(key, "must be at least 100 (milliseconds)"));
            }
        }
        if let Some(bad) = self.doors.allowed_hosts.iter().find(|h| {
            !h.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.'))
        }) {
            return Err(invalid(
                "allowed_hosts",
                format!("{bad:?} is not a host name (letters, digits, '-' and '.')"),
            ));
        }
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
            ("max_batch_requests", self.limits.max_batch_requests),
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
mod tests;
