//! gRPC health follows the store: the one watcher of the store's health (issue 8 item 7,
//! issue 11). NOT_SERVING while the store cannot write, SERVING again once it can, without a
//! restart, since a load balancer or a readiness probe that heeds NOT_SERVING sends the calls
//! to a replica that can answer (and no request would find out that this one recovered).
//!
//! Every [`PERIOD`] the watcher asks the database ([`Db`]):
//! * sled: [`Db::healthy`] turns false when a write or flush fails; only then is the store
//!   probed ([`Db::probe`]: a small durable write), which makes it healthy on success;
//! * etcd ([`Db::probe_while_healthy`]): every write fails alike when etcd cannot be reached,
//!   so it is probed on every tick (a linearizable read: succeeds only with a quorum), and it
//!   serves exactly while the probe succeeds.

use std::{sync::Arc, time::Duration};

use tokio::{sync::watch, task::JoinHandle};
use tonic_health::{ServingStatus, server::HealthReporter};

use crate::store::Db;

/// How often the store's health is looked at.
pub(crate) const PERIOD: Duration = Duration::from_millis(500);

/// Watches `store` until `stop` turns true (shutdown sets NOT_SERVING itself after that).
pub(crate) fn spawn(
    store: Arc<dyn Db>,
    reporter: HealthReporter,
    shared: Arc<crate::server::Shared>,
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
            let mut probe_error = None;
            if (!store.healthy() || store.probe_while_healthy())
                && let Err(e) = store.probe().await
            {
                probe_error = Some(e.to_string());
            }
            if let Some(e) = &probe_error {
                tracing::debug!(error = %e, "store probe failed");
            }
            let healthy = store.healthy() && probe_error.is_none();
            if healthy == serving || *stop.borrow() {
                continue;
            }
            serving = healthy;
            let status = if healthy {
                tracing::warn!("store writes succeed again: SERVING");
                ServingStatus::Serving
            } else {
                tracing::error!(
                    error = probe_error.as_deref().unwrap_or("a write or flush failed"),
                    "store writes fail: NOT_SERVING until a write succeeds"
                );
                ServingStatus::NotServing
            };
            reporter.set_service_status("", status).await;
            shared.set_ready(healthy && !*stop.borrow());
            for name in names {
                reporter.set_service_status(*name, status).await;
            }
        }
    })
}
