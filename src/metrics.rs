//! Prometheus metrics: every name, unit and description in one place (style guide habit 14;
//! controller-rs `src/metrics.rs`). Labels are bounded: the RPC method (one of the served
//! routes, or `unknown`), the gRPC code, the HPA decision path and condition reasons (enums of
//! the engine). Target keys are labels only of the opt-in per-target gauges, and only for the
//! first `--metrics-per-target` targets: unbounded keys belong in traces.
//!
//! The recording functions go to the `metrics` facade; with no `--metrics-listen` no recorder
//! is installed and they cost a few atomic loads. This module depends on no other module of
//! the crate, so the store and the API can both record into it.

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use metrics::{Unit, counter, describe_counter, describe_histogram, histogram};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

/// gRPC requests answered, by `method` (`/package.Service/Method`) and `code` (numeric).
pub(crate) const REQUESTS_TOTAL: &str = "autoscaled_grpc_requests_total";
/// Time from receiving a gRPC request to its response headers, by `method` and `code`.
pub(crate) const REQUEST_DURATION: &str = "autoscaled_grpc_request_duration_seconds";
/// HPA decisions, by `path` and the `able_to_scale` and `scaling_limited` condition reasons.
pub(crate) const HPA_DECISIONS_TOTAL: &str = "autoscaled_hpa_decisions_total";
/// Recorded HPA decisions whose desired replicas differ from the current, by `direction`.
pub(crate) const HPA_RESCALES_TOTAL: &str = "autoscaled_hpa_rescales_total";
/// Rescales reported by callers (`ReportScale`), by `outcome` (`applied`, `failed`).
pub(crate) const HPA_SCALE_REPORTS_TOTAL: &str = "autoscaled_hpa_scale_reports_total";
/// Time a recorded Recommend spends committing: the write plus the wait for durability.
pub(crate) const STORE_COMMIT_DURATION: &str = "autoscaled_store_commit_duration_seconds";
/// Duration of one group-commit flush (fsync) of the store.
pub(crate) const STORE_FLUSH_DURATION: &str = "autoscaled_store_flush_duration_seconds";
/// Writes made durable by one group-commit flush.
pub(crate) const STORE_FLUSH_BATCH_SIZE: &str = "autoscaled_store_flush_batch_size";
/// Commits refused because another replica changed the target first (etcd store).
pub(crate) const STORE_CONFLICTS_TOTAL: &str = "autoscaled_store_conflicts_total";
/// Writes for a target another replica owns (etcd store), by where they were decided: `owner`
/// (forwarded) or `here` (the owner could not be reached).
pub(crate) const HPA_FORWARDED_TOTAL: &str = "autoscaled_hpa_forwarded_total";
/// Requests of RecommendBatch calls answered with an error, by `code` (numeric): the call
/// itself is answered OK, so `autoscaled_grpc_requests_total` does not show them.
pub(crate) const BATCH_REQUEST_ERRORS_TOTAL: &str = "autoscaled_batch_request_errors_total";

/// Calls refused with PERMISSION_DENIED by the authorization file, by `verb` (or `unmapped`).
pub(crate) const AUTHZ_DENIED_TOTAL: &str = "autoscaled_authz_denied_total";
/// 1, labelled with the version and the Kubernetes version whose defaults the server follows.
pub(crate) const BUILD_INFO: &str = "autoscaled_build_info";
/// Decisions replayed by Simulate (its cost: each is one engine evaluation).
pub(crate) const SIMULATE_STEPS_TOTAL: &str = "autoscaled_simulate_steps_total";
/// Calls refused with UNAUTHENTICATED, by `reason` (`missing`, `bad_token`, `malformed`).
pub(crate) const AUTHN_FAILURES_TOTAL: &str = "autoscaled_authn_failures_total";
/// TLS handshakes that failed (plaintext clients, unknown CAs, missing client certificates).
pub(crate) const TLS_HANDSHAKE_FAILURES_TOTAL: &str = "autoscaled_tls_handshake_failures_total";
/// Connections and requests a door refused or closed for one of its limits, by `door`
/// (`grpc`, `admin`, `health`) and `limit` (`connections`, `evicted`, `write_timeout`,
/// `host`, `forwarded_marker`...).
pub(crate) const DOOR_REFUSALS_TOTAL: &str = "autoscaled_door_refusals_total";
/// Re-reads of the TLS files or the authorization file, by `file` (`tls`, `authz`) and
/// `result` (`ok`, `error`: the previous material stays in force).
pub(crate) const SECURITY_RELOADS_TOTAL: &str = "autoscaled_security_reloads_total";

/// Targets with stored state, by `kind` (`hpa`, `vpa`).
pub(crate) const TARGETS: &str = "autoscaled_targets";
/// Opt-in (`--metrics-per-target`): a target's last recorded decision, by `target` and
/// `kind` (`current`, `desired`).
pub(crate) const TARGET_REPLICAS: &str = "autoscaled_target_replicas";
/// Opt-in: 1 when the target's last recorded decision was limited (ScalingLimited True).
pub(crate) const TARGET_LIMITED: &str = "autoscaled_target_limited";
pub(crate) const PREDICTIVE_DECISIONS_TOTAL: &str = "autoscaled_predictive_decisions_total";
pub(crate) const TARGET_FORECAST_WAPE: &str = "autoscaled_target_forecast_wape";

/// Set once the Prometheus recorder is installed. Without it the facade's no-op recorder
/// drops every value, but building a key still allocates (labels are copied into it, the
/// request counter's `method` and `code` twice each): the recording functions return first.
static INSTALLED: AtomicBool = AtomicBool::new(false);

fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

/// Latency buckets, seconds: 100 µs to 10 s.
const SECONDS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];
/// Batch size buckets, writes per flush.
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0];

/// Installs the Prometheus recorder and returns the handle that renders its exposition
/// (served by `admin`, with the probe paths).
pub(crate) fn install() -> Result<PrometheusHandle, BuildError> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), SECONDS_BUCKETS)?
        .set_buckets_for_metric(
            Matcher::Full(STORE_FLUSH_BATCH_SIZE.to_owned()),
            BATCH_BUCKETS,
        )?
        .install_recorder()?;
    INSTALLED.store(true, Ordering::Relaxed);
    describe();
    // Present from the start, so that /metrics is never empty and dashboards can tell
    // versions apart.
    metrics::gauge!(
        BUILD_INFO,
        "version" => env!("CARGO_PKG_VERSION"),
        "kubernetes_defaults" => "1.37"
    )
    .set(1.0);
    Ok(handle)
}

fn describe() {
    describe_counter!(REQUESTS_TOTAL, Unit::Count, "gRPC requests answered");
    describe_counter!(
        SIMULATE_STEPS_TOTAL,
        Unit::Count,
        "Decisions replayed by Simulate, each one engine evaluation"
    );
    describe_counter!(
        STORE_CONFLICTS_TOTAL,
        Unit::Count,
        "commits refused because another replica changed the target first; the decision was made again"
    );
    describe_histogram!(
        REQUEST_DURATION,
        Unit::Seconds,
        "Time from a gRPC request to its response headers"
    );
    describe_counter!(
        HPA_DECISIONS_TOTAL,
        Unit::Count,
        "HPA decisions by path and AbleToScale / ScalingLimited reason"
    );
    describe_counter!(
        HPA_RESCALES_TOTAL,
        Unit::Count,
        "Recorded HPA decisions that change the replica count, by direction"
    );
    describe_counter!(
        HPA_SCALE_REPORTS_TOTAL,
        Unit::Count,
        "Rescales reported by callers, by outcome (a failed one stores no scale event)"
    );
    describe_counter!(
        HPA_FORWARDED_TOTAL,
        Unit::Count,
        "Writes for a target another replica owns, by where they were decided (owner, here)"
    );
    describe_counter!(
        BATCH_REQUEST_ERRORS_TOTAL,
        Unit::Count,
        "Requests of RecommendBatch calls answered with an error, by code"
    );
    metrics::describe_gauge!(TARGETS, Unit::Count, "Targets with stored state, by kind");
    metrics::describe_gauge!(
        TARGET_REPLICAS,
        Unit::Count,
        "A target's last recorded current and desired replicas (opt-in, capped)"
    );
    metrics::describe_gauge!(
        TARGET_LIMITED,
        Unit::Count,
        "1 when a target's last recorded decision was limited (opt-in, capped)"
    );
    describe_counter!(
        PREDICTIVE_DECISIONS_TOTAL,
        Unit::Count,
        "Decisions of targets with spec.predictive, by mode and PredictiveScaling reason"
    );
    metrics::describe_gauge!(
        TARGET_FORECAST_WAPE,
        Unit::Count,
        "A predictive target's forecast error over the last day, as a share of its load (opt-in, capped)"
    );
    describe_histogram!(
        STORE_COMMIT_DURATION,
        Unit::Seconds,
        "Write plus durability wait of a recorded decision"
    );
    describe_histogram!(
        STORE_FLUSH_DURATION,
        Unit::Seconds,
        "Duration of one group-commit flush of the store"
    );
    describe_histogram!(
        STORE_FLUSH_BATCH_SIZE,
        Unit::Count,
        "Writes made durable by one group-commit flush"
    );
    describe_counter!(
        AUTHZ_DENIED_TOTAL,
        Unit::Count,
        "Calls refused with PERMISSION_DENIED by the authorization file, by verb"
    );
    describe_counter!(
        AUTHN_FAILURES_TOTAL,
        Unit::Count,
        "Calls refused with UNAUTHENTICATED, by reason"
    );
    describe_counter!(
        TLS_HANDSHAKE_FAILURES_TOTAL,
        Unit::Count,
        "TLS handshakes that failed"
    );
    describe_counter!(
        DOOR_REFUSALS_TOTAL,
        Unit::Count,
        "Connections and requests a listener refused or closed for one of its limits, by door and limit"
    );
    describe_counter!(
        SECURITY_RELOADS_TOTAL,
        Unit::Count,
        "Re-reads of the TLS or authorization files, by file and result"
    );
}

/// One answered gRPC request. `method` must come from the served routes (callers map an
/// unknown path to `unknown`), so the label stays bounded.
pub(crate) fn grpc_request(method: &str, code: &str, elapsed: Duration) {
    if !installed() {
        return;
    }
    let labels = [("method", method.to_owned()), ("code", code.to_owned())];
    counter!(REQUESTS_TOTAL, &labels).increment(1);
    histogram!(REQUEST_DURATION, &labels).record(elapsed.as_secs_f64());
}

/// One HPA decision; `rescale` is `Some(desired > current)` for a recorded decision that
/// changes the replica count.
pub(crate) fn hpa_decision(
    path: &'static str,
    able_to_scale: &'static str,
    scaling_limited: &'static str,
    rescale_up: Option<bool>,
) {
    if !installed() {
        return;
    }
    counter!(
        HPA_DECISIONS_TOTAL,
        "path" => path,
        "able_to_scale" => able_to_scale,
        "scaling_limited" => scaling_limited
    )
    .increment(1);
    if let Some(up) = rescale_up {
        let direction = if up { "up" } else { "down" };
        counter!(HPA_RESCALES_TOTAL, "direction" => direction).increment(1);
    }
}

/// One decision of a target with `spec.predictive` on: its mode and why the forecast did or
/// did not raise it (both from fixed lists, so the series stay few).
pub(crate) fn predictive_decision(mode: &'static str, reason: &'static str) {
    if !installed() {
        return;
    }
    counter!(PREDICTIVE_DECISIONS_TOTAL, "mode" => mode, "reason" => reason).increment(1);
}

/// The stored targets of `kind`, counted.
pub(crate) fn targets_stored(kind: &'static str, count: usize) {
    if !installed() {
        return;
    }
    metrics::gauge!(TARGETS, "kind" => kind).set(count as f64);
}

/// One more stored HPA target (its first recorded decision); the periodic count corrects
/// what other replicas sharing the store did.
pub(crate) fn target_added() {
    if !installed() {
        return;
    }
    metrics::gauge!(TARGETS, "kind" => "hpa").increment(1.0);
}

/// One stored HPA target fewer (DeleteTarget).
pub(crate) fn target_removed() {
    if !installed() {
        return;
    }
    metrics::gauge!(TARGETS, "kind" => "hpa").decrement(1.0);
}

/// At most this many targets get per-target gauges (`--metrics-per-target`).
static PER_TARGET_CAP: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// The targets that have them (the first ones decided, up to the cap).
static PER_TARGET: std::sync::Mutex<Option<std::collections::HashSet<String>>> =
    std::sync::Mutex::new(None);

/// Sets the per-target cap (server start).
pub(crate) fn set_per_target_cap(cap: usize) {
    PER_TARGET_CAP.store(cap, Ordering::Relaxed);
}

/// A recorded decision of `key`: its gauges, if it has (or may still get) a slot.
pub(crate) fn target_decision(
    key: &str,
    current: i32,
    desired: i32,
    limited: bool,
    forecast: Option<(Option<i32>, Option<f64>)>,
) {
    let cap = PER_TARGET_CAP.load(Ordering::Relaxed);
    if cap == 0 || !installed() {
        return;
    }
    {
        let mut tracked = PER_TARGET
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let tracked = tracked.get_or_insert_with(std::collections::HashSet::new);
        if !tracked.contains(key) {
            if tracked.len() >= cap {
                return;
            }
            tracked.insert(key.to_owned());
        }
    }
    let target = key.to_owned();
    metrics::gauge!(TARGET_REPLICAS, "target" => target.clone(), "kind" => "current")
        .set(f64::from(current));
    metrics::gauge!(TARGET_REPLICAS, "target" => target.clone(), "kind" => "desired")
        .set(f64::from(desired));
    metrics::gauge!(TARGET_LIMITED, "target" => target.clone()).set(if limited {
        1.0
    } else {
        0.0
    });
    // The forecast's replicas and accuracy, beside the decision, while it has them.
    if let Some((replicas, wape)) = forecast {
        if let Some(replicas) = replicas {
            metrics::gauge!(TARGET_REPLICAS, "target" => target.clone(), "kind" => "forecast")
                .set(f64::from(replicas));
        }
        if let Some(wape) = wape {
            metrics::gauge!(TARGET_FORECAST_WAPE, "target" => target).set(wape);
        }
    }
}

/// One `ReportScale` that was accepted.
pub(crate) fn scale_report(failed: bool) {
    if !installed() {
        return;
    }
    let outcome = if failed { "failed" } else { "applied" };
    counter!(HPA_SCALE_REPORTS_TOTAL, "outcome" => outcome).increment(1);
}

/// `writes` for another replica's targets: decided by their owner, or here.
pub(crate) fn forwarded(by_owner: bool, writes: u64) {
    if !installed() {
        return;
    }
    let to = if by_owner { "owner" } else { "here" };
    counter!(HPA_FORWARDED_TOTAL, "decided" => to).increment(writes);
}

/// A request of a RecommendBatch answered with the error `code`.
pub(crate) fn batch_request_error(code: tonic::Code) {
    if !installed() {
        return;
    }
    counter!(BATCH_REQUEST_ERRORS_TOTAL, "code" => (code as i32).to_string()).increment(1);
}

/// The write plus durability wait of one recorded decision.
pub(crate) fn store_commit(elapsed: Duration) {
    if !installed() {
        return;
    }
    histogram!(STORE_COMMIT_DURATION).record(elapsed.as_secs_f64());
}

/// A commit refused because another replica changed the target first.
pub(crate) fn store_conflict() {
    if !installed() {
        return;
    }
    counter!(STORE_CONFLICTS_TOTAL).increment(1);
}

/// One group-commit flush covering `batch` writes.
pub(crate) fn store_flush(batch: u64, elapsed: Duration) {
    if !installed() {
        return;
    }
    histogram!(STORE_FLUSH_DURATION).record(elapsed.as_secs_f64());
    // Precision loss above 2^53 writes in one flush is irrelevant for a histogram.
    histogram!(STORE_FLUSH_BATCH_SIZE).record(batch as f64);
}

/// `steps` decisions replayed by one Simulate.
pub(crate) fn simulate_steps(steps: u64) {
    if !installed() {
        return;
    }
    counter!(SIMULATE_STEPS_TOTAL).increment(steps);
}

/// One call refused by the authorization file; `verb` is one of the four verbs or `unmapped`.
pub(crate) fn authz_denied(verb: &'static str) {
    if !installed() {
        return;
    }
    counter!(AUTHZ_DENIED_TOTAL, "verb" => verb).increment(1);
}

/// One call refused for want of a valid identity.
pub(crate) fn authn_failure(reason: &'static str) {
    if !installed() {
        return;
    }
    counter!(AUTHN_FAILURES_TOTAL, "reason" => reason).increment(1);
}

/// A door refused or closed a connection or a request for `limit`.
pub(crate) fn door_refused(door: &'static str, limit: &'static str) {
    if !installed() {
        return;
    }
    counter!(DOOR_REFUSALS_TOTAL, "door" => door, "limit" => limit).increment(1);
}

/// One failed TLS handshake.
pub(crate) fn tls_handshake_failure() {
    if !installed() {
        return;
    }
    counter!(TLS_HANDSHAKE_FAILURES_TOTAL).increment(1);
}

/// One reload of `file` (`tls` or `authz`), `ok` or not.
pub(crate) fn security_reload(file: &'static str, ok: bool) {
    if !installed() {
        return;
    }
    let result = if ok { "ok" } else { "error" };
    counter!(SECURITY_RELOADS_TOTAL, "file" => file, "result" => result).increment(1);
}
