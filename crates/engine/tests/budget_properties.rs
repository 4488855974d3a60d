//! Properties of scaling groups (`engine::hpa::budget`), against reference models:
//!
//! * `fair_shares` equals the naive greedy that hands out one replica at a time;
//! * any interleaving of members' decisions (members applying their counts late, demands
//!   changing, capacity lowered) keeps the units held at or below the capacity;
//! * steady demands converge to the fair shares within a bounded number of periods and stay;
//! * one member with room decides exactly as the plain HPA, and under a tighter capacity as
//!   the plain HPA capped at it;
//! * freeing the budget (the capacity raised, the other members leaving) gives each member
//!   what the plain HPA decides from the same history at that moment, on the legacy path and
//!   with a behavior.

mod common;

use std::collections::BTreeMap;

use autoscaled_engine::{
    hpa::budget::{Demand, Ledger, Membership, fair_shares},
    hpa::history::History,
    hpa::observation::Observation,
    hpa::settings::Settings,
    hpa::spec::{Behavior, HorizontalSpec},
    hpa::{evaluate, evaluate_member},
    time::Time,
};
use proptest::prelude::*;

const START: Time = Time::from_unix_secs(1_800_000_000);

/// One replica at a time to the member holding the fewest units (ties: the first) whose next
/// replica fits (progressive filling): the definition `fair_shares` computes faster.
fn greedy(capacity: i64, members: &[Demand]) -> Vec<i32> {
    let mut shares: Vec<i32> = members.iter().map(|d| d.min).collect();
    let mut left = capacity
        - members
            .iter()
            .map(|d| i64::from(d.min) * d.units)
            .sum::<i64>();
    loop {
        let next = members
            .iter()
            .enumerate()
            .filter(|&(i, d)| shares[i] < d.demand.max(d.min) && d.units <= left)
            .min_by_key(|&(i, d)| (i64::from(shares[i]) * d.units, i));
        let Some((i, d)) = next else { break };
        shares[i] += 1;
        left -= d.units;
    }
    shares
}

fn spec(min: i32, max: i32) -> HorizontalSpec {
    spec_with(min, max, None)
}

fn spec_with(min: i32, max: i32, behavior: Option<Behavior>) -> HorizontalSpec {
    // A member's demand is set directly (`common::queue_spec`).
    HorizontalSpec {
        behavior,
        ..common::queue_spec(min, max)
    }
}

fn settings() -> Settings {
    Settings {
        tolerance: 0.0,
        ..Settings::default()
    }
}

fn observation(current: i32, need: i32) -> Observation {
    common::queue_observation(current, need)
}

/// A member as the orchestrator sees it.
#[derive(Clone, Debug)]
struct Member {
    key: String,
    min: i32,
    units: i64,
    running: i32,
    told: i32,
    history: History,
    /// The spec's behavior (`None`: the legacy path).
    behavior: Option<Behavior>,
}

fn members(mins: &[i32], units: &[i64]) -> Vec<Member> {
    mins.iter()
        .zip(units)
        .enumerate()
        .map(|(i, (&min, &units))| Member {
            key: format!("m{i}"),
            min,
            units,
            running: min,
            told: min,
            history: History::default(),
            behavior: None,
        })
        .collect()
}

/// One member's decision through the real engine; the ledger is updated as the store would.
fn decide(m: &mut Member, ledger: &mut Ledger, need: i32, now: Time) -> i32 {
    let (evaluation, entry) = evaluate_member(
        &settings(),
        &spec_with(m.min, 40, m.behavior.clone()),
        &observation(m.running, need),
        &m.history,
        now,
        Membership {
            group: "g",
            ledger,
            key: &m.key,
            units: m.units,
        },
    )
    .unwrap();
    m.history = evaluation.history;
    m.told = evaluation.decision.desired_replicas;
    ledger.members.insert(m.key.clone(), entry);
    m.told
}

/// The units held by the members the group knows (those that decided since they joined),
/// and by `joining`, which is about to decide, at what it runs.
fn held(ms: &[Member], ledger: &Ledger, joining: Option<usize>) -> i64 {
    ms.iter()
        .enumerate()
        .filter(|(i, m)| ledger.members.contains_key(&m.key) || joining == Some(*i))
        .map(|(_, m)| i64::from(m.running.max(m.told)) * m.units)
        .sum()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn fair_shares_equal_the_greedy_reference(
        capacity in 0..60i64,
        members in proptest::collection::vec((0..4i32, 0..20i32, 1..5i64), 0..7),
    ) {
        let members: Vec<Demand> = members
            .into_iter()
            .map(|(min, demand, units)| Demand { min, demand, units })
            .collect();
        let shares = fair_shares(capacity, &members);
        let reference = greedy(capacity, &members);
        prop_assert_eq!(&shares, &reference);
        let mins: i64 = members.iter().map(|d| i64::from(d.min) * d.units).sum();
        let used: i64 = shares.iter().zip(&members).map(|(&s, d)| i64::from(s) * d.units).sum();
        prop_assert!(used <= capacity.max(mins));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn any_interleaving_keeps_the_units_held_within_the_capacity(
        shape in proptest::collection::vec((1..3i32, 1..4i64), 1..5),
        extra in 0..30i64,
        steps in proptest::collection::vec((0..5usize, 0..30i32, any::<bool>(), 0..40i64), 1..60),
        lowered in proptest::option::of((0..60usize, 0..20i64)),
    ) {
        let (mins, units): (Vec<i32>, Vec<i64>) = shape.into_iter().unzip();
        let mut ms = members(&mins, &units);
        let floor: i64 = ms.iter().map(|m| i64::from(m.min) * m.units).sum();
        let mut ledger = Ledger { capacity: floor + extra, members: BTreeMap::new() };
        let mut now = START;
        for (step, &(who, need, applies, wait)) in steps.iter().enumerate() {
            if let Some((at, by)) = lowered
                && at == step
            {
                // The capacity lowered (never below the minimums): from here on the held
                // units never grow while above it.
                ledger.capacity = (ledger.capacity - by).max(floor);
            }
            let i = who % ms.len();
            if applies {
                ms[i].running = ms[i].told;
            }
            // A member counts from its first decision: before it, what it runs is unknown to
            // the group, so the decision is checked against what it ran when joining.
            let before = held(&ms, &ledger, Some(i));
            now = now.plus_secs(wait);
            decide(&mut ms[i], &mut ledger, need, now);
            let after = held(&ms, &ledger, None);
            prop_assert!(
                after <= ledger.capacity || after <= before,
                "held {before} -> {after} units, capacity {}", ledger.capacity
            );
            prop_assert!(ms.iter().all(|m| m.told >= m.min));
        }
    }

    #[test]
    fn steady_demands_converge_to_the_fair_shares_and_stay(
        shape in proptest::collection::vec((1..3i32, 1..4i64, 0..25i32), 1..5),
        extra in 0..30i64,
    ) {
        let mins: Vec<i32> = shape.iter().map(|s| s.0).collect();
        let units: Vec<i64> = shape.iter().map(|s| s.1).collect();
        let needs: Vec<i32> = shape.iter().map(|s| s.2).collect();
        let mut ms = members(&mins, &units);
        let floor: i64 = ms.iter().map(|m| i64::from(m.min) * m.units).sum();
        let capacity = floor + extra;
        let mut ledger = Ledger { capacity, members: BTreeMap::new() };
        let demands: Vec<Demand> = ms
            .iter()
            .zip(&needs)
            .map(|(m, &need)| Demand { min: m.min, demand: need.min(40), units: m.units })
            .collect();
        let fair = fair_shares(capacity, &demands);
        let mut now = START;
        let mut counts = Vec::new();
        // A period: every member decides once, 15 s apart, applying what it was told.
        for _period in 0..20 {
            for (m, &need) in ms.iter_mut().zip(&needs) {
                now = now.plus_secs(15);
                m.running = m.told;
                decide(m, &mut ledger, need, now);
            }
            counts.push(ms.iter().map(|m| m.told).collect::<Vec<_>>());
        }
        // Converged within 10 periods, and no flip-flop after.
        prop_assert!(counts[9..].iter().all(|c| *c == fair), "{counts:?} vs {fair:?}");
    }

    #[test]
    fn one_member_decides_as_the_plain_hpa(
        min in 1..3i32,
        needs in proptest::collection::vec((0..30i32, 0..40i64), 1..20),
        capacity in 1..40i64,
    ) {
        let (mut roomy, mut tight) = (Ledger { capacity: 40, ..Ledger::default() },
            Ledger { capacity: capacity.max(i64::from(min)), ..Ledger::default() });
        let (mut plain_history, mut current) = (History::default(), min);
        let (mut tight_history, mut tight_current) = (History::default(), min);
        let mut now = START;
        for (need, wait) in needs {
            now = now.plus_secs(wait);
            let plain = evaluate(&settings(), &spec(min, 40), &observation(current, need), &plain_history, now).unwrap();
            let (member, entry) = evaluate_member(
                &settings(), &spec(min, 40), &observation(current, need), &plain_history, now,
                Membership { group: "g", ledger: &roomy, key: "only", units: 1 },
            ).unwrap();
                    roomy.members.insert("only".into(), entry);
            let mut without = member.decision.clone();
            prop_assert!(without.budget.take().is_some());
            prop_assert_eq!(&without, &plain.decision);
            prop_assert_eq!(&member.history, &plain.history);
            plain_history = plain.history;
            current = plain.decision.desired_replicas;

            // Under a capacity below its demand: the plain count capped at the capacity.
            let uncapped = evaluate(&settings(), &spec(min, 40), &observation(tight_current, need), &tight_history, now).unwrap();
            let (capped, entry) = evaluate_member(
                &settings(), &spec(min, 40), &observation(tight_current, need), &tight_history, now,
                Membership { group: "g", ledger: &tight, key: "only", units: 1 },
            ).unwrap();
            tight.members.insert("only".into(), entry);
            let cap = i32::try_from(tight.capacity).unwrap();
            let expected = uncapped.decision.desired_replicas.min(cap.max(tight_current.min(cap)));
            prop_assert_eq!(capped.decision.desired_replicas, expected);
            tight_history = capped.history;
            tight_current = capped.decision.desired_replicas;
        }
    }

    #[test]
    fn freeing_the_budget_gives_what_the_plain_hpa_decides_from_the_same_history(
        shape in proptest::collection::vec((1..3i32, 1..4i64), 2..5),
        extra in 0..10i64,
        steps in proptest::collection::vec((0..5usize, 0..30i32, 0..40i64), 1..40),
        behavior in any::<bool>(),
        raised in any::<bool>(),
        after in proptest::collection::vec((0..30i32, 0..40i64), 1..10),
    ) {
        let (mins, units): (Vec<i32>, Vec<i64>) = shape.into_iter().unzip();
        let mut ms = members(&mins, &units);
        for m in &mut ms {
            m.behavior = behavior.then(Behavior::default);
        }
        let floor: i64 = ms.iter().map(|m| i64::from(m.min) * m.units).sum();
        let mut ledger = Ledger { capacity: floor + extra, members: BTreeMap::new() };
        let mut now = START;
        // Under a tight capacity: members capped, their windows holding uncapped demands.
        for &(who, need, wait) in &steps {
            let i = who % ms.len();
            ms[i].running = ms[i].told;
            now = now.plus_secs(wait);
            decide(&mut ms[i], &mut ledger, need, now);
        }
        // Freed: the capacity raised past every demand, or every other member gone.
        if raised {
            ledger.capacity = 1_000;
        } else {
            let keep = ms[0].key.clone();
            ledger.members.retain(|k, _| *k == keep);
            ledger.capacity = 1_000;
        }
        let m = &mut ms[0];
        for (need, wait) in after {
            m.running = m.told;
            now = now.plus_secs(wait);
            let spec = spec_with(m.min, 40, m.behavior.clone());
            let plain = evaluate(&settings(), &spec, &observation(m.running, need), &m.history, now).unwrap();
            let (member, entry) = evaluate_member(
                &settings(), &spec, &observation(m.running, need), &m.history, now,
                Membership { group: "g", ledger: &ledger, key: &m.key, units: m.units },
            ).unwrap();
            let mut without = member.decision.clone();
            prop_assert!(without.budget.take().is_some());
            prop_assert_eq!(&without, &plain.decision);
            prop_assert_eq!(&member.history, &plain.history);
            ledger.members.insert(m.key.clone(), entry);
            m.history = member.history;
            m.told = member.decision.desired_replicas;
        }
    }
}

/// The case from a new user's first hour: a member capped at 3 while its demand was 8; the
/// load falls to 1; the group is deleted. With a behavior (the default 0 s scale-up window)
/// the plain HPA holds 3 (the stabilization never scales up past the current recommendation)
/// and comes down once the window has passed. On the legacy path, Kubernetes' stabilization is
/// the window's highest recommendation in both directions (`stabilizeRecommendation`), so the
/// plain HPA goes back up to 8 within the legacy scale-up limit, as it does when maxReplicas
/// is raised over a window of higher recommendations: a member that should not, gets a behavior.
#[test]
fn a_group_deleted_under_a_falling_load_gives_the_plain_hpas_count() {
    for behavior in [Some(Behavior::default()), None] {
        let mut ms = members(&[1, 1], &[1, 1]);
        for m in &mut ms {
            m.behavior.clone_from(&behavior);
        }
        let mut ledger = Ledger {
            capacity: 4,
            members: BTreeMap::new(),
        };
        let mut now = START;
        // b holds 1; a wants 8 and is capped at 3.
        decide(&mut ms[1], &mut ledger, 1, now);
        for _ in 0..8 {
            now = now.plus_secs(15);
            ms[0].running = ms[0].told;
            decide(&mut ms[0], &mut ledger, 8, now);
        }
        assert_eq!(ms[0].told, 3);
        // The load falls, still capped for a minute; then the group is gone.
        let a = &mut ms[0];
        let spec = spec_with(1, 40, behavior.clone());
        let mut counts = Vec::new();
        for _ in 0..30 {
            now = now.plus_secs(15);
            a.running = a.told;
            let e = evaluate(
                &settings(),
                &spec,
                &observation(a.running, 1),
                &a.history,
                now,
            )
            .unwrap();
            a.history = e.history;
            a.told = e.decision.desired_replicas;
            counts.push(a.told);
        }
        if behavior.is_some() {
            assert!(counts.iter().all(|&c| c <= 3), "{counts:?}");
            assert_eq!(counts.last(), Some(&1), "{counts:?}");
        } else {
            assert_eq!(&counts[..2], &[6, 8], "{counts:?}");
        }
    }
}
