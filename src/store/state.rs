//! What the store keeps per target, for both autoscalers: the HPA's state ([`HpaState`]) and
//! decision log runs ([`DecisionEntry`]), the VPA's state ([`VpaState`], with its stored
//! [`VpaOverrides`]); and what it keeps for many targets: policies ([`StoredPolicy`]) and
//! scaling groups ([`ScalingGroupDef`], kept by `store::fleet`). The record codecs (`record::hpa`, `record::vpa`) translate these to
//! and from the versioned bytes; the record kinds (`hpa`, `vpa`) read and write them.

use std::{collections::BTreeMap, time::Duration};

use serde::{Deserialize, Serialize};

use crate::engine::{
    hpa::Decision,
    hpa::budget::Ledger,
    hpa::defaults::metrics_or_default,
    hpa::history::History,
    hpa::schedule::Schedule,
    hpa::settings::Settings,
    hpa::spec::{Behavior, HorizontalSpec, MetricSpec, MetricTargetType},
    time::Time,
    vpa::{
        amount::Resources,
        target::{VPA_TARGET_FORMAT_VERSION, VpaTarget},
    },
};

// === HPA ===

/// What is kept per target between evaluations.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HpaState {
    /// The controller's memory (recommendations, scale events), after pruning.
    pub history: History,
    /// Sequence number of the next decision record; keeps log keys unique even when two
    /// decisions carry the same evaluation time.
    pub next_seq: u64,
}

/// One run of the decision log: consecutive decisions that say the same thing
/// ([`DecisionEntry::same_outcome`]) stored once, with how many there were and when the first
/// was made; a decision that says something else starts a new run. The fields other than
/// [`run`](Self::run) are the LAST decision's of the run (its time, outcome and inputs), so a
/// replay of the run's last step is exact.
///
/// A fresh decision (as the API hands it to [`HpaStore::commit_after`](super::HpaStore::commit_after)) is a run of one:
/// [`DecisionEntry::single`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionEntry {
    /// The evaluation instant (`now`) of the run's last decision.
    #[serde(with = "crate::engine::time::serde_millis")]
    pub time: Time,
    /// The run's last decision as the engine made it (replicas, metric outcomes, conditions).
    pub decision: Decision,
    /// The spec's metrics, so that a logged metric outcome (which carries only an index) can
    /// be reported with its source type and name, and replayed.
    #[serde(default)]
    pub metrics: Vec<MetricSpec>,
    /// The rest of the spec and the controller settings in force at the last decision;
    /// `None` in records written before they were kept (format 1).
    #[serde(default)]
    pub inputs: Option<DecisionInputs>,
    /// Per entry of `decision.metrics` (same order): how many pods each group had. The stored
    /// record names at most `max_pod_names` pods per group (issue 8 item 6), so the name
    /// lists may be shorter than these totals. Empty: the totals are the lists' lengths
    /// (see [`DecisionEntry::pod_totals`]).
    #[serde(default)]
    pub pod_totals: Vec<PodTotals>,
    /// What each of the run's last `readings.len()` decisions observed, oldest first: all of
    /// them in runs written since readings are kept ([`MAX_RUN_DECISIONS`] at most), none in
    /// older records (whose run shows only its last decision's outcome).
    #[serde(default)]
    pub readings: Vec<Reading>,
    /// How many decisions the run holds and when the first was made.
    #[serde(default)]
    pub run: Run,
    /// The run's position in the target's log (assigned by the store; 0 in a fresh decision).
    #[serde(default)]
    pub seq: u64,
}

/// The spec (besides its metrics) and the controller settings of a decision: with the
/// metric outcomes, what a replay of the decision needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionInputs {
    /// The spec's `min_replicas`, as given (before defaulting).
    pub min_replicas: Option<i32>,
    /// The spec's `max_replicas`.
    pub max_replicas: i32,
    /// The spec's behavior; `None` chose the legacy normalization.
    pub behavior: Option<Behavior>,
    /// The server defaults with the target's overrides applied.
    pub settings: Settings,
    /// The policy the spec came from (`RecommendRequest.policy`), if any: a run holds
    /// decisions under one version of one policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyRef>,
    /// Decided in shadow mode (`RecommendRequest.shadow`): recorded as if applied, nothing
    /// scaled. A run holds decisions of one mode.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shadow: bool,
    /// The spec's schedules (`hpa::schedule`): a run holds decisions under one list, and a
    /// replay of the run under its own spec applies them again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schedules: Vec<Schedule>,
}

/// A policy as a decision used it: its name and version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyRef {
    /// The policy's name.
    pub name: String,
    /// Its version when the decision was made.
    pub version: u64,
}

/// The size of each pod group of one metric outcome.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodTotals {
    /// Pods whose sample counted (`groupPods`' ready count).
    pub ready: i32,
    /// Pods not yet ready (cpu only; counted at 0 % when scaling up).
    pub unready: u32,
    /// Pods without a sample (counted at 0 % of the target when scaling up, 100 % down).
    pub missing: u32,
    /// Pods left out entirely (being deleted, or failed).
    pub ignored: u32,
}

/// The most decisions one run holds: a decision that says the same as a run this long
/// starts a new run, so that every decision's readings are kept at a bounded cost per write
/// (the newest run's readings are rewritten with the state on each call). 40 is 10 minutes at
/// Kubernetes' 15 s sync period; with the default log of 100 runs, a steady target keeps
/// about 17 hours of decisions.
pub const MAX_RUN_DECISIONS: u64 = 40;

/// What one decision observed: its evaluation instant and, per metric of the spec (same
/// order), the current value it compared with the metric's target (`kubectl get hpa`'s
/// "current"): the average utilization in percent for a `Utilization` target, the average
/// or total value in milli-units for `AverageValue` and `Value`; `None` where the metric
/// failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reading {
    /// The decision's evaluation instant.
    #[serde(with = "crate::engine::time::serde_millis")]
    pub time: Time,
    /// Per metric of the spec.
    pub values: Vec<Option<i64>>,
}

impl Reading {
    /// The reading of `decision`, made at `time` against the spec's `metrics`.
    pub fn of(time: Time, decision: &Decision, metrics: &[MetricSpec]) -> Reading {
        // An empty list is Kubernetes' default metric, as the engine read it.
        let metrics = metrics_or_default(metrics);
        let mut values = vec![None; metrics.len()];
        for outcome in &decision.metrics {
            if let (Some(slot), Ok(p), Some(target)) = (
                values.get_mut(outcome.index),
                &outcome.result,
                metrics.get(outcome.index).and_then(MetricSpec::target),
            ) {
                *slot = p.current(target.target_type);
            }
        }
        Reading { time, values }
    }
}

/// A run's extent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// Decisions in the run (at least 1).
    pub count: u64,
    /// The evaluation instant of the run's first decision.
    #[serde(with = "crate::engine::time::serde_millis")]
    pub first_time: Time,
}

impl Default for Run {
    fn default() -> Self {
        Run {
            count: 1,
            first_time: Time::default(),
        }
    }
}

impl DecisionEntry {
    /// A fresh decision at `time`: a run of one.
    pub fn single(
        time: Time,
        decision: Decision,
        spec: &HorizontalSpec,
        settings: &Settings,
    ) -> Self {
        DecisionEntry {
            time,
            metrics: spec.metrics.clone(),
            inputs: Some(DecisionInputs {
                min_replicas: spec.min_replicas,
                max_replicas: spec.max_replicas,
                behavior: spec.behavior.clone(),
                settings: settings.clone(),
                policy: None,
                shadow: false,
                schedules: spec.schedules.clone(),
            }),
            pod_totals: Vec::new(),
            readings: vec![Reading::of(time, &decision, &spec.metrics)],
            run: Run {
                count: 1,
                first_time: time,
            },
            seq: 0,
            decision,
        }
    }

    /// Whether the run's decisions were made in shadow mode.
    pub fn shadow(&self) -> bool {
        self.inputs.as_ref().is_some_and(|i| i.shadow)
    }

    /// Whether `next` extends this run instead of starting a new one: it says the same thing
    /// ([`Self::same_outcome`]) under the same spec, settings and mode (so a run has one spec,
    /// which the log stores once for runs in a row: `record::hpa::closed_run_to_record`), and
    /// the run has room ([`MAX_RUN_DECISIONS`]).
    pub fn extends_with(&self, next: &DecisionEntry) -> bool {
        self.run.count < MAX_RUN_DECISIONS
            && self.same_outcome(next)
            && self.metrics == next.metrics
            && self.inputs == next.inputs
    }

    /// The run's last decision alone, as a fresh decision (its reading only, a run of one
    /// at its time): what an amended copy of that decision starts from.
    pub fn last_alone(mut self) -> DecisionEntry {
        let earlier = self.readings.len().saturating_sub(1);
        self.readings.drain(..earlier);
        self.run = Run {
            count: 1,
            first_time: self.time,
        };
        self
    }

    /// This run extended by `next` (a fresh decision that [`Self::extends_with`] accepted):
    /// `next`'s fields, this run's position, one more decision, and `next`'s readings after
    /// this run's.
    pub fn extended_by(&self, next: &DecisionEntry) -> DecisionEntry {
        let mut readings = self.readings.clone();
        readings.extend(next.readings.iter().cloned());
        DecisionEntry {
            readings,
            run: Run {
                count: self.run.count.saturating_add(1),
                first_time: self.run.first_time,
            },
            seq: self.seq,
            ..next.clone()
        }
    }

    /// The target type of the spec's metric `index` as the engine read it (an empty list is
    /// Kubernetes' default metric); `None` for an unknown source type.
    pub fn metric_target_type(&self, index: usize) -> Option<MetricTargetType> {
        Some(
            metrics_or_default(&self.metrics)
                .get(index)?
                .target()?
                .target_type,
        )
    }

    /// The group sizes of `decision.metrics[i]` (zeros when it has no pod groups).
    pub fn pod_totals(&self, i: usize) -> PodTotals {
        if let Some(t) = self.pod_totals.get(i) {
            return *t;
        }
        let count = |v: &Vec<String>| u32::try_from(v.len()).unwrap_or(u32::MAX);
        self.decision
            .metrics
            .get(i)
            .and_then(|m| m.pod_groups.as_ref())
            .map_or_else(PodTotals::default, |g| PodTotals {
                ready: g.ready_count,
                unready: count(&g.unready),
                missing: count(&g.missing),
                ignored: count(&g.ignored),
            })
    }

    /// Whether `other` says the same thing as this entry (the outcome part of
    /// [`Self::extends_with`]): same current and desired replicas, same path, same conditions
    /// (type, status, reason) and the same per-metric proposals (replicas, or failure reason).
    /// What differs otherwise (times, pod names, messages) is the last decision's in the run;
    /// the current values are each decision's reading.
    pub fn same_outcome(&self, other: &DecisionEntry) -> bool {
        let (a, b) = (&self.decision, &other.decision);
        a.current_replicas == b.current_replicas
            && a.desired_replicas == b.desired_replicas
            && a.path == b.path
            && a.conditions.len() == b.conditions.len()
            && a.conditions.iter().zip(&b.conditions).all(|(x, y)| {
                x.condition_type == y.condition_type && x.status == y.status && x.reason == y.reason
            })
            && a.metrics.len() == b.metrics.len()
            && a.metrics.iter().zip(&b.metrics).all(|(x, y)| {
                x.index == y.index
                    && match (&x.result, &y.result) {
                        (Ok(p), Ok(q)) => p.replicas == q.replicas,
                        (Err(e), Err(f)) => e.reason == f.reason,
                        _ => false,
                    }
            })
    }
}

// === VPA ===

/// Overrides of the recommender's flags
/// ([`VpaSettings`](crate::engine::vpa::settings::VpaSettings)); `None` keeps the lower layer's
/// value (server default, or the stored override for a per-call layer). Stored with the
/// target (the last RecordUsage that carried settings); how the layers combine is API
/// policy (`api::overrides`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct VpaOverrides {
    /// Overrides `--target-cpu-percentile`.
    pub target_cpu_percentile: Option<f64>,
    /// Overrides `--target-memory-percentile`.
    pub target_memory_percentile: Option<f64>,
    /// Overrides `--recommendation-lower-bound-cpu-percentile`.
    pub lower_bound_cpu_percentile: Option<f64>,
    /// Overrides `--recommendation-lower-bound-memory-percentile`.
    pub lower_bound_memory_percentile: Option<f64>,
    /// Overrides `--recommendation-upper-bound-cpu-percentile`.
    pub upper_bound_cpu_percentile: Option<f64>,
    /// Overrides `--recommendation-upper-bound-memory-percentile`.
    pub upper_bound_memory_percentile: Option<f64>,
    /// Overrides `--recommendation-margin-fraction`.
    pub safety_margin_fraction: Option<f64>,
    /// Overrides `--pod-recommendation-min-cpu-millicores`.
    pub pod_min_cpu_millicores: Option<f64>,
    /// Overrides `--pod-recommendation-min-memory-mb`.
    pub pod_min_memory_mb: Option<f64>,
    /// Overrides `--confidence-interval-cpu`.
    pub confidence_interval_cpu: Option<Duration>,
    /// Overrides `--confidence-interval-memory`.
    pub confidence_interval_memory: Option<Duration>,
    /// Overrides `--cpu-histogram-decay-half-life`.
    pub cpu_histogram_decay_half_life: Option<Duration>,
    /// Overrides `--memory-histogram-decay-half-life`.
    pub memory_histogram_decay_half_life: Option<Duration>,
    /// Overrides `--memory-aggregation-interval`.
    pub memory_aggregation_interval: Option<Duration>,
    /// Overrides `--memory-aggregation-interval-count`.
    pub memory_aggregation_interval_count: Option<i64>,
    /// Overrides `--oom-bump-up-ratio`.
    pub oom_bump_up_ratio: Option<f64>,
    /// Overrides `--oom-min-bump-up-bytes`.
    pub oom_min_bump_up_bytes: Option<f64>,
    /// Overrides `--round-cpu-millicores`.
    pub round_cpu_millicores: Option<i64>,
    /// Overrides `--round-memory-bytes`.
    pub round_memory_bytes: Option<i64>,
    /// Replaces the lower layer's maximum as a whole when set.
    pub container_recommendation_max_allowed: Option<Resources>,
    /// Overrides `--cpu-integer-post-processor-enabled`.
    pub cpu_integer_post_processor_enabled: Option<bool>,
}

/// What is kept per target on the vertical side.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VpaState {
    /// [`VPA_TARGET_FORMAT_VERSION`] of the engine that wrote `target`.
    pub format: u32,
    /// The target's stored overrides (the last RecordUsage that carried settings).
    pub overrides: VpaOverrides,
    /// The recommender's state.
    pub target: VpaTarget,
}

impl VpaState {
    /// An empty state in the current format.
    pub fn new() -> Self {
        VpaState {
            format: VPA_TARGET_FORMAT_VERSION,
            ..VpaState::default()
        }
    }
}

/// A stored policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredPolicy {
    /// 1 when created, one more with each change.
    pub version: u64,
    /// When it was last put.
    pub update_time: Time,
    /// The API's `HorizontalSpec`, encoded as the client put it (a partial spec that each
    /// call's own spec is merged over: `api::policy`).
    pub horizontal_spec: Vec<u8>,
    /// The identity that put it, with an authorization file (the per-identity limits count
    /// its policies).
    pub owner: Option<String>,
}

/// A stored scaling group: its definition and its ledger.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScalingGroupDef {
    /// 1 when created, one more with each change of the definition (not of the ledger).
    pub version: u64,
    /// When the definition was last put.
    pub update_time: Time,
    /// Units one replica weighs unless `member_units` says otherwise.
    pub units_per_replica: i64,
    /// Units per replica by member key.
    pub member_units: BTreeMap<String, i64>,
    /// Members by key prefix.
    pub member_prefixes: Vec<String>,
    /// Members by the policy their Recommend names.
    pub member_policies: Vec<String>,
    /// Members by key.
    pub member_keys: Vec<String>,
    /// The capacity and what each member holds.
    pub ledger: Ledger,
    /// `Some`: only targets under these key prefixes are members, whatever selects them (the
    /// `configure` rights of whoever put the group); `None`: no restriction (no authorization
    /// file).
    pub scope: Option<Vec<String>>,
    /// The identity that put it, with an authorization file (the per-identity limits count
    /// its groups).
    pub owner: Option<String>,
    /// Windows that move the capacity by the clock (`min_replicas` / `max_replicas` hold the
    /// capacity's floor and ceiling, in units: `engine::hpa::schedule::capacity_in_force`).
    pub capacity_schedules: Vec<crate::engine::hpa::schedule::Schedule>,
}

impl ScalingGroupDef {
    /// Whether a target with `key`, naming `policy` (empty: none), is a member.
    pub fn selects(&self, key: &str, policy: &str) -> bool {
        if let Some(scope) = &self.scope
            && !scope.iter().any(|p| key.starts_with(p.as_str()))
        {
            return false;
        }
        self.member_keys.iter().any(|k| k == key)
            || self
                .member_prefixes
                .iter()
                .any(|p| key.starts_with(p.as_str()))
            || (!policy.is_empty() && self.member_policies.iter().any(|p| p == policy))
    }

    /// The bytes of the definition (its name and what it selects), for the per-identity
    /// limit: what every replica's index of the groups holds of it.
    pub fn definition_bytes(&self, name: &str) -> usize {
        name.len()
            + self.member_keys.iter().map(String::len).sum::<usize>()
            + self.member_prefixes.iter().map(String::len).sum::<usize>()
            + self.member_policies.iter().map(String::len).sum::<usize>()
            + self.member_units.keys().map(|k| k.len() + 8).sum::<usize>()
            + self.scope.iter().flatten().map(String::len).sum::<usize>()
    }

    /// Units one replica of `key` weighs.
    pub fn units_of(&self, key: &str) -> i64 {
        self.member_units
            .get(key)
            .copied()
            .unwrap_or(self.units_per_replica)
            .max(1)
    }
}
