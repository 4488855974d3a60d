//! TLS, mTLS, bearer tokens and per-tenant authorization over real channels on 127.0.0.1,
//! with certificates made by rcgen at run time and real handshakes (issue 10).

mod common;
mod pki;
#[path = "../benches/support/steady_state.rs"]
mod steady_state;

use std::{net::SocketAddr, path::Path, time::Duration};

use autoscaled::{
    config::{ClientAuth, Config, Exposure, SecurityConfig},
    pb::v1::{
        DeleteTargetRequest, GetHistoryRequest, ListTargetsRequest, RecommendBatchRequest,
        RecordUsageRequest, horizontal_autoscaler_client::HorizontalAutoscalerClient,
        vertical_autoscaler_client::VerticalAutoscalerClient,
    },
};
use pki::{Ca, Leaf, client_tls, write};
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};
use tonic::{
    Code, Request,
    transport::{Channel, ClientTlsConfig, Endpoint},
};
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

const TEAM_A: &str = "spiffe://example.org/team-a";
const TEAM_B: &str = "spiffe://example.org/team-b";

/// An in-process server with its security configuration, on 127.0.0.1:0.
struct Secure {
    addr: SocketAddr,
    health: Option<SocketAddr>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Secure {
    async fn start(data: &Path, security: SecurityConfig, health_listener: bool) -> Secure {
        let mut config = Config::with_data_dir(data);
        config.security = security;
        if health_listener {
            config.security.health_listen = Some("127.0.0.1:0".parse().unwrap());
        }
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = autoscaled::server::Server::open(listener, config)
            .await
            .expect("the security files load and the store opens");
        let health_addr = server.health_addr();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            server
                .serve(async {
                    let _ = stopped.await;
                })
                .await
                .expect("server failed");
        });
        Secure {
            addr,
            health: health_addr,
            stop: Some(stop),
            task: Some(task),
        }
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap();
    }
}

/// A channel to `addr`: TLS with `tls`, plaintext without.
async fn channel(addr: SocketAddr, tls: Option<ClientTlsConfig>) -> Result<Channel, String> {
    let endpoint = match tls {
        Some(tls) => Endpoint::from_shared(format!("https://{addr}"))
            .unwrap()
            .tls_config(tls)
            .unwrap(),
        None => Endpoint::from_shared(format!("http://{addr}")).unwrap(),
    };
    endpoint
        .connect_timeout(Duration::from_secs(10))
        .connect()
        .await
        .map_err(|e| format!("{e:?}"))
}

/// A health check over a fresh connection: the serving status, or why it failed.
async fn health(addr: SocketAddr, tls: Option<ClientTlsConfig>) -> Result<i32, String> {
    let channel = channel(addr, tls).await?;
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .map(|r| r.into_inner().status)
        .map_err(|s| format!("{s:?}"))
}

fn with_token<T>(message: T, token: &str) -> Request<T> {
    let mut request = Request::new(message);
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    request
}

/// The server's TLS files in `dir`.
fn tls_files(dir: &Path, ca: &Ca) -> SecurityConfig {
    let server = ca.server();
    SecurityConfig {
        tls_cert: Some(write(dir, "server.pem", &server.cert)),
        tls_key: Some(write(dir, "server.key", &server.key)),
        ..SecurityConfig::default()
    }
}

#[tokio::test]
async fn a_plaintext_client_cannot_talk_to_a_tls_server_and_a_tls_client_can() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("test CA");
    let server = Secure::start(&dir.path().join("data"), tls_files(dir.path(), &ca), false).await;
    let plaintext = health(server.addr, None).await;
    assert!(plaintext.is_err(), "{plaintext:?}");
    // Trusting another CA fails the handshake too.
    let stranger = Ca::new("other CA");
    assert!(
        health(server.addr, Some(client_tls(&stranger.pem, None)))
            .await
            .is_err()
    );
    assert_eq!(
        health(server.addr, Some(client_tls(&ca.pem, None))).await,
        Ok(1),
        "SERVING over TLS"
    );
    server.stop().await;
}

fn mtls(dir: &Path, ca: &Ca, authz: Option<&str>) -> SecurityConfig {
    SecurityConfig {
        tls_client_ca: Some(write(dir, "clients-ca.pem", &ca.pem)),
        authz: authz.map(|text| write(dir, "authz.toml", text)),
        ..tls_files(dir, ca)
    }
}

#[tokio::test]
async fn mtls_refuses_a_client_without_a_certificate_and_the_health_listener_still_answers() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("test CA");
    let server = Secure::start(&dir.path().join("data"), mtls(dir.path(), &ca, None), true).await;
    let no_cert = health(server.addr, Some(client_tls(&ca.pem, None))).await;
    assert!(no_cert.is_err(), "{no_cert:?}");
    // A certificate from another CA is refused as well.
    let stranger = Ca::new("other CA");
    let foreign = stranger.client_uri(TEAM_A);
    assert!(
        health(server.addr, Some(client_tls(&ca.pem, Some(&foreign))))
            .await
            .is_err()
    );
    let client = ca.client_uri(TEAM_A);
    assert_eq!(
        health(server.addr, Some(client_tls(&ca.pem, Some(&client)))).await,
        Ok(1)
    );
    // The plaintext health listener answers without any credential; it serves health only.
    let health_addr = server.health.unwrap();
    assert_eq!(health(health_addr, None).await, Ok(1));
    let status = HorizontalAutoscalerClient::new(channel(health_addr, None).await.unwrap())
        .list_targets(ListTargetsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented);
    assert!(health(server.addr, None).await.is_err());
    server.stop().await;
}

const TENANTS: &str = r#"
[[rule]]
identity = "spiffe://example.org/team-a"
verbs = ["recommend", "read", "write-usage", "delete"]
prefixes = ["team-a/"]

[[rule]]
identity = "spiffe://example.org/team-b"
verbs = ["recommend", "read", "write-usage", "delete"]
prefixes = ["team-b/"]

# A certificate with only a CN: the auditor reads everything.
[[rule]]
identity = "cn:auditor"
verbs = ["read"]
prefixes = [""]
"#;

async fn list_all(client: &mut HorizontalAutoscalerClient<Channel>, page_size: i32) -> Vec<String> {
    let mut keys = Vec::new();
    let mut token = String::new();
    for _ in 0..100 {
        let page = client
            .list_targets(ListTargetsRequest {
                page_size,
                page_token: token,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(page.target_keys.len() <= usize::try_from(page_size).unwrap());
        keys.extend(page.target_keys);
        if page.next_page_token.is_empty() {
            return keys;
        }
        token = page.next_page_token;
    }
    panic!("pagination does not end");
}

#[tokio::test]
async fn each_tenant_works_under_its_prefix_only_and_a_denial_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("test CA");
    let server = Secure::start(
        &dir.path().join("data"),
        mtls(dir.path(), &ca, Some(TENANTS)),
        false,
    )
    .await;
    let connect = async |leaf: &Leaf| {
        channel(server.addr, Some(client_tls(&ca.pem, Some(leaf))))
            .await
            .unwrap()
    };
    let a_channel = connect(&ca.client_uri(TEAM_A)).await;
    let mut a = HorizontalAutoscalerClient::new(a_channel.clone());
    let mut b = HorizontalAutoscalerClient::new(connect(&ca.client_uri(TEAM_B)).await);
    let mut auditor = HorizontalAutoscalerClient::new(connect(&ca.client_cn("auditor")).await);
    let recommend = steady_state::recommend_request;

    // Tenant A: Recommend, read and delete under team-a/.
    assert!(
        a.recommend(recommend("team-a/web".into()))
            .await
            .unwrap()
            .into_inner()
            .recorded
    );
    let history = a
        .get_history(GetHistoryRequest {
            target_key: "team-a/web".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(history.decisions.len(), 1);

    // Under team-b/: PERMISSION_DENIED naming the verb and the key, and nothing stored.
    let denied = a
        .recommend(recommend("team-b/web".into()))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    assert!(
        denied.message().contains("recommend") && denied.message().contains("team-b/web"),
        "{}",
        denied.message()
    );
    let absent = auditor
        .get_history(GetHistoryRequest {
            target_key: "team-b/web".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(absent.code(), Code::NotFound, "nothing was stored");
    let denied = VerticalAutoscalerClient::new(a_channel.clone())
        .record_usage(RecordUsageRequest {
            target_key: "team-b/web".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    assert!(
        denied.message().contains("write-usage"),
        "{}",
        denied.message()
    );

    // A batch naming one target of team-b/ is refused whole: the request named, nothing
    // stored, not even for its own target.
    let denied = a
        .recommend_batch(RecommendBatchRequest {
            requests: vec![
                recommend("team-a/batch".into()),
                recommend("team-b/batch".into()),
            ],
        })
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    assert!(
        denied.message().starts_with("requests[1]: ") && denied.message().contains("team-b/batch"),
        "{}",
        denied.message()
    );
    for key in ["team-a/batch", "team-b/batch"] {
        let absent = auditor
            .get_history(GetHistoryRequest {
                target_key: key.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(absent.code(), Code::NotFound, "{key} was stored");
    }

    // Tenant B's own targets.
    for key in ["team-b/api", "team-b/db"] {
        b.recommend(recommend(key.into())).await.unwrap();
    }
    // Tenant A may neither read nor delete them.
    for status in [
        a.get_history(GetHistoryRequest {
            target_key: "team-b/api".into(),
            ..Default::default()
        })
        .await
        .unwrap_err(),
        a.delete_target(DeleteTargetRequest {
            target_key: "team-b/api".into(),
        })
        .await
        .unwrap_err(),
    ] {
        assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    }
    // The auditor reads but may not write.
    assert_eq!(
        auditor
            .recommend(recommend("team-a/x".into()))
            .await
            .unwrap_err()
            .code(),
        Code::PermissionDenied
    );

    // Each tenant lists only its keys, whatever the page size.
    for page_size in [1, 2, 100] {
        assert_eq!(list_all(&mut a, page_size).await, ["team-a/web"]);
        assert_eq!(
            list_all(&mut b, page_size).await,
            ["team-b/api", "team-b/db"]
        );
        assert_eq!(
            list_all(&mut auditor, page_size).await,
            ["team-a/web", "team-b/api", "team-b/db"]
        );
    }

    // A deletes its own target; B's is untouched.
    a.delete_target(DeleteTargetRequest {
        target_key: "team-a/web".into(),
    })
    .await
    .unwrap();
    assert_eq!(
        list_all(&mut auditor, 10).await,
        ["team-b/api", "team-b/db"]
    );
    server.stop().await;
}

#[tokio::test]
async fn a_wrong_or_revoked_token_is_unauthenticated() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("test CA");
    let token = "s3cret-ci-token";
    let hash = autoscaled::auth::policy::sha256_hex(token.as_bytes());
    let authz = format!(
        "[[rule]]\nidentity = \"ci-bot\"\nverbs = [\"recommend\", \"read\"]\nprefixes = [\"ci/\"]\n\n[[token]]\nidentity = \"ci-bot\"\nsha256 = \"{hash}\"\n"
    );
    let security = SecurityConfig {
        authz: Some(write(dir.path(), "authz.toml", &authz)),
        // What `--authz` defaults them to.
        health: Exposure::Auth,
        reflection: Exposure::Auth,
        reload_interval: Duration::from_secs(1),
        ..tls_files(dir.path(), &ca)
    };
    let server = Secure::start(&dir.path().join("data"), security, false).await;
    let channel = channel(server.addr, Some(client_tls(&ca.pem, None)))
        .await
        .unwrap();
    let mut client = HorizontalAutoscalerClient::new(channel.clone());
    let request = || steady_state::recommend_request("ci/web".into());

    client
        .recommend(with_token(request(), token))
        .await
        .unwrap();
    for status in [
        client
            .recommend(with_token(request(), "wrong"))
            .await
            .unwrap_err(),
        client.recommend(request()).await.unwrap_err(),
    ] {
        assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    }
    // Reflection and health need an identity too with --authz (default `auth`).
    let health = HealthClient::new(channel.clone())
        .check(HealthCheckRequest::default())
        .await
        .unwrap_err();
    assert_eq!(health.code(), Code::Unauthenticated);
    assert_eq!(
        HealthClient::new(channel.clone())
            .check(with_token(HealthCheckRequest::default(), token))
            .await
            .unwrap()
            .into_inner()
            .status,
        1
    );
    // The token may not go beyond its rules.
    let denied = client
        .delete_target(with_token(
            DeleteTargetRequest {
                target_key: "ci/web".into(),
            },
            token,
        ))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);

    // Revoke: the token's line leaves the file; the periodic check picks it up, no restart.
    write(
        dir.path(),
        "authz.toml",
        "[[rule]]\nidentity = \"ci-bot\"\nverbs = [\"recommend\", \"read\"]\nprefixes = [\"ci/\"]\n",
    );
    let mut revoked = None;
    for _ in 0..600 {
        match client.recommend(with_token(request(), token)).await {
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(status) => {
                revoked = Some(status);
                break;
            }
        }
    }
    let revoked = revoked.expect("the revoked token was refused within 60 s");
    assert_eq!(revoked.code(), Code::Unauthenticated, "{revoked:?}");
    server.stop().await;
}

/// The real binary: the certificate files are replaced and SIGHUP makes new connections get
/// the new certificate, while the listener and the established connection stay up.
#[test]
fn certificate_rotation_on_sighup_takes_effect_without_restart() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let old_ca = Ca::new("old CA");
    let old = old_ca.server();
    let cert = write(dir.path(), "tls.crt", &old.cert);
    let key = write(dir.path(), "tls.key", &old.key);
    let mut command = common::command(&dir.path().join("data"));
    command
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .args(["--security-reload-secs", "0"]);
    let server = common::spawn(command);
    let addr = server.addr;
    runtime.block_on(async {
        let established = channel(addr, Some(client_tls(&old_ca.pem, None)))
            .await
            .unwrap();
        let mut established = HealthClient::new(established);
        assert_eq!(
            established
                .check(HealthCheckRequest::default())
                .await
                .unwrap()
                .into_inner()
                .status,
            1
        );

        let new_ca = Ca::new("new CA");
        let new = new_ca.server();
        // Key first, then certificate: between the two writes a reload would see a mismatch
        // and keep the old pair, as it must.
        write(dir.path(), "tls.key", &new.key);
        write(dir.path(), "tls.crt", &new.cert);
        let status = std::process::Command::new("kill")
            .args(["-HUP", &server.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let mut rotated = false;
        for _ in 0..600 {
            if health(addr, Some(client_tls(&new_ca.pem, None))).await == Ok(1) {
                rotated = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(rotated, "the new certificate was never served");
        assert!(
            health(addr, Some(client_tls(&old_ca.pem, None)))
                .await
                .is_err(),
            "new connections get the new certificate only"
        );
        // The connection made before the rotation still works.
        assert_eq!(
            established
                .check(HealthCheckRequest::default())
                .await
                .unwrap()
                .into_inner()
                .status,
            1
        );
    });
    drop(server);
}

#[test]
fn bad_security_files_stop_the_start_with_exit_64() {
    let dir = tempfile::tempdir().unwrap();
    let cert = write(dir.path(), "tls.crt", "not a certificate");
    let key = write(dir.path(), "tls.key", "not a key");
    let output = common::command(&dir.path().join("data"))
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("tls.crt"), "{stderr}");

    let authz = write(
        dir.path(),
        "authz.toml",
        "[[rule]]\nidentity = \"a\"\nverbs = [\"writ\"]\nprefixes = [\"\"]\n",
    );
    let output = common::command(&dir.path().join("data"))
        .arg("--authz")
        .arg(&authz)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("rule[0].verbs"), "{stderr}");
}

#[tokio::test]
async fn optional_client_certificates_let_token_callers_in() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("test CA");
    let token = "tok";
    let authz = format!(
        "{TENANTS}\n[[rule]]\nidentity = \"bot\"\nverbs = [\"read\"]\nprefixes = [\"team-b/\"]\n[[token]]\nidentity = \"bot\"\nsha256 = \"{}\"\n",
        autoscaled::auth::policy::sha256_hex(token.as_bytes())
    );
    let security = SecurityConfig {
        tls_client_auth: ClientAuth::Optional,
        ..mtls(dir.path(), &ca, Some(&authz))
    };
    let server = Secure::start(&dir.path().join("data"), security, false).await;
    let anonymous = channel(server.addr, Some(client_tls(&ca.pem, None)))
        .await
        .unwrap();
    let mut client = HorizontalAutoscalerClient::new(anonymous);
    assert_eq!(
        client
            .list_targets(ListTargetsRequest::default())
            .await
            .unwrap_err()
            .code(),
        Code::Unauthenticated
    );
    assert!(
        client
            .list_targets(with_token(ListTargetsRequest::default(), token))
            .await
            .unwrap()
            .into_inner()
            .target_keys
            .is_empty()
    );
    let a = channel(
        server.addr,
        Some(client_tls(&ca.pem, Some(&ca.client_uri(TEAM_A)))),
    )
    .await
    .unwrap();
    HorizontalAutoscalerClient::new(a)
        .recommend(steady_state::recommend_request("team-a/x".into()))
        .await
        .unwrap();
    server.stop().await;
}

/// The review's first attack: a client certificate whose DNS SAN, or whose CN (no SAN), is
/// the string `spiffe://example.org/team-b` gets none of team-b's rights, and one whose CN is
/// a token's identity gets none of the token's: identities are typed by their source.
#[tokio::test]
async fn a_dns_name_or_cn_cannot_pose_as_a_spiffe_identity_or_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("test CA");
    let token = "bot-token";
    let authz = format!(
        "{TENANTS}\n[[rule]]\nidentity = \"bot\"\nverbs = [\"recommend\", \"read\"]\nprefixes = [\"team-b/\"]\n[[token]]\nidentity = \"bot\"\nsha256 = \"{}\"\n",
        autoscaled::auth::policy::sha256_hex(token.as_bytes())
    );
    let server = Secure::start(
        &dir.path().join("data"),
        mtls(dir.path(), &ca, Some(&authz)),
        false,
    )
    .await;
    let request = || steady_state::recommend_request("team-b/web".to_owned());
    for leaf in [
        ca.client_dns(TEAM_B),
        ca.client_cn(TEAM_B),
        ca.client_cn("bot"),
    ] {
        let channel = channel(server.addr, Some(client_tls(&ca.pem, Some(&leaf))))
            .await
            .unwrap();
        let status = HorizontalAutoscalerClient::new(channel)
            .recommend(request())
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    }
    // The real team-b, and the token, still may.
    let b = channel(
        server.addr,
        Some(client_tls(&ca.pem, Some(&ca.client_uri(TEAM_B)))),
    )
    .await
    .unwrap();
    HorizontalAutoscalerClient::new(b.clone())
        .recommend(request())
        .await
        .unwrap();
    HorizontalAutoscalerClient::new(b)
        .recommend(with_token(request(), token))
        .await
        .unwrap();
    server.stop().await;
}

/// The review's sixth attack: Health/Watch streams on the health-only listener, which asks for
/// no credentials, are bounded (256 over every listener; 20,000 of them took 236 MiB): past
/// the bound a Watch is RESOURCE_EXHAUSTED at once, Check still answers, and a stream that
/// ends gives its place back.
#[tokio::test]
async fn health_watch_streams_are_bounded_on_the_open_health_listener() {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("test CA");
    let server = Secure::start(&dir.path().join("data"), mtls(dir.path(), &ca, None), true).await;
    let addr = server.health.unwrap();
    let mut open = Vec::new();
    let mut refused = 0;
    // 20 connections of 15 streams (under the 16 a connection may hold).
    for _ in 0..20 {
        let mut client = HealthClient::new(channel(addr, None).await.unwrap());
        for _ in 0..15 {
            match client.watch(HealthCheckRequest::default()).await {
                Ok(stream) => open.push(stream.into_inner()),
                Err(status) => {
                    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                    refused += 1;
                }
            }
        }
    }
    assert_eq!((open.len(), refused), (256, 300 - 256));
    assert_eq!(health(addr, None).await, Ok(1));
    // Ending streams gives their places back.
    open.truncate(200);
    let mut client = HealthClient::new(channel(addr, None).await.unwrap());
    let mut again = None;
    for _ in 0..100 {
        match client.watch(HealthCheckRequest::default()).await {
            Ok(stream) => {
                again = Some(stream);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    assert!(
        again.is_some(),
        "a Watch is served again once streams ended"
    );
    drop(open);
    server.stop().await;
}

/// Connections to the health-only listener are bounded as well (256): one more is closed as
/// soon as it is accepted, and a probe is answered again once connections close.
#[tokio::test]
async fn health_listener_connections_are_bounded() {
    use tokio::io::AsyncReadExt;
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("test CA");
    let server = Secure::start(&dir.path().join("data"), mtls(dir.path(), &ca, None), true).await;
    let addr = server.health.unwrap();
    let mut held = Vec::new();
    for _ in 0..256 {
        held.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    // Eventually (once the 256 are accepted) a new connection is closed at once.
    let mut closed = false;
    for _ in 0..200 {
        let mut extra = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut byte = [0u8; 1];
        match tokio::time::timeout(Duration::from_millis(500), extra.read(&mut byte)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed = true;
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    assert!(closed, "a connection beyond the bound was kept open");
    drop(held);
    let mut answered = None;
    for _ in 0..200 {
        answered = health(addr, None).await.ok();
        if answered.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(answered, Some(1));
    server.stop().await;
}

fn denied<T: std::fmt::Debug>(r: Result<tonic::Response<T>, tonic::Status>) {
    assert_eq!(r.unwrap_err().code(), tonic::Code::PermissionDenied);
}

/// Policies and scaling groups are resources under the tenants' prefixes: a tenant puts and
/// names only its own policies, puts a budget only on its own targets (every key, prefix and
/// policy a group selects needs `configure`), lists only what it may read, and a refused put
/// stores nothing.
#[tokio::test]
async fn a_tenant_configures_policies_and_budgets_for_its_own_targets_only() {
    use autoscaled::pb::v1 as pb;
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("test CA");
    // Team B may also read team A's policy (a shared catalog of specs).
    let authz = TENANTS.replace(
        r#"verbs = ["recommend", "read", "write-usage", "delete"]"#,
        r#"verbs = ["recommend", "read", "write-usage", "delete", "configure"]"#,
    ) + "[[rule]]\nidentity = \"spiffe://example.org/team-b\"\nverbs = [\"read\"]\nprefixes = [\"team-a/web\"]\n";
    let server = Secure::start(
        &dir.path().join("data"),
        mtls(dir.path(), &ca, Some(&authz)),
        false,
    )
    .await;
    let connect = async |leaf: &Leaf| {
        HorizontalAutoscalerClient::new(
            channel(server.addr, Some(client_tls(&ca.pem, Some(leaf))))
                .await
                .unwrap(),
        )
    };
    let mut a = connect(&ca.client_uri(TEAM_A)).await;
    let mut b = connect(&ca.client_uri(TEAM_B)).await;
    let mut auditor = connect(&ca.client_cn("auditor")).await;
    let policy = |name: &str| pb::PutPolicyRequest {
        policy: Some(pb::Policy {
            name: name.into(),
            spec: Some(pb::HorizontalSpec {
                max_replicas: 10,
                ..Default::default()
            }),
            ..Default::default()
        }),
        expected_version: None,
    };
    let group = |name: &str, prefixes: &[&str], policies: &[&str]| pb::PutScalingGroupRequest {
        group: Some(pb::ScalingGroup {
            name: name.into(),
            capacity: 5,
            member_prefixes: prefixes.iter().map(|p| (*p).to_owned()).collect(),
            member_policies: policies.iter().map(|p| (*p).to_owned()).collect(),
            ..Default::default()
        }),
        expected_version: None,
    };

    a.put_policy(policy("team-a/web")).await.unwrap();
    denied(a.put_policy(policy("team-b/web")).await);
    denied(auditor.put_policy(policy("team-a/x")).await);
    b.put_policy(policy("team-b/web")).await.unwrap();
    // A's group over its own prefix; not over B's targets, nor by B's policy, nor everything.
    a.put_scaling_group(group("team-a/budget", &["team-a/"], &["team-a/web"]))
        .await
        .unwrap();
    denied(
        a.put_scaling_group(group("team-a/grab", &["team-b/"], &[]))
            .await,
    );
    denied(
        a.put_scaling_group(group("team-a/grab", &[], &["team-b/web"]))
            .await,
    );
    denied(
        a.put_scaling_group(group("team-a/grab", &["team-"], &[]))
            .await,
    );
    // Naming another tenant's policy is reading it: refused.
    let mut call = steady_state::recommend_request("team-a/svc".into());
    call.policy = "team-b/web".into();
    denied(a.recommend(call).await);
    // B may read A's policy and name it, but its target does not join A's group (selected
    // by that policy): a group's members stay within the rights of whoever put it.
    let mut call = steady_state::recommend_request("team-b/svc".into());
    call.policy = "team-a/web".into();
    call.spec = None;
    let answer = b.recommend(call).await.unwrap().into_inner();
    assert!(answer.budget.is_none(), "{answer:?}");
    let mut call = steady_state::recommend_request("team-a/svc".into());
    call.policy = "team-a/web".into();
    call.spec = None;
    let answer = a.recommend(call).await.unwrap().into_inner();
    assert_eq!(answer.budget.unwrap().group, "team-a/budget");
    // Lists show each tenant its own; the auditor sees all.
    let names = |r: pb::ListPoliciesResponse| -> Vec<String> {
        r.policies.into_iter().map(|p| p.name).collect()
    };
    let mine = a
        .list_policies(pb::ListPoliciesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(names(mine), ["team-a/web"]);
    let all = auditor
        .list_policies(pb::ListPoliciesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(names(all), ["team-a/web", "team-b/web"]);
    let groups = b
        .list_scaling_groups(pb::ListScalingGroupsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(groups.groups.is_empty(), "{groups:?}");
    denied(
        b.get_scaling_group(pb::GetScalingGroupRequest {
            name: "team-a/budget".into(),
        })
        .await,
    );
    denied(
        b.simulate(pb::SimulateRequest {
            group: "team-a/budget".into(),
            ..Default::default()
        })
        .await,
    );
    denied(
        b.delete_policy(pb::DeletePolicyRequest {
            name: "team-a/web".into(),
            force: true,
        })
        .await,
    );
    // Nothing refused was stored.
    let stored = auditor
        .list_scaling_groups(pb::ListScalingGroupsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stored.groups.len(), 1);
    server.stop().await;
}
