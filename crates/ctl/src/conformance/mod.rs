//! The conformance runner: the shared, language-neutral cases (`shared/conformance`) run
//! through the engine or through a server. Used by `cargo test` (`tests/*_conformance.rs`)
//! and by the `autoscalectl conformance [--grpc ADDR] DIR` command, so new cases can be dropped
//! in without a rebuild.
//!
//! # Layout
//!
//! One runner, three concerns:
//!
//! 1. loading: `Case::load` reads a file into a typed `Case`: `hpa::HpaCase` (files
//!    without `kind`; engine inputs and expectations) or [`vpa::VpaCase`] (tagged by `kind`).
//!    A malformed case or an unknown field is a failed case naming the file, never a panic.
//! 2. executing: an `Executor` runs a case's steps somewhere: `engine::EngineExecutor`
//!    through the pure engine, [`grpc::GrpcExecutor`] through a server over a real channel,
//!    converting with the wire crate's `convert` (the server's own functions and their inverses).
//! 3. comparing: `hpa::check_step` (and the VPA checks) report the first differing field,
//!    e.g. `step 0: desired_replicas: expected 5, got 4`; `run_case` turns that into one
//!    [`Outcome`], [`run_dir`] into one [`Report`].

mod convert;
pub(crate) mod engine;
pub mod grpc;
pub(crate) mod hpa;
pub mod vpa;

use std::{
    fmt::{self, Write as _},
    path::{Path, PathBuf},
};

pub(crate) use engine::EngineExecutor;
use hpa::{HpaCase, HpaStep, StepRun};
use vpa::VpaCase;

/// One case file, typed. HPA files carry no `kind`; VPA files are tagged by it.
#[derive(Clone, Debug)]
pub(crate) enum Case {
    Hpa(Box<HpaCase>),
    Vpa(Box<VpaCase>),
}

impl Case {
    /// Reads a case file. On error: the case's `name` when the JSON has one (else the file
    /// name), and why (`cannot read: …`, `invalid JSON: …`, `invalid case: …`).
    pub(crate) fn load(path: &Path) -> Result<Case, (String, String)> {
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = std::fs::read_to_string(path)
            .map_err(|e| (file_name.clone(), format!("cannot read: {e}")))?;
        let value: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| (file_name.clone(), format!("invalid JSON: {e}")))?;
        let name = value
            .get("name")
            .and_then(|n| n.as_str())
            .map_or(file_name, str::to_string);
        match Case::from_value(value) {
            Ok(Case::Vpa(mut case)) if case.name.is_empty() => {
                case.name = name;
                Ok(Case::Vpa(case))
            }
            other => other.map_err(|e| (name, e)),
        }
    }

    /// A parsed case file: a VPA case when it has a top-level `kind`, an HPA case otherwise.
    pub(crate) fn from_value(value: serde_json::Value) -> Result<Case, String> {
        if value.get("kind").is_some() {
            VpaCase::from_value(value).map(|c| Case::Vpa(Box::new(c)))
        } else {
            HpaCase::from_value(value).map(|c| Case::Hpa(Box::new(c)))
        }
    }
}

/// Why an executor stopped a case: a difference (or a transport error), or a case it cannot
/// run, with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Failed(String),
    Skipped(String),
}

/// Runs the steps of a case somewhere: in-process ([`EngineExecutor`]) or through a server
/// ([`grpc::GrpcExecutor`]). Loading and comparing are the runner's, so executors cannot
/// disagree on what a case means or on what counts as a difference.
pub(crate) trait Executor {
    /// Called once before the first step of an HPA case read from `file`.
    fn begin_hpa(&mut self, file: &Path, case: &HpaCase) -> Result<(), Verdict>;
    /// Runs one step, the history of the earlier steps carried forward by the executor.
    /// Errors carry the `step N: ` prefix.
    fn hpa_step(&mut self, case: &HpaCase, step: &HpaStep) -> Result<StepRun, Verdict>;
    /// Runs a whole VPA case and compares it.
    fn run_vpa(&mut self, case: &VpaCase) -> Result<(), Verdict>;
    /// A failure of an HPA case this executor can prove is not a difference in decisions
    /// (counted as skipped, with the returned reason). None by default.
    fn excuse(&mut self, _case: &HpaCase, _failure: &str) -> Option<String> {
        None
    }
}

/// Runs every step of `case` through `executor` and checks it; the first difference is the
/// error.
pub(crate) fn run_hpa(
    file: &Path,
    case: &HpaCase,
    executor: &mut dyn Executor,
) -> Result<(), Verdict> {
    executor.begin_hpa(file, case)?;
    for step in &case.steps {
        let run = executor.hpa_step(case, step)?;
        hpa::check_step(case, step, &run)
            .map_err(|e| Verdict::Failed(format!("step {}: {e}", step.index)))?;
    }
    Ok(())
}

/// The result of one case file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The case file, as found under the directory run.
    pub file: PathBuf,
    /// The case's `name`, or the file name when it could not be read.
    pub name: String,
    /// What the executor made of it.
    pub status: Status,
}

/// Passed, failed (with the first differing field), or not run by this executor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Every step matched every expectation the case states.
    Passed,
    /// E.g. `step 0: desired_replicas: expected 5, got 4`.
    Failed(String),
    /// The case cannot be run by this executor (the reason says why).
    Skipped(String),
}

impl From<Result<(), Verdict>> for Status {
    fn from(r: Result<(), Verdict>) -> Status {
        match r {
            Ok(()) => Status::Passed,
            Err(Verdict::Failed(why)) => Status::Failed(why),
            Err(Verdict::Skipped(why)) => Status::Skipped(why),
        }
    }
}

// The counts `autoscalectl conformance` prints and the conformance tests assert on.
impl Outcome {
    /// Whether the case passed.
    pub fn passed(&self) -> bool {
        self.status == Status::Passed
    }

    /// Whether the case differed (or the transport failed).
    pub fn failed(&self) -> bool {
        matches!(self.status, Status::Failed(_))
    }

    /// Whether this executor could not run the case.
    pub fn skipped(&self) -> bool {
        matches!(self.status, Status::Skipped(_))
    }
}

/// Loads `path` and runs it through `executor`.
pub(crate) fn run_case(path: &Path, executor: &mut dyn Executor) -> Outcome {
    let (name, status) = match Case::load(path) {
        Err((name, why)) => (name, Status::Failed(why)),
        Ok(Case::Vpa(case)) => (case.name.clone(), executor.run_vpa(&case).into()),
        Ok(Case::Hpa(case)) => {
            let status = match run_hpa(path, &case, executor) {
                Err(Verdict::Failed(why)) => match executor.excuse(&case, &why) {
                    Some(excuse) => Status::Skipped(excuse),
                    None => Status::Failed(why),
                },
                other => other.into(),
            };
            (case.name.clone(), status)
        }
    };
    Outcome {
        file: path.to_path_buf(),
        name,
        status,
    }
}

/// Runs one case file through the engine.
pub fn run_case_file(path: &Path) -> Outcome {
    run_case(path, &mut EngineExecutor::default())
}

/// Runs every `*.json` case in `dir` and its subdirectories through the engine.
pub fn run_dir(dir: &Path) -> Report {
    run_dir_with(dir, &mut EngineExecutor::default())
}

/// Runs every `*.json` case in `dir` and its subdirectories (e.g. `conformance/` with `hpa/`
/// and `vpa/`), in path order, through `executor`. An unreadable directory is reported as a
/// failing entry.
pub(crate) fn run_dir_with(dir: &Path, executor: &mut dyn Executor) -> Report {
    let mut files = Vec::new();
    let mut failures = Vec::new();
    collect_cases(dir, &mut files, &mut failures);
    files.sort();
    let mut outcomes: Vec<Outcome> = files.iter().map(|f| run_case(f, executor)).collect();
    outcomes.extend(failures);
    Report { outcomes }
}

fn collect_cases(dir: &Path, files: &mut Vec<PathBuf>, failures: &mut Vec<Outcome>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            failures.push(Outcome {
                file: dir.to_path_buf(),
                name: dir.display().to_string(),
                status: Status::Failed(format!("cannot read directory: {e}")),
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

/// The outcomes of a directory, in file-name order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// One per case file.
    pub outcomes: Vec<Outcome>,
}

impl Report {
    /// How many cases passed.
    pub fn passed(&self) -> usize {
        self.outcomes.iter().filter(|o| o.passed()).count()
    }

    /// How many cases failed.
    pub fn failed(&self) -> usize {
        self.outcomes.iter().filter(|o| o.failed()).count()
    }

    /// How many cases this executor skipped.
    pub fn skipped(&self) -> usize {
        self.outcomes.iter().filter(|o| o.skipped()).count()
    }

    /// One line per failing case: `FAIL <file>: <first difference>`.
    pub fn failing_lines(&self) -> Vec<String> {
        self.outcomes
            .iter()
            .filter_map(|o| match &o.status {
                Status::Failed(why) => Some(format!("FAIL {}: {why}", o.file.display())),
                _ => None,
            })
            .collect()
    }

    /// Files that were skipped, with their reasons.
    pub fn skipped_cases(&self) -> Vec<(PathBuf, String)> {
        self.outcomes
            .iter()
            .filter_map(|o| match &o.status {
                Status::Skipped(why) => Some((o.file.clone(), why.clone())),
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

    /// The report as `conformance --grpc` prints it: one line per failed and per skipped case
    /// (with the reason), then exactly `N passed, M failed, K skipped`. (The engine's report,
    /// where skips are the exception, is the [`fmt::Display`] form.)
    pub fn render_with_skips(&self) -> String {
        let mut out = String::new();
        for o in &self.outcomes {
            let (tag, why) = match &o.status {
                Status::Passed => continue,
                Status::Failed(why) => ("FAIL", why),
                Status::Skipped(why) => ("SKIP", why),
            };
            let _ = writeln!(out, "{tag} {}: {why}", o.file.display());
        }
        let _ = write!(out, "{}, {} skipped", self.summary(), self.skipped());
        out
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

#[cfg(test)]
mod tests;
