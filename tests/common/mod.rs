//! Helpers shared by the integration tests: the real binary ([`binary`]) and an in-process
//! server on a real channel ([`TestServer`]).
#![allow(dead_code)]

pub mod binary;

// Not every test binary uses every helper.
#[allow(unused_imports)]
pub use binary::{Server, command, copy_dir, spawn, start};

use std::{
    net::SocketAddr,
    time::{SystemTime, UNIX_EPOCH},
};

use autoscaled::{
    config::Config,
    pb::v1::{
        self as pb, horizontal_autoscaler_client::HorizontalAutoscalerClient,
        vertical_autoscaler_client::VerticalAutoscalerClient,
    },
};
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};
use tonic::transport::Channel;

/// `server::serve` in this process on 127.0.0.1:0. The listener is bound before the server
/// starts, so no sleep is needed: connections queue until it accepts.
pub struct TestServer {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl TestServer {
    pub async fn start(config: Config) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            autoscaled::server::serve(listener, config, async {
                let _ = stopped.await;
            })
            .await
            .expect("server failed");
        });
        TestServer {
            addr,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub async fn channel(&self) -> Channel {
        tonic::transport::Endpoint::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    pub async fn horizontal(&self) -> HorizontalAutoscalerClient<Channel> {
        HorizontalAutoscalerClient::new(self.channel().await)
    }

    pub async fn vertical(&self) -> VerticalAutoscalerClient<Channel> {
        VerticalAutoscalerClient::new(self.channel().await)
    }

    /// Signals shutdown and waits for the server (drain + final flush) to finish.
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap();
    }
}

/// One reflection v1 request on `channel` and the server's answer to it.
pub async fn reflection_v1(
    channel: Channel,
    request: tonic_reflection::pb::v1::server_reflection_request::MessageRequest,
) -> tonic_reflection::pb::v1::server_reflection_response::MessageResponse {
    use tonic_reflection::pb::v1;
    let request = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(request),
    };
    let response = v1::server_reflection_client::ServerReflectionClient::new(channel)
        .server_reflection_info(tokio_stream::iter(vec![request]))
        .await
        .unwrap()
        .into_inner()
        .message()
        .await
        .unwrap()
        .unwrap();
    response.message_response.expect("a reflection answer")
}

/// The service names the server lists over reflection v1alpha (the version grpcurl 1.8 speaks).
pub async fn reflection_v1alpha_services(channel: Channel) -> Vec<String> {
    use tonic_reflection::pb::v1alpha;
    let mut alpha = v1alpha::server_reflection_client::ServerReflectionClient::new(channel);
    let request = v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            v1alpha::server_reflection_request::MessageRequest::ListServices(String::new()),
        ),
    };
    let mut answers = alpha
        .server_reflection_info(tokio_stream::iter(vec![request]))
        .await
        .unwrap()
        .into_inner();
    let response = answers.message().await.unwrap().expect("an answer");
    let Some(v1alpha::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        response.message_response
    else {
        panic!("unexpected reflection response {response:?}");
    };
    list.service.into_iter().map(|s| s.name).collect()
}

/// Seconds since the Unix epoch by the system clock.
/// `GetHistory` of `key`, oldest run first.
pub async fn history(
    client: &mut HorizontalAutoscalerClient<Channel>,
    key: &str,
) -> pb::TargetHistory {
    client
        .get_history(pb::GetHistoryRequest {
            target_key: key.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// One plain HTTP/1.1 request (`GET`, `HEAD`, `POST`, ...) to the admin listener; the status
/// code and the body.
pub fn http(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("the admin listener accepts");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    (status, body.to_owned())
}

/// The fields an error's `BadRequest` details name, in order.
pub fn violation_fields(status: &tonic::Status) -> Vec<String> {
    use tonic_types::StatusExt;
    status
        .get_details_bad_request()
        .map(|b| b.field_violations.into_iter().map(|v| v.field).collect())
        .unwrap_or_default()
}

/// Asserts that nothing was stored for `key` (its history is NOT_FOUND).
pub async fn assert_not_stored(
    client: &mut autoscaled::pb::v1::horizontal_autoscaler_client::HorizontalAutoscalerClient<
        Channel,
    >,
    key: &str,
) {
    let e = client
        .get_history(autoscaled::pb::v1::GetHistoryRequest {
            target_key: key.into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{key} was stored");
}

/// An h2 answer's headers with its trailers (where a gRPC status comes after a body), the
/// body read and released.
pub async fn grpc_headers(
    response: tonic::codegen::http::Response<h2::RecvStream>,
) -> tonic::codegen::http::HeaderMap {
    let (parts, mut body) = response.into_parts();
    let mut headers = parts.headers;
    if !headers.contains_key("grpc-status") {
        while let Some(data) = body.data().await {
            let data = data.unwrap();
            let _ = body.flow_control().release_capacity(data.len());
        }
        if let Some(trailers) = body.trailers().await.unwrap() {
            headers.extend(trailers);
        }
    }
    headers
}
