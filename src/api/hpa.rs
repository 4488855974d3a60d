//! The `HorizontalAutoscaler` service: thin handlers. Each reads the request, converts it
//! (`convert`), calls the engine and the store, and converts the result back; every error goes
//! through the one table in `status`.
//!
//! Recommend, step by step:
//! 1. read the server clock (`clock`; the request's `evaluation_time` only with
//!    `--trust-request-time`), convert and validate: nothing is stored on any error;
//! 2. unless `dry_run`, run the one write path of both services (`commit::CommitPath`):
//!    take the target's lock and read the server clock again for `now` (so that calls on one
//!    target commit in time order), load the history, evaluate, prune (`engine::hpa::prune`),
//!    commit history + decision record atomically (`HpaStore::commit_after`, re-deciding
//!    on a conflict with another replica), release the lock and wait for the flush.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use tonic::{Request, Response, Status};
use tracing::{Span, field::Empty};

use super::{
    authorized::{FleetKind, Readable, TargetSummaries, filtered_page},
    clock,
    commit::{CommitPath, Deferred, Flush, HpaAmend, HpaTarget, Recording},
    convert::{self, Context, summary::SummaryPage},
    fleet::{Fleet, FleetLimits},
    locks::KeyLocks,
    recommend::{Call, Evaluate},
    status::{ApiError, batch_answer, batch_refused_untouched, declined},
};
use crate::{
    auth::KeyFilter,
    config::Limits,
    engine::hpa::{outcome, settings::Settings},
    pb::v1::{
        self as pb, DeleteTargetRequest, GetHistoryRequest, ListTargetsRequest,
        ListTargetsResponse, RecommendRequest, RecommendResponse, ReportScaleRequest,
        ReportScaleResponse, SimulateRequest, SimulateResponse, TargetHistory,
        horizontal_autoscaler_server::HorizontalAutoscaler,
    },
    store::{DecisionEntry, FleetStore, HpaStore, Owners, durability::Durability},
};

/// What the service needs from the configuration.
#[derive(Clone, Debug)]
pub struct HpaOptions {
    /// Server defaults of the controller flags; `spec.settings` overrides them per target.
    pub defaults: Settings,
    /// The wire limits: requests beyond them get INVALID_ARGUMENT, responses stay bounded.
    pub limits: Limits,
    /// Accept `evaluation_time` from requests.
    pub trust_request_time: bool,
    /// Pruning horizon (see `engine::hpa::prune`).
    pub history_retention: Duration,
}

/// The HorizontalAutoscaler service over a history store.
pub struct HorizontalService {
    store: Arc<dyn HpaStore>,
    commit: CommitPath,
    options: HpaOptions,
    evaluate: Evaluate,
    /// Writes for targets another replica owns go there (`api::forward`).
    forwarder: super::forward::Forwarder,
    /// Policies and scaling groups (`api::fleet`); `None`: a service without them (tests).
    fleet: Option<Arc<Fleet>>,
    /// Which replica decides each target (etcd, several replicas; otherwise this one).
    owners: Owners,
}

impl HorizontalService {
    /// A service deciding with `evaluate`, storing in `store`, waiting for durability through
    /// `durability`.
    pub fn new(
        store: Arc<dyn HpaStore>,
        durability: Arc<Durability>,
        options: HpaOptions,
        evaluate: Evaluate,
    ) -> Self {
        HorizontalService {
            store,
            commit: CommitPath::new(durability),
            options,
            evaluate,
            forwarder: super::forward::Forwarder::default(),
            fleet: None,
            owners: Owners::none(),
        }
    }

    /// The service forwarding the writes of targets other replicas own over `link` (etcd,
    /// several replicas; without a link nothing is forwarded).
    pub(crate) fn with_peers(mut self, link: Option<super::forward::PeerLink>) -> Self {
        self.forwarder = super::forward::Forwarder::new(link);
        self
    }

    /// The service forwarding calls for the targets `owners` gives to other replicas.
    pub(crate) fn with_owners(mut self, owners: Owners) -> Self {
        self.owners = owners;
        self
    }

    /// The service with policies and scaling groups kept in `store`, each identity held to
    /// `limits`.
    pub fn with_fleet(mut self, store: Arc<dyn FleetStore>, limits: FleetLimits) -> Self {
        self.fleet = Some(Arc::new(Fleet::new(store, limits)));
        self
    }

    fn fleet(&self) -> Result<&Fleet, ApiError> {
        self.fleet.as_deref().ok_or_else(|| {
            ApiError::FailedPrecondition("this server keeps no policies or scaling groups".into())
        })
    }

    /// The per-target locks (tests check that none leak).
    pub fn locks(&self) -> &KeyLocks {
        self.commit.locks()
    }

    /// What a replay needs of the configuration.
    fn simulate_options(&self) -> super::simulate::SimulateOptions {
        super::simulate::SimulateOptions {
            defaults: self.options.defaults.clone(),
            limits: self.options.limits.clone(),
            history_retention: self.options.history_retention,
        }
    }

    fn context(&self) -> Context<'_> {
        Context {
            limits: &self.options.limits,
            trust_request_time: self.options.trust_request_time,
            server_now: clock::hpa_now(),
            history_retention: self.options.history_retention,
            scale_to_zero: self.options.defaults.scale_to_zero,
        }
    }

    /// Recommend: the policy and group of the call, its conversion (nothing is stored on any
    /// error), then under the target's lock (and its group's) load, decide, commit and wait
    /// for the flush (`commit::CommitPath`; a dry run takes no lock and writes nothing).
    async fn do_recommend(
        &self,
        mut req: RecommendRequest,
        flush: Flush<'_>,
    ) -> Result<RecommendResponse, ApiError> {
        let (policy, group) = match &self.fleet {
            Some(fleet) => {
                let policy = fleet.resolve(&mut req).await?;
                let group = fleet.group_of(&req.target_key, &req.policy).await?;
                (policy, group)
            }
            None if !req.policy.is_empty() => {
                return Err(ApiError::field("policy", "this server keeps no policies"));
            }
            None => (None, None),
        };
        req.policy.clear();
        let time_from_request = self.options.trust_request_time && req.evaluation_time.is_some();
        let input = convert::recommend_request(req, &self.context())?;
        let span = Span::current();
        span.record("target.key", input.target_key.as_str());
        span.record("dry_run", input.dry_run);
        let call = Call {
            settings: input.settings.apply(&self.options.defaults),
            input,
            policy,
            group,
            time_from_request,
            retention: self.options.history_retention,
        };
        let group = match (&self.fleet, &call.group) {
            (Some(fleet), Some(name)) => Some((fleet, name.as_str())),
            _ => None,
        };
        let target = HpaTarget {
            hpa: &*self.store,
            group: group.map(|(fleet, name)| (fleet.store(), name)),
        };
        let recording = if call.input.dry_run {
            Recording::DryRun
        } else {
            Recording::Write {
                // Members of one group decide one at a time on this replica (other replicas
                // are held off by the ledger's revision).
                held: match group {
                    Some((fleet, name)) => Some(fleet.lock_group(name).await),
                    None => None,
                },
                flush,
            }
        };
        // Boxed: the commit's future holds the target's state and the decision (KiBs), which
        // the call's future would otherwise carry, and copy each time it moves, from the start.
        let (now, write, new_target) = Box::pin(self.commit.commit_decision(
            &target,
            &call.input.target_key,
            recording,
            || call.now(),
            |loaded, &now| call.decide(self.evaluate, loaded.unwrap_or((None, None)), now),
        ))
        .await?;
        call.observe(&write.entry, new_target);
        Ok(call.response(&write.entry, now))
    }

    async fn do_get_history(&self, req: GetHistoryRequest) -> Result<TargetHistory, ApiError> {
        convert::target_key(&req.target_key, &self.options.limits)?;
        Span::current().record("target.key", req.target_key.as_str());
        let state = self
            .store
            .load(&req.target_key)
            .await?
            .ok_or_else(|| ApiError::TargetNotFound(req.target_key.clone()))?;
        let request = convert::history::history_page_request(&req)?;
        let page = self.store.decision_page(&req.target_key, &request).await?;
        Ok(convert::history::target_history_page(
            &req.target_key,
            &state.history,
            &page,
        ))
    }

    /// `ListTargets`: a page of keys (under `prefix`, if given), and with
    /// `include_summaries` each one's newest run ([`TargetSummaries::listing`]).
    async fn do_list_targets(
        &self,
        req: ListTargetsRequest,
    ) -> Result<ListTargetsResponse, Status> {
        let max_key_bytes = self.options.limits.max_key_bytes;
        convert::summary::key_prefix(&req.prefix, max_key_bytes)?;
        let filter = KeyFilter::all()
            .with_max_key_bytes(max_key_bytes)
            .within(&req.prefix);
        let (keys, next_page_token) = if filter.is_all() {
            let request = convert::page_request(req.page_size, &req.page_token)?;
            let page = self
                .store
                .list_keys(request.after.as_deref(), request.size)
                .await
                .map_err(ApiError::from)?;
            let next_page_token = convert::next_page_token(&page);
            (page.keys, next_page_token)
        } else {
            // The scan of a tenant's listing (`Authorized`), here over the store: it starts
            // at the prefix and ends past it, reading no key outside.
            filtered_page(req.page_size, &req.page_token, &filter, |after, size| {
                let store = &self.store;
                async move {
                    let page = store
                        .list_keys(after.as_deref(), usize::try_from(size).unwrap_or(1))
                        .await
                        .map_err(ApiError::from)?;
                    Ok((page.keys, page.more))
                }
            })
            .await?
        };
        self.listing(keys, next_page_token, req.include_summaries)
            .await
    }

    async fn do_delete_target(&self, req: DeleteTargetRequest) -> Result<(), ApiError> {
        convert::target_key(&req.target_key, &self.options.limits)?;
        Span::current().record("target.key", req.target_key.as_str());
        // Out of every group's ledger first, so that a failure leaves the target to delete
        // again (and a repeated delete of a deleted target still frees what it held): a
        // ledger entry without its target only holds units back, never spends them twice.
        if let Some(fleet) = &self.fleet {
            fleet.forget_member(&req.target_key).await?;
        }
        let store = &self.store;
        if !self
            .commit
            .delete(&req.target_key, store.delete(&req.target_key))
            .await?
        {
            return Err(ApiError::TargetNotFound(req.target_key));
        }
        crate::metrics::target_removed();
        Ok(())
    }
}

impl HorizontalService {
    /// `ReportScale`: APPLIED only checks that the decision is the target's newest (Recommend
    /// took the rescale as applied); FAILED rewrites that decision through the commit path
    /// (`HpaAmend`) with AbleToScale False / FailedUpdateScale and its scale event withdrawn
    /// (`engine::hpa::outcome::scale_failed`). A repeated FAILED writes nothing.
    async fn do_report_scale(
        &self,
        req: ReportScaleRequest,
    ) -> Result<ReportScaleResponse, ApiError> {
        let report = convert::report_scale_request(req, &self.options.limits)?;
        Span::current().record("target.key", report.target_key.as_str());
        let key = report.target_key.as_str();
        let newest = self.store.latest(key).await?;
        let newest = reported_decision(&report, newest)?;
        let Some(error) = report.failure.as_deref() else {
            crate::metrics::scale_report(false);
            return Ok(convert::report_scale_response(&newest.decision, false));
        };
        if outcome::is_failed_update(&newest.decision) {
            return Ok(convert::report_scale_response(&newest.decision, false));
        }
        let (_, (_, entry), withdrawn) = self
            .commit
            .commit_decision(
                &HpaAmend(&*self.store),
                key,
                Recording::alone(),
                || (),
                |state, ()| {
                    let (state, newest) =
                        state.ok_or_else(|| ApiError::TargetNotFound(key.to_owned()))?;
                    // Read again under the lock: another call may have decided since.
                    let mut entry = reported_decision(&report, newest)?.last_alone();
                    let mut history = state.history;
                    let withdrawn =
                        outcome::scale_failed(&mut entry.decision, &mut history, entry.time, error);
                    Ok(((history, entry), withdrawn))
                },
            )
            .await?;
        crate::metrics::scale_report(true);
        Ok(convert::report_scale_response(&entry.decision, withdrawn))
    }

    /// `Simulate` (see `api::simulate`): reads the decision log, never writes. The replay
    /// runs on a blocking thread: a long log is CPU work that must not stall other calls.
    async fn do_simulate(&self, req: SimulateRequest) -> Result<SimulateResponse, ApiError> {
        if !req.group.is_empty() {
            return self.do_simulate_group(req).await;
        }
        Span::current().record("target.key", req.target_key.as_str());
        let options = self.simulate_options();
        let store = Arc::clone(&self.store);
        // The log is read on the blocking thread too, where the store's future is driven to
        // completion on the server's runtime.
        let runtime = tokio::runtime::Handle::current();
        let response = tokio::task::spawn_blocking(move || {
            super::simulate::simulate(&req, &options, |key| {
                let decisions = runtime.block_on(store.decisions(key))?;
                Ok(decisions
                    .into_iter()
                    .map(super::simulate::logged_run)
                    .collect())
            })
        })
        .await
        .map_err(|_| ApiError::Internal("the simulation panicked".to_owned()))??;
        // Its cost, counted: every replayed step, shown or omitted, was one evaluation.
        let steps =
            response.steps.len() as u64 + u64::try_from(response.omitted_steps).unwrap_or(0);
        crate::metrics::simulate_steps(steps);
        Ok(response)
    }
}

impl HorizontalService {
    /// A policy's spec checked as a Recommend's: complete, or (without `max_replicas`) the
    /// part of one that each target's own spec completes; violations named `policy.spec.*`
    /// (`convert::policy_spec`).
    fn check_policy_spec(&self, spec: &pb::HorizontalSpec) -> Result<(), ApiError> {
        convert::policy_spec(spec, &self.context()).map(|_| ())
    }

    /// `DeletePolicy`: refused while a target's newest decision used the policy (a scan of
    /// the targets' newest runs, one read each), unless `force`.
    /// DeletePolicy; its refusal names a target that uses the policy only when `readable`
    /// lets the caller read it.
    async fn do_delete_policy(
        &self,
        req: pb::DeletePolicyRequest,
        readable: &KeyFilter,
    ) -> Result<(), ApiError> {
        let fleet = self.fleet()?;
        convert::fleet::name("name", &req.name)?;
        if !req.force {
            let mut after: Option<String> = None;
            loop {
                let page = self.store.list_keys(after.as_deref(), 500).await?;
                for key in &page.keys {
                    let used = self.store.latest(key).await?.is_some_and(|e| {
                        e.inputs
                            .and_then(|i| i.policy)
                            .is_some_and(|p| p.name == req.name)
                    });
                    if used {
                        let which = if readable.allows(key) {
                            format!("target {key:?}")
                        } else {
                            "a target you may not read".to_owned()
                        };
                        return Err(ApiError::FailedPrecondition(format!(
                            "{which} uses policy {:?} (its newest decision): move its targets off it first, or delete with force",
                            req.name
                        )));
                    }
                }
                if !page.more {
                    break;
                }
                after = page.keys.last().cloned();
            }
        }
        fleet.delete_policy(&req.name, req.force, readable).await
    }
}

impl HorizontalService {
    /// `Simulate` of a scaling group: the group's recorded members' logs, read here, replayed
    /// together on a blocking thread (`api::simulate::replay_group`).
    async fn do_simulate_group(&self, req: SimulateRequest) -> Result<SimulateResponse, ApiError> {
        super::simulate::check_group_request(&req)?;
        let fleet = self.fleet()?;
        let Some((group, _)) = fleet.store().group(&req.group).await? else {
            return Err(ApiError::NotFound(format!(
                "no scaling group named {:?} (field group)",
                req.group
            )));
        };
        // A capacity given replays under it alone; otherwise the group's, moved by its
        // capacity schedules at each step's time.
        let (capacity, capacity_schedules) = match req.group_capacity {
            Some(c) => (c, Vec::new()),
            None => (group.ledger.capacity, group.capacity_schedules.clone()),
        };
        let mut members = Vec::with_capacity(group.ledger.members.len());
        let mut decisions_in_all = 0u64;
        for key in group.ledger.members.keys() {
            let decisions = self.store.decisions(key).await?;
            decisions_in_all += decisions.iter().map(|e| e.run.count.max(1)).sum::<u64>();
            if !decisions.is_empty() {
                let runs = decisions
                    .into_iter()
                    .map(super::simulate::logged_run)
                    .collect();
                members.push((key.clone(), group.units_of(key), runs));
            }
        }
        // Each replayed decision computes the fair shares over every member: bounded work.
        let work = decisions_in_all.saturating_mul(members.len().max(1) as u64);
        if decisions_in_all > MAX_GROUP_REPLAY_DECISIONS || work > MAX_GROUP_REPLAY_WORK {
            return Err(ApiError::ResourceExhausted {
                field: "group".to_owned(),
                message: format!(
                    "{decisions_in_all} stored decisions of {} members: a group replay runs at most {MAX_GROUP_REPLAY_DECISIONS} decisions, and {MAX_GROUP_REPLAY_WORK} decisions × members",
                    members.len()
                ),
            });
        }
        let options = self.simulate_options();
        let response = tokio::task::spawn_blocking(move || {
            super::simulate::replay_group(&req, capacity, &capacity_schedules, members, &options)
        })
        .await
        .map_err(|_| ApiError::Internal("the simulation panicked".to_owned()))??;
        let steps: usize = response.members.iter().map(|m| m.steps.len()).sum();
        crate::metrics::simulate_steps(
            steps as u64 + u64::try_from(response.omitted_steps).unwrap_or(0),
        );
        Ok(response)
    }
}

/// The stored decision a `ReportScale` names: the target's newest, at the reported time, with
/// the reported desired count.
fn reported_decision(
    report: &convert::ScaleReport,
    newest: Option<DecisionEntry>,
) -> Result<DecisionEntry, ApiError> {
    let key = &report.target_key;
    let newest = newest.ok_or_else(|| ApiError::TargetNotFound(key.clone()))?;
    if newest.time != report.time {
        return Err(ApiError::FailedPrecondition(format!(
            "the decision at {} ms is not the newest of target {key:?} (the newest is at {} ms): \
             report a scale before the next Recommend on the target (a dry run records no decision)",
            report.time.unix_millis(),
            newest.time.unix_millis()
        )));
    }
    if newest.decision.desired_replicas != report.desired_replicas {
        return Err(ApiError::field(
            "desired_replicas",
            format!(
                "is {}, but the decision at that time desired {}",
                report.desired_replicas, newest.decision.desired_replicas
            ),
        ));
    }
    if newest.shadow() {
        return Err(ApiError::FailedPrecondition(format!(
            "the decision at {} ms of target {key:?} was made in shadow mode: nothing was to be \
             applied, so there is no scale to report",
            report.time.unix_millis()
        )));
    }
    Ok(newest)
}

/// The most stored decisions a group replay runs (`Simulate` with `group`), and the most
/// decisions × members (each decision computes the fair shares over every member).
const MAX_GROUP_REPLAY_DECISIONS: u64 = 50_000;
const MAX_GROUP_REPLAY_WORK: u64 = 5_000_000;

/// Who puts a policy or a group, for the per-identity limits: the caller's identity under an
/// authorization file; nobody without one (every caller is one tenant).
fn owner<T>(request: &Request<T>) -> Option<String> {
    request
        .extensions()
        .get::<crate::auth::Caller>()
        .filter(|c| c.policy.is_some())
        .and_then(|c| c.identity.as_deref().map(str::to_owned))
}

/// With summaries, one read of the state record per key (`HpaStore::latest`, which carries
/// the newest run), in key order, until the response budget is spent: a fleet of N targets is one pass over
/// its keys and N reads, never a read of a decision log.
#[tonic::async_trait]
impl TargetSummaries for HorizontalService {
    async fn listing(
        &self,
        keys: Vec<String>,
        next_page_token: String,
        include_summaries: bool,
    ) -> Result<ListTargetsResponse, Status> {
        if !include_summaries {
            return Ok(ListTargetsResponse {
                target_keys: keys,
                next_page_token,
                summaries: Vec::new(),
            });
        }
        let mut page = SummaryPage::new();
        for key in &keys {
            let newest = self.store.latest(key).await.map_err(ApiError::from)?;
            if !page.push(key, newest.as_ref()) {
                break;
            }
        }
        Ok(page.finish(next_page_token))
    }

    async fn names(
        &self,
        kind: FleetKind,
        after: Option<String>,
        size: i32,
    ) -> Result<(Vec<String>, bool), Status> {
        let size = usize::try_from(size).unwrap_or(0);
        Ok(self
            .fleet()?
            .names(kind == FleetKind::Groups, after.as_deref(), size)
            .await?)
    }

    async fn policies_named(
        &self,
        names: Vec<String>,
        next_page_token: String,
    ) -> Result<pb::ListPoliciesResponse, Status> {
        Ok(self
            .fleet()?
            .policies_named(&names, next_page_token)
            .await?)
    }

    async fn groups_named(
        &self,
        names: Vec<String>,
        next_page_token: String,
    ) -> Result<pb::ListScalingGroupsResponse, Status> {
        Ok(self.fleet()?.groups_named(&names, next_page_token).await?)
    }
}

/// The client a forwarded write goes through.
type Client = crate::pb::v1::horizontal_autoscaler_client::HorizontalAutoscalerClient<
    tonic::transport::Channel,
>;

/// Where a Recommend may be decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hop {
    /// By the target's owner when another replica owns it (`api::forward`).
    Owner,
    /// Here: its owner could not take it (`Forwarder::call` answered `None` for its batch) or
    /// declined it untouched.
    Here,
}

/// The path a batch of requests is forwarded on.
const RECOMMEND_BATCH: &str = "/autoscaled.v1.HorizontalAutoscaler/RecommendBatch";

/// A batch's requests with their places in it, and what each got.
type Placed<T> = Vec<(usize, T)>;

/// A batch's requests for each other replica that owns some of their targets: their places
/// in the batch and the requests.
type Owned = BTreeMap<String, (Vec<usize>, Vec<RecommendRequest>)>;

impl HorizontalService {
    /// One Recommend, whether its own call or a request of a batch: forwarded to the
    /// target's owner when another replica decides it (and `hop` allows), else decided here.
    #[tracing::instrument(name = "Recommend", skip_all, fields(target.key = Empty, dry_run = Empty, decision.current = Empty, decision.desired = Empty, decision.path = Empty))]
    async fn recommend_one(
        &self,
        request: Request<RecommendRequest>,
        flush: Flush<'_>,
        hop: Hop,
    ) -> Result<Response<RecommendResponse>, Status> {
        if hop == Hop::Owner && !request.get_ref().dry_run {
            let owner = self.owners.owner_of(&request.get_ref().target_key);
            let send = |mut c: Client, r| async move { c.recommend(r).await };
            let path = "/autoscaled.v1.HorizontalAutoscaler/Recommend";
            if let Some(answer) = self.forwarder.call(owner, path, &request, send).await {
                return answer;
            }
        }
        let response = self.do_recommend(request.into_inner(), flush).await?;
        Ok(Response::new(response))
    }

    /// A batch's requests by who decides them: this replica (it owns their targets, or
    /// they are dry runs), or each other owner, with their places in the batch.
    fn by_owner(&self, requests: Vec<RecommendRequest>) -> (Placed<RecommendRequest>, Owned) {
        let mut here = Vec::new();
        let mut owned = Owned::new();
        for (i, item) in requests.into_iter().enumerate() {
            let owner = (!item.dry_run)
                .then(|| self.owners.owner_of(&item.target_key))
                .flatten();
            match owner {
                Some(owner) => {
                    let (places, requests) = owned.entry(owner).or_default();
                    places.push(i);
                    requests.push(item);
                }
                None => here.push((i, item)),
            }
        }
        (here, owned)
    }

    /// The requests of a batch that `owner` decides, sent to it as one RecommendBatch: one
    /// call there, so one slot of its load shedding and one flush, as the batch took here
    /// (sent one by one, a batch admitted here as one call became as many calls there,
    /// queued against its other callers). An owner that refuses the batch untouched (a
    /// build without RecommendBatch, or its own lower limits) gets each request alone; what
    /// the owner cannot take (`Forwarder::call`'s `None`), or declines untouched request by
    /// request (cut off from etcd), is decided here, as a call forwarded alone would be.
    async fn recommend_owned_by(
        &self,
        owner: String,
        batch: Request<pb::RecommendBatchRequest>,
        places: Vec<usize>,
        deferred: &Deferred,
    ) -> Placed<Result<Response<RecommendResponse>, Status>> {
        let send = |mut c: Client, r| async move { c.recommend_batch(r).await };
        let answer = self
            .forwarder
            .call(Some(owner), RECOMMEND_BATCH, &batch, send)
            .await;
        // Each request's answer from the owner, or `None` and where it is to be decided.
        let (answers, hop): (Vec<Option<_>>, Hop) = match answer {
            Some(Ok(response)) => {
                let mut results = response.into_inner().results.into_iter();
                let answers = places
                    .iter()
                    .map(|_| match batch_answer(results.next()) {
                        Err(status) if declined(&status) => None,
                        result => Some(result.map(Response::new)),
                    })
                    .collect();
                (answers, Hop::Here)
            }
            Some(Err(status)) if !batch_refused_untouched(&status) => {
                let answers = places.iter().map(|_| Some(Err(status.clone()))).collect();
                (answers, Hop::Here)
            }
            Some(Err(_)) => (places.iter().map(|_| None).collect(), Hop::Owner),
            None => (places.iter().map(|_| None).collect(), Hop::Here),
        };
        let (metadata, extensions, batch) = batch.into_parts();
        let calls =
            places
                .into_iter()
                .zip(batch.requests)
                .zip(answers)
                .map(|((i, item), answer)| {
                    let request = Request::from_parts(metadata.clone(), extensions.clone(), item);
                    async move {
                        let result = match answer {
                            Some(answer) => answer,
                            None => {
                                let flush = Flush::Defer(deferred, i);
                                Box::pin(self.recommend_one(request, flush, hop)).await
                            }
                        };
                        (i, result)
                    }
                });
        futures_util::future::join_all(calls).await
    }
}

#[tonic::async_trait]
impl HorizontalAutoscaler for HorizontalService {
    async fn recommend(
        &self,
        request: Request<RecommendRequest>,
    ) -> Result<Response<RecommendResponse>, Status> {
        self.recommend_one(request, Flush::Await, Hop::Owner).await
    }

    /// Each request as its own call (`recommend_one`, with the batch's metadata), all at
    /// once, then one wait for the flush covering all their writes before any is answered: a
    /// batch of N decisions pays one call's transport and one flush, and its decisions run
    /// one after another without waiting for a flush between them. The requests another
    /// replica owns go to it as one batch per owner (`recommend_owned_by`). Its limits (the
    /// number of requests, the pods of all together) were checked on the wire before it was
    /// decoded, and its targets by `Authorized`.
    #[tracing::instrument(name = "RecommendBatch", skip_all, fields(requests = request.get_ref().requests.len()))]
    async fn recommend_batch(
        &self,
        request: Request<pb::RecommendBatchRequest>,
    ) -> Result<Response<pb::RecommendBatchResponse>, Status> {
        let (metadata, extensions, batch) = request.into_parts();
        let deferred = Deferred::default();
        let (here, owned) = self.by_owner(batch.requests);
        // Boxed: `join_all` then holds a pointer per part, not each part's future (KiBs),
        // which it would move into its own storage.
        let mut parts: Vec<futures_util::future::BoxFuture<'_, Placed<_>>> = Vec::new();
        for (i, item) in here {
            let request = Request::from_parts(metadata.clone(), extensions.clone(), item);
            let flush = Flush::Defer(&deferred, i);
            parts.push(Box::pin(async move {
                vec![(i, self.recommend_one(request, flush, Hop::Owner).await)]
            }));
        }
        for (owner, (places, requests)) in owned {
            let batch = Request::from_parts(
                metadata.clone(),
                extensions.clone(),
                pb::RecommendBatchRequest { requests },
            );
            parts.push(Box::pin(
                self.recommend_owned_by(owner, batch, places, &deferred),
            ));
        }
        // Every place answered once: in place order, the request's order.
        let mut placed: Vec<_> = futures_util::future::join_all(parts)
            .await
            .into_iter()
            .flatten()
            .collect();
        placed.sort_unstable_by_key(|(i, _)| *i);
        let mut results: Vec<_> = placed.into_iter().map(|(_, result)| result).collect();
        if let Err((unflushed, error)) = self.commit.flushed(deferred).await {
            let status = Status::from(error);
            for i in unflushed {
                results[i] = Err(status.clone());
            }
        }
        for status in results.iter().filter_map(|r| r.as_ref().err()) {
            crate::metrics::batch_request_error(status.code());
        }
        Ok(Response::new(pb::RecommendBatchResponse {
            results: results
                .into_iter()
                .map(super::status::batch_result)
                .collect(),
        }))
    }

    #[tracing::instrument(name = "GetHistory", skip_all, fields(target.key = Empty))]
    async fn get_history(
        &self,
        request: Request<GetHistoryRequest>,
    ) -> Result<Response<TargetHistory>, Status> {
        Ok(Response::new(
            self.do_get_history(request.into_inner()).await?,
        ))
    }

    #[tracing::instrument(name = "ListTargets", skip_all, fields(include_summaries = request.get_ref().include_summaries))]
    async fn list_targets(
        &self,
        request: Request<ListTargetsRequest>,
    ) -> Result<Response<ListTargetsResponse>, Status> {
        Ok(Response::new(
            self.do_list_targets(request.into_inner()).await?,
        ))
    }

    #[tracing::instrument(name = "Simulate", skip_all, fields(target.key = Empty))]
    async fn simulate(
        &self,
        request: Request<SimulateRequest>,
    ) -> Result<Response<SimulateResponse>, Status> {
        Ok(Response::new(self.do_simulate(request.into_inner()).await?))
    }

    #[tracing::instrument(name = "ReportScale", skip_all, fields(target.key = Empty))]
    async fn report_scale(
        &self,
        request: Request<ReportScaleRequest>,
    ) -> Result<Response<ReportScaleResponse>, Status> {
        let owner = self.owners.owner_of(&request.get_ref().target_key);
        let send = |mut c: Client, r| async move { c.report_scale(r).await };
        let path = "/autoscaled.v1.HorizontalAutoscaler/ReportScale";
        if let Some(answer) = self.forwarder.call(owner, path, &request, send).await {
            return answer;
        }
        Ok(Response::new(
            self.do_report_scale(request.into_inner()).await?,
        ))
    }

    #[tracing::instrument(name = "PutPolicy", skip_all)]
    async fn put_policy(
        &self,
        request: Request<pb::PutPolicyRequest>,
    ) -> Result<Response<pb::Policy>, Status> {
        let fleet = self.fleet()?;
        let owner = owner(&request);
        let policy = fleet
            .put_policy(request.into_inner(), owner, |spec| {
                self.check_policy_spec(spec)
            })
            .await?;
        Ok(Response::new(policy))
    }

    #[tracing::instrument(name = "GetPolicy", skip_all)]
    async fn get_policy(
        &self,
        request: Request<pb::GetPolicyRequest>,
    ) -> Result<Response<pb::Policy>, Status> {
        Ok(Response::new(
            self.fleet()?.get_policy(&request.get_ref().name).await?,
        ))
    }

    #[tracing::instrument(name = "ListPolicies", skip_all)]
    async fn list_policies(
        &self,
        request: Request<pb::ListPoliciesRequest>,
    ) -> Result<Response<pb::ListPoliciesResponse>, Status> {
        Ok(Response::new(
            self.fleet()?.list_policies(request.get_ref()).await?,
        ))
    }

    #[tracing::instrument(name = "DeletePolicy", skip_all)]
    async fn delete_policy(
        &self,
        request: Request<pb::DeletePolicyRequest>,
    ) -> Result<Response<()>, Status> {
        let readable = request
            .extensions()
            .get::<Readable>()
            .map_or_else(KeyFilter::all, |r| r.0.clone());
        self.do_delete_policy(request.into_inner(), &readable)
            .await?;
        Ok(Response::new(()))
    }

    #[tracing::instrument(name = "PutScalingGroup", skip_all)]
    async fn put_scaling_group(
        &self,
        request: Request<pb::PutScalingGroupRequest>,
    ) -> Result<Response<pb::ScalingGroup>, Status> {
        let key_bytes = self.options.limits.max_key_bytes;
        // The configure rights of the caller (`Authorized`): the group's members stay within.
        let scope = request
            .extensions()
            .get::<super::authorized::GroupScope>()
            .map(|s| s.0.clone());
        let owner = owner(&request);
        Ok(Response::new(
            self.fleet()?
                .put_group(request.into_inner(), key_bytes, scope, owner)
                .await?,
        ))
    }

    #[tracing::instrument(name = "GetScalingGroup", skip_all)]
    async fn get_scaling_group(
        &self,
        request: Request<pb::GetScalingGroupRequest>,
    ) -> Result<Response<pb::ScalingGroupStatus>, Status> {
        Ok(Response::new(
            self.fleet()?.get_group(&request.get_ref().name).await?,
        ))
    }

    #[tracing::instrument(name = "ListScalingGroups", skip_all)]
    async fn list_scaling_groups(
        &self,
        request: Request<pb::ListScalingGroupsRequest>,
    ) -> Result<Response<pb::ListScalingGroupsResponse>, Status> {
        Ok(Response::new(
            self.fleet()?.list_groups(request.get_ref()).await?,
        ))
    }

    #[tracing::instrument(name = "DeleteScalingGroup", skip_all)]
    async fn delete_scaling_group(
        &self,
        request: Request<pb::DeleteScalingGroupRequest>,
    ) -> Result<Response<()>, Status> {
        self.fleet()?.delete_group(&request.get_ref().name).await?;
        Ok(Response::new(()))
    }

    #[tracing::instrument(name = "DeleteTarget", skip_all, fields(target.key = Empty))]
    async fn delete_target(
        &self,
        request: Request<DeleteTargetRequest>,
    ) -> Result<Response<()>, Status> {
        self.do_delete_target(request.into_inner()).await?;
        Ok(Response::new(()))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::{
        engine::{
            error::InvalidInput,
            hpa::{
                self, Evaluation, history::History, observation::Observation, spec::HorizontalSpec,
            },
            time::Time,
        },
        pb::v1 as pb,
        store::{SledStore, durability::Mode, sled::SledOptions},
    };

    /// The real engine, slowed down so that two unserialized Recommends on one target would
    /// both read the same history and one write would be lost.
    fn slow_evaluate(
        settings: &Settings,
        spec: &HorizontalSpec,
        observation: &Observation,
        history: &History,
        now: Time,
        budget: Option<&hpa::budget::Allocation>,
    ) -> Result<Evaluation, InvalidInput> {
        std::thread::sleep(Duration::from_millis(2));
        hpa::evaluate_within(settings, spec, observation, history, now, budget)
    }

    fn request(key: &str, usage_milli: i64) -> pb::RecommendRequest {
        let hour_ago = prost_types::Timestamp {
            seconds: clock::hpa_now().unix_millis() / 1000 - 3600,
            nanos: 0,
        };
        let pod = |name: &str| pb::PodSample {
            name: name.into(),
            ready: Some(true),
            ready_transition_time: Some(hour_ago),
            start_time: Some(hour_ago),
            requests_milli: BTreeMap::from([("cpu".to_owned(), 1000)]),
            metrics: BTreeMap::from([(
                "cpu".to_owned(),
                pb::MetricSample {
                    value_milli: Some(usage_milli),
                    ..Default::default()
                },
            )]),
            ..Default::default()
        };
        pb::RecommendRequest {
            target_key: key.into(),
            current_replicas: 2,
            spec: Some(pb::HorizontalSpec {
                max_replicas: 10,
                metrics: vec![pb::MetricSpec {
                    r#type: pb::MetricSourceType::Resource as i32,
                    name: "cpu".into(),
                    target: Some(pb::MetricTarget {
                        r#type: pb::MetricTargetType::Utilization as i32,
                        average_utilization: Some(50),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            pods: vec![pod("a"), pod("b")],
            ..Default::default()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn fifty_concurrent_recommends_on_one_target_lose_no_update() {
        const CALLS: usize = 50;
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn HpaStore> =
            Arc::new(SledStore::open(dir.path(), SledOptions::default()).unwrap());
        let durability = Arc::new(Durability::start(Arc::clone(&store), Mode::Strict));
        let service = Arc::new(HorizontalService::new(
            Arc::clone(&store),
            Arc::clone(&durability),
            HpaOptions {
                defaults: Settings::default(),
                limits: Limits::default(),
                trust_request_time: false,
                history_retention: Duration::from_secs(3600),
            },
            slow_evaluate,
        ));
        let tasks: Vec<_> = (0..CALLS)
            .map(|i| {
                let service = Arc::clone(&service);
                // Two targets interleaved with the hot one show that others are not blocked.
                let key = if i % 10 == 9 { "other" } else { "hot" };
                let usage = if i % 2 == 0 { 1000 } else { 500 };
                tokio::spawn(async move {
                    service
                        .recommend(Request::new(request(key, usage)))
                        .await
                        .unwrap()
                        .into_inner()
                })
            })
            .collect();
        for t in tasks {
            assert!(t.await.unwrap().recorded);
        }
        let hot_calls = CALLS - CALLS / 10;
        let state = store.load("hot").await.unwrap().unwrap();
        // recordInitialRecommendation + one proposal per call, all inside the window.
        assert_eq!(
            state.history.recommendations.as_ref().map(Vec::len),
            Some(hot_calls + 1)
        );
        // Consecutive decisions with the same outcome share a run: count the decisions.
        let mut logged = Vec::new();
        for key in ["hot", "other"] {
            let runs = store.decisions(key).await.unwrap();
            logged.push(runs.iter().map(|e| e.run.count).sum::<u64>());
        }
        assert_eq!(logged, [hot_calls as u64, (CALLS / 10) as u64]);
        // No lock entry outlives its requests.
        assert!(service.locks().is_empty());
        // Every write was covered by a flush (the count is the group-commit figure).
        assert!(durability.flushes() >= 1);
        eprintln!("{CALLS} writes, {} flushes", durability.flushes());
    }
}
