//! Predictive scale-up through the whole decision (`engine::hpa::evaluate`), on a load with a
//! daily cycle decided every minute for nine days: `forecast_only` decides exactly as the
//! HPA, `scale_up` is never below it and raises ahead of the daily rise once its forecasts
//! have paid, the model's state stays under 8 KB, and a spec without `predictive` keeps none.
//! The forecaster's own rules (profiles, gates, scoring) are `predictive::model`'s; its
//! figures on real traces are `benches/predictive.rs`'s.

use std::time::Duration;

use autoscaled_engine::{
    hpa::{
        condition::{ConditionReason, ConditionType},
        evaluate,
        history::History,
        observation::Observation,
        predictive::{PredictiveMode, PredictiveSpec},
        settings::Settings,
        spec::{HorizontalSpec, MetricSpec, MetricTarget},
    },
    time::Time,
};

const START: i64 = 1_800_000_000;
const DAY: i64 = 86_400;

fn spec(predictive: Option<PredictiveMode>) -> HorizontalSpec {
    HorizontalSpec {
        min_replicas: Some(1),
        max_replicas: 100,
        // ceil(load / 1000) replicas.
        metrics: vec![MetricSpec::external(
            "load",
            MetricTarget::average_value(1000),
        )],
        behavior: None,
        extensions: None,
        schedules: Vec::new(),
        predictive: predictive.map(|mode| PredictiveSpec {
            mode,
            startup_delay: Duration::from_secs(300),
            margin_percent: 0,
        }),
    }
}

/// A daily cycle: 5 replicas' worth of load at night, a steep morning rise to 35 over a
/// quarter of an hour from 08:00, 35 until 18:00, then back down: each morning the reactive
/// count trails the rise by the start-up delay, which a forecast of the day avoids.
fn load(t: i64) -> f64 {
    let s = t.rem_euclid(DAY) as f64;
    let (rise, fall) = (8.0 * 3600.0, 18.0 * 3600.0);
    let ramp = 900.0;
    let up = ((s - rise) / ramp).clamp(0.0, 1.0);
    let down = ((s - fall) / ramp).clamp(0.0, 1.0);
    5.0 + 30.0 * (up - down)
}

fn observation(current: i32, t: i64) -> Observation {
    let mut o = Observation {
        current_replicas: current,
        status_replicas: Some(current),
        ..Observation::default()
    };
    o.external_metrics
        .insert("load".into(), vec![(load(t) * 1000.0) as i64]);
    o
}

#[test]
fn forecast_only_decides_as_the_hpa_and_scale_up_never_below_it() {
    let settings = Settings::default();
    let (off, only, up) = (
        spec(None),
        spec(Some(PredictiveMode::ForecastOnly)),
        spec(Some(PredictiveMode::ScaleUp)),
    );
    let (mut h_off, mut h_only, mut h_up) =
        (History::default(), History::default(), History::default());
    let mut current = 20;
    let (mut raised, mut would_have, mut steps) = (0, 0, 0);
    let mut largest_state = 0;
    for minute in 0..(9 * DAY / 60) {
        let t = START + minute * 60;
        let now = Time::from_unix_secs(t);
        let obs = observation(current, t);
        let a = evaluate(&settings, &off, &obs, &h_off, now).unwrap();
        let b = evaluate(&settings, &only, &obs, &h_only, now).unwrap();
        let c = evaluate(&settings, &up, &obs, &h_up, now).unwrap();
        assert_eq!(
            a.decision.desired_replicas, b.decision.desired_replicas,
            "forecast_only changed the decision at minute {minute}"
        );
        assert!(
            c.decision.desired_replicas >= a.decision.desired_replicas,
            "scale_up went below the HPA at minute {minute}"
        );
        let reason = |e: &autoscaled_engine::hpa::Evaluation| {
            e.decision
                .conditions
                .iter()
                .find(|c| c.condition_type == ConditionType::PredictiveScaling)
                .map(|c| c.reason)
        };
        assert!(reason(&a).is_none() && a.history.predictive.is_none());
        for e in [&b, &c] {
            assert_eq!(
                reason(e),
                e.decision.predictive.as_ref().map(|p| p.reason),
                "the report's reason is the condition's"
            );
        }
        if reason(&c) == Some(ConditionReason::ForecastRaised) {
            raised += 1;
            assert!(c.decision.predictive.as_ref().unwrap().raised);
            // A rescale the forecast caused says so (a raise already running is no rescale).
            if c.decision.desired_replicas > a.decision.desired_replicas
                && c.decision.desired_replicas > current
            {
                assert!(
                    c.decision
                        .rescale_reason
                        .as_deref()
                        .is_some_and(|r| r.starts_with("predictive scale-up")),
                    "{:?}",
                    c.decision.rescale_reason
                );
            }
        }
        if b.decision.predictive.as_ref().is_some_and(|p| p.raised) {
            would_have += 1;
        }
        // The first hours: nothing scored for the 6 hours a forecaster needs.
        if minute < 6 * 60 {
            assert_eq!(reason(&c), Some(ConditionReason::InsufficientHistory));
        }
        for (_, model) in &c.history.predictive.as_ref().unwrap().models {
            largest_state = largest_state.max(model.to_bytes().len());
        }
        steps += 1;
        // The orchestrator applies the scale-up run's count (its replicas serve at once here:
        // the gates score what was asked, which is what this test is about).
        current = c.decision.desired_replicas;
        (h_off, h_only, h_up) = (a.history, b.history, c.history);
    }
    eprintln!(
        "{steps} decisions: scale_up raised {raised}, forecast_only would have raised {would_have}; largest model state {largest_state} bytes"
    );
    assert!(raised > 0, "the daily rise was never forecast");
    assert!(largest_state <= 8 * 1024, "{largest_state} bytes");
}

#[test]
fn turning_predictive_off_drops_the_model() {
    let settings = Settings::default();
    let mut history = History::default();
    for minute in 0..30 {
        let t = START + minute * 60;
        history = evaluate(
            &settings,
            &spec(Some(PredictiveMode::ScaleUp)),
            &observation(20, t),
            &history,
            Time::from_unix_secs(t),
        )
        .unwrap()
        .history;
    }
    assert!(history.predictive.is_some());
    let t = START + 31 * 60;
    let e = evaluate(
        &settings,
        &spec(None),
        &observation(20, t),
        &history,
        Time::from_unix_secs(t),
    )
    .unwrap();
    assert!(e.history.predictive.is_none());
    assert!(e.decision.predictive.is_none());
}

#[test]
fn a_start_up_delay_out_of_range_names_the_field() {
    let mut s = spec(Some(PredictiveMode::ScaleUp));
    s.predictive.as_mut().unwrap().startup_delay = Duration::from_secs(3 * 3600);
    let e = evaluate(
        &Settings::default(),
        &s,
        &observation(20, START),
        &History::default(),
        Time::from_unix_secs(START),
    )
    .unwrap_err();
    assert_eq!(e.field, "spec.predictive.startup_delay");
}

#[test]
fn a_margin_asks_that_much_more_than_the_forecast() {
    let settings = Settings::default();
    let plain = spec(Some(PredictiveMode::ForecastOnly));
    let mut wide = plain.clone();
    wide.predictive.as_mut().unwrap().margin_percent = 50;
    let (mut h_plain, mut h_wide) = (History::default(), History::default());
    let mut compared = 0;
    for minute in 0..(2 * DAY / 60) {
        let t = START + minute * 60;
        let now = Time::from_unix_secs(t);
        let obs = observation(20, t);
        let a = evaluate(&settings, &plain, &obs, &h_plain, now).unwrap();
        let b = evaluate(&settings, &wide, &obs, &h_wide, now).unwrap();
        // forecast_only: the same decisions, so the same models; only the replicas differ.
        let (p, w) = (
            a.decision.predictive.as_ref().unwrap(),
            b.decision.predictive.as_ref().unwrap(),
        );
        assert_eq!(p.forecast_load, w.forecast_load, "minute {minute}");
        if let (Some(load), Some(r)) = (w.forecast_load, w.forecast_replicas) {
            assert_eq!(r, (load * 1.5 - 1e-9).ceil() as i32, "minute {minute}");
            assert!(r >= p.forecast_replicas.unwrap());
            compared += 1;
        }
        (h_plain, h_wide) = (a.history, b.history);
    }
    assert!(compared > 0, "no usable forecast in two days");
}
