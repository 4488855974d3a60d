//! What the engine's unit tests build alike.

use crate::hpa::observation::{Observation, Pod, PodPhase};

/// `current` running, ready pods (`p0`, `p1`, …) without samples, and the External metric
/// `load` at `value`: a target scaled on one external load.
pub(crate) fn external_load(current: i32, value: i64) -> Observation {
    Observation {
        current_replicas: current,
        pods: (0..current)
            .map(|i| Pod {
                name: format!("p{i}"),
                phase: PodPhase::Running,
                ready: Some(true),
                ..Pod::default()
            })
            .collect(),
        external_metrics: [("load".to_string(), vec![value])].into(),
        ..Observation::default()
    }
}
