//! What the engine's integration tests build alike: a target scaled on one External
//! AverageValue metric, `queue`, whose proposal is `ceil(queue / 1000)` whatever the current
//! count, so a test sets the demand directly.

use autoscaled_engine::hpa::{
    observation::Observation,
    spec::{HorizontalSpec, MetricSpec, MetricTarget},
};

/// A spec of `min` to `max` replicas on the `queue` metric.
pub fn queue_spec(min: i32, max: i32) -> HorizontalSpec {
    let queue = MetricSpec::external("queue", MetricTarget::average_value(1000));
    HorizontalSpec::new(Some(min), max, vec![queue])
}

/// `current` replicas (no pods listed) whose `queue` asks for `need`.
pub fn queue_observation(current: i32, need: i32) -> Observation {
    let mut o = Observation {
        current_replicas: current,
        ..Observation::default()
    };
    o.external_metrics
        .insert("queue".into(), vec![i64::from(need) * 1000]);
    o
}
