//! The replica calculator against the shared conformance cases of its own area: every
//! `calc-*` (replica_calculator_test.go tables) and `group-*` (TestGroupPods) case in
//! `../shared/conformance/hpa`. Only the per-metric outcome is checked here (the metric's
//! proposal and status, the pod grouping, whether the metric failed); the full reconciliation
//! is the conformance runner's business.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

use autoscaled::engine::{
    hpa::replicas::{Tolerances, group_pods, replicas_for_metric},
    observation::{Container, MetricSample, Observation, Pod, PodPhase},
    settings::Settings,
    spec::{MetricSpec, MetricTarget, MetricTargetType},
    time::Time,
};
use serde_json::Value;

/// Any fixed instant; case times are seconds relative to it.
const NOW: Time = Time::from_unix_secs(1_763_700_000);

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance/hpa")
}

fn case_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(cases_dir())
        .expect("../shared/conformance/hpa must exist")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            (name.starts_with("calc-") || name.starts_with("group-")) && name.ends_with(".json")
        })
        .collect();
    files.sort();
    files
}

fn at(v: &Value) -> Time {
    NOW.plus_secs(v.as_i64().expect("seconds"))
}

fn secs(v: Option<&Value>, default: u64) -> Duration {
    Duration::from_secs(v.and_then(Value::as_u64).unwrap_or(default))
}

fn settings(v: &Value) -> Settings {
    let d = Settings::default();
    Settings {
        tolerance: v["tolerance"].as_f64().unwrap_or(d.tolerance),
        cpu_initialization_period: secs(v.get("cpu_initialization_period_s"), 300),
        initial_readiness_delay: secs(v.get("initial_readiness_delay_s"), 30),
        downscale_stabilization: secs(v.get("downscale_stabilization_s"), 300),
        scale_up_limit_factor: v["scale_up_limit_factor"]
            .as_f64()
            .unwrap_or(d.scale_up_limit_factor),
        scale_up_limit_minimum: v["scale_up_limit_minimum"]
            .as_f64()
            .unwrap_or(d.scale_up_limit_minimum),
    }
}

/// `tolerancesForHpa` with the configurable-tolerance gate on.
fn tolerances(settings: &Settings, behavior: &Value) -> Tolerances {
    let side = |dir: &str| {
        behavior
            .get(dir)
            .and_then(|r| r.get("tolerance"))
            .and_then(Value::as_f64)
            .unwrap_or(settings.tolerance)
    };
    Tolerances {
        scale_down: side("scale_down"),
        scale_up: side("scale_up"),
    }
}

fn target(v: &Value) -> MetricTarget {
    MetricTarget {
        target_type: match v["type"].as_str() {
            Some("AverageValue") => MetricTargetType::AverageValue,
            Some("Value") => MetricTargetType::Value,
            _ => MetricTargetType::Utilization,
        },
        average_utilization: v["average_utilization"].as_i64().map(|x| x as i32),
        average_value: v["average_value"].as_i64(),
        value: v["value"].as_i64(),
    }
}

fn metric_spec(v: &Value) -> MetricSpec {
    let name = v["name"].as_str().unwrap_or_default().to_string();
    let t = target(&v["target"]);
    match v["type"].as_str().expect("metric type") {
        "Resource" => MetricSpec::Resource { name, target: t },
        "ContainerResource" => MetricSpec::ContainerResource {
            name,
            container: v["container"].as_str().expect("container").to_string(),
            target: t,
        },
        "Pods" => MetricSpec::Pods { name, target: t },
        "Object" => MetricSpec::Object { name, target: t },
        "External" => MetricSpec::External { name, target: t },
        other => MetricSpec::Unknown {
            type_name: other.to_string(),
        },
    }
}

fn metric_name(m: &MetricSpec) -> Option<&str> {
    match m {
        MetricSpec::Resource { name, .. }
        | MetricSpec::ContainerResource { name, .. }
        | MetricSpec::Pods { name, .. }
        | MetricSpec::Object { name, .. }
        | MetricSpec::External { name, .. } => Some(name),
        MetricSpec::Unknown { .. } => None,
    }
}

fn quantities(v: &Value) -> BTreeMap<String, i64> {
    v.as_object()
        .map(|o| {
            o.iter()
                .map(|(k, x)| (k.clone(), x.as_i64().expect("quantity")))
                .collect()
        })
        .unwrap_or_default()
}

fn sample(v: &Value) -> MetricSample {
    MetricSample {
        value: v["value"].as_i64(),
        timestamp: at(&v["timestamp_s"]),
        window: secs(v.get("window_s"), 60),
    }
}

fn samples(v: &Value) -> BTreeMap<String, MetricSample> {
    v.as_object()
        .map(|o| o.iter().map(|(k, s)| (k.clone(), sample(s))).collect())
        .unwrap_or_default()
}

fn pod(v: &Value) -> Pod {
    Pod {
        name: v["name"].as_str().expect("pod name").to_string(),
        phase: match v["phase"].as_str().unwrap_or("Running") {
            "Pending" => PodPhase::Pending,
            "Succeeded" => PodPhase::Succeeded,
            "Failed" => PodPhase::Failed,
            "Unknown" => PodPhase::Unknown,
            _ => PodPhase::Running,
        },
        deleting: v["deleting"].as_bool().unwrap_or(false),
        ready: v["ready"].as_bool(),
        ready_transition: v.get("ready_transition_s").filter(|x| !x.is_null()).map(at),
        start_time: v.get("start_s").filter(|x| !x.is_null()).map(at),
        requests: quantities(&v["requests"]),
        containers: v["containers"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .map(|c| Container {
                        name: c["name"].as_str().expect("container name").to_string(),
                        requests: quantities(&c["requests"]),
                        usage: quantities(&c["usage"]),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        metrics: samples(&v["metrics"]),
    }
}

fn observation(step: &Value) -> Observation {
    Observation {
        current_replicas: step["current_replicas"].as_i64().expect("current_replicas") as i32,
        status_replicas: step["status_replicas"].as_i64().map(|x| x as i32),
        pods: step["pods"]
            .as_array()
            .map(|ps| ps.iter().map(pod).collect())
            .unwrap_or_default(),
        orphan_samples: step["orphan_pod_metrics"]
            .as_object()
            .map(|o| o.iter().map(|(k, m)| (k.clone(), samples(m))).collect())
            .unwrap_or_default(),
        object_metrics: quantities(&step["object_metrics"]),
        external_metrics: step["external_metrics"]
            .as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, xs)| {
                        let values = xs
                            .as_array()
                            .expect("external values")
                            .iter()
                            .map(|x| x.as_i64().expect("external value"))
                            .collect();
                        (k.clone(), values)
                    })
                    .collect()
            })
            .unwrap_or_default(),
        unavailable_metrics: step["unavailable_metrics"]
            .as_array()
            .map(|xs| {
                xs.iter()
                    .map(|x| x.as_str().expect("metric name").to_string())
                    .collect()
            })
            .unwrap_or_default(),
    }
}

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|xs| {
            xs.iter()
                .map(|x| x.as_str().expect("pod name").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Runs one case; returns the number of assertions made, or the first mismatch.
fn run_case(path: &Path) -> Result<usize, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let case: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let settings = settings(&case["settings"]);
    let tolerances = tolerances(&settings, &case["spec"]["behavior"]);
    let specs: Vec<MetricSpec> = case["spec"]["metrics"]
        .as_array()
        .map(|ms| ms.iter().map(metric_spec).collect())
        .unwrap_or_default();
    let mut checks = 0;
    for (i, step) in case["steps"].as_array().expect("steps").iter().enumerate() {
        let now = NOW.plus_secs(step["at_s"].as_i64().unwrap_or(0));
        assert_eq!(now, NOW, "calc cases are single-instant");
        let obs = observation(step);
        let outcomes: Vec<_> = specs
            .iter()
            .enumerate()
            .map(|(k, m)| replicas_for_metric(k, m, &obs, &settings, tolerances, now))
            .collect();
        let expect = &step["expect"];

        if let Some(error) = expect["error"].as_bool() {
            let failed = outcomes.iter().any(|o| o.result.is_err());
            if failed != error {
                return Err(format!(
                    "step {i}: expected error={error}, outcomes {outcomes:?}"
                ));
            }
            checks += 1;
        }

        for m in expect["metrics"].as_array().into_iter().flatten() {
            let name = m["name"].as_str().expect("expect.metrics[].name");
            let k = specs
                .iter()
                .position(|s| metric_name(s) == Some(name))
                .ok_or_else(|| format!("step {i}: no spec metric named {name}"))?;
            let proposal = outcomes[k]
                .result
                .as_ref()
                .map_err(|e| format!("step {i}: metric {name} failed: {e:?}"))?;
            let fields: [(&str, Option<i64>); 4] = [
                ("replicas", Some(i64::from(proposal.replicas))),
                (
                    "current_average_utilization",
                    proposal.current_average_utilization.map(i64::from),
                ),
                ("current_average_value", proposal.current_average_value),
                ("current_value", proposal.current_value),
            ];
            for (field, got) in fields {
                if let Some(want) = m.get(field).filter(|x| !x.is_null()) {
                    let want = want.as_i64().expect("integer expectation");
                    if got != Some(want) {
                        return Err(format!(
                            "step {i}: metric {name} {field}: want {want}, got {got:?} ({proposal:?})"
                        ));
                    }
                    checks += 1;
                }
            }
        }

        if let Some(pg) = expect.get("pod_groups").filter(|x| !x.is_null()) {
            let name = pg["metric"].as_str().expect("pod_groups.metric");
            let k = specs
                .iter()
                .position(|s| metric_name(s) == Some(name))
                .ok_or_else(|| format!("step {i}: no spec metric named {name}"))?;
            let got = group_pods(&obs, &specs[k], &settings, now);
            let want = (
                pg["ready_count"].as_i64().expect("ready_count") as i32,
                names(&pg["unready"]),
                names(&pg["missing"]),
                names(&pg["ignored"]),
            );
            let got_t = (
                got.ready_count,
                got.unready.clone(),
                got.missing.clone(),
                got.ignored.clone(),
            );
            if got_t != want {
                return Err(format!(
                    "step {i}: pod_groups for {name}: want {want:?}, got {got_t:?}"
                ));
            }
            // The outcome's own grouping, when the calculation got that far, is the same.
            if let Some(og) = &outcomes[k].pod_groups
                && *og != got
            {
                return Err(format!(
                    "step {i}: outcome pod_groups {og:?} differ from group_pods {got:?}"
                ));
            }
            checks += 1;
        }
    }
    Ok(checks)
}

#[test]
fn calc_and_group_cases() {
    let files = case_files();
    assert!(
        files.len() >= 67,
        "expected the 57 calc- and 10 group- cases, found {}",
        files.len()
    );
    let mut failures = Vec::new();
    let mut passed = 0;
    for f in &files {
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        match run_case(f) {
            Ok(0) => failures.push(format!("{name}: asserted nothing")),
            Ok(_) => passed += 1,
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    eprintln!("calc/group cases: {passed} of {} pass", files.len());
    assert!(
        failures.is_empty(),
        "{} failing:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
