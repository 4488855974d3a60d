//! Closed-loop load on Recommend against an in-process server (same machine, same cores), to
//! measure what durability costs. Counts gRPC errors (h2load would not).
//!
//! ```text
//! cargo run --release --example recommend_load -- [strict|relaxed] [in_flight] [targets] [secs]
//! ```

use std::time::{Duration, Instant};

use autoscaled::{
    config::{Config, Durability},
    pb::v1::{self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient},
};
use autoscaled_fixtures as fixtures;

fn request(key: String) -> pb::RecommendRequest {
    fixtures::recommend(key)
        .pods(4)
        .replicas(None, 20)
        .cpu_usage_milli(700)
        .pod_names(|i| format!("p{i}"))
        .ages(3600, 3600)
        .sample_age(None)
        .build()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let durability = match args.get(1).map(String::as_str) {
        Some("relaxed") => Durability::Relaxed,
        _ => Durability::Strict,
    };
    let in_flight: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(16);
    let targets: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(100);
    let secs: u64 = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(5);

    let dir = tempfile::tempdir()?;
    let mut config = Config::with_data_dir(dir.path().join("data"));
    config.durability = durability;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(autoscaled::server::serve(listener, config, async {
        let _ = stopped.await;
    }));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;

    let deadline = Instant::now() + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..in_flight)
        .map(|w| {
            let mut client = HorizontalAutoscalerClient::new(channel.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut errors = 0u64;
                let mut i = w;
                while Instant::now() < deadline {
                    let req = request(format!("load/{}", i % targets));
                    i += in_flight;
                    let start = Instant::now();
                    match client.recommend(req).await {
                        Ok(_) => latencies.push(start.elapsed()),
                        Err(_) => errors += 1,
                    }
                }
                (latencies, errors)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await?;
        latencies.extend(l);
        errors += e;
    }
    latencies.sort();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    println!(
        "durability={durability} in_flight={in_flight} targets={targets} secs={secs}: {} ok ({:.0} req/s), {errors} errors, p50 {:?}, p90 {:?}, p99 {:?}",
        latencies.len(),
        latencies.len() as f64 / secs as f64,
        pct(0.5),
        pct(0.9),
        pct(0.99),
    );
    let _ = stop.send(());
    server.await??;
    Ok(())
}
