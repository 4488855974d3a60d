//! Pruning of recommendations and scale events that no evaluation can reach any more.
//!
//! # The rule
//!
//! Before a state is stored, every recommendation and every scale event whose time is
//! strictly older than `now - retention` is removed; everything else is kept **in storage
//! order**, and a recommendation list that becomes empty stays `Some(vec![])`, never `None`.
//!
//! `retention` (config `history_retention_secs`, default and minimum 3600 s) is at least
//! every window or period any accepted request can use:
//! * behavior stabilization windows: at most 3600 s (Kubernetes' API validation; `api::convert`
//!   enforces it);
//! * policy periods: at most 1800 s (same);
//! * the legacy downscale window (`downscale_stabilization`, server default or per-target
//!   override): `config` and `api::convert` reject values above `retention`.
//!
//! # Why no decision changes
//!
//! * Upstream reads recommendations only through `rec.timestamp.After(cutoff)` with
//!   `cutoff = now - window` (`stabilizeRecommendationWithBehaviors`, `stabilizeRecommendation`),
//!   and scale events through `rec.timestamp.After(now - period)`
//!   (`getReplicasChangePerPeriod`). A removed entry is older than every such cutoff, now and
//!   later (time only moves on), so it never enters a min, max or sum.
//! * Kubernetes reuses slots instead of deleting: the new recommendation overwrites the last
//!   entry older than both windows, and a new scale event overwrites the first `outdated` one.
//!   Pruning only changes *where* the new entry lands (appended instead of overwriting a
//!   removed slot); the set of reachable entries is the same, and min, max and sum do not
//!   depend on order. Kept entries keep their relative order, so the stored list still reads
//!   in Kubernetes' storage order.
//! * `None` means "no recommendation recorded yet", which makes upstream's
//!   `recordInitialRecommendation` add `(current, now)`. An emptied list must not turn into
//!   that, so it stays `Some`.
//!
//! Entries dated after `now` (a replay with `--trust-request-time` that goes back in time) are
//! kept.

use std::time::Duration;

use crate::engine::{history::History, time::Time};

/// Removes what is older than `now - retention` (see the module docs for why that is safe).
pub fn prune(history: &mut History, now: Time, retention: Duration) {
    let horizon = now.minus(retention);
    if let Some(recommendations) = &mut history.recommendations {
        recommendations.retain(|r| r.time >= horizon);
    }
    history.scale_up_events.retain(|e| e.time >= horizon);
    history.scale_down_events.retain(|e| e.time >= horizon);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::history::{Recommendation, ScaleEvent};

    const HOUR: Duration = Duration::from_secs(3600);

    fn rec(replicas: i32, secs: i64) -> Recommendation {
        Recommendation {
            replicas,
            time: Time::from_unix_secs(secs),
        }
    }

    fn event(change: i32, secs: i64, outdated: bool) -> ScaleEvent {
        ScaleEvent {
            replica_change: change,
            time: Time::from_unix_secs(secs),
            outdated,
        }
    }

    #[test]
    fn removes_only_entries_older_than_retention_and_keeps_storage_order() {
        let now = Time::from_unix_secs(10_000);
        // Storage order, not time order (a reused slot holds the newest entry first).
        let mut h = History {
            recommendations: Some(vec![
                rec(9, 9_990),
                rec(3, 1_000),
                rec(5, 6_400),
                rec(4, 6_399),
            ]),
            scale_up_events: vec![event(2, 6_399, true), event(1, 9_000, false)],
            scale_down_events: vec![event(1, 100, true)],
            extensions: None,
        };
        prune(&mut h, now, HOUR);
        // 6_400 == now - 3600 is exactly at the horizon: kept (upstream's After(cutoff) would
        // exclude it, so keeping it is the conservative side).
        assert_eq!(h.recommendations, Some(vec![rec(9, 9_990), rec(5, 6_400)]));
        assert_eq!(h.scale_up_events, vec![event(1, 9_000, false)]);
        assert_eq!(h.scale_down_events, vec![]);
    }

    #[test]
    fn an_emptied_recommendation_list_stays_some() {
        let mut h = History {
            recommendations: Some(vec![rec(3, 0)]),
            ..History::default()
        };
        prune(&mut h, Time::from_unix_secs(100_000), HOUR);
        assert_eq!(h.recommendations, Some(vec![]));

        let mut none = History::default();
        prune(&mut none, Time::from_unix_secs(100_000), HOUR);
        assert_eq!(none.recommendations, None);
    }

    #[test]
    fn entries_within_the_longest_window_are_never_removed() {
        // Every entry inside [now - 3600 s, now] survives, whatever its age within the hour:
        // the longest stabilization window a valid spec can have still sees it.
        let now = Time::from_unix_secs(50_000);
        let recs: Vec<_> = (0..=3600)
            .step_by(60)
            .map(|age| rec(1, 50_000 - age))
            .collect();
        let mut h = History {
            recommendations: Some(recs.clone()),
            ..History::default()
        };
        prune(&mut h, now, HOUR);
        assert_eq!(h.recommendations, Some(recs));
    }
}
