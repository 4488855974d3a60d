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
//!   has a prefix of it, or selects the policy the call names, found in maps by key, prefix
//!   and policy (a lookup costs the key's length, not the groups' selectors). The groups'
//!   definitions are read again only when their generation changed (a value every put or
//!   delete of a definition rewrites): checked at most once a second ([`INDEX_MAX_AGE`]) in
//!   the background while calls go on with the index they have, and at once after a change
//!   on this replica. What the members hold is read fresh at each member's decision.
//! * **Limits**: with an authorization file, each identity may hold at most
//!   `--max-groups-per-identity` groups, `--max-policies-per-identity` policies and
//!   `--max-fleet-bytes-per-identity` bytes of definitions; the store as a whole at most
//!   [`MAX_GROUPS`] groups and [`MAX_POLICIES`] policies (the last resort, and the only limit
//!   without an authorization file, where every caller is one tenant).
//! * **Writers**: one name's puts and deletes are serialized by this replica's locks and, on
//!   etcd, guarded by the record's revision against other replicas.

use std::{
    collections::HashMap,
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
pub(crate) use crate::config::FleetLimits;
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
/// The most policies a store holds.
pub(crate) const MAX_POLICIES: usize = 10_000;

/// The groups' definitions as last read, in name order, with maps to find a target's group.
#[derive(Default)]
pub(crate) struct Groups {
    list: Vec<(String, ScalingGroupDef)>,
    /// Positions in `list` by member key, by member prefix, by member policy.
    by_key: HashMap<String, Vec<usize>>,
    by_prefix: HashMap<String, Vec<usize>>,
    by_policy: HashMap<String, Vec<usize>>,
}

impl Groups {
    fn of(list: Vec<(String, ScalingGroupDef)>) -> Groups {
        let mut groups = Groups {
            list,
            ..Groups::default()
        };
        for (i, (_, g)) in groups.list.iter().enumerate() {
            for k in &g.member_keys {
                groups.by_key.entry(k.clone()).or_default().push(i);
            }
            for p in &g.member_prefixes {
                groups.by_prefix.entry(p.clone()).or_default().push(i);
            }
            for p in &g.member_policies {
                groups.by_policy.entry(p.clone()).or_default().push(i);
            }
        }
        groups
    }

    /// The first group in name order that selects `key` calling with `policy`.
    fn group_of(&self, key: &str, policy: &str) -> Option<&str> {
        let mut candidates: Vec<usize> = Vec::new();
        if let Some(v) = self.by_key.get(key) {
            candidates.extend(v);
        }
        if !policy.is_empty()
            && let Some(v) = self.by_policy.get(policy)
        {
            candidates.extend(v);
        }
        if !self.by_prefix.is_empty() {
            for (i, _) in key.char_indices().chain(std::iter::once((key.len(), ' '))) {
                if let Some(v) = self.by_prefix.get(&key[..i]) {
                    candidates.extend(v);
                }
            }
        }
        candidates.sort_unstable();
        candidates
            .into_iter()
            .map(|i| &self.list[i])
            .find(|(_, g)| g.selects(key, policy))
            .map(|(name, _)| name.as_str())
    }

    /// The groups `owner` put, and the bytes of their definitions.
    fn held_by(&self, owner: &str) -> (usize, usize) {
        self.list
            .iter()
            .filter(|(_, g)| g.owner.as_deref() == Some(owner))
            .fold((0, 0), |(n, bytes), (name, g)| {
                (n + 1, bytes + g.definition_bytes(name))
            })
    }

    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &(String, ScalingGroupDef)> {
        self.list.iter()
    }
}

/// The index: the groups as last read, under which generation, and when it was checked.
#[derive(Default)]
struct GroupIndex {
    /// When the generation was last compared with the store's; `None`: read again now.
    checked_at: Option<Instant>,
    generation: Option<Vec<u8>>,
    groups: Arc<Groups>,
    /// A background check is running.
    checking: bool,
}

/// Policies and groups over a store.
pub(crate) struct Fleet {
    store: Arc<dyn FleetStore>,
    locks: KeyLocks,
    limits: FleetLimits,
    index: Mutex<GroupIndex>,
    /// One re-read of the index at a time: the calls that find it stale meanwhile wait for
    /// that one instead of each reading every group.
    refresh: tokio::sync::Mutex<()>,
}

fn lock_name(kind: &str, name: &str) -> String {
    format!("{kind}\0{name}")
}

impl Fleet {
    pub(crate) fn new(store: Arc<dyn FleetStore>, limits: FleetLimits) -> Self {
        Fleet {
            store,
            locks: KeyLocks::default(),
            limits,
            index: Mutex::new(GroupIndex::default()),
            refresh: tokio::sync::Mutex::new(()),
        }
    }

    /// The policies `owner` put, and the bytes of their specs (a scan of every policy: puts
    /// of new policies are rare, and the store holds at most [`MAX_POLICIES`]).
    async fn policies_held(&self, owner: Option<&str>) -> Result<(usize, usize, usize), ApiError> {
        let (mut all, mut mine, mut bytes) = (0, 0, 0);
        let mut after: Option<String> = None;
        loop {
            let page = self.store.list_policies(after.as_deref(), 500).await?;
            all += page.keys.len();
            if let Some(owner) = owner {
                for name in &page.keys {
                    if let Some((p, _)) = self.store.policy(name).await?
                        && p.owner.as_deref() == Some(owner)
                    {
                        mine += 1;
                        bytes += name.len() + p.horizontal_spec.len();
                    }
                }
            }
            if !page.more || page.keys.is_empty() {
                return Ok((all, mine, bytes));
            }
            after = page.keys.last().cloned();
        }
    }

    /// Refuses a new policy or group of `owner` past its limits; `adding` bytes more.
    async fn within_limits(
        &self,
        owner: Option<&str>,
        new_policy: bool,
        new_group: bool,
        adding: usize,
    ) -> Result<(), ApiError> {
        let exhausted = |field: &str, message: String| ApiError::ResourceExhausted {
            field: field.to_owned(),
            message,
        };
        let groups = self.groups(true).await?;
        let (all_policies, policies, policy_bytes) = self.policies_held(owner).await?;
        if new_group && groups.len() >= MAX_GROUPS {
            return Err(exhausted(
                "group",
                format!("the store holds {MAX_GROUPS} scaling groups, the most it may"),
            ));
        }
        if new_policy && all_policies >= MAX_POLICIES {
            return Err(exhausted(
                "policy",
                format!("the store holds {MAX_POLICIES} policies, the most it may"),
            ));
        }
        let Some(owner) = owner else {
            return Ok(());
        };
        let (owned_groups, group_bytes) = groups.held_by(owner);
        let l = self.limits;
        if new_group && owned_groups >= l.groups_per_identity {
            return Err(exhausted(
                "group",
                format!(
                    "{owner:?} has put {owned_groups} scaling groups, the most one identity may (--max-groups-per-identity)"
                ),
            ));
        }
        if new_policy && policies >= l.policies_per_identity {
            return Err(exhausted(
                "policy",
                format!(
                    "{owner:?} has put {policies} policies, the most one identity may (--max-policies-per-identity)"
                ),
            ));
        }
        let total = group_bytes + policy_bytes + adding;
        if total > l.bytes_per_identity {
            return Err(exhausted(
                if new_group { "group" } else { "policy" },
                format!(
                    "{owner:?}'s policies and scaling groups would hold {total} bytes of definitions, more than one identity may ({} bytes, --max-fleet-bytes-per-identity)",
                    l.bytes_per_identity
                ),
            ));
        }
        Ok(())
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
        owner: Option<String>,
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
        let new = conv::stored_policy(&spec, version + 1, clock::hpa_now(), owner.clone());
        // The identity's limits count the policy as it will be (a change replaces the old).
        let before = stored
            .as_ref()
            .filter(|(p, _)| p.owner == owner)
            .map_or(0, |(p, _)| policy.name.len() + p.horizontal_spec.len());
        let adding = (policy.name.len() + new.horizontal_spec.len()).saturating_sub(before);
        self.within_limits(owner.as_deref(), stored.is_none(), false, adding)
            .await?;
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
        let token = convert::next_page_token(&keys);
        self.policies_named(&keys.keys, token).await
    }

    /// The names of the stored policies (or groups) after `after`, at most `size`, and
    /// whether more follow.
    pub(crate) async fn names(
        &self,
        groups: bool,
        after: Option<&str>,
        size: usize,
    ) -> Result<(Vec<String>, bool), ApiError> {
        let page = if groups {
            self.store.list_groups(after, size).await?
        } else {
            self.store.list_policies(after, size).await?
        };
        Ok((page.keys, page.more))
    }

    /// `ListPolicies`' answer for `names`, ending with `next_page_token` unless the response
    /// budget cuts it first (its token then continues after the last policy it holds).
    pub(crate) async fn policies_named(
        &self,
        names: &[String],
        next_page_token: String,
    ) -> Result<pb::ListPoliciesResponse, ApiError> {
        let mut policies = Vec::with_capacity(names.len());
        let mut budget = ResponseBudget::default();
        for (i, name) in names.iter().enumerate() {
            if let Some((p, _)) = self.store.policy(name).await? {
                let policy = conv::policy(name, &p)?;
                if !budget.fits(policy.encoded_len()) {
                    return Ok(pb::ListPoliciesResponse {
                        policies,
                        next_page_token: convert::page_token(&names[i - 1]),
                    });
                }
                policies.push(policy);
            }
        }
        Ok(pb::ListPoliciesResponse {
            policies,
            next_page_token,
        })
    }

    /// `DeletePolicy`, once the caller checked that no target uses it (or `force`): refused
    /// while a group selects members by it, unless `force`.
    pub(crate) async fn delete_policy(
        &self,
        name: &str,
        force: bool,
        readable: &crate::auth::KeyFilter,
    ) -> Result<(), ApiError> {
        conv::name("name", name)?;
        let _guard = self.locks.lock(&lock_name("policy", name)).await;
        if !force {
            let groups = self.groups(true).await?;
            if let Some((group, _)) = groups
                .iter()
                .find(|(_, g)| g.member_policies.iter().any(|p| p == name))
            {
                let which = if readable.allows(group) {
                    format!("scaling group {group:?}")
                } else {
                    "a scaling group you may not read".to_owned()
                };
                return Err(ApiError::FailedPrecondition(format!(
                    "{which} selects its members by policy {name:?}: change the group first, or delete with force"
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
        owner: Option<String>,
    ) -> Result<pb::ScalingGroup, ApiError> {
        let group = req
            .group
            .ok_or_else(|| ApiError::field("group", "is required"))?;
        let capacity_schedules = conv::check_group(&group, key_bytes)?;
        let _guard = self.lock_group(&group.name).await;
        let stored = self.store.group(&group.name).await?;
        let (version, revision, ledger, update_time) = match &stored {
            Some((g, r)) => (g.version, *r, g.ledger.clone(), g.update_time),
            None => (0, 0, budget::Ledger::default(), clock::hpa_now()),
        };
        expect_version(req.expected_version, version, "scaling group", &group.name)?;
        let mut new = conv::stored_group(
            &group,
            capacity_schedules,
            version,
            update_time,
            ledger,
            scope,
            owner.clone(),
        );
        // The same definition again is no change.
        if let Some((same, _)) = &stored
            && new == *same
        {
            return Ok(conv::group(&group.name, same));
        }
        new.version = version + 1;
        new.update_time = clock::hpa_now();
        let before = stored
            .as_ref()
            .filter(|(g, _)| g.owner == owner)
            .map_or(0, |(g, _)| g.definition_bytes(&group.name));
        let adding = new.definition_bytes(&group.name).saturating_sub(before);
        self.within_limits(owner.as_deref(), false, stored.is_none(), adding)
            .await?;
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
        self.changed().await?;
        Ok(conv::group(&group.name, &new))
    }

    /// `GetScalingGroup`.
    pub(crate) async fn get_group(&self, name: &str) -> Result<pb::ScalingGroupStatus, ApiError> {
        conv::name("name", name)?;
        match self.store.group(name).await? {
            Some((g, _)) => Ok(conv::group_status(name, &g, clock::hpa_now())),
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
        let token = convert::next_page_token(&keys);
        self.groups_named(&keys.keys, token).await
    }

    /// `ListScalingGroups`' answer for `names`, as [`Self::policies_named`].
    pub(crate) async fn groups_named(
        &self,
        names: &[String],
        next_page_token: String,
    ) -> Result<pb::ListScalingGroupsResponse, ApiError> {
        let mut groups = Vec::with_capacity(names.len());
        let mut budget = ResponseBudget::default();
        for (i, name) in names.iter().enumerate() {
            if let Some((g, _)) = self.store.group(name).await? {
                let group = conv::group(name, &g);
                if !budget.fits(group.encoded_len()) {
                    return Ok(pb::ListScalingGroupsResponse {
                        groups,
                        next_page_token: convert::page_token(&names[i - 1]),
                    });
                }
                groups.push(group);
            }
        }
        Ok(pb::ListScalingGroupsResponse {
            groups,
            next_page_token,
        })
    }

    /// `DeleteScalingGroup`.
    pub(crate) async fn delete_group(&self, name: &str) -> Result<(), ApiError> {
        conv::name("name", name)?;
        let _guard = self.lock_group(name).await;
        let existed = self.store.delete_group(name).await?;
        self.changed().await?;
        if existed {
            Ok(())
        } else {
            Err(ApiError::NotFound(format!(
                "no scaling group named {name:?}"
            )))
        }
    }

    /// The group `key` is a member of, for a call naming `policy` (empty: none), from the
    /// index this replica has: a check of the groups' generation is started in the
    /// background when it is due, and the call goes on without waiting for it.
    pub(crate) async fn group_of(
        self: &Arc<Self>,
        key: &str,
        policy: &str,
    ) -> Result<Option<String>, ApiError> {
        let groups = {
            let mut index = self.index.lock().unwrap_or_else(|e| e.into_inner());
            match index.checked_at {
                Some(at) => {
                    if at.elapsed() >= INDEX_MAX_AGE && !index.checking {
                        index.checking = true;
                        let fleet = Arc::clone(self);
                        tokio::spawn(async move {
                            if let Err(e) = fleet.groups(false).await {
                                tracing::warn!(error = %e, "scaling groups: the index was not refreshed; the one in use stays");
                            }
                            fleet
                                .index
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .checking = false;
                        });
                    }
                    Some(Arc::clone(&index.groups))
                }
                None => None,
            }
        };
        let groups = match groups {
            Some(g) => g,
            // No index yet (or a change on this replica): read it now.
            None => self.groups(false).await?,
        };
        Ok(groups.group_of(key, policy).map(str::to_owned))
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

    /// The groups' definitions (ledgers as read then): the index when its generation is
    /// checked within [`INDEX_MAX_AGE`] (re-read only if the store's generation changed), or
    /// read whole when `fresh`.
    async fn groups(&self, fresh: bool) -> Result<Arc<Groups>, ApiError> {
        let current = |max_age: Duration| {
            let index = self.index.lock().unwrap_or_else(|e| e.into_inner());
            index
                .checked_at
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
        let checked_at = Instant::now();
        let generation = self.store.groups_generation().await?;
        if !fresh {
            let mut index = self.index.lock().unwrap_or_else(|e| e.into_inner());
            if index.checked_at.is_some() && index.generation.as_ref() == Some(&generation) {
                index.checked_at = Some(checked_at);
                return Ok(Arc::clone(&index.groups));
            }
        }
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
        let groups = Arc::new(Groups::of(groups));
        let mut index = self.index.lock().unwrap_or_else(|e| e.into_inner());
        index.checked_at = Some(checked_at);
        index.generation = Some(generation);
        index.groups = Arc::clone(&groups);
        Ok(groups)
    }

    /// A definition was put or deleted here: a new generation for the other replicas, and
    /// this replica's index read again at its next use.
    async fn changed(&self) -> Result<(), ApiError> {
        self.index
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .checked_at = None;
        self.store.bump_groups_generation().await?;
        Ok(())
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

    use autoscaled_fixtures::cpu_utilization as cpu;

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
