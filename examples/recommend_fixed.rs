//! A fixed number of Recommends against a running server, for instruction-count profiling
//! (`valgrind --tool=callgrind`, `perf stat`) where wall-clock figures are too noisy: the
//! count of work is the same on every run, so instructions per request are comparable.
//!
//! ```text
//! autoscaled serve --listen 127.0.0.1:50051 --data-dir /tmp/d &   # under callgrind or perf
//! cargo run --release --example recommend_fixed -- 127.0.0.1:50051 [requests] [keys] [in_flight] [dry-run]
//! ```
//!
//! Defaults: 2000 requests round-robin over 1000 keys, 4 in flight; each request is the load
//! benchmark's steady-state target (10 pods, cpu utilization). `dry-run` sets `dry_run` on
//! every request (the server reads the state and decides, and writes nothing). Exits non-zero
//! on any error.

use std::time::Instant;

use autoscaled::pb::v1::horizontal_autoscaler_client::HorizontalAutoscalerClient;

#[path = "../benches/support/steady_state.rs"]
mod steady_state;
use steady_state::recommend_request;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let addr = args
        .get(1)
        .ok_or("usage: recommend_fixed ADDR [requests] [keys] [in_flight] [dry-run]")?;
    let requests: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let keys: usize = args
        .get(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000)
        .max(1);
    let in_flight: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(4).max(1);
    let dry_run = match args.get(5).map(String::as_str) {
        None => false,
        Some("dry-run") => true,
        Some(other) => return Err(format!("unknown argument {other:?} (expected dry-run)").into()),
    };
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let start = Instant::now();
    let tasks: Vec<_> = (0..in_flight)
        .map(|w| {
            let mut client = HorizontalAutoscalerClient::new(channel.clone());
            tokio::spawn(async move {
                let mut i = w;
                while i < requests {
                    let mut req = recommend_request(format!("fixed/{}", i % keys));
                    req.dry_run = dry_run;
                    client.recommend(req).await?;
                    i += in_flight;
                }
                Ok::<_, tonic::Status>(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    println!(
        "{requests} Recommends{} over {keys} keys, {in_flight} in flight: {:?}",
        if dry_run { " (dry runs)" } else { "" },
        start.elapsed()
    );
    Ok(())
}
