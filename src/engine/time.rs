//! Instants and durations as the engine sees them. The engine never reads a clock: the caller
//! passes `now`. Milliseconds since the Unix epoch in an `i64` reach far enough back for Go's
//! zero time (year 1), which upstream fixtures and Go clients leave in unset timestamps.
//!
//! # Why the VPA has its own instant (`vpa::time::Timestamp`)
//!
//! One nanosecond instant for both engines (issue 15) was tried on paper and left out, because
//! with an `i64` it changes what the HPA side does today:
//!
//! * range: `i64` nanoseconds span 1677..2262. The HPA wire accepts 0001-01-01 ..
//!   9999-12-31 (`api::convert::wire::timestamp`) and echoes the evaluation time it used; the
//!   conformance fixtures hold Go's zero time (year 1). Saturating those to 1677 or 2262
//!   changes responses and stored records; rejecting them changes which requests are valid.
//! * arithmetic: the HPA adds durations truncated to whole milliseconds (`plus`, `minus`); a
//!   nanosecond `plus` would move sub-millisecond comparisons (a 1.5 ms readiness delay).
//! * serde: HPA times are read from legacy JSON records as milliseconds (`store::sled`), VPA
//!   times are stored as nanoseconds (`VerticalState`); one type has one `Serialize`.
//!
//! Unifying needs an `i128` (or seconds + nanos) instant with a millisecond view for the HPA
//! and `#[serde(with)]` adapters on every stored field of one side: a change across the store
//! and both engines, to be made together with the store's record work.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// An instant, in milliseconds since 1970-01-01T00:00:00Z (negative before it).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Time(i64);

impl Time {
    /// The instant `millis` milliseconds after the Unix epoch.
    pub const fn from_unix_millis(millis: i64) -> Self {
        Time(millis)
    }

    /// The instant `secs` seconds after the Unix epoch (saturating).
    pub const fn from_unix_secs(secs: i64) -> Self {
        Time(secs.saturating_mul(1000))
    }

    /// Milliseconds since the Unix epoch.
    pub const fn unix_millis(self) -> i64 {
        self.0
    }

    /// `self + d`, saturating at the ends of the range.
    pub fn plus(self, d: Duration) -> Self {
        Time(self.0.saturating_add(duration_millis(d)))
    }

    /// `self - d`, saturating at the ends of the range.
    pub fn minus(self, d: Duration) -> Self {
        Time(self.0.saturating_sub(duration_millis(d)))
    }

    /// `self + secs` seconds (negative allowed), saturating.
    pub fn plus_secs(self, secs: i64) -> Self {
        Time(self.0.saturating_add(secs.saturating_mul(1000)))
    }
}

/// A duration in whole milliseconds, saturating at `i64::MAX`.
pub fn duration_millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
