//! `VpaTarget`: everything the recommender keeps for one VPA target, and the two calls the
//! service makes (record usage, recommend). Pure: every time is an argument.
//!
//! Upstream keys aggregations by namespace, container name and pod labels and merges them by
//! container name for each VPA (`AggregateStateByContainerName`); a target here is one VPA, so
//! the aggregations are kept per container name directly (the merge is a sum of the same
//! samples). Container instances (pod, container) keep their own ordering and memory window.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::aggregate::{AggregateContainerState, AggregateError, HistogramObserver};
use super::amount::{Resource, ResourceAmount};
use super::checkpoint::AggregateCheckpoint;
use super::container::ContainerState;
use super::histogram::HistogramError;
use super::policy::{AggregationPolicy, PodResourcePolicy};
use super::recommender::{
    ContainerInput, PodEstimators, RecommendedPodResources, post_process, recommend_pod,
};
use super::settings::VpaSettings;
use crate::time::Time;

/// Version of the serialized [`VpaTarget`] layout; bump on incompatible changes.
pub const VPA_TARGET_FORMAT_VERSION: u32 = 1;

/// One usage sample of one container instance (upstream `ContainerUsageSample`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageSample {
    /// Pod name.
    pub pod: String,
    /// Container name.
    pub container: String,
    /// CPU or memory.
    pub resource: Resource,
    /// Millicores (average over the metrics window) or bytes (working set).
    pub usage: ResourceAmount,
    /// `MeasureStart`.
    #[serde(with = "crate::time::serde_nanos")]
    pub at: Time,
}

/// An OOM kill of one container instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomEvent {
    /// Pod name.
    pub pod: String,
    /// Container name.
    pub container: String,
    /// Termination time.
    #[serde(with = "crate::time::serde_nanos")]
    pub at: Time,
    /// The container's memory request (or its reported usage), bytes.
    pub memory_bytes: ResourceAmount,
}

/// What the recommender observes, in the order it should be applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Observation {
    /// A usage sample.
    Usage(UsageSample),
    /// An OOM event.
    Oom(OomEvent),
}

/// Outcome counts of [`VpaTarget::record_samples`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IngestReport {
    /// Usage samples aggregated.
    pub accepted_samples: u64,
    /// Usage samples discarded (negative, duplicate or out of order), as upstream.
    pub discarded_samples: u64,
    /// OOM events recorded.
    pub accepted_oom_events: u64,
    /// OOM events discarded (too old).
    pub discarded_oom_events: u64,
}

/// Errors of [`VpaTarget`] operations.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum VpaTargetError {
    /// The checkpoint does not load.
    #[error("checkpoint: {0}")]
    Checkpoint(#[from] AggregateError),
    /// The restored state cannot be merged (different half-life than the stored state).
    #[error("checkpoint: cannot merge into the stored state: {0}")]
    Merge(HistogramError),
}

/// The recommender state of one VPA target.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VpaTarget {
    /// Aggregations by container name.
    pub aggregates: BTreeMap<String, AggregateContainerState>,
    /// Container instances: pod name → container name → state.
    pub containers: BTreeMap<String, BTreeMap<String, ContainerState>>,
}

impl VpaTarget {
    /// The aggregation of `container`, created (with `now` as its creation time) if new.
    pub fn aggregate_mut(
        &mut self,
        container: &str,
        settings: &VpaSettings,
        now: Time,
    ) -> &mut AggregateContainerState {
        if !self.aggregates.contains_key(container) {
            self.aggregates.insert(
                container.to_owned(),
                AggregateContainerState::new(settings, now),
            );
        }
        // Just inserted or already present.
        self.aggregates
            .get_mut(container)
            .expect("aggregate present")
    }

    /// Register a container instance that exists without samples yet (upstream adds an
    /// aggregation for every container of every matching pod; it takes part in the pod
    /// minimum split and gets a recommendation).
    pub fn observe_container(
        &mut self,
        pod: &str,
        container: &str,
        settings: &VpaSettings,
        now: Time,
    ) {
        self.aggregate_mut(container, settings, now);
        self.instance_mut(pod, container);
    }

    fn instance_mut(&mut self, pod: &str, container: &str) -> &mut ContainerState {
        if !self.containers.contains_key(pod) {
            self.containers.insert(pod.to_owned(), BTreeMap::new());
        }
        let pod_map = self.containers.get_mut(pod).expect("pod present");
        if !pod_map.contains_key(container) {
            pod_map.insert(container.to_owned(), ContainerState::default());
        }
        pod_map.get_mut(container).expect("container present")
    }

    /// Apply one observation; `obs` sees every histogram call. Returns whether it was
    /// accepted.
    pub fn record_observation(
        &mut self,
        observation: &Observation,
        policy: Option<&PodResourcePolicy>,
        settings: &VpaSettings,
        now: Time,
        obs: &mut impl HistogramObserver,
    ) -> bool {
        let (pod, container) = match observation {
            Observation::Usage(s) => (&s.pod, &s.container),
            Observation::Oom(o) => (&o.pod, &o.container),
        };
        let agg_policy =
            AggregationPolicy::resolve(settings, policy.and_then(|p| p.for_container(container)));
        // Split borrows: the instance map and the aggregate map are separate fields.
        if !self.aggregates.contains_key(container.as_str()) {
            self.aggregates.insert(
                container.clone(),
                AggregateContainerState::new(settings, now),
            );
        }
        self.instance_mut(pod, container);
        let (Some(aggregate), Some(instance)) = (
            self.aggregates.get_mut(container.as_str()),
            self.containers
                .get_mut(pod.as_str())
                .and_then(|m| m.get_mut(container.as_str())),
        ) else {
            return false;
        };
        match observation {
            Observation::Usage(s) => match s.resource {
                Resource::Cpu => instance.add_cpu_sample(aggregate, s.at, s.usage, obs),
                Resource::Memory => {
                    instance.add_memory_sample(aggregate, s.at, s.usage, false, &agg_policy, obs)
                }
            },
            Observation::Oom(o) => instance
                .record_oom(aggregate, o.at, o.memory_bytes, &agg_policy, obs)
                .is_ok(),
        }
    }

    /// Feed observations in order (upstream feeds a run's samples, then its OOM events).
    /// `now` is the creation time of aggregations this creates.
    pub fn record_samples(
        &mut self,
        observations: &[Observation],
        policy: Option<&PodResourcePolicy>,
        settings: &VpaSettings,
        now: Time,
    ) -> IngestReport {
        let mut report = IngestReport::default();
        for o in observations {
            let ok = self.record_observation(o, policy, settings, now, &mut ());
            let counter = match (o, ok) {
                (Observation::Usage(_), true) => &mut report.accepted_samples,
                (Observation::Usage(_), false) => &mut report.discarded_samples,
                (Observation::Oom(_), true) => &mut report.accepted_oom_events,
                (Observation::Oom(_), false) => &mut report.discarded_oom_events,
            };
            *counter += 1;
        }
        report
    }

    /// The recommendation for every container (none for `mode: Off`), rounded, then
    /// post-processed (integer CPU for `integer_cpu_containers` when the settings enable
    /// it, capping). Does not depend on the current time.
    pub fn recommend(
        &self,
        policy: Option<&PodResourcePolicy>,
        integer_cpu_containers: &[String],
        settings: &VpaSettings,
    ) -> RecommendedPodResources {
        self.recommend_with(
            &PodEstimators::from_settings(settings),
            policy,
            integer_cpu_containers,
            settings,
        )
    }

    /// As [`Self::recommend`] with explicit estimators.
    pub fn recommend_with(
        &self,
        estimators: &PodEstimators,
        policy: Option<&PodResourcePolicy>,
        integer_cpu_containers: &[String],
        settings: &VpaSettings,
    ) -> RecommendedPodResources {
        let inputs: Vec<ContainerInput<'_>> = self
            .aggregates
            .iter()
            .map(|(name, state)| ContainerInput {
                name,
                state,
                policy: AggregationPolicy::resolve(
                    settings,
                    policy.and_then(|p| p.for_container(name)),
                ),
            })
            .collect();
        let raw = recommend_pod(estimators, settings, &inputs);
        let integer: &[String] = if settings.cpu_integer_post_processor_enabled {
            integer_cpu_containers
        } else {
            &[]
        };
        post_process(
            Some(raw),
            policy,
            integer,
            &settings.container_recommendation_max_allowed,
        )
        .unwrap_or_default()
    }

    /// What the checkpoint writer saves at `now`: each aggregation minus the current-interval
    /// memory peak of every instance whose interval has not ended (`subtractCurrentContainerMemoryPeak`).
    pub fn checkpoint_view(&self, now: Time) -> BTreeMap<String, AggregateContainerState> {
        let mut view = self.aggregates.clone();
        for pod in self.containers.values() {
            for (name, instance) in pod {
                if let Some(agg) = view.get_mut(name) {
                    instance.subtract_current_memory_peak(agg, now, &mut ());
                }
            }
        }
        view
    }

    /// Upstream checkpoints (v3) of every container name at `now`.
    pub fn save_checkpoints(&self, now: Time) -> BTreeMap<String, AggregateCheckpoint> {
        self.checkpoint_view(now)
            .iter()
            .map(|(k, v)| (k.clone(), v.save_checkpoint()))
            .collect()
    }

    /// Restore a container's state from an upstream checkpoint (`setVpaCheckpoint`): the
    /// checkpoint is loaded into a fresh aggregation, which is then merged into the
    /// container's (all or nothing: on error nothing changes).
    pub fn load_checkpoint(
        &mut self,
        container: &str,
        checkpoint: &AggregateCheckpoint,
        settings: &VpaSettings,
        now: Time,
    ) -> Result<(), VpaTargetError> {
        let mut restored = AggregateContainerState::new(settings, now);
        restored.load_checkpoint(checkpoint)?;
        let mut merged = self
            .aggregates
            .get(container)
            .cloned()
            .unwrap_or_else(|| AggregateContainerState::new(settings, now));
        merged.merge(&restored).map_err(VpaTargetError::Merge)?;
        self.aggregates.insert(container.to_owned(), merged);
        Ok(())
    }

    /// Drop expired aggregations (`isExpired` with each container's window) and container
    /// instances whose latest sample is older than the window. Returns how many aggregations
    /// were removed.
    ///
    /// Dropping instances by time is ours: upstream keeps a `ContainerState` until the pod is
    /// deleted (`DeletePod`, from the pod lister), which pushed samples never say, so keeping
    /// every pod name ever seen would grow without bound under rollouts. The difference shows
    /// only when a pod name is silent for a whole window (8 days by default) and then sends
    /// again: its memory peak grid starts afresh from the new sample instead of continuing
    /// upstream's `WindowEnd` grid, as after a pod re-creation or a recommender restart
    /// upstream.
    pub fn garbage_collect(
        &mut self,
        policy: Option<&PodResourcePolicy>,
        settings: &VpaSettings,
        now: Time,
    ) -> usize {
        let before = self.aggregates.len();
        self.aggregates.retain(|name, agg| {
            let p =
                AggregationPolicy::resolve(settings, policy.and_then(|p| p.for_container(name)));
            !agg.is_expired(now, p.window_length_ns())
        });
        for pod in self.containers.values_mut() {
            pod.retain(|name, instance| {
                let p = AggregationPolicy::resolve(
                    settings,
                    policy.and_then(|p| p.for_container(name)),
                );
                let latest = instance
                    .last_cpu_sample_start
                    .max(instance.last_memory_sample_start);
                latest.is_some_and(|t| now.nanos_since(t) < p.window_length_ns())
            });
        }
        self.containers.retain(|_, pod| !pod.is_empty());
        before - self.aggregates.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vpa::amount::Resources;
    use crate::vpa::policy::{ContainerResourcePolicy, ContainerScalingMode};

    const T0: i64 = 1_704_067_200;

    fn usage(pod: &str, container: &str, resource: Resource, usage: i64, at_s: i64) -> Observation {
        Observation::Usage(UsageSample {
            pod: pod.into(),
            container: container.into(),
            resource,
            usage,
            at: Time::from_unix_seconds(T0 + at_s),
        })
    }

    #[test]
    fn pod_minimum_is_split_over_recommended_containers_and_off_is_dropped() {
        let settings = VpaSettings::default();
        let now = Time::from_unix_seconds(T0);
        let mut target = VpaTarget::default();
        for c in ["a", "b", "c"] {
            target.observe_container("p", c, &settings, now);
        }
        let policy = PodResourcePolicy {
            container_policies: vec![ContainerResourcePolicy {
                container_name: "c".into(),
                mode: Some(ContainerScalingMode::Off),
                ..Default::default()
            }],
        };
        let rec = target.recommend(Some(&policy), &[], &settings);
        let names: Vec<&str> = rec
            .containers
            .iter()
            .map(|c| c.container_name.as_str())
            .collect();
        assert_eq!(names, ["a", "b"]);
        // 25m and 250Mi split over two containers: 12m and 131072000 B.
        assert_eq!(rec.containers[0].target, Resources::new(12, 131_072_000));
        assert_eq!(
            rec.containers[1].upper_bound,
            Resources::new(12, 131_072_000)
        );
    }

    #[test]
    fn each_pod_contributes_its_own_memory_peak() {
        let settings = VpaSettings::default();
        let mut target = VpaTarget::default();
        let obs = [
            usage("p1", "app", Resource::Memory, 100_000_000, 0),
            usage("p2", "app", Resource::Memory, 300_000_000, 10),
            usage("p1", "app", Resource::Memory, 200_000_000, 20),
        ];
        let report = target.record_samples(&obs, None, &settings, Time::from_unix_seconds(T0));
        assert_eq!(report.accepted_samples, 3);
        let mem = &target.aggregates["app"].memory;
        // Two peaks of weight ~1 (p1's 100M was replaced by 200M): total ≈ 2, not 3.
        let total = mem.histogram().total_weight();
        assert!((1.9..2.1).contains(&total), "total weight {total}");
        assert_eq!(
            target.aggregates["app"].total_samples_count, 0,
            "memory samples are not counted"
        );
    }

    #[test]
    fn checkpoint_restore_merges_into_existing_state() {
        let settings = VpaSettings::default();
        let now = Time::from_unix_seconds(T0);
        let mut source = VpaTarget::default();
        let obs: Vec<Observation> = (0..100)
            .map(|i| usage("p", "app", Resource::Cpu, 500, i * 60))
            .collect();
        source.record_samples(&obs, None, &settings, now);
        let checkpoints = source.save_checkpoints(now);
        let mut restored = VpaTarget::default();
        restored
            .load_checkpoint("app", &checkpoints["app"], &settings, now)
            .unwrap();
        assert_eq!(restored.aggregates["app"].total_samples_count, 100);
        assert_eq!(
            restored.recommend(None, &[], &settings),
            source.recommend(None, &[], &settings)
        );
        let bad = AggregateCheckpoint {
            version: "v2".into(),
            ..Default::default()
        };
        assert!(
            restored
                .load_checkpoint("app", &bad, &settings, now)
                .is_err()
        );
        assert_eq!(
            restored.aggregates["app"].total_samples_count, 100,
            "failed load changes nothing"
        );
    }

    #[test]
    fn garbage_collection_drops_expired_state() {
        let settings = VpaSettings::default();
        let mut target = VpaTarget::default();
        target.record_samples(
            &[usage("p", "app", Resource::Cpu, 100, 0)],
            None,
            &settings,
            Time::from_unix_seconds(T0),
        );
        assert_eq!(
            target.garbage_collect(
                None,
                &settings,
                Time::from_unix_seconds(T0 + 8 * 86_400 - 1)
            ),
            0
        );
        assert_eq!(
            target.garbage_collect(None, &settings, Time::from_unix_seconds(T0 + 8 * 86_400)),
            1
        );
        assert!(target.aggregates.is_empty());
        assert!(target.containers.is_empty());
    }
}
