//! A fixed number of Recommends against a running server, for instruction-count profiling
//! (`valgrind --tool=callgrind`, `perf stat`) where wall-clock figures are too noisy: the
//! count of work is the same on every run, so instructions per request are comparable.
//!
//! ```text
//! autoscaled serve --listen 127.0.0.1:50051 --data-dir /tmp/d &   # under callgrind or perf
//! cargo run --release --example recommend_fixed -- 127.0.0.1:50051 [requests] [keys] [in_flight]
//! ```
//!
//! Defaults: 2000 requests round-robin over 1000 keys, 4 in flight; each request is the load
//! benchmark's steady-state target (10 pods, cpu utilization). Exits non-zero on any error.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use autoscaled::pb::v1::{self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient};

const PODS: usize = 10;

/// Same shape as `benches/load.rs`'s `recommend_request`.
fn recommend_request(key: String) -> pb::RecommendRequest {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let at = |offset: i64| prost_types::Timestamp {
        seconds: now + offset,
        nanos: 0,
    };
    let pods = (0..PODS)
        .map(|i| {
            let usage = 230 + 10 * (i as i64 % 5);
            pb::PodSample {
                name: format!("web-{i}"),
                phase: pb::PodPhase::Running as i32,
                ready: Some(true),
                ready_transition_time: Some(at(-3500)),
                start_time: Some(at(-3600)),
                requests_milli: [("cpu".to_owned(), 500)].into(),
                metrics: [(
                    "cpu".to_owned(),
                    pb::MetricSample {
                        value_milli: Some(usage),
                        timestamp: Some(at(-10)),
                        window: Some(prost_types::Duration {
                            seconds: 60,
                            nanos: 0,
                        }),
                    },
                )]
                .into(),
                ..Default::default()
            }
        })
        .collect();
    pb::RecommendRequest {
        target_key: key,
        current_replicas: PODS as i32,
        spec: Some(pb::HorizontalSpec {
            min_replicas: Some(2),
            max_replicas: 20,
            metrics: vec![pb::MetricSpec {
                r#type: pb::MetricSourceType::Resource as i32,
                name: "cpu".to_owned(),
                target: Some(pb::MetricTarget {
                    r#type: pb::MetricTargetType::Utilization as i32,
                    average_utilization: Some(50),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        pods,
        ..Default::default()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let addr = args
        .get(1)
        .ok_or("usage: recommend_fixed ADDR [requests] [keys] [in_flight]")?;
    let requests: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let keys: usize = args
        .get(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000)
        .max(1);
    let in_flight: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(4).max(1);
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
                    let req = recommend_request(format!("fixed/{}", i % keys));
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
        "{requests} Recommends over {keys} keys, {in_flight} in flight: {:?}",
        start.elapsed()
    );
    Ok(())
}
