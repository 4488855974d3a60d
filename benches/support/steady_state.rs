//! The steady-state Recommend request that `benches/load.rs` and
//! `examples/recommend_fixed.rs` both send, so their figures describe the same work.
//! Included with `#[path]` (a bench and an example cannot share a library module).

use autoscaled::pb::v1 as pb;
use autoscaled_fixtures as fixtures;

/// Pods per request.
pub const PODS: usize = 10;

/// A steady-state target: 10 pods requesting 500m cpu each, using about half of it, against a
/// 50% utilization target (legacy path, default settings). Times are taken from the wall
/// clock once; the server judges them with its own clock.
pub fn recommend_request(target_key: String) -> pb::RecommendRequest {
    fixtures::recommend(target_key)
        .pods(PODS)
        .replicas(Some(2), 20)
        .cpu_request_milli(500)
        .cpu_usage_by(|i| 230 + 10 * (i as i64 % 5))
        .build()
}
