//! Typed steps and expectations of VPA cases (`conformance/vpa/README.md`), one struct per
//! kind's JSON shape.
//!
//! Why these rules: the structs accept what the former hand reader (which walked
//! `serde_json::Value`) accepted, so hidden cases that pass today keep passing. Unknown keys
//! are ignored (no `deny_unknown_fields`) except in expectations, which collect them in a
//! flattened `rest` map that the runner rejects (a case must not pass vacuously); integers
//! accept a float without fraction; names that were read with "if it is a string" stay
//! lenient ([`LenientStr`]).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::{Deserializer, Error as _, IgnoredAny};

use autoscaled_engine::vpa::aggregate::HistogramKind;
use autoscaled_engine::vpa::amount::{Resource, Resources};

/// An integer as the hand reader took it: a JSON integer, or a float without fraction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Int(pub i64);

impl<'de> Deserialize<'de> for Int {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = serde_json::Number::deserialize(d)?;
        n.as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
            .map(Int)
            .ok_or_else(|| D::Error::custom("not an integer"))
    }
}

/// Any JSON value, kept only when it is a string (the hand reader read such keys with
/// `and_then(Value::as_str)` and ignored other types).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct LenientStr(pub Option<String>);

impl<'de> Deserialize<'de> for LenientStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum S {
            Str(String),
            Other(IgnoredAny),
        }
        Ok(LenientStr(match S::deserialize(d)? {
            S::Str(s) => Some(s),
            S::Other(_) => None,
        }))
    }
}

impl LenientStr {
    /// The string, or `default` when absent or not a string.
    pub(super) fn or<'a>(&'a self, default: &'a str) -> &'a str {
        self.0.as_deref().unwrap_or(default)
    }
}

/// A field only some ops read: its type is checked when the runner reads it
/// ([`Deferred::get`]), as the hand reader did, so that a step of another op may carry it
/// with any value.
#[derive(Clone, Debug)]
pub(super) struct Deferred<T>(Option<Result<T, String>>);

impl<T> Default for Deferred<T> {
    fn default() -> Self {
        Deferred(None)
    }
}

impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for Deferred<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        Ok(Deferred(Some(T::deserialize(v).map_err(|e| e.to_string()))))
    }
}

impl<T: Clone> Deferred<T> {
    /// The value, or an error naming `key`.
    pub(super) fn get(&self, key: &str) -> Result<T, String> {
        match &self.0 {
            None => Err(format!("{key}: missing")),
            Some(r) => r.clone().map_err(|e| format!("{key}: {e}")),
        }
    }
}

impl<T> Deferred<T> {
    /// The value (read after the run, as the hand reader read expectations), or an error
    /// naming `key`.
    pub(super) fn take(self, key: &str) -> Result<T, String> {
        match self.0 {
            None => Err(format!("{key}: missing")),
            Some(r) => r.map_err(|e| format!("{key}: {e}")),
        }
    }
}

impl<T: Clone> Deferred<Option<T>> {
    /// The value; absent or `null` is `None`.
    pub(super) fn opt(&self, key: &str) -> Result<Option<T>, String> {
        match &self.0 {
            None => Ok(None),
            Some(r) => r.clone().map_err(|e| format!("{key}: {e}")),
        }
    }
}

/// An object read with `T`'s rules; any other value reads as `T::default()` (the hand
/// reader looked keys up in it and found none).
#[derive(Clone, Debug, Default)]
pub(super) struct ObjectOr<T>(pub T);

impl<'de, T: serde::de::DeserializeOwned + Default> Deserialize<'de> for ObjectOr<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        if v.is_object() {
            T::deserialize(v).map(ObjectOr).map_err(D::Error::custom)
        } else {
            Ok(ObjectOr(T::default()))
        }
    }
}

/// `Some(None)` for a key present with `null`, `None` for an absent key (with
/// `#[serde(default)]`): some expectations treat an explicit `null` as a value.
pub(super) fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// Keys of an expectation that no field took, for `only_keys`.
pub(super) type Rest = BTreeMap<String, IgnoredAny>;

/// `cpu` or `memory`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ResourceName {
    Cpu,
    Memory,
}

impl From<ResourceName> for Resource {
    fn from(r: ResourceName) -> Resource {
        match r {
            ResourceName::Cpu => Resource::Cpu,
            ResourceName::Memory => Resource::Memory,
        }
    }
}

/// `{cpu, memory}` amounts (millicores, bytes); unknown keys ignored.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
pub struct ResourcesJson {
    pub cpu: Option<Int>,
    pub memory: Option<Int>,
}

impl From<ResourcesJson> for Resources {
    fn from(r: ResourcesJson) -> Resources {
        Resources {
            cpu: r.cpu.map(|i| i.0),
            memory: r.memory.map(|i| i.0),
        }
    }
}

/// `Resources` of an optional map (absent or `null`: no amount).
pub(super) fn resources_of(r: Option<ResourcesJson>) -> Resources {
    r.map(Resources::from).unwrap_or_default()
}

/// A container's resource policy (`policy` of `policy` cases, `container_policies[]`).
#[derive(Clone, Debug, Default, Deserialize)]
pub(super) struct ContainerPolicyJson {
    #[serde(default)]
    pub container_name: LenientStr,
    #[serde(default)]
    pub mode: LenientStr,
    pub min_allowed: Option<ResourcesJson>,
    pub max_allowed: Option<ResourcesJson>,
    pub controlled_resources: Option<Vec<ResourceName>>,
    pub memory_aggregation_interval_s: Option<f64>,
    pub memory_aggregation_interval_count: Option<Int>,
    pub oom_bump_up_ratio: Option<f64>,
    pub oom_min_bump_up_bytes: Option<f64>,
}

/// A pod's resource policy (`policy` of `recommender` and `postprocess` cases).
#[derive(Clone, Debug, Default, Deserialize)]
pub(super) struct PodPolicyJson {
    pub container_policies: Option<Vec<ContainerPolicyJson>>,
}

// === kind: policy ===

/// A `policy` case: one container policy resolved against the settings.
#[derive(Debug, Deserialize)]
pub(super) struct PolicyCase {
    pub policy: Option<ObjectOr<ContainerPolicyJson>>,
    #[serde(default)]
    pub expect: Deferred<PolicyExpect>,
}

/// What a resolved aggregation policy must be.
#[derive(Debug, Deserialize)]
pub(super) struct PolicyExpect {
    #[serde(default)]
    pub scaling_mode: LenientStr,
    #[serde(default, deserialize_with = "present")]
    pub controlled_resources: Option<Option<Vec<ResourceName>>>,
    pub memory_aggregation_interval_s: Option<f64>,
    pub memory_aggregation_interval_count: Option<Int>,
    pub oom_bump_up_ratio: Option<f64>,
    pub oom_min_bump_up_bytes: Option<f64>,
    #[serde(flatten)]
    pub rest: Rest,
}

// === kind: estimator ===

/// An `estimator` case: a state built by steps, chains of estimators, expected estimates.
#[derive(Debug, Deserialize)]
pub(super) struct EstimatorCase {
    pub state: EstimatorState,
    pub estimators: EstimatorChains,
    #[serde(default)]
    pub expect: Deferred<EstimatorExpect>,
}

/// The chains for `cpu` and `memory` (other keys ignored).
#[derive(Debug, Deserialize)]
pub(super) struct EstimatorChains {
    pub cpu: Option<Vec<ChainElement>>,
    pub memory: Option<Vec<ChainElement>>,
}

/// How the aggregate state is built (`histograms: "plain"` for no decay).
#[derive(Debug, Deserialize)]
pub(super) struct EstimatorState {
    #[serde(default)]
    pub histograms: LenientStr,
    pub steps: Option<Vec<EstimatorStateStep>>,
}

/// One state step: `histogram_add` (`histogram`, `value`, `weight`) or `aggregate_sample`
/// (`resource`, integer `value`); the op decides which fields are read.
#[derive(Debug, Deserialize)]
pub(super) struct EstimatorStateStep {
    pub op: String,
    pub at_s: Option<f64>,
    #[serde(default)]
    pub histogram: Deferred<HistogramName>,
    #[serde(default)]
    pub resource: Deferred<ResourceName>,
    #[serde(default)]
    pub value: Deferred<serde_json::Number>,
    #[serde(default)]
    pub weight: Deferred<f64>,
}

/// `cpu` or `memory` histogram of an aggregation.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum HistogramName {
    Cpu,
    Memory,
}

impl From<HistogramName> for HistogramKind {
    fn from(h: HistogramName) -> HistogramKind {
        match h {
            HistogramName::Cpu => HistogramKind::Cpu,
            HistogramName::Memory => HistogramKind::Memory,
        }
    }
}

/// One element of an estimator chain: the first is `const` or `percentile`, the others
/// `margin`, `confidence_multiplier` or `min` (checked in that order).
#[derive(Debug, Deserialize)]
pub(super) struct ChainElement {
    #[serde(default, rename = "const")]
    pub constant: Option<i64>,
    pub percentile: Option<f64>,
    pub margin: Option<f64>,
    pub confidence_multiplier: Option<ConfidenceMultiplier>,
    pub min: Option<i64>,
}

/// Upstream `WithConfidenceMultiplier(multiplier, exponent, interval)`.
#[derive(Debug, Deserialize)]
pub(super) struct ConfidenceMultiplier {
    pub multiplier: f64,
    pub exponent: f64,
    pub interval_s: f64,
}

/// Expected estimates (`tolerance` relative) and confidence.
#[derive(Debug, Deserialize)]
pub(super) struct EstimatorExpect {
    pub cpu: Option<Int>,
    pub memory: Option<Int>,
    pub tolerance: Option<f64>,
    pub confidence: Option<ConfidenceExpect>,
    #[serde(flatten)]
    pub rest: Rest,
}

/// Expected `getConfidence` over `interval_s`.
#[derive(Debug, Deserialize)]
pub(super) struct ConfidenceExpect {
    pub interval_s: f64,
    pub value: f64,
    pub tolerance: Option<f64>,
}

// === kind: recommender ===

/// A `recommender` case: containers, observations, policy and estimators, expected bounds.
#[derive(Debug, Deserialize)]
pub(super) struct RecommenderCase {
    pub policy: Option<ObjectOr<PodPolicyJson>>,
    pub estimators: Option<ConstantEstimators>,
    pub containers: Option<Vec<RecommenderContainer>>,
    pub samples: Option<Vec<Sample>>,
    pub series: Option<Vec<Series>>,
    pub integer_cpu_containers: Option<Vec<LenientStr>>,
    #[serde(default)]
    pub expect: Deferred<RecommenderExpect>,
}

/// Constant estimators for the three bounds (`PodEstimators::constant`).
#[derive(Debug, Deserialize)]
pub(super) struct ConstantEstimators {
    pub target: Option<ResourcesJson>,
    pub lower_bound: Option<ResourcesJson>,
    pub upper_bound: Option<ResourcesJson>,
}

/// A container of the target; `controlled_resources` adds a container policy.
#[derive(Debug, Deserialize)]
pub(super) struct RecommenderContainer {
    pub name: String,
    #[serde(default)]
    pub pod: LenientStr,
    #[serde(default, deserialize_with = "present")]
    pub controlled_resources: Option<Option<Vec<ResourceName>>>,
}

/// One usage sample or (`oom: true`) OOM event.
#[derive(Debug, Deserialize)]
pub(super) struct Sample {
    pub at_s: f64,
    pub oom: Option<bool>,
    #[serde(default)]
    pub pod: LenientStr,
    #[serde(default)]
    pub container: LenientStr,
    #[serde(default)]
    pub resource: Deferred<ResourceName>,
    pub value: Int,
}

/// `count` samples from `from_s` every `step_s`, cycling through `values`.
#[derive(Debug, Deserialize)]
pub(super) struct Series {
    #[serde(default)]
    pub pod: LenientStr,
    #[serde(default)]
    pub container: LenientStr,
    pub resource: ResourceName,
    pub from_s: f64,
    pub step_s: f64,
    pub count: Int,
    pub values: Option<Vec<i64>>,
}

/// Expected recommendation per container name.
#[derive(Debug, Deserialize)]
pub(super) struct RecommenderExpect {
    pub containers: Option<BTreeMap<String, ExpectedContainer>>,
    #[serde(flatten)]
    pub rest: Rest,
}

/// Expected bounds of one container (a missing resource is not checked); `present` /
/// `absent` list resources that every bound must have / lack.
#[derive(Debug, Deserialize)]
pub(super) struct ExpectedContainer {
    pub name: Option<String>,
    #[serde(default, deserialize_with = "present")]
    pub target: Option<Option<ResourcesJson>>,
    #[serde(default, deserialize_with = "present")]
    pub lower_bound: Option<Option<ResourcesJson>>,
    #[serde(default, deserialize_with = "present")]
    pub upper_bound: Option<Option<ResourcesJson>>,
    #[serde(default, deserialize_with = "present")]
    pub uncapped_target: Option<Option<ResourcesJson>>,
    pub present: Option<Vec<ResourceName>>,
    pub absent: Option<Vec<ResourceName>>,
    #[serde(flatten)]
    pub rest: Rest,
}

// === kind: postprocess ===

/// A `postprocess` case: a recommendation through `post_process`.
#[derive(Debug, Deserialize)]
pub(super) struct PostprocessCase {
    pub recommendation: Option<RecommendationJson>,
    pub policy: Option<ObjectOr<PodPolicyJson>>,
    pub integer_cpu_containers: Option<Vec<LenientStr>>,
    #[serde(default)]
    pub expect: Deferred<PostprocessExpect>,
}

/// A pod recommendation.
#[derive(Debug, Deserialize)]
pub(super) struct RecommendationJson {
    pub containers: Option<Vec<RecommendedContainerJson>>,
}

/// One container's recommendation.
#[derive(Debug, Deserialize)]
pub(super) struct RecommendedContainerJson {
    pub name: String,
    pub target: Option<ResourcesJson>,
    pub lower_bound: Option<ResourcesJson>,
    pub upper_bound: Option<ResourcesJson>,
    pub uncapped_target: Option<ResourcesJson>,
}

/// Expected result: `recommendation: null`, or the containers in order.
#[derive(Debug, Deserialize)]
pub(super) struct PostprocessExpect {
    #[serde(default, deserialize_with = "present")]
    pub recommendation: Option<Option<IgnoredAny>>,
    pub containers: Option<Vec<ExpectedContainer>>,
    #[serde(flatten)]
    pub rest: Rest,
}

// === kind: amount ===

/// An `amount` case: checks of the amount helpers.
#[derive(Debug, Deserialize)]
pub(super) struct AmountCase {
    pub checks: Option<Vec<AmountCheck>>,
}

/// One check: `fn` names the helper; which fields it reads depends on `fn`, and `expect` is
/// a number except for `output_rounding` (a resources map).
#[derive(Debug, Deserialize)]
pub(super) struct AmountCheck {
    #[serde(rename = "fn")]
    pub function: String,
    #[serde(default)]
    pub input: Deferred<serde_json::Number>,
    #[serde(default)]
    pub expect: Deferred<AmountExpect>,
    #[serde(default)]
    pub amount: Deferred<Int>,
    #[serde(default)]
    pub factor: Deferred<f64>,
    #[serde(default)]
    pub value: Deferred<Int>,
    #[serde(default)]
    pub scale: Deferred<Int>,
    #[serde(default)]
    pub error: Deferred<Option<bool>>,
    #[serde(default)]
    pub tolerance: Deferred<Option<f64>>,
    #[serde(default)]
    pub cpu: Deferred<Option<Int>>,
    #[serde(default)]
    pub memory: Deferred<Option<Int>>,
    #[serde(default)]
    pub round_cpu_millicores: Deferred<Option<Int>>,
    #[serde(default)]
    pub round_memory_bytes: Deferred<Option<Int>>,
}

/// An amount check's `expect`: a number, or a resources map (`output_rounding`).
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum AmountExpect {
    Number(serde_json::Number),
    Resources(ResourcesJson),
}

/// Reject keys of an expectation no field took (`derived`/`note(s)` are provenance), so
/// that a new case cannot pass vacuously.
pub(super) fn no_rest(what: &str, rest: &Rest) -> Result<(), String> {
    match rest
        .keys()
        .find(|k| !matches!(k.as_str(), "derived" | "note" | "notes"))
    {
        Some(k) => Err(format!(
            "{what}: unsupported key {k:?} (runner does not check it)"
        )),
        None => Ok(()),
    }
}

/// Parses a kind's typed body from the case, naming the first offending path.
pub(super) fn parse<T: serde::de::DeserializeOwned>(v: &serde_json::Value) -> Result<T, String> {
    T::deserialize(v).map_err(|e| e.to_string())
}

// === kind: container ===

/// A `container` case: samples and OOMs fed to one container, the histogram calls made.
#[derive(Debug, Deserialize)]
pub(super) struct ContainerCase {
    pub steps: Option<Vec<ContainerStep>>,
    /// `null` expects no call at all.
    #[serde(default, deserialize_with = "present")]
    pub expect: Option<Option<ContainerExpect>>,
}

/// `sample` (with `resource`) or `oom`, of `value` at `at_s`.
#[derive(Debug, Deserialize)]
pub(super) struct ContainerStep {
    pub op: String,
    pub at_s: Option<f64>,
    pub value: Int,
    #[serde(default)]
    pub resource: Deferred<ResourceName>,
    pub expect_accepted: Option<bool>,
}

/// The histogram calls made, compared as a multiset.
#[derive(Debug, Deserialize)]
pub(super) struct ContainerExpect {
    pub histogram_calls: Option<Vec<HistogramCallJson>>,
    #[serde(flatten)]
    pub rest: Rest,
}

/// One expected call on the aggregation's histograms.
#[derive(Debug, Deserialize)]
pub(super) struct HistogramCallJson {
    pub histogram: HistogramName,
    pub call: CallName,
    pub value: f64,
    pub weight: f64,
    pub at_s: Option<f64>,
}

/// `add` or `subtract`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum CallName {
    Add,
    Subtract,
}

// === kind: histogram ===

/// A `histogram` case: one decaying histogram and the steps applied to it.
#[derive(Debug, Deserialize)]
pub(super) struct HistogramCase {
    pub histogram: HistogramSpecJson,
    pub steps: Option<Vec<HistogramStep>>,
}

/// Bucket scheme (`linear`, `exponential`, `cpu`, `memory`) and its parameters.
#[derive(Debug, Deserialize)]
pub(super) struct HistogramSpecJson {
    pub buckets: String,
    pub max_value: Option<f64>,
    pub bucket_size: Option<f64>,
    pub first_bucket_size: Option<f64>,
    pub ratio: Option<f64>,
    pub epsilon: Option<f64>,
    pub half_life_s: Option<f64>,
}

/// One step, tagged by `op`.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(super) enum HistogramStep {
    Add(AddStep),
    Subtract(AddStep),
    /// Merge a fresh histogram of the same spec built by `steps`.
    Merge {
        #[serde(default)]
        steps: Option<Vec<AddStep>>,
    },
    SaveCheckpoint {
        #[serde(default)]
        expect: Option<SaveExpect>,
    },
    LoadCheckpoint(LoadStep),
    Expect(HistogramExpect),
}

impl HistogramStep {
    /// The `op` tag, for error messages.
    pub(super) fn op(&self) -> &'static str {
        match self {
            HistogramStep::Add(_) => "add",
            HistogramStep::Subtract(_) => "subtract",
            HistogramStep::Merge { .. } => "merge",
            HistogramStep::SaveCheckpoint { .. } => "save_checkpoint",
            HistogramStep::LoadCheckpoint(_) => "load_checkpoint",
            HistogramStep::Expect(_) => "expect",
        }
    }
}

/// A sample added (or, with `op: "subtract"`, subtracted) at `at_s`.
#[derive(Debug, Deserialize)]
pub(super) struct AddStep {
    #[serde(default)]
    pub op: LenientStr,
    pub value: f64,
    pub weight: f64,
    pub at_s: Option<f64>,
}

/// What a saved checkpoint must hold.
#[derive(Debug, Deserialize)]
pub(super) struct SaveExpect {
    pub total_weight: Option<f64>,
    pub bucket_weights: Option<BTreeMap<String, Option<u64>>>,
    pub bucket_count: Option<Int>,
    pub bucket_count_min: Option<Int>,
    pub total_weight_nonzero: Option<bool>,
    pub reference_equals_histogram: Option<bool>,
    #[serde(flatten)]
    pub rest: Rest,
}

/// Load the last saved checkpoint or `checkpoint`, into the histogram or (`into: "new"`) a
/// fresh one.
#[derive(Debug, Deserialize)]
pub(super) struct LoadStep {
    pub from_last_save: Option<bool>,
    pub checkpoint: Option<HistogramCheckpointJson>,
    #[serde(default)]
    pub into: LenientStr,
    pub expect: Option<ErrorExpect>,
}

/// Whether the step must fail.
#[derive(Debug, Deserialize)]
pub(super) struct ErrorExpect {
    pub error: Option<bool>,
    #[serde(flatten)]
    pub rest: Rest,
}

/// A histogram checkpoint (weights are uint32, as upstream's proto).
#[derive(Clone, Debug, Default, Deserialize)]
pub(super) struct HistogramCheckpointJson {
    pub reference_at_s: Option<f64>,
    pub bucket_weights: Option<BTreeMap<String, u32>>,
    pub total_weight: Option<f64>,
}

/// What the histogram must be (`tolerance` relative, for weights and bucket starts).
#[derive(Debug, Deserialize)]
pub(super) struct HistogramExpect {
    pub is_empty: Option<bool>,
    pub percentiles: Option<Vec<PercentileExpect>>,
    pub total_weight: Option<f64>,
    pub bucket_weights: Option<BTreeMap<String, f64>>,
    /// `null` compares with a fresh histogram.
    #[serde(default, deserialize_with = "present")]
    pub equals: Option<Option<EqualsSpec>>,
    pub num_buckets: Option<Int>,
    pub epsilon: Option<f64>,
    pub bucket_starts: Option<BTreeMap<String, f64>>,
    pub find_bucket: Option<Vec<FindBucket>>,
    pub reference_is_set: Option<bool>,
    pub reference_at_s: Option<f64>,
    pub tolerance: Option<f64>,
    #[serde(flatten)]
    pub rest: Rest,
}

/// `percentile(p) == value`.
#[derive(Debug, Deserialize)]
pub(super) struct PercentileExpect {
    pub p: f64,
    pub value: f64,
    pub tolerance: Option<f64>,
}

/// A histogram of the same spec built by `steps`.
#[derive(Debug, Deserialize)]
pub(super) struct EqualsSpec {
    pub steps: Option<Vec<AddStep>>,
}

/// `find_bucket(value) == bucket`.
#[derive(Debug, Deserialize)]
pub(super) struct FindBucket {
    pub value: f64,
    pub bucket: Int,
}

// === kind: aggregate ===

/// An `aggregate` case: steps on a VPA target's per-container aggregations.
#[derive(Debug, Deserialize)]
pub(super) struct AggregateCase {
    pub steps: Option<Vec<AggregateStep>>,
}

/// One step, tagged by `op`; `container` (default `app`) names the aggregation.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(super) enum AggregateStep {
    Sample(ObservationStep),
    Oom(ObservationStep),
    SetState(SetStateStep),
    HistogramAdd(HistogramAddStep),
    SaveCheckpoint {
        #[serde(default)]
        container: LenientStr,
        #[serde(default)]
        expect: Option<AggregateSaveExpect>,
    },
    LoadCheckpoint {
        #[serde(default)]
        container: LenientStr,
        #[serde(default)]
        checkpoint: Option<AggregateCheckpointJson>,
        #[serde(default)]
        expect: Option<ErrorExpect>,
    },
    CheckpointView {
        #[serde(default)]
        at_s: Option<f64>,
        #[serde(default)]
        expect: Option<BTreeMap<String, ViewExpect>>,
    },
    Expect(AggregateExpect),
}

impl AggregateStep {
    /// The `op` tag, for error messages.
    pub(super) fn op(&self) -> &'static str {
        match self {
            AggregateStep::Sample(_) => "sample",
            AggregateStep::Oom(_) => "oom",
            AggregateStep::SetState(_) => "set_state",
            AggregateStep::HistogramAdd(_) => "histogram_add",
            AggregateStep::SaveCheckpoint { .. } => "save_checkpoint",
            AggregateStep::LoadCheckpoint { .. } => "load_checkpoint",
            AggregateStep::CheckpointView { .. } => "checkpoint_view",
            AggregateStep::Expect(_) => "expect",
        }
    }
}

/// A usage sample (`resource` required) or OOM event of `value` at `at_s`.
#[derive(Debug, Deserialize)]
pub(super) struct ObservationStep {
    #[serde(default)]
    pub pod: LenientStr,
    #[serde(default)]
    pub container: LenientStr,
    pub at_s: Option<f64>,
    pub value: Int,
    #[serde(default)]
    pub resource: Deferred<ResourceName>,
    pub expect_accepted: Option<bool>,
}

/// Overwrites an aggregation's counters and times.
#[derive(Debug, Deserialize)]
pub(super) struct SetStateStep {
    #[serde(default)]
    pub container: LenientStr,
    pub creation_at_s: Option<f64>,
    pub first_sample_at_s: Option<f64>,
    pub last_sample_at_s: Option<f64>,
    pub total_samples_count: Option<Int>,
}

/// Adds straight to one histogram of an aggregation.
#[derive(Debug, Deserialize)]
pub(super) struct HistogramAddStep {
    #[serde(default)]
    pub container: LenientStr,
    pub histogram: HistogramName,
    pub at_s: Option<f64>,
    pub value: f64,
    pub weight: f64,
}

/// What a saved aggregate checkpoint must hold (`null` times expect none).
#[derive(Debug, Deserialize)]
pub(super) struct AggregateSaveExpect {
    pub error: Option<bool>,
    #[serde(default)]
    pub version: LenientStr,
    #[serde(default, deserialize_with = "present")]
    pub first_sample_at_s: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    pub last_sample_at_s: Option<Option<f64>>,
    pub total_samples_count: Option<Int>,
    pub cpu_bucket_count: Option<Int>,
    pub memory_bucket_count: Option<Int>,
    #[serde(flatten)]
    pub rest: Rest,
}

/// An aggregate checkpoint (upstream `VerticalPodAutoscalerCheckpointStatus`).
#[derive(Debug, Deserialize)]
pub(super) struct AggregateCheckpointJson {
    #[serde(default)]
    pub version: LenientStr,
    pub first_sample_at_s: Option<f64>,
    pub last_sample_at_s: Option<f64>,
    pub total_samples_count: Option<Int>,
    pub cpu_histogram: Option<HistogramCheckpointJson>,
    pub memory_histogram: Option<HistogramCheckpointJson>,
}

/// Emptiness of one aggregation in the checkpoint view.
#[derive(Debug, Deserialize)]
pub(super) struct ViewExpect {
    pub memory_is_empty: Option<bool>,
    pub cpu_is_empty: Option<bool>,
    #[serde(flatten)]
    pub rest: Rest,
}

/// What the aggregations must be: per name, and for `container`.
#[derive(Debug, Deserialize)]
pub(super) struct AggregateExpect {
    pub by_container_name: Option<BTreeMap<String, ByContainerName>>,
    #[serde(default)]
    pub container: LenientStr,
    #[serde(default, deserialize_with = "present")]
    pub first_sample_at_s: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    pub last_sample_at_s: Option<Option<f64>>,
    pub total_samples_count: Option<Int>,
    pub cpu_is_empty: Option<bool>,
    pub memory_is_empty: Option<bool>,
    pub is_expired_at: Option<Vec<ExpiredAt>>,
    #[serde(flatten)]
    pub rest: Rest,
}

/// One aggregation's sample count and histograms (built by `adds`, `null` for empty).
#[derive(Debug, Deserialize)]
pub(super) struct ByContainerName {
    pub total_samples_count: Option<Int>,
    #[serde(default, deserialize_with = "present")]
    pub cpu_histogram_equals: Option<Option<HistogramAdds>>,
    #[serde(default, deserialize_with = "present")]
    pub memory_histogram_equals: Option<Option<HistogramAdds>>,
    #[serde(flatten)]
    pub rest: Rest,
}

/// The samples that build an expected histogram.
#[derive(Debug, Deserialize)]
pub(super) struct HistogramAdds {
    pub adds: Option<Vec<AddStep>>,
}

/// `is_expired(at_s) == expired`.
#[derive(Debug, Deserialize)]
pub(super) struct ExpiredAt {
    pub at_s: f64,
    pub expired: Option<bool>,
}

// === envelope ===

/// The outer fields every VPA case has; the kind's own fields are read by its runner.
#[derive(Debug, Deserialize)]
pub(super) struct Envelope {
    #[serde(default)]
    pub name: LenientStr,
    #[serde(default)]
    pub kind: Deferred<String>,
    #[serde(default)]
    pub t0_unix_s: Deferred<Option<Int>>,
    #[serde(default)]
    pub settings: Deferred<Option<SettingsJson>>,
}

/// Recommender settings overriding the defaults (durations in seconds); an unknown setting
/// (left in `rest`) is an error, as it was for the hand reader.
#[derive(Clone, Debug, Default, Deserialize)]
pub(super) struct SettingsJson {
    #[serde(flatten)]
    pub rest: Rest,
    pub target_cpu_percentile: Option<f64>,
    pub target_memory_percentile: Option<f64>,
    pub lower_bound_cpu_percentile: Option<f64>,
    pub lower_bound_memory_percentile: Option<f64>,
    pub upper_bound_cpu_percentile: Option<f64>,
    pub upper_bound_memory_percentile: Option<f64>,
    pub safety_margin_fraction: Option<f64>,
    pub pod_min_cpu_millicores: Option<f64>,
    pub pod_min_memory_mb: Option<f64>,
    pub confidence_interval_cpu_s: Option<f64>,
    pub confidence_interval_memory_s: Option<f64>,
    pub cpu_histogram_decay_half_life_s: Option<f64>,
    pub memory_histogram_decay_half_life_s: Option<f64>,
    pub memory_aggregation_interval_s: Option<f64>,
    pub memory_aggregation_interval_count: Option<Int>,
    pub oom_bump_up_ratio: Option<f64>,
    pub oom_min_bump_up_bytes: Option<f64>,
    pub round_cpu_millicores: Option<Int>,
    pub round_memory_bytes: Option<Int>,
    pub container_recommendation_max_allowed: Option<ResourcesJson>,
    pub per_vpa_config: Option<bool>,
    pub cpu_integer_post_processor_enabled: Option<bool>,
}

impl SettingsJson {
    /// The first unknown setting, as the hand reader named it.
    pub(super) fn check_keys(&self) -> Result<(), String> {
        match self.rest.keys().next() {
            Some(k) => Err(format!("{k}: unknown setting")),
            None => Ok(()),
        }
    }
}
