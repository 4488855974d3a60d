//! Every HPA conformance case in `../shared/conformance/hpa` through the same runner as
//! `autoscalectl conformance DIR` (`conformance::run_dir`), against the engine.

use std::path::Path;

use autoscaled_ctl::conformance::{self, Status};

#[test]
fn every_hpa_case_passes() {
    let dir =
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("../shared/conformance/hpa");
    let report = conformance::run_dir(&dir);
    println!("{report}");
    assert!(
        report.outcomes.len() >= 173,
        "expected the 173 shared HPA cases in {}, found {}",
        dir.display(),
        report.outcomes.len()
    );
    assert!(
        report
            .outcomes
            .iter()
            .all(|o| !matches!(o.status, Status::Skipped(_))),
        "HPA cases must not be skipped"
    );
    assert!(report.success(), "\n{report}");
    assert_eq!(
        report.summary(),
        format!("{} passed, 0 failed", report.outcomes.len())
    );
}

/// The project's own cases with Kubernetes' `HPAScaleToZero` gate on
/// (`settings.scale_to_zero`), translated from the 1.37 `horizontal_test.go` where it has
/// them (`tests/conformance/hpa-1.37/README.md`), through the engine.
#[test]
fn every_kubernetes_1_37_case_passes() {
    let dir =
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("tests/conformance/hpa-1.37");
    let report = conformance::run_dir(&dir);
    println!("{report}");
    assert_eq!(report.outcomes.len(), 27, "{report}");
    assert_eq!(report.summary(), "27 passed, 0 failed");
}
