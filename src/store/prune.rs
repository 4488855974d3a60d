//! Pruning of recommendations and scale events that no evaluation can reach any more.
//!
//! The rule, why no decision changes and how the lists stay bounded at any call rate are
//! documented with the code, in the engine (`engine::hpa::prune`): pruning is a pure function
//! of the history, `now` and the retention, and the what-if replay must prune its simulated
//! history exactly as the store prunes a target's. The store and its callers keep naming the
//! items here.

pub use crate::engine::hpa::prune::{
    MAX_RECOMMENDATIONS, MAX_SCALE_EVENTS, bound, coalesce_recommendations, merge_scale_events,
    prune,
};
