//! The one request clock. Only `api` reads the system clock: once per request to validate it,
//! and for a Recommend again under the target's lock (`api::commit`), then `now` is passed
//! down to the engines, which never read a clock.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::engine::time::Time;

/// Nanoseconds since the Unix epoch (negative before it), saturating.
pub(crate) fn unix_nanos() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_nanos()).map_or(i64::MIN, |n| -n),
    }
}

/// The clock in the HPA engine's milliseconds (truncated toward zero, as
/// `Duration::as_millis` of the offset from the epoch).
pub(crate) fn hpa_now() -> Time {
    Time::from_unix_millis(unix_nanos() / 1_000_000)
}

/// The clock in the VPA engine's nanoseconds.
pub(crate) fn vpa_now() -> Time {
    Time::from_unix_nanos(unix_nanos())
}
