//! The agent's Prometheus metrics, every name in one place. The `target` label is a key of
//! the configuration file: bounded by the file, not by callers.

use std::time::Duration;

use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

/// Periods run, by `target` and `result` (`decided`, `failed`: no decision this period).
pub const PERIODS_TOTAL: &str = "autoscaled_agent_periods_total";
/// Time one period took (replicas, queries, Recommend, scale, report), by `target`.
pub const PERIOD_DURATION: &str = "autoscaled_agent_period_duration_seconds";
/// How late a period started against its schedule (the loop's lag).
pub const PERIOD_LAG: &str = "autoscaled_agent_period_lag_seconds";
/// Recommend calls, by `target` and `code` (`OK` or the gRPC code).
pub const RECOMMEND_CALLS_TOTAL: &str = "autoscaled_agent_recommend_calls_total";
/// Recommend call latency.
pub const RECOMMEND_DURATION: &str = "autoscaled_agent_recommend_duration_seconds";
/// Scales applied or failed, by `target`, `direction` and `result`.
pub const SCALES_TOTAL: &str = "autoscaled_agent_scales_total";
/// Queries that failed (their metric was unavailable that period), by `target` and `query`.
pub const QUERY_FAILURES_TOTAL: &str = "autoscaled_agent_query_failures_total";
/// The last period's counts, by `target` and `kind` (`current`, `desired`).
pub const REPLICAS: &str = "autoscaled_agent_replicas";
/// Targets running and rejected by the configuration, by `state`.
pub const TARGETS: &str = "autoscaled_agent_targets";
/// Configuration reloads, by `result`.
pub const RELOADS_TOTAL: &str = "autoscaled_agent_config_reloads_total";

const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Installs the recorder; its handle renders `/metrics`.
pub fn install() -> Result<PrometheusHandle, BuildError> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), SECONDS_BUCKETS)?
        .install_recorder()?;
    describe_counter!(
        PERIODS_TOTAL,
        Unit::Count,
        "Periods run, by target and result"
    );
    describe_histogram!(
        PERIOD_DURATION,
        Unit::Seconds,
        "Time one period took, by target"
    );
    describe_histogram!(
        PERIOD_LAG,
        Unit::Seconds,
        "How late a period started against its schedule"
    );
    describe_counter!(
        RECOMMEND_CALLS_TOTAL,
        Unit::Count,
        "Recommend calls, by target and code"
    );
    describe_histogram!(RECOMMEND_DURATION, Unit::Seconds, "Recommend call latency");
    describe_counter!(
        SCALES_TOTAL,
        Unit::Count,
        "Scales applied or failed, by target, direction and result"
    );
    describe_counter!(
        QUERY_FAILURES_TOTAL,
        Unit::Count,
        "Failed queries, by target and query"
    );
    describe_gauge!(
        REPLICAS,
        Unit::Count,
        "The last period's current and desired replicas, by target"
    );
    describe_gauge!(
        TARGETS,
        Unit::Count,
        "Targets running and rejected by the configuration"
    );
    describe_counter!(
        RELOADS_TOTAL,
        Unit::Count,
        "Configuration reloads, by result"
    );
    gauge!("autoscaled_agent_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    Ok(handle)
}

pub fn period(target: &str, decided: bool, elapsed: Duration) {
    let result = if decided { "decided" } else { "failed" };
    counter!(PERIODS_TOTAL, "target" => target.to_owned(), "result" => result).increment(1);
    histogram!(PERIOD_DURATION, "target" => target.to_owned()).record(elapsed.as_secs_f64());
}

pub fn period_lag(lag: Duration) {
    histogram!(PERIOD_LAG).record(lag.as_secs_f64());
}

pub fn recommend_call(target: &str, code: Option<tonic::Code>, elapsed: Duration) {
    let code = code.map_or_else(|| "OK".to_owned(), |c| format!("{c:?}"));
    counter!(RECOMMEND_CALLS_TOTAL, "target" => target.to_owned(), "code" => code).increment(1);
    histogram!(RECOMMEND_DURATION).record(elapsed.as_secs_f64());
}

pub fn scale(target: &str, up: bool, applied: bool) {
    counter!(
        SCALES_TOTAL,
        "target" => target.to_owned(),
        "direction" => if up { "up" } else { "down" },
        "result" => if applied { "applied" } else { "failed" }
    )
    .increment(1);
}

pub fn query_failure(target: &str, query: &str) {
    counter!(QUERY_FAILURES_TOTAL, "target" => target.to_owned(), "query" => query.to_owned())
        .increment(1);
}

pub fn replicas(target: &str, current: i32, desired: i32) {
    gauge!(REPLICAS, "target" => target.to_owned(), "kind" => "current").set(f64::from(current));
    gauge!(REPLICAS, "target" => target.to_owned(), "kind" => "desired").set(f64::from(desired));
}

pub fn targets(running: usize, rejected: usize) {
    gauge!(TARGETS, "state" => "running").set(running as f64);
    gauge!(TARGETS, "state" => "rejected").set(rejected as f64);
}

pub fn reload(ok: bool) {
    counter!(RELOADS_TOTAL, "result" => if ok { "ok" } else { "error" }).increment(1);
}
