//! Policies and scaling groups end to end, over a real channel to a server on sled:
//!
//! * the worked example of docs/groups.md: three services share 10 GPUs with demands 6, 4 and
//!   5; period by period no more than 10 are ever held, the counts converge to the max-min fair
//!   shares 4, 3 and 3 and stay, each capped response says why, and the table is printed;
//! * a restart loses no allocation;
//! * concurrent calls of many members keep the sum within the capacity;
//! * a policy's change takes effect on the next call and is recorded with its version; a
//!   policy in use is not deleted unless forced; bad input is INVALID_ARGUMENT naming the
//!   field, and stores nothing.

use std::collections::BTreeMap;

use autoscaled::{config::Config, pb::v1 as pb};
use tonic::{Code, transport::Channel};

mod common;

use common::{TestServer, history};

type Client = pb::horizontal_autoscaler_client::HorizontalAutoscalerClient<Channel>;

const T0: i64 = 1_767_225_600;

/// The policy of the GPU tier: an External AverageValue metric, one replica per 1000 of
/// `queue`, so a member's demand is its queue / 1000.
fn gpu_policy(max: i32) -> pb::Policy {
    pb::Policy {
        name: "gpu-tier".into(),
        spec: Some(pb::HorizontalSpec {
            min_replicas: Some(1),
            max_replicas: max,
            metrics: vec![autoscaled_fixtures::external_average_value("queue", 1000)],
            settings: Some(pb::ControllerSettings {
                tolerance: Some(0.0),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A member's call naming the policy, with no spec of its own.
fn call(key: &str, t: i64, current: i32, demand: i64) -> pb::RecommendRequest {
    pb::RecommendRequest {
        target_key: key.into(),
        current_replicas: current,
        policy: "gpu-tier".into(),
        external_metrics: BTreeMap::from([(
            "queue".to_owned(),
            pb::ExternalMetricValues {
                values_milli: vec![demand * 1000],
            },
        )]),
        evaluation_time: Some(prost_types::Timestamp {
            seconds: t,
            nanos: 0,
        }),
        ..Default::default()
    }
}

async fn put_group(client: &mut Client, capacity: i64, prefixes: &[&str]) -> pb::ScalingGroup {
    client
        .put_scaling_group(pb::PutScalingGroupRequest {
            group: Some(pb::ScalingGroup {
                name: "gpus".into(),
                capacity,
                member_prefixes: prefixes.iter().map(|p| (*p).to_owned()).collect(),
                ..Default::default()
            }),
            expected_version: None,
        })
        .await
        .unwrap()
        .into_inner()
}

async fn status(client: &mut Client) -> pb::ScalingGroupStatus {
    client
        .get_scaling_group(pb::GetScalingGroupRequest {
            name: "gpus".into(),
        })
        .await
        .unwrap()
        .into_inner()
}

fn config(dir: &std::path::Path) -> Config {
    let mut config = Config::with_data_dir(dir.join("data"));
    config.trust_request_time = true;
    config
}

#[tokio::test]
async fn three_services_share_ten_gpus_fairly_and_a_restart_keeps_the_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(dir.path())).await;
    let mut client = server.horizontal().await;
    let policy = client
        .put_policy(pb::PutPolicyRequest {
            policy: Some(gpu_policy(20)),
            expected_version: Some(0),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(policy.version, 1);
    let group = put_group(&mut client, 10, &["inference/"]).await;
    assert_eq!((group.version, group.units_per_replica), (1, 1));

    let services = [("inference/a", 6), ("inference/b", 4), ("inference/c", 5)];
    let mut running: BTreeMap<&str, i32> = services.iter().map(|(k, _)| (*k, 1)).collect();
    let mut table = vec![
        "| period | a (wants 6) | b (wants 4) | c (wants 5) | held | residual |".to_owned(),
        "|---|---|---|---|---|---|".to_owned(),
    ];
    let mut counts = Vec::new();
    let mut t = T0;
    for period in 1..=8 {
        let mut cells = Vec::new();
        for (key, demand) in services {
            t += 5;
            let r = client
                .recommend(call(key, t, running[key], demand))
                .await
                .unwrap()
                .into_inner();
            let budget = r
                .budget
                .clone()
                .expect("a member's response has its budget");
            assert_eq!(budget.group, "gpus");
            assert_eq!(r.policy.as_ref().map(|p| p.version), Some(1));
            let limited = r
                .conditions
                .iter()
                .find(|c| c.r#type == "ScalingLimited" && c.status == "True");
            if r.desired_replicas < budget.uncapped_replicas {
                let limited = limited.expect("a capped decision says so");
                assert_eq!(limited.reason, "BudgetLimited");
                assert!(
                    limited.message.contains("scaling group gpus")
                        && limited.message.contains("units left"),
                    "{}",
                    limited.message
                );
                assert_eq!(r.explanation.as_ref().unwrap().limited_by, "BudgetLimited");
            }
            cells.push(format!(
                "{} of {} (fair {})",
                r.desired_replicas, budget.uncapped_replicas, budget.fair_share
            ));
            // The orchestrator applies the count at once.
            running.insert(key, r.desired_replicas);
            let s = status(&mut client).await;
            assert!(s.used <= 10, "period {period}: {} units held", s.used);
        }
        let s = status(&mut client).await;
        table.push(format!(
            "| {period} | {} | {} | {} | {} | {} |",
            cells[0], cells[1], cells[2], s.used, s.residual
        ));
        counts.push(running.values().copied().collect::<Vec<_>>());
    }
    println!("{}", table.join("\n"));

    // What-if: the group's stored logs replayed together. Under its own capacity the replay
    // is what was decided, step for step; under 15 GPUs every service gets its demand.
    let replay = |capacity: Option<i64>| {
        let mut c = client.clone();
        async move {
            c.simulate(pb::SimulateRequest {
                group: "gpus".into(),
                group_capacity: capacity,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
        }
    };
    let same = replay(None).await;
    assert_eq!(same.members.len(), 3);
    for m in &same.members {
        assert_eq!(m.steps.len(), 8, "{}", m.target_key);
        for s in &m.steps {
            assert_eq!(
                s.simulated_desired_replicas, s.stored_desired_replicas,
                "{}: {s:?}",
                m.target_key
            );
        }
    }
    assert_eq!(same.group_held.len(), 24);
    assert!(
        same.group_held
            .iter()
            .all(|p| p.simulated == p.stored && p.stored <= 10)
    );
    let more = replay(Some(15)).await;
    let last: Vec<i32> = more
        .members
        .iter()
        .map(|m| m.steps.last().unwrap().simulated_desired_replicas)
        .collect();
    assert_eq!(last, vec![6, 4, 5]);
    assert!(more.group_held.iter().all(|p| p.simulated <= 15));
    assert!(more.group_held.iter().any(|p| p.simulated > 10));
    let hours = |r: &pb::SimulateResponse, simulated: bool| -> f64 {
        r.members
            .iter()
            .map(|m| {
                let s = m.summary.as_ref().unwrap();
                if simulated { s.simulated } else { s.stored }
                    .as_ref()
                    .unwrap()
                    .replica_hours
            })
            .sum()
    };
    assert!(hours(&more, true) > hours(&more, false));
    let bad = client
        .simulate(pb::SimulateRequest {
            group: "gpus".into(),
            target_key: "inference/a".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    // Converged to the max-min fair shares (ties to the first key) within 4 periods, and
    // no flip-flop after.
    for c in &counts[3..] {
        assert_eq!(c, &vec![4, 3, 3], "{counts:?}");
    }
    let s = status(&mut client).await;
    let fair: Vec<i32> = s.members.iter().map(|m| m.fair_share).collect();
    assert_eq!(fair, vec![4, 3, 3]);
    assert_eq!((s.used, s.residual), (10, 0));

    // GetHistory shows the policy and the budget of each run.
    let h = history(&mut client, "inference/a").await;
    let newest = h.decisions.last().unwrap();
    assert_eq!(
        newest.policy,
        Some(pb::PolicyRef {
            name: "gpu-tier".into(),
            version: 1
        })
    );
    let b = newest.budget.as_ref().unwrap();
    assert_eq!((b.uncapped_replicas, b.fair_share, b.capacity), (6, 4, 10));

    // A restart keeps the allocation: the ledger is durable with the members' states.
    drop(client);
    server.stop().await;
    let server = TestServer::start(config(dir.path())).await;
    let mut client = server.horizontal().await;
    let after = status(&mut client).await;
    assert_eq!(after, s);
    t += 15;
    let r = client
        .recommend(call("inference/a", t, 4, 6))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.desired_replicas, 4, "still capped after the restart");

    // More capacity: the capped member scales up at once (its uncapped recommendations are
    // what the stabilization window kept).
    put_group(&mut client, 15, &["inference/"]).await;
    t += 15;
    let r = client
        .recommend(call("inference/a", t, 4, 6))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.desired_replicas, 6);
    assert!(
        !r.conditions
            .iter()
            .any(|c| c.reason == "BudgetLimited" && c.status == "True")
    );

    // A policy change takes effect on the next call, which records the new version.
    client
        .put_policy(pb::PutPolicyRequest {
            policy: Some(gpu_policy(5)),
            expected_version: Some(1),
        })
        .await
        .unwrap();
    t += 15;
    let r = client
        .recommend(call("inference/b", t, 3, 9))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.policy.as_ref().map(|p| p.version), Some(2));
    assert_eq!(r.budget.as_ref().unwrap().uncapped_replicas, 5, "max 5");
    // The request's own spec overrides the policy's fields it sets.
    let mut own = call("inference/b", t + 15, 5, 9);
    own.spec = Some(pb::HorizontalSpec {
        max_replicas: 7,
        ..Default::default()
    });
    let r = client.recommend(own).await.unwrap().into_inner();
    assert_eq!(r.budget.as_ref().unwrap().uncapped_replicas, 7);

    // A stale expected version is refused.
    let stale = client
        .put_policy(pb::PutPolicyRequest {
            policy: Some(gpu_policy(5)),
            expected_version: Some(1),
        })
        .await
        .unwrap_err();
    assert_eq!(stale.code(), Code::FailedPrecondition);

    // In use: not deleted unless forced.
    let refused = client
        .delete_policy(pb::DeletePolicyRequest {
            name: "gpu-tier".into(),
            force: false,
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(refused.message().contains("uses policy"), "{refused:?}");
    client
        .delete_policy(pb::DeletePolicyRequest {
            name: "gpu-tier".into(),
            force: true,
        })
        .await
        .unwrap();
    let gone = client
        .recommend(call("inference/b", t + 30, 5, 9))
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    assert!(gone.message().contains("policy"), "{gone:?}");

    // A deleted target frees what it held.
    let before = status(&mut client).await.used;
    client
        .delete_target(pb::DeleteTargetRequest {
            target_key: "inference/a".into(),
        })
        .await
        .unwrap();
    let after = status(&mut client).await;
    assert_eq!(after.used, before - 6);
    assert!(after.members.iter().all(|m| m.target_key != "inference/a"));
    server.stop().await;
}

#[tokio::test]
async fn concurrent_members_never_hold_more_than_the_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(dir.path())).await;
    let mut client = server.horizontal().await;
    client
        .put_policy(pb::PutPolicyRequest {
            policy: Some(gpu_policy(40)),
            expected_version: None,
        })
        .await
        .unwrap();
    put_group(&mut client, 25, &["burst/"]).await;
    let keys: Vec<String> = (0..12).map(|i| format!("burst/{i:02}")).collect();
    let mut running: BTreeMap<String, i32> = keys.iter().map(|k| (k.clone(), 1)).collect();
    // The members join at what they run (a member counts from its first decision).
    for k in &keys {
        client.recommend(call(k, T0 - 15, 1, 1)).await.unwrap();
    }
    assert_eq!(status(&mut client).await.used, 12);
    for round in 0..6 {
        let t = T0 + 15 * round;
        let calls = keys.iter().map(|k| {
            let mut c = client.clone();
            let req = call(k, t, running[k], 30);
            let k = k.clone();
            async move { (k, c.recommend(req).await.unwrap().into_inner()) }
        });
        let answers = futures_join(calls).await;
        let told: i32 = answers.iter().map(|(_, r)| r.desired_replicas).sum();
        assert!(told <= 25, "round {round}: told {told} replicas in all");
        for (k, r) in answers {
            running.insert(k, r.desired_replicas);
        }
        let s = status(&mut client).await;
        assert!(s.used <= 25, "round {round}: {} held", s.used);
    }
    // Twelve members wanting 30 each share 25: 3 for the first one, 2 for the others.
    let s = status(&mut client).await;
    assert_eq!(s.used, 25);
    let shares: Vec<i32> = s.members.iter().map(|m| m.desired_replicas).collect();
    assert_eq!(shares.iter().sum::<i32>(), 25, "{shares:?}");
    assert!(shares.iter().all(|&c| c == 2 || c == 3), "{shares:?}");
    server.stop().await;
}

/// Runs the calls concurrently (one task each) and collects their answers.
async fn futures_join<F>(calls: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let tasks: Vec<_> = calls.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test]
async fn bad_policies_and_groups_are_invalid_arguments_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(dir.path())).await;
    let mut client = server.horizontal().await;
    let field_of = |s: &tonic::Status| {
        tonic_types::StatusExt::get_details_bad_request(s)
            .map(|b| {
                b.field_violations
                    .into_iter()
                    .map(|v| v.field)
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let e = client
        .put_scaling_group(pb::PutScalingGroupRequest {
            group: Some(pb::ScalingGroup {
                name: "bad name!".into(),
                capacity: 0,
                units_per_replica: 5000,
                ..Default::default()
            }),
            expected_version: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let fields = field_of(&e);
    for f in [
        "group.name",
        "group.capacity",
        "group.units_per_replica",
        "group.member_keys",
    ] {
        assert!(fields.iter().any(|x| x == f), "{f} in {fields:?}");
    }
    // A control character names the field that holds it, wherever it is.
    let bell = "bad/\u{7}x".to_owned();
    let cases: [(pb::ScalingGroup, &str); 5] = [
        (
            pb::ScalingGroup {
                name: bell.clone(),
                capacity: 5,
                member_prefixes: vec!["x/".into()],
                ..Default::default()
            },
            "group.name",
        ),
        (
            pb::ScalingGroup {
                name: "g".into(),
                capacity: 5,
                member_keys: vec!["x/a".into(), bell.clone()],
                ..Default::default()
            },
            "group.member_keys[1]",
        ),
        (
            pb::ScalingGroup {
                name: "g".into(),
                capacity: 5,
                member_prefixes: vec![bell.clone()],
                ..Default::default()
            },
            "group.member_prefixes[0]",
        ),
        (
            pb::ScalingGroup {
                name: "g".into(),
                capacity: 5,
                member_policies: vec![bell.clone()],
                ..Default::default()
            },
            "group.member_policies[0]",
        ),
        (
            pb::ScalingGroup {
                name: "g".into(),
                capacity: 5,
                member_prefixes: vec!["x/".into()],
                member_units: [(bell.clone(), 1)].into_iter().collect(),
                ..Default::default()
            },
            "group.member_units[",
        ),
    ];
    for (group, field) in cases {
        let e = client
            .put_scaling_group(pb::PutScalingGroupRequest {
                group: Some(group),
                expected_version: None,
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{field}");
        assert!(
            field_of(&e).iter().any(|f| f.starts_with(field)),
            "{field} not in {:?}",
            field_of(&e)
        );
    }
    let e = client
        .get_scaling_group(pb::GetScalingGroupRequest { name: bell.clone() })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(field_of(&e), ["name"]);
    let mut named = gpu_policy(10);
    named.name = bell.clone();
    let e = client
        .put_policy(pb::PutPolicyRequest {
            policy: Some(named),
            expected_version: None,
        })
        .await
        .unwrap_err();
    assert_eq!(field_of(&e), ["policy.name"]);

    let mut bad = gpu_policy(10);
    bad.spec.as_mut().unwrap().metrics[0]
        .target
        .as_mut()
        .unwrap()
        .average_value_milli = Some(-1);
    let e = client
        .put_policy(pb::PutPolicyRequest {
            policy: Some(bad),
            expected_version: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        field_of(&e)
            .iter()
            .any(|f| f.starts_with("policy.spec.metrics[0]")),
        "{e:?}"
    );
    // Nothing was stored.
    let listed = client
        .list_policies(pb::ListPoliciesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.policies.is_empty());
    let groups = client
        .list_scaling_groups(pb::ListScalingGroupsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(groups.groups.is_empty());
    // Unknown names are NOT_FOUND, and the server keeps serving.
    let e = client
        .get_policy(pb::GetPolicyRequest {
            name: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let e = client.recommend(call("x/a", T0, 1, 1)).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    server.stop().await;
}
