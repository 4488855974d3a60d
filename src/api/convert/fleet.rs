//! Policies and scaling groups: the API's messages ↔ the store's. Their names and a group's
//! rules are autoscaled-wire's ([`autoscaled_wire::convert::fleet`], re-exported here).

use prost::Message;

pub(crate) use autoscaled_wire::convert::fleet::*;

use crate::{
    api::status::ApiError,
    engine::{
        hpa::{
            budget::{self, Ledger},
            schedule,
        },
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

/// The stored definition of a group `check_group` passed (`capacity_schedules`: the engine
/// form it returned), keeping `ledger` (what the members hold).
pub(crate) fn stored_group(
    g: &pb::ScalingGroup,
    capacity_schedules: Vec<schedule::Schedule>,
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
        capacity_schedules,
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
        capacity_schedules: g
            .capacity_schedules
            .iter()
            .map(|s| pb::CapacitySchedule {
                name: s.name.clone(),
                start: s.start.clone(),
                end: s.end.clone().unwrap_or_default(),
                duration: s.duration.map(|d| prost_types::Duration {
                    seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                    nanos: 0,
                }),
                time_zone: s.time_zone.clone(),
                min_capacity: s.min_replicas.map(i64::from),
                max_capacity: s.max_replicas.map(i64::from),
            })
            .collect(),
    }
}

/// A group's capacity at `now` with its capacity schedules, and what is in force.
pub(crate) fn capacity_at(g: &ScalingGroupDef, now: Time) -> (i64, schedule::InForce) {
    match schedule::compile(&g.capacity_schedules) {
        Ok(compiled) => schedule::capacity_in_force(g.ledger.capacity, &compiled, now),
        // Checked when the group was put; a record that no longer compiles (a zone the
        // time zone database dropped) moves nothing.
        Err(_) => (g.ledger.capacity, schedule::InForce::default()),
    }
}

/// A group with what its members hold and their fair shares of it at `now`.
pub(crate) fn group_status(name: &str, g: &ScalingGroupDef, now: Time) -> pb::ScalingGroupStatus {
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
    let (capacity, in_force) = capacity_at(g, now);
    let shares = budget::fair_shares(capacity, &demands);
    let used = g.ledger.held();
    pb::ScalingGroupStatus {
        group: Some(group(name, g)),
        used,
        residual: (capacity - used).max(0),
        capacity_in_force: capacity,
        capacity_schedules_open: in_force.applied,
        capacity_next_change: in_force.until.map(super::to_timestamp),
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
