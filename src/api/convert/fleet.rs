//! Policies and scaling groups: the API's messages ↔ the store's, validated field by field
//! (each violation names its field, e.g. `group.capacity`).

use prost::Message;

use super::Violations;
use crate::{
    api::status::ApiError,
    engine::{
        hpa::budget::{self, Ledger},
        time::Time,
    },
    pb::v1 as pb,
    store::{ScalingGroupDef, StoredPolicy},
};

/// The longest policy or group name.
pub(crate) const MAX_NAME_BYTES: usize = 253;
/// The most selectors (keys, prefixes, policies) and unit overrides of one group.
pub(crate) const MAX_SELECTORS: usize = 1000;

/// Checks a policy's or group's name at `field`: 1 to 253 bytes of ASCII letters, digits and
/// `-_./:` (so a key prefix such as `team-a/web` is a name, and an authorization rule's
/// prefixes cover names as they cover keys).
pub(crate) fn check_name(v: &mut Violations, field: &str, name: &str) {
    if name.is_empty() {
        v.add(field, "must not be empty");
    } else if name.len() > MAX_NAME_BYTES {
        v.add(
            field,
            format!("must be at most {MAX_NAME_BYTES} bytes, got {}", name.len()),
        );
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_./:".contains(&b))
    {
        v.add(
            field,
            "may only contain ASCII letters, digits and the characters - _ . / :",
        );
    }
}

/// A name given alone (Get, Delete).
pub(crate) fn name(field: &str, name: &str) -> Result<(), ApiError> {
    let mut v = Violations::default();
    check_name(&mut v, field, name);
    v.into_result(())
}

/// The stored form of a policy put at `now` as `version`; the spec is checked by the caller
/// (it is a partial spec: see `api::fleet`).
pub(crate) fn stored_policy(
    spec: &pb::HorizontalSpec,
    version: u64,
    now: Time,
    owner: Option<String>,
) -> StoredPolicy {
    StoredPolicy {
        version,
        update_time: now,
        horizontal_spec: spec.encode_to_vec(),
        owner,
    }
}

/// The API's policy from the stored one.
pub(crate) fn policy(name: &str, p: &StoredPolicy) -> Result<pb::Policy, ApiError> {
    let spec = pb::HorizontalSpec::decode(p.horizontal_spec.as_slice())
        .map_err(|e| ApiError::Internal(format!("policy {name:?}: stored spec: {e}")))?;
    Ok(pb::Policy {
        name: name.to_owned(),
        spec: Some(spec),
        version: p.version,
        update_time: Some(super::to_timestamp(p.update_time)),
    })
}

/// Checks a group's definition (`group.*`), keeping nothing of the request's `version`.
pub(crate) fn check_group(g: &pb::ScalingGroup, key_bytes: usize) -> Result<(), ApiError> {
    let mut v = Violations::default();
    check_name(&mut v, "group.name", &g.name);
    if !(1..=budget::MAX_CAPACITY).contains(&g.capacity) {
        v.add(
            "group.capacity",
            format!("must be 1 to {} units", budget::MAX_CAPACITY),
        );
    }
    let units_ok = |u: i64| (1..=budget::MAX_UNITS_PER_REPLICA).contains(&u);
    if g.units_per_replica != 0 && !units_ok(g.units_per_replica) {
        v.add(
            "group.units_per_replica",
            format!("must be 1 to {} (0: 1)", budget::MAX_UNITS_PER_REPLICA),
        );
    }
    for (key, &units) in &g.member_units {
        if key.is_empty() || key.len() > key_bytes || key.chars().any(char::is_control) {
            v.add(
                "group.member_units",
                format!("keys must be target keys (1 to {key_bytes} bytes, no control characters)"),
            );
            break;
        }
        if !units_ok(units) {
            v.add(
                format!("group.member_units[{key}]"),
                format!("must be 1 to {}", budget::MAX_UNITS_PER_REPLICA),
            );
        }
    }
    let selectors = g.member_keys.len()
        + g.member_prefixes.len()
        + g.member_policies.len()
        + g.member_units.len();
    if selectors > MAX_SELECTORS {
        v.add(
            "group.member_keys",
            format!("keys, prefixes, policies and unit overrides: at most {MAX_SELECTORS} in all"),
        );
    }
    if g.member_keys.is_empty() && g.member_prefixes.is_empty() && g.member_policies.is_empty() {
        v.add(
            "group.member_keys",
            "a group selects its members: give member_keys, member_prefixes or member_policies",
        );
    }
    for (i, k) in g.member_keys.iter().enumerate() {
        if k.is_empty() || k.len() > key_bytes || k.chars().any(char::is_control) {
            v.add(
                format!("group.member_keys[{i}]"),
                format!("must be a target key (1 to {key_bytes} bytes, no control characters)"),
            );
        }
    }
    for (i, p) in g.member_prefixes.iter().enumerate() {
        if p.is_empty() || p.len() > key_bytes || p.chars().any(char::is_control) {
            v.add(
                format!("group.member_prefixes[{i}]"),
                format!(
                    "must be a key prefix (1 to {key_bytes} bytes, no control characters; all targets is not a group)"
                ),
            );
        }
    }
    for (i, p) in g.member_policies.iter().enumerate() {
        check_name(&mut v, &format!("group.member_policies[{i}]"), p);
    }
    v.into_result(())
}

/// The stored definition of a checked group, keeping `ledger` (what the members hold).
pub(crate) fn stored_group(
    g: &pb::ScalingGroup,
    version: u64,
    now: Time,
    mut ledger: Ledger,
    scope: Option<Vec<String>>,
    owner: Option<String>,
) -> ScalingGroupDef {
    ledger.capacity = g.capacity;
    let units_per_replica = if g.units_per_replica == 0 {
        1
    } else {
        g.units_per_replica
    };
    ScalingGroupDef {
        version,
        update_time: now,
        units_per_replica,
        member_units: g.member_units.clone().into_iter().collect(),
        member_prefixes: g.member_prefixes.clone(),
        member_policies: g.member_policies.clone(),
        member_keys: g.member_keys.clone(),
        ledger,
        scope,
        owner,
    }
}

/// The API's group from the stored one.
pub(crate) fn group(name: &str, g: &ScalingGroupDef) -> pb::ScalingGroup {
    pb::ScalingGroup {
        name: name.to_owned(),
        capacity: g.ledger.capacity,
        units_per_replica: g.units_per_replica,
        member_units: g.member_units.clone().into_iter().collect(),
        member_prefixes: g.member_prefixes.clone(),
        member_policies: g.member_policies.clone(),
        member_keys: g.member_keys.clone(),
        version: g.version,
    }
}

/// A group with what its members hold and their fair shares of it now.
pub(crate) fn group_status(name: &str, g: &ScalingGroupDef) -> pb::ScalingGroupStatus {
    let demands: Vec<budget::Demand> = g
        .ledger
        .members
        .values()
        .map(|e| budget::Demand {
            min: e.min,
            demand: e.demand,
            units: e.units,
        })
        .collect();
    let shares = budget::fair_shares(g.ledger.capacity, &demands);
    let used = g.ledger.held();
    pb::ScalingGroupStatus {
        group: Some(group(name, g)),
        used,
        residual: (g.ledger.capacity - used).max(0),
        members: g
            .ledger
            .members
            .iter()
            .zip(shares)
            .map(|((key, e), fair_share)| pb::GroupMember {
                target_key: key.clone(),
                uncapped_replicas: e.demand,
                current_replicas: e.current,
                desired_replicas: e.told,
                min_replicas: e.min,
                units_per_replica: e.units,
                held: e.held(),
                fair_share,
            })
            .collect(),
    }
}
