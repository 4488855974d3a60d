//! The clone step of the fleet benchmark (`benches/support/fleet_clone.rs`,
//! `FLEET_CLONE_FROM`): records the real server wrote, copied to other targets' keys, must
//! be read back by the server as those targets' own history, and a record layout the step does
//! not know must stop it instead of being copied wrongly. Here so that a change of the record
//! layout fails in CI, not in the one-million-target run.

use std::{
    path::Path,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use autoscaled::pb::v1::{self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient};
use tonic::transport::Channel;

#[path = "common/binary.rs"]
mod binary;
#[path = "../benches/support/fleet_clone.rs"]
mod fleet_clone;
#[path = "../benches/support/steady_state.rs"]
mod steady_state;

use fleet_clone::target_key;

/// Warmed targets, and all targets after cloning.
const SOURCES: usize = 3;
const TARGETS: usize = 8;
const WARMUP_ROUNDS: i64 = 4;

fn request(target: usize, t0: i64, round: i64) -> pb::RecommendRequest {
    let mut request = steady_state::recommend_request(target_key(target));
    if let Some(spec) = &mut request.spec {
        spec.behavior = Some(pb::Behavior::default());
    }
    request.evaluation_time = Some(prost_types::Timestamp {
        seconds: t0 + 15 * round,
        nanos: 0,
    });
    request
}

async fn client(addr: std::net::SocketAddr) -> HorizontalAutoscalerClient<Channel> {
    HorizontalAutoscalerClient::connect(format!("http://{addr}"))
        .await
        .expect("the server accepts connections")
}

/// The target's history with its key cleared (the only field that differs between a clone
/// and its source).
async fn history(
    client: &mut HorizontalAutoscalerClient<Channel>,
    target: usize,
) -> pb::TargetHistory {
    let mut h = client
        .get_history(pb::GetHistoryRequest {
            target_key: target_key(target),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|s| panic!("GetHistory of {}: {s}", target_key(target)))
        .into_inner();
    assert_eq!(h.target_key, target_key(target));
    h.target_key.clear();
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clones_of_warmed_targets_are_read_back_as_their_own_history() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("sled");
    let t0 = i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap();

    let mut server = binary::start(&folder);
    let mut c = client(server.addr).await;
    for round in 0..WARMUP_ROUNDS {
        for target in 0..SOURCES {
            c.recommend(request(target, t0, round)).await.unwrap();
        }
    }
    server.terminate();

    let report = fleet_clone::clone(&folder, SOURCES, TARGETS).unwrap();
    assert!(report.records_per_target >= 1, "{report:?}");
    assert_eq!(report.differing_sources, 0, "{report:?}");
    assert_eq!(report.values_with_key, 0, "{report:?}");
    assert_eq!(
        report.records_written,
        (TARGETS - SOURCES) as u64 * report.records_per_target
    );

    let server = binary::start(&folder);
    let mut c = client(server.addr).await;
    for target in SOURCES..TARGETS {
        let clone = history(&mut c, target).await;
        assert_eq!(clone, history(&mut c, target % SOURCES).await);
        assert!(!clone.recommendations.is_empty());
        assert_eq!(
            clone.decisions.iter().map(|d| d.run_count).sum::<u64>(),
            WARMUP_ROUNDS as u64
        );
    }
    // The next evaluation decides the same for every target and leaves the same history.
    let mut answers = Vec::new();
    for target in 0..TARGETS {
        let mut answer = c
            .recommend(request(target, t0, WARMUP_ROUNDS))
            .await
            .unwrap()
            .into_inner();
        assert!(answer.recorded);
        answer.evaluation_time = None;
        answers.push(answer);
    }
    assert!(answers.iter().all(|a| *a == answers[0]));
    for target in SOURCES..TARGETS {
        assert_eq!(
            history(&mut c, target).await,
            history(&mut c, target % SOURCES).await
        );
    }
    // No target beyond the clones.
    let missing = c
        .get_history(pb::GetHistoryRequest {
            target_key: target_key(TARGETS),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
}

/// sled's `db` file lock may outlive a dropped handle of this process by a few milliseconds
/// (its threads finish first).
fn open_sled(path: &Path) -> sled::Db {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match sled::open(path) {
            Ok(db) => return db,
            Err(_) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("open {}: {e}", path.display()),
        }
    }
}

/// A record: tree, key, value.
type Record<'a> = (&'a str, &'a [u8], &'a [u8]);

/// A folder with the given records.
fn folder_with(records: &[Record]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let db = open_sled(dir.path());
    db.open_tree("meta")
        .unwrap()
        .insert("format", &[1])
        .unwrap();
    for (tree, key, value) in records {
        db.open_tree(tree).unwrap().insert(*key, *value).unwrap();
    }
    db.flush().unwrap();
    dir
}

#[test]
fn a_value_holding_its_own_key_gets_the_clones_key_and_suffixes_are_kept() {
    let dir = folder_with(&[
        ("hpa_state", b"fleet/0000000", b"a fleet/0000000 b"),
        ("hpa_state", b"fleet/0000001", b"a fleet/0000001 b"),
        ("hpa_decisions", b"fleet/0000000\x00suffix", b"run"),
    ]);
    let report = fleet_clone::clone(dir.path(), 2, 5).unwrap();
    assert_eq!(report.values_with_key, 2);
    assert_eq!(report.differing_sources, 1, "target 1 has no decision");
    assert_eq!(report.records_written, 2 + 1 + 2);
    let db = open_sled(dir.path());
    let state = db.open_tree("hpa_state").unwrap();
    let decisions = db.open_tree("hpa_decisions").unwrap();
    assert_eq!(
        state.get("fleet/0000004").unwrap().unwrap().as_ref(),
        b"a fleet/0000004 b"
    );
    assert_eq!(
        state.get("fleet/0000003").unwrap().unwrap().as_ref(),
        b"a fleet/0000003 b"
    );
    assert_eq!(
        decisions
            .get(b"fleet/0000004\x00suffix")
            .unwrap()
            .unwrap()
            .as_ref(),
        b"run"
    );
    assert_eq!(decisions.get(b"fleet/0000003\x00suffix").unwrap(), None);
    assert_eq!(state.len(), 5);
}

#[test]
fn an_unknown_layout_stops_the_clone_step() {
    let cases: [(&[Record], &str); 4] = [
        (
            &[
                ("hpa_state", b"fleet/0000000", b"v"),
                ("hpa_state", b"other", b"v"),
            ],
            "tree hpa_state: key \"other\"",
        ),
        (
            &[
                ("hpa_state", b"fleet/0000000", b"v"),
                ("hpa_state", b"fleet/0000000x", b"v"),
            ],
            "neither a target key",
        ),
        (
            &[("hpa_state", b"fleet/0000000", b"names fleet/0000001")],
            "names another key",
        ),
        (
            &[
                ("hpa_state", b"fleet/0000000", b"v"),
                ("hpa_state", b"fleet/0000002", b"v"),
            ],
            "beyond the 2 warmed targets",
        ),
    ];
    for (records, expected) in cases {
        let dir = folder_with(records);
        let error = fleet_clone::clone(dir.path(), 2, 4)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(expected),
            "{error:?} should say {expected:?}"
        );
        // Nothing was written.
        let db = open_sled(dir.path());
        assert_eq!(db.open_tree("hpa_state").unwrap().len(), records.len());
    }
}
