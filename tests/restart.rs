//! Crash safety of the real binary: history acknowledged before a SIGKILL is there after a
//! restart on the same folder, and a folder that is in use or corrupt stops start-up with a
//! clear message instead of serving with lost history.

use std::{
    io::{BufRead, BufReader, Read},
    net::SocketAddr,
    path::Path,
    process::ExitStatus,
    time::{Duration, Instant},
};

use autoscaled::pb::v1::{self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient};
use autoscaled_fixtures as fixtures;
use tonic::transport::Channel;

/// 2026-01-01T00:00:00Z: the evaluation times are this plus the step's offset.
const T0: i64 = 1_767_225_600;

mod common;

use common::{command, start};

/// Runs the binary on a folder that must be refused: its exit status and stderr. Fails the
/// test as soon as it prints the listening line (it must not serve), or if it does not exit
/// within 60 s.
fn start_refused(data_dir: &Path) -> (ExitStatus, String) {
    let mut child = command(data_dir).spawn().expect("the binary starts");
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("waitable") {
            break status;
        }
        let served = rx.try_iter().find(|line| line.contains("listening"));
        if served.is_some() || Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the server did not refuse {}: {}",
                data_dir.display(),
                served.unwrap_or_else(|| "no exit within 60 s".to_owned())
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .expect("piped")
        .read_to_string(&mut err)
        .expect("stderr");
    (status, err)
}

/// Starting on `data_dir` fails with a message that names the folder and the refusal.
fn assert_refused_naming(data_dir: &Path) {
    let (status, err) = start_refused(data_dir);
    assert!(!status.success(), "exit status {status}");
    assert!(
        err.contains(&data_dir.display().to_string()) && err.contains("refusing to start"),
        "the message names the folder and the refusal: {err}"
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn client(rt: &tokio::runtime::Runtime, addr: SocketAddr) -> HorizontalAutoscalerClient<Channel> {
    rt.block_on(HorizontalAutoscalerClient::connect(format!(
        "http://{addr}"
    )))
    .expect("connects")
}

/// `current` pods requesting 1000m cpu each and using `usage` milli-cpu, against 50%
/// utilization, legacy path (5 min downscale stabilization), evaluated at `T0 + at`.
fn request(current: i32, usage: i64, at: i64) -> pb::RecommendRequest {
    fixtures::recommend("restart/web")
        .pods(current as usize)
        .cpu_usage_milli(usage)
        .at(T0 + at)
        .build()
}

/// (desired replicas, AbleToScale reason).
fn recommend(
    rt: &tokio::runtime::Runtime,
    client: &mut HorizontalAutoscalerClient<Channel>,
    request: pb::RecommendRequest,
) -> (i32, String) {
    let response = rt
        .block_on(client.recommend(request))
        .expect("Recommend succeeds")
        .into_inner();
    assert!(response.recorded, "the decision must be recorded");
    let able = response
        .conditions
        .iter()
        .find(|c| c.r#type == "AbleToScale")
        .expect("an AbleToScale condition");
    (response.desired_replicas, able.reason.clone())
}

/// The stored recommendations as (seconds after T0, replicas), in storage order.
fn recommendations(
    rt: &tokio::runtime::Runtime,
    client: &mut HorizontalAutoscalerClient<Channel>,
) -> Vec<(i64, i32)> {
    rt.block_on(client.get_history(pb::GetHistoryRequest {
        target_key: "restart/web".to_owned(),
        ..Default::default()
    }))
    .expect("GetHistory succeeds")
    .into_inner()
    .recommendations
    .iter()
    .map(|r| (r.time.as_ref().map_or(0, |t| t.seconds) - T0, r.replicas))
    .collect()
}

#[test]
fn scale_down_stabilization_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let rt = runtime();

    let server = start(&data);
    let mut c = client(&rt, server.addr);
    // t0: 2 pods at 90% of a 50% target → 4 (the legacy scale-up limit is max(2×2, 4) = 4).
    assert_eq!(
        recommend(&rt, &mut c, request(2, 900, 0)),
        (4, "SucceededRescale".to_owned())
    );
    // t0+60 s: 4 pods at 10% → the metric proposes 1, but 4 was recommended within the
    // 5 min window: held at 4.
    assert_eq!(
        recommend(&rt, &mut c, request(4, 100, 60)),
        (4, "ScaleDownStabilized".to_owned())
    );
    let before = recommendations(&rt, &mut c);
    // The initial recommendation (current 2 at t0), then each step's proposal.
    assert_eq!(before, vec![(0, 2), (0, 4), (60, 1)]);

    // Child::kill sends SIGKILL: no shutdown path runs, only what was flushed survives.
    drop(c);
    drop(server);

    let server = start(&data);
    let mut c = client(&rt, server.addr);
    assert_eq!(
        recommendations(&rt, &mut c),
        before,
        "acknowledged history must survive SIGKILL"
    );
    // t0+120 s: still held at 4 by the recommendation of t0.
    assert_eq!(
        recommend(&rt, &mut c, request(4, 100, 120)),
        (4, "ScaleDownStabilized".to_owned())
    );
    // t0+400 s: the window (t0+100 s … t0+400 s) holds only low recommendations → 1.
    assert_eq!(
        recommend(&rt, &mut c, request(4, 100, 400)),
        (1, "SucceededRescale".to_owned())
    );
}

#[test]
fn a_folder_in_use_is_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let _first = start(&data);
    assert_refused_naming(&data);
}

/// Acknowledged decisions under `key`: (count, evaluation seconds after T0 of the newest).
fn logged(
    rt: &tokio::runtime::Runtime,
    client: &mut HorizontalAutoscalerClient<Channel>,
    key: &str,
) -> Vec<i64> {
    rt.block_on(client.get_history(pb::GetHistoryRequest {
        target_key: key.to_owned(),
        ..Default::default()
    }))
    .expect("GetHistory succeeds")
    .into_inner()
    .decisions
    .iter()
    .map(|d| d.evaluation_time.as_ref().map_or(0, |t| t.seconds) - T0)
    .collect()
}

/// Issue 8 item 1: a second server on a live folder is refused without touching it. Older
/// builds copied `db` aside before sled took its lock and renamed the copy back over the live
/// file when the lock failed, so the live server's later writes went to an unlinked inode and
/// were lost at its restart, and a third start then succeeded next to it.
#[test]
fn a_refused_second_start_leaves_the_live_server_and_its_writes_intact() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let rt = runtime();
    let server = start(&data);
    let pid = server.child.id();
    let mut c = client(&rt, server.addr);
    let key = |i: usize| format!("inuse/k{i}");
    let write = |c: &mut HorizontalAutoscalerClient<Channel>, i: usize| {
        let mut r = request(2, 900, i as i64);
        r.target_key = key(i);
        recommend(&rt, c, r);
    };
    for i in 0..20 {
        write(&mut c, i);
    }
    let inode = std::fs::metadata(data.join("db")).unwrap().ino();

    let (status, err) = start_refused(&data);
    assert!(!status.success(), "exit status {status}");
    assert!(
        err.contains(&format!("in use by another process (pid {pid}?)"))
            && err.contains(&data.display().to_string()),
        "the refusal names the folder and the live server's pid: {err}"
    );
    assert!(!err.contains("repair or move"), "{err}");
    assert!(!err.contains("{ "), "no debug struct in the message: {err}");
    assert_eq!(
        std::fs::metadata(data.join("db")).unwrap().ino(),
        inode,
        "the live database was replaced"
    );

    // The live server keeps acknowledging writes, into the same file.
    for i in 20..40 {
        write(&mut c, i);
    }
    assert_eq!(std::fs::metadata(data.join("db")).unwrap().ino(), inode);
    // A third start while A runs is still refused.
    let (status, err) = start_refused(&data);
    assert!(!status.success(), "exit status {status}");
    assert!(err.contains("in use by another process"), "{err}");

    // Restart A (SIGKILL, so only what was flushed counts): every acknowledged write is there.
    drop(c);
    drop(server);
    let server = start(&data);
    let mut c = client(&rt, server.addr);
    for i in 0..40 {
        assert_eq!(
            logged(&rt, &mut c, &key(i)),
            vec![i as i64],
            "acknowledged decision of {} lost",
            key(i)
        );
    }
}

#[test]
fn a_corrupt_folder_is_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // Create a real database, stop it, then overwrite its files with garbage.
    drop(start(&data));
    let mut damaged = 0;
    for entry in std::fs::read_dir(&data).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::write(&path, b"this is not a sled database\n".repeat(64)).unwrap();
            damaged += 1;
        }
    }
    assert!(damaged > 0, "sled wrote no files in {}", data.display());
    assert_refused_naming(&data);
}

/// Garbage over the start of sled's log file (`db`) while `conf` stays valid. sled alone takes
/// the damaged log for a torn tail and opens an empty database; the store's format marker
/// (`SledStore::open`) turns that into a refusal, with the log put back untouched.
#[test]
fn a_damaged_log_is_refused_rather_than_served_empty() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let rt = runtime();
    {
        let server = start(&data);
        let mut c = client(&rt, server.addr);
        recommend(&rt, &mut c, request(2, 900, 0));
    }
    let log = data.join("db");
    let len = std::fs::metadata(&log).unwrap().len();
    assert!(len > 0, "sled wrote no log");
    std::fs::write(
        &log,
        b"garbage".repeat(usize::try_from(len).unwrap() / 7 + 1),
    )
    .unwrap();
    let (status, err) = start_refused(&data);
    assert!(!status.success(), "exit status {status}");
    assert!(err.contains("refusing to start"), "{err}");
}
