//! Policies and scaling groups: the API's messages ↔ the store's. Their names and a group's
//! rules are autoscaled-wire's ([`autoscaled_wire::convert::fleet`], re-exported here).

use prost::Message;

pub(crate) use autoscaled_wire::convert::fleet::*;

use crate::{
    api::status::ApiError,
    engine::{
        hpa::budget::{self, Ledger},
        time::Time,
    },
    pb::v1 as pb,
    store::{ScalingGroupDef, StoredPolicy},
};

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
