//! `ContainerState`: per-container-instance ordering and memory-window state
//! (`recommender/model/container.go`; specification sections 6.2–6.4).

use serde::{Deserialize, Serialize};

use super::aggregate::{AggregateContainerState, HistogramObserver, HistogramOp};
use super::amount::{ResourceAmount, memory_amount_from_bytes, scale_resource};
use super::policy::AggregationPolicy;
use crate::time::Time;

/// Why an OOM event was not recorded (upstream `RecordOOM` returns an error).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OomRejected {
    /// More than one aggregation interval before the latest memory sample.
    #[error("OOM event is too old")]
    TooOld,
    /// The resulting memory sample was discarded (negative amount).
    #[error("adding the OOM memory sample failed")]
    SampleRejected,
}

/// One container instance (one container of one pod).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerState {
    /// `LastCPUSampleStart`: CPU samples must be strictly later.
    #[serde(default, with = "crate::time::serde_nanos_option")]
    pub last_cpu_sample_start: Option<Time>,
    /// `memoryPeak`: largest usage sample in the current interval.
    pub memory_peak: ResourceAmount,
    /// `oomPeak`: largest OOM-derived sample in the current interval.
    pub oom_peak: ResourceAmount,
    /// `WindowEnd`: exclusive end of the current memory interval.
    #[serde(default, with = "crate::time::serde_nanos_option")]
    pub window_end: Option<Time>,
    /// `lastMemorySampleStart`: latest memory sample (OOM ones included).
    #[serde(default, with = "crate::time::serde_nanos_option")]
    pub last_memory_sample_start: Option<Time>,
}

impl ContainerState {
    /// `GetMaxMemoryPeak`: the current interval's peak, usage or OOM.
    pub(crate) fn max_memory_peak(&self) -> ResourceAmount {
        self.memory_peak.max(self.oom_peak)
    }

    /// `addCPUSample`: reject negative usage and samples not strictly after the previous
    /// one; otherwise forward to the aggregation.
    pub fn add_cpu_sample(
        &mut self,
        aggregate: &mut AggregateContainerState,
        at: Time,
        usage: ResourceAmount,
        obs: &mut impl HistogramObserver,
    ) -> bool {
        if usage < 0 || self.last_cpu_sample_start.is_some_and(|last| at <= last) {
            return false;
        }
        aggregate.add_cpu_sample(at, usage, obs);
        self.last_cpu_sample_start = Some(at);
        true
    }

    /// `addMemorySample`: keep one peak per aggregation interval, stamped with the
    /// interval's end. OOM samples skip the ordering check.
    pub fn add_memory_sample(
        &mut self,
        aggregate: &mut AggregateContainerState,
        at: Time,
        usage: ResourceAmount,
        is_oom: bool,
        policy: &AggregationPolicy,
        obs: &mut impl HistogramObserver,
    ) -> bool {
        if usage < 0 || (!is_oom && self.last_memory_sample_start.is_some_and(|last| at < last)) {
            return false;
        }
        self.last_memory_sample_start = Some(at);
        let window_end = *self.window_end.get_or_insert(at);
        let mut add_new_peak = false;
        let new_window_end = if at < window_end {
            let old = self.max_memory_peak();
            if old != 0 && usage > old {
                aggregate.memory_peak(HistogramOp::Subtract, window_end, old, obs);
                add_new_peak = true;
            }
            window_end
        } else {
            // `ts.Sub(WindowEnd).Truncate(interval) + interval`.
            let interval = policy.memory_aggregation_interval_ns;
            let elapsed = at.nanos_since(window_end);
            let shift = (elapsed - elapsed % interval).saturating_add(interval);
            self.memory_peak = 0;
            self.oom_peak = 0;
            add_new_peak = true;
            window_end.saturating_add_nanos(shift)
        };
        self.window_end = Some(new_window_end);
        if add_new_peak {
            aggregate.memory_peak(HistogramOp::Add, new_window_end, usage, obs);
            if is_oom {
                self.oom_peak = usage;
            } else {
                self.memory_peak = usage;
            }
        }
        true
    }

    /// `RecordOOM(t, requested)`: reject OOMs more than one interval before the latest memory
    /// sample (the rule after VPA 1.7.1, kubernetes/autoscaler#8548); otherwise record
    /// `max(used + min_bump, used × ratio)` with `used = max(request, usage peak)` (the OOM
    /// peak is ignored so repeated OOMs do not compound) as an OOM memory sample.
    pub fn record_oom(
        &mut self,
        aggregate: &mut AggregateContainerState,
        at: Time,
        requested_memory: ResourceAmount,
        policy: &AggregationPolicy,
        obs: &mut impl HistogramObserver,
    ) -> Result<(), OomRejected> {
        if let Some(last) = self.last_memory_sample_start
            && at < last.saturating_add_nanos(-policy.memory_aggregation_interval_ns)
        {
            return Err(OomRejected::TooOld);
        }
        let used = requested_memory.max(self.memory_peak);
        let needed = used
            .saturating_add(memory_amount_from_bytes(policy.oom_min_bump_up_bytes))
            .max(scale_resource(used, policy.oom_bump_up_ratio));
        if self.add_memory_sample(aggregate, at, needed, true, policy, obs) {
            Ok(())
        } else {
            Err(OomRejected::SampleRejected)
        }
    }

    /// `subtractCurrentContainerMemoryPeak` (checkpoint writer): if the current interval has
    /// not ended at `now`, remove its peak from `aggregate` so that a restart does not count
    /// two peaks for one interval.
    pub(crate) fn subtract_current_memory_peak(
        &self,
        aggregate: &mut AggregateContainerState,
        now: Time,
        obs: &mut impl HistogramObserver,
    ) {
        if let Some(end) = self.window_end
            && now < end
        {
            aggregate.memory_peak(HistogramOp::Subtract, end, self.max_memory_peak(), obs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vpa::aggregate::HistogramCall;
    use crate::vpa::settings::VpaSettings;

    #[test]
    fn zero_first_peak_blocks_the_interval() {
        // Specification section 14: a first sample of 0 bytes keeps the interval's peak at 0.
        let settings = VpaSettings::default();
        let policy = AggregationPolicy::resolve(&settings, None);
        let t0 = Time::from_unix_seconds(1_704_067_200);
        let mut agg = AggregateContainerState::new(&settings, t0);
        let mut c = ContainerState::default();
        let mut calls: Vec<HistogramCall> = Vec::new();
        assert!(c.add_memory_sample(&mut agg, t0, 0, false, &policy, &mut calls));
        assert!(c.add_memory_sample(
            &mut agg,
            t0.saturating_add_nanos(1),
            500,
            false,
            &policy,
            &mut calls
        ));
        assert_eq!(calls.len(), 1);
        assert_eq!((calls[0].op, calls[0].value), (HistogramOp::Add, 0.0));
        assert_eq!(c.memory_peak, 0);
    }

    #[test]
    fn equal_memory_timestamps_are_accepted_but_cpu_duplicates_are_not() {
        let settings = VpaSettings::default();
        let policy = AggregationPolicy::resolve(&settings, None);
        let t0 = Time::from_unix_seconds(1_704_067_200);
        let mut agg = AggregateContainerState::new(&settings, t0);
        let mut c = ContainerState::default();
        assert!(c.add_memory_sample(&mut agg, t0, 10, false, &policy, &mut ()));
        assert!(c.add_memory_sample(&mut agg, t0, 20, false, &policy, &mut ()));
        assert!(c.add_cpu_sample(&mut agg, t0, 10, &mut ()));
        assert!(!c.add_cpu_sample(&mut agg, t0, 20, &mut ()));
    }
}
