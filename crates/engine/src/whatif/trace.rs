//! The replay of a trace: the requests an adapter sent, through the same engine as
//! `Recommend`, under their own specs and under another one. Exact.

use std::time::Duration;

use thiserror::Error;

use super::{Fidelity, Replay, Simulated, Stored, Window, closed_loop, step};
use crate::{
    error::InvalidInput,
    hpa::{
        self, Decision, history::History, observation::Observation, prune::prune,
        settings::Settings, spec::HorizontalSpec,
    },
    time::Time,
};

/// One request of a trace, converted: what `Recommend` hands [`hpa::evaluate`].
#[derive(Clone, Debug, PartialEq)]
pub struct TraceStep {
    /// The instant the server decided at (the request's `evaluation_time`).
    pub now: Time,
    /// Decided, but it changes no history (as the server does for a dry run).
    pub dry_run: bool,
    /// The spec in force at this step: the request's own, or the simulated one.
    pub spec: HorizontalSpec,
    /// The server defaults with the step's overrides applied.
    pub settings: Settings,
    /// The step's pods and samples, with the replica count the request recorded (the
    /// simulated run moves it, see [`closed_loop`]).
    pub observation: Observation,
}

/// Why a trace could not be replayed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TraceError<E> {
    /// The caller could not produce a step (its conversion failed).
    #[error("{0}")]
    Input(E),
    /// The engine refused a step (index in the trace).
    #[error("trace step {step}: {error}")]
    Invalid {
        /// The step's index in the trace.
        step: usize,
        /// What the engine refused.
        error: InvalidInput,
    },
}

/// One evaluated step of one run.
struct RunStep {
    now: Time,
    dry_run: bool,
    /// The count the trace recorded.
    recorded_current: i32,
    /// The count this run started the step from.
    current: i32,
    decision: Decision,
    metrics: Vec<hpa::spec::MetricSpec>,
}

impl RunStep {
    /// This step as the stored side of the result.
    fn stored(&self) -> Stored<'_> {
        Stored {
            current: self.recorded_current,
            decision: &self.decision,
            metrics: &self.metrics,
        }
    }
}

/// Replays a trace: the stored run is `stored` (the trace under its own specs), the simulated
/// run `simulated` (the same trace under another spec; `None`: the stored run itself).
/// Both yield the trace's steps in order, and are consumed lazily, the stored run first, so
/// that the first error reported is the first one met in that order. Each run carries its own
/// history, pruned after every step with `retention` as the server prunes it. Only the steps
/// inside `window` are returned and summarized; all of them run.
pub fn replay_trace<E, I>(
    stored: I,
    simulated: Option<I>,
    window: Window,
    retention: Duration,
) -> Result<Replay, TraceError<E>>
where
    I: IntoIterator<Item = Result<TraceStep, E>>,
{
    let stored = run(stored, None, retention)?;
    let simulated = match simulated {
        None => None,
        Some(steps) => Some(run(steps, Some(&stored), retention)?),
    };
    let steps = match simulated {
        None => stored
            .iter()
            .filter(|s| window.contains(s.now))
            .map(|s| {
                let simulated = Simulated {
                    current: s.current,
                    decision: s.decision.clone(),
                    metrics: &s.metrics,
                };
                step(s.now, s.dry_run, s.stored(), simulated)
            })
            .collect(),
        Some(simulated) => stored
            .iter()
            .zip(simulated)
            .filter(|(s, _)| window.contains(s.now))
            .map(|(s, m)| {
                let simulated = Simulated {
                    current: m.current,
                    decision: m.decision,
                    metrics: &m.metrics,
                };
                step(s.now, s.dry_run, s.stored(), simulated)
            })
            .collect(),
    };
    Ok(Replay::new(steps, Fidelity::Exact))
}

/// The decisions of one run, history carried and pruned as `Recommend` does; dry runs decide
/// but change no history. With a `baseline` (the stored run), each step starts from the
/// recorded count moved by the runs' last applied counts ([`closed_loop`]).
fn run<E>(
    steps: impl IntoIterator<Item = Result<TraceStep, E>>,
    baseline: Option<&[RunStep]>,
    retention: Duration,
) -> Result<Vec<RunStep>, TraceError<E>> {
    let steps = steps.into_iter();
    let mut history = History::default();
    let mut out: Vec<RunStep> = Vec::with_capacity(steps.size_hint().0);
    // The last applied (non-dry-run) count of the baseline and of this run.
    let mut applied: Option<(i32, i32)> = None;
    for (i, input) in steps.enumerate() {
        let mut input = input.map_err(TraceError::Input)?;
        let recorded_current = input.observation.current_replicas;
        if let Some((base, own)) = applied {
            input.observation.current_replicas = closed_loop(recorded_current, base, own);
        }
        let evaluation = hpa::evaluate(
            &input.settings,
            &input.spec,
            &input.observation,
            &history,
            input.now,
        )
        .map_err(|error| TraceError::Invalid { step: i, error })?;
        if !input.dry_run {
            history = evaluation.history;
            prune(&mut history, input.now, retention);
            if let Some(base) = baseline.and_then(|b| b.get(i)) {
                applied = Some((
                    base.decision.desired_replicas,
                    evaluation.decision.desired_replicas,
                ));
            }
        }
        out.push(RunStep {
            now: input.now,
            dry_run: input.dry_run,
            recorded_current,
            current: evaluation.decision.current_replicas,
            decision: evaluation.decision,
            metrics: input.spec.metrics,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        hpa::spec::{MetricSpec, MetricTarget},
        test_support::external_load,
    };

    const HOUR: Duration = Duration::from_secs(3600);

    fn spec(max_replicas: i32) -> HorizontalSpec {
        HorizontalSpec {
            min_replicas: Some(1),
            max_replicas,
            metrics: vec![MetricSpec::external(
                "load",
                MetricTarget::average_value(10_000),
            )],
            // No stabilization, no rate limit: each step goes straight to the proposal.
            behavior: Some(hpa::spec::Behavior {
                scale_up: None,
                scale_down: Some(hpa::spec::ScalingRules {
                    stabilization_window_seconds: Some(0),
                    ..hpa::spec::ScalingRules::default()
                }),
            }),
            extensions: None,
            schedules: Vec::new(),
            predictive: None,
        }
    }

    /// A step at `secs` that recorded `current` replicas and a total load of `load` × 10 000
    /// (External AverageValue: `load` replicas, whatever the current count).
    fn step(spec: &HorizontalSpec, secs: i64, current: i32, load: i64) -> TraceStep {
        TraceStep {
            now: Time::from_unix_secs(secs),
            dry_run: false,
            spec: spec.clone(),
            settings: Settings::default(),
            observation: external_load(current, load * 10_000),
        }
    }

    #[test]
    fn the_simulated_run_starts_from_its_own_applied_count() {
        // Recorded: 2 → 6 (load 6), then 6 → 6. Simulated with max 4: 2 → 4, and the next
        // step starts from 6 + (4 - 6) = 4.
        let trace = |s: &HorizontalSpec| -> Vec<Result<TraceStep, ()>> {
            vec![Ok(step(s, 100, 2, 6)), Ok(step(s, 115, 6, 6))]
        };
        let r = replay_trace(
            trace(&spec(10)),
            Some(trace(&spec(4))),
            Window::default(),
            HOUR,
        )
        .expect("valid trace");
        let curve: Vec<_> = r
            .steps
            .iter()
            .map(|s| {
                (
                    s.current_replicas,
                    s.stored_desired_replicas,
                    s.simulated_current_replicas,
                    s.simulated_desired_replicas,
                )
            })
            .collect();
        assert_eq!(curve, vec![(2, 6, 2, 4), (6, 6, 4, 4)]);
        assert_eq!(r.steps[1].simulated_limited_by, "TooManyReplicas");
        assert_eq!(r.fidelity.to_string(), "exact");
    }

    #[test]
    fn steps_are_consumed_in_order_stored_run_first_up_to_the_first_error() {
        let consumed = std::cell::RefCell::new(Vec::new());
        let steps = |run: &'static str, fail_at: usize| {
            let consumed = &consumed;
            (0..4).map(move |i| {
                consumed.borrow_mut().push((run, i));
                if i == fail_at {
                    Err(format!("{run} {i}"))
                } else {
                    Ok(step(
                        &spec(10),
                        100 + 15 * i64::try_from(i).unwrap_or(0),
                        2,
                        3,
                    ))
                }
            })
        };
        let e = replay_trace(
            steps("stored", 2),
            Some(steps("simulated", 0)),
            Window::default(),
            HOUR,
        )
        .expect_err("a step fails");
        assert_eq!(e, TraceError::Input("stored 2".to_owned()));
        assert_eq!(
            consumed.into_inner(),
            vec![("stored", 0), ("stored", 1), ("stored", 2)]
        );

        // The engine's own refusals name the step.
        let mut bad = step(&spec(10), 115, 2, 3);
        bad.observation.current_replicas = -1;
        let e = replay_trace::<(), _>(
            vec![Ok(step(&spec(10), 100, 2, 3)), Ok(bad)],
            None,
            Window::default(),
            HOUR,
        )
        .expect_err("negative count");
        assert!(matches!(e, TraceError::Invalid { step: 1, .. }), "{e:?}");
    }
}
