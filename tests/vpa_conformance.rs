//! Runs every VPA conformance case of `../shared/conformance/vpa` through the engine.

use std::path::PathBuf;

use autoscaled::conformance::vpa::{run_vpa_case, vpa_case_files};

#[test]
fn every_vpa_case_passes() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance/vpa");
    let files =
        vpa_case_files(&dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    assert!(!files.is_empty(), "no cases in {}", dir.display());
    let failures: Vec<String> = files
        .iter()
        .map(run_vpa_case)
        .filter_map(|o| o.result.err().map(|e| format!("{}: {e}", o.name)))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} VPA cases fail:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}
