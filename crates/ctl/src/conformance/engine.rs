//! The engine executor: every case through the pure engine, in-process.

use std::path::Path;

use super::{
    Executor, Verdict,
    hpa::{HpaCase, HpaStep, StepInput, StepRun, pod_groups_for},
    vpa::VpaCase,
};
use autoscaled_engine::{
    hpa::history::History,
    hpa::{self, Evaluation},
};

/// Runs HPA steps through `engine::hpa` (carrying the returned history forward, as the
/// controller's stored state would) and VPA cases through `engine::vpa`.
#[derive(Debug, Default)]
pub(crate) struct EngineExecutor {
    history: History,
}

impl EngineExecutor {
    /// One HPA step through the engine (`evaluate`, or `normalize_only` for a prenormalized
    /// step), from `history`.
    pub(crate) fn evaluate(
        case: &HpaCase,
        step: &HpaStep,
        history: &History,
    ) -> Result<Evaluation, String> {
        let result = match &step.input {
            StepInput::Observe(observation) => {
                hpa::evaluate(&case.settings, &case.spec, observation, history, step.now)
            }
            StepInput::Prenormalized {
                current_replicas,
                prenormalized,
                ..
            } => hpa::normalize_only(
                &case.settings,
                &case.spec,
                *current_replicas,
                *prenormalized,
                history,
                step.now,
                hpa::Replayed::default(),
            ),
        };
        result.map_err(|e| format!("step {}: rejected as invalid input: {e}", step.index))
    }
}

impl Executor for EngineExecutor {
    fn begin_hpa(&mut self, _file: &Path, case: &HpaCase) -> Result<(), Verdict> {
        self.history = case.history.clone();
        Ok(())
    }

    fn hpa_step(&mut self, case: &HpaCase, step: &HpaStep) -> Result<StepRun, Verdict> {
        let evaluation =
            EngineExecutor::evaluate(case, step, &self.history).map_err(Verdict::Failed)?;
        self.history = evaluation.history.clone();
        let pod_groups = step
            .expect
            .pod_groups
            .as_ref()
            .map(|g| pod_groups_for(case, step, &g.metric));
        Ok(StepRun {
            decision: evaluation.decision,
            history: Some(evaluation.history),
            pod_groups,
        })
    }

    fn run_vpa(&mut self, case: &VpaCase) -> Result<(), Verdict> {
        case.run().map_err(Verdict::Failed)
    }
}
