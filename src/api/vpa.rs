//! The `VerticalAutoscaler` service: thin handlers over `engine::vpa::VpaTarget` and the
//! store's `vpa_state` tree; conversion in `convert::vpa`, errors through the one table
//! in `status`.
//!
//! RecordUsage, step by step (the one write path of both services, `commit::CommitPath`):
//! 1. read the server clock once (`now`; the request's `evaluation_time` only with
//!    `--trust-request-time`), convert and validate the whole request: nothing is stored on
//!    any error;
//! 2. take the target's lock, so that concurrent RecordUsage calls on one target each build on
//!    the state the previous one wrote;
//! 3. load the state, replace the stored overrides if the request carries settings, feed the
//!    samples then the OOM events (`VpaTarget::record_samples`), drop expired aggregations
//!    (`garbage_collect`, upstream's `GarbageCollectAggregateCollectionStates`) and write the
//!    record if it is still as read (on etcd another replica may have written it: then load
//!    and feed again);
//! 4. release the lock, then wait for a flush covering the write (group commit) before
//!    answering.
//!
//! GetRecommendation only reads: the last committed record, with the per-call overrides.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    sync::Arc,
    time::Duration,
};

use tonic::{Request, Response, Status};
use tracing::{Span, field::Empty};

use super::{
    clock,
    commit::{CommitPath, Recording, Vpa},
    convert::vpa::{self as convert, VerticalContext},
    status::ApiError,
};
use crate::{
    config::Limits,
    engine::vpa::settings::VpaSettings,
    pb::v1::{
        DeleteVerticalTargetRequest, GetRecommendationRequest, ListVerticalTargetsRequest,
        ListVerticalTargetsResponse, RecordUsageRequest, RecordUsageResponse,
        VerticalRecommendation, vertical_autoscaler_server::VerticalAutoscaler,
    },
    store::{VpaState, VpaStore, durability::Durability},
};

/// What the vertical service needs from the configuration.
#[derive(Clone, Debug)]
pub(crate) struct VpaOptions {
    /// Server defaults of the recommender flags (the VPA's own); targets override them.
    pub defaults: VpaSettings,
    /// The wire limits: requests beyond them get INVALID_ARGUMENT, responses stay bounded.
    pub limits: Limits,
    /// Accept `evaluation_time` from requests.
    pub trust_request_time: bool,
    /// Sample and OOM times may be at most this far ahead of the evaluation time.
    pub max_clock_skew: Duration,
}

/// The VerticalAutoscaler service over a vertical store.
pub(crate) struct VerticalService {
    store: Arc<dyn VpaStore>,
    commit: CommitPath,
    options: VpaOptions,
}

impl VerticalService {
    /// A service storing in `store` and waiting for durability through `durability` (which
    /// flushes the same database).
    pub(crate) fn new(
        store: Arc<dyn VpaStore>,
        durability: Arc<Durability>,
        options: VpaOptions,
    ) -> Self {
        VerticalService {
            store,
            commit: CommitPath::new(durability),
            options,
        }
    }

    /// The per-target locks (tests check that none leak).
    #[cfg(test)]
    pub(crate) fn locks(&self) -> &super::locks::KeyLocks {
        self.commit.locks()
    }

    async fn do_record_usage(
        &self,
        req: RecordUsageRequest,
    ) -> Result<RecordUsageResponse, ApiError> {
        let input = convert::record_usage_request(
            req,
            &VerticalContext {
                limits: &self.options.limits,
                trust_request_time: self.options.trust_request_time,
                server_now: clock::vpa_now(),
                max_clock_skew: self.options.max_clock_skew,
                defaults: &self.options.defaults,
            },
        )?;
        let span = Span::current();
        span.record("target.key", input.target_key.as_str());
        span.record("samples", input.observations.len());

        let defaults = &self.options.defaults;
        let (_, _, report) = self
            .commit
            .commit_decision(
                &Vpa(&*self.store),
                &input.target_key,
                Recording::alone(),
                || input.now,
                |state, &now| {
                    let mut state = state.unwrap_or_else(VpaState::new);
                    if let Some(overrides) = &input.settings {
                        state.overrides = overrides.clone();
                    }
                    let settings = state.overrides.apply(defaults);
                    let report = catch_unwind(AssertUnwindSafe(|| {
                        let report =
                            state
                                .target
                                .record_samples(&input.observations, None, &settings, now);
                        state.target.garbage_collect(None, &settings, now);
                        report
                    }))
                    .map_err(|_| ApiError::Internal("the VPA engine panicked".to_owned()))?;
                    Ok((state, report))
                },
            )
            .await?;
        span.record("accepted", report.accepted_samples);
        Ok(convert::record_usage_response(&report))
    }

    async fn do_get_recommendation(
        &self,
        req: GetRecommendationRequest,
    ) -> Result<VerticalRecommendation, ApiError> {
        let input = convert::get_recommendation_request(req, &self.options.limits)?;
        Span::current().record("target.key", input.target_key.as_str());
        let state = self
            .store
            .load_vertical(&input.target_key)
            .await?
            .ok_or_else(|| ApiError::TargetNotFound(input.target_key.clone()))?;
        let settings =
            convert::effective_settings(&input.settings, &state.overrides, &self.options.defaults)?;
        let recommendation = catch_unwind(AssertUnwindSafe(|| {
            state.target.recommend(
                input.policy.as_ref(),
                &input.integer_cpu_containers,
                &settings,
            )
        }))
        .map_err(|_| ApiError::Internal("the VPA engine panicked".to_owned()))?;
        Ok(convert::vertical_recommendation(
            &input.target_key,
            &recommendation,
        ))
    }

    async fn do_delete(&self, req: DeleteVerticalTargetRequest) -> Result<(), ApiError> {
        super::convert::target_key(&req.target_key, &self.options.limits)?;
        Span::current().record("target.key", req.target_key.as_str());
        let store = &self.store;
        if !self
            .commit
            .delete(&req.target_key, store.delete_vertical(&req.target_key))
            .await?
        {
            return Err(ApiError::TargetNotFound(req.target_key));
        }
        Ok(())
    }

    async fn do_list(
        &self,
        req: ListVerticalTargetsRequest,
    ) -> Result<ListVerticalTargetsResponse, ApiError> {
        let request = super::convert::page_request(req.page_size, &req.page_token)?;
        let page = self
            .store
            .list_vertical_keys(request.after.as_deref(), request.size)
            .await?;
        let next_page_token = super::convert::next_page_token(&page);
        Ok(ListVerticalTargetsResponse {
            target_keys: page.keys,
            next_page_token,
        })
    }
}

#[tonic::async_trait]
impl VerticalAutoscaler for VerticalService {
    #[tracing::instrument(name = "RecordUsage", skip_all, fields(target.key = Empty, samples = Empty, accepted = Empty))]
    async fn record_usage(
        &self,
        request: Request<RecordUsageRequest>,
    ) -> Result<Response<RecordUsageResponse>, Status> {
        Ok(Response::new(
            self.do_record_usage(request.into_inner()).await?,
        ))
    }

    #[tracing::instrument(name = "GetRecommendation", skip_all, fields(target.key = Empty))]
    async fn get_recommendation(
        &self,
        request: Request<GetRecommendationRequest>,
    ) -> Result<Response<VerticalRecommendation>, Status> {
        Ok(Response::new(
            self.do_get_recommendation(request.into_inner()).await?,
        ))
    }

    #[tracing::instrument(name = "DeleteVerticalTarget", skip_all, fields(target.key = Empty))]
    async fn delete_vertical_target(
        &self,
        request: Request<DeleteVerticalTargetRequest>,
    ) -> Result<Response<()>, Status> {
        self.do_delete(request.into_inner()).await?;
        Ok(Response::new(()))
    }

    #[tracing::instrument(name = "ListVerticalTargets", skip_all)]
    async fn list_vertical_targets(
        &self,
        request: Request<ListVerticalTargetsRequest>,
    ) -> Result<Response<ListVerticalTargetsResponse>, Status> {
        Ok(Response::new(self.do_list(request.into_inner()).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        pb::v1 as pb,
        store::{SledStore, durability::Mode, sled::SledOptions},
    };

    fn options() -> VpaOptions {
        VpaOptions {
            defaults: VpaSettings::default(),
            limits: Limits::default(),
            trust_request_time: true,
            max_clock_skew: Duration::from_secs(300),
        }
    }

    /// 50 concurrent RecordUsage calls on one target, each for its own container: with the
    /// per-key lock every call builds on the previous one's state, so no container is lost
    /// (a load-modify-store race would drop some).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_record_usage_on_one_target_loses_no_update() {
        const CALLS: usize = 50;
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SledStore::open(dir.path(), SledOptions::default()).unwrap());
        let durability = Arc::new(Durability::start(store.clone(), Mode::Strict));
        let service = Arc::new(VerticalService::new(
            store.clone(),
            Arc::clone(&durability),
            options(),
        ));
        let t0 = 1_767_225_600;
        let tasks: Vec<_> = (0..CALLS)
            .map(|i| {
                let service = Arc::clone(&service);
                let samples = (0..100)
                    .map(|k| pb::UsageSample {
                        pod: "p".into(),
                        container: format!("c{i:02}"),
                        resource: pb::Resource::Cpu as i32,
                        value: 100.0 + k as f64,
                        timestamp: Some(prost_types::Timestamp {
                            seconds: t0 - 6000 + k * 60,
                            nanos: 0,
                        }),
                    })
                    .collect();
                tokio::spawn(async move {
                    service
                        .record_usage(Request::new(pb::RecordUsageRequest {
                            target_key: "hot".into(),
                            samples,
                            evaluation_time: Some(prost_types::Timestamp {
                                seconds: t0,
                                nanos: 0,
                            }),
                            ..Default::default()
                        }))
                        .await
                        .unwrap()
                        .into_inner()
                })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.unwrap().accepted_samples, 100);
        }
        let state = store.load_vertical("hot").await.unwrap().unwrap();
        assert_eq!(state.target.aggregates.len(), CALLS);
        assert!(
            state
                .target
                .aggregates
                .values()
                .all(|a| a.total_samples_count == 100)
        );
        assert!(service.locks().is_empty());
        eprintln!("{CALLS} writes, {} flushes", durability.flushes());
    }
}
