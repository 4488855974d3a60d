//! The conformance runner: the shared, language-neutral cases (`shared/conformance`) run
//! through the engine. Used by `cargo test` (`tests/hpa_conformance.rs`) and by the
//! `autoscaled conformance DIR` command, so new cases can be dropped in without a rebuild.
//!
//! # Layout
//!
//! * [`hpa`]: HPA cases. Loading a case ([`hpa::HpaCase::load`], engine types out) is separate
//!   from executing it ([`hpa::HpaExecutor`]); [`hpa::EngineExecutor`] runs steps through
//!   `engine::hpa`, and a second executor (e.g. through the gRPC server) can reuse the loading
//!   and the comparison ([`hpa::run_case`]).
//! * [`vpa`]: VPA cases (files with a top-level `kind` field), dispatched by [`run_case_file`].

pub mod grpc;
pub mod hpa;
pub mod vpa;

use std::{
    fmt,
    path::{Path, PathBuf},
};

/// The result of one case file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseOutcome {
    pub file: PathBuf,
    /// The case's `name`, or the file name when it could not be read.
    pub name: String,
    pub status: CaseStatus,
}

/// Passed, failed (with the first differing field), or not run by this runner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaseStatus {
    Passed,
    /// E.g. `step 0: desired_replicas: expected 5, got 4`.
    Failed(String),
    /// The case is of a kind this runner does not execute (yet).
    Skipped(String),
}

impl CaseOutcome {
    fn new(file: &Path, name: String, status: CaseStatus) -> CaseOutcome {
        CaseOutcome {
            file: file.to_path_buf(),
            name,
            status,
        }
    }

    pub fn passed(&self) -> bool {
        self.status == CaseStatus::Passed
    }

    pub fn failed(&self) -> bool {
        matches!(self.status, CaseStatus::Failed(_))
    }
}

/// The outcomes of a directory, in file-name order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub outcomes: Vec<CaseOutcome>,
}

impl Report {
    pub fn passed(&self) -> usize {
        self.outcomes.iter().filter(|o| o.passed()).count()
    }

    pub fn failed(&self) -> usize {
        self.outcomes.iter().filter(|o| o.failed()).count()
    }

    pub fn skipped(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|o| matches!(o.status, CaseStatus::Skipped(_)))
            .count()
    }

    /// One line per failing case: `FAIL <file>: <first difference>`.
    pub fn failing_lines(&self) -> Vec<String> {
        self.outcomes
            .iter()
            .filter_map(|o| match &o.status {
                CaseStatus::Failed(why) => Some(format!("FAIL {}: {why}", o.file.display())),
                _ => None,
            })
            .collect()
    }

    /// Exactly `N passed, M failed`.
    pub fn summary(&self) -> String {
        format!("{} passed, {} failed", self.passed(), self.failed())
    }

    /// True when no case failed.
    pub fn success(&self) -> bool {
        self.failed() == 0
    }
}

/// The failing lines, a line about skipped cases if any, and the summary as the last line.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in self.failing_lines() {
            writeln!(f, "{line}")?;
        }
        let skipped = self.skipped();
        if skipped > 0 {
            writeln!(f, "{skipped} skipped (no runner for their kind yet)")?;
        }
        write!(f, "{}", self.summary())
    }
}

/// Runs one case file. HPA cases run through the engine; a file with a top-level `kind`
/// field is a VPA case.
pub fn run_case_file(path: &Path) -> CaseOutcome {
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let value = match read_case(path) {
        Ok(v) => v,
        Err(e) => return CaseOutcome::new(path, file_name, CaseStatus::Failed(e)),
    };
    let name = value
        .get("name")
        .and_then(|n| n.as_str())
        .map_or(file_name, str::to_string);
    if value.get("kind").is_some() {
        let status = match vpa::run_vpa_case_value(&value) {
            Ok(()) => CaseStatus::Passed,
            Err(e) => CaseStatus::Failed(e),
        };
        return CaseOutcome::new(path, name, status);
    }
    let status = match hpa::HpaCase::from_value(value) {
        Err(e) => CaseStatus::Failed(e),
        Ok(case) => match hpa::run_case(&case, &mut hpa::EngineExecutor::default()) {
            Ok(()) => CaseStatus::Passed,
            Err(e) => CaseStatus::Failed(e),
        },
    };
    CaseOutcome::new(path, name, status)
}

/// A case file as JSON; why not (`cannot read: …`, `invalid JSON: …`) otherwise.
fn read_case(path: &Path) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("invalid JSON: {e}"))
}

/// Runs every `*.json` case in `dir` and its subdirectories (e.g. `conformance/` with `hpa/`
/// and `vpa/`), in path order. An unreadable directory is reported as a failing entry.
pub fn run_dir(dir: &Path) -> Report {
    run_dir_with(dir, run_case_file)
}

/// [`run_dir`] with another way of running one case file (e.g. `grpc::GrpcRunner`).
pub fn run_dir_with(dir: &Path, mut run: impl FnMut(&Path) -> CaseOutcome) -> Report {
    let mut files = Vec::new();
    let mut failures = Vec::new();
    collect_cases(dir, &mut files, &mut failures);
    files.sort();
    let mut outcomes: Vec<CaseOutcome> = files.iter().map(|f| run(f)).collect();
    outcomes.extend(failures);
    Report { outcomes }
}

fn collect_cases(dir: &Path, files: &mut Vec<PathBuf>, failures: &mut Vec<CaseOutcome>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            failures.push(CaseOutcome {
                file: dir.to_path_buf(),
                name: dir.display().to_string(),
                status: CaseStatus::Failed(format!("cannot read directory: {e}")),
            });
            return;
        }
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            collect_cases(&path, files, failures);
        } else if path.extension().is_some_and(|e| e == "json") {
            files.push(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shared case with one expectation changed, written to `dir`.
    fn mutated(dir: &Path, case: &str, change: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/conformance/hpa")
            .join(case);
        let mut value: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(src).unwrap()).unwrap();
        change(&mut value);
        let path = dir.join(case);
        std::fs::write(&path, value.to_string()).unwrap();
        path
    }

    fn failure(path: &Path) -> String {
        match run_case_file(path).status {
            CaseStatus::Failed(why) => why,
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[test]
    fn reports_the_first_differing_field() {
        let dir = tempfile::tempdir().unwrap();
        let p = mutated(dir.path(), "controller-scale-up.json", |v| {
            v["steps"][0]["expect"]["desired_replicas"] = 99.into();
        });
        assert!(
            failure(&p).starts_with("step 0: desired_replicas: expected 99, got "),
            "{}",
            failure(&p)
        );
        let p = mutated(dir.path(), "group-missing-pod.json", |v| {
            v["steps"][0]["expect"]["pod_groups"]["missing"] = serde_json::json!([]);
        });
        assert_eq!(
            failure(&p),
            "step 0: pod_groups[cpu].missing: expected [], got [\"epicurus\"]"
        );
        let p = mutated(
            dir.path(),
            "legacy-stabilize-stabilize-old-recommendations.json",
            |v| v["steps"][0]["expect"]["recommendations_count_after"] = 5.into(),
        );
        assert_eq!(
            failure(&p),
            "step 0: recommendations_count_after: expected 5, got 4"
        );
        let p = mutated(
            dir.path(),
            "controller-condition-invalid-source-type.json",
            |v| {
                v["steps"][0]["expect"]["conditions"][1]["reason"] = "Other".into();
            },
        );
        assert_eq!(
            failure(&p),
            "step 0: conditions[ScalingActive]: expected false Other, got false InvalidMetricSourceType"
        );
        let p = mutated(dir.path(), "calc-resource-scale-up.json", |v| {
            v["steps"][0]["expect"]["unknown_field"] = 1.into();
        });
        assert!(
            failure(&p).contains("unknown field `unknown_field`"),
            "{}",
            failure(&p)
        );
    }

    #[test]
    fn report_counts_and_dispatches_vpa_cases() {
        let dir = tempfile::tempdir().unwrap();
        mutated(dir.path(), "controller-scale-up.json", |_| {});
        mutated(dir.path(), "calc-resource-scale-up.json", |v| {
            v["steps"][0]["expect"]["metrics"][0]["replicas"] = 1000.into();
        });
        // A file with `kind` goes to the VPA runner, which rejects an unknown kind.
        std::fs::write(dir.path().join("vpa.json"), r#"{"kind": "x", "name": "v"}"#).unwrap();
        let report = run_dir(dir.path());
        assert_eq!(
            (report.passed(), report.failed(), report.skipped()),
            (1, 2, 0)
        );
        assert!(
            report
                .failing_lines()
                .iter()
                .any(|l| l.contains("vpa.json: kind: unknown kind")),
            "{report}"
        );
        let text = report.to_string();
        assert!(text.ends_with("\n1 passed, 2 failed"), "{text}");
        assert!(text.starts_with("FAIL "), "{text}");
    }

    #[test]
    fn later_steps_see_the_history_of_earlier_ones() {
        // controller-upscale-cap scales 3 -> 24 under a 700 %/60 s policy; the scale event it
        // stores holds the next step at 24 until the 60 s period has passed.
        let dir = tempfile::tempdir().unwrap();
        let p = mutated(dir.path(), "controller-upscale-cap.json", |v| {
            let first = v["steps"][0].clone();
            let pod = first["pods"][0].clone();
            let step = |at: i64, expect: serde_json::Value| {
                let mut s = first.clone();
                s["at_s"] = at.into();
                s["current_replicas"] = 24.into();
                s["status_replicas"] = 24.into();
                s["pods"] = (0..24)
                    .map(|i| {
                        let mut p = pod.clone();
                        p["name"] = format!("p{i}").into();
                        p
                    })
                    .collect::<Vec<_>>()
                    .into();
                s["expect"] = expect;
                s
            };
            let held = step(
                30,
                serde_json::json!({"desired_replicas": 24, "scale_up_limit": 24,
                    "conditions": [{"type": "ScalingLimited", "status": true, "reason": "ScaleUpLimit"}]}),
            );
            let released = step(
                61,
                serde_json::json!({"desired_replicas": 100, "scale_up_limit": 192,
                    "conditions": [{"type": "ScalingLimited", "status": true, "reason": "TooManyReplicas"}]}),
            );
            v["steps"] = serde_json::json!([first, held, released]);
        });
        assert_eq!(run_case_file(&p).status, CaseStatus::Passed);
    }
}
