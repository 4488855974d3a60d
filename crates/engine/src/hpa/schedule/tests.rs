use super::*;

// --- helpers ---

fn window(name: &str, start: &str, end: &str, tz: &str) -> Schedule {
    Schedule {
        name: name.to_owned(),
        start: start.to_owned(),
        end: Some(end.to_owned()),
        duration: None,
        time_zone: tz.to_owned(),
        min_replicas: Some(10),
        max_replicas: None,
    }
}

fn lasting(name: &str, start: &str, secs: u64, tz: &str) -> Schedule {
    Schedule {
        end: None,
        duration: Some(Duration::from_secs(secs)),
        ..window(name, start, "", tz)
    }
}

fn compiled(schedules: &[Schedule]) -> CompiledSchedules {
    compile(schedules).unwrap_or_else(|e| panic!("{e:?}"))
}

/// An instant from RFC 9557 (`2024-03-10T03:00:00-04:00[America/New_York]`) or RFC 3339.
fn at(s: &str) -> Time {
    let ts: Timestamp = if s.contains('[') {
        s.parse::<jiff::Zoned>().unwrap().timestamp()
    } else {
        s.parse().unwrap()
    };
    Time::from_unix_millis(ts.as_millisecond())
}

fn open_at(s: &Schedule, t: &str) -> bool {
    !compiled(std::slice::from_ref(s)).in_force(at(t)).is_empty()
}

fn until(s: &Schedule, t: &str) -> Option<String> {
    compiled(std::slice::from_ref(s))
        .in_force(at(t))
        .until_local
}

/// The next `n` occurrences of `expr` in `tz` after `from`, on the zone's clock.
fn occurrences(expr: &str, tz: &str, from: &str, n: usize) -> Vec<String> {
    let p = pattern(expr).unwrap();
    let tz = time_zone(tz).unwrap();
    let mut t: Timestamp = from.parse::<jiff::Zoned>().unwrap().timestamp();
    let limit = plus(t, LOOKAHEAD);
    let mut out = Vec::new();
    for _ in 0..n {
        t = p.next(&tz, t, false, limit).unwrap();
        out.push(t.to_zoned(tz.clone()).to_string());
    }
    out
}

/// The occurrence at or before `t` of `expr`, on the zone's clock.
fn latest(expr: &str, tz: &str, t: &str) -> String {
    let p = pattern(expr).unwrap();
    let tz = time_zone(tz).unwrap();
    let t: Timestamp = t.parse::<jiff::Zoned>().unwrap().timestamp();
    p.prev(&tz, t, plus(t, -MAX_WINDOW))
        .unwrap()
        .to_zoned(tz.clone())
        .to_string()
}

fn violations(schedules: &[Schedule]) -> Vec<String> {
    schedule_violations(schedules)
        .into_iter()
        .map(|v| format!("{}: {}", v.field, v.description))
        .collect()
}

const NY: &str = "America/New_York";
const BERLIN: &str = "Europe/Berlin";

// --- windows ---

#[test]
fn an_end_window_is_open_from_start_inclusive_to_end_exclusive() {
    let s = window("office", "0 9 * * MON-FRI", "0 17 * * MON-FRI", BERLIN);
    // 2024-06-03 is a Monday.
    assert!(!open_at(&s, "2024-06-03T08:59:59+02:00[Europe/Berlin]"));
    assert!(open_at(&s, "2024-06-03T09:00:00+02:00[Europe/Berlin]"));
    assert!(open_at(&s, "2024-06-03T16:59:59.999+02:00[Europe/Berlin]"));
    assert!(!open_at(&s, "2024-06-03T17:00:00+02:00[Europe/Berlin]"));
    // Saturday: no opening since Friday's window closed.
    assert!(!open_at(&s, "2024-06-08T12:00:00+02:00[Europe/Berlin]"));
    assert_eq!(
        until(&s, "2024-06-03T10:00:00+02:00[Europe/Berlin]").as_deref(),
        Some("2024-06-03T17:00:00+02:00[Europe/Berlin]")
    );
    assert_eq!(
        until(&s, "2024-06-07T18:00:00+02:00[Europe/Berlin]").as_deref(),
        Some("2024-06-10T09:00:00+02:00[Europe/Berlin]"),
        "Friday evening: next Monday's opening"
    );
}

#[test]
fn a_window_may_span_midnight() {
    let s = window("night", "0 22 * * *", "0 6 * * *", "UTC");
    assert!(open_at(&s, "2024-06-03T23:30:00Z"));
    assert!(open_at(&s, "2024-06-04T05:59:00Z"));
    assert!(!open_at(&s, "2024-06-04T06:00:00Z"));
    assert!(!open_at(&s, "2024-06-04T21:59:59Z"));
    let d = lasting("night", "0 22 * * *", 8 * 3600, "UTC");
    assert!(open_at(&d, "2024-06-04T05:59:59Z"));
    assert!(!open_at(&d, "2024-06-04T06:00:00Z"));
}

#[test]
fn the_end_wins_a_tie_with_the_start() {
    // Opens every day at 09:00, closes Mondays at 09:00: the Sunday window runs into
    // Monday 09:00, and Monday's opening is closed at once.
    let s = window("w", "0 9 * * *", "0 9 * * MON", "UTC");
    // 2024-06-02 is a Sunday.
    assert!(open_at(&s, "2024-06-02T09:00:00Z"));
    assert!(open_at(&s, "2024-06-03T08:59:59Z"));
    assert!(!open_at(&s, "2024-06-03T09:00:00Z"), "end wins the tie");
    assert!(!open_at(&s, "2024-06-03T20:00:00Z"));
    assert!(
        open_at(&s, "2024-06-04T09:00:00Z"),
        "Tuesday's window runs to next Monday"
    );
    assert!(open_at(&s, "2024-06-08T12:00:00Z"));
    assert_eq!(
        until(&s, "2024-06-03T08:00:00Z").as_deref(),
        Some("2024-06-03T09:00:00+00:00[UTC]")
    );
    assert_eq!(
        until(&s, "2024-06-03T09:00:00Z").as_deref(),
        Some("2024-06-04T09:00:00+00:00[UTC]"),
        "the empty Monday window is not a change"
    );
    // Every opening collides with an end: never open.
    let never = window("w", "0 9 * * MON", "0 9 * * *", "UTC");
    assert!(!open_at(&never, "2024-06-03T09:00:00Z"));
    assert!(!open_at(&never, "2024-06-03T12:00:00Z"));
}

#[test]
fn only_the_latest_opening_counts_not_the_next_end() {
    // KEDA would call this active every weekday morning (its next end comes before its
    // next start); a window opens only on Mondays here, as in Nomad.
    let s = window("monday", "0 1 * * MON", "0 2 * * *", "UTC");
    assert!(open_at(&s, "2024-06-03T01:30:00Z"));
    assert!(!open_at(&s, "2024-06-04T01:30:00Z"));
}

/// Nomad Autoscaler's schedule tests (`policy/schedule_test.go`: UTC, `end` windows),
/// which our rule must agree with.
#[test]
fn nomad_autoscaler_edge_cases_agree() {
    let cases = [
        ("0 14 * * *", "0 15 * * *", "2026-01-01T13:59:00Z", false),
        ("0 14 * * *", "0 15 * * *", "2026-01-01T14:00:00Z", true),
        ("0 14 * * *", "0 15 * * *", "2026-01-01T14:59:59Z", true),
        ("0 14 * * *", "0 15 * * *", "2026-01-01T15:00:00Z", false),
        ("0 14 * * *", "0 15 * * *", "2026-01-02T14:00:00Z", true),
        ("30 16 * * *", "0 9 * * *", "2026-01-01T17:00:00Z", true),
        ("30 16 * * *", "0 9 * * *", "2026-01-02T08:59:00Z", true),
        ("30 16 * * *", "0 9 * * *", "2026-01-02T09:00:00Z", false),
        ("30 16 * * *", "0 9 * * *", "2026-01-01T16:29:00Z", false),
        ("0 0 * * Mon", "59 23 * * Fri", "2026-01-07T12:00:00Z", true),
        (
            "0 0 * * Mon",
            "59 23 * * Fri",
            "2026-01-10T12:00:00Z",
            false,
        ),
        ("0 0 * * Mon", "59 23 * * Fri", "2026-01-05T00:00:00Z", true),
        (
            "0 0 * * Mon",
            "59 23 * * Fri",
            "2026-01-09T23:59:00Z",
            false,
        ),
        ("0 1 * * Mon", "0 2 * * *", "2026-01-01T03:00:00Z", false),
        ("0 0 29 2 *", "0 12 29 2 *", "2028-02-29T11:59:00Z", true),
        ("0 0 29 2 *", "0 12 29 2 *", "2028-02-29T12:00:00Z", false),
        ("0 0 31 * *", "0 12 31 * *", "2026-01-31T11:59:00Z", true),
        ("0 0 31 * *", "0 12 31 * *", "2026-04-30T12:00:00Z", false),
        ("0 0 1 1 *", "0 0 2 1 *", "2026-01-01T12:00:00Z", true),
    ];
    for (start, end, now, open) in cases {
        let s = window("nomad", start, end, "UTC");
        assert_eq!(open_at(&s, now), open, "{start} → {end} at {now}");
    }
    // Duration windows.
    let s = lasting("nomad", "0 14 * * *", 3600, "UTC");
    for (now, open) in [
        ("2026-01-01T13:59:00Z", false),
        ("2026-01-01T14:00:00Z", true),
        ("2026-01-01T14:59:59Z", true),
        ("2026-01-01T15:00:00Z", false),
        ("2026-01-02T14:00:00Z", true),
    ] {
        assert_eq!(open_at(&s, now), open, "{now}");
    }
}

/// KEDA's rule ("active unless the next start comes before the next end") on the same
/// schedules, to document where it differs: a weekly start with a daily end.
#[test]
fn keda_forward_rule_differs_on_mismatched_frequencies() {
    let s = window("w", "0 1 * * MON", "0 2 * * *", "UTC");
    let keda = |now: &str| {
        let c = compiled(std::slice::from_ref(&s));
        let tz = time_zone("UTC").unwrap();
        let t: Timestamp = now.parse().unwrap();
        let far = plus(t, MAX_WINDOW);
        let sched = &c.schedules[0];
        let next_start = sched.start.next(&tz, t, false, far).unwrap();
        let Close::At(end) = &sched.close else {
            unreachable!()
        };
        let next_end = end.next(&tz, t, false, far).unwrap();
        !(next_start < next_end && t < next_start)
    };
    // Wednesday 12:00 (2026-01-07): KEDA active, ours closed.
    assert!(keda("2026-01-07T12:00:00Z"));
    assert!(!open_at(&s, "2026-01-07T12:00:00Z"));
    // Sunday 12:00: both closed; Monday 01:30: both open.
    assert!(!keda("2026-01-04T12:00:00Z"));
    assert!(keda("2026-01-05T01:30:00Z"));
    assert!(open_at(&s, "2026-01-05T01:30:00Z"));
}

#[test]
fn overlapping_windows_of_one_schedule_join() {
    // Hourly openings of 90 minutes: open from 00:00 on, for ever.
    let s = lasting("overlap", "0 * * * *", 5400, "UTC");
    assert!(open_at(&s, "2024-06-03T12:45:00Z"));
    assert_eq!(
        until(&s, "2024-06-03T12:45:00Z"),
        None,
        "the chain never breaks: no change found"
    );
    // Openings every hour from 08:00 to 10:00, 90 minutes each: one union 08:00–11:30.
    let s = lasting("morning", "0 8-10 * * *", 5400, "UTC");
    assert_eq!(
        until(&s, "2024-06-03T08:10:00Z").as_deref(),
        Some("2024-06-03T11:30:00+00:00[UTC]")
    );
}

#[test]
fn a_window_open_for_months_is_found_without_state() {
    // Opened on Jan 1, closed on Dec 1: evaluated for the first time in late November.
    let s = window("season", "0 0 1 1 *", "0 0 1 12 *", "UTC");
    assert!(open_at(&s, "2025-11-30T23:59:00Z"));
    assert_eq!(
        until(&s, "2025-11-30T23:59:00Z").as_deref(),
        Some("2025-12-01T00:00:00+00:00[UTC]")
    );
    assert!(!open_at(&s, "2025-12-15T00:00:00Z"));
    assert_eq!(
        until(&s, "2025-12-15T00:00:00Z").as_deref(),
        Some("2026-01-01T00:00:00+00:00[UTC]")
    );
}

#[test]
fn search_bounds_are_a_year() {
    // Leap days only: open on 2028-02-29; from 2026-03-01 the next opening is more than
    // 366 days away, so no change is reported.
    let s = lasting("leap", "0 0 29 2 *", 86_400, "UTC");
    assert!(open_at(&s, "2028-02-29T12:00:00Z"));
    assert!(!open_at(&s, "2028-03-01T00:00:00Z"));
    assert_eq!(until(&s, "2026-03-01T00:00:00Z"), None);
    assert_eq!(
        until(&s, "2027-03-02T00:00:00Z").as_deref(),
        Some("2028-02-29T00:00:00+00:00[UTC]")
    );
    // A duration of a full year is the longest: still found at its last instant.
    let s = lasting("year", "0 0 1 1 *", 366 * 86_400, "UTC");
    assert!(open_at(&s, "2024-12-31T23:59:59Z"), "2024 is a leap year");
    // An end that fires only every four years: the window closes after 366 days.
    let s = window("capped", "0 0 1 3 *", "0 0 29 2 *", "UTC");
    assert!(open_at(&s, "2026-02-28T00:00:00Z"));
    assert_eq!(
        until(&s, "2025-03-02T00:00:00Z").as_deref(),
        None,
        "each yearly opening runs into the next: open throughout"
    );
    // The window opened on 2027-03-01 is closed by the leap day, within 366 days.
    assert!(open_at(&s, "2028-02-28T23:59:00Z"));
    assert_eq!(
        until(&s, "2028-02-28T23:59:00Z").as_deref(),
        Some("2028-02-29T00:00:00+00:00[UTC]")
    );
    assert!(!open_at(&s, "2028-02-29T00:00:00Z"));
}

// --- DST: America/New_York (2024-03-10 02:00 EST → 03:00 EDT; 2024-11-03 02:00 EDT →
// 01:00 EST) and Europe/Berlin (2024-03-31 02:00 CET → 03:00 CEST; 2024-10-27 03:00
// CEST → 02:00 CET) ---

#[test]
fn a_start_in_a_gap_fires_when_the_gap_ends() {
    assert_eq!(
        occurrences(
            "30 2 * * *",
            NY,
            "2024-03-09T00:00:00-05:00[America/New_York]",
            3
        ),
        [
            "2024-03-09T02:30:00-05:00[America/New_York]",
            "2024-03-10T03:00:00-04:00[America/New_York]",
            "2024-03-11T02:30:00-04:00[America/New_York]",
        ]
    );
    assert_eq!(
        occurrences(
            "30 2 * * *",
            BERLIN,
            "2024-03-30T12:00:00+01:00[Europe/Berlin]",
            2
        ),
        [
            "2024-03-31T03:00:00+02:00[Europe/Berlin]",
            "2024-04-01T02:30:00+02:00[Europe/Berlin]",
        ]
    );
    // Interval patterns too (croner and cronie skip these); occurrences collapsing onto
    // the end of the gap fire once.
    assert_eq!(
        occurrences(
            "30 * * * *",
            NY,
            "2024-03-10T01:00:00-05:00[America/New_York]",
            3
        ),
        [
            "2024-03-10T01:30:00-05:00[America/New_York]",
            "2024-03-10T03:00:00-04:00[America/New_York]",
            "2024-03-10T03:30:00-04:00[America/New_York]",
        ]
    );
    assert_eq!(
        occurrences(
            "*/15 2 * * *",
            NY,
            "2024-03-10T00:00:00-05:00[America/New_York]",
            2
        ),
        [
            "2024-03-10T03:00:00-04:00[America/New_York]",
            "2024-03-11T02:00:00-04:00[America/New_York]",
        ]
    );
    // Searching backwards finds the carried occurrence too, and from exactly the end of
    // the gap.
    assert_eq!(
        latest(
            "30 2 * * *",
            NY,
            "2024-03-10T03:00:00-04:00[America/New_York]"
        ),
        "2024-03-10T03:00:00-04:00[America/New_York]"
    );
    assert_eq!(
        latest(
            "30 2 * * *",
            NY,
            "2024-03-10T01:59:59-05:00[America/New_York]"
        ),
        "2024-03-09T02:30:00-05:00[America/New_York]"
    );
}

#[test]
fn windows_across_a_gap() {
    // Opened in the gap: from 03:00 EDT for one hour of elapsed time.
    let s = lasting("early", "30 2 * * *", 3600, NY);
    assert!(!open_at(&s, "2024-03-10T01:59:59-05:00[America/New_York]"));
    assert!(open_at(&s, "2024-03-10T03:00:00-04:00[America/New_York]"));
    assert!(!open_at(&s, "2024-03-10T04:00:00-04:00[America/New_York]"));
    assert_eq!(
        until(&s, "2024-03-10T01:00:00-05:00[America/New_York]").as_deref(),
        Some("2024-03-10T03:00:00-04:00[America/New_York]")
    );
    // 22:00 + 8 h of elapsed time ends at 07:00 on the short night (Berlin).
    let s = lasting("night", "0 22 * * *", 8 * 3600, BERLIN);
    assert!(open_at(&s, "2024-03-31T06:59:59+02:00[Europe/Berlin]"));
    assert!(!open_at(&s, "2024-03-31T07:00:00+02:00[Europe/Berlin]"));
    // ...and at 05:00 on the long one.
    assert!(open_at(&s, "2024-10-27T04:59:59+01:00[Europe/Berlin]"));
    assert!(!open_at(&s, "2024-10-27T05:00:00+01:00[Europe/Berlin]"));
    // With an end cron, the window ends on the wall clock: 7 h and 9 h of elapsed time.
    let s = window("night", "0 22 * * *", "0 6 * * *", BERLIN);
    assert!(open_at(&s, "2024-03-31T05:59:59+02:00[Europe/Berlin]"));
    assert!(!open_at(&s, "2024-03-31T06:00:00+02:00[Europe/Berlin]"));
    assert!(open_at(&s, "2024-10-27T05:59:59+01:00[Europe/Berlin]"));
    // A window inside the gap's wall-clock hour is empty that night: its start is
    // carried to 03:00, where its end also fires, and the end wins.
    let s = window("gap", "30 2 * * *", "0 3 * * *", NY);
    assert!(!open_at(&s, "2024-03-10T03:00:00-04:00[America/New_York]"));
    assert!(open_at(&s, "2024-03-11T02:45:00-04:00[America/New_York]"));
}

#[test]
fn a_fixed_hour_fires_once_in_a_repeated_hour() {
    assert_eq!(
        occurrences(
            "30 1 * * *",
            NY,
            "2024-11-02T12:00:00-04:00[America/New_York]",
            3
        ),
        [
            "2024-11-03T01:30:00-04:00[America/New_York]",
            "2024-11-04T01:30:00-05:00[America/New_York]",
            "2024-11-05T01:30:00-05:00[America/New_York]",
        ]
    );
    // Stepped minutes with a fixed hour: still the first pass only (croner would fire in
    // both passes: it classifies by minutes too).
    assert_eq!(
        occurrences(
            "*/20 1 * * *",
            NY,
            "2024-11-03T00:00:00-04:00[America/New_York]",
            4
        ),
        [
            "2024-11-03T01:00:00-04:00[America/New_York]",
            "2024-11-03T01:20:00-04:00[America/New_York]",
            "2024-11-03T01:40:00-04:00[America/New_York]",
            "2024-11-04T01:00:00-05:00[America/New_York]",
        ]
    );
    // An hour range without a step counts as fixed.
    assert_eq!(
        occurrences(
            "0 1-2 * * *",
            NY,
            "2024-11-03T00:00:00-04:00[America/New_York]",
            3
        ),
        [
            "2024-11-03T01:00:00-04:00[America/New_York]",
            "2024-11-03T02:00:00-05:00[America/New_York]",
            "2024-11-04T01:00:00-05:00[America/New_York]",
        ]
    );
    assert_eq!(
        occurrences(
            "30 2 * * *",
            BERLIN,
            "2024-10-26T12:00:00+02:00[Europe/Berlin]",
            2
        ),
        [
            "2024-10-27T02:30:00+02:00[Europe/Berlin]",
            "2024-10-28T02:30:00+01:00[Europe/Berlin]",
        ]
    );
    // Searching back from the second pass finds the first.
    assert_eq!(
        latest(
            "30 1 * * *",
            NY,
            "2024-11-03T01:45:00-05:00[America/New_York]"
        ),
        "2024-11-03T01:30:00-04:00[America/New_York]"
    );
}

#[test]
fn a_wildcard_or_stepped_hour_fires_in_both_passes() {
    assert_eq!(
        occurrences(
            "30 * * * *",
            NY,
            "2024-11-03T00:00:00-04:00[America/New_York]",
            4
        ),
        [
            "2024-11-03T00:30:00-04:00[America/New_York]",
            "2024-11-03T01:30:00-04:00[America/New_York]",
            "2024-11-03T01:30:00-05:00[America/New_York]",
            "2024-11-03T02:30:00-05:00[America/New_York]",
        ]
    );
    // From inside the first pass, the next occurrence is in the second pass, at an
    // earlier wall-clock time.
    assert_eq!(
        occurrences(
            "30 * * * *",
            NY,
            "2024-11-03T01:45:00-04:00[America/New_York]",
            1
        ),
        ["2024-11-03T01:30:00-05:00[America/New_York]"]
    );
    assert_eq!(
        occurrences(
            "30 */2 * * *",
            BERLIN,
            "2024-10-27T01:00:00+02:00[Europe/Berlin]",
            3
        ),
        [
            "2024-10-27T02:30:00+02:00[Europe/Berlin]",
            "2024-10-27T02:30:00+01:00[Europe/Berlin]",
            "2024-10-27T04:30:00+01:00[Europe/Berlin]",
        ]
    );
    // Backwards from the second pass before its match: the first pass's.
    assert_eq!(
        latest(
            "30 * * * *",
            NY,
            "2024-11-03T01:15:00-05:00[America/New_York]"
        ),
        "2024-11-03T01:30:00-04:00[America/New_York]"
    );
    assert_eq!(
        latest(
            "30 * * * *",
            NY,
            "2024-11-03T01:45:00-05:00[America/New_York]"
        ),
        "2024-11-03T01:30:00-05:00[America/New_York]"
    );
}

#[test]
fn windows_across_a_repeated_hour() {
    // Opened at 01:30 EDT for an hour of elapsed time: closed at 01:30 EST.
    let s = lasting("fold", "30 1 * * *", 3600, NY);
    assert!(open_at(&s, "2024-11-03T01:59:59-04:00[America/New_York]"));
    assert!(open_at(&s, "2024-11-03T01:15:00-05:00[America/New_York]"));
    assert!(!open_at(&s, "2024-11-03T01:30:00-05:00[America/New_York]"));
    assert!(!open_at(&s, "2024-11-03T01:45:00-05:00[America/New_York]"));
    // With an end at 02:00 on the wall clock: two hours of elapsed time.
    let s = window("fold", "0 1 * * *", "0 2 * * *", NY);
    assert!(open_at(&s, "2024-11-03T01:59:59-05:00[America/New_York]"));
    assert!(!open_at(&s, "2024-11-03T02:00:00-05:00[America/New_York]"));
    assert_eq!(
        until(&s, "2024-11-03T01:10:00-04:00[America/New_York]").as_deref(),
        Some("2024-11-03T02:00:00-05:00[America/New_York]")
    );
}

/// What croner does on its own with a zoned search (`jiff::Zoned`), which this module
/// does not use: interval patterns skip a gap, and a fixed hour with stepped minutes
/// fires in both passes of a repeated hour (its job type looks at seconds, minutes and
/// hours together). Kept as a test so that a croner upgrade that changes it is noticed.
#[test]
fn croner_native_zoned_rules_differ_from_ours() {
    let native = |expr: &str, from: &str, n: usize| -> Vec<String> {
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(expr)
            .unwrap();
        let mut t: jiff::Zoned = from.parse().unwrap();
        let mut out = Vec::new();
        for _ in 0..n {
            t = cron.find_next_occurrence(&t, false).unwrap();
            out.push(t.to_string());
        }
        out
    };
    // Gap: croner skips 02:30 for an hourly pattern; we fire it at 03:00.
    assert_eq!(
        native(
            "30 * * * *",
            "2024-03-10T01:00:00-05:00[America/New_York]",
            2
        ),
        [
            "2024-03-10T01:30:00-05:00[America/New_York]",
            "2024-03-10T03:30:00-04:00[America/New_York]",
        ]
    );
    // Gap, fixed time: both carry it to 03:00.
    assert_eq!(
        native(
            "30 2 * * *",
            "2024-03-10T00:00:00-05:00[America/New_York]",
            1
        ),
        ["2024-03-10T03:00:00-04:00[America/New_York]"]
    );
    // Overlap, fixed hour with stepped minutes: croner fires in both passes; we, once.
    assert_eq!(
        native(
            "*/30 1 * * *",
            "2024-11-03T00:00:00-04:00[America/New_York]",
            4
        ),
        [
            "2024-11-03T01:00:00-04:00[America/New_York]",
            "2024-11-03T01:30:00-04:00[America/New_York]",
            "2024-11-03T01:00:00-05:00[America/New_York]",
            "2024-11-03T01:30:00-05:00[America/New_York]",
        ]
    );
    assert_eq!(
        occurrences(
            "*/30 1 * * *",
            NY,
            "2024-11-03T00:00:00-04:00[America/New_York]",
            3
        ),
        [
            "2024-11-03T01:00:00-04:00[America/New_York]",
            "2024-11-03T01:30:00-04:00[America/New_York]",
            "2024-11-04T01:00:00-05:00[America/New_York]",
        ]
    );
    // Overlap, fixed time: both fire once, in the first pass.
    assert_eq!(
        native(
            "30 1 * * *",
            "2024-11-03T00:00:00-04:00[America/New_York]",
            2
        ),
        [
            "2024-11-03T01:30:00-04:00[America/New_York]",
            "2024-11-04T01:30:00-05:00[America/New_York]",
        ]
    );
}

/// Cost probe (debug build numbers; `cargo test -- --ignored --nocapture cost`).
#[test]
#[ignore]
fn cost() {
    use std::time::Instant;
    let spec: Vec<Schedule> = (0..32)
        .map(|i| Schedule {
            name: format!("s{i}"),
            start: format!("{} {} * * MON-FRI", i % 60, 6 + i % 12),
            end: (i % 2 == 0).then(|| format!("{} {} * * *", (i * 7) % 60, 18 + i % 5)),
            duration: (i % 2 == 1).then(|| Duration::from_secs(3600 * (1 + i as u64 % 5))),
            time_zone: [NY, BERLIN, "UTC", "Asia/Tokyo"][i % 4].to_owned(),
            min_replicas: Some(2 + i as i32),
            max_replicas: None,
        })
        .collect();
    let t0 = Instant::now();
    let n = 100;
    for _ in 0..n {
        compile(&spec).unwrap();
    }
    println!("compile 32 schedules: {:?} each", t0.elapsed() / n);
    let t0 = Instant::now();
    for _ in 0..n {
        for z in [NY, BERLIN, "UTC", "Asia/Tokyo"] {
            time_zone(z).unwrap();
        }
    }
    println!(
        "  of which one time zone lookup: {:?}",
        t0.elapsed() / (4 * n)
    );
    let t0 = Instant::now();
    for _ in 0..n {
        pattern("0 9 * * MON-FRI").unwrap();
    }
    println!("  of which one cron parse: {:?}", t0.elapsed() / n);
    let all = compile(&spec).unwrap();
    let now = at("2024-11-03T01:30:00-04:00[America/New_York]");
    let t0 = Instant::now();
    for k in 0..n {
        let _ = all.in_force(Time::from_unix_millis(
            now.unix_millis() + i64::from(k) * 97_000,
        ));
    }
    println!("in_force 32 schedules: {:?} each", t0.elapsed() / n);
    let dense = compile(&[lasting("dense", "*/5 * * * *", 600, "UTC")]).unwrap();
    let t0 = Instant::now();
    let f = dense.in_force(at("2024-06-03T12:01:00Z"));
    println!(
        "in_force, a chain of 512 windows: {:?} (until {:?})",
        t0.elapsed(),
        f.until
    );
    let t0 = Instant::now();
    assert!(pattern("0 0 31 2 *").is_err());
    println!("rejecting a never-firing pattern: {:?}", t0.elapsed());
    let every = compile(&[lasting("fold", "* * * * *", 60, NY)]).unwrap();
    let t0 = Instant::now();
    let _ = every.in_force(at("2024-11-03T01:59:30-04:00[America/New_York]"));
    println!(
        "in_force, every minute at the end of a first pass: {:?}",
        t0.elapsed()
    );
}

// --- several schedules and the spec's bounds ---

fn bounded(name: &str, min: Option<i32>, max: Option<i32>) -> Schedule {
    Schedule {
        min_replicas: min,
        max_replicas: max,
        ..window(name, "0 0 * * *", "59 23 * * *", "UTC")
    }
}

#[test]
fn open_schedules_combine_and_the_floor_wins_a_conflict() {
    let all = compiled(&[
        bounded("a", Some(4), None),
        bounded("b", Some(8), Some(20)),
        bounded("c", None, Some(6)),
        bounded("d", Some(8), None),
    ]);
    let f = all.in_force(at("2024-06-03T12:00:00Z"));
    assert_eq!((f.floor, f.ceiling), (Some(8), Some(6)));
    assert_eq!(f.applied, ["a", "b", "c", "d"]);
    assert_eq!(f.floor_by, ["b", "d"]);
    assert_eq!(f.ceiling_by, ["c"]);
    assert!(f.conflict);
    assert_eq!(
        f.until_local.as_deref(),
        Some("2024-06-03T23:59:00+00:00[UTC]")
    );
    let b = f.bounds(2, 50);
    assert_eq!(
        b,
        ScheduledBounds {
            min: 8,
            max: 8,
            min_by_schedule: true,
            max_by_schedule: true,
            conflict: true
        }
    );
    let (reason, message) = f.relabel(ConditionReason::TooManyReplicas, &b).unwrap();
    assert_eq!(reason, ConditionReason::ScheduleConflict);
    assert_eq!(
        message,
        "the floor 8 of schedules \"b\", \"d\" is above the ceiling 6 of schedule \"c\"; \
         the floor wins, holding the count at 8 until 2024-06-03T23:59:00+00:00[UTC]"
    );
    // Outside every window nothing is in force.
    let f = all.in_force(at("2024-06-03T23:59:30Z"));
    assert!(f.is_empty());
    assert_eq!(f.bounds(2, 50).min, 2);
}

#[test]
fn the_spec_bounds_cap_the_schedules() {
    let f = |floor, ceiling| InForce {
        floor,
        ceiling,
        floor_by: vec!["f".into()],
        ceiling_by: vec!["c".into()],
        applied: vec!["f".into(), "c".into()],
        ..InForce::default()
    };
    // The floor never goes above the spec's maximum.
    let b = f(Some(80), None).bounds(2, 50);
    assert_eq!(
        (b.min, b.max, b.min_by_schedule, b.max_by_schedule),
        (50, 50, true, false)
    );
    // A floor below the spec's minimum does nothing.
    let b = f(Some(1), None).bounds(2, 50);
    assert_eq!((b.min, b.min_by_schedule), (2, false));
    // The ceiling never goes below the minimum in force, nor raises the maximum.
    let b = f(None, Some(1)).bounds(2, 50);
    assert_eq!(
        (b.min, b.max, b.max_by_schedule, b.conflict),
        (2, 2, true, false)
    );
    let b = f(None, Some(80)).bounds(2, 50);
    assert_eq!((b.max, b.max_by_schedule), (50, false));
    // A floor capped at the spec's maximum no longer conflicts with a ceiling above it.
    let b = f(Some(80), Some(60)).bounds(2, 50);
    assert_eq!((b.min, b.max, b.conflict), (50, 50, false));
    // Scale to zero: a floor of 0 changes nothing; a floor of 1 lifts the minimum.
    assert_eq!(f(Some(0), None).bounds(0, 5).min, 0);
    assert_eq!(f(Some(1), None).bounds(0, 5).min, 1);
    // Properties: within the spec's bounds, min <= max.
    for spec_min in 0..4 {
        for spec_max in spec_min.max(1)..6 {
            for floor in [None, Some(0), Some(2), Some(5), Some(9)] {
                for ceiling in [None, Some(1), Some(3), Some(7)] {
                    let b = f(floor, ceiling).bounds(spec_min, spec_max);
                    assert!(
                        spec_min <= b.min && b.min <= b.max && b.max <= spec_max,
                        "{b:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn reasons_and_messages_name_the_schedule_and_until_when() {
    let all = compiled(&[Schedule {
        max_replicas: Some(3),
        min_replicas: None,
        ..window("nights", "0 22 * * *", "0 6 * * *", BERLIN)
    }]);
    let f = all.in_force(at("2024-06-03T23:00:00+02:00[Europe/Berlin]"));
    let b = f.bounds(1, 10);
    let (reason, message) = f.relabel(ConditionReason::TooManyReplicas, &b).unwrap();
    assert_eq!(reason, ConditionReason::ScheduledMaximum);
    assert_eq!(
        message,
        "the desired replica count is more than the maximum replica count 3 set by \
         schedule \"nights\" until 2024-06-04T06:00:00+02:00[Europe/Berlin]"
    );
    assert_eq!(f.relabel(ConditionReason::TooFewReplicas, &b), None);
    assert_eq!(f.relabel(ConditionReason::ScaleUpLimit, &b), None);
    assert_eq!(
        f.rescale_reason(false, &b).as_deref(),
        Some("Current number of replicas above the scheduled maximum 3 (schedule \"nights\")")
    );
    assert_eq!(f.rescale_reason(true, &b), None);
    let r = f.report(&b);
    assert_eq!((r.min_replicas, r.max_replicas), (1, 3));
    assert_eq!(r.until, Some(at("2024-06-04T04:00:00Z")));
    let json = serde_json::to_string(&r).unwrap();
    assert!(json.contains("\"until\":1717473600000"), "{json}");
    assert_eq!(serde_json::from_str::<ScheduleReport>(&json).unwrap(), r);

    let floor = compiled(&[lasting("peak", "0 8 * * *", 4 * 3600, NY)]);
    let f = floor.in_force(at("2024-06-03T09:00:00-04:00[America/New_York]"));
    let b = f.bounds(2, 20);
    let (reason, message) = f.relabel(ConditionReason::TooFewReplicas, &b).unwrap();
    assert_eq!(reason, ConditionReason::ScheduledMinimum);
    assert_eq!(
        message,
        "the desired replica count is less than the minimum replica count 10 set by \
         schedule \"peak\" until 2024-06-03T12:00:00-04:00[America/New_York]"
    );
    assert_eq!(
        f.rescale_reason(true, &b).as_deref(),
        Some("Current number of replicas below the scheduled minimum 10 (schedule \"peak\")")
    );
}

#[test]
fn until_is_the_earliest_change_of_any_schedule() {
    let all = compiled(&[
        window("long", "0 8 * * *", "0 20 * * *", "UTC"),
        lasting("later", "0 15 * * *", 600, "UTC"),
        window("tokyo", "0 9 * * *", "0 16 * * *", "Asia/Tokyo"),
    ]);
    let f = all.in_force(at("2024-06-03T12:00:00Z"));
    assert_eq!(f.applied, ["long"]);
    assert_eq!(
        f.until_local.as_deref(),
        Some("2024-06-03T15:00:00+00:00[UTC]"),
        "the next opening of another schedule"
    );
    let f = all.in_force(at("2024-06-03T06:00:00Z")); // 15:00 in Tokyo
    assert_eq!(f.applied, ["tokyo"]);
    assert_eq!(
        f.until_local.as_deref(),
        Some("2024-06-03T16:00:00+09:00[Asia/Tokyo]")
    );
}

#[test]
fn instants_between_milliseconds_and_outside_the_zone_rules() {
    let s = window("w", "0 9 * * *", "0 17 * * *", "UTC");
    let all = compiled(std::slice::from_ref(&s));
    // 16:59:59.999 and a bit: still open; 17:00:00 plus nanoseconds: closed.
    let t = at("2024-06-03T16:59:59.999Z");
    assert!(!all.in_force(t).is_empty());
    let t = Time::from_unix_nanos(at("2024-06-03T17:00:00Z").unix_nanos() + 500);
    assert!(all.in_force(t).is_empty());
    // Go's zero time, and far beyond jiff's range: nothing in force, no panic.
    assert!(
        all.in_force(Time::from_unix_millis(-62_135_596_800_000))
            .until
            .is_some()
    );
    assert!(all.in_force(Time::from_unix_millis(i64::MAX)).is_empty());
}

// --- validation ---

#[test]
fn bad_input_names_its_field() {
    let good = window("ok", "0 9 * * *", "0 17 * * *", "UTC");
    assert!(violations(std::slice::from_ref(&good)).is_empty());
    let cases: Vec<(Schedule, &str)> = vec![
        (
            Schedule {
                start: "0 9 * *".into(),
                ..good.clone()
            },
            "schedules[0].start: not a 5-field cron expression: ",
        ),
        (
            Schedule {
                start: "0 0 9 * * *".into(),
                ..good.clone()
            },
            "schedules[0].start: not a 5-field cron expression: Invalid pattern: Pattern must have 5 fields when seconds are disallowed.",
        ),
        (
            Schedule {
                start: "61 9 * * *".into(),
                ..good.clone()
            },
            "schedules[0].start: not a 5-field cron expression: ",
        ),
        (
            Schedule {
                start: "0 0 30 2 *".into(),
                ..good.clone()
            },
            "schedules[0].start: never fires: no day of a 28-year calendar cycle matches",
        ),
        (
            Schedule {
                start: " ".into(),
                ..good.clone()
            },
            "schedules[0].start: must not be empty",
        ),
        (
            Schedule {
                end: Some("0 9 * * *".into()),
                ..good.clone()
            },
            "schedules[0].end: must differ from start",
        ),
        (
            Schedule {
                end: Some("bogus".into()),
                ..good.clone()
            },
            "schedules[0].end: not a 5-field cron expression",
        ),
        (
            Schedule {
                end: None,
                ..good.clone()
            },
            "schedules[0]: must set end or duration",
        ),
        (
            Schedule {
                duration: Some(Duration::from_secs(60)),
                ..good.clone()
            },
            "schedules[0].duration: must not be set together with end",
        ),
        (
            Schedule {
                end: None,
                duration: Some(Duration::ZERO),
                ..good.clone()
            },
            "schedules[0].duration: must be greater than 0",
        ),
        (
            Schedule {
                end: None,
                duration: Some(Duration::from_millis(1500)),
                ..good.clone()
            },
            "schedules[0].duration: must be a whole number of seconds",
        ),
        (
            Schedule {
                end: None,
                duration: Some(Duration::from_secs(367 * 86_400)),
                ..good.clone()
            },
            "schedules[0].duration: must be at most 366 days",
        ),
        (
            Schedule {
                time_zone: "Mars/Olympus_Mons".into(),
                ..good.clone()
            },
            "schedules[0].time_zone: unknown time zone \"Mars/Olympus_Mons\"",
        ),
        (
            Schedule {
                time_zone: "Etc/Unknown".into(),
                ..good.clone()
            },
            "schedules[0].time_zone: unknown time zone",
        ),
        (
            Schedule {
                time_zone: String::new(),
                ..good.clone()
            },
            "schedules[0].time_zone: must be set",
        ),
        (
            Schedule {
                min_replicas: None,
                max_replicas: None,
                ..good.clone()
            },
            "schedules[0]: must set min_replicas, max_replicas or both",
        ),
        (
            Schedule {
                min_replicas: Some(-1),
                ..good.clone()
            },
            "schedules[0].min_replicas: must not be negative",
        ),
        (
            Schedule {
                max_replicas: Some(0),
                ..good.clone()
            },
            "schedules[0].max_replicas: must be greater than or equal to 1",
        ),
        (
            Schedule {
                min_replicas: Some(5),
                max_replicas: Some(4),
                ..good.clone()
            },
            "schedules[0].max_replicas: must be greater than or equal to min_replicas",
        ),
        (
            Schedule {
                name: String::new(),
                ..good.clone()
            },
            "schedules[0].name: must not be empty",
        ),
        (
            Schedule {
                name: "a b".into(),
                ..good.clone()
            },
            "schedules[0].name: must be at most 63",
        ),
        (
            Schedule {
                name: "x".repeat(64),
                ..good.clone()
            },
            "schedules[0].name: must be at most 63",
        ),
    ];
    for (s, expected) in cases {
        let got = violations(std::slice::from_ref(&s));
        assert_eq!(got.len(), 1, "{s:?}: {got:?}");
        assert!(got[0].starts_with(expected), "{s:?}: {got:?} vs {expected}");
    }
    // Duplicates name the later one; every violation is reported, in order.
    let got = violations(&[
        good.clone(),
        Schedule {
            start: "x".into(),
            time_zone: "Nowhere".into(),
            ..good.clone()
        },
    ]);
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got[0].starts_with("schedules[1].name: duplicate schedule name"));
    assert!(got[1].starts_with("schedules[1].start: "));
    assert!(got[2].starts_with("schedules[1].time_zone: "));
    // Too many: one violation, nothing parsed.
    let many: Vec<Schedule> = (0..33)
        .map(|i| Schedule {
            name: format!("s{i}"),
            start: "not cron".into(),
            ..good.clone()
        })
        .collect();
    assert_eq!(
        violations(&many),
        ["schedules: 33 schedules exceed the limit of 32"]
    );
    // The validator's prefix.
    let e = validate(
        &[Schedule {
            max_replicas: Some(0),
            ..good.clone()
        }],
        "spec.",
    )
    .unwrap_err();
    assert_eq!(e.field, "spec.schedules[0].max_replicas");
    assert!(validate(&[], "spec.").is_ok());
}

#[test]
fn what_croner_accepts_beyond_the_five_numeric_fields() {
    for ok in [
        "@daily",
        "0 9 * * MON-FRI",
        "0 9 L * *",
        "0 9 * * 5#L",
        "0 9 15W * *",
        "0 9 1 * +MON",
        "0 */2 * * *",
        "0 9 ? * *",
    ] {
        assert!(pattern(ok).is_ok(), "{ok}");
    }
    for bad in ["@reboot", "0/10 * * * *", "* * * * * *", "0 24 * * *"] {
        assert!(pattern(bad).is_err(), "{bad}");
    }
    assert!(pattern("0 9 29 2 *").is_ok(), "leap days fire");
    assert!(
        pattern("0 9 29 2 +MON").is_ok(),
        "a Monday leap day fires (2016, 2044)"
    );
}

#[test]
fn a_schedule_reads_and_writes_as_json_with_defaults() {
    let s: Schedule = serde_json::from_str(
        r#"{"name":"n","start":"0 9 * * *","time_zone":"UTC","duration":{"secs":3600,"nanos":0},"min_replicas":3}"#,
    )
    .unwrap();
    assert_eq!(s.end, None);
    assert_eq!(s.max_replicas, None);
    assert_eq!(s.duration, Some(Duration::from_secs(3600)));
    assert!(compile(&[s]).is_ok());
}
