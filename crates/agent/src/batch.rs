//! The targets' Recommends as RecommendBatch calls: each target's period hands its request to
//! one queue, and a task sends what has queued as one batch (at most [`MAX_REQUESTS`], and
//! within the server's default pod and message limits), [`IN_FLIGHT`] batches at a time.
//! Nothing waits for a batch to fill: a request alone goes at once, and requests queue only
//! while the batches in flight are answered, so a quiet agent adds no latency and a busy one
//! pays one call's transport and one flush for many decisions.
//!
//! A server without RecommendBatch (UNIMPLEMENTED) gets single Recommends from then on. A
//! batch refused whole for one of its requests (a target the agent may not decide, a limit)
//! is sent again as single Recommends, so each target gets its own answer; a batch refused
//! for the server's state (overload, unavailable, deadline) gives that answer to each of its
//! targets, whose next period tries again.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use autoscaled_wire::pb::v1::{self as pb, recommend_batch_result::Result as Outcome};
use prost::Message;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::run::Service;

/// Requests in one batch: the server's default `max_batch_requests`.
pub const MAX_REQUESTS: usize = autoscaled_wire::limits::DEFAULT_MAX_BATCH_REQUESTS;
/// Batches in flight at once.
pub const IN_FLIGHT: usize = 4;
/// Requests waiting for a batch at most; beyond, a target's Recommend goes alone.
const QUEUE: usize = 4 * MAX_REQUESTS;

type Answer = oneshot::Sender<Result<pb::RecommendResponse, Status>>;

/// The queue the targets' Recommends go through (cheap to clone).
#[derive(Clone)]
pub struct Batches {
    client: Service,
    queue: Option<mpsc::Sender<(pb::RecommendRequest, Answer)>>,
    /// The server answered UNIMPLEMENTED: single Recommends from now on.
    unary: Arc<AtomicBool>,
}

impl Batches {
    /// Batches over `client`, sent by a task of the current tokio runtime (outside one,
    /// every Recommend goes alone).
    pub fn new(client: Service) -> Self {
        let unary = Arc::new(AtomicBool::new(false));
        let queue = tokio::runtime::Handle::try_current().ok().map(|runtime| {
            let (queue, requests) = mpsc::channel(QUEUE);
            runtime.spawn(send(client.clone(), requests, Arc::clone(&unary)));
            queue
        });
        Batches {
            client,
            queue,
            unary,
        }
    }

    /// `request`'s answer, decided in a batch with whatever other targets' requests are
    /// waiting.
    pub async fn recommend(
        &self,
        request: pb::RecommendRequest,
    ) -> Result<pb::RecommendResponse, Status> {
        let queue = self
            .queue
            .as_ref()
            .filter(|_| !self.unary.load(Ordering::Relaxed));
        let Some(queue) = queue else {
            return alone(&self.client, request).await;
        };
        let (answer, answered) = oneshot::channel();
        match queue.try_send((request, answer)) {
            Ok(()) => answered
                .await
                .unwrap_or_else(|_| Err(Status::cancelled("the agent is stopping"))),
            Err(
                mpsc::error::TrySendError::Full((request, _))
                | mpsc::error::TrySendError::Closed((request, _)),
            ) => alone(&self.client, request).await,
        }
    }
}

async fn alone(
    client: &Service,
    request: pb::RecommendRequest,
) -> Result<pb::RecommendResponse, Status> {
    client
        .clone()
        .recommend(request)
        .await
        .map(tonic::Response::into_inner)
}

/// The sending task: what has queued, as batches, until every sender is gone.
async fn send(
    client: Service,
    mut requests: mpsc::Receiver<(pb::RecommendRequest, Answer)>,
    unary: Arc<AtomicBool>,
) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut next = None;
    loop {
        let Some(first) = next.take() else {
            match requests.recv().await {
                Some(first) => {
                    next = Some(first);
                    continue;
                }
                None => return,
            }
        };
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let mut batch = Batch::default();
        batch.push(first);
        while batch.len() < MAX_REQUESTS {
            let Ok(more) = requests.try_recv() else {
                break;
            };
            if !batch.fits(&more.0) {
                next = Some(more);
                break;
            }
            batch.push(more);
        }
        let (client, unary) = (client.clone(), Arc::clone(&unary));
        tokio::spawn(async move {
            batch.send(&client, &unary).await;
            drop(slot);
        });
    }
}

/// Requests gathered for one call, within the server's default limits.
#[derive(Default)]
struct Batch {
    requests: Vec<pb::RecommendRequest>,
    answers: Vec<Answer>,
    pods: usize,
    bytes: usize,
}

impl Batch {
    fn len(&self) -> usize {
        self.requests.len()
    }

    /// Whether `request` keeps the batch within the default `max_pods` (the pods of a batch
    /// count together) and half the default message size.
    fn fits(&self, request: &pb::RecommendRequest) -> bool {
        let limits = autoscaled_wire::Limits::default();
        self.pods + request.pods.len() <= limits.max_pods
            && self.bytes + request.encoded_len() <= limits.max_message_bytes / 2
    }

    fn push(&mut self, (request, answer): (pb::RecommendRequest, Answer)) {
        self.pods += request.pods.len();
        self.bytes += request.encoded_len();
        self.requests.push(request);
        self.answers.push(answer);
    }

    /// One RecommendBatch (a single Recommend for one request), its results to their
    /// targets.
    async fn send(self, client: &Service, unary: &AtomicBool) {
        let Batch {
            requests, answers, ..
        } = self;
        if requests.len() == 1 || unary.load(Ordering::Relaxed) {
            return each_alone(client, requests, answers).await;
        }
        let call = pb::RecommendBatchRequest {
            requests: requests.clone(),
        };
        match client.clone().recommend_batch(call).await {
            Ok(response) => {
                let mut results = response.into_inner().results.into_iter();
                for answer in answers {
                    let _ = answer.send(result(results.next()));
                }
            }
            Err(status) if refused_for_the_server(&status) => {
                for answer in answers {
                    let _ = answer.send(Err(status.clone()));
                }
            }
            Err(status) => {
                if status.code() == Code::Unimplemented {
                    unary.store(true, Ordering::Relaxed);
                }
                each_alone(client, requests, answers).await;
            }
        }
    }
}

/// Each request as its own Recommend, at once.
async fn each_alone(client: &Service, requests: Vec<pb::RecommendRequest>, answers: Vec<Answer>) {
    let calls = requests.into_iter().zip(answers).map(|(request, answer)| {
        let client = client.clone();
        async move {
            let _ = answer.send(alone(&client, request).await);
        }
    });
    futures_util::future::join_all(calls).await;
}

/// A refusal that says nothing of the batch's requests: the same for each of them alone.
fn refused_for_the_server(status: &Status) -> bool {
    match status.code() {
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => true,
        // Overload; a limit names its field.
        Code::ResourceExhausted => status.get_details_bad_request().is_none(),
        _ => false,
    }
}

/// One request's result as its own call's answer.
fn result(result: Option<pb::RecommendBatchResult>) -> Result<pb::RecommendResponse, Status> {
    match result.and_then(|r| r.result) {
        Some(Outcome::Response(response)) => Ok(response),
        Some(Outcome::Error(error)) => {
            let code = Code::from_i32(error.code);
            if error.field_violations.is_empty() {
                return Err(Status::new(code, error.message));
            }
            let mut details = ErrorDetails::new();
            for v in error.field_violations {
                details.add_bad_request_violation(v.field, v.description);
            }
            Err(Status::with_error_details(code, error.message, details))
        }
        None => Err(Status::internal(
            "the server's RecommendBatch answer had no result for this request",
        )),
    }
}
