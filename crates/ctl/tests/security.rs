//! `autoscalectl`'s TLS, mTLS and token flags against the real server binary.

mod common;
#[path = "../../../tests/pki/mod.rs"]
mod pki;

use std::path::Path;

use autoscaled::auth::policy::sha256_hex;
use pki::{Ca, write};

const TEAM_A: &str = "spiffe://example.org/team-a";

/// The CLI's `--ca`, `--cert`, `--key` and `--token` against the real binary with mTLS
/// (client certificates optional) and an authorization file.
#[test]
fn the_cli_speaks_tls_mtls_and_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("test CA");
    let server_leaf = ca.server();
    let client = ca.client_uri(TEAM_A);
    let token = "cli-token";
    let authz = format!(
        "[[rule]]\nidentity = \"{TEAM_A}\"\nverbs = [\"recommend\", \"read\"]\nprefixes = [\"examples/\"]\n\n[[rule]]\nidentity = \"reader\"\nverbs = [\"read\"]\nprefixes = [\"examples/\"]\n\n[[token]]\nidentity = \"reader\"\nsha256 = \"{}\"\n",
        sha256_hex(token.as_bytes())
    );
    let p = |name: &str, text: &str| write(dir.path(), name, text);
    let (ca_pem, cert, key) = (
        p("ca.pem", &ca.pem),
        p("client.pem", &client.cert),
        p("client.key", &client.key),
    );
    let mut command = common::command(&dir.path().join("data"));
    command
        .arg("--tls-cert")
        .arg(p("server.pem", &server_leaf.cert))
        .arg("--tls-key")
        .arg(p("server.key", &server_leaf.key))
        .arg("--tls-client-ca")
        .arg(&ca_pem)
        .args(["--tls-client-auth", "optional", "--authz"])
        .arg(p("authz.toml", &authz));
    let server = common::spawn(command);
    let addr = server.addr.to_string();
    let example = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/recommend.json"
    ));
    let run = |extra: &[&Path], args: &[&str]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_autoscalectl"));
        c.args(args).env_remove("AUTOSCALED_TOKEN");
        for (flag, path) in ["--ca", "--cert", "--key"].iter().zip(extra) {
            c.arg(flag).arg(path);
        }
        c.output().unwrap()
    };
    let recommend = [
        "recommend",
        "--addr",
        &addr,
        "--file",
        example.to_str().unwrap(),
    ];
    let out = run(&[&ca_pem, &cert, &key], &recommend);
    assert!(out.status.success(), "{out:?}");
    // Plaintext against the TLS port fails, and the message says why.
    let out = run(&[], &recommend);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is the server using TLS?"), "{stderr}");
    // TLS without a certificate nor a token: UNAUTHENTICATED.
    let out = run(&[&ca_pem], &recommend);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Unauthenticated"), "{stderr}");
    // The token reads but may not recommend.
    let history = ["history", "--addr", &addr, "examples/web", "--token", token];
    let out = run(&[&ca_pem], &history);
    assert!(out.status.success(), "{out:?}");
    let mut with_token = recommend.to_vec();
    with_token.extend(["--token", token]);
    let out = run(&[&ca_pem], &with_token);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("PermissionDenied") && stderr.contains("recommend"),
        "{stderr}"
    );
    // The what-if commands take the same options: the token replays and reports.
    let report = dir.path().join("report.html");
    let simulate = [
        "simulate",
        "--addr",
        &addr,
        "--target",
        "examples/web",
        "--token",
        token,
    ];
    let out = run(&[&ca_pem], &simulate);
    assert!(out.status.success(), "{out:?}");
    let report_args = [
        "report",
        "--addr",
        &addr,
        "--target",
        "examples/web",
        "--out",
        report.to_str().unwrap(),
        "--token",
        token,
    ];
    let out = run(&[&ca_pem], &report_args);
    assert!(out.status.success(), "{out:?}");
    assert!(report.exists());
}
