//! The targets' Recommends as RecommendBatch calls: each target's period hands its request to
//! one queue, and a task sends what has queued as one batch (at most [`MAX_REQUESTS`], and
//! within the server's default limits of a batch, counted by the server's own rule,
//! [`BatchTotals`]), [`IN_FLIGHT`] batches at a time.
//! Nothing waits for a batch to fill: a request alone goes at once, and requests queue only
//! while the batches in flight are answered, so a quiet agent adds no latency and a busy one
//! pays one call's transport and one flush for many decisions.
//!
//! A server without RecommendBatch (UNIMPLEMENTED) gets single Recommends for the next
//! [`SINGLE_FOR`] (an upgrade may bring it). A batch the server refused whole before deciding
//! any of it, for one of its requests (a target the agent may not decide, a key it cannot
//! store, a limit lower than the defaults, which also halves the batches from then on), is
//! sent again as single Recommends, so that each target gets its own answer. Any other failure
//! of the call (overload, unavailable, a deadline, a lost answer) gives that answer to each of
//! its targets, whose next period tries again: the server may have decided them, and deciding
//! again would log each decision twice.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use autoscaled_wire::{
    Limits,
    pb::v1 as pb,
    status::{batch_answer, batch_refused_untouched},
    wire_limits::BatchTotals,
};
use prost::Message;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tonic::{Code, Status};

use crate::run::Service;

/// Requests in one batch: the server's default `max_batch_requests`.
pub const MAX_REQUESTS: usize = autoscaled_wire::limits::DEFAULT_MAX_BATCH_REQUESTS;
/// Batches in flight at once.
pub const IN_FLIGHT: usize = 4;
/// Requests waiting for a batch at most; beyond, a target's Recommend goes alone.
const QUEUE: usize = 4 * MAX_REQUESTS;
/// How long single Recommends go to a server that answered a batch UNIMPLEMENTED.
pub const SINGLE_FOR: Duration = Duration::from_secs(300);

type Answer = oneshot::Sender<Result<pb::RecommendResponse, Status>>;

/// What the sending task and the targets share of the server's answers.
#[derive(Debug)]
struct Learned {
    /// When the server answered a batch UNIMPLEMENTED.
    unimplemented: Mutex<Option<Instant>>,
    /// Requests in a batch at most: [`MAX_REQUESTS`], halved at each refusal for a limit.
    max_requests: AtomicUsize,
}

impl Learned {
    fn single(&self) -> bool {
        let mut at = self
            .unimplemented
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match *at {
            Some(when) if when.elapsed() < SINGLE_FOR => true,
            Some(_) => {
                *at = None;
                false
            }
            None => false,
        }
    }
}

/// The queue the targets' Recommends go through (cheap to clone).
#[derive(Clone)]
pub struct Batches {
    client: Service,
    queue: Option<mpsc::Sender<(pb::RecommendRequest, Answer)>>,
    learned: Arc<Learned>,
}

impl Batches {
    /// Batches over `client`, sent by a task of the current tokio runtime (outside one,
    /// every Recommend goes alone).
    pub fn new(client: Service) -> Self {
        let learned = Arc::new(Learned {
            unimplemented: Mutex::new(None),
            max_requests: AtomicUsize::new(MAX_REQUESTS),
        });
        let queue = tokio::runtime::Handle::try_current().ok().map(|runtime| {
            let (queue, requests) = mpsc::channel(QUEUE);
            runtime.spawn(send(client.clone(), requests, Arc::clone(&learned)));
            queue
        });
        Batches {
            client,
            queue,
            learned,
        }
    }

    /// `request`'s answer, decided in a batch with whatever other targets' requests are
    /// waiting.
    pub async fn recommend(
        &self,
        request: pb::RecommendRequest,
    ) -> Result<pb::RecommendResponse, Status> {
        let queue = self.queue.as_ref().filter(|_| !self.learned.single());
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
    learned: Arc<Learned>,
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
        let fit = batch.fits(&first.0);
        let alone = fit.totals.is_none();
        batch.push(first, fit);
        let max_requests = learned.max_requests.load(Ordering::Relaxed);
        // A request over the limits alone goes alone: the server's answer says why.
        while !alone && batch.len() < max_requests {
            let Ok(more) = requests.try_recv() else {
                break;
            };
            let fit = batch.fits(&more.0);
            if fit.totals.is_none() {
                next = Some(more);
                break;
            }
            batch.push(more, fit);
        }
        let (client, learned) = (client.clone(), Arc::clone(&learned));
        tokio::spawn(async move {
            batch.send(&client, &learned).await;
            drop(slot);
        });
    }
}

/// What one request would make of a batch ([`Batch::fits`]).
struct Fit {
    /// The batch's totals with it; `None` when it would take the batch over a limit.
    totals: Option<BatchTotals>,
    /// Its encoded size.
    bytes: usize,
}

/// Requests gathered for one call, within the server's default limits.
#[derive(Default)]
struct Batch {
    requests: Vec<pb::RecommendRequest>,
    answers: Vec<Answer>,
    /// What the requests add up to against the limits of a batch, counted by the server's
    /// own rule ([`BatchTotals`]), and their encoded size.
    totals: BatchTotals,
    bytes: usize,
}

impl Batch {
    fn len(&self) -> usize {
        self.requests.len()
    }

    /// What `request` would make of the batch: its totals when it keeps the batch within the
    /// server's default limits (and half its default message size, for the framing).
    fn fits(&self, request: &pb::RecommendRequest) -> Fit {
        let limits = Limits::default();
        let encoded = request.encode_to_vec();
        let bytes = encoded.len();
        Fit {
            totals: (self.bytes + bytes <= limits.max_message_bytes / 2)
                .then(|| self.totals.with(&encoded, &limits).ok())
                .flatten(),
            bytes,
        }
    }

    /// Adds a request with what [`Batch::fits`] found for it.
    fn push(&mut self, (request, answer): (pb::RecommendRequest, Answer), fit: Fit) {
        if let Some(totals) = fit.totals {
            self.totals = totals;
        }
        self.bytes += fit.bytes;
        self.requests.push(request);
        self.answers.push(answer);
    }

    /// One RecommendBatch (a single Recommend for one request), its results to their
    /// targets.
    async fn send(self, client: &Service, learned: &Learned) {
        let Batch {
            requests, answers, ..
        } = self;
        if requests.len() == 1 || learned.single() {
            return each_alone(client, requests, answers).await;
        }
        let call = pb::RecommendBatchRequest {
            requests: requests.clone(),
        };
        match client.clone().recommend_batch(call).await {
            Ok(response) => {
                let mut results = response.into_inner().results.into_iter();
                for answer in answers {
                    let _ = answer.send(batch_answer(results.next()));
                }
            }
            Err(status) if batch_refused_untouched(&status) => {
                match status.code() {
                    Code::Unimplemented => {
                        *learned
                            .unimplemented
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) =
                            Some(Instant::now());
                    }
                    Code::ResourceExhausted => {
                        let half = (requests.len() / 2).max(1);
                        learned.max_requests.fetch_min(half, Ordering::Relaxed);
                    }
                    _ => {}
                }
                each_alone(client, requests, answers).await;
            }
            Err(status) => {
                for answer in answers {
                    let _ = answer.send(Err(status.clone()));
                }
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
