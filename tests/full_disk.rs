//! A full disk (issue 8 item 7), on a real small filesystem: a tmpfs mounted for the test
//! (needs root, as in CI's container; set `AUTOSCALED_NO_MOUNT=1` to skip it explicitly
//! where mounting is impossible). A failed Recommend stores nothing (not even in memory),
//! health turns NOT_SERVING, and once space is freed writes succeed and health is SERVING
//! again without a restart; a restart on the full disk starts (nothing is copied) and loses
//! nothing acknowledged.

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use autoscaled::pb::v1::{self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient};
use autoscaled_fixtures as fixtures;
use tonic::{Code, transport::Channel};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

mod common;

use common::start;

const T0: i64 = 1_767_225_600;

/// A tmpfs of `size` at `dir`, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(dir).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status();
        match status {
            Ok(s) if s.success() => Some(Tmpfs(dir.to_owned())),
            _ if std::env::var_os("AUTOSCALED_NO_MOUNT").is_some() => None,
            other => panic!(
                "cannot mount a tmpfs at {} ({other:?}); run as root or set AUTOSCALED_NO_MOUNT=1 to skip this test explicitly",
                dir.display()
            ),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn request(key: &str, at: i64) -> pb::RecommendRequest {
    fixtures::recommend(key)
        .pods(2)
        .metrics(Vec::new())
        .cpu_usage_milli(900)
        .pod_names(|i| format!("p-{i}"))
        .at(T0 + at)
        .build()
}

struct Client {
    rt: tokio::runtime::Runtime,
    hpa: HorizontalAutoscalerClient<Channel>,
    health: HealthClient<Channel>,
}

impl Client {
    fn connect(addr: std::net::SocketAddr) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let channel = rt
            .block_on(
                Channel::from_shared(format!("http://{addr}"))
                    .unwrap()
                    .connect(),
            )
            .unwrap();
        Client {
            rt,
            hpa: HorizontalAutoscalerClient::new(channel.clone()),
            health: HealthClient::new(channel),
        }
    }

    fn recommend(&mut self, key: &str, at: i64) -> Result<(), tonic::Status> {
        self.rt
            .block_on(self.hpa.recommend(request(key, at)))
            .map(|_| ())
    }

    /// Every stored target, page by page.
    fn keys(&mut self) -> Vec<String> {
        let (mut keys, mut page_token) = (Vec::new(), String::new());
        loop {
            let page = self
                .rt
                .block_on(self.hpa.list_targets(pb::ListTargetsRequest {
                    page_size: 1000,
                    page_token,
                    ..Default::default()
                }))
                .expect("ListTargets")
                .into_inner();
            keys.extend(page.target_keys);
            if page.next_page_token.is_empty() {
                return keys;
            }
            page_token = page.next_page_token;
        }
    }

    fn history(&mut self, key: &str) -> Result<pb::TargetHistory, tonic::Status> {
        self.rt
            .block_on(self.hpa.get_history(pb::GetHistoryRequest {
                target_key: key.to_owned(),
                ..Default::default()
            }))
            .map(|r| r.into_inner())
    }

    fn serving(&mut self) -> ServingStatus {
        let status = self
            .rt
            .block_on(self.health.check(HealthCheckRequest {
                service: String::new(),
            }))
            .expect("health check")
            .into_inner()
            .status;
        ServingStatus::try_from(status).unwrap()
    }

    /// Polls health until it reports `want` (the probe runs every 0.5 s); fails after 60 s.
    fn wait_for(&mut self, want: ServingStatus) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.serving() != want {
            assert!(Instant::now() < deadline, "health never became {want:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Fills the filesystem of `dir` with `dir/filler` until a write fails.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    let chunk = vec![0x5a_u8; 4096];
    while f.write_all(&chunk).and_then(|()| f.sync_data()).is_ok() {}
    path
}

#[test]
fn a_full_disk_stores_nothing_of_failed_calls_turns_health_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    let Some(_tmpfs) = Tmpfs::mount(&mnt, "16m") else {
        eprintln!("skipped: AUTOSCALED_NO_MOUNT is set");
        return;
    };
    let data = mnt.join("data");
    let admin: std::net::SocketAddr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let mut command = common::command(&data);
    command.args(["--metrics-listen", &admin.to_string()]);
    let server = common::spawn(command);
    let mut c = Client::connect(server.addr);
    // `/readyz` over HTTP says what gRPC health says.
    let ready = || common::http(admin, "GET", "/readyz").0;
    let mut acknowledged = Vec::new();
    for i in 0..5 {
        let key = format!("ok/{i}");
        c.recommend(&key, i).expect("room on the disk");
        acknowledged.push(key);
    }
    assert_eq!(c.serving(), ServingStatus::Serving);
    assert_eq!(ready(), 200);

    let filler = fill(&mnt);
    // Calls fail once sled needs a new page; each to a new key, so that a failed one that
    // stayed visible would show up as a target.
    let mut failed = None;
    for i in 0..2000 {
        let key = format!("full/{i}");
        match c.recommend(&key, 100 + i) {
            Ok(()) => acknowledged.push(key),
            Err(status) => {
                assert!(
                    matches!(status.code(), Code::Internal | Code::Unavailable),
                    "{status:?}"
                );
                failed = Some(key);
                break;
            }
        }
    }
    let failed = failed.expect("a write failed on the full disk");
    // The failed call is not visible. The store reopened from disk to drop it; if sled
    // cannot reopen on the full disk, reads answer UNAVAILABLE until it can (never the
    // failed write).
    match c.rt.block_on(c.hpa.list_targets(pb::ListTargetsRequest {
        page_size: 1000,
        page_token: String::new(),
        ..Default::default()
    })) {
        Ok(page) => {
            let keys = page.into_inner().target_keys;
            assert!(
                !keys.contains(&failed),
                "the failed call's target is visible: {keys:?}"
            );
            for key in &acknowledged {
                assert!(keys.contains(key), "{key} lost");
            }
        }
        Err(status) => assert_eq!(status.code(), Code::Unavailable, "{status:?}"),
    }
    let code = c.history(&failed).unwrap_err().code();
    assert!(
        matches!(code, Code::NotFound | Code::Unavailable),
        "the failed call's decision is visible ({code:?})"
    );
    c.wait_for(ServingStatus::NotServing);
    assert_eq!(ready(), 503);

    // Space again: writes succeed without a restart, and health follows.
    std::fs::remove_file(&filler).unwrap();
    c.wait_for(ServingStatus::Serving);
    assert_eq!(ready(), 200);
    c.recommend("after/0", 5000).expect("writes succeed again");
    acknowledged.push("after/0".to_owned());
    let keys = c.keys();
    assert!(
        !keys.contains(&failed),
        "the failed call's target is visible: {keys:?}"
    );
    for key in &acknowledged {
        assert!(keys.contains(key), "{key} lost");
    }

    // The same in batches: every request answered with its decision is kept, and nothing of
    // the batches before the failing one is lost or added. Of the failing batch, a request
    // whose own write failed is not visible; one whose write went through while the flush the
    // batch waited for failed may have reached sled's log and be there after the reopen (as
    // for concurrent single calls: an INTERNAL answer does not say the write never happened).
    let filler = fill(&mnt);
    let mut failing = None;
    for b in 0..400 {
        let keys: Vec<String> = (0..5).map(|j| format!("batch/{b}-{j}")).collect();
        let requests = keys.iter().map(|k| request(k, 6000 + b)).collect();
        let answer = c.rt.block_on(
            c.hpa
                .recommend_batch(pb::RecommendBatchRequest { requests }),
        );
        let results = match answer {
            Ok(answer) => answer.into_inner().results,
            Err(status) => {
                assert!(
                    matches!(status.code(), Code::Internal | Code::Unavailable),
                    "{status:?}"
                );
                failing = Some(keys);
                break;
            }
        };
        let mut failed = false;
        for (key, result) in keys.iter().zip(results) {
            match result.result {
                Some(pb::recommend_batch_result::Result::Response(r)) => {
                    assert!(r.recorded);
                    acknowledged.push(key.clone());
                }
                Some(pb::recommend_batch_result::Result::Error(e)) => {
                    assert!(
                        [Code::Internal as i32, Code::Unavailable as i32].contains(&e.code),
                        "{e:?}"
                    );
                    failed = true;
                }
                None => panic!("{key}: no result"),
            }
        }
        if failed {
            failing = Some(keys);
            break;
        }
    }
    let failing = failing.expect("a batch's write failed on the full disk");
    c.wait_for(ServingStatus::NotServing);
    std::fs::remove_file(&filler).unwrap();
    c.wait_for(ServingStatus::Serving);
    let keys = c.keys();
    for key in &acknowledged {
        assert!(keys.contains(key), "{key} lost");
    }
    let unanswered: Vec<_> = keys.iter().filter(|k| !acknowledged.contains(k)).collect();
    assert!(
        unanswered.iter().all(|k| failing.contains(k)) && unanswered.len() < failing.len(),
        "stored without an answer: {unanswered:?}, the failing batch: {failing:?}"
    );
    for key in unanswered {
        assert_eq!(c.history(key).unwrap().decisions.len(), 1, "{key}");
    }

    // A restart on a full disk: sled 0.34's recovery writes, so it may refuse to start
    // (with the reason); either way nothing is copied or left behind in the folder, and
    // once space is freed everything acknowledged is there.
    let filler = fill(&mnt);
    drop(c);
    drop(server);
    let mut child = common::command(&data).spawn().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    if line.contains("listening") {
        let _ = child.kill();
    } else {
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(err.contains("No space left on device"), "{err}");
        assert!(!err.contains("repair or move"), "{err}");
    }
    let _ = child.wait();
    let mut names: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("snap."))
        .collect();
    names.sort();
    assert_eq!(names, ["autoscaled.lock", "blobs", "conf", "db"]);
    std::fs::remove_file(&filler).unwrap();
    let server = start(&data);
    let mut c = Client::connect(server.addr);
    // Polled: health and the store's reopen run on their own schedule.
    let deadline = Instant::now() + Duration::from_secs(60);
    let keys = loop {
        match c.rt.block_on(c.hpa.list_targets(pb::ListTargetsRequest {
            page_size: 1,
            page_token: String::new(),
            ..Default::default()
        })) {
            Ok(_) => break c.keys(),
            Err(status) => {
                assert!(Instant::now() < deadline, "never recovered: {status:?}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    c.wait_for(ServingStatus::Serving);
    for key in &acknowledged {
        assert!(keys.contains(key), "{key} lost across the restart");
        assert_eq!(c.history(key).unwrap().decisions.len(), 1);
    }
    assert!(!keys.contains(&failed));
}
