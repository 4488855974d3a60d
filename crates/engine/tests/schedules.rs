//! Schedules through the whole decision (`engine::hpa::evaluate`): a scheduled floor and
//! ceiling act as `minReplicas` / `maxReplicas` on every path and are named in the
//! ScalingLimited condition, the rescale reason and the decision's report; a spec whose
//! schedules are all closed decides exactly as the same spec without them, and says when the
//! next window opens. The windows' own rules (DST gaps and overlaps, ties, overlaps of
//! several schedules) are `hpa::schedule`'s unit tests.

mod common;

use std::time::Duration;

use autoscaled_engine::{
    hpa::{
        DecisionPath,
        condition::{ConditionReason, ConditionType},
        evaluate,
        history::History,
        observation::Observation,
        schedule::Schedule,
        settings::Settings,
        spec::HorizontalSpec,
    },
    time::Time,
};

/// Monday 2026-03-02 10:00 in New York (15:00 UTC): inside business hours.
const MONDAY_10AM: Time = Time::from_unix_secs(1_772_463_600);
/// The same Monday, 20:00 in New York: outside.
const MONDAY_8PM: Time = Time::from_unix_secs(1_772_499_600);

fn spec(min: i32, max: i32, schedules: Vec<Schedule>) -> HorizontalSpec {
    HorizontalSpec {
        schedules,
        ..common::queue_spec(min, max)
    }
}

fn business_hours(min: Option<i32>, max: Option<i32>) -> Schedule {
    Schedule {
        name: "business-hours".into(),
        start: "0 9 * * 1-5".into(),
        end: Some("0 17 * * 1-5".into()),
        duration: None,
        time_zone: "America/New_York".into(),
        min_replicas: min,
        max_replicas: max,
    }
}

fn observation(current: i32, need: i32) -> Observation {
    common::queue_observation(current, need)
}

fn limited(e: &autoscaled_engine::hpa::Evaluation) -> Option<(ConditionReason, String)> {
    e.decision
        .conditions
        .iter()
        .find(|c| c.condition_type == ConditionType::ScalingLimited && c.status)
        .map(|c| (c.reason, c.message.clone()))
}

#[test]
fn an_open_floor_raises_the_count_and_says_which_schedule_until_when() {
    let s = spec(2, 20, vec![business_hours(Some(10), None)]);
    // No stabilization window: the proposal of 4 reaches the bounds.
    let settings = Settings {
        downscale_stabilization: Duration::ZERO,
        ..Settings::default()
    };
    let e = evaluate(
        &settings,
        &s,
        &observation(10, 4),
        &History::default(),
        MONDAY_10AM,
    )
    .unwrap();
    assert_eq!(e.decision.desired_replicas, 10);
    let (reason, message) = limited(&e).expect("ScalingLimited");
    assert_eq!(reason, ConditionReason::ScheduledMinimum);
    assert!(message.contains("\"business-hours\""), "{message}");
    assert!(
        message.contains("until 2026-03-02T17:00:00-05:00[America/New_York]"),
        "{message}"
    );
    let report = e.decision.schedule.as_deref().unwrap();
    assert_eq!(report.applied, ["business-hours"]);
    assert_eq!((report.min_replicas, report.max_replicas), (10, 20));
    assert_eq!(
        report.until,
        Some(Time::from_unix_secs(1_772_488_800)),
        "17:00 in New York"
    );
}

#[test]
fn a_target_below_an_opening_floor_takes_the_shortcut_with_the_schedule_as_its_reason() {
    let s = spec(2, 20, vec![business_hours(Some(10), None)]);
    let e = evaluate(
        &Settings::default(),
        &s,
        &observation(3, 1),
        &History::default(),
        MONDAY_10AM,
    )
    .unwrap();
    assert_eq!(e.decision.path, DecisionPath::BelowMinReplicas);
    assert_eq!(e.decision.desired_replicas, 10);
    let reason = e.decision.rescale_reason.unwrap();
    assert!(
        reason.contains("scheduled minimum 10") && reason.contains("business-hours"),
        "{reason}"
    );
}

#[test]
fn an_open_ceiling_caps_the_count() {
    let night = Schedule {
        name: "night".into(),
        start: "0 19 * * *".into(),
        end: None,
        duration: Some(Duration::from_secs(10 * 3600)),
        time_zone: "America/New_York".into(),
        min_replicas: None,
        max_replicas: Some(3),
    };
    let s = spec(1, 20, vec![night]);
    let e = evaluate(
        &Settings::default(),
        &s,
        &observation(3, 12),
        &History::default(),
        MONDAY_8PM,
    )
    .unwrap();
    assert_eq!(e.decision.desired_replicas, 3);
    assert_eq!(limited(&e).unwrap().0, ConditionReason::ScheduledMaximum);
}

#[test]
fn a_floor_above_a_ceiling_wins_and_is_called_a_conflict() {
    let s = spec(
        1,
        20,
        vec![
            business_hours(Some(8), None),
            Schedule {
                name: "cap".into(),
                start: "0 0 * * *".into(),
                end: None,
                duration: Some(Duration::from_secs(86_400)),
                time_zone: "UTC".into(),
                min_replicas: None,
                max_replicas: Some(3),
            },
        ],
    );
    let e = evaluate(
        &Settings::default(),
        &s,
        &observation(8, 12),
        &History::default(),
        MONDAY_10AM,
    )
    .unwrap();
    assert_eq!(e.decision.desired_replicas, 8);
    assert_eq!(limited(&e).unwrap().0, ConditionReason::ScheduleConflict);
    assert!(e.decision.schedule.as_deref().unwrap().conflict);
}

#[test]
fn closed_schedules_decide_as_the_spec_without_them_and_name_the_next_opening() {
    let with = spec(2, 20, vec![business_hours(Some(10), None)]);
    let without = spec(2, 20, Vec::new());
    for need in [1, 4, 30] {
        let a = evaluate(
            &Settings::default(),
            &with,
            &observation(5, need),
            &History::default(),
            MONDAY_8PM,
        )
        .unwrap();
        let b = evaluate(
            &Settings::default(),
            &without,
            &observation(5, need),
            &History::default(),
            MONDAY_8PM,
        )
        .unwrap();
        assert_eq!(a.decision.desired_replicas, b.decision.desired_replicas);
        assert_eq!(a.decision.conditions, b.decision.conditions);
        assert_eq!(a.history, b.history);
        let report = a.decision.schedule.as_deref().unwrap();
        assert!(report.applied.is_empty());
        assert_eq!(
            report.until_local.as_deref(),
            Some("2026-03-03T09:00:00-05:00[America/New_York]"),
            "Tuesday 09:00"
        );
        assert!(b.decision.schedule.is_none());
    }
}

#[test]
fn an_invalid_schedule_is_refused_naming_its_field() {
    let mut bad = business_hours(Some(10), None);
    bad.time_zone = "Mars/Olympus_Mons".into();
    let e = evaluate(
        &Settings::default(),
        &spec(2, 20, vec![bad]),
        &observation(5, 4),
        &History::default(),
        MONDAY_10AM,
    )
    .unwrap_err();
    assert_eq!(e.field, "spec.schedules[0].time_zone");
}
