//! gRPC health follows the store (issue 8 item 7): NOT_SERVING while the store cannot write
//! ([`HistoryStore::healthy`]), SERVING again once a write succeeds. While unhealthy the
//! store is probed ([`HistoryStore::probe`]: a small durable write) every half second, since
//! a load balancer that heeds NOT_SERVING sends no request that could find out.

use std::{sync::Arc, time::Duration};

use tokio::{sync::watch, task::JoinHandle};
use tonic_health::{ServingStatus, server::HealthReporter};

use crate::store::HistoryStore;

/// How often the store's health is looked at.
const PERIOD: Duration = Duration::from_millis(500);

/// Watches `store` until `stop` turns true (shutdown sets NOT_SERVING itself after that).
pub fn spawn(
    store: Arc<dyn HistoryStore>,
    reporter: HealthReporter,
    names: &'static [&'static str],
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut serving = true;
        let mut tick = tokio::time::interval(PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            if !store.healthy() {
                let probe = Arc::clone(&store);
                match tokio::task::spawn_blocking(move || probe.probe()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::debug!(error = %e, "store probe failed"),
                    Err(e) => tracing::debug!(error = %e, "store probe task failed"),
                }
            }
            let healthy = store.healthy();
            if healthy == serving || *stop.borrow() {
                continue;
            }
            serving = healthy;
            let status = if healthy {
                tracing::warn!("store writes succeed again: SERVING");
                ServingStatus::Serving
            } else {
                tracing::error!("store writes fail: NOT_SERVING until a write succeeds");
                ServingStatus::NotServing
            };
            reporter.set_service_status("", status).await;
            for name in names {
                reporter.set_service_status(*name, status).await;
            }
        }
    })
}
