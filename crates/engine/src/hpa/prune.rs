//! Pruning of recommendations and scale events that no evaluation can reach any more.
//!
//! A pure function of the history, `now` and the retention, so it lives with the history it
//! trims: the server applies it before every write (`api::hpa`), and the what-if replay
//! ([`crate::whatif`]) applies it to the simulated run's history after every step, so that a replay carries exactly the history the server would have stored.
//!
//! # The rule
//!
//! Before a state is stored, every recommendation and every scale event whose time is
//! strictly older than `now - retention` is removed; everything else is kept **in storage
//! order**, and a recommendation list that becomes empty stays `Some(vec![])`, never `None`.
//!
//! `retention` (config `history_retention_secs`, default and minimum 3600 s) is at least
//! every window or period any accepted request can use:
//! * behavior stabilization windows: at most 3600 s (Kubernetes' API validation; the server's
//!   request conversion, `api::convert`, enforces it);
//! * policy periods: at most 1800 s (same);
//! * the legacy downscale window (`downscale_stabilization`, server default or per-target
//!   override): the server's `config` and `api::convert` reject values above `retention`.
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
//!
//! # Bounded state at any call rate
//!
//! Pruning by age bounds the state by what one hour of calls leaves behind: at Kubernetes'
//! cadence (one call per 15 s) at most about 240 recommendations and as many scale events per
//! direction, but a caller that calls one target hundreds of times a second would keep
//! hundreds of thousands. Above [`MAX_RECOMMENDATIONS`] recommendations, or
//! [`MAX_SCALE_EVENTS`] scale events of one direction, [`bound`] shrinks the list. Below those
//! sizes nothing changes, so at Kubernetes' cadence the stored state is exactly upstream's.
//!
//! **Recommendations, exactly** ([`coalesce_recommendations`]). Every reader of a
//! recommendation asks "is it inside a window that ends now": `rec.time > now - window`
//! (`stabilizeRecommendationWithBehaviors`) or `!rec.time.Before(now - window)`
//! (`stabilizeRecommendation`); a window has no upper end (an entry dated after `now` always
//! counts). So any window that contains a recommendation `o` contains every recommendation at
//! least as new as `o`, and `o` is redundant for every max and every min over any window, with
//! any window length, when the newer ones include one `>= o.replicas` and one `<=
//! o.replicas` (the same one when equal). Removing the redundant ones keeps the *strict records*:
//! each kept recommendation is above every newer one or below every newer one.
//!
//! Removing an entry can change one other thing: which slot the next evaluation reuses
//! (upstream overwrites the last entry older than every current window, and so does the
//! engine). Entries older than every current window take part in no max or min while the
//! windows stay as they are and time moves forward, so the decisions stay exact; the property
//! test `bounded_state_keeps_decisions` checks it against the unbounded engine. When a target's
//! windows are lengthened, or a caller with `--trust-request-time` goes back in time, entries
//! older than the previous window can differ from the unbounded engine's (upstream's own list
//! is then an accident of its slot reuse, too).
//!
//! The strict records can still be many when the proposal moves in one direction through
//! many values within the hour. Above [`MAX_RECOMMENDATIONS`] after coalescing, the
//! recommendations are grouped into time buckets (1 s, doubled until the list fits): each
//! bucket keeps its highest and lowest value, both dated at the bucket's newest time, and the
//! result is coalesced again. **Deviation:** a value may then count up to one bucket width
//! longer than upstream would count it, on both sides, which only holds the stabilized value
//! where it was for that much longer (the conservative side of stabilization).
//!
//! **Scale events, bounded with a documented deviation** ([`merge_scale_events`]). Rate
//! limits read `Σ replica_change over events with time > now - period` for any period up to
//! 1800 s, so two events at different times cannot be merged without changing some sum. Above
//! [`MAX_SCALE_EVENTS`] events of one direction, events in the same time bucket (1 s, doubled
//! until the list fits) are merged into one with the summed change (saturating) at the
//! bucket's newest time. Events that were at least a bucket apart are untouched, so a target
//! rescaling at most once a second keeps exact limits up to 256 events per direction and
//! period. **Deviation:** beyond that, an event counts for up to one bucket width (at most
//! `retention / 128`, 28 s for the default hour) longer than its period.

use std::time::Duration;

use crate::{
    hpa::history::{History, Recommendation, ScaleEvent},
    time::Time,
};

/// Above this many recommendations, [`bound`] coalesces them. At one call per 15 s the
/// longest stabilization window (3600 s) holds 240, so Kubernetes' cadence never reaches it.
pub const MAX_RECOMMENDATIONS: usize = 256;

/// Above this many scale events of one direction, [`bound`] merges them (same reasoning: 240
/// events in an hour at one rescale per call every 15 s).
pub const MAX_SCALE_EVENTS: usize = 256;

/// Removes what is older than `now - retention` (see the module docs for why that is safe),
/// then bounds the lists ([`bound`] with [`MAX_RECOMMENDATIONS`] and [`MAX_SCALE_EVENTS`]).
pub fn prune(history: &mut History, now: Time, retention: Duration) {
    let horizon = now.minus(retention);
    if let Some(recommendations) = &mut history.recommendations {
        recommendations.retain(|r| r.time >= horizon);
    }
    history.scale_up_events.retain(|e| e.time >= horizon);
    history.scale_down_events.retain(|e| e.time >= horizon);
    bound(history, MAX_RECOMMENDATIONS, MAX_SCALE_EVENTS);
}

/// Shrinks lists longer than the limits (module docs: exact for recommendations, within one
/// bucket width for scale events). Lists at or below their limit are left as they are.
pub fn bound(history: &mut History, max_recommendations: usize, max_events: usize) {
    if let Some(recommendations) = &mut history.recommendations
        && recommendations.len() > max_recommendations
    {
        coalesce_recommendations(recommendations);
        let mut width = 1_000i64;
        while recommendations.len() > max_recommendations.max(2) && width < i64::MAX {
            bucket_recommendations(recommendations, width);
            coalesce_recommendations(recommendations);
            width = width.saturating_mul(2);
        }
    }
    for events in [&mut history.scale_up_events, &mut history.scale_down_events] {
        let mut width = 1_000i64;
        while events.len() > max_events.max(1) && width < i64::MAX {
            merge_scale_events(events, width);
            width = width.saturating_mul(2);
        }
    }
}

/// Removes every recommendation that no window can need (module docs): one for which entries
/// at least as new hold a value `>=` and a value `<=` it. The newest is always kept, so a
/// non-empty list stays non-empty; kept entries keep their storage order.
pub fn coalesce_recommendations(recommendations: &mut Vec<Recommendation>) {
    // Newest first; among equal times the later slot first (either order is exact: entries
    // with equal times are in exactly the same windows).
    let mut order: Vec<usize> = (0..recommendations.len()).collect();
    order
        .sort_unstable_by(|&a, &b| (recommendations[b].time, b).cmp(&(recommendations[a].time, a)));
    let mut keep = vec![false; recommendations.len()];
    let mut range: Option<(i32, i32)> = None;
    for i in order {
        let v = recommendations[i].replicas;
        match range {
            Some((lo, hi)) if lo <= v && v <= hi => {}
            _ => {
                keep[i] = true;
                range = Some(range.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))));
            }
        }
    }
    let mut flags = keep.into_iter();
    recommendations.retain(|_| flags.next().unwrap_or(true));
}

/// The bucket of a time: `floor(millis / width)`.
fn bucket(time: Time, width: i64) -> i64 {
    time.unix_millis().div_euclid(width.max(1))
}

/// Replaces the recommendations of each time bucket by its highest and lowest value, both at
/// the bucket's newest time, in the storage place of the bucket's newest entry.
fn bucket_recommendations(recommendations: &mut Vec<Recommendation>, width: i64) {
    use std::collections::BTreeMap;
    // bucket -> (newest time, slot of the newest, min, max)
    let mut buckets: BTreeMap<i64, (Time, usize, i32, i32)> = BTreeMap::new();
    for (i, r) in recommendations.iter().enumerate() {
        let b = buckets
            .entry(bucket(r.time, width))
            .or_insert((r.time, i, r.replicas, r.replicas));
        if r.time >= b.0 {
            b.0 = r.time;
            b.1 = i;
        }
        b.2 = b.2.min(r.replicas);
        b.3 = b.3.max(r.replicas);
    }
    let mut slots: Vec<(usize, Time, i32, i32)> = buckets
        .into_values()
        .map(|(t, i, lo, hi)| (i, t, lo, hi))
        .collect();
    slots.sort_unstable_by_key(|s| s.0);
    recommendations.clear();
    for (_, time, lo, hi) in slots {
        recommendations.push(Recommendation { replicas: hi, time });
        if lo != hi {
            recommendations.push(Recommendation { replicas: lo, time });
        }
    }
}

/// Merges the scale events of each time bucket into one: the summed change (saturating) at
/// the bucket's newest time, outdated only if all of them were, in the storage place of the
/// bucket's newest event.
pub fn merge_scale_events(events: &mut Vec<ScaleEvent>, width: i64) {
    use std::collections::BTreeMap;
    // bucket -> (slot of the newest, merged event)
    let mut buckets: BTreeMap<i64, (usize, ScaleEvent)> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        let b = buckets.entry(bucket(e.time, width)).or_insert((
            i,
            ScaleEvent {
                replica_change: 0,
                time: e.time,
                outdated: true,
            },
        ));
        if e.time >= b.1.time {
            b.1.time = e.time;
            b.0 = i;
        }
        b.1.replica_change = b.1.replica_change.saturating_add(e.replica_change);
        b.1.outdated &= e.outdated;
    }
    let mut merged: Vec<(usize, ScaleEvent)> = buckets.into_values().collect();
    merged.sort_unstable_by_key(|m| m.0);
    events.clear();
    events.extend(merged.into_iter().map(|m| m.1));
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn rec(replicas: i32, secs: i64) -> Recommendation {
        Recommendation::new(replicas, Time::from_unix_secs(secs))
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
            predictive: None,
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

/// The bound against the unbounded engine: same decisions over random call sequences at
/// high call rates, and lists that stay within the limits.
#[cfg(test)]
mod bounded_tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::{
        hpa,
        hpa::observation::Observation,
        hpa::settings::Settings,
        hpa::spec::{
            Behavior, HorizontalSpec, MetricSpec, MetricTarget, ScalingPolicy, ScalingPolicyType,
            ScalingRules, SelectPolicy,
        },
        test_support::external_load,
    };

    const HOUR: Duration = Duration::from_secs(3600);

    /// One call: how long after the previous one (ms; 0 = the same instant) and the load.
    type Call = (u16, u8);

    fn observation(current: i32, load: u8) -> Observation {
        external_load(current, i64::from(load) * 1000)
    }

    fn rules(window: i32, pods: i32, percent: i32, period: i32, min: bool) -> ScalingRules {
        ScalingRules {
            stabilization_window_seconds: Some(window),
            select_policy: Some(if min {
                SelectPolicy::Min
            } else {
                SelectPolicy::Max
            }),
            policies: Some(vec![
                ScalingPolicy {
                    policy_type: ScalingPolicyType::Pods,
                    value: pods,
                    period_seconds: period,
                },
                ScalingPolicy {
                    policy_type: ScalingPolicyType::Percent,
                    value: percent,
                    period_seconds: period * 2,
                },
            ]),
            tolerance: None,
        }
    }

    fn any_spec() -> impl Strategy<Value = HorizontalSpec> {
        let behavior = (
            0..90i32,
            0..90i32,
            1..4i32,
            10..200i32,
            1..30i32,
            any::<bool>(),
        )
            .prop_map(|(up, down, pods, percent, period, min)| Behavior {
                scale_up: Some(rules(up, pods, percent, period, min)),
                scale_down: Some(rules(down, pods, percent, period, !min)),
            });
        proptest::option::of(behavior).prop_map(|behavior| HorizontalSpec {
            min_replicas: Some(1),
            max_replicas: 12,
            metrics: vec![MetricSpec::external("load", MetricTarget::value(10_000))],
            behavior,
            extensions: None,
            schedules: Vec::new(),
            predictive: None,
        })
    }

    fn calls() -> impl Strategy<Value = Vec<Call>> {
        // Up to 3 s apart, often the same instant or a few ms: hundreds of calls a second.
        proptest::collection::vec(
            (prop_oneof![Just(0u16), 0..20u16, 0..3000u16], 0..120u8),
            1..300,
        )
    }

    /// Runs the calls like a controller that applies each decision, bounding the stored
    /// history with `bound_history` after the usual pruning; returns the decisions and the
    /// largest list sizes seen.
    fn run(
        settings: &Settings,
        spec: &HorizontalSpec,
        calls: &[Call],
        bound_history: impl Fn(&mut History),
    ) -> (Vec<hpa::Decision>, usize, usize) {
        let mut now = Time::from_unix_secs(1_767_225_600);
        let mut history = History::default();
        let mut current = 3;
        let (mut recs, mut events) = (0, 0);
        let mut decisions = Vec::with_capacity(calls.len());
        for &(gap, load) in calls {
            now = now.plus(Duration::from_millis(u64::from(gap)));
            let evaluation =
                hpa::evaluate(settings, spec, &observation(current, load), &history, now)
                    .expect("valid input");
            history = evaluation.history;
            prune(&mut history, now, HOUR);
            bound_history(&mut history);
            recs = recs.max(history.recommendations.as_ref().map_or(0, Vec::len));
            events = events
                .max(history.scale_up_events.len())
                .max(history.scale_down_events.len());
            current = evaluation.decision.desired_replicas;
            decisions.push(evaluation.decision);
        }
        (decisions, recs, events)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Coalescing the recommendations after every call (the strongest use of the exact
        /// rule) decides exactly as the unbounded engine, on both paths, at any call rate.
        #[test]
        fn bounded_state_keeps_decisions(
            spec in any_spec(),
            window in 0..120u64,
            calls in calls(),
        ) {
            let settings = Settings {
                downscale_stabilization: Duration::from_secs(window),
                ..Settings::default()
            };
            let (unbounded, _, _) = run(&settings, &spec, &calls, |_| {});
            let (bounded, recs, _) = run(&settings, &spec, &calls, |h| {
                if let Some(r) = &mut h.recommendations {
                    coalesce_recommendations(r);
                }
            });
            prop_assert_eq!(unbounded, bounded);
            // The kept entries are strict records of values in 1..=12 and proposals up to
            // 12 x 12: far fewer than the calls.
            prop_assert!(recs <= 2 * 145, "{recs} recommendations kept");
        }

        /// `bound` keeps every list within its limit whatever the call sequence, and a
        /// non-empty recommendation list non-empty.
        #[test]
        fn bound_keeps_lists_within_limits(spec in any_spec(), calls in calls()) {
            let (decisions, recs, events) =
                run(&Settings::default(), &spec, &calls, |h| bound(h, 4, 3));
            prop_assert_eq!(decisions.len(), calls.len());
            prop_assert!(recs <= 4, "{recs} recommendations");
            prop_assert!(events <= 3, "{events} events");
        }
    }

    #[test]
    fn coalescing_keeps_strict_records_in_storage_order() {
        let rec = |replicas, secs| Recommendation {
            replicas,
            time: Time::from_unix_secs(secs),
        };
        // Storage order differs from time order (a reused slot holds the newest first).
        let mut r = vec![
            rec(5, 100),
            rec(7, 10),
            rec(5, 20),
            rec(3, 30),
            rec(6, 40),
            rec(4, 50),
            rec(4, 60),
        ];
        coalesce_recommendations(&mut r);
        // Newest first: 5@100 kept; 4@60 kept (below); 4@50 redundant (equal newer);
        // 6@40 kept (above); 3@30 kept (below); 5@20 redundant; 7@10 kept (above).
        assert_eq!(
            r,
            vec![rec(5, 100), rec(7, 10), rec(3, 30), rec(6, 40), rec(4, 60)]
        );
    }

    #[test]
    fn merging_scale_events_sums_within_a_bucket_and_keeps_others() {
        let event = |change, millis, outdated| ScaleEvent {
            replica_change: change,
            time: Time::from_unix_millis(millis),
            outdated,
        };
        let mut e = vec![
            event(1, 10_000, true),
            event(2, 10_500, false),
            event(4, 12_000, false),
            event(i32::MAX, 10_900, true),
        ];
        merge_scale_events(&mut e, 1_000);
        // The merged event takes the storage place of its newest member (slot 3).
        assert_eq!(
            e,
            vec![event(4, 12_000, false), event(i32::MAX, 10_900, false)]
        );
    }

    #[test]
    fn lists_at_the_limit_are_untouched() {
        let recs: Vec<_> = (0..MAX_RECOMMENDATIONS)
            .map(|i| Recommendation {
                replicas: 1,
                time: Time::from_unix_secs(i64::try_from(i).expect("small")),
            })
            .collect();
        let mut h = History {
            recommendations: Some(recs.clone()),
            ..History::default()
        };
        prune(&mut h, Time::from_unix_secs(100), HOUR);
        assert_eq!(h.recommendations, Some(recs));
    }
}
