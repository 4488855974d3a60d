//! Health `Watch` streams that end when shutdown starts.
//!
//! A `grpc.health.v1.Health/Watch` call is a stream that never ends by itself (tonic-health's
//! `WatchStream` follows a `watch` channel). The server's graceful shutdown waits for every
//! open stream, so one watcher (a load balancer, `grpc-health-probe -watch`) held every
//! shutdown for the full grace period (issue 8). This wrapper serves tonic-health's own
//! service and ends each Watch stream, after the last status it sent (NOT_SERVING, which the
//! server sets first), as soon as the stop signal is raised; the caller sees the stream end
//! with OK and reconnects elsewhere, as grpc-go's health server does on `Shutdown()`
//! (`health.Server.Shutdown` sets NOT_SERVING; the transport's `GracefulStop` then closes).

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use tonic_health::{
    pb::{
        HealthCheckRequest, HealthCheckResponse,
        health_server::{Health, HealthServer},
    },
    server::{HealthReporter, HealthService},
};

/// Open Health/Watch streams at most, over every listener: each holds memory for as long as
/// its client keeps it, and health needs no credentials (the health-only listener never asks
/// for any), so without a bound anyone could exhaust memory (20,000 streams took 236 MiB).
/// Kubernetes probes use Check; a few monitors watch.
pub(crate) const MAX_WATCH_STREAMS: usize = 256;

/// The health service of `reporter`, whose Watch streams end once `stop` turns true and
/// share the `watches` bound ([`MAX_WATCH_STREAMS`] permits).
pub(crate) fn health_server(
    reporter: HealthReporter,
    stop: watch::Receiver<bool>,
    watches: Arc<Semaphore>,
) -> HealthServer<StoppingHealth> {
    HealthServer::new(StoppingHealth {
        inner: HealthService::from_health_reporter(reporter),
        stop,
        watches,
    })
}

/// tonic-health's service with Watch streams that end at shutdown, and are bounded.
#[derive(Debug)]
pub(crate) struct StoppingHealth {
    inner: HealthService,
    stop: watch::Receiver<bool>,
    watches: Arc<Semaphore>,
}

type BoxStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Health for StoppingHealth {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        self.inner.check(request).await
    }

    type WatchStream = UntilStop;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let permit = Arc::clone(&self.watches).try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "{MAX_WATCH_STREAMS} Health/Watch streams are open; use Check, or retry later"
            ))
        })?;
        let inner = self.inner.watch(request).await?.into_inner();
        let mut stop = self.stop.clone();
        Ok(Response::new(UntilStop {
            _permit: permit,
            inner: Box::pin(inner),
            stop: Box::pin(async move {
                // A dropped sender means the server is gone: stop too.
                let _ = stop.wait_for(|stop| *stop).await;
            }),
            done: false,
        }))
    }
}

/// A stream that ends when its stop future completes (after any item ready at that moment).
pub(crate) struct UntilStop {
    /// The stream's place under [`MAX_WATCH_STREAMS`], given back when it is dropped.
    _permit: OwnedSemaphorePermit,
    inner: BoxStream,
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    done: bool,
}

impl Stream for UntilStop {
    type Item = Result<HealthCheckResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Poll::Ready(item) = self.inner.as_mut().poll_next(cx) {
            self.done = item.is_none();
            return Poll::Ready(item);
        }
        if self.stop.as_mut().poll(cx).is_ready() {
            self.done = true;
            return Poll::Ready(None);
        }
        Poll::Pending
    }
}

impl std::fmt::Debug for UntilStop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UntilStop")
            .field("done", &self.done)
            .finish()
    }
}
