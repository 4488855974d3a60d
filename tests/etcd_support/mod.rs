//! Real etcd processes for the HA tests and the etcd bench: one member or a three-member
//! cluster on 127.0.0.1, free ports, temporary data folders, SIGKILL and restart by member.
//! Included by `tests/etcd_ha.rs` (`mod etcd_support;`) and by `benches/etcd_load.rs`
//! (`#[path]`).
//!
//! etcd is Debian's `etcd-server` (3.4); `scripts/etcd-ci.sh` installs it. Without it the
//! tests skip with a message, except under `CI=true`, where a missing etcd fails them.
#![allow(dead_code)]

use autoscaled_fixtures::free_port;
use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// The etcd binary: `$ETCD_BIN` or `etcd` on the PATH.
fn etcd_bin() -> String {
    std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".to_owned())
}

/// Whether etcd can run here. Not installed: `false` with a message on stderr (the caller
/// returns, the test passes as skipped), except with `CI=true`, where this panics: CI must
/// run these tests, never skip them.
pub fn available() -> bool {
    autoscaled_fixtures::installed(
        &etcd_bin(),
        "apt-get install etcd-server etcd-client, or scripts/etcd-ci.sh; these tests need a real etcd",
    )
}

/// The bound on one `etcdctl` run (its own request timeout is 2 s).
const ETCDCTL_TIMEOUT: Duration = Duration::from_secs(10);

/// One etcd member.
pub struct Member {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    pub data_dir: PathBuf,
    tls: bool,
    child: Option<Child>,
}

impl Member {
    pub fn client_url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }
    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }
    pub fn running(&self) -> bool {
        self.child.is_some()
    }
    /// The member's process id while it runs (the benchmarks read its CPU time).
    #[allow(dead_code)]
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

/// Real certificates made with `openssl`: a CA, the members' certificate (IP SAN 127.0.0.1)
/// and a client certificate, each EKU serverAuth + clientAuth.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Makes a CA and two certificates it signed in `dir`.
pub fn make_certs(dir: &Path) -> TlsFiles {
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=autoscaled-test-ca",
        ],
    );
    for name in ["server", "client"] {
        let (key, csr, crt) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={name}"),
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &crt,
                "-days",
                "2",
                "-extfile",
                "ext.cnf",
            ],
        );
    }
    TlsFiles {
        ca: dir.join("ca.crt"),
        server_cert: dir.join("server.crt"),
        server_key: dir.join("server.key"),
        client_cert: dir.join("client.crt"),
        client_key: dir.join("client.key"),
    }
}

/// A client certificate signed by `files`' CA whose only name is the URI `uri` (so its
/// identity differs from the server certificate's); its certificate and key.
pub fn make_client_cert(dir: &Path, files: &TlsFiles, uri: &str) -> (PathBuf, PathBuf) {
    std::fs::write(
        dir.join("uri.cnf"),
        format!("subjectAltName=URI:{uri}\nextendedKeyUsage=clientAuth\n"),
    )
    .unwrap();
    let ca_key = files.ca.with_file_name("ca.key");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "uri.key",
            "-out",
            "uri.csr",
            "-subj",
            "/CN=caller",
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "uri.csr",
            "-CA",
            files.ca.to_str().unwrap(),
            "-CAkey",
            ca_key.to_str().unwrap(),
            "-CAcreateserial",
            "-out",
            "uri.crt",
            "-days",
            "2",
            "-extfile",
            "uri.cnf",
        ],
    );
    (dir.join("uri.crt"), dir.join("uri.key"))
}

/// An etcd cluster of real processes; every member is killed when dropped.
pub struct Etcd {
    pub members: Vec<Member>,
    token: String,
    /// Clients must use https and a client certificate (`--client-cert-auth`).
    pub tls: Option<TlsFiles>,
    _dir: tempfile::TempDir,
}

impl Etcd {
    /// Starts `n` members (1 or 3) and waits until the cluster answers.
    pub fn start(n: usize) -> Etcd {
        Self::start_with(n, None)
    }

    /// [`Self::start`], clients over TLS with client certificates when `tls` is given.
    pub fn start_with(n: usize, tls: Option<TlsFiles>) -> Etcd {
        let dir = tempfile::tempdir().expect("temp dir");
        let members = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: free_port(),
                peer_port: free_port(),
                data_dir: dir.path().join(format!("m{i}")),
                tls: tls.is_some(),
                child: None,
            })
            .collect();
        let mut etcd = Etcd {
            members,
            token: format!("autoscaled-test-{}", std::process::id()),
            tls,
            _dir: dir,
        };
        for i in 0..n {
            etcd.spawn(i);
        }
        etcd.wait_ready();
        etcd
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url()))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts member `i` (again: a member restarted on its data folder rejoins).
    pub fn spawn(&mut self, i: usize) {
        let initial_cluster = self.initial_cluster();
        let m = &mut self.members[i];
        assert!(m.child.is_none(), "member {i} is running");
        let log = std::fs::File::create(m.data_dir.with_extension("log")).expect("log file");
        let mut command = Command::new(etcd_bin());
        if let Some(tls) = &self.tls {
            command
                .arg("--cert-file")
                .arg(&tls.server_cert)
                .arg("--key-file")
                .arg(&tls.server_key)
                .arg("--trusted-ca-file")
                .arg(&tls.ca)
                .arg("--client-cert-auth");
        }
        let child = command
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&m.data_dir)
            .args(["--listen-client-urls", &m.client_url()])
            .args(["--advertise-client-urls", &m.client_url()])
            .args(["--listen-peer-urls", &m.peer_url()])
            .args(["--initial-advertise-peer-urls", &m.peer_url()])
            .args(["--initial-cluster", &initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", &self.token])
            // Loopback: a 50 ms heartbeat and 500 ms election timeout (etcd's defaults are
            // 100/1000 ms for real networks) keep failover tests short.
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd starts");
        m.child = Some(child);
    }

    /// SIGKILL of member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Every client URL, comma-separated (for `--etcd-endpoints`).
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(Member::client_url)
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn etcdctl(&self, endpoints: &str, args: &[&str]) -> Option<String> {
        let mut command = Command::new("etcdctl");
        if let Some(tls) = &self.tls {
            command
                .arg("--cacert")
                .arg(&tls.ca)
                .arg("--cert")
                .arg(&tls.client_cert)
                .arg("--key")
                .arg(&tls.client_key);
        }
        let mut child = command
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", endpoints])
            .args(["--dial-timeout", "2s", "--command-timeout", "2s"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        // etcdctl bounds its own request (`--command-timeout`); the process is bounded too, so
        // that a request can never hang a caller: after `ETCDCTL_TIMEOUT` it is killed and
        // the call counts as failed (the callers poll again, within their own bound).
        let mut stdout = child.stdout.take()?;
        let reader = std::thread::spawn(move || {
            let mut out = String::new();
            std::io::Read::read_to_string(&mut stdout, &mut out).map(|_| out)
        });
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if started.elapsed() < ETCDCTL_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                _ => {
                    eprintln!(
                        "etcdctl {args:?} on {endpoints}: no answer within {ETCDCTL_TIMEOUT:?}, killed"
                    );
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
            }
        };
        let out = reader.join().ok()?.ok()?;
        status?.success().then_some(out)
    }

    /// Waits until a write through the running members succeeds (a quorum and a leader).
    /// Gives up after 60 s (a broken setup, not a timing assertion).
    pub fn wait_ready(&self) {
        let running: Vec<String> = self
            .members
            .iter()
            .filter(|m| m.running())
            .map(Member::client_url)
            .collect();
        let endpoints = running.join(",");
        let started = Instant::now();
        while self
            .etcdctl(&endpoints, &["put", "autoscaled-test/ready", "1"])
            .is_none()
        {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "etcd did not become ready; logs in {}",
                self.members[0]
                    .data_dir
                    .parent()
                    .map_or(Path::new("?"), |p| p)
                    .display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The index of the current leader among the running members.
    pub fn leader(&self) -> usize {
        let started = Instant::now();
        loop {
            for (i, m) in self.members.iter().enumerate().filter(|(_, m)| m.running()) {
                let Some(out) =
                    self.etcdctl(&m.client_url(), &["endpoint", "status", "-w", "json"])
                else {
                    continue;
                };
                let Ok(v) = serde_json::from_str::<serde_json::Value>(&out) else {
                    continue;
                };
                let status = &v[0]["Status"];
                if status["leader"].as_u64().is_some()
                    && status["leader"] == status["header"]["member_id"]
                {
                    return i;
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "no etcd leader found"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
