//! HTTP/JSON (the Connect protocol's unary calls) on the gRPC port, over real HTTP/1.1
//! connections on 127.0.0.1, as curl sends them: the answer in proto3 JSON, Connect errors
//! with the same field violations as gRPC, the same authentication, and gRPC unchanged
//! beside it.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

use autoscaled::config::Config;
use autoscaled_fixtures as fixtures;
use serde_json::Value;

mod common;

use common::TestServer;

/// One HTTP/1.1 request; returns the status, the headers (lowercased names) and the body.
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a header block");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut body = raw[split + 4..].to_vec();
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v == "chunked")
    {
        body = dechunk(&body);
    }
    (status, headers, body)
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let end = data.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&data[..end]).unwrap().trim(), 16).unwrap();
        data = &data[end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

fn post_json(addr: SocketAddr, path: &str, body: &str, extra: &[(&str, &str)]) -> (u16, Value) {
    let mut headers = vec![("Content-Type", "application/json")];
    headers.extend_from_slice(extra);
    let (status, h, body) = http(addr, "POST", path, &headers, body.as_bytes());
    assert!(
        h.iter()
            .any(|(k, v)| k == "content-type" && v.starts_with("application/json")),
        "{h:?}"
    );
    (status, serde_json::from_slice(&body).unwrap())
}

const RECOMMEND: &str = "/autoscaled.v1.HorizontalAutoscaler/Recommend";

/// The fixture request (2 pods at 100 % against 50 %: 4 replicas) in proto3 JSON, as a
/// caller writes it by hand.
fn recommend_json(key: &str) -> String {
    let request = fixtures::recommend(key)
        .pods(2)
        .cpu_usage_milli(1000)
        .build();
    autoscaled_ctl::client::to_json(&request, "autoscaled.v1.RecommendRequest").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_reaches_every_unary_method_with_json() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(Config::with_data_dir(dir.path().join("data"))).await;
    let addr = server.addr;
    let result = tokio::task::spawn_blocking(move || {
        let (status, body) = post_json(addr, RECOMMEND, &recommend_json("connect/web"), &[]);
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["desiredReplicas"], 4, "{body}");
        assert_eq!(body["recorded"], true);

        // The other unary methods, by their proto3 JSON.
        let (status, body) = post_json(
            addr,
            "/autoscaled.v1.HorizontalAutoscaler/GetHistory",
            r#"{"targetKey": "connect/web"}"#,
            &[],
        );
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["decisions"].as_array().map(Vec::len), Some(1));
        let (status, body) = post_json(
            addr,
            "/autoscaled.v1.HorizontalAutoscaler/ListTargets",
            r#"{"includeSummaries": true}"#,
            &[],
        );
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["targetKeys"][0], "connect/web");
        let (status, body) = post_json(addr, "/grpc.health.v1.Health/Check", "{}", &[]);
        assert_eq!((status, body["status"].as_str()), (200, Some("SERVING")));
        let (status, body) = post_json(
            addr,
            "/autoscaled.v1.HorizontalAutoscaler/GetHistory",
            r#"{"target_key": "no/such"}"#,
            &[],
        );
        assert_eq!(
            (status, body["code"].as_str()),
            (404, Some("not_found")),
            "{body}"
        );
        let (status, body) = post_json(
            addr,
            "/autoscaled.v1.HorizontalAutoscaler/DeleteTarget",
            r#"{"targetKey": "connect/web"}"#,
            &[],
        );
        assert_eq!(status, 200, "{body}");
        assert_eq!(body, serde_json::json!({}));
    })
    .await;
    result.unwrap();
    // gRPC on the same port is untouched.
    let mut client = server.horizontal().await;
    let response = client
        .recommend(
            fixtures::recommend("grpc/web")
                .pods(2)
                .cpu_usage_milli(1000)
                .build(),
        )
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response.desired_replicas, 4);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_connect_errors_with_the_field_violations() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::with_data_dir(dir.path().join("data"));
    config.limits.max_message_bytes = 64 * 1024;
    let server = TestServer::start(config).await;
    let addr = server.addr;
    tokio::task::spawn_blocking(move || {
        // A field the server refuses: INVALID_ARGUMENT's BadRequest, as gRPC sends it.
        let bad =
            recommend_json("connect/bad").replace("\"maxReplicas\": 10", "\"maxReplicas\": 0");
        assert!(bad.contains("\"maxReplicas\": 0"), "{bad}");
        let (status, body) = post_json(addr, RECOMMEND, &bad, &[]);
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["code"], "invalid_argument");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("spec.max_replicas"),
            "{body}"
        );
        let detail = &body["details"][0];
        assert_eq!(detail["type"], "google.rpc.BadRequest", "{body}");
        assert!(detail["value"].as_str().is_some_and(|v| !v.is_empty()));
        assert_eq!(
            detail["debug"]["fieldViolations"][0]["field"], "spec.max_replicas",
            "{body}"
        );

        // Not JSON, or not this message: the body is named.
        let (status, body) = post_json(addr, RECOMMEND, "{\"targetKey\": ", &[]);
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("invalid_argument")),
            "{body}"
        );
        assert_eq!(
            body["details"][0]["debug"]["fieldViolations"][0]["field"],
            "body"
        );
        let (status, body) = post_json(addr, RECOMMEND, r#"{"nosuchField": 1}"#, &[]);
        assert_eq!(status, 400, "{body}");
        assert!(
            body["message"].as_str().unwrap().contains("nosuchField"),
            "{body}"
        );

        // Over the size limit: RESOURCE_EXHAUSTED naming the setting.
        let huge = format!("{{\"targetKey\": \"{}\"}}", "x".repeat(200 * 1024));
        let (status, body) = post_json(addr, RECOMMEND, &huge, &[]);
        assert_eq!(
            (status, body["code"].as_str()),
            (429, Some("resource_exhausted")),
            "{body}"
        );
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("--max-message-bytes"),
            "{body}"
        );

        // Not a method, not POST, not JSON.
        let (status, body) = post_json(addr, "/autoscaled.v1.HorizontalAutoscaler/Nope", "{}", &[]);
        assert_eq!(
            (status, body["code"].as_str()),
            (404, Some("unimplemented"))
        );
        let (status, _, _) = http(addr, "GET", RECOMMEND, &[], b"");
        assert_eq!(status, 405);
        let (status, _, _) = http(
            addr,
            "POST",
            RECOMMEND,
            &[("Content-Type", "text/plain")],
            b"{}",
        );
        assert_eq!(status, 415);
        // A compressed body: not supported, and said so (the protocol's unimplemented).
        let (status, _, body) = http(
            addr,
            "POST",
            RECOMMEND,
            &[
                ("Content-Type", "application/json"),
                ("Content-Encoding", "gzip"),
            ],
            b"{}",
        );
        assert_eq!(status, 501, "{}", String::from_utf8_lossy(&body));
        // A malformed deadline is the caller's mistake; gRPC-Web is not served.
        let (status, _, _) = http(
            addr,
            "POST",
            RECOMMEND,
            &[
                ("Content-Type", "application/json"),
                ("Connect-Timeout-Ms", "soon"),
            ],
            b"{}",
        );
        assert_eq!(status, 400);
        let (status, _, _) = http(
            addr,
            "POST",
            RECOMMEND,
            &[("Content-Type", "application/grpc-web+proto")],
            b"",
        );
        assert_eq!(status, 415);
        let (status, _, body) = http(addr, "GET", "/", &[], b"");
        assert_eq!(status, 404);
        assert!(String::from_utf8_lossy(&body).contains("application/json"));
    })
    .await
    .unwrap();
    // Nothing was stored by the refused calls, and the server still serves.
    let mut client = server.horizontal().await;
    let listed = client
        .list_targets(autoscaled::pb::v1::ListTargetsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.target_keys.is_empty(), "{:?}", listed.target_keys);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_calls_pass_the_same_authentication() {
    let dir = tempfile::tempdir().unwrap();
    let token = "connect-token";
    let hash = autoscaled::auth::policy::sha256_hex(token.as_bytes());
    let authz = dir.path().join("authz.toml");
    std::fs::write(
        &authz,
        format!(
            "[[rule]]\nidentity = \"bot\"\nverbs = [\"recommend\", \"read\"]\nprefixes = [\"team-a/\"]\n\n[[token]]\nidentity = \"bot\"\nsha256 = \"{hash}\"\n"
        ),
    )
    .unwrap();
    let mut config = Config::with_data_dir(dir.path().join("data"));
    config.security.authz = Some(authz);
    let server = TestServer::start(config).await;
    let addr = server.addr;
    tokio::task::spawn_blocking(move || {
        let bearer = format!("Bearer {token}");
        let (status, body) = post_json(addr, RECOMMEND, &recommend_json("team-a/web"), &[]);
        assert_eq!(
            (status, body["code"].as_str()),
            (401, Some("unauthenticated")),
            "{body}"
        );
        let (status, body) = post_json(
            addr,
            RECOMMEND,
            &recommend_json("team-a/web"),
            &[("Authorization", &bearer)],
        );
        assert_eq!(status, 200, "{body}");
        let (status, body) = post_json(
            addr,
            RECOMMEND,
            &recommend_json("team-b/web"),
            &[("Authorization", &bearer)],
        );
        assert_eq!(
            (status, body["code"].as_str()),
            (403, Some("permission_denied")),
            "{body}"
        );
    })
    .await
    .unwrap();
    server.stop().await;
}
