//! The HPA conformance cases sent through a running server (`autoscaled conformance --grpc
//! ADDR DIR`), so that the wire conversion, the store and the per-target history are held to
//! the same expectations as the engine.
//!
//! Loading ([`hpa::HpaCase`]) and comparing ([`hpa::check_step`]) are those of the engine
//! runner; only the execution differs: each case gets its own target key
//! (`conformance/<file stem>/<run suffix>`), each step is one `Recommend` carrying the step's
//! instant as `evaluation_time` (the server must run with `--trust-request-time`), and the
//! response is converted back into the engine's [`Decision`] for the checker.
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

use std::{
    collections::HashMap,
    fmt::Write as _,
    path::{Path, PathBuf},
};

use tonic::transport::Channel;

use super::{
    CaseOutcome, CaseStatus, Report,
    hpa::{self, EngineExecutor, HpaCase, StepInput, StepRun},
};
use crate::{
    api::convert::to_timestamp,
    client,
    engine::{
        condition::{Condition, ConditionReason, ConditionType},
        history::{History, Recommendation},
        hpa::{
            Decision, DecisionPath, MetricFailure, MetricOutcome, MetricProposal, PodGroups,
            defaults,
        },
        observation::{MetricSample, Observation, Pod, PodPhase},
        settings::Settings,
        spec::{
            Behavior, HorizontalSpec, MetricSpec, MetricTarget, MetricTargetType,
            ScalingPolicyType, ScalingRules, SelectPolicy,
        },
        time::Time,
    },
    pb::v1::{self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient},
};

/// Sends conformance cases to one server.
pub struct GrpcRunner {
    runtime: tokio::runtime::Runtime,
    client: HorizontalAutoscalerClient<Channel>,
    /// Appended to every target key, so that runs against the same data folder do not see
    /// each other's history.
    run_suffix: String,
}

/// Why a step could not be judged as passed.
enum StepError {
    /// A real difference (or a transport / server error).
    Failed(String),
    /// An expectation the API does not expose for this step.
    NotExposed(String),
}

impl GrpcRunner {
    /// Connects to `addr` (`host:port` or an `http://` URI).
    pub fn connect(addr: &str) -> Result<GrpcRunner, String> {
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
        Ok(GrpcRunner {
            runtime,
            client,
            run_suffix: format!("{:x}-{nanos:x}", std::process::id()),
        })
    }

    /// Runs every `*.json` case under `dir`, in path order.
    pub fn run_dir(&mut self, dir: &Path) -> Report {
        super::run_dir_with(dir, |file| self.run_case_file(file))
    }

    /// Runs one case file.
    pub fn run_case_file(&mut self, path: &Path) -> CaseOutcome {
        let stem = path
            .file_stem()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let outcome = |name, status| CaseOutcome::new(path, name, status);
        let value = match super::read_case(path) {
            Ok(v) => v,
            Err(e) => return outcome(stem, CaseStatus::Failed(e)),
        };
        if value.get("kind").is_some() {
            return outcome(
                stem,
                CaseStatus::Skipped("VPA case: not run through the HorizontalAutoscaler".into()),
            );
        }
        let case = match HpaCase::from_value(value) {
            Ok(case) => case,
            Err(e) => return outcome(stem, CaseStatus::Failed(e)),
        };
        let name = case.name.clone();
        if let Some(reason) = not_on_the_wire(&case) {
            return outcome(name, CaseStatus::Skipped(reason));
        }
        let key = format!("conformance/{stem}/{}", self.run_suffix);
        let status = match self.run_case(&case, &key) {
            Ok(()) => CaseStatus::Passed,
            Err(StepError::NotExposed(why)) => CaseStatus::Skipped(why),
            Err(StepError::Failed(why)) if initial_recommendation_explains(&case, &why) => {
                CaseStatus::Skipped(format!(
                    "history.recommendations is [] but a new target on the server records the initial recommendation, which alone explains: {why}"
                ))
            }
            Err(StepError::Failed(why)) => CaseStatus::Failed(why),
        };
        outcome(name, status)
    }

    fn run_case(&mut self, case: &HpaCase, key: &str) -> Result<(), StepError> {
        for step in &case.steps {
            let at = |e: String| format!("step {}: {e}", step.index);
            let StepInput::Observe(observation) = &step.input else {
                // Excluded by `not_on_the_wire`.
                return Err(StepError::NotExposed(at("prenormalized step".into())));
            };
            let request = recommend_request(key, case, step.now, observation);
            let response = self
                .runtime
                .block_on(self.client.recommend(request))
                .map_err(|s| {
                    StepError::Failed(at(format!(
                        "Recommend failed: {:?}: {}",
                        s.code(),
                        s.message()
                    )))
                })?
                .into_inner();
            let decision = decision(case, observation, &response)
                .map_err(|e| StepError::Failed(at(format!("response: {e}"))))?;
            let history = if step.expect.recommendations_after.is_some()
                || step.expect.recommendations_count_after.is_some()
            {
                Some(self.history(key).map_err(|e| StepError::Failed(at(e)))?)
            } else {
                None
            };
            let pod_groups = match &step.expect.pod_groups {
                None => None,
                Some(expected) => Some(
                    reported_pod_groups(&response, &expected.metric).ok_or_else(|| {
                        StepError::NotExposed(at(format!(
                            "pod_groups[{}]: the response reports no pod groups for this metric (the server reports them only for metrics its evaluation grouped)",
                            expected.metric
                        )))
                    })?,
                ),
            };
            let run = StepRun {
                decision,
                history,
                pod_groups,
            };
            hpa::check_step(case, step, &run).map_err(|e| StepError::Failed(at(e)))?;
        }
        Ok(())
    }

    /// The stored history of `key`, for the `recommendations_after` checks.
    fn history(&mut self, key: &str) -> Result<History, String> {
        let history = self
            .runtime
            .block_on(self.client.get_history(pb::GetHistoryRequest {
                target_key: key.to_owned(),
                ..Default::default()
            }))
            .map_err(|s| format!("GetHistory failed: {:?}: {}", s.code(), s.message()))?
            .into_inner();
        Ok(History {
            recommendations: Some(
                history
                    .recommendations
                    .iter()
                    .map(|r| Recommendation {
                        replicas: r.replicas,
                        time: from_timestamp(r.time.as_ref()),
                    })
                    .collect(),
            ),
            ..History::default()
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
    if hpa::run_case(case, &mut EngineExecutor::default()).is_err() {
        return false;
    }
    let mut as_served = case.clone();
    as_served.history.recommendations = None;
    matches!(
        hpa::run_case(&as_served, &mut EngineExecutor::default()),
        Err(engine_failure) if engine_failure == grpc_failure
    )
}

// === engine → proto ===

fn recommend_request(
    key: &str,
    case: &HpaCase,
    now: Time,
    observation: &Observation,
) -> pb::RecommendRequest {
    pb::RecommendRequest {
        target_key: key.to_owned(),
        current_replicas: observation.current_replicas,
        status_replicas: observation.status_replicas,
        spec: Some(horizontal_spec(&case.spec, &case.settings)),
        pods: observation.pods.iter().map(pod).collect(),
        object_metrics_milli: observation
            .object_metrics
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        external_metrics: observation
            .external_metrics
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    pb::ExternalMetricValues {
                        values_milli: v.clone(),
                    },
                )
            })
            .collect(),
        unavailable_metrics: observation.unavailable_metrics.iter().cloned().collect(),
        orphan_pod_metrics: observation
            .orphan_samples
            .iter()
            .map(|(pod_name, samples)| pb::OrphanPodMetrics {
                pod_name: pod_name.clone(),
                metrics: metric_samples(samples),
            })
            .collect(),
        dry_run: false,
        evaluation_time: Some(to_timestamp(now)),
    }
}

fn duration(d: std::time::Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// The spec, with every controller setting sent explicitly so the server's defaults do not
/// matter.
fn horizontal_spec(spec: &HorizontalSpec, settings: &Settings) -> pb::HorizontalSpec {
    pb::HorizontalSpec {
        min_replicas: spec.min_replicas,
        max_replicas: spec.max_replicas,
        metrics: spec.metrics.iter().map(metric_spec).collect(),
        behavior: spec.behavior.as_ref().map(behavior),
        settings: Some(pb::ControllerSettings {
            tolerance: Some(settings.tolerance),
            cpu_initialization_period: Some(duration(settings.cpu_initialization_period)),
            initial_readiness_delay: Some(duration(settings.initial_readiness_delay)),
            downscale_stabilization: Some(duration(settings.downscale_stabilization)),
            scale_up_limit_factor: Some(settings.scale_up_limit_factor),
            scale_up_limit_minimum: Some(settings.scale_up_limit_minimum),
        }),
    }
}

fn metric_spec(m: &MetricSpec) -> pb::MetricSpec {
    use pb::MetricSourceType as S;
    let (source, name, container, target) = match m {
        MetricSpec::Resource { name, target } => (S::Resource, name, "", Some(target)),
        MetricSpec::ContainerResource {
            name,
            container,
            target,
        } => (S::ContainerResource, name, container.as_str(), Some(target)),
        MetricSpec::Pods { name, target } => (S::Pods, name, "", Some(target)),
        MetricSpec::Object { name, target } => (S::Object, name, "", Some(target)),
        MetricSpec::External { name, target } => (S::External, name, "", Some(target)),
        // Not sent (see `not_on_the_wire`); an unspecified type is what the API would see.
        MetricSpec::Unknown { type_name } => (S::Unspecified, type_name, "", None),
    };
    pb::MetricSpec {
        r#type: source as i32,
        name: name.clone(),
        container: container.to_owned(),
        target: target.map(metric_target),
    }
}

fn metric_target(t: &MetricTarget) -> pb::MetricTarget {
    pb::MetricTarget {
        r#type: match t.target_type {
            MetricTargetType::Utilization => pb::MetricTargetType::Utilization,
            MetricTargetType::AverageValue => pb::MetricTargetType::AverageValue,
            MetricTargetType::Value => pb::MetricTargetType::Value,
        } as i32,
        average_utilization: t.average_utilization,
        average_value_milli: t.average_value,
        value_milli: t.value,
    }
}

fn behavior(b: &Behavior) -> pb::Behavior {
    pb::Behavior {
        scale_up: b.scale_up.as_ref().map(scaling_rules),
        scale_down: b.scale_down.as_ref().map(scaling_rules),
    }
}

fn scaling_rules(r: &ScalingRules) -> pb::ScalingRules {
    pb::ScalingRules {
        stabilization_window_seconds: r.stabilization_window_seconds,
        select_policy: match r.select_policy {
            None => pb::SelectPolicy::Unspecified,
            Some(SelectPolicy::Max) => pb::SelectPolicy::Max,
            Some(SelectPolicy::Min) => pb::SelectPolicy::Min,
            Some(SelectPolicy::Disabled) => pb::SelectPolicy::Disabled,
        } as i32,
        policies: r
            .policies
            .iter()
            .flatten()
            .map(|p| pb::ScalingPolicy {
                r#type: match p.policy_type {
                    ScalingPolicyType::Pods => pb::ScalingPolicyType::Pods,
                    ScalingPolicyType::Percent => pb::ScalingPolicyType::Percent,
                } as i32,
                value: p.value,
                period_seconds: p.period_seconds,
            })
            .collect(),
        policies_set: r.policies.is_some(),
        tolerance: r.tolerance,
    }
}

fn pod(p: &Pod) -> pb::PodSample {
    pb::PodSample {
        name: p.name.clone(),
        phase: match p.phase {
            PodPhase::Running => pb::PodPhase::Running,
            PodPhase::Pending => pb::PodPhase::Pending,
            PodPhase::Succeeded => pb::PodPhase::Succeeded,
            PodPhase::Failed => pb::PodPhase::Failed,
            PodPhase::Unknown => pb::PodPhase::Unknown,
        } as i32,
        deleting: p.deleting,
        ready: p.ready,
        ready_transition_time: p.ready_transition.map(to_timestamp),
        start_time: p.start_time.map(to_timestamp),
        requests_milli: p.requests.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        containers: p
            .containers
            .iter()
            .map(|c| pb::ContainerSample {
                name: c.name.clone(),
                requests_milli: c.requests.iter().map(|(k, v)| (k.clone(), *v)).collect(),
                usage_milli: c.usage.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            })
            .collect(),
        metrics: metric_samples(&p.metrics),
    }
}

fn metric_samples(
    samples: &std::collections::BTreeMap<String, MetricSample>,
) -> HashMap<String, pb::MetricSample> {
    samples
        .iter()
        .map(|(name, s)| {
            (
                name.clone(),
                pb::MetricSample {
                    value_milli: s.value,
                    timestamp: Some(to_timestamp(s.timestamp)),
                    window: Some(duration(s.window)),
                },
            )
        })
        .collect()
}

// === proto → engine ===

fn from_timestamp(t: Option<&prost_types::Timestamp>) -> Time {
    t.map_or_else(Time::default, |t| {
        Time::from_unix_millis(
            t.seconds
                .saturating_mul(1000)
                .saturating_add(i64::from(t.nanos / 1_000_000)),
        )
    })
}

/// An engine enum from the name the API prints (the engine's serde names are Kubernetes'
/// words, the same the API sends).
fn named<T: serde::de::DeserializeOwned>(what: &str, name: &str) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::String(name.to_owned()))
        .map_err(|_| format!("unknown {what} {name:?}"))
}

/// The response as the engine's decision, for the shared checker. Metrics are matched to the
/// defaulted spec by source type, name and container, in order.
fn decision(
    case: &HpaCase,
    observation: &Observation,
    r: &pb::RecommendResponse,
) -> Result<Decision, String> {
    let conditions = r
        .conditions
        .iter()
        .map(|c| {
            Ok(Condition {
                condition_type: named::<ConditionType>("condition type", &c.r#type)?,
                status: match c.status.as_str() {
                    "True" => true,
                    "False" => false,
                    other => return Err(format!("condition status {other:?}")),
                },
                reason: named::<ConditionReason>("condition reason", &c.reason)?,
                message: c.message.clone(),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let spec = defaults::set_defaults(&case.spec, &case.settings);
    let wire: Vec<pb::MetricSpec> = spec.metrics.iter().map(metric_spec).collect();
    let mut used = vec![false; wire.len()];
    let mut metrics = Vec::with_capacity(r.metrics.len());
    for status in &r.metrics {
        let index = (0..wire.len())
            .find(|&i| {
                !used[i]
                    && wire[i].r#type == status.r#type
                    && wire[i].name == status.name
                    && wire[i].container == status.container
            })
            .ok_or_else(|| format!("metric {:?} is not in the spec", status.name))?;
        used[index] = true;
        let result = match status.proposed_replicas {
            Some(replicas) => Ok(MetricProposal {
                replicas,
                current_average_utilization: status.current_average_utilization,
                current_average_value: status.current_average_value_milli,
                current_value: status.current_value_milli,
                usage_ratio: None,
            }),
            None => Err(MetricFailure {
                reason: named::<ConditionReason>("metric failure reason", &status.error_reason)?,
                message: status.error.clone(),
            }),
        };
        metrics.push(MetricOutcome {
            index,
            result,
            pod_groups: status.pod_groups.as_ref().map(pod_groups),
        });
    }
    let e = r.explanation.clone().unwrap_or_default();
    let non_empty = |s: String| (!s.is_empty()).then_some(s);
    Ok(Decision {
        current_replicas: observation.current_replicas,
        desired_replicas: r.desired_replicas,
        conditions,
        metrics,
        path: named::<DecisionPath>("decision path", &e.path)?,
        prenormalized_replicas: e.prenormalized_replicas,
        stabilized_replicas: e.stabilized_replicas,
        scale_up_limit: e.scale_up_limit,
        scale_down_limit: e.scale_down_limit,
        error: non_empty(e.error),
        rescale_reason: non_empty(e.rescale_reason),
    })
}

fn pod_groups(g: &pb::PodGroups) -> PodGroups {
    PodGroups {
        ready_count: g.ready_count,
        unready: g.unready.clone(),
        missing: g.missing.clone(),
        ignored: g.ignored.clone(),
    }
}

/// The pod groups the response reports for the first metric named `name`.
fn reported_pod_groups(r: &pb::RecommendResponse, name: &str) -> Option<PodGroups> {
    r.metrics
        .iter()
        .filter(|m| m.name == name)
        .find_map(|m| m.pod_groups.as_ref())
        .map(pod_groups)
}

/// The report as the command prints it: one line per failed and per skipped case (with the
/// reason), then exactly `N passed, M failed, K skipped`.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    for o in &report.outcomes {
        match &o.status {
            CaseStatus::Passed => {}
            CaseStatus::Failed(why) => {
                let _ = writeln!(out, "FAIL {}: {why}", o.file.display());
            }
            CaseStatus::Skipped(why) => {
                let _ = writeln!(out, "SKIP {}: {why}", o.file.display());
            }
        }
    }
    let _ = write!(
        out,
        "{} passed, {} failed, {} skipped",
        report.passed(),
        report.failed(),
        report.skipped()
    );
    out
}

/// `autoscaled conformance --grpc ADDR DIR`: the report on stdout, exit 1 if a case failed
/// (or the server cannot be reached).
pub fn run_command(addr: &str, dir: &Path) -> std::process::ExitCode {
    let mut runner = match GrpcRunner::connect(addr) {
        Ok(runner) => runner,
        Err(e) => {
            eprintln!("autoscaled: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let report = runner.run_dir(dir);
    println!("{}", render(&report));
    if report.success() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}

/// Files of a report that were skipped, with their reasons (for tests and summaries).
pub fn skipped(report: &Report) -> Vec<(PathBuf, String)> {
    report
        .outcomes
        .iter()
        .filter_map(|o| match &o.status {
            CaseStatus::Skipped(why) => Some((o.file.clone(), why.clone())),
            _ => None,
        })
        .collect()
}
