//! Go's `time.Time` arithmetic that the VPA's decaying histogram depends on, over [`Time`]
//! (whose nanosecond view the VPA uses: [`Time::from_unix_nanos`], [`Time::unix_nanos`]).
//!
//! The engine never reads a clock. Upstream uses Go's `time.Time`, whose zero value
//! (0001-01-01T00:00:00Z) doubles as "unset" and is the origin of `time.Round`; both quirks
//! matter for the decaying histogram (`util/decaying_histogram.go`), so the helpers that need
//! them live here and compute in `i128` (the zero time is ~6.2e19 ns before 1970, outside `i64`).

use super::Time;

/// Nanoseconds in one second.
pub const NANOS_PER_SECOND: i64 = 1_000_000_000;

/// Go's zero time (0001-01-01T00:00:00Z) in seconds relative to the Unix epoch.
pub const GO_ZERO_UNIX_SECONDS: i64 = -62_135_596_800;

/// Nanoseconds since Go's zero time; `None` is the zero time itself (Go's "unset").
pub(crate) fn go_offset(t: Option<Time>) -> i128 {
    match t {
        None => 0,
        Some(t) => {
            i128::from(t.unix_nanos())
                - i128::from(GO_ZERO_UNIX_SECONDS) * i128::from(NANOS_PER_SECOND)
        }
    }
}

/// Go's `a.Sub(b)`: the difference in nanoseconds, saturated to the `int64` range.
pub(crate) fn go_sub(a: Option<Time>, b: Option<Time>) -> i64 {
    let d = go_offset(a) - go_offset(b);
    i64::try_from(d).unwrap_or(if d < 0 { i64::MIN } else { i64::MAX })
}

/// Go's `t.Round(d)`: the nearest multiple of `d` counted from the zero time, halfway rounding
/// up. `d <= 0` leaves `t` unchanged. Saturates at the ends of the `Time` range.
pub(crate) fn go_round(t: Time, d: i64) -> Time {
    if d <= 0 {
        return t;
    }
    let offset = go_offset(Some(t));
    let d = i128::from(d);
    let r = offset.rem_euclid(d);
    let rounded = if r + r < d {
        offset - r
    } else {
        offset + (d - r)
    };
    let unix = rounded + i128::from(GO_ZERO_UNIX_SECONDS) * i128::from(NANOS_PER_SECOND);
    Time::from_unix_nanos(i64::try_from(unix).unwrap_or(if unix < 0 { i64::MIN } else { i64::MAX }))
}

/// A `std::time::Duration` as `i64` nanoseconds, saturating (every engine duration is
/// validated far below the limit of ~292 years).
pub fn duration_nanos(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_to_day_is_utc_midnight_and_halfway_rounds_up() {
        let day = 86_400 * NANOS_PER_SECOND;
        // 2024-01-01T00:00:00Z = 1704067200.
        let midnight = Time::from_unix_seconds(1_704_067_200);
        assert_eq!(go_round(midnight.saturating_add_nanos(1), day), midnight);
        assert_eq!(
            go_round(midnight.saturating_add_nanos(day / 2), day),
            midnight.saturating_add_nanos(day)
        );
        assert_eq!(
            go_round(midnight.saturating_add_nanos(day / 2 - 1), day),
            midnight
        );
    }

    #[test]
    fn sub_from_zero_time_saturates() {
        let t = Time::from_unix_seconds(0);
        assert_eq!(go_sub(None, Some(t)), i64::MIN);
        assert_eq!(go_sub(Some(t), None), i64::MAX);
    }
}
