//! The loop: one task per target, each firing every sync period from a jittered offset, and
//! the supervisor that (re)reads the configuration on SIGHUP or when the file changes and
//! stops gracefully on SIGTERM.
//!
//! One period of one target, as the HPA controller's `reconcileAutoscaler` does it with its
//! scale subresource: read the current count (the scheduler's), gather the observations,
//! ask the service, and when the decision changes the count apply it and report the outcome
//! (`ReportScale`: a failure stores no scale event and shows FailedUpdateScale). A failure
//! at any step is logged with the target's key and counted; the next period tries again.

use std::{
    collections::BTreeMap,
    hash::{DefaultHasher, Hash, Hasher},
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use autoscaled_ctl::client::security::{ClientSecurity, Credentials};
use autoscaled_wire::pb::v1::{
    self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient,
};
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::watch,
    task::JoinHandle,
};
use tonic::{codegen::InterceptedService, transport::Channel};

use crate::{
    actuate::{self, ScaleRequest},
    command,
    config::{Config, PrometheusSource, ServerConfig, Source, Target},
    http::Client,
    metrics, observe,
};

/// The service client every target shares.
pub type Service = HorizontalAutoscalerClient<InterceptedService<Channel, Credentials>>;

/// The service and its address as configured (for messages: which server did not answer).
#[derive(Clone)]
pub struct Server {
    pub client: Service,
    pub addr: String,
    /// The targets' Recommends, sent as batches (`batch`).
    pub batches: crate::batch::Batches,
}

impl Server {
    /// The policy `name` as the server stores it.
    pub async fn policy(&self, name: &str) -> Result<pb::Policy, String> {
        let request = pb::GetPolicyRequest {
            name: name.to_owned(),
        };
        match self.client.clone().get_policy(request).await {
            Ok(response) => Ok(response.into_inner()),
            Err(s) => Err(format!(
                "policy: GetPolicy {name:?} from {}: {}",
                self.addr,
                status_text(&s)
            )),
        }
    }
}

/// How long a stop waits for the periods in flight before leaving them.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// A client for `server`; connects lazily, so the agent starts (and retries each period)
/// while the service is down.
pub fn service(server: &ServerConfig) -> Result<Server, String> {
    let token = match &server.token_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| format!("server.token_file {}: {e}", path.display()))?
                .trim()
                .to_owned(),
        ),
        None => None,
    };
    if token.is_some() && server.ca.is_none() && !loopback(&server.addr) {
        tracing::warn!(
            addr = %server.addr,
            "server.token_file: the token is sent in plaintext to a server that is not on loopback; give server.ca to send it over TLS"
        );
    }
    let security = ClientSecurity {
        ca: server.ca.clone(),
        cert: server.cert.clone(),
        key: server.key.clone(),
        token,
        tls_server_name: None,
    };
    // The tools' option names in its messages are this file's fields here.
    let field_names = |e: String| {
        e.replace("--ca", "server.ca")
            .replace("--cert", "server.cert")
            .replace("--key", "server.key")
    };
    let endpoint = security
        .endpoint(&server.addr)
        .map_err(|e| format!("server: {}", field_names(e.to_string())))?
        .timeout(server.timeout)
        .connect_timeout(Duration::from_secs(3));
    let credentials = security.credentials().map_err(|e| format!("server: {e}"))?;
    let client = HorizontalAutoscalerClient::with_interceptor(endpoint.connect_lazy(), credentials);
    Ok(Server {
        batches: crate::batch::Batches::new(client.clone()),
        client,
        addr: server.addr.clone(),
    })
}

/// Whether `addr` (`host:port` or a URI) names this machine.
fn loopback(addr: &str) -> bool {
    let rest = addr.split_once("://").map_or(addr, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or("");
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(h, port)| {
            if port.chars().all(|c| c.is_ascii_digit()) {
                h
            } else {
                authority
            }
        })
        .trim_start_matches('[')
        .trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Where each target's first period falls in its sync period: one of the period's whole
/// seconds, chosen by the key's hash, so that targets configured together do not all fire
/// at once (and a restart keeps the spread), while those of one second fire together and
/// their Recommends go as one batch (`batch`). A period under two seconds is spread evenly.
fn offset(key: &str, period: Duration) -> Duration {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    let hash = h.finish();
    match period.as_secs() {
        0 | 1 => period.mul_f64((hash % 10_000) as f64 / 10_000.0),
        seconds => Duration::from_secs(hash % seconds),
    }
}

/// What one period did, for the log line and the tests.
#[derive(Debug)]
pub struct PeriodReport {
    pub current: i32,
    pub desired: i32,
    pub applied: Option<Result<(), String>>,
    /// Kubernetes' rescale reason (`cpu resource utilization (percentage of request) above
    /// target`), when the count changes.
    pub reason: String,
    /// The conditions not in their usual state (AbleToScale False, ScalingActive False,
    /// ScalingLimited True), as `Type Status Reason: message`: why a period held.
    pub holding: Vec<String>,
}

/// What a target's task remembers between periods.
#[derive(Default)]
pub struct TargetMemory {
    pub observe: observe::Memory,
    /// With a policy that gives the metrics: its version and metrics, fetched at the start
    /// and again when a decision names another version.
    policy: Option<(u64, Vec<pb::MetricSpec>)>,
}

/// The metrics the target's requests are built for: the file's, or its policy's.
async fn metrics_of(
    server: &Server,
    target: &Target,
    memory: &mut TargetMemory,
) -> Result<Vec<pb::MetricSpec>, String> {
    let Some(policy) = target
        .policy
        .as_ref()
        .filter(|_| target.spec.metrics.is_empty())
    else {
        return Ok(target.spec.metrics.clone());
    };
    if memory.policy.is_none() {
        let p = server.policy(policy).await?;
        let metrics = p.spec.map(|s| s.metrics).unwrap_or_default();
        memory.policy = Some((p.version, metrics));
    }
    Ok(memory
        .policy
        .as_ref()
        .map(|(_, m)| m.clone())
        .unwrap_or_default())
}

/// One period of `target`. Errors name the step, and the server or file field involved.
pub async fn period(
    server: &Server,
    http: &Client,
    target: &Target,
    memory: &mut TargetMemory,
) -> Result<PeriodReport, String> {
    let key = target.key.as_str();
    // 1. The current count, from the scheduler.
    let replicas_from_command = match &target.replicas {
        Some(spec) => {
            let argv = command::render(&spec.argv, key, 0, 0);
            let out = command::run_spec(spec, argv)
                .await
                .map_err(|e| format!("replicas: {e}"))?;
            let n = command::parse_replicas(&out.stdout).map_err(|e| format!("replicas: {e}"))?;
            let max_pods = autoscaled_wire::Limits::default().max_pods;
            if usize::try_from(n).is_ok_and(|c| c > max_pods) {
                return Err(format!(
                    "replicas: the command printed {n}, more than the server's max_pods ({max_pods})"
                ));
            }
            Some(n)
        }
        None => None,
    };
    // 2. The observations.
    let mut request = match &target.source {
        Source::Prometheus(PrometheusSource { metrics, pods, .. }) => {
            let spec_metrics = metrics_of(server, target, memory).await?;
            if target.spec.metrics.is_empty() {
                // The policy's metrics, checked against the file's queries as at load.
                crate::config::check_metrics(&spec_metrics, metrics, pods.as_ref())
                    .map_err(|e| format!("{e} (the metrics of policy {:?})", target.policy))?;
            }
            let current = replicas_from_command.unwrap_or(0);
            let observed =
                observe::from_prometheus(http, target, &spec_metrics, current, &mut memory.observe)
                    .await;
            for f in &observed.failures {
                metrics::query_failure(key, &f.what);
                tracing::warn!(target.key = key, query = %f.what, error = %f.error, "query failed: the metric is unavailable this period");
            }
            observed.request
        }
        Source::Command(spec) => {
            let argv = command::render(&spec.argv, key, replicas_from_command.unwrap_or(0), 0);
            let out = command::run_spec(spec, argv)
                .await
                .map_err(|e| format!("source: {e}"))?;
            let mut request = autoscaled_ctl::client::parse_recommend_request(
                &out.stdout,
                "the source command's output",
            )
            .map_err(|e| format!("source: {e}"))?;
            if let Some(current) = replicas_from_command {
                request.current_replicas = current;
            }
            request
        }
    };
    request.target_key = key.to_owned();
    request.spec = Some(target.spec.clone());
    request.policy = target.policy.clone().unwrap_or_default();
    request.dry_run = false;
    request.shadow = target.shadow;
    request.evaluation_time = None;
    let current = request.current_replicas;
    // The server refuses more pods than its limit anyway; a count beyond it is a broken
    // replicas command (`wc -c` for `wc -l`), not a fleet: no placeholders for it.
    let max_pods = autoscaled_wire::Limits::default().max_pods;
    if usize::try_from(current).is_ok_and(|c| c > max_pods) {
        return Err(format!(
            "replicas: {current} is more than the server's max_pods ({max_pods}); check the replicas command"
        ));
    }
    // 3. The decision.
    let started = Instant::now();
    let response = server.batches.recommend(request).await;
    metrics::recommend_call(
        key,
        response.as_ref().err().map(tonic::Status::code),
        started.elapsed(),
    );
    let response =
        response.map_err(|s| format!("Recommend to {}: {}", server.addr, status_text(&s)))?;
    for w in &response.warnings {
        tracing::warn!(target.key = key, field = %w.field, pods = w.pods_total, "{}", w.message);
    }
    // A decision under another version of the policy: its metrics may have changed.
    if let (Some(p), Some((version, _))) = (&response.policy, &memory.policy)
        && p.version != *version
    {
        memory.policy = None;
    }
    let desired = response.desired_replicas;
    // Shadow: the server's count is what the newest shadow decision asked for.
    let current = if target.shadow {
        response.current_replicas.unwrap_or(current)
    } else {
        current
    };
    metrics::replicas(key, current, desired);
    let reason = response
        .explanation
        .as_ref()
        .map_or(String::new(), |e| e.rescale_reason.clone());
    let holding = holding(&response.conditions);
    if desired == current || target.shadow {
        return Ok(PeriodReport {
            current,
            desired,
            applied: None,
            reason,
            holding,
        });
    }
    // 4. Apply, then report the outcome.
    let evaluation_time = response
        .evaluation_time
        .map(|t| rfc3339(t.seconds, t.nanos))
        .unwrap_or_default();
    let applied = actuate::apply(
        http,
        target,
        &ScaleRequest {
            target_key: key,
            current_replicas: current,
            desired_replicas: desired,
            evaluation_time,
            reason: &reason,
        },
    )
    .await;
    metrics::scale(key, desired > current, applied.is_ok());
    if applied.is_ok() && desired < current {
        memory.observe.scaled_down_at = Some(std::time::SystemTime::now());
    }
    let (outcome, message) = match &applied {
        Ok(()) => (pb::ScaleOutcome::Applied, String::new()),
        Err(e) => (pb::ScaleOutcome::Failed, truncate(e, 1000)),
    };
    let report = server
        .client
        .clone()
        .report_scale(pb::ReportScaleRequest {
            target_key: key.to_owned(),
            evaluation_time: response.evaluation_time,
            desired_replicas: desired,
            outcome: outcome as i32,
            message,
        })
        .await;
    if let Err(s) = report {
        tracing::warn!(target.key = key, server = %server.addr, error = %status_text(&s), "ReportScale failed: the service counts the scale as applied");
    }
    Ok(PeriodReport {
        current,
        desired,
        applied: Some(applied),
        reason,
        holding,
    })
}

/// The conditions that held or limited the count, as `Type Status Reason: message`: those
/// not in their usual state (AbleToScale or ScalingActive False, ScalingLimited True), and
/// AbleToScale's stabilization reasons (True, but the count held by the window).
fn holding(conditions: &[pb::Condition]) -> Vec<String> {
    conditions
        .iter()
        .filter(|c| {
            let usual = match c.r#type.as_str() {
                "AbleToScale" => {
                    c.status == "True"
                        && !matches!(
                            c.reason.as_str(),
                            "ScaleDownStabilized" | "ScaleUpStabilized"
                        )
                }
                "ScalingActive" => c.status == "True",
                "ScalingLimited" => c.status == "False",
                _ => true,
            };
            !usual
        })
        .map(|c| format!("{} {} {}: {}", c.r#type, c.status, c.reason, c.message))
        .collect()
}

fn truncate(text: &str, max: usize) -> String {
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() && c != '\t' { ' ' } else { c })
        .collect();
    if clean.len() <= max {
        return clean;
    }
    let mut end = max;
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &clean[..end])
}

/// A status in one line, with its field violations.
fn status_text(s: &tonic::Status) -> String {
    use tonic_types::StatusExt;
    let mut text = format!("{:?}: {}", s.code(), s.message());
    if let Some(bad) = s.get_details_bad_request() {
        for v in bad.field_violations.iter().take(5) {
            text.push_str(&format!(" [{}: {}]", v.field, v.description));
        }
    }
    text
}

/// Seconds and nanoseconds since the epoch in RFC 3339 (UTC).
fn rfc3339(seconds: i64, nanos: i32) -> String {
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60,
        nanos / 1_000_000
    )
}

/// One target's task: periods until `stop` changes.
async fn target_loop(
    target: Arc<Target>,
    service: Server,
    http: Client,
    mut stop: watch::Receiver<bool>,
    previous: Option<JoinHandle<()>>,
) {
    // The same key's previous task (before a reload changed it) finishes its period first:
    // two periods of one target never overlap.
    if let Some(previous) = previous {
        let _ = previous.await;
    }
    let key = target.key.as_str();
    let period_len = target.sync_period;
    let mut next = tokio::time::Instant::now() + offset(key, period_len);
    let mut memory = TargetMemory::default();
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            _ = stop.changed() => return,
        }
        let lag = tokio::time::Instant::now().saturating_duration_since(next);
        metrics::period_lag(lag);
        let started = Instant::now();
        let result = period(&service, &http, &target, &mut memory).await;
        metrics::period(key, result.is_ok(), started.elapsed());
        match result {
            Ok(r) => match &r.applied {
                None if r.holding.is_empty() => tracing::info!(
                    target.key = key,
                    current = r.current,
                    desired = r.desired,
                    shadow = target.shadow,
                    "decided"
                ),
                // Held (or moved) by a condition: say which, as `kubectl describe hpa` would.
                None => tracing::info!(
                    target.key = key,
                    current = r.current,
                    desired = r.desired,
                    shadow = target.shadow,
                    conditions = %r.holding.join("; "),
                    "decided"
                ),
                Some(Ok(())) => tracing::info!(
                    target.key = key,
                    current = r.current,
                    desired = r.desired,
                    reason = %r.reason,
                    "scaled"
                ),
                Some(Err(e)) => {
                    tracing::warn!(target.key = key, current = r.current, desired = r.desired, error = %e, "scale failed (reported: FailedUpdateScale)")
                }
            },
            Err(e) => {
                tracing::warn!(target.key = key, error = %e, "period failed; the next one retries")
            }
        }
        next += period_len;
        let now = tokio::time::Instant::now();
        if next <= now {
            // A period longer than the sync period: skip the missed ones.
            next = now + period_len;
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// `agent.delete_removed`: once the removed target's last period has finished, its history
/// is deleted on the server (DeleteTarget), as deleting an HPA forgets it.
async fn delete_after(server: Server, key: String, last: JoinHandle<()>) {
    let _ = last.await;
    let answer = server
        .client
        .clone()
        .delete_target(pb::DeleteTargetRequest {
            target_key: key.clone(),
        })
        .await;
    match answer {
        Ok(_) => tracing::info!(
            target.key = key.as_str(),
            "target deleted on the server (removed from the file; agent.delete_removed)"
        ),
        Err(s) if s.code() == tonic::Code::NotFound => {}
        Err(s) => tracing::warn!(
            target.key = key.as_str(),
            server = %server.addr,
            error = %status_text(&s),
            "DeleteTarget failed: the removed target's history stays on the server"
        ),
    }
}

struct Running {
    target: Arc<Target>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// The running targets and what they share.
pub struct Supervisor {
    path: PathBuf,
    running: BTreeMap<String, Running>,
    /// The server section and the token it read, as the service was built with them.
    server: Option<(ServerConfig, Option<String>)>,
    service: Option<Server>,
    http: Client,
    stamp: Option<(SystemTime, u64)>,
}

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

impl Supervisor {
    /// A supervisor of the targets in `path` (nothing runs before [`Self::apply`]).
    pub fn new(path: PathBuf) -> Self {
        Supervisor {
            path,
            running: BTreeMap::new(),
            server: None,
            service: None,
            http: Client::default(),
            stamp: None,
        }
    }

    /// Makes the running targets those of `config`: removed ones stop, changed ones restart,
    /// unchanged ones go on undisturbed. A target the file now gets wrong keeps running as it
    /// was (its mistake is logged).
    pub fn apply(&mut self, config: &Config) -> Result<(), String> {
        for line in &config.rejected {
            tracing::error!(target: "autoscaled_agent::config", "{line}; skipped (the other targets run)");
        }
        let wanted: BTreeMap<&str, &Target> =
            config.targets.iter().map(|t| (t.key.as_str(), t)).collect();
        // A target the file now gets wrong keeps running as it was (not a duplicate key,
        // whose first definition is in `wanted`).
        let rejected_keys: Vec<&str> = config
            .rejected
            .iter()
            .filter_map(|l| {
                l.split_once(" (")
                    .and_then(|(_, rest)| rest.split_once("):"))
                    .map(|(k, _)| k)
            })
            .filter(|k| !wanted.contains_key(k))
            .collect();
        // Stopped tasks by key: a restarted target's new task waits for its old one.
        let mut stopped: BTreeMap<String, JoinHandle<()>> = BTreeMap::new();
        let mut kept: Vec<Arc<Target>> = Vec::new();
        // A changed section, or a rotated token (the token file is read at each reload).
        let token = config
            .server
            .token_file
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok());
        let server = (config.server.clone(), token);
        if self.server.as_ref() != Some(&server) || self.service.is_none() {
            let service = service(&config.server)?;
            self.service = Some(service);
            self.server = Some(server);
            // Every target restarts on the new connection; those kept as they were too.
            for (key, r) in std::mem::take(&mut self.running) {
                let _ = r.stop.send(true);
                if rejected_keys.contains(&key.as_str()) {
                    kept.push(Arc::clone(&r.target));
                }
                stopped.insert(key, r.task);
            }
        }
        let keys: Vec<String> = self.running.keys().cloned().collect();
        for key in keys {
            let keep_as_was = rejected_keys.contains(&key.as_str());
            let same = wanted
                .get(key.as_str())
                .is_some_and(|t| *self.running[&key].target == **t);
            if !same
                && !keep_as_was
                && let Some(r) = self.running.remove(&key)
            {
                let _ = r.stop.send(true);
                stopped.insert(key.clone(), r.task);
                tracing::info!(
                    target.key = key.as_str(),
                    "target stopped (removed or changed)"
                );
            }
        }
        let targets = config
            .targets
            .iter()
            .map(|t| Arc::new(t.clone()))
            .chain(kept);
        for target in targets {
            if self.running.contains_key(&target.key) {
                continue;
            }
            let previous = stopped.remove(&target.key);
            self.start(target, previous)?;
        }
        // What is left stopped and not started again was removed from the file.
        if config.delete_removed {
            for (key, task) in stopped {
                let Some(server) = self.service.clone() else {
                    break;
                };
                tokio::spawn(delete_after(server, key, task));
            }
        }
        metrics::targets(self.running.len(), config.rejected.len());
        Ok(())
    }

    /// Starts `target`'s task, after `previous` (its old task) has finished.
    fn start(
        &mut self,
        target: Arc<Target>,
        previous: Option<JoinHandle<()>>,
    ) -> Result<(), String> {
        let service = self.service.clone().ok_or("no service")?;
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(target_loop(
            Arc::clone(&target),
            service,
            self.http.clone(),
            stopped,
            previous,
        ));
        tracing::info!(target.key = target.key.as_str(), sync_period = ?target.sync_period, shadow = target.shadow, policy = target.policy.as_deref().unwrap_or(""), "target started");
        self.running
            .insert(target.key.clone(), Running { target, stop, task });
        Ok(())
    }

    /// Restarts the targets whose task ended without being stopped (a panic): one bad
    /// answer must not silence a target until the next restart.
    fn revive(&mut self) {
        let ended: Vec<String> = self
            .running
            .iter()
            .filter(|(_, r)| r.task.is_finished() && !*r.stop.borrow())
            .map(|(k, _)| k.clone())
            .collect();
        for key in ended {
            if let Some(r) = self.running.remove(&key) {
                tracing::error!(
                    target.key = key.as_str(),
                    "the target's task ended unexpectedly; restarted"
                );
                if let Err(e) = self.start(r.target, None) {
                    tracing::error!(target.key = key.as_str(), error = %e, "cannot restart the target");
                }
            }
        }
    }

    /// Reads the file again and applies it; a file that does not parse leaves everything
    /// running as it was.
    pub fn reload(&mut self, why: &str) {
        self.stamp = stamp(&self.path);
        match Config::load(&self.path) {
            Ok(config) => match self.apply(&config) {
                Ok(()) => {
                    metrics::reload(true);
                    tracing::info!(
                        why,
                        targets = config.targets.len(),
                        rejected = config.rejected.len(),
                        "configuration reloaded"
                    );
                }
                Err(e) => {
                    metrics::reload(false);
                    tracing::error!(why, error = %e, "configuration not applied; the running targets go on");
                }
            },
            Err(e) => {
                metrics::reload(false);
                tracing::error!(why, error = %e, "configuration not reloaded; the running targets go on");
            }
        }
    }

    /// Runs until SIGTERM or SIGINT: reloads on SIGHUP and when the file changes (checked
    /// every 2 s), then stops every target, waiting up to 30 s for periods in flight.
    pub async fn run(mut self) -> Result<(), String> {
        self.stamp = stamp(&self.path);
        let mut hup = signal(SignalKind::hangup()).map_err(|e| e.to_string())?;
        let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
        let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
        let mut poll = tokio::time::interval(Duration::from_secs(2));
        loop {
            tokio::select! {
                _ = hup.recv() => self.reload("SIGHUP"),
                _ = poll.tick() => {
                    if stamp(&self.path) != self.stamp {
                        self.reload("file changed");
                    }
                    self.revive();
                }
                _ = term.recv() => break,
                _ = int.recv() => break,
            }
        }
        tracing::info!(
            targets = self.running.len(),
            "stopping: waiting for the periods in flight"
        );
        let running = std::mem::take(&mut self.running);
        for r in running.values() {
            let _ = r.stop.send(true);
        }
        let aborts: Vec<_> = running.values().map(|r| r.task.abort_handle()).collect();
        let all = async {
            for (_, r) in running {
                let _ = r.task.await;
            }
        };
        if tokio::time::timeout(STOP_GRACE, all).await.is_err() {
            // The periods still running are dropped, and with them their commands' whole
            // process groups (command::run kills a group it leaves).
            tracing::warn!("periods still running after 30 s; stopping them and their commands");
            for a in &aborts {
                a.abort();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tracing::info!("stopped");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_spread_within_the_period() {
        let p = Duration::from_secs(15);
        let offsets: Vec<Duration> = (0..100).map(|i| offset(&format!("t{i}"), p)).collect();
        assert!(offsets.iter().all(|o| *o < p && o.subsec_nanos() == 0));
        let first_half = offsets.iter().filter(|o| **o < p / 2).count();
        assert!((25..=75).contains(&first_half), "{first_half}");
    }

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(1_795_000_000, 250_000_000),
            "2026-11-18T11:06:40.250Z"
        );
    }
}
