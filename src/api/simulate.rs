//! What-if over the wire is autoscaled-wire's ([`autoscaled_wire::simulate`], re-exported
//! here); this module adds the server's side: a stored decision run as the engine replays it.

pub use autoscaled_wire::simulate::*;

use crate::{engine::whatif, store::DecisionEntry};

/// A stored decision run as the engine replays it. The pod group sizes are read through
/// [`DecisionEntry::pod_totals`], which knows the record formats.
pub(crate) fn logged_run(entry: DecisionEntry) -> whatif::LoggedRun {
    let pod_totals = (0..entry.decision.metrics.len())
        .map(|i| {
            let t = entry.pod_totals(i);
            whatif::PodTotals {
                ready: t.ready,
                unready: t.unready,
                missing: t.missing,
            }
        })
        .collect();
    whatif::LoggedRun {
        time: entry.time,
        first_time: entry.run.first_time,
        count: entry.run.count,
        decision: entry.decision,
        metrics: entry.metrics,
        inputs: entry.inputs.map(|i| whatif::LoggedInputs {
            min_replicas: i.min_replicas,
            max_replicas: i.max_replicas,
            behavior: i.behavior,
            settings: i.settings,
            schedules: i.schedules,
        }),
        pod_totals,
        readings: entry
            .readings
            .into_iter()
            .map(|r| whatif::LoggedReading {
                time: r.time,
                values: r.values,
            })
            .collect(),
    }
}
