//! The outcome of a rescale, as the caller reports it after applying (or failing to apply) a
//! decision. `evaluate` takes the rescale as done, because most callers apply it and never
//! report; a reported failure then undoes what only a successful update does upstream.
//!
//! `reconcileAutoscaler` (`horizontal.go`), after computing `desiredReplicas`:
//!
//! ```go
//! _, err = a.scaleNamespacer.Scales(hpa.Namespace).Update(ctx, targetGR, scale, ...)
//! if err != nil {
//!     setCondition(hpa, autoscalingv2.AbleToScale, v1.ConditionFalse, "FailedUpdateScale",
//!         "the HPA controller was unable to update the target scale: %v", err)
//!     ...
//!     return fmt.Errorf("failed to rescale %s: %v", reference, err)
//! }
//! setCondition(hpa, autoscalingv2.AbleToScale, v1.ConditionTrue, "SucceededRescale", ...)
//! a.storeScaleEvent(hpa.Spec.Behavior, key, currentReplicas, desiredReplicas)
//! ```
//!
//! So a failed update leaves the recommendations (stored by `stabilizeRecommendation` before
//! the update) and stores no scale event: the next rate limit does not count a change that
//! never happened.

use super::{
    Decision,
    condition::{Condition, ConditionReason, ConditionType},
    history::History,
};
use crate::time::Time;

/// The AbleToScale message upstream sets when the scale update fails.
pub fn failed_update_message(error: &str) -> String {
    format!("the HPA controller was unable to update the target scale: {error}")
}

/// Marks `decision` (made at `time`, with `history` the history it produced) as a rescale the
/// caller could not apply: AbleToScale False / FailedUpdateScale with `error`, and the scale
/// event `storeScaleEvent` recorded for it withdrawn from `history`. Returns whether an event
/// was withdrawn (none on the legacy path, which keeps no events, or for a decision that did
/// not rescale).
///
/// Withdrawing is exact for what the rate limits count (`getReplicasChangePerPeriod` sums the
/// events newer than a policy's period): the event at `time` is the only one this decision
/// added. What `storeScaleEvent` did besides, marking events older than the longest period
/// outdated and reusing the last outdated slot, only concerns events no policy period
/// reaches, so it changes no limit.
pub fn scale_failed(
    decision: &mut Decision,
    history: &mut History,
    time: Time,
    error: &str,
) -> bool {
    let able = Condition::new(
        ConditionType::AbleToScale,
        false,
        ConditionReason::FailedUpdateScale,
        failed_update_message(error),
    );
    match decision
        .conditions
        .iter_mut()
        .find(|c| c.condition_type == ConditionType::AbleToScale)
    {
        Some(c) => *c = able,
        None => decision.conditions.insert(0, able),
    }
    let (current, desired) = (decision.current_replicas, decision.desired_replicas);
    if desired == current {
        return false;
    }
    let change = i64::from(desired) - i64::from(current);
    let events = if change > 0 {
        &mut history.scale_up_events
    } else {
        &mut history.scale_down_events
    };
    let magnitude = i32::try_from(change.unsigned_abs()).unwrap_or(i32::MAX);
    match events
        .iter()
        .rposition(|e| e.time == time && e.replica_change == magnitude && !e.outdated)
    {
        Some(i) => {
            events.remove(i);
            true
        }
        None => false,
    }
}

/// Whether `decision` already carries a reported failure (so that a repeated report changes
/// nothing).
pub fn is_failed_update(decision: &Decision) -> bool {
    decision.conditions.iter().any(|c| {
        c.condition_type == ConditionType::AbleToScale
            && c.reason == ConditionReason::FailedUpdateScale
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hpa::{
        evaluate,
        observation::Observation,
        settings::Settings,
        spec::{Behavior, HorizontalSpec, MetricSpec, MetricTarget},
    };

    fn spec() -> HorizontalSpec {
        HorizontalSpec {
            min_replicas: Some(1),
            max_replicas: 20,
            metrics: vec![MetricSpec::external(
                "queue",
                MetricTarget::average_value(1000),
            )],
            behavior: Some(Behavior::default()),
            extensions: None,
            schedules: Vec::new(),
            predictive: None,
        }
    }

    fn observe(current: i32, queue_milli: i64) -> Observation {
        Observation {
            current_replicas: current,
            external_metrics: [("queue".to_owned(), vec![queue_milli])].into(),
            ..Observation::default()
        }
    }

    /// A failed scale-up leaves the next scale-up its whole budget, as upstream (no event
    /// stored), where an applied one spends it.
    #[test]
    fn a_failed_rescale_spends_no_rate_budget() {
        let settings = Settings::default();
        let t0 = Time::from_unix_secs(1_000_000);
        let first = evaluate(
            &settings,
            &spec(),
            &observe(2, 8000),
            &History::default(),
            t0,
        )
        .unwrap();
        assert_eq!(first.decision.desired_replicas, 6, "{:?}", first.decision);
        assert_eq!(first.history.scale_up_events.len(), 1);

        let mut failed = first.clone();
        assert!(scale_failed(
            &mut failed.decision,
            &mut failed.history,
            t0,
            "quota exceeded"
        ));
        assert!(failed.history.scale_up_events.is_empty());
        assert_eq!(
            failed.history.recommendations,
            first.history.recommendations
        );
        let able = &failed.decision.conditions[0];
        assert_eq!(
            (able.condition_type, able.status, able.reason),
            (
                ConditionType::AbleToScale,
                false,
                ConditionReason::FailedUpdateScale
            )
        );
        assert_eq!(
            able.message,
            "the HPA controller was unable to update the target scale: quota exceeded"
        );
        assert!(is_failed_update(&failed.decision));
        // Twice is once.
        assert!(!scale_failed(
            &mut failed.decision,
            &mut failed.history,
            t0,
            "quota exceeded"
        ));

        // Ten seconds later, still at 2 replicas: the default scale-up policies (100 % or
        // 4 pods per 15 s, from the count at the period's start) allow 2 → 6 again after the
        // failure; had the failed +4 counted, the period would have started at -2 and the
        // limit (2) would hold the target at 2.
        let t1 = t0.plus_secs(10);
        let retried =
            evaluate(&settings, &spec(), &observe(2, 16_000), &failed.history, t1).unwrap();
        let counted =
            evaluate(&settings, &spec(), &observe(2, 16_000), &first.history, t1).unwrap();
        assert_eq!(
            retried.decision.desired_replicas, 6,
            "{:?}",
            retried.decision
        );
        assert_eq!(
            counted.decision.desired_replicas, 2,
            "{:?}",
            counted.decision
        );
    }

    #[test]
    fn a_decision_that_keeps_the_count_withdraws_nothing() {
        let settings = Settings::default();
        let t0 = Time::from_unix_secs(1_000_000);
        let mut same = evaluate(
            &settings,
            &spec(),
            &observe(2, 2000),
            &History::default(),
            t0,
        )
        .unwrap();
        assert_eq!(same.decision.desired_replicas, 2);
        let history = same.history.clone();
        assert!(!scale_failed(
            &mut same.decision,
            &mut same.history,
            t0,
            "x"
        ));
        assert_eq!(same.history, history);
        assert!(is_failed_update(&same.decision));
    }
}
