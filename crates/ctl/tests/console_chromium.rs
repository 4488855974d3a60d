//! The web console in a real browser: Debian's Chromium, driven headless through
//! chromedriver (WebDriver over HTTP), against the real `autoscaled` binary with an
//! authorization file. A tenant logs in with its token, sees only its own targets (the
//! failing one first, the limited one next), opens a target's timeline, and is refused
//! another tenant's target; each page's screenshot is decoded and checked for what it must
//! show (the coloured rows, the replica curves).
//!
//! Without chromium and chromedriver the test prints SKIPPED, except under `CI=true`, where
//! it fails (`scripts/test.sh` installs both).

mod common;

use autoscaled_fixtures::free_port;
use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use autoscaled_fixtures as fixtures;
use autoscaled_wire::pb::v1::{
    self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient,
};
use base64::Engine as _;
use serde_json::{Value, json};
use tonic::{Request, transport::Channel};

const TEAM_A: &str = "team-a-console-token";
const OPS: &str = "ops-console-token";

fn available() -> bool {
    ["chromium", "chromedriver"]
        .iter()
        .all(|p| autoscaled_fixtures::installed(p, "apt-get install chromium chromium-driver"))
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP/1.1 exchange (WebDriver's JSON, or a page).
fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // chromedriver keeps the connection open whatever `Connection: close` says: read the
    // head, then the body by its length (or to the end when it has none).
    let mut raw = Vec::new();
    let mut chunk = [0u8; 16384];
    let split = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "the connection closed before the head");
        raw.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut body = raw[split + 4..].to_vec();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    match length {
        Some(len) => {
            while body.len() < len {
                let n = s.read(&mut chunk).unwrap();
                assert!(n > 0, "the connection closed before the body's end");
                body.extend_from_slice(&chunk[..n]);
            }
        }
        None => {
            s.read_to_end(&mut body).unwrap();
        }
    }
    if head.contains("transfer-encoding: chunked") {
        let mut out = Vec::new();
        let mut data = &body[..];
        loop {
            let end = data.windows(2).position(|w| w == b"\r\n").unwrap();
            let size = usize::from_str_radix(std::str::from_utf8(&data[..end]).unwrap().trim(), 16)
                .unwrap();
            data = &data[end + 2..];
            if size == 0 {
                break;
            }
            out.extend_from_slice(&data[..size]);
            data = &data[size + 2..];
        }
        body = out;
    }
    (status, body)
}

/// A WebDriver session on one Chromium.
struct Browser {
    driver: SocketAddr,
    session: String,
}

impl Browser {
    fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let (status, bytes) = http(
            self.driver,
            method,
            &format!("/session/{}{path}", self.session),
            body.as_ref(),
        );
        let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        assert_eq!(status, 200, "{method} {path}: {v}");
        v["value"].clone()
    }

    fn go(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({ "url": url })));
    }

    fn source(&self) -> String {
        self.cmd("GET", "/source", None)
            .as_str()
            .unwrap_or("")
            .to_owned()
    }

    /// The page source once it contains `needle` (a click's navigation may still run when
    /// WebDriver returns), at most 15 s.
    fn wait_for(&self, needle: &str) -> String {
        let end = Instant::now() + Duration::from_secs(15);
        loop {
            let source = self.source();
            if source.contains(needle) {
                return source;
            }
            assert!(Instant::now() < end, "{needle:?} never showed: {source}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn find(&self, css: &str) -> String {
        let v = self.cmd(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        );
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}"))
            .to_owned()
    }

    fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css);
        self.cmd("POST", &format!("/element/{e}/clear"), Some(json!({})));
        self.cmd(
            "POST",
            &format!("/element/{e}/value"),
            Some(json!({ "text": text })),
        );
    }

    fn click(&self, css: &str) {
        let e = self.find(css);
        self.cmd("POST", &format!("/element/{e}/click"), Some(json!({})));
    }

    /// The page as PNG, saved under `dir`, decoded to RGBA rows.
    fn screenshot(&self, dir: &Path, name: &str) -> (u32, u32, Vec<u8>) {
        let b64 = self.cmd("GET", "/screenshot", None);
        let png_bytes = base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap())
            .unwrap();
        std::fs::write(dir.join(name), &png_bytes).unwrap();
        let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        let channels = info.color_type.samples();
        let mut rgba = Vec::with_capacity((info.width * info.height * 4) as usize);
        for px in buf[..info.buffer_size()].chunks(channels) {
            rgba.extend_from_slice(&[px[0], px[1], px[2], 255]);
        }
        (info.width, info.height, rgba)
    }
}

/// Pixels of exactly this colour.
fn pixels(rgba: &[u8], rgb: [u8; 3]) -> usize {
    rgba.chunks(4).filter(|p| p[..3] == rgb).count()
}

fn with_token<T>(message: T, token: &str) -> Request<T> {
    let mut r = Request::new(message);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    r
}

/// Targets of two tenants: a timeline of scale-ups for team-a/web, a target at its maximum
/// (limited), one whose scale the scheduler refused (failing), and team-b's.
async fn seed(addr: SocketAddr) {
    let channel: Channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HorizontalAutoscalerClient::new(channel);
    let now = fixtures::now_secs();
    for (i, (pods, usage)) in [(2, 500), (2, 900), (4, 800), (6, 700), (8, 400), (8, 450)]
        .iter()
        .enumerate()
    {
        let request = fixtures::recommend("team-a/web")
            .pods(*pods)
            .cpu_usage_milli(*usage)
            .replicas(Some(1), 20)
            .behavior(pb::Behavior::default())
            .at(now - 300 + 30 * i as i64)
            .build();
        client.recommend(with_token(request, OPS)).await.unwrap();
    }
    let limited = fixtures::recommend("team-a/limited")
        .pods(4)
        .cpu_usage_milli(1000)
        .replicas(Some(1), 4)
        .at(now - 10)
        .build();
    client.recommend(with_token(limited, OPS)).await.unwrap();
    let failing = fixtures::recommend("team-a/failing")
        .pods(2)
        .cpu_usage_milli(1000)
        .replicas(Some(1), 10)
        .at(now - 5)
        .build();
    let decided = client
        .recommend(with_token(failing, OPS))
        .await
        .unwrap()
        .into_inner();
    client
        .report_scale(with_token(
            pb::ReportScaleRequest {
                target_key: "team-a/failing".into(),
                evaluation_time: decided.evaluation_time,
                desired_replicas: decided.desired_replicas,
                outcome: pb::ScaleOutcome::Failed as i32,
                message: "quota exceeded".into(),
            },
            OPS,
        ))
        .await
        .unwrap();
    let secret = fixtures::recommend("team-b/secret")
        .pods(2)
        .at(now - 5)
        .build();
    client.recommend(with_token(secret, OPS)).await.unwrap();
}

#[test]
fn a_tenant_sees_its_fleet_and_a_timeline_in_chromium() {
    if !available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let sha = |t: &str| autoscaled::auth::policy::sha256_hex(t.as_bytes());
    let authz = dir.path().join("authz.toml");
    std::fs::write(
        &authz,
        format!(
            "[[rule]]\nidentity = \"team-a\"\nverbs = [\"read\"]\nprefixes = [\"team-a/\"]\n\n\
             [[rule]]\nidentity = \"ops\"\nverbs = [\"recommend\", \"read\"]\nprefixes = [\"\"]\n\n\
             [[token]]\nidentity = \"team-a\"\nsha256 = \"{}\"\n\n[[token]]\nidentity = \"ops\"\nsha256 = \"{}\"\n",
            sha(TEAM_A),
            sha(OPS)
        ),
    )
    .unwrap();
    let admin_port = free_port();
    let mut command = common::command(&dir.path().join("data"));
    command
        .arg("--authz")
        .arg(&authz)
        .arg("--metrics-listen")
        .arg(format!("127.0.0.1:{admin_port}"));
    let server = common::spawn(command);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(seed(server.addr));
    let admin: SocketAddr = format!("127.0.0.1:{admin_port}").parse().unwrap();

    // Without a session the console sends the browser to its login; it never shows data.
    let (status, body) = http(admin, "GET", "/", None);
    assert_eq!(status, 303, "{}", String::from_utf8_lossy(&body));
    assert!(!String::from_utf8_lossy(&body).contains("team-a/web"));

    let driver_port = free_port();
    let _driver = Killed(
        Command::new("chromedriver")
            .arg(format!("--port={driver_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let driver: SocketAddr = format!("127.0.0.1:{driver_port}").parse().unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(driver).is_err() {
        assert!(Instant::now() < end, "chromedriver did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    let profile = dir.path().join("chromium-profile");
    let (status, created) = http(
        driver,
        "POST",
        "/session",
        Some(
            &json!({"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                         "--disable-background-networking", "--disable-component-update", "--disable-sync",
                         "--hide-scrollbars", "--window-size=1280,900",
                         format!("--user-data-dir={}", profile.display())]
            }}}}),
        ),
    );
    let created: Value = serde_json::from_slice(&created).unwrap();
    assert_eq!(status, 200, "{created}");
    let browser = Browser {
        driver,
        session: created["value"]["sessionId"].as_str().unwrap().to_owned(),
    };
    let base = format!("http://{admin}");

    // A wrong token is refused with the server's words; the right one logs in.
    browser.go(&format!("{base}/"));
    browser.type_into("#token", "not-a-token");
    browser.click("#login");
    browser.wait_for("unknown or revoked bearer token");
    browser.type_into("#token", TEAM_A);
    browser.click("#login");
    let fleet = browser.wait_for("id=\"fleet\"");
    for key in ["team-a/web", "team-a/limited", "team-a/failing"] {
        assert!(fleet.contains(key), "{key} missing: {fleet}");
    }
    assert!(
        !fleet.contains("team-b/secret"),
        "another tenant's target is shown"
    );
    // Problems first: the failing row, then the limited one, then the rest.
    let at = |k: &str| fleet.find(&format!(">{k}<")).unwrap();
    assert!(at("team-a/failing") < at("team-a/limited") && at("team-a/limited") < at("team-a/web"));
    let (w, h, rgba) = browser.screenshot(&shots, "fleet.png");
    let failing_px = pixels(&rgba, [0xfd, 0xe2, 0xe2]);
    let limited_px = pixels(&rgba, [0xff, 0xf3, 0xcd]);
    eprintln!(
        "fleet.png {w}x{h}: {failing_px} px of the failing colour, {limited_px} of the limited"
    );
    assert!(failing_px > 2000, "no failing row drawn ({failing_px} px)");
    assert!(limited_px > 2000, "no limited row drawn ({limited_px} px)");

    // The timeline of team-a/web: the replica curves and the runs.
    browser.click("a[href=\"/targets/team-a%2Fweb\"]");
    let page = browser.wait_for("id=\"replicas\"");
    assert!(page.contains("id=\"runs\""), "{page}");
    assert!(
        page.contains("cpu resource utilization (percentage of request) above target"),
        "{page}"
    );
    let (w, h, rgba) = browser.screenshot(&shots, "target.png");
    let current_px = pixels(&rgba, [0x1f, 0x77, 0xb4]);
    let desired_px = pixels(&rgba, [0xff, 0x7f, 0x0e]);
    eprintln!(
        "target.png {w}x{h}: {current_px} px of the current curve, {desired_px} of the desired"
    );
    assert!(
        current_px > 300 && desired_px > 300,
        "curves not drawn: {current_px}, {desired_px}"
    );

    // Another tenant's target: refused as over gRPC, nothing of it shown.
    browser.go(&format!("{base}/targets/team-b%2Fsecret"));
    let refused = browser.wait_for("permission_denied");
    assert!(!refused.contains("id=\"replicas\""));
    browser.cmd("DELETE", "", None);
    drop(server);
}
