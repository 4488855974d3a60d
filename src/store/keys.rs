//! Keys. Big-endian integers preserve numeric order under sled's byte order ("We use
//! `BigEndian` for key types because they preserve lexicographic ordering", sled
//! `examples/structured.rs`), so a target's decisions are a contiguous, time-ordered range.
//!
//! * state tree: `target_key`
//! * decision tree: `target_key ++ 0x00 ++ be(time) ++ be(seq)`
//!
//! Target keys never contain `0x00` (the API rejects control characters), so the separator
//! keeps `a`'s decisions apart from `a\x01…`'s and `ab`'s.

use crate::engine::time::Time;

/// Separates the target key from the time in decision keys.
pub(crate) const SEPARATOR: u8 = 0x00;

/// The state key of a target.
pub(crate) fn state_key(target_key: &str) -> &[u8] {
    target_key.as_bytes()
}

/// The prefix shared by all decision keys of a target.
pub(crate) fn decision_prefix(target_key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(target_key.len() + 1);
    k.extend_from_slice(target_key.as_bytes());
    k.push(SEPARATOR);
    k
}

/// The decision key of a target's decision at `time` with sequence number `seq`.
pub(crate) fn decision_key(target_key: &str, time: Time, seq: u64) -> Vec<u8> {
    let mut k = decision_prefix(target_key);
    k.extend_from_slice(&order_preserving(time.unix_millis()).to_be_bytes());
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// The time of a decision key (its 16 last bytes are `be(time) ++ be(seq)`).
pub(crate) fn decision_key_time(key: &[u8]) -> Option<Time> {
    let at = key.len().checked_sub(16)?;
    let bytes: [u8; 8] = key.get(at..at + 8)?.try_into().ok()?;
    Some(Time::from_unix_millis(
        (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64,
    ))
}

/// The sequence number of a decision key.
pub(crate) fn decision_key_seq(key: &[u8]) -> Option<u64> {
    let at = key.len().checked_sub(8)?;
    Some(u64::from_be_bytes(key.get(at..)?.try_into().ok()?))
}

/// Maps `i64` onto `u64` so that unsigned order equals signed order (times before 1970 sort
/// first): flip the sign bit.
fn order_preserving(v: i64) -> u64 {
    (v as u64) ^ (1 << 63)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_keys_sort_by_time_then_seq_including_negative_times() {
        let times = [-5_000, -1, 0, 1, 1_000, i64::MAX, i64::MIN];
        let mut keys: Vec<(Vec<u8>, i64)> = times
            .iter()
            .map(|t| (decision_key("a", Time::from_unix_millis(*t), 0), *t))
            .collect();
        keys.sort();
        let sorted: Vec<i64> = keys.iter().map(|(_, t)| *t).collect();
        let mut expected = times.to_vec();
        expected.sort();
        assert_eq!(sorted, expected);
        let t = Time::from_unix_millis(7);
        assert!(decision_key("a", t, 1) < decision_key("a", t, 2));
        assert!(decision_key("a", t, u64::MAX) < decision_key("a", Time::from_unix_millis(8), 0));
    }

    #[test]
    fn time_and_seq_read_back_from_a_decision_key() {
        for t in [i64::MIN, -1, 0, 1_767_225_600_000, i64::MAX] {
            let k = decision_key("a/b", Time::from_unix_millis(t), 42);
            assert_eq!(decision_key_time(&k), Some(Time::from_unix_millis(t)));
            assert_eq!(decision_key_seq(&k), Some(42));
        }
        assert_eq!(decision_key_time(b"short"), None);
    }

    #[test]
    fn prefixes_do_not_overlap_between_keys() {
        let k = decision_key("ab", Time::from_unix_millis(0), 0);
        assert!(!k.starts_with(&decision_prefix("a")));
        assert!(k.starts_with(&decision_prefix("ab")));
    }
}
