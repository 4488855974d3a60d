//! The one engine instant ([`Time`]) and the views each engine needs of it. The engine never
//! reads a clock: the caller passes `now`.
//!
//! `Time` holds nanoseconds since the Unix epoch (as whole milliseconds and the rest), which
//! covers Go's zero time (0001-01-01T00:00:00Z, ~6.2e19 ns before 1970, outside `i64`) and
//! the whole HPA wire range (0001..9999) without saturating. The two engines keep the arithmetic their upstreams do,
//! through explicit methods, so
//! one type changes no result:
//!
//! * the HPA counts in whole milliseconds (`from_unix_millis`, `unix_millis`, `plus`, `minus`,
//!   `plus_secs`), saturating at the `i64` millisecond range, like the
//!   `time.Time`-plus-`metav1.Duration` sums of `pkg/controller/podautoscaler` once truncated
//!   to the millisecond precision of its stored records;
//! * the VPA counts in `i64` nanoseconds (`from_unix_nanos`, `unix_nanos`,
//!   `saturating_add_nanos`, `nanos_since`), saturating at 1677..2262 like Go's `Time.Add` and
//!   `Time.Sub` on the `int64` `Duration` ([`go`] keeps the Go zero-time helpers).
//!
//! `Time` deliberately has no `Serialize`/`Deserialize`: legacy HPA JSON records hold
//! milliseconds and VPA JSON holds nanoseconds, so every stored field names its unit with
//! `#[serde(with = "...")]` ([`serde_millis`], [`serde_nanos`] and their `Option` forms), and a
//! field that forgets does not compile.

pub mod go;

use std::time::Duration;

/// Nanoseconds in one millisecond.
const NANOS_PER_MILLI: i64 = 1_000_000;

/// An instant: whole milliseconds since 1970-01-01T00:00:00Z (negative before it, rounded
/// toward the past) and the nanoseconds past that millisecond (`0..1_000_000`). Together
/// they are the nanoseconds since the epoch, over more than the whole HPA wire range; apart,
/// the HPA's millisecond view is a field read, not an `i128` division (`__divti3`, tens of
/// nanoseconds, which the per-pod checks of `replicas.rs` would pay twice per pod). The
/// derived order (milliseconds, then the rest) is the order of the instants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time {
    millis: i64,
    sub_milli_nanos: u32,
}

impl Time {
    /// The instant `millis` milliseconds after the Unix epoch.
    pub const fn from_unix_millis(millis: i64) -> Self {
        Time {
            millis,
            sub_milli_nanos: 0,
        }
    }

    /// The instant `secs` seconds after the Unix epoch, saturating at the `i64` millisecond
    /// range (the HPA's constructor).
    pub const fn from_unix_secs(secs: i64) -> Self {
        Time::from_unix_millis(secs.saturating_mul(1000))
    }

    /// Whole milliseconds since the Unix epoch (rounded toward the past): the HPA's view.
    pub const fn unix_millis(self) -> i64 {
        self.millis
    }

    /// `self + d` in whole milliseconds (`d` truncated), saturating at the `i64` millisecond
    /// range: the HPA's arithmetic.
    pub fn plus(self, d: Duration) -> Self {
        Time::from_unix_millis(self.unix_millis().saturating_add(duration_millis(d)))
    }

    /// `self - d` in whole milliseconds (`d` truncated), saturating: the HPA's arithmetic.
    pub fn minus(self, d: Duration) -> Self {
        Time::from_unix_millis(self.unix_millis().saturating_sub(duration_millis(d)))
    }

    /// `self + secs` seconds (negative allowed), in milliseconds, saturating: the HPA's
    /// arithmetic.
    pub fn plus_secs(self, secs: i64) -> Self {
        Time::from_unix_millis(self.unix_millis().saturating_add(secs.saturating_mul(1000)))
    }

    /// The instant `nanos` nanoseconds after the Unix epoch (the VPA's constructor).
    pub const fn from_unix_nanos(nanos: i64) -> Self {
        Time {
            millis: nanos.div_euclid(NANOS_PER_MILLI),
            sub_milli_nanos: nanos.rem_euclid(NANOS_PER_MILLI) as u32,
        }
    }

    /// The instant `secs` seconds after the Unix epoch, saturating at the `i64` nanosecond
    /// range (1677..2262) like Go's `time.Unix(secs, 0).UnixNano()`: the VPA's constructor.
    pub const fn from_unix_seconds(secs: i64) -> Self {
        Time::from_unix_nanos(secs.saturating_mul(crate::time::go::NANOS_PER_SECOND))
    }

    /// Nanoseconds since the Unix epoch, saturating at the `i64` range: the VPA's view.
    pub const fn unix_nanos(self) -> i64 {
        match self.millis.checked_mul(NANOS_PER_MILLI) {
            // `sub_milli_nanos` is below one millisecond, so only the top can overflow.
            Some(n) => n.saturating_add(self.sub_milli_nanos as i64),
            None if self.millis < 0 => i64::MIN,
            None => i64::MAX,
        }
    }

    /// `self + nanos`, saturating at the `i64` nanosecond range: the VPA's arithmetic.
    pub const fn saturating_add_nanos(self, nanos: i64) -> Self {
        Time::from_unix_nanos(self.unix_nanos().saturating_add(nanos))
    }

    /// `self - other` in nanoseconds, saturating like Go's `Time.Sub`: the VPA's arithmetic.
    pub const fn nanos_since(self, other: Time) -> i64 {
        self.unix_nanos().saturating_sub(other.unix_nanos())
    }
}

/// A duration in whole milliseconds, saturating at `i64::MAX`.
pub fn duration_millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

macro_rules! serde_unit {
    ($name:ident, $opt:ident, $unit:literal, $to:path, $from:path) => {
        #[doc = concat!("`#[serde(with)]` for a [`Time`] stored as `i64` ", $unit, " since the Unix epoch.")]
        pub mod $name {
            use super::Time;
            use serde::{Deserialize, Deserializer, Serializer};

            /// Writes `t` as an integer.
            pub fn serialize<S: Serializer>(t: &Time, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_i64($to(*t))
            }

            /// Reads an integer.
            pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Time, D::Error> {
                i64::deserialize(d).map($from)
            }
        }

        #[doc = concat!("`#[serde(with)]` for an `Option<Time>` stored as `null` or `i64` ", $unit, "; pair it with `#[serde(default)]` so a missing field stays `None`.")]
        pub mod $opt {
            use super::Time;
            use serde::{Deserialize, Deserializer, Serializer};

            /// Writes `null` or an integer.
            pub fn serialize<S: Serializer>(t: &Option<Time>, s: S) -> Result<S::Ok, S::Error> {
                match t {
                    Some(t) => s.serialize_some(&$to(*t)),
                    None => s.serialize_none(),
                }
            }

            /// Reads `null` or an integer.
            pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Time>, D::Error> {
                Ok(Option::<i64>::deserialize(d)?.map($from))
            }
        }
    };
}

serde_unit!(
    serde_millis,
    serde_millis_option,
    "milliseconds",
    Time::unix_millis,
    Time::from_unix_millis
);
serde_unit!(
    serde_nanos,
    serde_nanos_option,
    "nanoseconds",
    Time::unix_nanos,
    Time::from_unix_nanos
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millisecond_view_keeps_the_hpa_range_and_truncation() {
        let go_zero = Time::from_unix_millis(-62_135_596_800_000);
        assert_eq!(go_zero.unix_millis(), -62_135_596_800_000);
        assert_eq!(Time::from_unix_millis(i64::MAX).unix_millis(), i64::MAX);
        let t = Time::from_unix_millis(1_000);
        assert_eq!(t.plus(Duration::from_micros(1_500)).unix_millis(), 1_001);
        assert_eq!(t.minus(Duration::from_micros(1_500)).unix_millis(), 999);
        assert_eq!(
            Time::from_unix_millis(i64::MAX).plus_secs(1).unix_millis(),
            i64::MAX
        );
    }

    #[test]
    fn nanosecond_view_saturates_at_the_i64_range() {
        assert_eq!(Time::from_unix_seconds(i64::MAX).unix_nanos(), i64::MAX);
        assert_eq!(Time::from_unix_secs(-62_135_596_800).unix_nanos(), i64::MIN);
        let t = Time::from_unix_nanos(i64::MAX - 1);
        assert_eq!(t.saturating_add_nanos(5).unix_nanos(), i64::MAX);
        assert_eq!(
            Time::from_unix_nanos(i64::MIN).nanos_since(Time::from_unix_nanos(1)),
            i64::MIN
        );
        assert_eq!(Time::from_unix_millis(3).unix_nanos(), 3_000_000);
    }

    #[test]
    fn nanoseconds_round_trip_and_order_across_the_millisecond_split() {
        let samples = [
            i64::MIN,
            -1_000_001,
            -1_000_000,
            -999_999,
            -1,
            0,
            1,
            999_999,
            1_000_000,
            i64::MAX,
        ];
        for n in samples {
            assert_eq!(Time::from_unix_nanos(n).unix_nanos(), n, "{n}");
        }
        for pair in samples.windows(2) {
            assert!(
                Time::from_unix_nanos(pair[0]) < Time::from_unix_nanos(pair[1]),
                "{pair:?}"
            );
        }
        assert_eq!(Time::from_unix_nanos(-1).unix_millis(), -1);
        assert!(Time::from_unix_millis(-1) < Time::from_unix_nanos(-1));
    }
}
