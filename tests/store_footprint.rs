//! Store footprint figures for the report (ignored: a measurement, not a check). Runs a
//! server binary (this build, or `AUTOSCALED_FOOTPRINT_BIN`) on a fresh folder: `TARGETS`
//! HPA targets (default 1000) × 30 calls at the Kubernetes cadence (15 s of evaluation time,
//! `--trust-request-time`), then prints bytes written per call (/proc/PID/io `write_bytes`),
//! the folder's size per target, the start-up time with that data, and the VPA folder growth
//! for one container after a week of per-minute samples.
//!
//! `cargo test --release --test store_footprint -- --ignored --nocapture`

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use autoscaled::pb::v1::{
    self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient,
    vertical_autoscaler_client::VerticalAutoscalerClient,
};
use autoscaled_fixtures as fixtures;
use prost_types::Timestamp;

mod common;

use common::{command, spawn};

const T0: i64 = 1_767_225_600;

fn ts(s: i64) -> Option<Timestamp> {
    Some(Timestamp {
        seconds: s,
        nanos: 0,
    })
}

fn binary_command(data: &Path) -> Command {
    let template = command(data);
    let mut cmd = Command::new(
        std::env::var("AUTOSCALED_FOOTPRINT_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_autoscaled").to_owned()),
    );
    cmd.args(template.get_args())
        .env("AUTOSCALED_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    cmd
}

fn write_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn du(path: &Path) -> u64 {
    let out = Command::new("du").args(["-sb"]).arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// 10 pods at a steady 60% of a 50% cpu target (so the decisions say the same each time).
fn request(key: String, at: i64) -> pb::RecommendRequest {
    fixtures::recommend(key)
        .pods(10)
        .replicas(Some(1), 100)
        .behavior(pb::Behavior::default())
        .cpu_usage_milli(520)
        .ages(3500 + at, 3600 + at)
        .at(T0 + at)
        .build()
}

#[test]
#[ignore = "a measurement for the report"]
fn store_footprint() {
    let targets: usize = std::env::var("TARGETS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = spawn(binary_command(&data));
    let pid = server.child.id();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = rt
        .block_on(HorizontalAutoscalerClient::connect(format!(
            "http://{}",
            server.addr
        )))
        .unwrap();
    let rounds = 30;
    let before = write_bytes(pid);
    let started = Instant::now();
    for round in 0..rounds {
        rt.block_on(async {
            let mut tasks = Vec::new();
            for chunk in (0..targets)
                .collect::<Vec<_>>()
                .chunks(targets.div_ceil(32))
            {
                let mut c = client.clone();
                let chunk = chunk.to_vec();
                tasks.push(tokio::spawn(async move {
                    for t in chunk {
                        c.recommend(request(format!("fleet/t{t}"), round * 15))
                            .await
                            .expect("Recommend");
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        });
    }
    let calls = (targets as u64) * rounds as u64;
    let written = write_bytes(pid) - before;
    let elapsed = started.elapsed();
    drop(client);
    drop(server);
    let stored = du(&data);
    println!(
        "HPA: {targets} targets x {rounds} calls in {elapsed:?}: {} bytes written per call, folder {} bytes = {} bytes per target",
        written / calls,
        stored,
        stored / targets as u64
    );
    let t = Instant::now();
    let server = spawn(binary_command(&data));
    println!("start-up with that data: {:?}", t.elapsed());
    drop(server);

    // VPA: one container, a week of per-minute cpu and memory samples, an hour per call.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = spawn(binary_command(&data));
    let empty = du(&data);
    let mut vpa = rt
        .block_on(VerticalAutoscalerClient::connect(format!(
            "http://{}",
            server.addr
        )))
        .unwrap();
    let week_start = T0 - 7 * 24 * 3600;
    for hour in 0..(7 * 24) {
        let mut samples = Vec::new();
        for m in 0..60_i64 {
            let at = week_start + hour * 3600 + m * 60;
            for (resource, value) in [
                (pb::Resource::Cpu, 200 + (at / 60 * 31) % 170),
                (
                    pb::Resource::Memory,
                    300 * 1024 * 1024 + (at / 60 * 7) % 50 * 1024 * 1024,
                ),
            ] {
                samples.push(pb::UsageSample {
                    pod: "web-0".into(),
                    container: "app".into(),
                    resource: resource as i32,
                    value: value as f64,
                    timestamp: ts(at),
                });
            }
        }
        rt.block_on(vpa.record_usage(pb::RecordUsageRequest {
            target_key: "fleet/vpa".into(),
            samples,
            oom_events: vec![],
            settings: None,
            evaluation_time: ts(week_start + (hour + 1) * 3600),
        }))
        .expect("RecordUsage");
    }
    drop(vpa);
    drop(server);
    std::thread::sleep(Duration::from_millis(100));
    println!(
        "VPA: one container after a week of per-minute samples: folder grew by {} bytes",
        du(&data) - empty
    );
}
