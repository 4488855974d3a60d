//! Policies and scaling groups: their names and a group's rules, validated field by field
//! (each violation names its field, e.g. `group.capacity`). Their stored forms are the
//! server's (its `api::convert::fleet`).

use super::{Violations, hpa_request::Window};
use crate::{
    engine::hpa::{budget, schedule},
    pb::v1 as pb,
    status::ApiError,
};

/// The longest policy or group name.
pub const MAX_NAME_BYTES: usize = 253;
/// The most selectors (keys, prefixes, policies) and unit overrides of one group.
pub const MAX_SELECTORS: usize = 1000;

/// Checks a policy's or group's name at `field`: 1 to 253 bytes of ASCII letters, digits and
/// `-_./:` (so a key prefix such as `team-a/web` is a name, and an authorization rule's
/// prefixes cover names as they cover keys).
pub fn check_name(v: &mut Violations, field: &str, name: &str) {
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
pub fn name(field: &str, name: &str) -> Result<(), ApiError> {
    let mut v = Violations::default();
    check_name(&mut v, field, name);
    v.into_result(())
}

/// Checks a group's definition (`group.*`), keeping nothing of the request's `version`; its
/// capacity schedules in the engine's form ([`capacity_schedules`]).
pub fn check_group(
    g: &pb::ScalingGroup,
    key_bytes: usize,
) -> Result<Vec<schedule::Schedule>, ApiError> {
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
    let schedules = capacity_schedules(&mut v, &g.capacity_schedules);
    v.into_result(schedules)
}

/// A group's capacity schedules in the engine's form (a [`schedule::Schedule`] whose
/// `min_replicas` / `max_replicas` hold the capacity's floor and ceiling), each violation
/// named under `group.capacity_schedules[i]` with the capacity's own field names.
fn capacity_schedules(
    v: &mut Violations,
    list: &[pb::CapacitySchedule],
) -> Vec<schedule::Schedule> {
    let mut bounds_ok = true;
    let mut out = Vec::with_capacity(list.len());
    for (i, s) in list.iter().enumerate() {
        let path = format!("group.capacity_schedules[{i}]");
        let mut units = |field: &str, c: Option<i64>| -> Option<i32> {
            let c = c?;
            if (1..=budget::MAX_CAPACITY).contains(&c) {
                i32::try_from(c).ok()
            } else {
                v.add(
                    format!("{path}.{field}"),
                    format!("must be 1 to {} units", budget::MAX_CAPACITY),
                );
                bounds_ok = false;
                None
            }
        };
        let min_replicas = units("min_capacity", s.min_capacity);
        let max_replicas = units("max_capacity", s.max_capacity);
        out.push(s.window(v, &path, (min_replicas, max_replicas)));
    }
    if !bounds_ok {
        return out;
    }
    if let Err(violations) = schedule::compile(&out) {
        for e in violations {
            // `schedules[2].max_replicas` → `group.capacity_schedules[2].max_capacity`.
            let field = e
                .field
                .replacen("schedules", "group.capacity_schedules", 1)
                .replace("min_replicas", "min_capacity")
                .replace("max_replicas", "max_capacity");
            let description = if e.description.contains("min_replicas") {
                "must set min_capacity, max_capacity or both".to_owned()
            } else if field.ends_with("max_capacity") {
                "must be greater than or equal to min_capacity".to_owned()
            } else {
                e.description
            };
            v.add(field, description);
        }
    }
    out
}
