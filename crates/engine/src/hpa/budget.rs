//! Scaling groups: a capacity shared by several targets, applied inside each member's
//! decision, after the HPA's own stabilization and rate limits (Kubernetes has no such thing;
//! Kedify's ScalingGroups and KEDA issue #6682 are the prior art, docs/groups.md compares).
//!
//! The rules, all pure:
//!
//! * **Demand** is what the plain HPA decides for the member (`evaluate`'s desired count:
//!   stabilized and rate-limited, never capped). The stabilization window keeps these uncapped
//!   recommendations, so a member scales up at once when capacity frees.
//! * **Fair share** ([`fair_shares`]): max-min fairness in units over the members' demands
//!   (progressive filling, as for network flows): each member first gets its minimum; then
//!   the next replica always goes to the member that holds the fewest units (ties: the smaller
//!   key) whose next replica still fits. With members of different weights this raises the
//!   smallest holding first: 10 units, x at 3 per replica wanting 3 and y at 1 wanting 6, give
//!   x = 2 and y = 4 (6 and 4 units), not x = 1 and y = 6 (3 and 6, one unit idle). A function
//!   of the demands alone, so steady demands give a steady allocation (no flip-flop).
//! * **Held** ([`LedgerEntry::held`]): what a member runs or was told to run, whichever is
//!   higher; its current replicas count until it reports the smaller count, so a member
//!   scaling up is never given units another member still holds.
//! * **Allowed** ([`Ledger::allocation`]): the fair share, within what the others do not hold,
//!   never below the member's minimum, and never below its current count while that is within
//!   its fair share (only members above their share give units back).
//! * **Capped** (`reconcile`'s budget step): the demand, capped at the allowed count; a cut
//!   below the current count goes no faster than the member's own scale-down rate limit
//!   (`calculateScaleDownLimitWithBehaviors`). ScalingLimited True / `BudgetLimited` says so.
//!
//! Invariant: if the members held at most the capacity before a member's decision, they hold
//! at most the capacity after it (the property tests check it for any interleaving). The
//! minimums are always granted: members whose minimums alone exceed the capacity hold their
//! minimums.

use std::{
    cmp::Reverse,
    collections::{BTreeMap, BinaryHeap},
};

use serde::{Deserialize, Serialize};

/// The most members one group may have: the fair share is computed over all of them at each
/// member's decision.
pub const MAX_MEMBERS: usize = 1000;
/// The most units one replica of a member may weigh (GPUs per replica, say).
pub const MAX_UNITS_PER_REPLICA: i64 = 1000;
/// The largest capacity of a group, in units.
pub const MAX_CAPACITY: i64 = 1_000_000_000;

/// What the group knows of one member, as of its last decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// The plain HPA's count at the member's last decision (uncapped).
    pub demand: i32,
    /// The member's current replicas at that decision.
    pub current: i32,
    /// The count the member was told (its desired replicas, capped).
    pub told: i32,
    /// The member's minimum replicas (always granted).
    pub min: i32,
    /// Units one replica weighs.
    pub units: i64,
}

impl LedgerEntry {
    /// The units the member holds: what it runs or was told to run, whichever is higher.
    pub fn held(&self) -> i64 {
        i64::from(self.current.max(self.told).max(0)) * self.units
    }
}

/// A group's capacity and its members' last decisions, keyed by target key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// Units the members may hold together.
    pub capacity: i64,
    /// The members that decided at least once since they joined.
    pub members: BTreeMap<String, LedgerEntry>,
}

impl Ledger {
    /// Whether `key` may decide in this group: it is a member already, or the group has
    /// room for one more ([`MAX_MEMBERS`]).
    pub fn admits(&self, key: &str) -> bool {
        self.members.contains_key(key) || self.members.len() < MAX_MEMBERS
    }
}

/// Which group a deciding target belongs to, and what the group knows
/// ([`super::evaluate_member`]).
#[derive(Clone, Copy, Debug)]
pub struct Membership<'a> {
    /// The group's name.
    pub group: &'a str,
    /// The group's ledger as read for this decision.
    pub ledger: &'a Ledger,
    /// The member's target key.
    pub key: &'a str,
    /// Units one replica of the member weighs.
    pub units: i64,
}

/// One member's demand, for [`fair_shares`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Demand {
    /// Replicas always granted.
    pub min: i32,
    /// Replicas wanted (taken as at least `min`).
    pub demand: i32,
    /// Units per replica (at least 1).
    pub units: i64,
}

/// The max-min fair shares (replicas) of `capacity` units among `members`, in their order
/// (which breaks ties: pass them in key order). Each member gets its minimum; the next
/// replica goes to the member holding the fewest units whose next replica fits (progressive
/// filling).
///
/// Computed by water-filling: the highest level `L` (units) at which every member at
/// `clamp(ceil(L / units), min, demand)` replicas (the fewest replicas holding at least `L`)
/// fits, found by bisection; progressive filling passes through exactly that allocation,
/// and goes on replica by replica from there. O(n log capacity + remainder), the remainder
/// being below the number of members.
pub fn fair_shares(capacity: i64, members: &[Demand]) -> Vec<i32> {
    let want = |d: &Demand| d.demand.max(d.min).max(0);
    let units = |d: &Demand| d.units.max(1);
    let at_level = |level: i64| -> Vec<i32> {
        members
            .iter()
            .map(|d| {
                let by_level = i32::try_from((level + units(d) - 1) / units(d)).unwrap_or(i32::MAX);
                by_level.clamp(d.min.max(0), want(d))
            })
            .collect()
    };
    let cost = |shares: &[i32]| -> i64 {
        shares
            .iter()
            .zip(members)
            .map(|(&s, d)| i64::from(s) * units(d))
            .sum()
    };
    let top = members
        .iter()
        .map(|d| i64::from(want(d)) * units(d))
        .max()
        .unwrap_or(0);
    let full = at_level(top);
    if cost(&full) <= capacity {
        return full;
    }
    let floor = at_level(0);
    if cost(&floor) >= capacity {
        return floor;
    }
    // cost(at_level(lo)) <= capacity < cost(at_level(hi))
    let (mut lo, mut hi) = (0i64, top);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if cost(&at_level(mid)) <= capacity {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let mut shares = at_level(lo);
    let mut left = capacity - cost(&shares);
    // The remainder: next replicas in (units held, position) order, each while it fits. A
    // member whose next replica does not fit now never fits later (`left` only shrinks), so it
    // leaves the queue.
    let mut queue: BinaryHeap<Reverse<(i64, usize)>> = shares
        .iter()
        .enumerate()
        .filter(|&(i, &s)| s < want(&members[i]))
        .map(|(i, &s)| Reverse((i64::from(s) * units(&members[i]), i)))
        .collect();
    while let Some(Reverse((_, i))) = queue.pop() {
        let u = units(&members[i]);
        if u > left {
            continue;
        }
        shares[i] += 1;
        left -= u;
        if shares[i] < want(&members[i]) {
            queue.push(Reverse((i64::from(shares[i]) * u, i)));
        }
    }
    shares
}

/// What a member may run at this decision, and the figures its report shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// The group's name.
    pub group: String,
    /// The group's capacity in units.
    pub capacity: i64,
    /// Units one replica of the member weighs.
    pub units: i64,
    /// The member's max-min fair share, in replicas.
    pub fair_share: i32,
    /// Units the other members hold.
    pub others_held: i64,
    /// The most replicas the member may be told now.
    pub allowed: i32,
}

impl Ledger {
    /// The allocation of `key` deciding now with `demand` (the plain HPA's count) at
    /// `current` replicas, minimum `min`, `units` per replica (see the module documentation).
    pub fn allocation(
        &self,
        group: &str,
        key: &str,
        demand: i32,
        current: i32,
        min: i32,
        units: i64,
    ) -> Allocation {
        let mut members: Vec<(&str, Demand)> = Vec::with_capacity(self.members.len() + 1);
        let mut others_held = 0i64;
        let mut placed = false;
        for (k, e) in &self.members {
            if k == key {
                continue;
            }
            if !placed && k.as_str() > key {
                members.push((key, Demand { min, demand, units }));
                placed = true;
            }
            members.push((
                k,
                Demand {
                    min: e.min,
                    demand: e.demand,
                    units: e.units,
                },
            ));
            others_held += e.held();
        }
        if !placed {
            members.push((key, Demand { min, demand, units }));
        }
        let demands: Vec<Demand> = members.iter().map(|(_, d)| *d).collect();
        let shares = fair_shares(self.capacity, &demands);
        let fair_share = members
            .iter()
            .zip(&shares)
            .find(|((k, _), _)| *k == key)
            .map_or(min, |(_, &s)| s);
        let free = (self.capacity - others_held).max(0) / units.max(1);
        let free = i32::try_from(free).unwrap_or(i32::MAX);
        let allowed = fair_share.min(free).max(current.min(fair_share)).max(min);
        Allocation {
            group: group.to_owned(),
            capacity: self.capacity,
            units,
            fair_share,
            others_held,
            allowed,
        }
    }

    /// The units all members hold.
    pub fn held(&self) -> i64 {
        self.members.values().map(LedgerEntry::held).sum()
    }
}

/// What a budget did to one decision (`Decision::budget`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetReport {
    /// The group's name.
    pub group: String,
    /// The plain HPA's count: what the member would run without the group.
    pub uncapped_replicas: i32,
    /// The member's fair share at this decision.
    pub fair_share: i32,
    /// The group's capacity in units.
    pub capacity: i64,
    /// Units one replica of the member weighs.
    pub units_per_replica: i64,
    /// Units the group's members hold after this decision.
    pub used: i64,
}

impl BudgetReport {
    /// Units still free in the group after this decision (0 when over).
    pub fn residual(&self) -> i64 {
        (self.capacity - self.used).max(0)
    }
}

/// The ScalingLimited message of a decision the budget capped.
pub fn limited_message(group: &str, residual: i64, capacity: i64) -> String {
    format!(
        "the desired replica count is limited by the budget of scaling group {group} ({residual} of {capacity} units left)"
    )
}

/// The rescale reason when the budget turns a member's scale-up into a scale-down.
pub fn rescale_reason(group: &str) -> String {
    format!("scaling group {group} above its fair share")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(min: i32, demand: i32, units: i64) -> Demand {
        Demand { min, demand, units }
    }

    #[test]
    fn the_worked_example_shares_ten_units_as_four_three_three() {
        // Three services, 10 GPUs, one GPU per replica, demands 6, 4 and 5.
        let shares = fair_shares(10, &[d(1, 6, 1), d(1, 4, 1), d(1, 5, 1)]);
        assert_eq!(shares, vec![4, 3, 3]);
    }

    #[test]
    fn demands_within_capacity_are_granted_and_minimums_always() {
        assert_eq!(fair_shares(100, &[d(1, 6, 1), d(0, 4, 2)]), vec![6, 4]);
        assert_eq!(fair_shares(3, &[d(2, 6, 1), d(2, 4, 1)]), vec![2, 2]);
        assert_eq!(fair_shares(0, &[]), Vec::<i32>::new());
    }

    #[test]
    fn mixed_weights_raise_the_smallest_holding_first() {
        // 10 units: x at 3 per replica wanting 3, y at 1 wanting 6. Max-min in units gives
        // 6 and 4; handing each replica to whoever holds least after taking it gave 3 and 6
        // with one unit idle.
        assert_eq!(fair_shares(10, &[d(0, 3, 3), d(0, 6, 1)]), vec![2, 4]);
        assert_eq!(fair_shares(10, &[d(1, 3, 3), d(1, 6, 1)]), vec![2, 4]);
    }

    #[test]
    fn a_small_member_takes_what_a_heavy_one_cannot_use() {
        // 9 units: the heavy member (4 per replica) gets 1 (4 units), the light one 5.
        assert_eq!(fair_shares(9, &[d(0, 10, 4), d(0, 10, 1)]), vec![1, 5]);
    }

    #[test]
    fn a_member_within_its_share_keeps_its_count_while_others_give_back() {
        let mut ledger = Ledger {
            capacity: 10,
            ..Ledger::default()
        };
        // b holds 8 (over its share), a runs 2 and wants 6.
        ledger.members.insert(
            "b".into(),
            LedgerEntry {
                demand: 8,
                current: 8,
                told: 8,
                min: 1,
                units: 1,
            },
        );
        let a = ledger.allocation("g", "a", 6, 2, 1, 1);
        assert_eq!((a.fair_share, a.others_held, a.allowed), (5, 8, 2));
        // The capacity lowered to 6: a at 4 is above its share (3), so it gives one back.
        ledger.capacity = 6;
        let a = ledger.allocation("g", "a", 6, 4, 1, 1);
        assert_eq!((a.fair_share, a.allowed), (3, 3));
    }
}
