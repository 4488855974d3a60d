//! The HPA conformance cases sent through a running server (`autoscalectl conformance --grpc
//! ADDR DIR`), so that the wire conversion, the store and the per-target history are held to
//! the same expectations as the engine.
//!
//! Loading (`HpaCase`) and comparing (`super::hpa::check_step`) are the runner's; only the
//! execution differs: each case gets its own target key (`conformance/<file stem>/<run
//! suffix>`), each step is one `Recommend` carrying the step's instant as `evaluation_time`
//! (the server must run with `--trust-request-time`), and the response is converted back into
//! the engine's `Decision` for the checker.
//!
//! Both conversions are inverses (`conformance::convert`) of the wire crate's `convert`, which the
//! server runs, and each step checks them against it: the request must
//! read back (through `convert::recommend_request`) as exactly the case's inputs, and the
//! decoded decision must encode (through `convert::recommend_response`) to exactly the
//! response received. So the wire path cannot drift from the engine path unnoticed: a
//! difference fails the case and names the part.
//!
//! # What is skipped, and why
//!
//! Only cases that cannot travel over the wire, each with its reason:
//!
//! * a seeded, non-empty `history`: the API has no call that writes history;
//! * `prenormalized_desired_replicas` steps: the API always evaluates metrics;
//! * a metric type the proto cannot express (e.g. `CheddarCheese`): the API rejects unknown
//!   metric source types with INVALID_ARGUMENT by design, where the engine reports
//!   InvalidMetricSourceType;
//! * `min_replicas: 0` that the `HPAScaleToZero` gate of the case does not admit (with the
//!   gate off, or without an Object or External metric): the API server rejects such a spec,
//!   which the upstream controller tests build directly;
//! * a `pod_groups` expectation for a metric the server's response carries no pod groups for
//!   (the server reports the grouping only for metrics its evaluation grouped; the engine
//!   runner computes it apart from the decision).
//!
//! A case whose history is present but empty (`"recommendations": []`) means "no initial
//! recommendation". The API cannot say that: a fresh target records Kubernetes' initial
//! recommendation (`recordInitialRecommendation`) like a new HPA. Such cases are run; when one
//! fails, it counts as skipped (naming the difference) only if the engine passes the case as
//! written and, started from the server's actual state (recommendations absent), fails with
//! exactly the same first difference. Any other failure counts as failed.

use std::path::{Path, PathBuf};

use tonic::transport::Channel;

use super::convert::{
    decision_from_response, history_from_target_history, pod_groups, recommend_request_for,
    request_round_trip, response_round_trip,
};
use super::{
    EngineExecutor, Executor, Outcome, Report, Verdict,
    hpa::{HpaCase, HpaStep, StepInput, StepRun},
    vpa::VpaCase,
};
use crate::client;
use autoscaled_engine::{hpa::history::History, hpa::spec::MetricSpec};
use autoscaled_wire::pb::v1::{
    self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient,
};

/// Sends conformance cases to one server.
pub struct GrpcExecutor {
    runtime: tokio::runtime::Runtime,
    client: HorizontalAutoscalerClient<Channel>,
    /// Appended to every target key, so that runs against the same data folder do not see
    /// each other's history.
    run_suffix: String,
    /// The target key of the case being run.
    key: String,
}

/// The name this executor had before the runner was unified.
pub type GrpcRunner = GrpcExecutor;

impl GrpcExecutor {
    /// Connects to `addr` (`host:port` or an `http://` URI).
    pub fn connect(addr: &str) -> Result<GrpcExecutor, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start a runtime: {e}"))?;
        let client = runtime
            .block_on(client::connect(addr))
            .map_err(|e| e.to_string())?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Ok(GrpcExecutor {
            runtime,
            client,
            run_suffix: format!("{:x}-{nanos:x}", std::process::id()),
            key: String::new(),
        })
    }

    /// Checks that the server takes `evaluation_time` from requests (`--trust-request-time`),
    /// which every step needs: one dry-run Recommend carrying a time (nothing is stored). A
    /// server on its own clock rejects it with INVALID_ARGUMENT naming `evaluation_time`; the
    /// error says how to start it instead of letting every case fail the same way.
    pub fn check_server_mode(&mut self, addr: &str) -> Result<(), String> {
        let probe = pb::RecommendRequest {
            target_key: format!("conformance/mode-probe/{}", self.run_suffix),
            current_replicas: 1,
            spec: Some(pb::HorizontalSpec {
                max_replicas: 1,
                ..Default::default()
            }),
            dry_run: true,
            evaluation_time: Some(prost_types::Timestamp {
                seconds: 1_767_225_600, // 2026-01-01T00:00:00Z
                nanos: 0,
            }),
            ..Default::default()
        };
        match self.runtime.block_on(self.client.recommend(probe)) {
            Err(status)
                if status.code() == tonic::Code::InvalidArgument
                    && status.message().contains("evaluation_time") =>
            {
                Err(format!(
                    "the server at {addr} uses its own clock, and conformance --grpc sends each \
                     step's time: restart it with --trust-request-time \
                     (AUTOSCALED_TRUST_REQUEST_TIME=true), on a data folder of its own"
                ))
            }
            Err(status) if status.code() == tonic::Code::Unavailable => {
                Err(format!("cannot reach {addr}: {}", status.message()))
            }
            // Any other answer: the cases will tell.
            _ => Ok(()),
        }
    }

    /// Runs every `*.json` case under `dir`, in path order.
    pub fn run_dir(&mut self, dir: &Path) -> Report {
        super::run_dir_with(dir, self)
    }

    /// Runs one case file.
    pub fn run_case_file(&mut self, path: &Path) -> Outcome {
        super::run_case(path, self)
    }

    /// The stored history of the current case's target, for the `recommendations_after`
    /// checks.
    fn history(&mut self) -> Result<History, String> {
        let history = self
            .runtime
            .block_on(self.client.get_history(pb::GetHistoryRequest {
                target_key: self.key.clone(),
                ..Default::default()
            }))
            .map_err(|s| format!("GetHistory failed: {:?}: {}", s.code(), s.message()))?
            .into_inner();
        Ok(history_from_target_history(&history))
    }
}

impl Executor for GrpcExecutor {
    fn begin_hpa(&mut self, file: &Path, case: &HpaCase) -> Result<(), Verdict> {
        if let Some(reason) = not_on_the_wire(case) {
            return Err(Verdict::Skipped(reason));
        }
        let stem = file
            .file_stem()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        self.key = format!("conformance/{stem}/{}", self.run_suffix);
        Ok(())
    }

    fn hpa_step(&mut self, case: &HpaCase, step: &HpaStep) -> Result<StepRun, Verdict> {
        let at = |e: String| format!("step {}: {e}", step.index);
        let StepInput::Observe(observation) = &step.input else {
            // Excluded by `not_on_the_wire`.
            return Err(Verdict::Skipped(at("prenormalized step".into())));
        };
        let request =
            recommend_request_for(&self.key, &case.spec, &case.settings, observation, step.now);
        // What the server will read: exactly the case's inputs, or the server's rejection
        // (which the Recommend below reports in the server's words).
        if let Ok(Some(part)) =
            request_round_trip(&request, &case.spec, &case.settings, observation, step.now)
        {
            return Err(Verdict::Failed(at(format!(
                "request: the server reads a different {part} than the case's"
            ))));
        }
        let response = self
            .runtime
            .block_on(self.client.recommend(request))
            .map_err(|s| {
                Verdict::Failed(at(format!(
                    "Recommend failed: {:?}: {}",
                    s.code(),
                    s.message()
                )))
            })?
            .into_inner();
        let decision =
            decision_from_response(&case.spec.metrics, observation.current_replicas, &response)
                .map_err(|e| Verdict::Failed(at(format!("response: {e}"))))?;
        if !response_round_trip(&decision, &case.spec.metrics, &response) {
            return Err(Verdict::Failed(at(
                "response: the decoded decision does not encode back to the response received"
                    .into(),
            )));
        }
        let history = if step.expect.recommendations_after.is_some()
            || step.expect.recommendations_count_after.is_some()
        {
            Some(self.history().map_err(|e| Verdict::Failed(at(e)))?)
        } else {
            None
        };
        let pod_groups = match &step.expect.pod_groups {
            None => None,
            Some(expected) => Some(
                reported_pod_groups(&response, &expected.metric).ok_or_else(|| {
                    Verdict::Skipped(at(format!(
                        "pod_groups[{}]: the response reports no pod groups for this metric (the server reports them only for metrics its evaluation grouped)",
                        expected.metric
                    )))
                })?,
            ),
        };
        Ok(StepRun {
            decision,
            history,
            pod_groups,
        })
    }

    fn run_vpa(&mut self, _case: &VpaCase) -> Result<(), Verdict> {
        Err(Verdict::Skipped(
            "VPA case: not run through the HorizontalAutoscaler".into(),
        ))
    }

    fn excuse(&mut self, case: &HpaCase, failure: &str) -> Option<String> {
        initial_recommendation_explains(case, failure).then(|| {
            format!(
                "history.recommendations is [] but a new target on the server records the initial recommendation, which alone explains: {failure}"
            )
        })
    }
}

/// Why `case` cannot be sent through the API, if it cannot.
fn not_on_the_wire(case: &HpaCase) -> Option<String> {
    let h = &case.history;
    let seeded = h.recommendations.as_ref().map_or(0, Vec::len);
    let events = h.scale_up_events.len() + h.scale_down_events.len();
    if seeded > 0 || events > 0 {
        return Some(format!(
            "seeded history ({seeded} recommendations, {events} scale events): the API has no call that writes history"
        ));
    }
    if let Some(step) = case
        .steps
        .iter()
        .find(|s| matches!(s.input, StepInput::Prenormalized { .. }))
    {
        return Some(format!(
            "step {}: prenormalized_desired_replicas: the API always evaluates the metrics",
            step.index
        ));
    }
    if let Some(type_name) = case.spec.metrics.iter().find_map(|m| match m {
        MetricSpec::Unknown { type_name } => Some(type_name),
        _ => None,
    }) {
        return Some(format!(
            "metric type {type_name:?} cannot be expressed on the wire: the API rejects unknown metric source types with INVALID_ARGUMENT by design"
        ));
    }
    if let Some(v) = autoscaled_engine::hpa::validate::min_replicas_violation(
        case.spec.min_replicas,
        &case.spec.metrics,
        case.settings.scale_to_zero,
    ) {
        return Some(format!(
            "spec.{}: {}: the API server rejects this spec (the upstream controller test bypasses it)",
            v.field, v.description
        ));
    }
    None
}

/// True when the initial recommendation alone explains `grpc_failure`: `case` starts from an
/// explicitly empty recommendation list, passes through the engine as written, and fails
/// through the engine with exactly `grpc_failure` when started from what the server actually
/// starts with (no recommendations, so the initial one is recorded). A wrong expectation fails
/// the first test, a server that differs from the engine the second.
fn initial_recommendation_explains(case: &HpaCase, grpc_failure: &str) -> bool {
    if case
        .history
        .recommendations
        .as_ref()
        .is_none_or(|r| !r.is_empty())
    {
        return false;
    }
    let file = Path::new("");
    if super::run_hpa(file, case, &mut EngineExecutor::default()).is_err() {
        return false;
    }
    let mut as_served = case.clone();
    as_served.history.recommendations = None;
    matches!(
        super::run_hpa(file, &as_served, &mut EngineExecutor::default()),
        Err(Verdict::Failed(engine_failure)) if engine_failure == grpc_failure
    )
}

/// The pod groups the response reports for the first metric named `name`.
fn reported_pod_groups(
    r: &pb::RecommendResponse,
    name: &str,
) -> Option<autoscaled_engine::hpa::PodGroups> {
    r.metrics
        .iter()
        .filter(|m| m.name == name)
        .find_map(|m| m.pod_groups.as_ref())
        .map(pod_groups)
}

/// The report as the command prints it: one line per failed and per skipped case (with the
/// reason), then exactly `N passed, M failed, K skipped`.
pub fn render(report: &Report) -> String {
    report.render_with_skips()
}

/// Files of a report that were skipped, with their reasons (for tests and summaries).
pub fn skipped(report: &Report) -> Vec<(PathBuf, String)> {
    report.skipped_cases()
}

/// `autoscalectl conformance --grpc ADDR DIR`: the report on stdout, exit 1 if a case failed
/// (or the server cannot be reached).
pub fn run_command(addr: &str, dir: &Path) -> std::process::ExitCode {
    let mut runner = match GrpcExecutor::connect(addr) {
        Ok(runner) => runner,
        Err(e) => {
            eprintln!("autoscalectl: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if let Err(e) = runner.check_server_mode(addr) {
        eprintln!("autoscalectl: {e}");
        return std::process::ExitCode::FAILURE;
    }
    let report = runner.run_dir(dir);
    let printed = client::print_stdout(&report.render_with_skips());
    if report.success() {
        printed
    } else {
        std::process::ExitCode::FAILURE
    }
}
