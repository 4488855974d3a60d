//! A data folder whose VPA records are JSON (version 1), written by `main` before the VPA
//! records of our own (committed under `tests/fixtures/vpa_json/`), opens with this build and
//! answers the same recommendation; the target's next RecordUsage rewrites its record as
//! version 2 (prost), and a restart reads that back with the same effect as the old build
//! would have had.
//!
//! The fixture was produced by `generate_vpa_json_fixture` (ignored) against the debug binary
//! of `main` at 41c2d56: `AUTOSCALED_VPA_JSON_BIN=/path/to/old/autoscaled cargo test --test
//! vpa_records -- --ignored`. It also keeps the old build's answer after a second RecordUsage
//! (`after_second.pb`), so the migrated record is checked against what the old build did with
//! the same calls.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use autoscaled::pb::v1::{self as pb, vertical_autoscaler_client::VerticalAutoscalerClient};
use prost::Message;
use prost_types::Timestamp;
use tonic::transport::Channel;

#[path = "common/binary.rs"]
mod binary;

use binary::copy_dir;

/// 2026-01-01T00:00:00Z.
const T0: i64 = 1_767_225_600;
const KEYS: [&str; 2] = ["vj/one", "vj/two"];

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/vpa_json")
}

fn ts(seconds: i64) -> Option<Timestamp> {
    Some(Timestamp { seconds, nanos: 0 })
}

/// An hour of per-minute samples of two containers (and one OOM event) ending at `end`,
/// with per-target settings on the first call.
fn usage(key: &str, end: i64, settings: bool) -> pb::RecordUsageRequest {
    let mut samples = Vec::new();
    for m in 0..60_i64 {
        let at = end - 3600 + m * 60;
        for (container, scale) in [("app", 1), ("sidecar", 3)] {
            samples.push(pb::UsageSample {
                pod: "pod-0".into(),
                container: container.into(),
                resource: pb::Resource::Cpu as i32,
                value: (150 + (m * 31 * scale) % 400) as f64,
                timestamp: ts(at),
            });
            samples.push(pb::UsageSample {
                pod: "pod-0".into(),
                container: container.into(),
                resource: pb::Resource::Memory as i32,
                value: (200 * 1024 * 1024 + (m * 7 * scale) % 90 * 1024 * 1024) as f64,
                timestamp: ts(at),
            });
        }
    }
    pb::RecordUsageRequest {
        target_key: key.into(),
        samples,
        oom_events: vec![pb::OomEvent {
            pod: "pod-0".into(),
            container: "app".into(),
            timestamp: ts(end - 600),
            memory_bytes: 400 * 1024 * 1024,
        }],
        settings: settings.then(|| pb::VerticalSettings {
            target_cpu_percentile: Some(0.7),
            safety_margin_fraction: Some(0.2),
            ..Default::default()
        }),
        evaluation_time: ts(end),
    }
}

struct Client {
    rt: tokio::runtime::Runtime,
    vpa: VerticalAutoscalerClient<Channel>,
}

impl Client {
    fn connect(addr: std::net::SocketAddr) -> Client {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let vpa = rt
            .block_on(VerticalAutoscalerClient::connect(format!("http://{addr}")))
            .expect("connects");
        Client { rt, vpa }
    }

    fn record(&mut self, request: pb::RecordUsageRequest) -> pb::RecordUsageResponse {
        self.rt
            .block_on(self.vpa.record_usage(request))
            .expect("RecordUsage")
            .into_inner()
    }

    fn recommendation(&mut self, key: &str) -> pb::VerticalRecommendation {
        self.rt
            .block_on(self.vpa.get_recommendation(pb::GetRecommendationRequest {
                target_key: key.into(),
                ..Default::default()
            }))
            .expect("GetRecommendation")
            .into_inner()
    }
}

fn expected(name: &str) -> pb::VerticalRecommendation {
    let bytes = std::fs::read(fixture().join("expected").join(name)).expect("expected response");
    pb::VerticalRecommendation::decode(bytes.as_slice()).expect("decodes")
}

fn file_name(key: &str, what: &str) -> String {
    format!("{}.{what}.pb", key.replace('/', "_"))
}

#[test]
fn json_vpa_records_open_answer_the_same_and_migrate_on_write() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_dir(&fixture().join("data"), &data);
    let server = binary::start(&data);
    let mut c = Client::connect(server.addr);
    for key in KEYS {
        let first = expected(&file_name(key, "first"));
        assert!(
            !first.containers.is_empty(),
            "{key}: the fixture has a recommendation"
        );
        assert_eq!(
            c.recommendation(key),
            first,
            "{key} reads as the old build answered"
        );
    }
    // The second call rewrites the first target's record as version 2.
    c.record(usage(KEYS[0], T0 + 3600, false));
    let second = expected(&file_name(KEYS[0], "second"));
    assert_eq!(c.recommendation(KEYS[0]), second);
    // After a SIGKILL: the migrated record and the untouched JSON one both read as before.
    drop(c);
    drop(server);
    let server = binary::start(&data);
    let mut c = Client::connect(server.addr);
    assert_eq!(c.recommendation(KEYS[0]), second);
    assert_eq!(
        c.recommendation(KEYS[1]),
        expected(&file_name(KEYS[1], "first"))
    );
}

/// Writes the fixture with the old binary (see the module doc): the data folder after one
/// RecordUsage per target, the recommendations then, and the first target's recommendation
/// after a second RecordUsage (written to a scratch copy, so the fixture keeps JSON only).
#[test]
#[ignore = "regenerates tests/fixtures/vpa_json with an old binary"]
fn generate_vpa_json_fixture() {
    let old = std::env::var("AUTOSCALED_VPA_JSON_BIN").expect("AUTOSCALED_VPA_JSON_BIN");
    let out = fixture();
    let _ = std::fs::remove_dir_all(&out);
    let data = out.join("data");
    let start = |data: &Path| {
        let mut cmd = Command::new(&old);
        let template = binary::command(data);
        cmd.args(template.get_args())
            .env("AUTOSCALED_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        binary::spawn(cmd)
    };
    let expected = out.join("expected");
    std::fs::create_dir_all(&expected).unwrap();
    {
        let server = start(&data);
        let mut c = Client::connect(server.addr);
        for key in KEYS {
            c.record(usage(key, T0, true));
            std::fs::write(
                expected.join(file_name(key, "first")),
                c.recommendation(key).encode_to_vec(),
            )
            .unwrap();
        }
    }
    // The lock file says nothing about the data (format1's fixture has none either).
    let _ = std::fs::remove_file(data.join("autoscaled.lock"));
    let scratch = tempfile::tempdir().unwrap();
    let copy = scratch.path().join("data");
    copy_dir(&data, &copy);
    let server = start(&copy);
    let mut c = Client::connect(server.addr);
    c.record(usage(KEYS[0], T0 + 3600, false));
    std::fs::write(
        expected.join(file_name(KEYS[0], "second")),
        c.recommendation(KEYS[0]).encode_to_vec(),
    )
    .unwrap();
}
