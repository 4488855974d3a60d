//! The VPA record kind: a target's recommender state (aggregations and container instances,
//! [`VpaTarget`]) and its stored overrides of the recommender's flags, as one versioned
//! record per target in its own [`Space`] (sled tree `vpa_state`, etcd prefix `vpa/`),
//! keyed by the target key. It depends only on the database traits ([`Records`]), so every
//! backend gets it.
//!
//! One record per target keeps a RecordUsage atomic (one put), and the group commit of
//! [`durability`](super::durability) covers it: its flush is the whole database's. On etcd
//! the put compares the record's `mod_revision` with the one read ([`Seen`]), so two
//! replicas cannot both build on the same previous state (the API re-reads on conflict).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{
    KeyPage, Seen, StoreError,
    db::{Records, Space},
    record,
};
use crate::engine::vpa::{
    amount::Resources,
    target::{VPA_TARGET_FORMAT_VERSION, VpaTarget},
};

/// Where the VPA records live.
pub const SPACE: Space = Space {
    tree: VERTICAL_TREE,
    etcd: "vpa/",
    kind: KIND,
};

/// The `vpa_state` tree's name.
pub const VERTICAL_TREE: &str = "vpa_state";

/// Overrides of the recommender's flags
/// ([`VpaSettings`](crate::engine::vpa::settings::VpaSettings)); `None` keeps the lower layer's
/// value (server default, or the stored override for a per-call layer). Stored with the
/// target (the last RecordUsage that carried settings); how the layers combine is API
/// policy (`api::overrides`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct VerticalOverrides {
    pub target_cpu_percentile: Option<f64>,
    pub target_memory_percentile: Option<f64>,
    pub lower_bound_cpu_percentile: Option<f64>,
    pub lower_bound_memory_percentile: Option<f64>,
    pub upper_bound_cpu_percentile: Option<f64>,
    pub upper_bound_memory_percentile: Option<f64>,
    pub safety_margin_fraction: Option<f64>,
    pub pod_min_cpu_millicores: Option<f64>,
    pub pod_min_memory_mb: Option<f64>,
    pub confidence_interval_cpu: Option<Duration>,
    pub confidence_interval_memory: Option<Duration>,
    pub cpu_histogram_decay_half_life: Option<Duration>,
    pub memory_histogram_decay_half_life: Option<Duration>,
    pub memory_aggregation_interval: Option<Duration>,
    pub memory_aggregation_interval_count: Option<i64>,
    pub oom_bump_up_ratio: Option<f64>,
    pub oom_min_bump_up_bytes: Option<f64>,
    pub round_cpu_millicores: Option<i64>,
    pub round_memory_bytes: Option<i64>,
    /// Replaces the lower layer's maximum as a whole when set.
    pub container_recommendation_max_allowed: Option<Resources>,
    pub cpu_integer_post_processor_enabled: Option<bool>,
}

/// What is kept per target on the vertical side.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VerticalState {
    /// [`VPA_TARGET_FORMAT_VERSION`] of the engine that wrote `target`.
    pub format: u32,
    /// The target's stored overrides (the last RecordUsage that carried settings).
    pub overrides: VerticalOverrides,
    /// The recommender's state.
    pub target: VpaTarget,
}

impl VerticalState {
    /// An empty state in the current format.
    pub fn new() -> Self {
        VerticalState {
            format: VPA_TARGET_FORMAT_VERSION,
            ..VerticalState::default()
        }
    }
}

/// The vertical side of the store. Writers of one target must be serialized by the caller
/// (the API's per-key locks); durability comes from the database's flush
/// ([`Db::flush`](super::Db::flush), the same database as the HPA records).
pub trait VerticalStore: super::Db {
    /// The target's vertical state, `None` if it has none.
    fn load_vertical(&self, key: &str) -> Result<Option<VerticalState>, StoreError> {
        Ok(self.load_vertical_for_update(key)?.0)
    }
    /// [`Self::load_vertical`] for a read-modify-write: also what [`Self::put_vertical_after`]
    /// needs to detect that another writer (another replica) wrote in between.
    fn load_vertical_for_update(
        &self,
        key: &str,
    ) -> Result<(Option<VerticalState>, Seen), StoreError>;
    /// Replaces the target's vertical state if it is still as `seen`, else
    /// [`StoreError::Conflict`] and nothing is written. Not durable until a later flush.
    fn put_vertical_after(
        &self,
        key: &str,
        seen: Seen,
        state: &VerticalState,
    ) -> Result<(), StoreError>;
    /// Replaces the target's vertical state unconditionally. Not durable until a later flush.
    fn put_vertical(&self, key: &str, state: &VerticalState) -> Result<(), StoreError>;
    /// Removes the target's vertical state; false if it had none.
    fn delete_vertical(&self, key: &str) -> Result<bool, StoreError>;
    /// The encoded size of the target's record in bytes (benchmarks and capacity planning).
    fn vertical_record_bytes(&self, key: &str) -> Result<Option<usize>, StoreError>;
    /// Up to `limit` keys of targets with vertical state after `after` (exclusive), in byte
    /// order.
    fn list_vertical_keys(&self, after: Option<&str>, limit: usize) -> Result<KeyPage, StoreError>;
}

/// Every backend with single-key records holds VPA records.
impl<R: Records + ?Sized> VerticalStore for R {
    fn load_vertical_for_update(
        &self,
        key: &str,
    ) -> Result<(Option<VerticalState>, Seen), StoreError> {
        match self.get_record(&SPACE, key)? {
            None => Ok((None, Seen::default())),
            Some(r) => Ok((
                Some(decode_vertical(key, &r.bytes)?),
                Seen {
                    revision: r.revision,
                    ..Seen::default()
                },
            )),
        }
    }

    fn put_vertical_after(
        &self,
        key: &str,
        seen: Seen,
        state: &VerticalState,
    ) -> Result<(), StoreError> {
        self.put_record(
            &SPACE,
            key,
            Some(seen.revision),
            encode_vertical(key, state)?,
        )
    }

    fn put_vertical(&self, key: &str, state: &VerticalState) -> Result<(), StoreError> {
        self.put_record(&SPACE, key, None, encode_vertical(key, state)?)
    }

    fn delete_vertical(&self, key: &str) -> Result<bool, StoreError> {
        self.delete_record(&SPACE, key)
    }

    fn vertical_record_bytes(&self, key: &str) -> Result<Option<usize>, StoreError> {
        Ok(self.get_record(&SPACE, key)?.map(|r| r.bytes.len()))
    }

    fn list_vertical_keys(&self, after: Option<&str>, limit: usize) -> Result<KeyPage, StoreError> {
        self.list_records(&SPACE, after, limit)
    }
}

const KIND: &str = "vpa_state";

/// Decodes a record and checks the engine format it was written with.
/// Encodes a target's vertical state as stored (the sled and etcd stores write the same bytes).
pub fn encode_vertical(key: &str, state: &VerticalState) -> Result<Vec<u8>, StoreError> {
    record::encode(KIND, key, state)
}

/// Decodes a record written by [`encode_vertical`], refusing another engine format.
pub fn decode_vertical(key: &str, bytes: &[u8]) -> Result<VerticalState, StoreError> {
    let state: VerticalState = record::decode(KIND, key, bytes)?;
    if state.format != VPA_TARGET_FORMAT_VERSION {
        return Err(StoreError::UnknownVersion {
            kind: KIND,
            key: key.to_owned(),
            version: u8::try_from(state.format).unwrap_or(u8::MAX),
            supported: u8::try_from(VPA_TARGET_FORMAT_VERSION).unwrap_or(u8::MAX),
        });
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::vpa::{
        amount::Resource,
        settings::VpaSettings,
        target::{Observation, UsageSample},
        time::Timestamp,
    };
    use crate::store::{Db, HistoryStore, SledStore, sled::SledOptions};

    #[test]
    fn state_survives_reopen_and_delete_removes_it() {
        let dir = tempfile::tempdir().unwrap();
        let settings = VpaSettings::default();
        let mut state = VerticalState::new();
        state.overrides.target_cpu_percentile = Some(0.5);
        let obs: Vec<Observation> = (0..10)
            .map(|i| {
                Observation::Usage(UsageSample {
                    pod: "p".into(),
                    container: "c".into(),
                    resource: Resource::Cpu,
                    usage: 100 + i,
                    at: Timestamp::from_unix_seconds(1_700_000_000 + i * 60),
                })
            })
            .collect();
        state.target.record_samples(
            &obs,
            None,
            &settings,
            Timestamp::from_unix_seconds(1_700_000_000),
        );
        {
            let s = SledStore::open(dir.path(), SledOptions::default()).unwrap();
            s.put_vertical("a", &state).unwrap();
            s.flush().unwrap();
        }
        let s = SledStore::open(dir.path(), SledOptions::default()).unwrap();
        assert_eq!(s.load_vertical("a").unwrap(), Some(state.clone()));
        assert_eq!(s.load_vertical("b").unwrap(), None);
        // The HPA side does not see vertical targets.
        assert!(s.list_keys(None, 10).unwrap().keys.is_empty());
        s.put_vertical("b/x", &VerticalState::new()).unwrap();
        s.put_vertical("c", &VerticalState::new()).unwrap();
        let page = s.list_vertical_keys(None, 2).unwrap();
        assert_eq!(
            (page.keys.as_slice(), page.more),
            (&["a".to_owned(), "b/x".to_owned()][..], true)
        );
        let page = s.list_vertical_keys(Some("b/x"), 2).unwrap();
        assert_eq!(
            (page.keys.as_slice(), page.more),
            (&["c".to_owned()][..], false)
        );
        assert!(s.delete_vertical("a").unwrap());
        assert!(!s.delete_vertical("a").unwrap());
        assert_eq!(s.load_vertical("a").unwrap(), None);
    }

    #[test]
    fn a_record_of_another_engine_format_is_refused_when_read() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = SledStore::open(dir.path(), SledOptions::default()).unwrap();
            let mut state = VerticalState::new();
            state.format = VPA_TARGET_FORMAT_VERSION + 1;
            s.put_vertical("a", &state).unwrap();
            s.flush().unwrap();
        }
        // Start-up reads no records; the target's read reports it, naming the key.
        let s = SledStore::open(dir.path(), SledOptions::default()).unwrap();
        let err = s.load_vertical("a").unwrap_err();
        assert!(err.to_string().contains("vpa_state"), "{err}");
        assert!(err.to_string().contains("\"a\""), "{err}");
    }
}
