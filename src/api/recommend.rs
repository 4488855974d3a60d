//! One Recommend once its request is converted: what Kubernetes' `reconcileAutoscaler`
//! (`pkg/controller/podautoscaler/horizontal.go`) does after it has read the HPA object and
//! the scale subresource, with the store in place of the API server:
//!
//! 1. the controller's memory ([`Start`]): the target's history, or none for a new target
//!    (`recordInitialRecommendation` then seeds it), and in shadow mode the count the newest
//!    shadow decision asked for as the current count;
//! 2. the decision: `engine::hpa::evaluate` for a plain target; for a member of a scaling
//!    group, `engine::hpa::decide_in_group`, the budget step the what-if replay runs too;
//! 3. what is written: the history pruned to the retention, the decision's log entry with the
//!    inputs it was made from, and the group's ledger when the member's holding changed;
//! 4. after the commit: the metrics and the response, with the warnings derived from the
//!    request (never stored).

use std::time::Duration;

use tracing::Span;

use super::{
    clock,
    commit::{GroupRead, HpaWrite, TargetState},
    convert::{self, RecommendInput},
    status::ApiError,
};
use crate::{
    engine::{
        error::InvalidInput,
        hpa::{
            self, Evaluation, budget::Allocation, condition::ConditionType, history::History,
            observation::Observation, prune, settings::Settings, spec::HorizontalSpec,
        },
        time::Time,
    },
    pb::v1::RecommendResponse,
    store::{DecisionEntry, PolicyRef},
};

/// The HPA decision function (`engine::hpa::evaluate_within`'s signature: a group's
/// allocation, or none). A parameter so that tests of the service can count calls or fail on
/// purpose.
pub(crate) type Evaluate = fn(
    &Settings,
    &HorizontalSpec,
    &Observation,
    &History,
    Time,
    Option<&Allocation>,
) -> Result<Evaluation, InvalidInput>;

/// What a decision builds on: the controller's memory, and the count in shadow mode.
pub(super) struct Start {
    history: History,
    /// The count the target has as if its shadow decisions had been applied: what the newest
    /// one asked for, when this call and that decision are both shadow.
    shadow_replicas: Option<i32>,
}

impl Start {
    /// A shadow call after shadow decisions goes on from the count they asked for. A live
    /// call after shadow decisions starts afresh, as a new HPA does (its recommendations
    /// seeded with the current count): the shadow's scale events never happened, and its
    /// stabilization window was kept against a count the target never ran. A shadow call
    /// after live decisions starts from them and the count the caller reports.
    pub(super) fn of(state: Option<TargetState>, shadow: bool) -> Start {
        match state {
            Some(t) if t.shadow_replicas.is_none() || shadow => Start {
                history: t.state.history,
                shadow_replicas: t.shadow_replicas.filter(|_| shadow),
            },
            _ => Start {
                history: History::default(),
                shadow_replicas: None,
            },
        }
    }
}

/// A converted Recommend with what the server adds to it: the settings in force (its
/// overrides over the server's flags), the policy it used, the group its target is in.
pub(super) struct Call {
    pub(super) input: RecommendInput,
    pub(super) settings: Settings,
    pub(super) policy: Option<PolicyRef>,
    pub(super) group: Option<String>,
    /// The decision's time is the request's (`--trust-request-time`).
    pub(super) time_from_request: bool,
    /// The history's pruning horizon (`--history-retention-secs`).
    pub(super) retention: Duration,
}

impl Call {
    /// The instant the decision is made at. The server's clock is read under the target's
    /// lock: concurrent calls on one target then evaluate and commit in the order of their
    /// evaluation times, so the decision log (kept in commit order, as runs) is also in time
    /// order. A time from the request (`--trust-request-time`) is the caller's to order.
    pub(super) fn now(&self) -> Time {
        if self.time_from_request {
            self.input.now
        } else {
            clock::hpa_now().max(self.input.now)
        }
    }

    /// Steps 1 to 3 on what was loaded for the target (and its group): the write, and whether
    /// the target is new.
    pub(super) fn decide(
        &self,
        evaluate: Evaluate,
        (state, group): (Option<TargetState>, GroupRead),
        now: Time,
    ) -> Result<(HpaWrite, bool), ApiError> {
        let new_target = state.is_none();
        let start = Start::of(state, self.input.shadow);
        let shadowed = start.shadow_replicas.map(|n| {
            let mut o = self.input.observation.clone();
            o.current_replicas = n;
            o.status_replicas = Some(n);
            o
        });
        let observation = shadowed.as_ref().unwrap_or(&self.input.observation);
        let spec = &self.input.spec;
        let decide = |budget: Option<&Allocation>| {
            evaluate(
                &self.settings,
                spec,
                observation,
                &start.history,
                now,
                budget,
            )
        };
        let (evaluation, group) = match (group, &self.group) {
            (Some((mut def, revision)), Some(name)) => {
                let key = self.input.target_key.as_str();
                if !def.ledger.admits(key) {
                    return Err(ApiError::ResourceExhausted {
                        field: "target_key".to_owned(),
                        message: format!(
                            "scaling group {name:?} has {} members, the most a group may",
                            hpa::budget::MAX_MEMBERS
                        ),
                    });
                }
                let units = def.units_of(key);
                let current = observation.current_replicas;
                let min = engine(|| hpa::schedule::min_replicas_at(spec, now))?;
                // The capacity its schedules give now; the stored capacity stays the base.
                let base = def.ledger.capacity;
                def.ledger.capacity = super::convert::fleet::capacity_at(&def, now).0;
                let decided = engine(|| {
                    hpa::decide_in_group(&mut def.ledger, name, key, units, current, min, decide)
                });
                def.ledger.capacity = base;
                let (evaluation, changed) = decided?;
                (evaluation, changed.then_some((def, revision)))
            }
            // Not in a group, or the group deleted since it was looked up: the plain decision.
            _ => (engine(|| decide(None))?, None),
        };
        Ok((self.record(evaluation, now, group), new_target))
    }

    /// Step 3: the pruned history and the decision's log entry with its inputs.
    fn record(&self, evaluation: Evaluation, now: Time, group: GroupRead) -> HpaWrite {
        let mut history = evaluation.history;
        prune::prune(&mut history, now, self.retention);
        let mut entry =
            DecisionEntry::single(now, evaluation.decision, &self.input.spec, &self.settings);
        if let Some(inputs) = entry.inputs.as_mut() {
            inputs.policy.clone_from(&self.policy);
            inputs.shadow = self.input.shadow;
        }
        HpaWrite {
            history,
            entry,
            group,
        }
    }

    /// Step 4: the decision counted, and the target's gauges when it was recorded.
    pub(super) fn observe(&self, entry: &DecisionEntry, new_target: bool) {
        let decision = &entry.decision;
        let span = Span::current();
        span.record("decision.current", decision.current_replicas);
        span.record("decision.desired", decision.desired_replicas);
        span.record("decision.path", decision.path.as_str());
        let reason = |condition_type: ConditionType| {
            decision
                .conditions
                .iter()
                .find(|c| c.condition_type == condition_type)
                .map_or("None", |c| c.reason.as_str())
        };
        let input = &self.input;
        // A dry run or a shadow decision is a decision but rescales nothing.
        crate::metrics::hpa_decision(
            decision.path.as_str(),
            reason(ConditionType::AbleToScale),
            reason(ConditionType::ScalingLimited),
            (!input.dry_run
                && !input.shadow
                && decision.desired_replicas != decision.current_replicas)
                .then_some(decision.desired_replicas > decision.current_replicas),
        );
        if let Some(report) = decision.predictive.as_deref() {
            crate::metrics::predictive_decision(report.mode.as_str(), report.reason.as_str());
        }
        if input.dry_run {
            return;
        }
        if new_target {
            crate::metrics::target_added();
        }
        let limited = decision
            .conditions
            .iter()
            .any(|c| c.condition_type == ConditionType::ScalingLimited && c.status);
        crate::metrics::target_decision(
            &input.target_key,
            decision.current_replicas,
            decision.desired_replicas,
            limited,
            decision
                .predictive
                .as_deref()
                .map(|p| (p.forecast_replicas, p.wape)),
        );
    }

    /// Step 4: the response, with the warnings derived from the request and the decision.
    pub(super) fn response(&self, entry: &DecisionEntry, now: Time) -> RecommendResponse {
        let input = &self.input;
        let decision = &entry.decision;
        let mut response =
            convert::recommend_response(decision, &input.spec.metrics, now, !input.dry_run);
        response.shadow = input.shadow;
        response.policy = self.policy.as_ref().map(convert::policy_ref);
        response.warnings = convert::recommend_warnings(
            &input.spec,
            &input.observation,
            &self.settings,
            decision,
            now,
        );
        response
    }
}

/// Runs the engine, a panic in it becoming INTERNAL and its refusal INVALID_ARGUMENT.
pub(super) fn engine<T>(run: impl FnOnce() -> Result<T, InvalidInput>) -> Result<T, ApiError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(run))
        .map_err(|_| ApiError::Internal("the HPA engine panicked".to_owned()))?
        .map_err(convert::engine_invalid)
}
