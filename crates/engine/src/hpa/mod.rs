//! The HorizontalPodAutoscaler decision: `reconcileAutoscaler` of `horizontal.go` without the
//! I/O. `evaluate(settings, spec, observation, history, now)` returns an [`Evaluation`]: the
//! [`Decision`] (with its explanation as data) and the history to store.
//!
//! The decision record is part of the engine's API: the service stores and returns it, and a
//! replay of stored history under another spec compares records.

pub mod budget;
pub mod condition;
pub mod defaults;
pub mod extensions;
pub mod history;
pub mod normalize;
pub mod observation;
pub mod outcome;
pub mod predictive;
pub mod prune;
pub mod replicas;
pub mod schedule;
pub mod settings;
pub mod spec;
pub mod validate;

use serde::{Deserialize, Serialize};

use self::{condition::Condition, history::History};

/// The result of one evaluation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// What the controller decided, with its conditions and per-metric outcomes.
    pub decision: Decision,
    /// The history after this evaluation, to be stored unless the call is a dry run.
    pub history: History,
}

/// What the controller decided and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// The scale's current replica count the decision started from (`scale.Spec.Replicas`).
    pub current_replicas: i32,
    /// The count to apply. Equal to `current_replicas` when nothing changes.
    pub desired_replicas: i32,
    /// The conditions after the evaluation, one per type at most, in
    /// AbleToScale, ScalingActive, ScalingLimited order.
    pub conditions: Vec<Condition>,
    /// One entry per spec metric, in spec order (empty on the shortcuts).
    pub metrics: Vec<MetricOutcome>,
    /// Which branch of `reconcileAutoscaler` decided.
    pub path: DecisionPath,
    /// The metric proposal (max over metrics) before normalization.
    pub prenormalized_replicas: Option<i32>,
    /// The value after the stabilization step.
    pub stabilized_replicas: Option<i32>,
    /// The scale-up limit in force for the current count, the stored scale events and the
    /// defaulted rules, before this evaluation stores its own event (behavior:
    /// `calculateScaleUpLimitWithScalingRules`; legacy: `calculateScaleUpLimit`). Reported
    /// on every path, also where no normalization runs.
    pub scale_up_limit: Option<i32>,
    /// The scale-down limit in force (`calculateScaleDownLimitWithBehaviors`), behavior only.
    pub scale_down_limit: Option<i32>,
    /// The error Kubernetes' reconciliation returns, if any (scaling may still proceed when
    /// only some metrics failed).
    pub error: Option<String>,
    /// Why the count changes, in the words of Kubernetes' `SuccessfulRescale` event
    /// (`cpu resource utilization (percentage of request) above target`, `All metrics below
    /// target`, `Current number of replicas above Spec.MaxReplicas`, ...); `None` when the
    /// count stays.
    pub rescale_reason: Option<String>,
    /// What the migration extensions did (`spec.extensions`); `None` without them, so stored
    /// decisions of targets without extensions read and compare as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Box<extensions::ExtensionReport>>,
    /// What a scaling group's budget did (`budget`); `None` for a target in no group, so its
    /// decision is exactly the plain HPA's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Box<budget::BudgetReport>>,
    /// What the spec's schedules did (`schedule`); `None` for a spec without schedules, so
    /// its stored decisions read and compare as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Box<schedule::ScheduleReport>>,
    /// What predictive scale-up did (`predictive`); `None` without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predictive: Option<Box<predictive::PredictiveReport>>,
}

impl Decision {
    /// A decision on `path` that keeps `current`, with nothing else to report yet: the start
    /// every path fills in.
    pub fn keeping(current: i32, path: DecisionPath) -> Self {
        Decision {
            current_replicas: current,
            desired_replicas: current,
            conditions: Vec::new(),
            metrics: Vec::new(),
            path,
            prenormalized_replicas: None,
            stabilized_replicas: None,
            scale_up_limit: None,
            scale_down_limit: None,
            error: None,
            rescale_reason: None,
            extensions: None,
            budget: None,
            schedule: None,
            predictive: None,
        }
    }
}

/// The branch of `reconcileAutoscaler` that produced the decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DecisionPath {
    /// Current replicas 0 with a minimum above 0: scaling is disabled.
    ScalingDisabled,
    /// Current replicas above the maximum: desired = max, no metric evaluation.
    AboveMaxReplicas,
    /// Current replicas below the minimum: desired = min, no metric evaluation.
    BelowMinReplicas,
    /// Metric evaluation failed as a whole; no scaling.
    MetricsFailed,
    /// Normalized without behavior (`normalizeDesiredReplicas`).
    Legacy,
    /// Normalized with behavior (`normalizeDesiredReplicasWithBehaviors`).
    Behavior,
    /// Extensions: `pause.paused_replicas` set the count; no metric evaluation.
    Paused,
    /// Extensions: KEDA activation decided the 0↔1 (idle↔min) step.
    Activation,
    /// Extensions: the target is at 0 and zero was not our decision, so it is left alone.
    PausedAtZero,
}

impl DecisionPath {
    /// A stable name for the API and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            DecisionPath::ScalingDisabled => "ScalingDisabled",
            DecisionPath::AboveMaxReplicas => "AboveMaxReplicas",
            DecisionPath::BelowMinReplicas => "BelowMinReplicas",
            DecisionPath::MetricsFailed => "MetricsFailed",
            DecisionPath::Legacy => "Legacy",
            DecisionPath::Behavior => "Behavior",
            DecisionPath::Paused => "Paused",
            DecisionPath::Activation => "Activation",
            DecisionPath::PausedAtZero => "PausedAtZero",
        }
    }
}

/// The evaluation of one spec metric (`computeReplicasForMetric` and `computeStatusFor*Metric`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricOutcome {
    /// Index in `spec.metrics`.
    pub index: usize,
    /// The proposal, or why there is none.
    pub result: Result<MetricProposal, MetricFailure>,
    /// How `groupPods` sorted the pods (pod-based metrics that got that far).
    pub pod_groups: Option<PodGroups>,
}

/// A metric's proposal and the status Kubernetes reports for it (algorithm document, section 8).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricProposal {
    /// The replica count this metric alone proposes (`computeReplicasForMetric`).
    pub replicas: i32,
    /// Integer percentage of the request (Utilization targets).
    pub current_average_utilization: Option<i32>,
    /// Milli-units per pod.
    pub current_average_value: Option<i64>,
    /// Milli-units in total (Object/External Value targets).
    pub current_value: Option<i64>,
    /// The usage ratio the proposal came from (current ÷ target), for explanations.
    pub usage_ratio: Option<f64>,
}

impl MetricProposal {
    /// The current value compared with a target of `target_type`, in the target's unit
    /// (`kubectl get hpa`'s "current": the status field `computeStatusFor*Metric` sets for
    /// that target type).
    pub fn current(&self, target_type: spec::MetricTargetType) -> Option<i64> {
        match target_type {
            spec::MetricTargetType::Utilization => self.current_average_utilization.map(i64::from),
            spec::MetricTargetType::AverageValue => self.current_average_value,
            spec::MetricTargetType::Value => self.current_value,
        }
    }
}

/// Why a metric has no proposal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricFailure {
    /// The ScalingActive False reason for this metric type (e.g. `FailedGetResourceMetric`).
    pub reason: condition::ConditionReason,
    /// Kubernetes' error text.
    pub message: String,
}

/// `groupPods`' result for one metric; name lists sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodGroups {
    /// Pods with a sample that count as ready.
    pub ready_count: i32,
    /// Pods set aside as not yet ready (cpu only): counted at 0 % when scaling up.
    pub unready: Vec<String>,
    /// Pods without a sample: counted at 0 % (up) or 100 % (down) of the target.
    pub missing: Vec<String>,
    /// Pods being deleted or failed: left out entirely.
    pub ignored: Vec<String>,
}

// === reconcileAutoscaler ===

use self::{
    condition::{ConditionReason, ConditionType},
    observation::Observation,
    settings::Settings,
    spec::{HorizontalSpec, MetricSpec},
};
use crate::{error::InvalidInput, time::Time};
use defaults::DefaultedSpec;
use normalize::Bounds;

/// Kubernetes' messages for the conditions `reconcileAutoscaler` and
/// `computeReplicasForMetrics` set themselves.
pub mod messages {
    /// AbleToScale True, `SucceededGetScale`.
    pub const SUCCEEDED_GET_SCALE: &str =
        "the HPA controller was able to get the target's current scale";
    /// ScalingActive False, `ScalingDisabled` (the target is at zero replicas).
    pub const SCALING_DISABLED: &str =
        "scaling is disabled since the replica count of the target is zero";
    /// The desired count when the current count is above `maxReplicas`.
    pub const ABOVE_MAX: &str = "Current number of replicas above Spec.MaxReplicas";
    /// The desired count when the current count is below `minReplicas`.
    pub const BELOW_MIN: &str = "Current number of replicas below Spec.MinReplicas";
    /// The reason logged when every metric proposes fewer replicas than now.
    pub const ALL_BELOW_TARGET: &str = "All metrics below target";
}

/// The conditions of one evaluation: one slot per type, the last write wins (`setCondition`).
/// The three HPA types first, then the extensions' types: [`ConditionType`]'s order.
#[derive(Default)]
struct Conditions([Option<Condition>; 9]);

impl Conditions {
    fn set(
        &mut self,
        condition_type: ConditionType,
        status: bool,
        reason: ConditionReason,
        message: impl Into<String>,
    ) {
        self.put(Condition {
            condition_type,
            status,
            reason,
            message: message.into(),
        });
    }

    fn put(&mut self, condition: Condition) {
        let slot = condition.condition_type as usize;
        self.0[slot] = Some(condition);
    }

    fn into_vec(self) -> Vec<Condition> {
        self.0.into_iter().flatten().collect()
    }
}

/// The state of one evaluation as it moves through `reconcileAutoscaler`.
struct Reconciliation<'a> {
    settings: &'a Settings,
    spec: DefaultedSpec,
    history: History,
    now: Time,
    conditions: Conditions,
    decision: Decision,
    /// A forecast's count to raise the stabilized count to (`predictive`, scale_up).
    raise: Option<i32>,
    /// The forecast raised the count in the normalization.
    raised: bool,
}

impl<'a> Reconciliation<'a> {
    /// Predictive scale-up's end of a decision: the models record what was asked, the
    /// PredictiveScaling condition and report say what the forecast did, and a rescale the
    /// forecast caused says so.
    fn finish_forecast(
        &mut self,
        step: predictive::Step,
        desired: i32,
        rescale_reason: &mut Option<String>,
    ) {
        let (condition, report, raised) = step.finish(
            &mut self.history.predictive,
            self.decision.stabilized_replicas,
            desired,
        );
        self.conditions.put(condition);
        self.decision.predictive = Some(Box::new(report));
        if desired > self.decision.current_replicas
            && let Some(reason) = raised.filter(|_| self.raised)
        {
            *rescale_reason = Some(reason);
        }
    }

    /// The start of `reconcileAutoscaler` once the scale was read: AbleToScale True /
    /// SucceededGetScale and `recordInitialRecommendation`.
    fn start(
        settings: &'a Settings,
        spec: &HorizontalSpec,
        current: i32,
        history: &History,
        now: Time,
    ) -> Self {
        let mut conditions = Conditions::default();
        conditions.set(
            ConditionType::AbleToScale,
            true,
            ConditionReason::SucceededGetScale,
            messages::SUCCEEDED_GET_SCALE,
        );
        let mut history = history.clone();
        record_initial_recommendation(&mut history, current, now);
        // A spec without predictive scale-up keeps no model (one turned off drops it).
        if spec
            .predictive
            .as_ref()
            .is_none_or(|p| p.mode == predictive::PredictiveMode::Off)
        {
            history.predictive = None;
        }
        let spec = defaults::set_defaults(spec, settings);
        let (path, scale_up_limit, scale_down_limit) = match &spec.behavior {
            Some(b) => {
                let (up, down) = normalize::scale_limits(current, &history, b, now);
                (DecisionPath::Behavior, up, Some(down))
            }
            None => (
                DecisionPath::Legacy,
                normalize::calculate_scale_up_limit(settings, current),
                None,
            ),
        };
        Reconciliation {
            settings,
            spec,
            history,
            now,
            conditions,
            raise: None,
            raised: false,
            decision: Decision {
                scale_up_limit: Some(scale_up_limit),
                scale_down_limit,
                ..Decision::keeping(current, path)
            },
        }
    }

    fn bounds(&self) -> Bounds {
        Bounds {
            current: self.decision.current_replicas,
            min: self.spec.min_replicas,
            max: self.spec.max_replicas,
        }
    }

    /// `normalizeDesiredReplicas` or `normalizeDesiredReplicasWithBehaviors`; returns the
    /// normalized count.
    fn normalize(&mut self, prenormalized: i32) -> i32 {
        let bounds = self.bounds();
        self.decision.prenormalized_replicas = Some(prenormalized);
        let normalized = match &self.spec.behavior {
            None => normalize::normalize_desired_replicas(
                self.settings,
                self.history.recommendations.get_or_insert_with(Vec::new),
                self.now,
                bounds,
                prenormalized,
            ),
            Some(behavior) => normalize::normalize_desired_replicas_with_behaviors(
                behavior,
                &mut self.history,
                self.now,
                bounds,
                prenormalized,
            ),
        };
        let mut normalized = normalized;
        // Predictive scale-up: the stabilized count raised to the forecast's, then the same
        // rate limits and bounds (the stabilization window keeps the reactive proposal).
        if let Some(raise) = self.raise.filter(|&r| r > normalized.stabilized) {
            let (desired, reason, message) = match &self.spec.behavior {
                None => {
                    normalize::convert_desired_replicas_with_rules(self.settings, bounds, raise)
                }
                Some(_) => normalize::convert_desired_replicas_with_behavior_rate(
                    bounds,
                    raise,
                    normalized.scale_up_limit,
                    normalized.scale_down_limit.unwrap_or(i32::MIN),
                ),
            };
            self.raised = desired > normalized.desired;
            normalized.desired = desired;
            normalized.scaling_limited = Condition {
                condition_type: ConditionType::ScalingLimited,
                status: desired != raise,
                reason,
                message: message.into(),
            };
        }
        self.decision.stabilized_replicas = Some(normalized.stabilized);
        self.decision.scale_up_limit = Some(normalized.scale_up_limit);
        self.decision.scale_down_limit = normalized.scale_down_limit;
        self.conditions.put(normalized.able_to_scale);
        self.conditions.put(normalized.scaling_limited);
        normalized.desired
    }

    /// A scaling group's cap on the normalized count (`budget`): at most the allocation's
    /// `allowed`, but a cut below the current count no faster than the scale-down rate limit
    /// (behavior: `calculateScaleDownLimitWithBehaviors`; the legacy path has none). Sets
    /// ScalingLimited True / `BudgetLimited` when it changes the count.
    fn within_budget(
        &mut self,
        desired: i32,
        allocation: &budget::Allocation,
        rescale_reason: &mut Option<String>,
    ) -> i32 {
        if desired <= allocation.allowed {
            return desired;
        }
        let current = self.decision.current_replicas;
        let mut capped = allocation.allowed;
        if capped < current {
            if let Some(floor) = self.decision.scale_down_limit {
                capped = capped.max(floor.min(current));
            }
            *rescale_reason = Some(budget::rescale_reason(&allocation.group));
        }
        if capped == desired {
            return desired;
        }
        let used = allocation.others_held + i64::from(current.max(capped)) * allocation.units;
        self.conditions.set(
            ConditionType::ScalingLimited,
            true,
            ConditionReason::BudgetLimited,
            budget::limited_message(
                &allocation.group,
                (allocation.capacity - used).max(0),
                allocation.capacity,
            ),
        );
        if capped == current {
            *rescale_reason = None;
        }
        capped
    }

    /// The end of `reconcileAutoscaler`: apply the rescale (AbleToScale True /
    /// SucceededRescale, `storeScaleEvent`) or keep the current count.
    fn finish(mut self, desired: i32, rescale: bool, rescale_reason: Option<String>) -> Evaluation {
        let current = self.decision.current_replicas;
        if rescale {
            self.conditions.set(
                ConditionType::AbleToScale,
                true,
                ConditionReason::SucceededRescale,
                format!("the HPA controller was able to update the target scale to {desired}"),
            );
            // A count set by KEDA's executor (activation) is not an HPA rescale: no scale
            // event, as `storeScaleEvent` runs only after the HPA's own update.
            let by_activation = self.decision.path == DecisionPath::Activation;
            if let Some(behavior) = self.spec.behavior.as_ref().filter(|_| !by_activation) {
                normalize::store_scale_event(
                    behavior,
                    &mut self.history,
                    self.now,
                    current,
                    desired,
                );
            }
            self.decision.desired_replicas = desired;
            self.decision.rescale_reason = rescale_reason;
        } else {
            self.decision.desired_replicas = current;
        }
        self.decision.conditions = self.conditions.into_vec();
        Evaluation {
            decision: self.decision,
            history: self.history,
        }
    }
}

/// `recordInitialRecommendation`: a target without a recommendation list starts one with the
/// current count. An existing but empty list stays empty.
fn record_initial_recommendation(history: &mut History, current: i32, now: Time) {
    if history.recommendations.is_none() {
        history.recommendations = Some(vec![history::Recommendation::new(current, now)]);
    }
}

/// Decides the replica count for one snapshot: `reconcileAutoscaler` without the I/O.
///
/// Input that makes no sense is rejected before anything is computed; everything else,
/// including metrics that cannot be computed, is part of the decision. The returned history
/// holds what Kubernetes would have recorded (the recommendation whenever a normalization ran,
/// a scale event after a rescale with a behavior).
pub fn evaluate(
    settings: &Settings,
    spec: &HorizontalSpec,
    observation: &Observation,
    history: &History,
    now: Time,
) -> Result<Evaluation, InvalidInput> {
    evaluate_within(settings, spec, observation, history, now, None)
}

/// [`evaluate`] with the normalized count capped by a scaling group's allocation (`None`:
/// [`evaluate`]); the decision [`decide_in_group`] makes twice for a member over its share.
pub fn evaluate_within(
    settings: &Settings,
    spec: &HorizontalSpec,
    observation: &Observation,
    history: &History,
    now: Time,
    budget: Option<&budget::Allocation>,
) -> Result<Evaluation, InvalidInput> {
    validate::validate(settings, spec, observation, history)?;
    // The schedules in force at `now` become the spec's bounds (every Kubernetes path reads
    // its bounds from the spec), and the decision says which schedule set them.
    let scheduled = schedule::Scheduled::resolve(spec, now)?;
    let spec = scheduled.spec(spec);
    let evaluation = if spec.extensions.is_some() || settings.scale_to_zero {
        // The gate's rules (ScaledToZero, a zero that is not ours left alone) need the
        // extensions' state even when the spec has no extension of its own.
        extensions::evaluate(
            settings,
            spec,
            spec.extensions.as_ref(),
            observation,
            history,
            now,
            budget,
        )?
    } else {
        let hooks = Hooks {
            budget,
            ..Hooks::default()
        };
        reconcile(settings, spec, observation, history, now, hooks)
    };
    Ok(scheduled.annotate(evaluation))
}

/// A member of a scaling group deciding: the plain HPA's decision is the member's demand;
/// the group's [`budget::Ledger`] turns it into an allocation, and the decision is made again
/// with the count capped by it when the demand is above it. Returns the evaluation (its
/// decision carries the [`budget::BudgetReport`]) and the member's new ledger entry; the
/// caller stores both together. With the demand within the allocation the decision is the
/// plain HPA's, report aside.
pub fn evaluate_member(
    settings: &Settings,
    spec: &HorizontalSpec,
    observation: &Observation,
    history: &History,
    now: Time,
    member: budget::Membership<'_>,
) -> Result<(Evaluation, budget::LedgerEntry), InvalidInput> {
    decide_member(
        member,
        observation.current_replicas,
        spec.min_replicas.unwrap_or(1),
        |budget| evaluate_within(settings, spec, observation, history, now, budget),
    )
}

/// The budget step around any way of deciding (a live call, a replayed step): `decide(None)`
/// decides as the plain HPA, which is the member's demand; when the demand is above the
/// member's allocation, `decide(Some(allocation))` decides again with the count capped. The
/// decision gets its [`budget::BudgetReport`]; the member's new ledger entry is returned with
/// it.
pub fn decide_member(
    member: budget::Membership<'_>,
    current: i32,
    min: i32,
    mut decide: impl FnMut(Option<&budget::Allocation>) -> Result<Evaluation, InvalidInput>,
) -> Result<(Evaluation, budget::LedgerEntry), InvalidInput> {
    let budget::Membership {
        group,
        ledger,
        key,
        units,
    } = member;
    let plain = decide(None)?;
    let demand = plain.decision.desired_replicas;
    let allocation = ledger.allocation(group, key, demand, current, min, units);
    let mut evaluation = if demand > allocation.allowed {
        decide(Some(&allocation))?
    } else {
        plain
    };
    let entry = budget::LedgerEntry {
        demand,
        current,
        told: evaluation.decision.desired_replicas,
        min,
        units,
    };
    evaluation.decision.budget = Some(Box::new(budget::BudgetReport {
        group: group.to_owned(),
        uncapped_replicas: demand,
        fair_share: allocation.fair_share,
        capacity: allocation.capacity,
        units_per_replica: units,
        used: allocation.others_held + entry.held(),
    }));
    Ok((evaluation, entry))
}

/// A member's decision with its group's bookkeeping, the one budget step the live call and
/// the replay share: [`decide_member`] on `ledger` as read, then the member's new entry
/// recorded in it. Returns the evaluation and whether the ledger changed: a member that holds
/// what it held leaves its group's record as it was (a live call then writes no group record).
pub fn decide_in_group(
    ledger: &mut budget::Ledger,
    group: &str,
    key: &str,
    units: i64,
    current: i32,
    min: i32,
    decide: impl FnMut(Option<&budget::Allocation>) -> Result<Evaluation, InvalidInput>,
) -> Result<(Evaluation, bool), InvalidInput> {
    let member = budget::Membership {
        group,
        ledger,
        key,
        units,
    };
    let (evaluation, entry) = decide_member(member, current, min, decide)?;
    let changed = ledger.members.get(key) != Some(&entry);
    if changed {
        ledger.members.insert(key.to_owned(), entry);
    }
    Ok((evaluation, changed))
}

/// What the extensions and a scaling group change inside one reconciliation
/// (`Hooks::default()`: nothing).
#[derive(Default)]
struct Hooks<'a> {
    /// The metric outcomes, computed (and adjusted by fallback) before the reconciliation.
    outcomes: Option<Vec<MetricOutcome>>,
    /// The target is at zero because the controller scaled it there (`ScaledToZero` True,
    /// scale to zero with 1.37 semantics): its metrics are computed even when `min_replicas`
    /// is above 0 (`shouldComputeMetricsForZeroReplicas`), and the result is raised to min.
    scaled_to_zero: bool,
    /// A scaling group's allocation: the normalized count is capped at `allowed`
    /// ([`Reconciliation::within_budget`]).
    budget: Option<&'a budget::Allocation>,
}

/// The body of [`evaluate`] on validated input.
fn reconcile(
    settings: &Settings,
    spec: &HorizontalSpec,
    observation: &Observation,
    history: &History,
    now: Time,
    hooks: Hooks<'_>,
) -> Evaluation {
    let current = observation.current_replicas;
    let mut r = Reconciliation::start(settings, spec, current, history, now);
    let min = r.spec.min_replicas;
    let max = r.spec.max_replicas;
    let from_zero = current == 0 && hooks.scaled_to_zero;

    if current == 0 && min != 0 && !from_zero {
        // "Autoscaling is disabled for this resource"
        r.decision.path = DecisionPath::ScalingDisabled;
        r.conditions.set(
            ConditionType::ScalingActive,
            false,
            ConditionReason::ScalingDisabled,
            messages::SCALING_DISABLED,
        );
        return r.finish(0, false, None);
    }
    if current > max {
        r.decision.path = DecisionPath::AboveMaxReplicas;
        return r.finish(max, true, Some(messages::ABOVE_MAX.to_string()));
    }
    if current < min && !from_zero {
        r.decision.path = DecisionPath::BelowMinReplicas;
        return r.finish(min, true, Some(messages::BELOW_MIN.to_string()));
    }

    let tolerances = defaults::tolerances_for_hpa(&r.spec, settings);
    let outcomes: Vec<MetricOutcome> = match hooks.outcomes {
        Some(outcomes) => outcomes,
        None => r
            .spec
            .metrics
            .iter()
            .enumerate()
            .map(|(i, metric)| {
                replicas::replicas_for_metric(i, metric, observation, settings, tolerances, now)
            })
            .collect(),
    };
    let combined = compute_replicas_for_metrics(&r.spec.metrics, &outcomes, current);
    r.decision.metrics = outcomes;
    let combined = match combined {
        Err(failure) => {
            // No scaling; status keeps the statuses computed so far; the error is returned.
            r.decision.path = DecisionPath::MetricsFailed;
            r.conditions.put(failure.condition);
            r.decision.error = Some(format!(
                "failed to compute desired number of replicas based on listed metrics: {}",
                failure.error
            ));
            return r.finish(current, false, None);
        }
        Ok(combined) => combined,
    };
    r.conditions.set(
        ConditionType::ScalingActive,
        true,
        ConditionReason::ValidMetricFound,
        format!(
            "the HPA was able to successfully calculate a replica count from {}",
            combined.metric
        ),
    );
    r.decision.error = combined.error;
    // Predictive scale-up: the loads observed, the forecast to raise to after stabilization.
    let forecast = spec.predictive.as_ref().and_then(|p| {
        predictive::Step::start(
            p,
            &mut r.history.predictive,
            &r.spec.metrics,
            &r.decision.metrics,
            observation,
            now,
        )
    });
    r.raise = forecast.as_ref().and_then(predictive::Step::raise);

    let prenormalized = combined.replicas.max(0);
    let mut rescale_reason = if prenormalized > current {
        Some(format!("{} above target", combined.metric))
    } else if prenormalized < current {
        Some(messages::ALL_BELOW_TARGET.to_string())
    } else {
        None
    };
    let mut desired = r.normalize(prenormalized);
    if from_zero && desired < min {
        // `reconcileAutoscaler`: a target woken from zero gets at least min.
        desired = min;
        rescale_reason.get_or_insert_with(|| messages::BELOW_MIN.to_string());
    }
    if let Some(allocation) = hooks.budget {
        desired = r.within_budget(desired, allocation, &mut rescale_reason);
    }
    if let Some(step) = forecast {
        r.finish_forecast(step, desired, &mut rescale_reason);
    }
    r.finish(desired, desired != current, rescale_reason)
}

/// What a replay knows beyond the proposal ([`normalize_only`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Replayed<'a> {
    /// A scaling group's allocation that caps the normalized count (the replay of a group's
    /// members: `whatif::replay_group`).
    pub budget: Option<&'a budget::Allocation>,
    /// The metric outcomes the proposal was combined from (indexed by the spec's metrics),
    /// from which `spec.predictive` learns and forecasts the load as [`evaluate`] does; empty:
    /// no forecast.
    pub outcomes: &'a [MetricOutcome],
}

/// Normalizes a given proposal as if the metrics had produced it: for callers (and the
/// conformance cases) that exercise `normalizeDesiredReplicas*` directly, and for the what-if
/// replay of a decision log (`replayed`: capped by a scaling group's allocation, raised by
/// `spec.predictive`'s forecast of the replayed outcomes' load; `Replayed::default()`:
/// neither). Skips the metric evaluation and the disabled / above-max / below-min shortcuts,
/// then rescales and records state as [`evaluate`] does.
pub fn normalize_only(
    settings: &Settings,
    spec: &HorizontalSpec,
    current_replicas: i32,
    prenormalized: i32,
    history: &History,
    now: Time,
    replayed: Replayed<'_>,
) -> Result<Evaluation, InvalidInput> {
    validate::validate_settings(settings)?;
    validate::validate_spec(spec)?;
    validate::validate_history(history)?;
    if current_replicas < 0 {
        return Err(InvalidInput::new(
            "current_replicas",
            "must not be negative",
        ));
    }
    if prenormalized < 0 {
        return Err(InvalidInput::new(
            "prenormalized_desired_replicas",
            "must not be negative",
        ));
    }
    let scheduled = schedule::Scheduled::resolve(spec, now)?;
    let spec = scheduled.spec(spec);
    let mut r = Reconciliation::start(settings, spec, current_replicas, history, now);
    let rescale_reason = match prenormalized.cmp(&current_replicas) {
        std::cmp::Ordering::Greater => Some("prenormalized proposal above target".to_string()),
        std::cmp::Ordering::Less => Some(messages::ALL_BELOW_TARGET.to_string()),
        std::cmp::Ordering::Equal => None,
    };
    let mut rescale_reason = rescale_reason;
    // The replay's pods are its counts: the load of a pod metric is its ratio times the
    // recorded ready pods (`pod_groups`), of the others times this count.
    let observation = Observation {
        current_replicas,
        status_replicas: Some(current_replicas),
        ..Observation::default()
    };
    let forecast = match (&spec.predictive, replayed.outcomes) {
        (Some(p), outcomes) if !outcomes.is_empty() => predictive::Step::start(
            p,
            &mut r.history.predictive,
            &r.spec.metrics,
            outcomes,
            &observation,
            now,
        ),
        _ => None,
    };
    r.raise = forecast.as_ref().and_then(predictive::Step::raise);
    let mut desired = r.normalize(prenormalized);
    if let Some(allocation) = replayed.budget {
        desired = r.within_budget(desired, allocation, &mut rescale_reason);
    }
    if let Some(step) = forecast {
        r.finish_forecast(step, desired, &mut rescale_reason);
    }
    Ok(scheduled.annotate(r.finish(desired, desired != current_replicas, rescale_reason)))
}

/// The proposal of `computeReplicasForMetrics` when at least one metric counts.
struct Combined {
    replicas: i32,
    /// The description of the metric that gave the proposal.
    metric: String,
    /// Set when some metrics failed but scaling proceeds.
    error: Option<String>,
}

/// `computeReplicasForMetrics` failing as a whole.
struct MetricsFailure {
    condition: Condition,
    error: String,
}

/// `computeReplicasForMetrics`: the largest proposal (the first valid metric, then any larger
/// one). Fails when every metric failed, or when some failed and the others would scale down:
/// an invalid metric never blocks a scale-up or a steady state, but blocks every scale-down.
fn compute_replicas_for_metrics(
    specs: &[MetricSpec],
    outcomes: &[MetricOutcome],
    spec_replicas: i32,
) -> Result<Combined, MetricsFailure> {
    let mut replicas = 0;
    let mut metric = String::new();
    let mut invalid = 0usize;
    let mut first_invalid: Option<(&MetricFailure, String)> = None;
    for outcome in outcomes {
        match &outcome.result {
            Err(failure) => {
                if invalid == 0 {
                    let error = match specs.get(outcome.index) {
                        Some(spec) => replicas::metric_error(spec, failure),
                        None => failure.message.clone(),
                    };
                    first_invalid = Some((failure, error));
                }
                invalid += 1;
            }
            Ok(proposal) => {
                if replicas == 0 || proposal.replicas > replicas {
                    replicas = proposal.replicas;
                    metric = specs
                        .get(outcome.index)
                        .map(metric_description)
                        .unwrap_or_default();
                }
            }
        }
    }
    let error = first_invalid.as_ref().map(|(_, error)| {
        format!(
            "invalid metrics ({invalid} invalid out of {}), first error is: {error}",
            specs.len(),
        )
    });
    if invalid >= specs.len() || (invalid > 0 && replicas < spec_replicas) {
        let (reason, message) = match &first_invalid {
            Some((f, _)) => (f.reason, f.message.as_str()),
            // Only reachable without metrics, which the defaults rule out.
            None => (
                ConditionReason::InvalidMetricSourceType,
                "no metrics to compute a replica count from",
            ),
        };
        return Err(MetricsFailure {
            condition: Condition {
                condition_type: ConditionType::ScalingActive,
                status: false,
                reason,
                message: format!("the HPA was unable to compute the replica count: {message}"),
            },
            error: error.unwrap_or_else(|| message.to_string()),
        });
    }
    Ok(Combined {
        replicas,
        metric,
        error,
    })
}

/// How Kubernetes names a metric in ValidMetricFound and the rescale event
/// (`computeStatusFor*Metric`). Object and External metrics carry no selector here, which Go
/// prints as `nil`.
pub fn metric_description(metric: &MetricSpec) -> String {
    match metric {
        MetricSpec::Resource { name, target } => {
            if target.average_value.is_some() {
                format!("{name} resource")
            } else {
                format!("{name} resource utilization (percentage of request)")
            }
        }
        MetricSpec::ContainerResource { name, target, .. } => {
            if target.average_value.is_some() {
                format!("{name} resource")
            } else {
                format!("{name} container resource utilization (percentage of request)")
            }
        }
        MetricSpec::Pods { name, .. } => format!("pods metric {name}"),
        MetricSpec::Object { name, target } => {
            if target.target_type == spec::MetricTargetType::Value && target.value.is_some() {
                format!("Object metric {name}")
            } else {
                // sic: upstream names Object AverageValue metrics "external metric".
                format!("external metric {name}(nil)")
            }
        }
        MetricSpec::External { name, .. } => format!("external metric {name}(nil)"),
        MetricSpec::Unknown { type_name } => format!("unknown metric source type {type_name:?}"),
    }
}

#[cfg(test)]
mod tests;
