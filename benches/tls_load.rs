//! What TLS and mTLS + authorization cost a Recommend: the same closed-loop load against the
//! real `autoscaled` binary (bench profile) started three times in one run:
//!
//! * `plaintext`: no security flag (today's default);
//! * `tls`: `--tls-cert/--tls-key`;
//! * `mtls+authz`: plus `--tls-client-ca` and an `--authz` file granting the client's SPIFFE
//!   identity `recommend` on `bench/` (so every call passes the auth layer and the per-key
//!   check).
//!
//! Connections are made once per channel (4 channels, HTTP/2), so the figures are the
//! per-request cost of encryption and authorization, not of handshakes; the handshake cost
//! shows only in the first call. Certificates are ECDSA P-256 made by rcgen.
//!
//! `cargo bench --bench tls_load`. Environment: `LOAD_SECS` (measured seconds per scenario,
//! default 3), `LOAD_WARMUP_SECS` (default 1). Client and server share the machine's cores:
//! compare the rows, not the absolute numbers.

#[path = "../tests/common/binary.rs"]
mod binary;
#[path = "../tests/pki/mod.rs"]
mod pki;
#[path = "support/steady_state.rs"]
mod steady_state;

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use autoscaled::pb::v1::horizontal_autoscaler_client::HorizontalAutoscalerClient;
use hdrhistogram::Histogram;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

const CHANNELS: usize = 4;
const KEYS: usize = 1000;
const IN_FLIGHT: [usize; 2] = [1, 16];

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Mode {
    name: &'static str,
    server: binary::Server,
    tls: Option<ClientTlsConfig>,
}

async fn channels(addr: SocketAddr, tls: Option<&ClientTlsConfig>) -> Vec<Channel> {
    let mut out = Vec::new();
    for _ in 0..CHANNELS {
        let endpoint = match tls {
            Some(tls) => Endpoint::from_shared(format!("https://{addr}"))
                .unwrap()
                .tls_config(tls.clone())
                .unwrap(),
            None => Endpoint::from_shared(format!("http://{addr}")).unwrap(),
        };
        out.push(endpoint.connect().await.expect("connects"));
    }
    out
}

/// Closed loop: `in_flight` tasks each sending its next Recommend when the previous returns.
async fn run(
    channels: &[Channel],
    in_flight: usize,
    prefix: &str,
    warmup: Duration,
    measure: Duration,
) -> (f64, Histogram<u64>, u64) {
    let start = Instant::now();
    let measure_from = start + warmup;
    let end = measure_from + measure;
    let mut tasks = Vec::new();
    for task in 0..in_flight {
        let mut client = HorizontalAutoscalerClient::new(channels[task % channels.len()].clone());
        let prefix = prefix.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut latency = Histogram::<u64>::new(3).unwrap();
            let (mut ok, mut errors) = (0u64, 0u64);
            let mut i = task;
            loop {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                let request = steady_state::recommend_request(format!("{prefix}/{}", i % KEYS));
                i += in_flight;
                let result = client.recommend(request).await;
                if now >= measure_from {
                    match result {
                        Ok(_) => {
                            ok += 1;
                            let _ = latency.record(now.elapsed().as_micros() as u64);
                        }
                        Err(_) => errors += 1,
                    }
                }
            }
            (ok, errors, latency)
        }));
    }
    let mut latency = Histogram::<u64>::new(3).unwrap();
    let (mut ok, mut errors) = (0, 0);
    for t in tasks {
        let (o, e, l) = t.await.unwrap();
        ok += o;
        errors += e;
        latency.add(&l).unwrap();
    }
    (ok as f64 / measure.as_secs_f64(), latency, errors)
}

fn main() -> anyhow::Result<()> {
    let measure = Duration::from_secs(env_u64("LOAD_SECS", 3));
    let warmup = Duration::from_secs(env_u64("LOAD_WARMUP_SECS", 1));
    let dir = tempfile::tempdir()?;
    let ca = pki::Ca::new("bench CA");
    let server_leaf = ca.server();
    let client_leaf = ca.client_uri("spiffe://example.org/bench");
    let w = |name: &str, text: &str| pki::write(dir.path(), name, text);
    let (cert, key, ca_pem) = (
        w("server.pem", &server_leaf.cert),
        w("server.key", &server_leaf.key),
        w("ca.pem", &ca.pem),
    );
    let authz = w(
        "authz.toml",
        "[[rule]]\nidentity = \"spiffe://example.org/bench\"\nverbs = [\"recommend\"]\nprefixes = [\"bench/\"]\n",
    );

    let start = |name: &'static str, extra: &[&std::ffi::OsStr], tls: Option<ClientTlsConfig>| {
        let mut command = binary::command(&dir.path().join(name));
        command.args(extra);
        Mode {
            name,
            server: binary::spawn(command),
            tls,
        }
    };
    let tls_args = [
        "--tls-cert".as_ref(),
        cert.as_os_str(),
        "--tls-key".as_ref(),
        key.as_os_str(),
    ];
    let mut mtls_args = tls_args.to_vec();
    mtls_args.extend([
        "--tls-client-ca".as_ref(),
        ca_pem.as_os_str(),
        "--authz".as_ref(),
        authz.as_os_str(),
    ]);
    let modes = [
        start("plaintext", &[], None),
        start("tls", &tls_args, Some(pki::client_tls(&ca.pem, None))),
        start(
            "mtls+authz",
            &mtls_args,
            Some(pki::client_tls(&ca.pem, Some(&client_leaf))),
        ),
    ];

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!(
        "Recommend, closed loop, {CHANNELS} channels, {KEYS} keys, {} s measured after {} s warm-up",
        measure.as_secs(),
        warmup.as_secs()
    );
    println!(
        "{:<11} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "mode", "in-flight", "req/s", "p50 µs", "p99 µs", "errors"
    );
    for in_flight in IN_FLIGHT {
        for mode in &modes {
            let (per_second, latency, errors) = runtime.block_on(async {
                let channels = channels(mode.server.addr, mode.tls.as_ref()).await;
                run(
                    &channels,
                    in_flight,
                    &format!("bench/{}/{in_flight}", mode.name),
                    warmup,
                    measure,
                )
                .await
            });
            println!(
                "{:<11} {:>9} {:>9.0} {:>9} {:>9} {:>7}",
                mode.name,
                in_flight,
                per_second,
                latency.value_at_quantile(0.50),
                latency.value_at_quantile(0.99),
                errors
            );
        }
    }
    Ok(())
}
