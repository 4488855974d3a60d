//! The policy and scaling-group records (version 2): explicit conversions between the store's
//! [`StoredPolicy`] / [`ScalingGroupDef`] (with the engine's [`Ledger`]) and the storage-only
//! messages of `proto/store/v1/records.proto`.

use super::{VERSION_BINARY, corrupt, decode_binary, encode_binary, pb, versioned};
use crate::{
    engine::{
        hpa::budget::{Ledger, LedgerEntry},
        time::Time,
    },
    store::{
        StoreError,
        state::{ScalingGroupDef, StoredPolicy},
    },
};

/// What a policy record is called in errors (`store::fleet::POLICIES`' kind).
pub(crate) const POLICY: &str = "policy";
/// What a scaling-group record is called in errors (`store::fleet::GROUPS`' kind).
pub(crate) const GROUP: &str = "scaling group";

/// The versions these records have.
const VERSIONS: &[u8] = &[VERSION_BINARY];

/// The record of a policy.
pub(crate) fn encode_policy(p: &StoredPolicy) -> Vec<u8> {
    encode_binary(&pb::PolicyRecord {
        version: p.version,
        update_time_ms: p.update_time.unix_millis(),
        horizontal_spec: p.horizontal_spec.clone(),
        owner: p.owner.clone().unwrap_or_default(),
    })
}

/// A policy from its record.
pub(crate) fn decode_policy(name: &str, bytes: &[u8]) -> Result<StoredPolicy, StoreError> {
    let body = binary_body(POLICY, name, bytes)?;
    let r: pb::PolicyRecord = decode_binary(POLICY, name, body)?;
    Ok(StoredPolicy {
        version: r.version,
        update_time: Time::from_unix_millis(r.update_time_ms),
        horizontal_spec: r.horizontal_spec,
        owner: (!r.owner.is_empty()).then_some(r.owner),
    })
}

/// The record of a group.
pub(crate) fn encode_group(g: &ScalingGroupDef) -> Vec<u8> {
    encode_binary(&pb::ScalingGroupRecord {
        version: g.version,
        update_time_ms: g.update_time.unix_millis(),
        capacity: g.ledger.capacity,
        units_per_replica: g.units_per_replica,
        member_units: g.member_units.clone().into_iter().collect(),
        member_prefixes: g.member_prefixes.clone(),
        member_policies: g.member_policies.clone(),
        member_keys: g.member_keys.clone(),
        ledger: g
            .ledger
            .members
            .iter()
            .map(|(key, e)| pb::LedgerEntry {
                target_key: key.clone(),
                demand: e.demand,
                current: e.current,
                told: e.told,
                min: e.min,
                units: e.units,
            })
            .collect(),
        scoped: g.scope.is_some(),
        scope: g.scope.clone().unwrap_or_default(),
        owner: g.owner.clone().unwrap_or_default(),
        capacity_schedules: g
            .capacity_schedules
            .iter()
            .map(super::hpa::schedule_record)
            .collect(),
    })
}

/// A group from its record.
pub(crate) fn decode_group(name: &str, bytes: &[u8]) -> Result<ScalingGroupDef, StoreError> {
    let body = binary_body(GROUP, name, bytes)?;
    let r: pb::ScalingGroupRecord = decode_binary(GROUP, name, body)?;
    if r.ledger
        .windows(2)
        .any(|w| w[0].target_key >= w[1].target_key)
    {
        return Err(corrupt(GROUP, name, "ledger not in key order"));
    }
    Ok(ScalingGroupDef {
        version: r.version,
        update_time: Time::from_unix_millis(r.update_time_ms),
        units_per_replica: r.units_per_replica,
        member_units: r.member_units.into_iter().collect(),
        member_prefixes: r.member_prefixes,
        member_policies: r.member_policies,
        member_keys: r.member_keys,
        scope: r.scoped.then_some(r.scope),
        owner: (!r.owner.is_empty()).then_some(r.owner),
        capacity_schedules: r
            .capacity_schedules
            .iter()
            .map(super::hpa::schedule_of_record)
            .collect(),
        ledger: Ledger {
            capacity: r.capacity,
            members: r
                .ledger
                .into_iter()
                .map(|e| {
                    (
                        e.target_key,
                        LedgerEntry {
                            demand: e.demand,
                            current: e.current,
                            told: e.told,
                            min: e.min,
                            units: e.units,
                        },
                    )
                })
                .collect(),
        },
    })
}

fn binary_body<'a>(kind: &'static str, key: &str, bytes: &'a [u8]) -> Result<&'a [u8], StoreError> {
    match versioned(kind, key, bytes, VERSIONS)? {
        super::Versioned::Binary(body) => Ok(body),
        super::Versioned::Json(_) => Err(corrupt(kind, key, "a JSON record of a binary-only kind")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn golden_group() -> ScalingGroupDef {
        let mut g = ScalingGroupDef {
            version: 3,
            update_time: Time::from_unix_millis(1_800_000_000_123),
            units_per_replica: 1,
            member_units: [("inference/llama".to_owned(), 2)].into_iter().collect(),
            member_prefixes: vec!["inference/".into()],
            member_policies: vec!["gpu-tier".into()],
            member_keys: vec!["batch/one".into()],
            ledger: Ledger {
                capacity: 10,
                ..Ledger::default()
            },
            scope: Some(vec!["inference/".into()]),
            owner: None,
            capacity_schedules: Vec::new(),
        };
        g.ledger.members.insert(
            "inference/llama".into(),
            LedgerEntry {
                demand: 6,
                current: 3,
                told: 4,
                min: 1,
                units: 2,
            },
        );
        g
    }

    const GOLDEN_GROUP: &str = "02080310f6c1e285e368180a20012a130a0f696e666572656e63652f6c6c616d611002320a696e666572656e63652f3a086770752d74696572420962617463682f6f6e654a1b0a0f696e666572656e63652f6c6c616d611006180320042801300250015a0a696e666572656e63652f";
    const GOLDEN_POLICY: &str = "02080710f6c1e285e3681a04100a1801";

    #[test]
    fn golden_bytes() {
        let g = golden_group();
        let bytes = encode_group(&g);
        assert_eq!(hex(&bytes), GOLDEN_GROUP);
        assert_eq!(decode_group("g", &bytes).unwrap(), g);
        let p = StoredPolicy {
            version: 7,
            update_time: Time::from_unix_millis(1_800_000_000_123),
            horizontal_spec: vec![0x10, 0x0a, 0x18, 0x01],
            owner: None,
        };
        let bytes = encode_policy(&p);
        assert_eq!(hex(&bytes), GOLDEN_POLICY);
        assert_eq!(decode_policy("p", &bytes).unwrap(), p);
        // An owner (under an authorization file) is one more field; the bytes above are
        // unchanged without one.
        let owned = StoredPolicy {
            owner: Some("team-a".to_owned()),
            ..p
        };
        assert_eq!(decode_policy("p", &encode_policy(&owned)).unwrap(), owned);
        let owned = ScalingGroupDef {
            owner: Some("team-a".to_owned()),
            ..golden_group()
        };
        assert_eq!(decode_group("g", &encode_group(&owned)).unwrap(), owned);
        // So are capacity schedules (the bytes above hold none).
        let scheduled = ScalingGroupDef {
            capacity_schedules: vec![crate::engine::hpa::schedule::Schedule {
                name: "sale".to_owned(),
                start: "0 8 * 11 5".to_owned(),
                end: None,
                duration: Some(std::time::Duration::from_secs(86_400)),
                time_zone: "America/New_York".to_owned(),
                min_replicas: Some(40),
                max_replicas: None,
            }],
            ..golden_group()
        };
        assert_eq!(
            decode_group("g", &encode_group(&scheduled)).unwrap(),
            scheduled
        );
    }

    #[test]
    fn a_ledger_out_of_order_is_corrupt() {
        let mut bytes = encode_group(&golden_group());
        let mut r: pb::ScalingGroupRecord = prost::Message::decode(&bytes[1..]).unwrap();
        r.ledger.push(r.ledger[0].clone());
        bytes.truncate(1);
        bytes.extend(prost::Message::encode_to_vec(&r));
        assert!(matches!(
            decode_group("g", &bytes),
            Err(StoreError::Corrupt { .. })
        ));
    }
}
