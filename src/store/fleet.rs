//! The fleet record kinds: policies (named specs many targets use) and scaling groups (a
//! capacity shared by member targets, with the group's ledger), one versioned record each in
//! their own [`Space`]s (sled trees `policies` and `scaling_groups`, etcd prefixes `policies/`
//! and `groups/`), keyed by name. They depend only on the database traits ([`Records`]), so
//! every backend has them.
//!
//! A group's definition and its ledger are one record: a member's decision reads both and
//! writes the ledger back guarded by the record's revision (etcd's `mod_revision`), so two
//! replicas deciding members of one group at once cannot both spend the same units; the loser
//! reads again and decides again (the API's commit path).

pub use super::state::{ScalingGroupDef, StoredPolicy};
use super::{
    KeyPage, StoreError,
    db::{Put, Records, Space},
    record,
};

/// Where policies live.
pub(crate) const POLICIES: Space = Space {
    tree: "policies",
    etcd: "policies/",
    kind: record::fleet::POLICY,
};

/// Where scaling groups live.
pub(crate) const GROUPS: Space = Space {
    tree: "scaling_groups",
    etcd: "groups/",
    kind: record::fleet::GROUP,
};

/// Where the groups' generation lives: a value rewritten (with fresh random bytes) whenever a
/// group's definition is put or deleted, so that every replica re-reads the definitions only
/// when one changed (a member's decision rewrites a group's ledger, not its generation).
pub(crate) const META: Space = Space {
    tree: "fleet_meta",
    etcd: "fleet/",
    kind: "fleet generation",
};
const GROUPS_GENERATION: &str = "groups";

/// The policies and scaling groups of a store. Writers of one name are serialized by the
/// caller (the API's locks); on etcd a write with `if_revision` fails with
/// [`StoreError::Conflict`] when another replica wrote in between.
#[tonic::async_trait]
pub trait FleetStore: super::Db {
    /// The policy `name` and its revision.
    async fn policy(&self, name: &str) -> Result<Option<(StoredPolicy, i64)>, StoreError>;
    /// Writes the policy (if its revision is still `if_revision`; 0: absent).
    async fn put_policy(
        &self,
        name: &str,
        if_revision: Option<i64>,
        policy: &StoredPolicy,
    ) -> Result<(), StoreError>;
    /// Removes the policy; false if there was none.
    async fn delete_policy(&self, name: &str) -> Result<bool, StoreError>;
    /// Up to `limit` policy names after `after`, in byte order.
    async fn list_policies(&self, after: Option<&str>, limit: usize)
    -> Result<KeyPage, StoreError>;
    /// The group `name` and its revision.
    async fn group(&self, name: &str) -> Result<Option<(ScalingGroupDef, i64)>, StoreError>;
    /// Writes the group (if its revision is still `if_revision`; 0: absent).
    async fn put_group(
        &self,
        name: &str,
        if_revision: Option<i64>,
        group: &ScalingGroupDef,
    ) -> Result<(), StoreError>;
    /// Removes the group; false if there was none.
    async fn delete_group(&self, name: &str) -> Result<bool, StoreError>;
    /// Up to `limit` group names after `after`, in byte order.
    async fn list_groups(&self, after: Option<&str>, limit: usize) -> Result<KeyPage, StoreError>;
    /// The groups' generation: changes whenever a group's definition is put or deleted.
    async fn groups_generation(&self) -> Result<Vec<u8>, StoreError>;
    /// A new generation, after a definition was put or deleted.
    async fn bump_groups_generation(&self) -> Result<(), StoreError>;
}

/// Every backend with single-key records holds policies and groups.
#[tonic::async_trait]
impl<R: Records + ?Sized> FleetStore for R {
    async fn policy(&self, name: &str) -> Result<Option<(StoredPolicy, i64)>, StoreError> {
        match self.get_record(&POLICIES, name).await? {
            None => Ok(None),
            Some(r) => Ok(Some((
                record::fleet::decode_policy(name, &r.bytes)?,
                r.revision,
            ))),
        }
    }

    async fn put_policy(
        &self,
        name: &str,
        if_revision: Option<i64>,
        policy: &StoredPolicy,
    ) -> Result<(), StoreError> {
        let bytes = record::fleet::encode_policy(policy);
        self.put_record(&POLICIES, name, Put { bytes, if_revision })
            .await
    }

    async fn delete_policy(&self, name: &str) -> Result<bool, StoreError> {
        self.delete_record(&POLICIES, name).await
    }

    async fn list_policies(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<KeyPage, StoreError> {
        self.list_records(&POLICIES, after, limit).await
    }

    async fn group(&self, name: &str) -> Result<Option<(ScalingGroupDef, i64)>, StoreError> {
        match self.get_record(&GROUPS, name).await? {
            None => Ok(None),
            Some(r) => Ok(Some((
                record::fleet::decode_group(name, &r.bytes)?,
                r.revision,
            ))),
        }
    }

    async fn put_group(
        &self,
        name: &str,
        if_revision: Option<i64>,
        group: &ScalingGroupDef,
    ) -> Result<(), StoreError> {
        let bytes = record::fleet::encode_group(group);
        self.put_record(&GROUPS, name, Put { bytes, if_revision })
            .await
    }

    async fn delete_group(&self, name: &str) -> Result<bool, StoreError> {
        self.delete_record(&GROUPS, name).await
    }

    async fn list_groups(&self, after: Option<&str>, limit: usize) -> Result<KeyPage, StoreError> {
        self.list_records(&GROUPS, after, limit).await
    }

    async fn groups_generation(&self) -> Result<Vec<u8>, StoreError> {
        Ok(self
            .get_record(&META, GROUPS_GENERATION)
            .await?
            .map(|r| r.bytes)
            .unwrap_or_default())
    }

    async fn bump_groups_generation(&self) -> Result<(), StoreError> {
        // Random, not a counter: two replicas bumping at once still leave a value neither
        // reader had seen.
        let mut fresh = [0u8; 16];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut fresh).map_err(
            |_| StoreError::Unavailable("no randomness for the groups' generation".to_owned()),
        )?;
        self.put_record(&META, GROUPS_GENERATION, Put::new(fresh.to_vec()))
            .await
    }
}
