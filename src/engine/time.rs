//! Instants and durations as the engine sees them. The engine never reads a clock: the caller
//! passes `now`. Milliseconds since the Unix epoch in an `i64` reach far enough back for Go's
//! zero time (year 1), which upstream fixtures and Go clients leave in unset timestamps.

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
