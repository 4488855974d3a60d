//! Predictive scale-up (`spec.predictive`; not a Kubernetes field): each target learns the
//! daily and weekly shape of each metric's load from its own decisions ([`model::LoadModel`],
//! O(1) per decision, at most 6,564 bytes per metric), and a forecast of the load over the
//! next start-up delay raises the reactive count when the target's own history shows that
//! such raises pay.
//!
//! # The load, in replicas
//!
//! A metric's load is its usage ratio (current ÷ target) times the count the HPA applies the
//! ratio to: the ready pods with a sample for a pod metric, the ready pods for a Value target,
//! the status replicas for an AverageValue Object or External target (whose load is
//! `usage / target`). That is the HPA's proposal before rounding, so a forecast of it
//! converts to replicas by the same ceiling the HPA uses, and one replica carries one unit.
//! It is learned per metric (keyed by the metric's identity, so editing the spec's other
//! fields keeps what was learned); changing a metric's target changes the unit, which the
//! model's level ratio absorbs within a few observations.
//!
//! # The decision
//!
//! * `off` (or no `predictive`): nothing is learned or stored; the decision is the HPA's.
//! * `forecast_only`: the model learns and scores itself; the decision is the HPA's and its
//!   report says what the forecast would have asked (AWS predictive scaling's "forecast
//!   only" mode, Crane EHPA's preview).
//! * `scale_up`: the count after stabilization is raised to the forecast's, then the HPA's
//!   rate limits and bounds apply; the stabilization window keeps the reactive proposal (a
//!   forecast never holds a later scale-down up), and a forecast never lowers the count (AWS
//!   predictive scaling too only scales out on a forecast).
//!
//! The model observes at most once every [`CADENCE_SECS`]; decisions in between use its latest
//! forecast, whose window covers theirs. A forecast is acted on only after its forecaster was
//! scored for 6 hours and while it passes both gates ([`model::LoadModel::forecast`]);
//! otherwise the decision is reactive and the `PredictiveScaling` condition says why.

pub mod model;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use self::model::{LoadModel, ModelKind, Why};
use super::{
    MetricOutcome,
    condition::{Condition, ConditionReason, ConditionType},
    observation::Observation,
    spec::{MetricSpec, MetricTargetType},
};
use crate::{error::InvalidInput, time::Time};

/// The longest start-up delay accepted: a lead longer than this is not a forecast the
/// profiles can make well (the week profile's slots are 30 minutes).
pub const MAX_STARTUP_DELAY: Duration = Duration::from_secs(30 * 60);
/// The model observes at most this often; the lead is the start-up delay plus this.
pub const CADENCE_SECS: u32 = 60;
/// The start-up delay when the spec leaves it out.
pub const DEFAULT_STARTUP_DELAY: Duration = Duration::from_secs(300);

/// `spec.predictive`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PredictiveSpec {
    /// What the forecast does.
    pub mode: PredictiveMode,
    /// From the scale call until a new replica serves (scheduling, image pull, start-up,
    /// readiness): the forecast covers this much ahead, plus [`CADENCE_SECS`].
    pub startup_delay: Duration,
    /// Capacity asked above the forecast, in percent (0 to [`MAX_MARGIN_PERCENT`]): the
    /// forecast's replicas carry its load at `target / (1 + margin)`. On top of the margin
    /// the model learns from its own errors (AWS predictive scaling's "capacity buffer").
    pub margin_percent: u32,
}

/// The largest `margin_percent`: past doubling, a forecast is not what decides.
pub const MAX_MARGIN_PERCENT: u32 = 100;

/// What the forecast does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PredictiveMode {
    /// Nothing: the HPA's decision, nothing learned.
    Off,
    /// Learn and report what the forecast would have asked; decide as the HPA.
    ForecastOnly,
    /// Raise the count after stabilization to the forecast's when the forecast is usable.
    ScaleUp,
}

impl PredictiveMode {
    /// The mode's name in reports.
    pub const fn as_str(self) -> &'static str {
        match self {
            PredictiveMode::Off => "off",
            PredictiveMode::ForecastOnly => "forecast_only",
            PredictiveMode::ScaleUp => "scale_up",
        }
    }
}

/// Checks a predictive spec: the start-up delay is 1 s to [`MAX_STARTUP_DELAY`], the margin
/// at most [`MAX_MARGIN_PERCENT`].
pub fn validate(spec: &PredictiveSpec) -> Result<(), InvalidInput> {
    if spec.margin_percent > MAX_MARGIN_PERCENT {
        return Err(InvalidInput::new(
            "predictive.margin_percent",
            format!("must be 0 to {MAX_MARGIN_PERCENT}"),
        ));
    }
    if spec.startup_delay.is_zero() || spec.startup_delay > MAX_STARTUP_DELAY {
        return Err(InvalidInput::new(
            "predictive.startup_delay",
            format!("must be 1 s to {} s", MAX_STARTUP_DELAY.as_secs()),
        ));
    }
    Ok(())
}

/// A target's models: one per metric of its spec that has a load, by the metric's identity.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// `(metric identity, model)`, in the order the metrics were first seen.
    pub models: Vec<(String, LoadModel)>,
}

impl State {
    fn model(&mut self, key: &str, delay: u32) -> &mut LoadModel {
        let i = match self.models.iter().position(|(k, _)| k == key) {
            Some(i) => i,
            None => {
                self.models
                    .push((key.to_owned(), LoadModel::new(delay, CADENCE_SECS)));
                self.models.len() - 1
            }
        };
        let model = &mut self.models[i].1;
        model.set_timing(delay, CADENCE_SECS);
        model
    }
}

/// What predictive scale-up did in a decision (`Decision::predictive`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PredictiveReport {
    /// The spec's mode.
    pub mode: PredictiveMode,
    /// The metric whose forecast decided (its identity), if one is usable.
    pub metric: Option<String>,
    /// Its forecaster.
    pub model: Option<ModelKind>,
    /// Its load at this decision, in replicas at the target.
    pub load: Option<f64>,
    /// The load forecast over the lead (with its margin), in replicas at the target.
    pub forecast_load: Option<f64>,
    /// The replicas the forecast asks for.
    pub forecast_replicas: Option<i32>,
    /// The reactive count after stabilization.
    pub reactive_replicas: Option<i32>,
    /// The forecast raised the count (forecast_only: would have).
    pub raised: bool,
    /// The forecaster's weighted absolute percentage error over about a day (the deciding
    /// one, or the best scored one when none is usable).
    pub wape: Option<f64>,
    /// The PredictiveScaling condition's reason.
    pub reason: ConditionReason,
}

/// One metric's part in this decision.
struct Metric {
    key: String,
    load: f64,
    /// The model observed now (and so may record what the decision asks).
    observed: bool,
}

/// Predictive scale-up within one reconciliation: [`Step::start`] after the metrics, the
/// raise to apply after stabilization ([`Step::raise`]), then [`Step::finish`] once the
/// count is known.
pub(crate) struct Step {
    mode: PredictiveMode,
    t: i64,
    metrics: Vec<Metric>,
    /// The best usable forecast: (metric index in `metrics`, replicas, forecast).
    best: Option<(usize, i32, model::Forecast)>,
    /// Why no forecast is usable (the most advanced reason over the metrics).
    why: Option<Why>,
}

impl Step {
    /// Observes each metric's load (at most every [`CADENCE_SECS`]) and finds the best usable
    /// forecast. `None` for mode off.
    pub(crate) fn start(
        spec: &PredictiveSpec,
        state: &mut Option<State>,
        metrics: &[MetricSpec],
        outcomes: &[MetricOutcome],
        observation: &Observation,
        now: Time,
    ) -> Option<Step> {
        if spec.mode == PredictiveMode::Off {
            *state = None;
            return None;
        }
        let state = state.get_or_insert_with(State::default);
        let delay = u32::try_from(spec.startup_delay.as_secs()).unwrap_or(u32::MAX);
        let t = now.unix_millis().div_euclid(1000);
        let mut step = Step {
            mode: spec.mode,
            t,
            metrics: Vec::new(),
            best: None,
            why: None,
        };
        // Models of metrics no longer in the spec go.
        let keys: Vec<String> = metrics.iter().map(metric_key).collect();
        state.models.retain(|(k, _)| keys.contains(k));
        for outcome in outcomes {
            let Some(metric) = metrics.get(outcome.index) else {
                continue;
            };
            let Some(load) = load_of(metric, outcome, observation) else {
                continue;
            };
            let key = metric_key(metric);
            let model = state.model(&key, delay);
            let due = model
                .last_time()
                .is_none_or(|last| t - last >= i64::from(CADENCE_SECS));
            let observed = due && model.observe(t, load) == model::Observed::Accepted;
            let i = step.metrics.len();
            step.metrics.push(Metric {
                key,
                load,
                observed,
            });
            match model.forecast() {
                Ok(f) => {
                    let capacity = 1.0 / (1.0 + f64::from(spec.margin_percent) / 100.0);
                    let replicas = i32::try_from(f.replicas(capacity)).unwrap_or(i32::MAX);
                    if step.best.as_ref().is_none_or(|(_, r, _)| replicas > *r) {
                        step.best = Some((i, replicas, f));
                    }
                }
                Err(why) => {
                    if step.why.is_none_or(|w| rank(why) > rank(w)) {
                        step.why = Some(why);
                    }
                }
            }
        }
        Some(step)
    }

    /// The count to raise the stabilized count to (scale_up with a usable forecast).
    pub(crate) fn raise(&self) -> Option<i32> {
        (self.mode == PredictiveMode::ScaleUp)
            .then(|| self.best.as_ref().map(|(_, r, _)| *r))
            .flatten()
    }

    /// Records what the decision asked in the models that observed now, and says what the
    /// forecast did: the PredictiveScaling condition, the report, and a rescale reason when
    /// it raised the count.
    pub(crate) fn finish(
        self,
        state: &mut Option<State>,
        stabilized: Option<i32>,
        desired: i32,
    ) -> (Condition, PredictiveReport, Option<String>) {
        if let Some(state) = state.as_mut() {
            for m in self.metrics.iter().filter(|m| m.observed) {
                if let Some((_, model)) = state.models.iter_mut().find(|(k, _)| *k == m.key) {
                    let reactive = u32::try_from(stabilized.unwrap_or(desired).max(0)).unwrap_or(0);
                    let asked = u32::try_from(desired.max(0)).unwrap_or(0);
                    model.commit(self.t, 1.0, reactive, asked);
                }
            }
        }
        let best_wape = |key: &str| {
            state
                .as_ref()
                .and_then(|s| s.models.iter().find(|(k, _)| k == key))
                .and_then(|(_, model)| {
                    model
                        .accuracy()
                        .iter()
                        .filter_map(|a| a.wape)
                        .fold(None, |best: Option<f64>, w| {
                            Some(best.map_or(w, |b| b.min(w)))
                        })
                })
        };
        let reactive = stabilized;
        let mut report = PredictiveReport {
            mode: self.mode,
            metric: None,
            model: None,
            load: None,
            forecast_load: None,
            forecast_replicas: None,
            reactive_replicas: reactive,
            raised: false,
            wape: None,
            reason: ConditionReason::InsufficientHistory,
        };
        let Some((i, replicas, forecast)) = self.best else {
            let (reason, message) = match (self.why, self.metrics.first()) {
                (_, None) => (
                    ConditionReason::LoadUnavailable,
                    "no metric of the spec has a load in this decision: the decision is reactive"
                        .to_owned(),
                ),
                (Some(Why::Inaccurate), _) => (
                    ConditionReason::ForecastInaccurate,
                    "no forecaster's raises avoided enough shortfall for the capacity they added over the last week: the decision is reactive".to_owned(),
                ),
                (Some(Why::NotWorthIt), _) => (
                    ConditionReason::ForecastNotWorthIt,
                    "the forecasts did not beat a 5% headroom over the last day: the decision is reactive".to_owned(),
                ),
                (Some(Why::InsufficientHistory {
                    observed_secs,
                    scored_secs,
                    needed_secs,
                }), _) => (
                    ConditionReason::InsufficientHistory,
                    format!(
                        "forecasts scored for {} of the {} needed (observed for {}): the decision is reactive",
                        span(scored_secs),
                        span(needed_secs),
                        span(observed_secs)
                    ),
                ),
                (Some(Why::NoObservation) | None, _) => (
                    ConditionReason::InsufficientHistory,
                    "nothing observed yet: the decision is reactive".to_owned(),
                ),
            };
            report.reason = reason;
            report.metric = self.metrics.first().map(|m| m.key.clone());
            report.load = self.metrics.first().map(|m| m.load);
            report.wape = report.metric.as_deref().and_then(best_wape);
            let condition = Condition {
                condition_type: ConditionType::PredictiveScaling,
                status: false,
                reason,
                message,
            };
            return (condition, report, None);
        };
        let metric = &self.metrics[i];
        let above = reactive.is_none_or(|r| replicas > r);
        report.metric = Some(metric.key.clone());
        report.model = Some(forecast.model);
        report.load = Some(metric.load);
        report.forecast_load = Some(forecast.load_max);
        report.forecast_replicas = Some(replicas);
        report.raised = above;
        report.wape = best_wape(&metric.key);
        let lead = span(i64::from(forecast.lead_secs));
        let (status, reason, message, rescale) = match (self.mode, above) {
            (PredictiveMode::ScaleUp, true) => (
                true,
                ConditionReason::ForecastRaised,
                format!(
                    "the {} forecast of {} expects up to {:.1} replicas' load within {lead}: {replicas} replicas instead of {}",
                    forecast.model.as_str(),
                    metric.key,
                    forecast.load_max,
                    reactive.unwrap_or(replicas)
                ),
                Some(format!(
                    "predictive scale-up: the {} forecast of {} above target",
                    forecast.model.as_str(),
                    metric.key
                )),
            ),
            (PredictiveMode::ScaleUp, false) => (
                true,
                ConditionReason::ForecastBelowReactive,
                format!(
                    "the {} forecast of {} ({replicas} replicas within {lead}) is not above the reactive count",
                    forecast.model.as_str(),
                    metric.key
                ),
                None,
            ),
            _ => (
                false,
                ConditionReason::ForecastOnly,
                format!(
                    "forecast only: the {} forecast of {} would have asked {replicas} replicas (the HPA asked {})",
                    forecast.model.as_str(),
                    metric.key,
                    reactive.unwrap_or(desired)
                ),
                None,
            ),
        };
        report.reason = reason;
        let condition = Condition {
            condition_type: ConditionType::PredictiveScaling,
            status,
            reason,
            message,
        };
        (condition, report, rescale)
    }
}

/// How far a reason got, for choosing one over several metrics.
fn rank(why: Why) -> u8 {
    match why {
        Why::NoObservation => 0,
        Why::InsufficientHistory { .. } => 1,
        Why::Inaccurate => 2,
        Why::NotWorthIt => 3,
    }
}

/// `1h30m`, `6h`, `45s`.
fn span(secs: i64) -> String {
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    match (h, m, s) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, 0, _) => format!("{h}h"),
        (h, m, _) => format!("{h}h{m}m"),
    }
}

/// A metric's identity: its source type, name and container (`Resource/cpu`,
/// `ContainerResource/cpu/app`, `External/queue`), what the model is kept under.
pub fn metric_key(metric: &MetricSpec) -> String {
    match metric {
        MetricSpec::Resource { name, .. } => format!("Resource/{name}"),
        MetricSpec::ContainerResource {
            name, container, ..
        } => format!("ContainerResource/{name}/{container}"),
        MetricSpec::Pods { name, .. } => format!("Pods/{name}"),
        MetricSpec::Object { name, .. } => format!("Object/{name}"),
        MetricSpec::External { name, .. } => format!("External/{name}"),
        MetricSpec::Unknown { type_name } => format!("Unknown/{type_name}"),
    }
}

/// The metric's load in this decision, in replicas at its target (see the module
/// documentation); `None` when it has no proposal, or the target is at zero replicas (the
/// HPA's ratio from zero has no per-replica meaning: activation decides that step).
pub(crate) fn load_of(
    metric: &MetricSpec,
    outcome: &MetricOutcome,
    observation: &Observation,
) -> Option<f64> {
    let proposal = outcome.result.as_ref().ok()?;
    let ratio = proposal.usage_ratio?;
    if observation.current_replicas <= 0 || !ratio.is_finite() || ratio < 0.0 {
        return None;
    }
    let status = f64::from(
        observation
            .status_replicas
            .unwrap_or(observation.current_replicas)
            .max(1),
    );
    let ready_pods = || match super::replicas::ready_pods_count(&observation.pods) {
        Ok(ready) if ready > 0 => ready as f64,
        _ => f64::from(observation.current_replicas),
    };
    let base = match metric {
        MetricSpec::Resource { .. }
        | MetricSpec::ContainerResource { .. }
        | MetricSpec::Pods { .. } => outcome
            .pod_groups
            .as_ref()
            .map_or_else(ready_pods, |g| f64::from(g.ready_count.max(1))),
        MetricSpec::Object { target, .. } | MetricSpec::External { target, .. } => {
            match target.target_type {
                MetricTargetType::AverageValue => status,
                _ => ready_pods(),
            }
        }
        MetricSpec::Unknown { .. } => return None,
    };
    let load = ratio * base;
    load.is_finite().then_some(load)
}
