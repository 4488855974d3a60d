//! The server side shared by the load benchmarks (`benches/load.rs`, `benches/fleet.rs`):
//! starting the `autoscaled` binary on a loopback port, and the no-op `HorizontalAutoscaler`
//! (the benchmark binary re-executed as a server whose `Recommend` returns a fixed response,
//! so that a comparison isolates the decision and the store from gRPC). Included with
//! `#[path]` next to `support/steady_state.rs` (`mod steady_state` must be declared too).

#![allow(dead_code)]

use std::{
    io::{BufRead, BufReader, Read},
    net::SocketAddr,
    path::Path,
    process::{Child, Command, Stdio},
};

use autoscaled::pb::v1::{
    self as pb,
    horizontal_autoscaler_server::{HorizontalAutoscaler, HorizontalAutoscalerServer},
};
use tonic::{Request, Response, Status, transport::server::TcpIncoming};

use super::steady_state::PODS;

/// The server binary's allocator (`src/main.rs`), so that the no-op server (this binary
/// re-executed) pays for its allocations what `autoscaled` would: a comparison with glibc's
/// malloc on one side and mimalloc on the other would credit the allocator to the handler.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Set in the environment of the re-executed benchmark binary that serves the no-op service.
const NOOP_SERVER_ENV: &str = "AUTOSCALED_LOAD_NOOP_SERVER";

/// True in the re-executed benchmark binary that is to serve the no-op service.
pub fn is_noop_server() -> bool {
    std::env::var_os(NOOP_SERVER_ENV).is_some()
}

pub struct Server {
    pub name: &'static str,
    pub addr: SocketAddr,
    pub child: Option<Child>,
}

impl Server {
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `autoscaled serve` on a free loopback port with the data folder `data_dir` and `extra`
/// arguments; the address comes from its first stdout line. `AUTOSCALED_BENCH_BIN` names
/// another `autoscaled` binary to measure (another build, for an A/B run with the same client).
pub fn start_real_server(data_dir: &Path, extra: &[&str]) -> anyhow::Result<Server> {
    let binary = std::env::var_os("AUTOSCALED_BENCH_BIN")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_autoscaled").into());
    let mut command = Command::new(binary);
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .args(extra)
        .env("AUTOSCALED_LOG", "warn");
    let (child, addr) = spawn_and_read_addr(command, "autoscaled listening on ")?;
    Ok(Server {
        name: "real",
        addr,
        child: Some(child),
    })
}

/// This binary again, as the no-op server.
pub fn start_noop_server() -> anyhow::Result<Server> {
    let mut command = Command::new(std::env::current_exe()?);
    command.env(NOOP_SERVER_ENV, "1");
    let (child, addr) = spawn_and_read_addr(command, "no-op listening on ")?;
    Ok(Server {
        name: "no-op",
        addr,
        child: Some(child),
    })
}

/// Starts `command` with piped stdin (the child may exit when it closes) and stdout, waits for
/// the line `<prefix><addr>` and keeps draining stdout afterwards so the child never blocks.
pub fn spawn_and_read_addr(
    mut command: Command,
    prefix: &str,
) -> anyhow::Result<(Child, SocketAddr)> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
    let mut line = String::new();
    loop {
        line.clear();
        if stdout.read_line(&mut line)? == 0 {
            let status = child.wait()?;
            anyhow::bail!("{command:?} exited ({status}) before printing `{prefix}ADDR`");
        }
        if let Some(addr) = line.trim().strip_prefix(prefix) {
            let addr = addr.parse()?;
            std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
            return Ok((child, addr));
        }
    }
}

/// The no-op `HorizontalAutoscaler`: decodes the request like any server and answers with a
/// fixed decision, recording nothing.
struct Noop {
    response: pb::RecommendResponse,
}

#[tonic::async_trait]
impl HorizontalAutoscaler for Noop {
    async fn recommend(
        &self,
        _request: Request<pb::RecommendRequest>,
    ) -> Result<Response<pb::RecommendResponse>, Status> {
        Ok(Response::new(self.response.clone()))
    }

    /// The fixed decision for each request.
    async fn recommend_batch(
        &self,
        request: Request<pb::RecommendBatchRequest>,
    ) -> Result<Response<pb::RecommendBatchResponse>, Status> {
        let answer = || pb::RecommendBatchResult {
            result: Some(pb::recommend_batch_result::Result::Response(
                self.response.clone(),
            )),
        };
        let results = request
            .get_ref()
            .requests
            .iter()
            .map(|_| answer())
            .collect();
        Ok(Response::new(pb::RecommendBatchResponse { results }))
    }

    async fn get_history(
        &self,
        request: Request<pb::GetHistoryRequest>,
    ) -> Result<Response<pb::TargetHistory>, Status> {
        Ok(Response::new(pb::TargetHistory {
            target_key: request.into_inner().target_key,
            ..Default::default()
        }))
    }

    async fn list_targets(
        &self,
        _request: Request<pb::ListTargetsRequest>,
    ) -> Result<Response<pb::ListTargetsResponse>, Status> {
        Ok(Response::new(pb::ListTargetsResponse::default()))
    }

    async fn delete_target(
        &self,
        _request: Request<pb::DeleteTargetRequest>,
    ) -> Result<Response<()>, Status> {
        Ok(Response::new(()))
    }

    async fn simulate(
        &self,
        _request: Request<pb::SimulateRequest>,
    ) -> Result<Response<pb::SimulateResponse>, Status> {
        Ok(Response::new(pb::SimulateResponse::default()))
    }

    async fn report_scale(
        &self,
        _request: Request<pb::ReportScaleRequest>,
    ) -> Result<Response<pb::ReportScaleResponse>, Status> {
        Ok(Response::new(pb::ReportScaleResponse::default()))
    }
    async fn put_policy(
        &self,
        _request: Request<pb::PutPolicyRequest>,
    ) -> Result<Response<pb::Policy>, Status> {
        Ok(Response::new(pb::Policy::default()))
    }

    async fn get_policy(
        &self,
        _request: Request<pb::GetPolicyRequest>,
    ) -> Result<Response<pb::Policy>, Status> {
        Ok(Response::new(pb::Policy::default()))
    }

    async fn list_policies(
        &self,
        _request: Request<pb::ListPoliciesRequest>,
    ) -> Result<Response<pb::ListPoliciesResponse>, Status> {
        Ok(Response::new(pb::ListPoliciesResponse::default()))
    }

    async fn delete_policy(
        &self,
        _request: Request<pb::DeletePolicyRequest>,
    ) -> Result<Response<()>, Status> {
        Ok(Response::new(()))
    }

    async fn put_scaling_group(
        &self,
        _request: Request<pb::PutScalingGroupRequest>,
    ) -> Result<Response<pb::ScalingGroup>, Status> {
        Ok(Response::new(pb::ScalingGroup::default()))
    }

    async fn get_scaling_group(
        &self,
        _request: Request<pb::GetScalingGroupRequest>,
    ) -> Result<Response<pb::ScalingGroupStatus>, Status> {
        Ok(Response::new(pb::ScalingGroupStatus::default()))
    }

    async fn list_scaling_groups(
        &self,
        _request: Request<pb::ListScalingGroupsRequest>,
    ) -> Result<Response<pb::ListScalingGroupsResponse>, Status> {
        Ok(Response::new(pb::ListScalingGroupsResponse::default()))
    }

    async fn delete_scaling_group(
        &self,
        _request: Request<pb::DeleteScalingGroupRequest>,
    ) -> Result<Response<()>, Status> {
        Ok(Response::new(()))
    }
}

/// A response the size of a real one: three conditions, one metric with its pod groups.
pub fn noop_response() -> pb::RecommendResponse {
    let condition = |t: &str, r: &str, m: &str| pb::Condition {
        r#type: t.to_owned(),
        status: "True".to_owned(),
        reason: r.to_owned(),
        message: m.to_owned(),
    };
    pb::RecommendResponse {
        desired_replicas: PODS as i32,
        conditions: vec![
            condition(
                "AbleToScale",
                "ReadyForNewScale",
                "recommended size matches current size",
            ),
            condition(
                "ScalingActive",
                "ValidMetricFound",
                "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)",
            ),
            pb::Condition {
                status: "False".to_owned(),
                ..condition(
                    "ScalingLimited",
                    "DesiredWithinRange",
                    "the desired count is within the acceptable range",
                )
            },
        ],
        metrics: vec![pb::MetricStatus {
            r#type: pb::MetricSourceType::Resource as i32,
            name: "cpu".to_owned(),
            proposed_replicas: Some(PODS as i32),
            current_average_utilization: Some(50),
            current_average_value_milli: Some(250),
            pod_groups: Some(pb::PodGroups {
                ready_count: PODS as i32,
                ..Default::default()
            }),
            ..Default::default()
        }],
        explanation: Some(pb::Explanation {
            path: "Legacy".to_owned(),
            prenormalized_replicas: Some(PODS as i32),
            stabilized_replicas: Some(PODS as i32),
            scale_up_limit: Some(20),
            ..Default::default()
        }),
        evaluation_time: Some(prost_types::Timestamp::default()),
        recorded: false,
        ..Default::default()
    }
}

/// Serves the no-op service on a free loopback port until stdin closes (the parent exited or
/// stopped it).
pub fn run_noop_server() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        println!("no-op listening on {}", listener.local_addr()?);
        let stdin_closed = async {
            let _ =
                tokio::task::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new())).await;
        };
        tonic::transport::Server::builder()
            .add_service(HorizontalAutoscalerServer::new(Noop {
                response: noop_response(),
            }))
            .serve_with_incoming_shutdown(
                // Without TCP_NODELAY, delayed ACKs add about 40 ms to every call.
                TcpIncoming::from(listener).with_nodelay(Some(true)),
                stdin_closed,
            )
            .await?;
        Ok(())
    })
}

pub fn micros(us: u64) -> String {
    if us >= 10_000 {
        format!("{:.1} ms", us as f64 / 1000.0)
    } else {
        format!("{us} µs")
    }
}

/// An unsigned integer from the environment, or `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
