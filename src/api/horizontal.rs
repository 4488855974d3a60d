//! The `HorizontalAutoscaler` service.

use std::{sync::Arc, time::Duration};

use tonic::{Request, Response, Status};

use crate::{
    config::Limits,
    engine::settings::Settings,
    pb::v1::{
        DeleteTargetRequest, GetHistoryRequest, ListTargetsRequest, ListTargetsResponse,
        RecommendRequest, RecommendResponse, TargetHistory,
        horizontal_autoscaler_server::HorizontalAutoscaler,
    },
    store::{HistoryStore, durability::Durability, locks::KeyLocks},
};

/// What the service needs from the configuration.
#[derive(Clone, Debug)]
pub struct ServiceOptions {
    /// Server defaults of the controller flags; `spec.settings` overrides them per target.
    pub defaults: Settings,
    pub limits: Limits,
    /// Accept `evaluation_time` from requests.
    pub trust_request_time: bool,
    /// Pruning horizon (see `store::prune`).
    pub history_retention: Duration,
}

/// The HorizontalAutoscaler service over a history store.
pub struct HorizontalService {
    store: Arc<dyn HistoryStore>,
    durability: Arc<Durability>,
    locks: KeyLocks,
    options: ServiceOptions,
}

impl HorizontalService {
    /// A service storing in `store`, waiting for durability through `durability`.
    pub fn new(
        store: Arc<dyn HistoryStore>,
        durability: Arc<Durability>,
        options: ServiceOptions,
    ) -> Self {
        HorizontalService {
            store,
            durability,
            locks: KeyLocks::default(),
            options,
        }
    }
}

#[tonic::async_trait]
impl HorizontalAutoscaler for HorizontalService {
    async fn recommend(
        &self,
        _request: Request<RecommendRequest>,
    ) -> Result<Response<RecommendResponse>, Status> {
        let _ = (&self.store, &self.durability, &self.locks, &self.options);
        Err(Status::unimplemented("Recommend is not wired yet"))
    }

    async fn get_history(
        &self,
        _request: Request<GetHistoryRequest>,
    ) -> Result<Response<TargetHistory>, Status> {
        Err(Status::unimplemented("GetHistory is not wired yet"))
    }

    async fn list_targets(
        &self,
        _request: Request<ListTargetsRequest>,
    ) -> Result<Response<ListTargetsResponse>, Status> {
        Err(Status::unimplemented("ListTargets is not wired yet"))
    }

    async fn delete_target(
        &self,
        _request: Request<DeleteTargetRequest>,
    ) -> Result<Response<()>, Status> {
        Err(Status::unimplemented("DeleteTarget is not wired yet"))
    }
}
