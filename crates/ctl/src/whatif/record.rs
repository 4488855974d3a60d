//! `autoscalectl record`: a recording proxy. Adapters point at it instead of the server; it
//! forwards every HorizontalAutoscaler call to the upstream server unchanged and appends each
//! answered `Recommend` request to a trace file, with the `evaluation_time` the server decided
//! at (so that `autoscalectl simulate --trace` replays it at the same instant). Failed calls are
//! not recorded: the server stored nothing for them either.

use std::{
    fs::File,
    io::{BufWriter, Write},
    path::PathBuf,
    sync::Mutex,
};

use tonic::{Request, Response, Status, transport::Channel};

use autoscaled_wire::pb::v1::{
    self as api,
    horizontal_autoscaler_client::HorizontalAutoscalerClient,
    horizontal_autoscaler_server::{HorizontalAutoscaler, HorizontalAutoscalerServer},
};

/// `autoscalectl record`.
#[derive(Debug, clap::Args)]
pub(crate) struct RecordArgs {
    /// Where adapters connect (e.g. 127.0.0.1:50052; port 0 picks one, printed on stdout).
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: std::net::SocketAddr,
    /// The autoscaled server every call is forwarded to.
    #[arg(long, value_name = "ADDR")]
    pub(crate) upstream: String,
    /// The trace file the Recommend requests are appended to (created if missing).
    #[arg(long, value_name = "FILE.jsonl")]
    pub(crate) trace: PathBuf,
    /// Record only this target (default: every target).
    #[arg(long, value_name = "KEY")]
    pub(crate) target: Option<String>,
}

/// The proxy.
pub(crate) struct Recorder {
    upstream: HorizontalAutoscalerClient<Channel>,
    trace: Mutex<BufWriter<File>>,
    target: Option<String>,
}

impl Recorder {
    fn record(&self, mut request: api::RecommendRequest, response: &api::RecommendResponse) {
        if self
            .target
            .as_ref()
            .is_some_and(|t| *t != request.target_key)
        {
            return;
        }
        if request.evaluation_time.is_none() {
            request.evaluation_time = response.evaluation_time;
        }
        let line = match super::trace::to_line(&request) {
            Ok(line) => line,
            Err(e) => {
                eprintln!("autoscalectl record: cannot encode a trace line: {e}");
                return;
            }
        };
        let mut out = match self.trace.lock() {
            Ok(out) => out,
            Err(poisoned) => poisoned.into_inner(),
        };
        // One flush per line: a killed proxy loses at most the line being written.
        if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
            eprintln!("autoscalectl record: cannot append to the trace: {e}");
        }
    }
}

#[tonic::async_trait]
impl HorizontalAutoscaler for Recorder {
    async fn recommend(
        &self,
        request: Request<api::RecommendRequest>,
    ) -> Result<Response<api::RecommendResponse>, Status> {
        let request = request.into_inner();
        let response = self
            .upstream
            .clone()
            .recommend(request.clone())
            .await?
            .into_inner();
        self.record(request, &response);
        Ok(Response::new(response))
    }

    /// Forwarded whole; each request the server answered is recorded, as its own call
    /// would be.
    async fn recommend_batch(
        &self,
        request: Request<api::RecommendBatchRequest>,
    ) -> Result<Response<api::RecommendBatchResponse>, Status> {
        let request = request.into_inner();
        let response = self
            .upstream
            .clone()
            .recommend_batch(request.clone())
            .await?
            .into_inner();
        for (request, result) in request.requests.into_iter().zip(&response.results) {
            if let Some(api::recommend_batch_result::Result::Response(answer)) = &result.result {
                self.record(request, answer);
            }
        }
        Ok(Response::new(response))
    }

    async fn get_history(
        &self,
        request: Request<api::GetHistoryRequest>,
    ) -> Result<Response<api::TargetHistory>, Status> {
        self.upstream
            .clone()
            .get_history(request.into_inner())
            .await
    }

    async fn list_targets(
        &self,
        request: Request<api::ListTargetsRequest>,
    ) -> Result<Response<api::ListTargetsResponse>, Status> {
        self.upstream
            .clone()
            .list_targets(request.into_inner())
            .await
    }

    async fn delete_target(
        &self,
        request: Request<api::DeleteTargetRequest>,
    ) -> Result<Response<()>, Status> {
        self.upstream
            .clone()
            .delete_target(request.into_inner())
            .await
    }

    async fn simulate(
        &self,
        request: Request<api::SimulateRequest>,
    ) -> Result<Response<api::SimulateResponse>, Status> {
        self.upstream.clone().simulate(request.into_inner()).await
    }

    // Policies and groups: passed through, not traced.
    async fn put_policy(
        &self,
        request: Request<api::PutPolicyRequest>,
    ) -> Result<Response<api::Policy>, Status> {
        self.upstream.clone().put_policy(request.into_inner()).await
    }

    async fn get_policy(
        &self,
        request: Request<api::GetPolicyRequest>,
    ) -> Result<Response<api::Policy>, Status> {
        self.upstream.clone().get_policy(request.into_inner()).await
    }

    async fn list_policies(
        &self,
        request: Request<api::ListPoliciesRequest>,
    ) -> Result<Response<api::ListPoliciesResponse>, Status> {
        self.upstream
            .clone()
            .list_policies(request.into_inner())
            .await
    }

    async fn delete_policy(
        &self,
        request: Request<api::DeletePolicyRequest>,
    ) -> Result<Response<()>, Status> {
        self.upstream
            .clone()
            .delete_policy(request.into_inner())
            .await
    }

    async fn put_scaling_group(
        &self,
        request: Request<api::PutScalingGroupRequest>,
    ) -> Result<Response<api::ScalingGroup>, Status> {
        self.upstream
            .clone()
            .put_scaling_group(request.into_inner())
            .await
    }

    async fn get_scaling_group(
        &self,
        request: Request<api::GetScalingGroupRequest>,
    ) -> Result<Response<api::ScalingGroupStatus>, Status> {
        self.upstream
            .clone()
            .get_scaling_group(request.into_inner())
            .await
    }

    async fn list_scaling_groups(
        &self,
        request: Request<api::ListScalingGroupsRequest>,
    ) -> Result<Response<api::ListScalingGroupsResponse>, Status> {
        self.upstream
            .clone()
            .list_scaling_groups(request.into_inner())
            .await
    }

    async fn delete_scaling_group(
        &self,
        request: Request<api::DeleteScalingGroupRequest>,
    ) -> Result<Response<()>, Status> {
        self.upstream
            .clone()
            .delete_scaling_group(request.into_inner())
            .await
    }

    /// Passed through, not traced: a trace replays Recommend requests, each taken as applied.
    async fn report_scale(
        &self,
        request: Request<api::ReportScaleRequest>,
    ) -> Result<Response<api::ReportScaleResponse>, Status> {
        self.upstream
            .clone()
            .report_scale(request.into_inner())
            .await
    }
}

/// Runs the proxy until SIGTERM / SIGINT.
pub(crate) fn run(args: RecordArgs) -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("autoscalectl: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result: anyhow::Result<()> = runtime.block_on(async {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&args.trace)
            .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", args.trace.display()))?;
        let upstream = crate::client::connect(&args.upstream).await?;
        let signals = shutdown_signal()
            .map_err(|e| anyhow::anyhow!("cannot install the signal handlers: {e}"))?;
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
        let addr = listener.local_addr()?;
        {
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "autoscalectl record listening on {addr}, forwarding to {}, writing {}",
                args.upstream,
                args.trace.display()
            )?;
            out.flush()?;
        }
        let recorder = Recorder {
            upstream,
            trace: Mutex::new(BufWriter::new(file)),
            target: args.target,
        };
        tonic::transport::Server::builder()
            .add_service(HorizontalAutoscalerServer::new(recorder))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                signals,
            )
            .await?;
        Ok(())
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("autoscalectl: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Completes on the first SIGTERM or SIGINT; the handlers are installed before the proxy
/// announces that it listens, so a signal sent right after stops it cleanly.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}
