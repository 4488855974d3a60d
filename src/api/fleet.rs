//! Policies and scaling groups in the HorizontalAutoscaler service (docs/groups.md): their
//! CRUD, the merge of a Recommend's spec over its policy's, and which group a target is in.
//!
//! * **Merge** ([`merged_spec`]): the policy's spec is the base and the request's spec a JSON
//!   merge patch over it: a message field merges field by field, a set scalar replaces, a
//!   non-empty list or map replaces the whole (`metrics`), a Duration replaces whole; unset
//!   fields (proto3: 0, false, empty, absent) take the policy's. A plain proto3 scalar
//!   therefore cannot set a policy's `true` back to `false` (`removal_candidates`): name
//!   another policy.
//! * **Membership** ([`Fleet::group_of`]): the first group in name order that lists the key,
//!   has a prefix of it, or selects the policy the call names. The groups' definitions are
//!   read at most once a second ([`INDEX_MAX_AGE`]; at once after a change on this replica);
//!   what the members hold is read fresh at each member's decision, with the member's state.
//! * **Writers**: one name's puts and deletes are serialized by this replica's locks and, on
//!   etcd, guarded by the record's revision against other replicas.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use prost::Message;
use prost_reflect::{DynamicMessage, ReflectMessage, Value};

use super::{
    clock,
    convert::{self, fleet as conv},
    locks::{KeyGuard, KeyLocks},
    status::ApiError,
};
use crate::{
    engine::hpa::budget,
    pb::v1 as pb,
    store::{FleetStore, PolicyRef, ScalingGroupDef, StoreError},
};

/// How long the groups' definitions are taken as read (another replica's change takes
/// effect here at most this late).
pub(crate) const INDEX_MAX_AGE: Duration = Duration::from_secs(1);
/// The most scaling groups a store holds (every Recommend looks them up).
pub(crate) const MAX_GROUPS: usize = 1000;

/// The groups' definitions as last read, in name order.
#[derive(Default)]
struct GroupIndex {
    read_at: Option<Instant>,
    groups: Arc<Vec<(String, ScalingGroupDef)>>,
}

/// Policies and groups over a store.
pub(crate) struct Fleet {
    store: Arc<dyn FleetStore>,
    locks: KeyLocks,
    index: Mutex<GroupIndex>,
    /// One re-read of the index at a time: the calls that find it stale meanwhile wait for
    /// that one instead of each reading every group.
    refresh: tokio::sync::Mutex<()>,
}

fn lock_name(kind: &str, name: &str) -> String {
    format!("{kind}\0{name}")
}

impl Fleet {
    pub(crate) fn new(store: Arc<dyn FleetStore>) -> Self {
        Fleet {
            store,
            locks: KeyLocks::default(),
            index: Mutex::new(GroupIndex::default()),
            refresh: tokio::sync::Mutex::new(()),
        }
    }

    /// The store of the policies and groups.
    pub(crate) fn store(&self) -> &dyn FleetStore {
        &*self.store
    }

    /// Serializes this replica's writers of group `name` (its members' decisions included).
    pub(crate) async fn lock_group(&self, name: &str) -> KeyGuard {
        self.locks.lock(&lock_name("group", name)).await
    }

    // ===== policies =====

    /// `PutPolicy`, the spec checked by `check_spec` (the caller's conversion of a Recommend).
    pub(crate) async fn put_policy(
        &self,
        req: pb::PutPolicyRequest,
        check_spec: impl Fn(&pb::HorizontalSpec) -> Result<(), ApiError>,
    ) -> Result<pb::Policy, ApiError> {
        let policy = req
            .policy
            .ok_or_else(|| ApiError::field("policy", "is required"))?;
        conv::name("policy.name", &policy.name)?;
        let spec = policy.spec.unwrap_or_default();
        check_spec(&spec)?;
        let _guard = self.locks.lock(&lock_name("policy", &policy.name)).await;
        let stored = self.store.policy(&policy.name).await?;
        let (version, revision) = stored.as_ref().map_or((0, 0), |(p, r)| (p.version, *r));
        expect_version(req.expected_version, version, "policy", &policy.name)?;
        // The same spec again is no change (as `kubectl apply` of an unchanged file).
        if let Some((same, _)) = stored
            .as_ref()
            .filter(|(p, _)| p.horizontal_spec == spec.encode_to_vec())
        {
            return conv::policy(&policy.name, same);
        }
        let new = conv::stored_policy(&spec, version + 1, clock::hpa_now());
        self.store
            .put_policy(&policy.name, Some(revision), &new)
            .await
            .map_err(written)?;
        conv::policy(&policy.name, &new)
    }

    /// `GetPolicy`.
    pub(crate) async fn get_policy(&self, name: &str) -> Result<pb::Policy, ApiError> {
        conv::name("name", name)?;
        match self.store.policy(name).await? {
            Some((p, _)) => conv::policy(name, &p),
            None => Err(ApiError::NotFound(format!("no policy named {name:?}"))),
        }
    }

    /// `ListPolicies`.
    pub(crate) async fn list_policies(
        &self,
        req: &pb::ListPoliciesRequest,
    ) -> Result<pb::ListPoliciesResponse, ApiError> {
        let page = convert::page_request(req.page_size, &req.page_token)?;
        let keys = self
            .store
            .list_policies(page.after.as_deref(), page.size)
            .await?;
        let mut policies = Vec::with_capacity(keys.keys.len());
        let mut budget = ResponseBudget::default();
        for (i, name) in keys.keys.iter().enumerate() {
            if let Some((p, _)) = self.store.policy(name).await? {
                let policy = conv::policy(name, &p)?;
                if !budget.fits(policy.encoded_len()) {
                    return Ok(pb::ListPoliciesResponse {
                        policies,
                        next_page_token: convert::page_token(&keys.keys[i - 1]),
                    });
                }
                policies.push(policy);
            }
        }
        Ok(pb::ListPoliciesResponse {
            policies,
            next_page_token: convert::next_page_token(&keys),
        })
    }

    /// `DeletePolicy`, once the caller checked that no target uses it (or `force`): refused
    /// while a group selects members by it, unless `force`.
    pub(crate) async fn delete_policy(&self, name: &str, force: bool) -> Result<(), ApiError> {
        conv::name("name", name)?;
        let _guard = self.locks.lock(&lock_name("policy", name)).await;
        if !force {
            let groups = self.groups(true).await?;
            if let Some((group, _)) = groups
                .iter()
                .find(|(_, g)| g.member_policies.iter().any(|p| p == name))
            {
                return Err(ApiError::FailedPrecondition(format!(
                    "scaling group {group:?} selects its members by policy {name:?}: change the group first, or delete with force"
                )));
            }
        }
        if self.store.delete_policy(name).await? {
            Ok(())
        } else {
            Err(ApiError::NotFound(format!("no policy named {name:?}")))
        }
    }

    /// A Recommend naming a policy: its spec becomes the policy's with the request's merged
    /// over it. Returns the policy as used; `None` when the request names none.
    pub(crate) async fn resolve(
        &self,
        req: &mut pb::RecommendRequest,
    ) -> Result<Option<PolicyRef>, ApiError> {
        if req.policy.is_empty() {
            return Ok(None);
        }
        conv::name("policy", &req.policy)?;
        let Some((policy, _)) = self.store.policy(&req.policy).await? else {
            return Err(ApiError::NotFound(format!(
                "no policy named {:?} (field policy)",
                req.policy
            )));
        };
        req.spec = Some(merged_spec(&policy.horizontal_spec, req.spec.as_ref())?);
        Ok(Some(PolicyRef {
            name: req.policy.clone(),
            version: policy.version,
        }))
    }

    // ===== scaling groups =====

    /// `PutScalingGroup`: the definition replaced, what the members hold kept.
    pub(crate) async fn put_group(
        &self,
        req: pb::PutScalingGroupRequest,
        key_bytes: usize,
        scope: Option<Vec<String>>,
    ) -> Result<pb::ScalingGroup, ApiError> {
        let group = req
            .group
            .ok_or_else(|| ApiError::field("group", "is required"))?;
        conv::check_group(&group, key_bytes)?;
        let _guard = self.lock_group(&group.name).await;
        let stored = self.store.group(&group.name).await?;
        if stored.is_none() && self.groups(true).await?.len() >= MAX_GROUPS {
            return Err(ApiError::ResourceExhausted {
                field: "group".to_owned(),
                message: format!("the store holds {MAX_GROUPS} scaling groups, the most it may"),
            });
        }
        let (version, revision, ledger, update_time) = match &stored {
            Some((g, r)) => (g.version, *r, g.ledger.clone(), g.update_time),
            None => (0, 0, budget::Ledger::default(), clock::hpa_now()),
        };
        expect_version(req.expected_version, version, "scaling group", &group.name)?;
        // The same definition again is no change.
        if let Some((same, _)) = &stored
            && conv::stored_group(&group, version, update_time, ledger.clone(), scope.clone())
                == *same
        {
            return Ok(conv::group(&group.name, same));
        }
        let mut new = conv::stored_group(&group, version + 1, clock::hpa_now(), ledger, scope);
        // Members the new definition no longer selects leave the ledger (by policy: each
        // member's next call says, so those stay until then or DeleteTarget).
        if new.member_policies.is_empty() {
            let selected: Vec<String> = new
                .ledger
                .members
                .keys()
                .filter(|k| new.selects(k, ""))
                .cloned()
                .collect();
            new.ledger.members.retain(|k, _| selected.contains(k));
        }
        self.store
            .put_group(&group.name, Some(revision), &new)
            .await
            .map_err(written)?;
        self.invalidate();
        Ok(conv::group(&group.name, &new))
    }

    /// `GetScalingGroup`.
    pub(crate) async fn get_group(&self, name: &str) -> Result<pb::ScalingGroupStatus, ApiError> {
        conv::name("name", name)?;
        match self.store.group(name).await? {
            Some((g, _)) => Ok(conv::group_status(name, &g)),
            None => Err(ApiError::NotFound(format!(
                "no scaling group named {name:?}"
            ))),
        }
    }

    /// `ListScalingGroups`.
    pub(crate) async fn list_groups(
        &self,
        req: &pb::ListScalingGroupsRequest,
    ) -> Result<pb::ListScalingGroupsResponse, ApiError> {
        let page = convert::page_request(req.page_size, &req.page_token)?;
        let keys = self
            .store
            .list_groups(page.after.as_deref(), page.size)
            .await?;
        let mut groups = Vec::with_capacity(keys.keys.len());
        let mut budget = ResponseBudget::default();
        for (i, name) in keys.keys.iter().enumerate() {
            if let Some((g, _)) = self.store.group(name).await? {
                let group = conv::group(name, &g);
                if !budget.fits(group.encoded_len()) {
                    return Ok(pb::ListScalingGroupsResponse {
                        groups,
                        next_page_token: convert::page_token(&keys.keys[i - 1]),
                    });
                }
                groups.push(group);
            }
        }
        Ok(pb::ListScalingGroupsResponse {
            groups,
            next_page_token: convert::next_page_token(&keys),
        })
    }

    /// `DeleteScalingGroup`.
    pub(crate) async fn delete_group(&self, name: &str) -> Result<(), ApiError> {
        conv::name("name", name)?;
        let _guard = self.lock_group(name).await;
        let existed = self.store.delete_group(name).await?;
        self.invalidate();
        if existed {
            Ok(())
        } else {
            Err(ApiError::NotFound(format!(
                "no scaling group named {name:?}"
            )))
        }
    }

    /// The group `key` is a member of, for a call naming `policy` (empty: none).
    pub(crate) async fn group_of(
        &self,
        key: &str,
        policy: &str,
    ) -> Result<Option<String>, ApiError> {
        Ok(self
            .groups(false)
            .await?
            .iter()
            .find(|(_, g)| g.selects(key, policy))
            .map(|(name, _)| name.clone()))
    }

    /// A deleted target leaves every group's ledger (what it held is free again).
    pub(crate) async fn forget_member(&self, key: &str) -> Result<(), ApiError> {
        let groups = self.groups(true).await?;
        for (name, g) in groups.iter() {
            if g.ledger.members.contains_key(key) {
                self.edit_ledger(name, |ledger| ledger.members.remove(key).is_some())
                    .await?;
            }
        }
        Ok(())
    }

    /// Changes group `name`'s ledger with `edit` (which says whether it changed anything),
    /// read again and retried while another replica writes the group in between.
    async fn edit_ledger(
        &self,
        name: &str,
        mut edit: impl FnMut(&mut budget::Ledger) -> bool,
    ) -> Result<(), ApiError> {
        let _guard = self.lock_group(name).await;
        for _ in 0..super::commit::MAX_CONFLICT_RETRIES {
            let Some((mut g, revision)) = self.store.group(name).await? else {
                return Ok(());
            };
            if !edit(&mut g.ledger) {
                return Ok(());
            }
            match self.store.put_group(name, Some(revision), &g).await {
                Err(StoreError::Conflict { .. }) => continue,
                result => return result.map_err(ApiError::from),
            }
        }
        Err(written(StoreError::Conflict {
            key: name.to_owned(),
        }))
    }

    /// The groups' definitions (ledgers as read then), re-read when older than
    /// [`INDEX_MAX_AGE`] or when `fresh`.
    async fn groups(&self, fresh: bool) -> Result<Arc<Vec<(String, ScalingGroupDef)>>, ApiError> {
        let current = |max_age: Duration| {
            let index = self.index.lock().unwrap_or_else(|e| e.into_inner());
            index
                .read_at
                .is_some_and(|t| t.elapsed() < max_age)
                .then(|| Arc::clone(&index.groups))
        };
        if !fresh && let Some(groups) = current(INDEX_MAX_AGE) {
            return Ok(groups);
        }
        let started = Instant::now();
        let _one = self.refresh.lock().await;
        // Read by another call while this one waited: as fresh as asked.
        if let Some(groups) = current(if fresh {
            started.elapsed()
        } else {
            INDEX_MAX_AGE
        }) {
            return Ok(groups);
        }
        let read_at = Instant::now();
        let mut groups = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self.store.list_groups(after.as_deref(), 500).await?;
            for name in &page.keys {
                if let Some((g, _)) = self.store.group(name).await? {
                    groups.push((name.clone(), g));
                }
            }
            if !page.more || groups.len() >= MAX_GROUPS {
                break;
            }
            after = page.keys.last().cloned();
        }
        let groups = Arc::new(groups);
        let mut index = self.index.lock().unwrap_or_else(|e| e.into_inner());
        *index = GroupIndex {
            read_at: Some(read_at),
            groups: Arc::clone(&groups),
        };
        Ok(groups)
    }

    fn invalidate(&self) {
        self.index.lock().unwrap_or_else(|e| e.into_inner()).read_at = None;
    }
}

/// A List page's bytes: the first item always goes in (a page makes progress), the next only
/// while the page stays within [`RESPONSE_BUDGET_BYTES`](convert::history::RESPONSE_BUDGET_BYTES),
/// as GetHistory's pages.
#[derive(Default)]
struct ResponseBudget {
    used: usize,
    items: usize,
}

impl ResponseBudget {
    fn fits(&mut self, bytes: usize) -> bool {
        if self.items > 0 && self.used + bytes > convert::history::RESPONSE_BUDGET_BYTES {
            return false;
        }
        self.used += bytes;
        self.items += 1;
        true
    }
}

/// `expected_version` against the stored version (0: none stored).
fn expect_version(
    expected: Option<u64>,
    stored: u64,
    kind: &str,
    name: &str,
) -> Result<(), ApiError> {
    match expected {
        Some(e) if e != stored => Err(ApiError::FailedPrecondition(format!(
            "{kind} {name:?} is at version {stored}, not {e} (expected_version; 0: absent)"
        ))),
        _ => Ok(()),
    }
}

/// A write of a policy or group that another replica changed in between: the caller may
/// read again and retry.
fn written(e: StoreError) -> ApiError {
    match e {
        StoreError::Conflict { .. } => ApiError::Aborted(
            "changed by another replica at the same time: read it again and retry".to_owned(),
        ),
        e => e.into(),
    }
}

/// The policy's spec (`policy`, encoded) with `own` merged over it (see the module
/// documentation).
pub(crate) fn merged_spec(
    policy: &[u8],
    own: Option<&pb::HorizontalSpec>,
) -> Result<pb::HorizontalSpec, ApiError> {
    let internal = |e: &dyn std::fmt::Display| ApiError::Internal(format!("policy merge: {e}"));
    let descriptor = crate::connect::pool()
        .get_message_by_name("autoscaled.v1.HorizontalSpec")
        .ok_or_else(|| internal(&"HorizontalSpec is not in the descriptor pool"))?;
    let mut base = DynamicMessage::decode(descriptor.clone(), policy).map_err(|e| internal(&e))?;
    if let Some(own) = own {
        let over = DynamicMessage::decode(descriptor, own.encode_to_vec().as_slice())
            .map_err(|e| internal(&e))?;
        merge(&mut base, &over);
    }
    pb::HorizontalSpec::decode(base.encode_to_vec().as_slice()).map_err(|e| internal(&e))
}

/// JSON merge patch semantics over protobuf messages (see the module documentation).
fn merge(base: &mut DynamicMessage, over: &DynamicMessage) {
    for (field, value) in over.fields() {
        let nested = matches!(value, Value::Message(m)
            if !field.is_list()
                && !field.is_map()
                && !m.descriptor().full_name().starts_with("google.protobuf."));
        if nested
            && base.has_field(&field)
            && let (Value::Message(b), Value::Message(o)) = (base.get_field_mut(&field), value)
        {
            merge(b, o);
            continue;
        }
        base.set_field(&field, value.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(f: impl FnOnce(&mut pb::HorizontalSpec)) -> pb::HorizontalSpec {
        let mut s = pb::HorizontalSpec::default();
        f(&mut s);
        s
    }

    fn cpu(percent: i32) -> pb::MetricSpec {
        pb::MetricSpec {
            r#type: pb::MetricSourceType::Resource as i32,
            name: "cpu".into(),
            target: Some(pb::MetricTarget {
                r#type: pb::MetricTargetType::Utilization as i32,
                average_utilization: Some(percent),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_list_page_holds_its_first_item_then_stays_within_the_budget() {
        let limit = convert::history::RESPONSE_BUDGET_BYTES;
        let mut b = ResponseBudget::default();
        assert!(b.fits(limit + 1), "the first item always goes in");
        assert!(!b.fits(1));
        let mut b = ResponseBudget::default();
        assert!(b.fits(limit - 10));
        assert!(b.fits(10));
        assert!(!b.fits(1));
    }

    #[test]
    fn the_request_merges_over_the_policy_as_a_merge_patch() {
        let policy = spec(|s| {
            s.min_replicas = Some(2);
            s.max_replicas = 20;
            s.metrics = vec![cpu(60), cpu(70)];
            s.behavior = Some(pb::Behavior {
                scale_up: Some(pb::ScalingRules {
                    stabilization_window_seconds: Some(30),
                    ..Default::default()
                }),
                scale_down: Some(pb::ScalingRules {
                    stabilization_window_seconds: Some(600),
                    ..Default::default()
                }),
            });
            s.settings = Some(pb::ControllerSettings {
                tolerance: Some(0.2),
                downscale_stabilization: Some(prost_types::Duration {
                    seconds: 60,
                    nanos: 5,
                }),
                ..Default::default()
            });
        })
        .encode_to_vec();
        // Nothing of its own: the policy's spec.
        let merged = merged_spec(&policy, None).unwrap();
        assert_eq!(merged.encode_to_vec(), policy);
        let own = spec(|s| {
            s.max_replicas = 8;
            s.metrics = vec![cpu(50)];
            s.behavior = Some(pb::Behavior {
                scale_down: Some(pb::ScalingRules {
                    stabilization_window_seconds: Some(0),
                    ..Default::default()
                }),
                ..Default::default()
            });
            s.settings = Some(pb::ControllerSettings {
                downscale_stabilization: Some(prost_types::Duration {
                    seconds: 30,
                    nanos: 0,
                }),
                ..Default::default()
            });
        });
        let merged = merged_spec(&policy, Some(&own)).unwrap();
        assert_eq!(merged.min_replicas, Some(2), "unset: the policy's");
        assert_eq!(merged.max_replicas, 8, "a set scalar replaces");
        assert_eq!(merged.metrics, vec![cpu(50)], "a list replaces whole");
        let behavior = merged.behavior.unwrap();
        assert_eq!(
            behavior.scale_up.unwrap().stabilization_window_seconds,
            Some(30),
            "a message merges field by field"
        );
        assert_eq!(
            behavior.scale_down.unwrap().stabilization_window_seconds,
            Some(0),
            "an optional scalar set to 0 replaces"
        );
        let settings = merged.settings.unwrap();
        assert_eq!(settings.tolerance, Some(0.2));
        assert_eq!(
            settings.downscale_stabilization,
            Some(prost_types::Duration {
                seconds: 30,
                nanos: 0
            }),
            "a Duration replaces whole"
        );
    }
}
