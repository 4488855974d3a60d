//! Every VPA conformance case of `../shared/conformance/vpa` through the same runner as
//! `autoscalectl conformance DIR` (`conformance::run_dir`), against the engine.

use std::path::PathBuf;

use autoscaled_ctl::conformance;

#[test]
fn every_vpa_case_passes() {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("../shared/conformance/vpa");
    let report = conformance::run_dir(&dir);
    assert!(!report.outcomes.is_empty(), "no cases in {}", dir.display());
    assert!(
        report.outcomes.iter().all(|o| !o.skipped()),
        "VPA cases must not be skipped\n{report}"
    );
    let failures: Vec<String> = report
        .outcomes
        .iter()
        .filter(|o| o.failed())
        .map(|o| format!("{}: {:?}", o.name, o.status))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} VPA cases fail:\n{}",
        failures.len(),
        report.outcomes.len(),
        failures.join("\n")
    );
}
