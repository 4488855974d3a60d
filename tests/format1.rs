//! A data folder written by the last build of format 1 (JSON records; committed under
//! `tests/fixtures/format1/`) opens with this build and reads identically: the same
//! histories, decisions and VPA recommendation as the old server answered, then takes new
//! writes (migrating the targets it rewrites).
//!
//! The fixture was produced by `generate_format1_fixture` (ignored) against the binary of
//! `main` at cfdea0b: `AUTOSCALED_FORMAT1_BIN=/path/to/old/autoscaled cargo test --test
//! format1 -- --ignored`.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Command,
};

use autoscaled::pb::v1::{
    self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient,
    vertical_autoscaler_client::VerticalAutoscalerClient,
};
use autoscaled_fixtures as fixtures;
use prost::Message;
use tonic::transport::Channel;

mod common;

use common::{command, copy_dir, spawn, start};

/// 2026-01-01T00:00:00Z.
const T0: i64 = 1_767_225_600;
const HPA_KEYS: [&str; 3] = ["fx/a", "fx/b", "fx/c"];
const VPA_KEY: &str = "fx/vpa";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format1")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// `current` pods (the last one unready when `unready`) at `usage` milli-cpu of 1000m,
/// against 50% utilization, evaluated at `T0 + at`.
fn recommend_request(
    key: &str,
    current: i32,
    usage: i64,
    at: i64,
    unready: bool,
) -> pb::RecommendRequest {
    let prefix = key.to_owned();
    fixtures::recommend(key)
        .pods(current as usize)
        .cpu_usage_milli(usage)
        .unready_last(usize::from(unready))
        .pod_names(move |i| format!("{prefix}-{i}"))
        .ages(20, 3600)
        .at(T0 + at)
        .build()
}

/// Per target: (current, usage, seconds after T0, last pod unready).
fn steps(key: &str) -> Vec<(i32, i64, i64, bool)> {
    match key {
        "fx/a" => vec![
            (2, 900, 0, false),
            (4, 500, 15, false),
            (4, 500, 30, false),
            (4, 100, 45, false),
            (4, 100, 400, false),
        ],
        "fx/b" => vec![(3, 300, 0, false), (3, 300, 15, false), (3, 300, 30, false)],
        _ => vec![(3, 800, 0, true)],
    }
}

fn usage_request() -> pb::RecordUsageRequest {
    fixtures::usage(VPA_KEY)
        .container("vpa-0", "app")
        .minutes(60)
        .settings(pb::VerticalSettings {
            target_cpu_percentile: Some(0.3),
            ..Default::default()
        })
        .at(T0)
        .build()
}

struct Clients {
    rt: tokio::runtime::Runtime,
    hpa: HorizontalAutoscalerClient<Channel>,
    vpa: VerticalAutoscalerClient<Channel>,
}

impl Clients {
    fn connect(addr: SocketAddr) -> Self {
        let rt = runtime();
        let hpa = rt
            .block_on(HorizontalAutoscalerClient::connect(format!(
                "http://{addr}"
            )))
            .expect("connects");
        let vpa = rt
            .block_on(VerticalAutoscalerClient::connect(format!("http://{addr}")))
            .expect("connects");
        Clients { rt, hpa, vpa }
    }

    fn history(&mut self, key: &str) -> pb::TargetHistory {
        self.rt
            .block_on(self.hpa.get_history(pb::GetHistoryRequest {
                target_key: key.to_owned(),
                ..Default::default()
            }))
            .expect("GetHistory")
            .into_inner()
    }

    fn recommendation(&mut self) -> pb::VerticalRecommendation {
        self.rt
            .block_on(self.vpa.get_recommendation(pb::GetRecommendationRequest {
                target_key: VPA_KEY.into(),
                ..Default::default()
            }))
            .expect("GetRecommendation")
            .into_inner()
    }
}

/// What a format-1 server could answer: the fields this build added cleared.
fn as_format_1(mut h: pb::TargetHistory) -> pb::TargetHistory {
    h.next_page_token.clear();
    for d in &mut h.decisions {
        d.run_count = 0;
        d.first_evaluation_time = None;
        for m in &mut d.metrics {
            if let Some(g) = m.pod_groups.as_mut() {
                g.unready_total = 0;
                g.missing_total = 0;
                g.ignored_total = 0;
            }
        }
    }
    h
}

fn read_expected<M: Message + Default>(name: &str) -> M {
    let bytes = std::fs::read(fixture().join("expected").join(name)).expect("expected response");
    M::decode(bytes.as_slice()).expect("decodes")
}

#[test]
fn a_format_1_folder_opens_and_reads_identically() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_dir(&fixture().join("data"), &data);

    let server = start(&data);
    let mut c = Clients::connect(server.addr);
    for key in HPA_KEYS {
        let expected: pb::TargetHistory = read_expected(&format!("{}.pb", key.replace('/', "_")));
        assert!(
            !expected.decisions.is_empty(),
            "the fixture of {key} has decisions"
        );
        let got = c.history(key);
        assert!(
            got.decisions.iter().all(|d| d.run_count == 1),
            "{key}: one decision per run"
        );
        assert_eq!(
            as_format_1(got),
            expected,
            "{key} reads as the format-1 server answered"
        );
    }
    let expected: pb::VerticalRecommendation = read_expected("fx_vpa.pb");
    assert!(!expected.containers.is_empty());
    assert_eq!(c.recommendation(), expected);

    // New writes on a format-1 target: the history continues from the stored one.
    let before = c.history("fx/a");
    let response =
        c.rt.block_on(
            c.hpa
                .recommend(recommend_request("fx/a", 1, 100, 415, false)),
        )
        .expect("Recommend")
        .into_inner();
    assert!(response.recorded);
    let after = c.history("fx/a");
    assert_eq!(after.decisions.len(), before.decisions.len() + 1);
    assert_eq!(
        after.decisions[..before.decisions.len()],
        before.decisions[..]
    );

    // And all of it after a restart (SIGKILL), the migrated target included.
    drop(c);
    drop(server);
    let server = start(&data);
    let mut c = Clients::connect(server.addr);
    assert_eq!(c.history("fx/a"), after);
    for key in ["fx/b", "fx/c"] {
        let expected: pb::TargetHistory = read_expected(&format!("{}.pb", key.replace('/', "_")));
        assert_eq!(as_format_1(c.history(key)), expected);
    }
}

/// Writes the fixture with a format-1 binary (see the module doc).
#[test]
#[ignore = "regenerates tests/fixtures/format1 with an old binary"]
fn generate_format1_fixture() {
    let old = std::env::var("AUTOSCALED_FORMAT1_BIN").expect("AUTOSCALED_FORMAT1_BIN");
    let out = fixture();
    let _ = std::fs::remove_dir_all(&out);
    let data = out.join("data");
    let mut cmd = Command::new(old);
    let template = command(&data);
    cmd.args(template.get_args())
        .env("AUTOSCALED_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let server = spawn(cmd);
    let mut c = Clients::connect(server.addr);
    for key in HPA_KEYS {
        for (current, usage, at, unready) in steps(key) {
            c.rt.block_on(
                c.hpa
                    .recommend(recommend_request(key, current, usage, at, unready)),
            )
            .expect("Recommend");
        }
    }
    c.rt.block_on(c.vpa.record_usage(usage_request()))
        .expect("RecordUsage");
    let expected = out.join("expected");
    std::fs::create_dir_all(&expected).unwrap();
    for key in HPA_KEYS {
        std::fs::write(
            expected.join(format!("{}.pb", key.replace('/', "_"))),
            c.history(key).encode_to_vec(),
        )
        .unwrap();
    }
    std::fs::write(
        expected.join("fx_vpa.pb"),
        c.recommendation().encode_to_vec(),
    )
    .unwrap();
    // Every response came after its flush (strict durability): a SIGKILL loses nothing.
    drop(c);
    drop(server);
}
