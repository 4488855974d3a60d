//! The `VerticalAutoscaler` service: the VPA recommender over samples the caller pushes.
//!
//! RecordUsage: validate (nothing stored on error), take the target's lock, load its
//! aggregates, feed the samples then the OOM events in request order
//! (`VpaTarget::record_samples`), drop aggregates no sample reached within the aggregation
//! window (the recommender's periodic garbage collection), store, release the lock, and answer
//! after a flush covering the write (group commit, as for Recommend). The server clock, read
//! once, is the creation time of new aggregates.
//!
//! GetRecommendation reads the stored aggregates; it does not depend on the current time.

use std::{sync::Arc, time::SystemTime};

use tonic::{Request, Response, Status};
use tracing::{Span, field::Empty};

use super::{convert::vertical as convert, status::ApiError};
use crate::{
    config::Limits,
    engine::vpa::{Timestamp, VpaSettings},
    pb::v1::{
        DeleteVerticalTargetRequest, GetRecommendationRequest, RecordUsageRequest,
        RecordUsageResponse, VerticalRecommendation,
        vertical_autoscaler_server::VerticalAutoscaler,
    },
    store::{HistoryStore, durability::Durability, locks::KeyLocks},
};

/// The VerticalAutoscaler service over a store.
pub struct VerticalService {
    store: Arc<dyn HistoryStore>,
    durability: Arc<Durability>,
    locks: KeyLocks,
    defaults: VpaSettings,
    limits: Limits,
}

impl VerticalService {
    /// A service with the recommender flags `defaults` (targets may override them).
    pub fn new(
        store: Arc<dyn HistoryStore>,
        durability: Arc<Durability>,
        defaults: VpaSettings,
        limits: Limits,
    ) -> Self {
        VerticalService {
            store,
            durability,
            locks: KeyLocks::default(),
            defaults,
            limits,
        }
    }

    async fn do_record_usage(
        &self,
        req: RecordUsageRequest,
    ) -> Result<RecordUsageResponse, ApiError> {
        let now = server_now();
        let input = convert::record_usage_request(req, &self.limits)?;
        Span::current().record("target.key", input.target_key.as_str());
        let guard = self.locks.lock(&input.target_key).await;
        let mut state = self
            .store
            .load_vertical(&input.target_key)?
            .unwrap_or_default();
        if let Some(settings) = input.settings {
            state.settings = settings;
        }
        let settings = convert::effective_settings(&self.defaults, &state.settings)?;
        let report = state
            .target
            .record_samples(&input.observations, None, &settings, now);
        state.target.garbage_collect(None, &settings, now);
        self.store.store_vertical(&input.target_key, &state)?;
        let ticket = self.durability.written();
        drop(guard);
        self.durability.durable(ticket).await?;
        let count = |n: u64| i32::try_from(n).unwrap_or(i32::MAX);
        Ok(RecordUsageResponse {
            accepted_samples: count(report.accepted_samples),
            discarded_samples: count(report.discarded_samples),
            accepted_oom_events: count(report.accepted_oom_events),
            discarded_oom_events: count(report.discarded_oom_events),
        })
    }

    fn do_get_recommendation(
        &self,
        req: GetRecommendationRequest,
    ) -> Result<VerticalRecommendation, ApiError> {
        let input = convert::recommendation_request(req, &self.limits)?;
        Span::current().record("target.key", input.target_key.as_str());
        let state = self
            .store
            .load_vertical(&input.target_key)?
            .ok_or_else(|| ApiError::TargetNotFound(input.target_key.clone()))?;
        let settings = convert::effective_settings(&self.defaults, &state.settings)?;
        let recommendation = state.target.recommend(
            input.policy.as_ref(),
            &input.integer_cpu_containers,
            &settings,
        );
        Ok(convert::vertical_recommendation(
            &input.target_key,
            &recommendation,
        ))
    }

    async fn do_delete(&self, req: DeleteVerticalTargetRequest) -> Result<(), ApiError> {
        super::convert::target_key(&req.target_key, &self.limits)?;
        Span::current().record("target.key", req.target_key.as_str());
        let guard = self.locks.lock(&req.target_key).await;
        let existed = self.store.delete_vertical(&req.target_key)?;
        let ticket = self.durability.written();
        drop(guard);
        if !existed {
            return Err(ApiError::TargetNotFound(req.target_key));
        }
        self.durability.durable(ticket).await?;
        Ok(())
    }
}

/// The server clock in the VPA's nanoseconds, read once per request.
fn server_now() -> Timestamp {
    let nanos = match SystemTime::now().duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_nanos()).map_or(i64::MIN, |n| -n),
    };
    Timestamp::from_unix_nanos(nanos)
}

#[tonic::async_trait]
impl VerticalAutoscaler for VerticalService {
    #[tracing::instrument(name = "RecordUsage", skip_all, fields(target.key = Empty))]
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
            self.do_get_recommendation(request.into_inner())?,
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
}
