//! Normalization of the metric proposal (`horizontal.go`: `normalizeDesiredReplicas*`,
//! stabilization, rate limits) and the state it keeps (recommendations, scale events).
//!
//! Upstream reads `time.Now()` inside each function; here `now` is an argument, so one
//! reconciliation sees exactly one instant. Comparisons follow the algorithm document,
//! section 10: behavior windows and policy periods count entries strictly after the cutoff,
//! the legacy window keeps an entry exactly at its cutoff, and an event is outdated strictly
//! before its cutoff.
//!
//! Counts are `i32` as in Kubernetes, but intermediate sums are done in `i64` and saturated
//! back, so no input overflows (Go would wrap).

use crate::{
    hpa::condition::{Condition, ConditionReason, ConditionType},
    hpa::history::{History, Recommendation, ScaleEvent},
    hpa::settings::Settings,
    hpa::spec::{ScalingPolicy, ScalingPolicyType, SelectPolicy},
    time::Time,
};

use super::defaults::{CompletedBehavior, CompletedRules};

/// Kubernetes' messages for the conditions the normalization sets.
pub mod messages {
    /// AbleToScale True, `ReadyForNewScale`.
    pub const READY_FOR_NEW_SCALE: &str = "recommended size matches current size";
    /// AbleToScale True, `ScaleDownStabilized`.
    pub const SCALE_DOWN_STABILIZED: &str = "recent recommendations were higher than current one, applying the highest recent recommendation";
    /// AbleToScale True, `ScaleUpStabilized`.
    pub const SCALE_UP_STABILIZED: &str = "recent recommendations were lower than current one, applying the lowest recent recommendation";
    /// ScalingLimited False, `DesiredWithinRange`.
    pub const DESIRED_WITHIN_RANGE: &str = "the desired count is within the acceptable range";
    /// ScalingLimited True, `TooManyReplicas`.
    pub const TOO_MANY_REPLICAS: &str =
        "the desired replica count is more than the maximum replica count";
    /// ScalingLimited True, `TooFewReplicas`.
    pub const TOO_FEW_REPLICAS: &str =
        "the desired replica count is less than the minimum replica count";
    /// ScalingLimited True, `ScaleUpLimit`.
    pub const SCALE_UP_LIMIT: &str =
        "the desired replica count is increasing faster than the maximum scale rate";
    /// ScalingLimited True, `ScaleDownLimit`.
    pub const SCALE_DOWN_LIMIT: &str =
        "the desired replica count is decreasing faster than the maximum scale rate";
}

/// What one normalization decided, with the two conditions it sets.
#[derive(Clone, Debug, PartialEq)]
pub struct Normalized {
    /// The count after stabilization and limits.
    pub desired: i32,
    /// The value after the stabilization step.
    pub stabilized: i32,
    /// AbleToScale True with ReadyForNewScale / ScaleDownStabilized / ScaleUpStabilized.
    pub able_to_scale: Condition,
    /// ScalingLimited: True when the limit step changed the stabilized value.
    pub scaling_limited: Condition,
    /// Legacy: `calculateScaleUpLimit`; behavior: `calculateScaleUpLimitWithScalingRules`
    /// (before the clamp to the current count).
    pub scale_up_limit: i32,
    /// Behavior only: `calculateScaleDownLimitWithBehaviors` (before the clamp).
    pub scale_down_limit: Option<i32>,
}

impl Normalized {
    /// The conditions of a normalization: AbleToScale says why the recommendation was
    /// stabilized (`stabilized_by`) or that it was not, ScalingLimited whether the bounds and
    /// rates (`limited_by`: the desired count, the reason and message) changed it.
    fn of(
        prenormalized: i32,
        stabilized: i32,
        stabilized_by: (ConditionReason, &str),
        (desired, reason, message): (i32, ConditionReason, &str),
        scale_up_limit: i32,
        scale_down_limit: Option<i32>,
    ) -> Self {
        let (able_reason, able_message) = if stabilized == prenormalized {
            (
                ConditionReason::ReadyForNewScale,
                messages::READY_FOR_NEW_SCALE,
            )
        } else {
            stabilized_by
        };
        Normalized {
            desired,
            stabilized,
            able_to_scale: condition(ConditionType::AbleToScale, true, able_reason, able_message),
            scaling_limited: condition(
                ConditionType::ScalingLimited,
                desired != stabilized,
                reason,
                message,
            ),
            scale_up_limit,
            scale_down_limit,
        }
    }
}

/// The bounds and counts of one normalization (`NormalizationArg` without the key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// The scale's current replica count.
    pub current: i32,
    /// `minReplicas` (defaulted).
    pub min: i32,
    /// `maxReplicas`.
    pub max: i32,
}

fn condition(
    condition_type: ConditionType,
    status: bool,
    reason: ConditionReason,
    message: &str,
) -> Condition {
    Condition {
        condition_type,
        status,
        reason,
        message: message.to_string(),
    }
}

fn saturate_i32(v: i64) -> i32 {
    i32::try_from(v).unwrap_or(if v < 0 { i32::MIN } else { i32::MAX })
}

// === legacy path (no behavior) ===

/// `normalizeDesiredReplicas`: stabilize (downscale window), then clamp to
/// `[min, min(max, scaleUpLimit)]`. Stores the prenormalized value in `recommendations`.
pub fn normalize_desired_replicas(
    settings: &Settings,
    recommendations: &mut Vec<Recommendation>,
    now: Time,
    bounds: Bounds,
    prenormalized: i32,
) -> Normalized {
    let stabilized = stabilize_recommendation(settings, recommendations, now, prenormalized);
    let scale_up_limit = calculate_scale_up_limit(settings, bounds.current);
    let stabilized_by = (
        ConditionReason::ScaleDownStabilized,
        messages::SCALE_DOWN_STABILIZED,
    );
    let limited_by = convert_desired_replicas_with_rules(settings, bounds, stabilized);
    Normalized::of(
        prenormalized,
        stabilized,
        stabilized_by,
        limited_by,
        scale_up_limit,
        None,
    )
}

/// `stabilizeRecommendation`: the maximum of `prenormalized` and every recommendation not
/// older than `now - downscaleStabilization` (an entry exactly at the cutoff counts). The
/// prenormalized value overwrites the last entry older than the cutoff, else is appended.
///
/// Zero window: upstream stamps every stored entry, including the one
/// `recordInitialRecommendation` adds at the start of the same reconciliation, with an
/// earlier `time.Now()` than the `cutoff := time.Now().Add(-window)` read here, so
/// `rec.timestamp.Before(cutoff)` holds for all of them: none counts and a scale-down happens
/// at once (algorithm document, section 10). With one instant per evaluation that is "an entry
/// at `now` is before a zero-width cutoff" (test `legacy_zero_downscale_window_ignores_the_initial_recommendation`).
pub fn stabilize_recommendation(
    settings: &Settings,
    recommendations: &mut Vec<Recommendation>,
    now: Time,
    prenormalized: i32,
) -> i32 {
    let cutoff = now.minus(settings.downscale_stabilization);
    let zero_window = settings.downscale_stabilization.is_zero();
    let mut max_recommendation = prenormalized;
    let mut old_sample = None;
    for (i, rec) in recommendations.iter().enumerate() {
        if before_cutoff(rec.time, cutoff, zero_window) {
            old_sample = Some(i);
        } else if rec.replicas > max_recommendation {
            max_recommendation = rec.replicas;
        }
    }
    store_recommendation(recommendations, old_sample, prenormalized, now);
    max_recommendation
}

/// `rec.timestamp.Before(cutoff)` with one instant per evaluation: at a zero-width window an
/// entry stamped `now` is before the cutoff too, since upstream stamped it with an earlier
/// `time.Now()` than the one the cutoff is taken from.
fn before_cutoff(time: Time, cutoff: Time, zero_window: bool) -> bool {
    time < cutoff || (zero_window && time <= cutoff)
}

fn store_recommendation(
    recommendations: &mut Vec<Recommendation>,
    slot: Option<usize>,
    replicas: i32,
    now: Time,
) {
    let rec = Recommendation {
        replicas,
        time: now,
    };
    match slot.and_then(|i| recommendations.get_mut(i)) {
        Some(old) => *old = rec,
        None => recommendations.push(rec),
    }
}

/// `convertDesiredReplicasWithRules`: the legacy clamp. Returns the count, the ScalingLimited
/// reason and its message.
pub fn convert_desired_replicas_with_rules(
    settings: &Settings,
    bounds: Bounds,
    desired: i32,
) -> (i32, ConditionReason, &'static str) {
    // Upstream: "Do not upscale too much to prevent incorrect rapid increase of the number of
    // master replicas caused by bogus CPU usage report from heapster/kubelet" (#32304).
    let scale_up_limit = calculate_scale_up_limit(settings, bounds.current);
    let (maximum_allowed, limit_reason, limit_message) = maximum_allowed(bounds, scale_up_limit);
    if desired < bounds.min {
        (
            bounds.min,
            ConditionReason::TooFewReplicas,
            messages::TOO_FEW_REPLICAS,
        )
    } else if desired > maximum_allowed {
        (maximum_allowed, limit_reason, limit_message)
    } else {
        (
            desired,
            ConditionReason::DesiredWithinRange,
            messages::DESIRED_WITHIN_RANGE,
        )
    }
}

/// The highest count allowed going up: the scale-up limit where it is below `maxReplicas`
/// (ScaleUpLimit), else `maxReplicas` (TooManyReplicas); both conversions choose so.
fn maximum_allowed(bounds: Bounds, scale_up_limit: i32) -> (i32, ConditionReason, &'static str) {
    if bounds.max > scale_up_limit {
        (
            scale_up_limit,
            ConditionReason::ScaleUpLimit,
            messages::SCALE_UP_LIMIT,
        )
    } else {
        (
            bounds.max,
            ConditionReason::TooManyReplicas,
            messages::TOO_MANY_REPLICAS,
        )
    }
}

/// `calculateScaleUpLimit`: `int32(max(factor × current, minimum))` (float, truncated;
/// saturating where Go's conversion is undefined).
pub fn calculate_scale_up_limit(settings: &Settings, current: i32) -> i32 {
    let limit =
        (settings.scale_up_limit_factor * f64::from(current)).max(settings.scale_up_limit_minimum);
    // `as` truncates toward zero and saturates (NaN → 0); settings are validated finite.
    limit as i32
}

// === behavior path ===

/// `normalizeDesiredReplicasWithBehaviors`: stabilize within the per-direction windows, then
/// apply the rate limits of the policies and the bounds in the direction of the change.
/// Stores the prenormalized value in the recommendations; scale events are stored by the
/// caller after a rescale ([`store_scale_event`]).
pub fn normalize_desired_replicas_with_behaviors(
    behavior: &CompletedBehavior,
    history: &mut History,
    now: Time,
    bounds: Bounds,
    prenormalized: i32,
) -> Normalized {
    // The limits are reported for the explanation whatever the direction; they depend only on
    // the events stored before this evaluation.
    let (scale_up_limit, scale_down_limit) = scale_limits(bounds.current, history, behavior, now);

    let recommendations = history.recommendations.get_or_insert_with(Vec::new);
    let (stabilized, stabilized_reason, stabilized_message) =
        stabilize_recommendation_with_behaviors(
            behavior,
            recommendations,
            now,
            bounds.current,
            prenormalized,
        );
    let limited_by = convert_desired_replicas_with_behavior_rate(
        bounds,
        stabilized,
        scale_up_limit,
        scale_down_limit,
    );
    Normalized::of(
        prenormalized,
        stabilized,
        (stabilized_reason, stabilized_message),
        limited_by,
        scale_up_limit,
        Some(scale_down_limit),
    )
}

/// `stabilizeRecommendationWithBehaviors`: a scale-up goes only as high as the lowest
/// recommendation inside the scale-up window, a scale-down only as low as the highest inside
/// the scale-down window (windows exclusive of their cutoff), starting from the current count.
/// The prenormalized value overwrites the last entry strictly older than both cutoffs (an
/// entry at `now` counts as older than a zero-width one, see [`stabilize_recommendation`]),
/// else is appended. Returns the value and the AbleToScale reason/message to use if it differs
/// from `prenormalized`.
pub fn stabilize_recommendation_with_behaviors(
    behavior: &CompletedBehavior,
    recommendations: &mut Vec<Recommendation>,
    now: Time,
    current: i32,
    prenormalized: i32,
) -> (i32, ConditionReason, &'static str) {
    let up_window = behavior.scale_up.stabilization_window_seconds;
    let down_window = behavior.scale_down.stabilization_window_seconds;
    let up_cutoff = now.plus_secs(-i64::from(up_window));
    let down_cutoff = now.plus_secs(-i64::from(down_window));
    let mut up_recommendation = prenormalized;
    let mut down_recommendation = prenormalized;
    let mut old_sample = None;
    for (i, rec) in recommendations.iter().enumerate() {
        if rec.time > up_cutoff {
            up_recommendation = up_recommendation.min(rec.replicas);
        }
        if rec.time > down_cutoff {
            down_recommendation = down_recommendation.max(rec.replicas);
        }
        if before_cutoff(rec.time, up_cutoff, up_window == 0)
            && before_cutoff(rec.time, down_cutoff, down_window == 0)
        {
            old_sample = Some(i);
        }
    }
    // Bring the current count within [up_recommendation, down_recommendation]: raise first,
    // then cap, as upstream does.
    let mut recommendation = current;
    if recommendation < up_recommendation {
        recommendation = up_recommendation;
    }
    if recommendation > down_recommendation {
        recommendation = down_recommendation;
    }
    store_recommendation(recommendations, old_sample, prenormalized, now);
    if prenormalized >= current {
        (
            recommendation,
            ConditionReason::ScaleUpStabilized,
            messages::SCALE_UP_STABILIZED,
        )
    } else {
        (
            recommendation,
            ConditionReason::ScaleDownStabilized,
            messages::SCALE_DOWN_STABILIZED,
        )
    }
}

/// `convertDesiredReplicasWithBehaviorRate`: limits apply only in the direction of the
/// change; a limit against the direction is clamped to the current count ("we shouldn't scale
/// up further until the scaleUpEvents will be cleaned up").
pub fn convert_desired_replicas_with_behavior_rate(
    bounds: Bounds,
    desired: i32,
    scale_up_limit: i32,
    scale_down_limit: i32,
) -> (i32, ConditionReason, &'static str) {
    if desired > bounds.current {
        let limit = scale_up_limit.max(bounds.current);
        let (maximum_allowed, reason, message) = maximum_allowed(bounds, limit);
        if desired > maximum_allowed {
            return (maximum_allowed, reason, message);
        }
    } else if desired < bounds.current {
        let limit = scale_down_limit.min(bounds.current);
        let (minimum_allowed, reason, message) = if bounds.min < limit {
            (
                limit,
                ConditionReason::ScaleDownLimit,
                messages::SCALE_DOWN_LIMIT,
            )
        } else {
            (
                bounds.min,
                ConditionReason::TooFewReplicas,
                messages::TOO_FEW_REPLICAS,
            )
        };
        if desired < minimum_allowed {
            return (minimum_allowed, reason, message);
        }
    }
    (
        desired,
        ConditionReason::DesiredWithinRange,
        messages::DESIRED_WITHIN_RANGE,
    )
}

/// `getReplicasChangePerPeriod`: the sum of the magnitudes of the events strictly after
/// `now - period`. Outdated events still count while inside the period (only possible after
/// the policies changed), as upstream.
pub fn get_replicas_change_per_period(
    period_seconds: i32,
    events: &[ScaleEvent],
    now: Time,
) -> i64 {
    let cutoff = now.plus_secs(-i64::from(period_seconds));
    events
        .iter()
        .filter(|e| e.time > cutoff)
        .map(|e| i64::from(e.replica_change))
        .sum()
}

/// The replica count at the start of `policy`'s period: the current count minus what was
/// added and plus what was removed inside it.
fn period_start_replicas(
    current: i32,
    history: &History,
    policy: &ScalingPolicy,
    now: Time,
) -> i64 {
    let period = policy.period_seconds;
    let added = get_replicas_change_per_period(period, &history.scale_up_events, now);
    let removed = get_replicas_change_per_period(period, &history.scale_down_events, now);
    i64::from(current) - added + removed
}

/// The counts `behavior`'s policies allow now, `(scale-up limit, scale-down limit)`, from the
/// events `history` holds.
///
/// `calculateScaleUpLimitWithScalingRules`: the highest count; Select Max takes the largest
/// proposal, Min the smallest, Disabled the current count; with no policy the result is
/// `MinInt32` (no scale-up). Percent proposals round up.
///
/// `calculateScaleDownLimitWithBehaviors`: the lowest count; Select Max takes the lowest
/// proposal (largest change), Min the highest, Disabled the current count; with no policy the
/// result is `MaxInt32` (no scale-down). Percent proposals truncate toward zero.
pub fn scale_limits(
    current: i32,
    history: &History,
    behavior: &CompletedBehavior,
    now: Time,
) -> (i32, i32) {
    let limit = |rules: &CompletedRules, up: bool| {
        // (the start, the choice among proposals) for Min and Max, as seen going up.
        let (mut result, pick): (i32, fn(i32, i32) -> i32) = match (rules.select_policy, up) {
            (SelectPolicy::Disabled, _) => return current,
            (SelectPolicy::Min, true) | (SelectPolicy::Max, false) => (i32::MAX, std::cmp::min),
            (SelectPolicy::Max, true) | (SelectPolicy::Min, false) => (i32::MIN, std::cmp::max),
        };
        for policy in &rules.policies {
            let start = period_start_replicas(current, history, policy, now);
            let change = f64::from(policy.value) / 100.0;
            let proposed = match (policy.policy_type, up) {
                (ScalingPolicyType::Pods, true) => saturate_i32(start + i64::from(policy.value)),
                (ScalingPolicyType::Pods, false) => saturate_i32(start - i64::from(policy.value)),
                // "the proposal has to be rounded up because the proposed change might not
                // increase the replica count causing the target to never scale up"
                (ScalingPolicyType::Percent, true) => (start as f64 * (1.0 + change)).ceil() as i32,
                (ScalingPolicyType::Percent, false) => (start as f64 * (1.0 - change)) as i32,
            };
            result = pick(result, proposed);
        }
        result
    };
    (
        limit(&behavior.scale_up, true),
        limit(&behavior.scale_down, false),
    )
}

// === scale events ===

/// `getLongestPolicyPeriod`: the largest period among the rules' policies (0 without any).
pub fn get_longest_policy_period(rules: &CompletedRules) -> i32 {
    rules
        .policies
        .iter()
        .map(|p| p.period_seconds)
        .fold(0, i32::max)
}

/// `markScaleEventsOutdated`: events strictly before `now - longestPolicyPeriod` become
/// reusable slots.
pub fn mark_scale_events_outdated(
    events: &mut [ScaleEvent],
    longest_policy_period: i32,
    now: Time,
) {
    let cutoff = now.plus_secs(-i64::from(longest_policy_period));
    for event in events.iter_mut() {
        if event.time < cutoff {
            event.outdated = true;
        }
    }
}

/// `storeScaleEvent`: records `|new - prev|` in the list of its direction, overwriting the
/// last outdated event or appending. Only called after a rescale with a behavior (the legacy
/// path keeps no events).
pub fn store_scale_event(
    behavior: &CompletedBehavior,
    history: &mut History,
    now: Time,
    prev: i32,
    new: i32,
) {
    let (events, rules, change) = if new > prev {
        (
            &mut history.scale_up_events,
            &behavior.scale_up,
            i64::from(new) - i64::from(prev),
        )
    } else {
        (
            &mut history.scale_down_events,
            &behavior.scale_down,
            i64::from(prev) - i64::from(new),
        )
    };
    mark_scale_events_outdated(events, get_longest_policy_period(rules), now);
    let event = ScaleEvent {
        replica_change: saturate_i32(change),
        time: now,
        outdated: false,
    };
    match events.iter().rposition(|e| e.outdated) {
        Some(i) => events[i] = event,
        None => events.push(event),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const NOW: Time = Time::from_unix_secs(1_000_000);

    fn rec(replicas: i32, ago_s: i64) -> Recommendation {
        Recommendation::new(replicas, NOW.plus_secs(-ago_s))
    }

    fn event(change: i32, ago_s: i64) -> ScaleEvent {
        ScaleEvent {
            replica_change: change,
            time: NOW.plus_secs(-ago_s),
            outdated: false,
        }
    }

    /// The same rules for both directions.
    fn both(rules: CompletedRules) -> CompletedBehavior {
        CompletedBehavior {
            scale_up: rules.clone(),
            scale_down: rules,
        }
    }

    fn rules(window: i32, select: SelectPolicy, policies: Vec<ScalingPolicy>) -> CompletedRules {
        CompletedRules {
            stabilization_window_seconds: window,
            select_policy: select,
            policies,
            tolerance: None,
        }
    }

    fn pods(value: i32, period: i32) -> ScalingPolicy {
        ScalingPolicy {
            policy_type: ScalingPolicyType::Pods,
            value,
            period_seconds: period,
        }
    }

    fn percent(value: i32, period: i32) -> ScalingPolicy {
        ScalingPolicy {
            policy_type: ScalingPolicyType::Percent,
            value,
            period_seconds: period,
        }
    }

    #[test]
    fn legacy_window_keeps_entry_exactly_at_cutoff_and_reuses_last_old_slot() {
        let settings = Settings {
            downscale_stabilization: Duration::from_secs(300),
            ..Settings::default()
        };
        let mut recs = vec![rec(9, 301), rec(7, 300), rec(8, 400)];
        let stabilized = stabilize_recommendation(&settings, &mut recs, NOW, 3);
        assert_eq!(stabilized, 7);
        assert_eq!(recs[2], rec(3, 0));
        assert_eq!(recs.len(), 3);
    }

    #[test]
    fn behavior_window_excludes_entry_exactly_at_cutoff() {
        let behavior = CompletedBehavior {
            scale_up: rules(0, SelectPolicy::Max, vec![]),
            scale_down: rules(60, SelectPolicy::Max, vec![]),
        };
        let mut recs = vec![rec(9, 60), rec(6, 59)];
        let (v, reason, _) =
            stabilize_recommendation_with_behaviors(&behavior, &mut recs, NOW, 10, 3);
        assert_eq!(v, 6);
        assert_eq!(reason, ConditionReason::ScaleDownStabilized);
        // Neither entry is strictly older than both cutoffs (60 s and 0 s): append.
        assert_eq!(recs.len(), 3);
    }

    #[test]
    fn scale_up_limit_counts_events_strictly_inside_period() {
        let r = rules(0, SelectPolicy::Max, vec![pods(4, 60)]);
        let history = History {
            scale_up_events: vec![event(2, 60), event(3, 59)],
            ..History::default()
        };
        assert_eq!(scale_limits(10, &history, &both(r), NOW).0, 10 - 3 + 4);
    }

    #[test]
    fn percent_rounding_up_and_down() {
        let both_ways = both(rules(0, SelectPolicy::Max, vec![percent(50, 15)]));
        assert_eq!(
            scale_limits(3, &History::default(), &both_ways, NOW),
            (5, 1)
        );
    }

    #[test]
    fn no_policies_means_no_change_in_that_direction() {
        let none = both(rules(0, SelectPolicy::Max, vec![]));
        assert_eq!(
            scale_limits(5, &History::default(), &none, NOW),
            (i32::MIN, i32::MAX)
        );
        let bounds = Bounds {
            current: 5,
            min: 1,
            max: 10,
        };
        assert_eq!(
            convert_desired_replicas_with_behavior_rate(bounds, 8, i32::MIN, i32::MAX).0,
            5
        );
        assert_eq!(
            convert_desired_replicas_with_behavior_rate(bounds, 2, i32::MIN, i32::MAX).0,
            5
        );
    }

    #[test]
    fn store_scale_event_reuses_last_outdated_slot() {
        let behavior = CompletedBehavior {
            scale_up: rules(0, SelectPolicy::Max, vec![pods(4, 60)]),
            scale_down: rules(300, SelectPolicy::Max, vec![percent(100, 15)]),
        };
        let mut history = History {
            recommendations: None,
            scale_up_events: vec![event(1, 120), event(2, 61), event(3, 60)],
            scale_down_events: vec![],
            extensions: None,
            predictive: None,
        };
        store_scale_event(&behavior, &mut history, NOW, 4, 9);
        assert_eq!(history.scale_up_events.len(), 3);
        assert!(history.scale_up_events[0].outdated);
        assert_eq!(history.scale_up_events[1], event(5, 0));
        assert!(!history.scale_up_events[2].outdated);
    }

    #[test]
    fn legacy_limit_truncates() {
        let settings = Settings {
            scale_up_limit_factor: 1.5,
            scale_up_limit_minimum: 1.0,
            ..Settings::default()
        };
        assert_eq!(calculate_scale_up_limit(&settings, 3), 4);
        assert_eq!(calculate_scale_up_limit(&Settings::default(), 1), 4);
        assert_eq!(
            calculate_scale_up_limit(&Settings::default(), i32::MAX),
            i32::MAX
        );
    }
}
