//! What every direction and RPC shares: the collection of field violations, their paths, and
//! the wire's scalars (target keys, timestamps, durations) with their ranges.

use std::{fmt, time::Duration};

use prost_types::{Duration as PbDuration, Timestamp};

use crate::{
    engine::{error::InvalidInput, time::Time},
    limits::Limits,
    status::ApiError,
};

/// `0001-01-01T00:00:00Z` (Go's zero time, which Go clients send for unset times).
const MIN_TIMESTAMP_SECONDS: i64 = -62_135_596_800;
/// `9999-12-31T23:59:59Z`.
const MAX_TIMESTAMP_SECONDS: i64 = 253_402_300_799;

/// Collects field violations.
#[derive(Debug, Default)]
pub struct Violations(pub(crate) Vec<InvalidInput>);

impl Violations {
    /// Whether no violation was added.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A violation of `field`.
    pub fn add(&mut self, field: impl Into<String>, description: impl Into<String>) {
        self.0.push(InvalidInput::new(field, description));
    }

    /// An engine violation under the wire `prefix`, in the wire's names.
    pub(crate) fn engine(&mut self, prefix: &str, e: InvalidInput) {
        self.0.push(InvalidInput::new(
            wire_field(prefix, &e.field),
            e.description,
        ));
    }

    /// `value` when nothing was added, else INVALID_ARGUMENT with every violation.
    pub fn into_result<T>(self, value: T) -> Result<T, ApiError> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(ApiError::InvalidArgument(self.0))
        }
    }
}

/// An engine path (`metrics[0].target.average_value`) as the wire names it under `prefix`
/// (`spec.metrics[0].target.average_value_milli`): the wire carries quantities in milli-units
/// and says so in the field name.
pub(crate) fn wire_field(prefix: &str, engine: &str) -> String {
    let mut field = format!("{prefix}{engine}");
    if field.ends_with(".target.average_value") || field.ends_with(".target.value") {
        field.push_str("_milli");
    }
    field
}

/// A field path, formatted only when a violation names it. Every request carries a path per
/// pod, sample and timestamp; formatting them all up front (`format!("pods[{i}]...")`) cost
/// more instructions than the rest of the conversion, for strings almost never used.
#[derive(Clone, Copy, Debug)]
pub(crate) enum FieldPath<'a> {
    /// A top-level field: `pods`.
    Root(&'static str),
    /// `parent.name`.
    Field(&'a FieldPath<'a>, &'static str),
    /// `parent[i]`.
    Index(&'a FieldPath<'a>, usize),
    /// `parent[key]`.
    Key(&'a FieldPath<'a>, &'a str),
}

impl<'a> FieldPath<'a> {
    pub(crate) fn field(&'a self, name: &'static str) -> FieldPath<'a> {
        FieldPath::Field(self, name)
    }

    pub(crate) fn index(&'a self, i: usize) -> FieldPath<'a> {
        FieldPath::Index(self, i)
    }

    pub(crate) fn key(&'a self, key: &'a str) -> FieldPath<'a> {
        FieldPath::Key(self, key)
    }
}

impl fmt::Display for FieldPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldPath::Root(name) => f.write_str(name),
            FieldPath::Field(parent, name) => write!(f, "{parent}.{name}"),
            FieldPath::Index(parent, i) => write!(f, "{parent}[{i}]"),
            FieldPath::Key(parent, key) => write!(f, "{parent}[{key}]"),
        }
    }
}

/// Checks a target key: non-empty, at most `max_key_bytes`, no control characters (the store
/// uses `0x00` as a key separator).
pub fn target_key(key: &str, limits: &Limits) -> Result<(), ApiError> {
    let mut v = Violations::default();
    check_target_key(&mut v, key, limits);
    v.into_result(())
}

/// Checks a target key at `target_key` (1 to `--max-key-bytes` bytes, no control characters).
pub fn check_target_key(v: &mut Violations, key: &str, limits: &Limits) {
    if key.is_empty() {
        v.add("target_key", "must not be empty");
    } else if key.len() > limits.max_key_bytes {
        v.add(
            "target_key",
            format!(
                "must be at most {} bytes, got {}",
                limits.max_key_bytes,
                key.len()
            ),
        );
    } else if key.chars().any(char::is_control) {
        v.add("target_key", "must not contain control characters");
    }
}

/// A protobuf `Timestamp` within 0001-01-01 … 9999-12-31 with nanos in range, as milliseconds.
pub fn timestamp(v: &mut Violations, path: impl fmt::Display, t: &Timestamp) -> Option<Time> {
    if !(0..1_000_000_000).contains(&t.nanos) {
        v.add(path.to_string(), "nanos must be between 0 and 999999999");
        return None;
    }
    if !(MIN_TIMESTAMP_SECONDS..=MAX_TIMESTAMP_SECONDS).contains(&t.seconds) {
        v.add(
            path.to_string(),
            "must be between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z",
        );
        return None;
    }
    // In range: seconds × 1000 is far from overflow.
    Some(Time::from_unix_millis(
        t.seconds * 1000 + i64::from(t.nanos / 1_000_000),
    ))
}

/// A non-negative protobuf `Duration`.
pub fn duration(v: &mut Violations, path: impl fmt::Display, d: &PbDuration) -> Option<Duration> {
    if d.seconds < 0 || d.nanos < 0 {
        v.add(path.to_string(), "must not be negative");
        return None;
    }
    if d.nanos >= 1_000_000_000 {
        v.add(path.to_string(), "nanos must be between 0 and 999999999");
        return None;
    }
    // proto3 Duration's own range: ±10 000 years.
    if d.seconds > 315_576_000_000 {
        v.add(path.to_string(), "must be at most 10000 years");
        return None;
    }
    Some(Duration::new(d.seconds as u64, d.nanos as u32))
}

/// An engine rejection, with its field renamed to the proto path where they differ (the
/// engine calls the settings `settings.*`; on the wire they are `spec.settings.*`).
pub fn engine_invalid(e: InvalidInput) -> ApiError {
    let field = if e.field.starts_with("settings.") {
        format!("spec.{}", e.field)
    } else {
        wire_field("", &e.field)
    };
    ApiError::InvalidArgument(vec![InvalidInput::new(field, e.description)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::to_timestamp;

    #[test]
    fn timestamps_round_trip_including_before_1970() {
        for ms in [-62_135_596_800_000, -1, 0, 1, 1_700_000_000_123] {
            let t = Time::from_unix_millis(ms);
            let mut v = Violations::default();
            assert_eq!(timestamp(&mut v, "t", &to_timestamp(t)), Some(t));
            assert!(v.0.is_empty());
        }
    }
}
