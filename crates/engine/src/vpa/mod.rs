//! The VPA recommender model, pure: the Kubernetes Vertical Pod Autoscaler recommender
//! (`kubernetes/autoscaler` `vertical-pod-autoscaler/pkg/recommender/`, specification
//! `docs/vpa-recommender.md`) over samples the caller passes in, with every time an argument.
//!
//! # Layout
//!
//! * [`time`](crate::time): [`Time`](crate::time::Time) (ns since the Unix epoch) and Go time semantics (zero time,
//!   `Sub` saturation, `Round`).
//! * [`amount`]: [`ResourceAmount`] conversions with upstream truncation (`model/types.go`).
//! * [`histogram`]: bucket schemes and the histogram (`util/histogram*.go`).
//! * [`decaying`]: the decaying histogram (`util/decaying_histogram.go`).
//! * [`checkpoint`]: the v3 checkpoint format.
//! * [`aggregate`]: `AggregateContainerState` and the histogram-call observer.
//! * [`container`]: `ContainerState` (CPU ordering, memory peaks per interval, OOM rule).
//! * [`policy`]: container policies and what they set on an aggregation.
//! * [`estimator`]: percentile, margin, confidence multiplier, minimum (`logic/estimator.go`).
//! * [`gomath`]: Go's `math.Pow` (with `Frexp`/`Ldexp`), bit for bit.
//! * [`recommender`]: per-pod recommendation, rounding, integer CPU, capping.
//! * [`settings`]: [`VpaSettings`], the recommender's flags with Kubernetes defaults.
//! * [`target`]: [`VpaTarget`], the serializable state of one target and the service's calls.
//!
//! Only `std`, `serde` and `thiserror` are used.

pub mod aggregate;
pub mod amount;
pub mod checkpoint;
pub mod container;
pub mod decaying;
pub mod estimator;
pub mod gomath;
pub mod histogram;
pub mod policy;
pub mod recommender;
pub mod settings;
pub mod target;

pub use aggregate::{
    AggregateContainerState, HistogramCall, HistogramKind, HistogramObserver, HistogramOp,
};
pub use amount::{Resource, ResourceAmount, Resources};
pub use container::ContainerState;
pub use policy::{ContainerResourcePolicy, ContainerScalingMode, PodResourcePolicy};
pub use recommender::{RecommendedContainerResources, RecommendedPodResources};
pub use settings::VpaSettings;
pub use target::{IngestReport, Observation, OomEvent, UsageSample, VpaTarget, VpaTargetError};
