//! Bucket schemes and the plain histogram (`recommender/util/histogram_options.go`,
//! `recommender/util/histogram.go`; specification sections 3 and 4).

use serde::{Deserialize, Serialize};

use super::checkpoint::{HistogramCheckpoint, MAX_CHECKPOINT_WEIGHT};
use super::gomath::go_pow;

/// Upper bound on the number of buckets a scheme may have: protects the service from a
/// caller-supplied scheme that would allocate gigabytes (the recommender's own have 176).
pub const MAX_BUCKETS: usize = 100_000;

/// Errors of histogram construction and operations. Upstream panics on most of these; we
/// return them so that bad input never panics.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum HistogramError {
    /// A scheme parameter is out of range (`max_value`, `bucket_size`, `first_bucket_size`,
    /// `ratio` or `epsilon`).
    #[error("invalid histogram option {field}: {value}")]
    InvalidOption {
        /// The offending field.
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// The scheme would need more than [`MAX_BUCKETS`] buckets.
    #[error("histogram scheme needs {0} buckets, more than the limit")]
    TooManyBuckets(f64),
    /// A sample weight or scale factor is negative or NaN (upstream panics).
    #[error("sample weight must be non-negative, got {0}")]
    NegativeWeight(f64),
    /// Merge or compare of histograms with different schemes (upstream panics).
    #[error("histograms use different bucket schemes")]
    DifferentOptions,
    /// Merge of decaying histograms with different half-lives (upstream panics).
    #[error("decaying histograms have different half-lives")]
    DifferentHalfLife,
    /// `LoadFromCheckpoint` of a nil checkpoint.
    #[error("cannot load from an empty checkpoint")]
    MissingCheckpoint,
    /// A checkpoint's `total_weight` is negative (or NaN).
    #[error("cannot load checkpoint with negative total_weight {0}")]
    NegativeTotalWeight(f64),
    /// A checkpoint names a bucket outside `[0, num_buckets)`.
    #[error("checkpoint bucket_weights has bucket {bucket} outside [0, {num_buckets})")]
    BucketOutOfRange {
        /// The stored index.
        bucket: i64,
        /// The scheme's bucket count.
        num_buckets: usize,
    },
    /// A persisted histogram record is inconsistent with its scheme.
    #[error("invalid histogram record: {0}")]
    InvalidRecord(&'static str),
}

/// A bucket scheme: the number of buckets, the bucket of a value, the start of a bucket and
/// the epsilon below which a bucket counts as empty.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "scheme", rename_all = "lowercase")]
pub enum HistogramOptions {
    /// `NewLinearHistogramOptions` (tests only upstream): buckets of equal size.
    Linear {
        /// `ceil(max_value / bucket_size) + 1`.
        num_buckets: usize,
        /// Width of every bucket.
        bucket_size: f64,
        /// Smallest weight of a non-empty bucket.
        epsilon: f64,
    },
    /// `NewExponentialHistogramOptions`: bucket n has width `first_bucket_size * ratio^n`.
    Exponential {
        /// `ceil(log_ratio(max_value * (ratio - 1) / first_bucket_size + 1)) + 1`.
        num_buckets: usize,
        /// Width of bucket 0.
        first_bucket_size: f64,
        /// Growth of each bucket over the previous one (> 1).
        ratio: f64,
        /// Smallest weight of a non-empty bucket.
        epsilon: f64,
    },
}

/// `HistogramBucketSizeGrowth` + 1 (`aggregations_config.go`).
const DEFAULT_RATIO: f64 = 1.05;
/// `epsilon = 0.001 * minSampleWeight` (`aggregations_config.go`).
const DEFAULT_EPSILON: f64 = 1e-4;

fn check_num_buckets(n: f64) -> Result<usize, HistogramError> {
    if n.is_finite() && n >= 1.0 && n <= MAX_BUCKETS as f64 {
        Ok(n as usize)
    } else {
        Err(HistogramError::TooManyBuckets(n))
    }
}

fn check_epsilon(epsilon: f64) -> Result<(), HistogramError> {
    if epsilon.is_finite() && epsilon >= 0.0 {
        Ok(())
    } else {
        Err(HistogramError::InvalidOption {
            field: "epsilon",
            value: epsilon,
        })
    }
}

impl HistogramOptions {
    /// `NewLinearHistogramOptions(maxValue, bucketSize, epsilon)`.
    pub fn linear(max_value: f64, bucket_size: f64, epsilon: f64) -> Result<Self, HistogramError> {
        if !(max_value > 0.0 && max_value.is_finite()) {
            return Err(HistogramError::InvalidOption {
                field: "max_value",
                value: max_value,
            });
        }
        if !(bucket_size > 0.0 && bucket_size.is_finite()) {
            return Err(HistogramError::InvalidOption {
                field: "bucket_size",
                value: bucket_size,
            });
        }
        check_epsilon(epsilon)?;
        let num_buckets = check_num_buckets((max_value / bucket_size).ceil() + 1.0)?;
        Ok(Self::Linear {
            num_buckets,
            bucket_size,
            epsilon,
        })
    }

    /// `NewExponentialHistogramOptions(maxValue, firstBucketSize, ratio, epsilon)`.
    pub fn exponential(
        max_value: f64,
        first_bucket_size: f64,
        ratio: f64,
        epsilon: f64,
    ) -> Result<Self, HistogramError> {
        if !(max_value > 0.0 && max_value.is_finite()) {
            return Err(HistogramError::InvalidOption {
                field: "max_value",
                value: max_value,
            });
        }
        if !(first_bucket_size > 0.0 && first_bucket_size.is_finite()) {
            return Err(HistogramError::InvalidOption {
                field: "first_bucket_size",
                value: first_bucket_size,
            });
        }
        if !(ratio > 1.0 && ratio.is_finite()) {
            return Err(HistogramError::InvalidOption {
                field: "ratio",
                value: ratio,
            });
        }
        check_epsilon(epsilon)?;
        let n =
            ((max_value * (ratio - 1.0) / first_bucket_size + 1.0).ln() / ratio.ln()).ceil() + 1.0;
        let num_buckets = check_num_buckets(n)?;
        Ok(Self::Exponential {
            num_buckets,
            first_bucket_size,
            ratio,
            epsilon,
        })
    }

    /// `cpuHistogramOptions`: cores, first bucket 0.01, ratio 1.05, max 1000, 176 buckets.
    pub fn cpu() -> Self {
        Self::Exponential {
            num_buckets: 176,
            first_bucket_size: 0.01,
            ratio: DEFAULT_RATIO,
            epsilon: DEFAULT_EPSILON,
        }
    }

    /// `memoryHistogramOptions`: bytes, first bucket 1e7, ratio 1.05, max 1e12, 176 buckets.
    pub fn memory() -> Self {
        Self::Exponential {
            num_buckets: 176,
            first_bucket_size: 1e7,
            ratio: DEFAULT_RATIO,
            epsilon: DEFAULT_EPSILON,
        }
    }

    /// Number of buckets (a hand-built or deserialized scheme is clamped to
    /// `[1, MAX_BUCKETS]` so that no index computation can underflow or allocate unboundedly).
    pub const fn num_buckets(&self) -> usize {
        let n = match *self {
            Self::Linear { num_buckets, .. } | Self::Exponential { num_buckets, .. } => num_buckets,
        };
        if n == 0 {
            1
        } else if n > MAX_BUCKETS {
            MAX_BUCKETS
        } else {
            n
        }
    }

    /// Smallest weight for which a bucket counts as non-empty.
    pub const fn epsilon(&self) -> f64 {
        match *self {
            Self::Linear { epsilon, .. } | Self::Exponential { epsilon, .. } => epsilon,
        }
    }

    /// `FindBucket`: the bucket of `value`, clamped to `[0, num_buckets - 1]` (negative
    /// values land in bucket 0; NaN too, where upstream would index out of range).
    pub fn find_bucket(&self, value: f64) -> usize {
        let last = self.num_buckets() - 1;
        let raw = match *self {
            Self::Linear { bucket_size, .. } => (value / bucket_size).trunc(),
            Self::Exponential {
                first_bucket_size,
                ratio,
                ..
            } => {
                if value < first_bucket_size {
                    return 0;
                }
                ((value * (ratio - 1.0) / first_bucket_size + 1.0).ln() / ratio.ln()).trunc()
            }
        };
        // `as` saturates (NaN → 0), so this never overflows.
        let bucket = raw as i64;
        if bucket < 0 {
            0
        } else {
            (bucket as u64).min(last as u64) as usize
        }
    }

    /// `GetBucketStart`: the smallest value of bucket `bucket` (clamped to the last bucket).
    pub fn bucket_start(&self, bucket: usize) -> f64 {
        let bucket = bucket.min(self.num_buckets() - 1);
        match *self {
            Self::Linear { bucket_size, .. } => bucket as f64 * bucket_size,
            Self::Exponential {
                first_bucket_size,
                ratio,
                ..
            } => {
                if bucket == 0 {
                    0.0
                } else {
                    first_bucket_size * (go_pow(ratio, bucket as f64) - 1.0) / (ratio - 1.0)
                }
            }
        }
    }
}

/// A histogram of weighted samples over a bucket scheme (upstream `histogram`).
///
/// `min_bucket`/`max_bucket` bracket the non-empty buckets (weight ≥ epsilon); an empty
/// histogram has `min_bucket = num_buckets - 1`, `max_bucket = 0`. Weight below epsilon
/// still counts in `total_weight`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "HistogramRecord", into = "HistogramRecord")]
pub struct Histogram {
    options: HistogramOptions,
    weights: Vec<f64>,
    total_weight: f64,
    min_bucket: usize,
    max_bucket: usize,
}

/// How a record names its scheme: the recommender's two by name, others in full.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum SchemeRecord {
    Cpu,
    Memory,
    Custom(HistogramOptions),
}

impl From<HistogramOptions> for SchemeRecord {
    fn from(o: HistogramOptions) -> Self {
        if o == HistogramOptions::cpu() {
            Self::Cpu
        } else if o == HistogramOptions::memory() {
            Self::Memory
        } else {
            Self::Custom(o)
        }
    }
}

impl From<SchemeRecord> for HistogramOptions {
    fn from(r: SchemeRecord) -> Self {
        match r {
            SchemeRecord::Cpu => HistogramOptions::cpu(),
            SchemeRecord::Memory => HistogramOptions::memory(),
            SchemeRecord::Custom(o) => o,
        }
    }
}

/// The persisted form of a [`Histogram`]: the scheme (by name when it is a default one) and
/// only the non-zero buckets, as `(index, weight)`.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct HistogramRecord {
    options: SchemeRecord,
    total_weight: f64,
    min_bucket: u32,
    max_bucket: u32,
    buckets: Vec<(u32, f64)>,
}

impl From<Histogram> for HistogramRecord {
    fn from(h: Histogram) -> Self {
        let buckets = h
            .weights
            .iter()
            .enumerate()
            .filter(|(_, w)| **w != 0.0)
            .map(|(i, w)| (i as u32, *w))
            .collect();
        Self {
            options: h.options.into(),
            total_weight: h.total_weight,
            min_bucket: h.min_bucket as u32,
            max_bucket: h.max_bucket as u32,
            buckets,
        }
    }
}

impl TryFrom<HistogramRecord> for Histogram {
    type Error = HistogramError;

    fn try_from(r: HistogramRecord) -> Result<Self, Self::Error> {
        let options = HistogramOptions::from(r.options);
        let n = options.num_buckets();
        let mut h = Histogram::new(options);
        if r.min_bucket as usize >= n || r.max_bucket as usize >= n {
            return Err(HistogramError::InvalidRecord("min_bucket/max_bucket"));
        }
        for (i, w) in r.buckets {
            let slot = h
                .weights
                .get_mut(i as usize)
                .ok_or(HistogramError::InvalidRecord("bucket index"))?;
            *slot = w;
        }
        h.total_weight = r.total_weight;
        h.min_bucket = r.min_bucket as usize;
        h.max_bucket = r.max_bucket as usize;
        Ok(h)
    }
}

impl Histogram {
    /// `NewHistogram(options)`: all weights 0.
    pub fn new(options: HistogramOptions) -> Self {
        let n = options.num_buckets();
        Self {
            options,
            weights: vec![0.0; n],
            total_weight: 0.0,
            min_bucket: n - 1,
            max_bucket: 0,
        }
    }

    /// The bucket scheme.
    pub const fn options(&self) -> &HistogramOptions {
        &self.options
    }

    /// Sum of all weights added (and not subtracted), including sub-epsilon ones.
    pub const fn total_weight(&self) -> f64 {
        self.total_weight
    }

    /// Weight of bucket `bucket` (0 outside the scheme).
    pub fn bucket_weight(&self, bucket: usize) -> f64 {
        self.weights.get(bucket).copied().unwrap_or(0.0)
    }

    /// First bucket of the non-empty bracket (the last bucket when empty).
    pub const fn min_bucket(&self) -> usize {
        self.min_bucket
    }

    /// Last bucket of the non-empty bracket (0 when empty).
    pub const fn max_bucket(&self) -> usize {
        self.max_bucket
    }

    /// `AddSample`: add `weight` (≥ 0) to the bucket of `value`; widen the bracket if the
    /// bucket now reaches epsilon.
    pub fn add_sample(&mut self, value: f64, weight: f64) -> Result<(), HistogramError> {
        if weight.is_nan() || weight < 0.0 {
            return Err(HistogramError::NegativeWeight(weight));
        }
        let bucket = self.options.find_bucket(value);
        self.weights[bucket] += weight;
        self.total_weight += weight;
        let eps = self.options.epsilon();
        if bucket < self.min_bucket && self.weights[bucket] >= eps {
            self.min_bucket = bucket;
        }
        if bucket > self.max_bucket && self.weights[bucket] >= eps {
            self.max_bucket = bucket;
        }
        Ok(())
    }

    /// `SubtractSample`: remove `weight` from the bucket of `value` and from the total; a
    /// bucket left below epsilon becomes exactly 0. Then shrink the bracket.
    pub fn subtract_sample(&mut self, value: f64, weight: f64) -> Result<(), HistogramError> {
        if weight.is_nan() || weight < 0.0 {
            return Err(HistogramError::NegativeWeight(weight));
        }
        let bucket = self.options.find_bucket(value);
        let eps = self.options.epsilon();
        let weight = if weight > self.weights[bucket] - eps {
            self.weights[bucket]
        } else {
            weight
        };
        self.total_weight -= weight;
        self.weights[bucket] -= weight;
        self.update_min_and_max_bucket();
        Ok(())
    }

    /// `Merge`: add the other histogram's bracketed buckets and total weight.
    pub fn merge(&mut self, other: &Histogram) -> Result<(), HistogramError> {
        if self.options != other.options {
            return Err(HistogramError::DifferentOptions);
        }
        for bucket in other.min_bucket..=other.max_bucket {
            self.weights[bucket] += other.weights[bucket];
        }
        self.total_weight += other.total_weight;
        self.min_bucket = self.min_bucket.min(other.min_bucket);
        self.max_bucket = self.max_bucket.max(other.max_bucket);
        Ok(())
    }

    /// `Percentile(p)`: the END of the bucket where the running weight first reaches
    /// `p × total_weight` (`>=`), or the start of the last bucket, which has no end.
    /// 0.0 for an empty histogram.
    pub fn percentile(&self, percentile: f64) -> f64 {
        if self.is_empty() {
            return 0.0;
        }
        let threshold = percentile * self.total_weight;
        let mut partial = 0.0;
        let mut bucket = self.min_bucket;
        while bucket < self.max_bucket {
            partial += self.weights[bucket];
            if partial >= threshold {
                break;
            }
            bucket += 1;
        }
        if bucket < self.options.num_buckets() - 1 {
            self.options.bucket_start(bucket + 1)
        } else {
            self.options.bucket_start(bucket)
        }
    }

    /// `IsEmpty`: the bucket at `min_bucket` is below epsilon.
    pub fn is_empty(&self) -> bool {
        self.weights[self.min_bucket] < self.options.epsilon()
    }

    /// `Equals`: same scheme, same bracket, bracketed buckets equal within 1e-15.
    pub fn equals(&self, other: &Histogram) -> bool {
        if self.options != other.options
            || self.min_bucket != other.min_bucket
            || self.max_bucket != other.max_bucket
        {
            return false;
        }
        (self.min_bucket..=self.max_bucket)
            .all(|b| (self.weights[b] - other.weights[b]).abs() <= 1e-15)
    }

    /// `scale(f)`: multiply the bracketed buckets and the total by `factor` (≥ 0), then shrink
    /// the bracket. Buckets outside the bracket are left alone, as upstream.
    pub fn scale(&mut self, factor: f64) -> Result<(), HistogramError> {
        if factor.is_nan() || factor < 0.0 {
            return Err(HistogramError::NegativeWeight(factor));
        }
        for bucket in self.min_bucket..=self.max_bucket {
            self.weights[bucket] *= factor;
        }
        self.total_weight *= factor;
        self.update_min_and_max_bucket();
        Ok(())
    }

    /// `updateMinAndMaxBucket`: move the bracket edges inward past buckets below epsilon.
    fn update_min_and_max_bucket(&mut self) {
        let eps = self.options.epsilon();
        let last = self.options.num_buckets() - 1;
        while self.weights[self.min_bucket] < eps && self.min_bucket < last {
            self.min_bucket += 1;
        }
        while self.weights[self.max_bucket] < eps && self.max_bucket > 0 {
            self.max_bucket -= 1;
        }
    }

    /// `SaveToChekpoint`: bracketed buckets scaled so the largest is
    /// [`MAX_CHECKPOINT_WEIGHT`], rounded half up, zeros dropped; the exact total weight.
    /// The reference timestamp is left unset (the decaying histogram fills it in).
    pub fn save_checkpoint(&self) -> HistogramCheckpoint {
        let mut checkpoint = HistogramCheckpoint {
            total_weight: self.total_weight,
            ..Default::default()
        };
        let mut max = 0.0_f64;
        for bucket in self.min_bucket..=self.max_bucket {
            if self.weights[bucket] > max {
                max = self.weights[bucket];
            }
        }
        if max <= 0.0 {
            return checkpoint;
        }
        let ratio = f64::from(MAX_CHECKPOINT_WEIGHT) / max;
        for bucket in self.min_bucket..=self.max_bucket {
            // Go's `round(x) = floor(x + 0.5)`, then `uint32(..)` (saturating here).
            let stored = (self.weights[bucket] * ratio + 0.5).floor() as u32;
            if stored > 0 {
                checkpoint.bucket_weights.insert(bucket as i64, stored);
            }
        }
        checkpoint
    }

    /// `LoadFromCheckpoint`: validate, then ADD `stored × total_weight / sum(stored)` to each
    /// bucket and `total_weight` to the total, and shrink the bracket past buckets below
    /// epsilon (the kubernetes/autoscaler#7726 fix). A checkpoint whose stored weights sum to
    /// 0 loads nothing.
    pub fn load_checkpoint(
        &mut self,
        checkpoint: Option<&HistogramCheckpoint>,
    ) -> Result<(), HistogramError> {
        let checkpoint = checkpoint.ok_or(HistogramError::MissingCheckpoint)?;
        if checkpoint.total_weight.is_nan() || checkpoint.total_weight < 0.0 {
            return Err(HistogramError::NegativeTotalWeight(checkpoint.total_weight));
        }
        let n = self.options.num_buckets();
        let mut sum: i64 = 0;
        for (&bucket, &weight) in &checkpoint.bucket_weights {
            sum += i64::from(weight);
            if bucket < 0 || bucket >= n as i64 {
                return Err(HistogramError::BucketOutOfRange {
                    bucket,
                    num_buckets: n,
                });
            }
        }
        if sum == 0 {
            return Ok(());
        }
        let ratio = checkpoint.total_weight / sum as f64;
        for (&bucket, &weight) in &checkpoint.bucket_weights {
            let bucket = bucket as usize;
            self.min_bucket = self.min_bucket.min(bucket);
            self.max_bucket = self.max_bucket.max(bucket);
            self.weights[bucket] += f64::from(weight) * ratio;
        }
        self.total_weight += checkpoint.total_weight;
        self.update_min_and_max_bucket();
        Ok(())
    }
}

/// Building a histogram from stored parts (the store's own records, `store::record::vpa`),
/// with the same checks as the serde record.
impl Histogram {
    /// A histogram over `options` with the non-zero `buckets` (`(index, weight)`), the total
    /// weight and the non-empty range as stored; an index outside the scheme is refused.
    pub fn from_parts(
        options: HistogramOptions,
        total_weight: f64,
        min_bucket: u32,
        max_bucket: u32,
        buckets: impl IntoIterator<Item = (u32, f64)>,
    ) -> Result<Self, HistogramError> {
        Histogram::try_from(HistogramRecord {
            options: options.into(),
            total_weight,
            min_bucket,
            max_bucket,
            buckets: buckets.into_iter().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_schemes_have_176_buckets() {
        let cpu = HistogramOptions::exponential(1000.0, 0.01, 1.05, 1e-4).unwrap();
        assert_eq!(cpu, HistogramOptions::cpu());
        let mem = HistogramOptions::exponential(1e12, 1e7, 1.05, 1e-4).unwrap();
        assert_eq!(mem, HistogramOptions::memory());
        // 0.5 cores falls in bucket 25, [0.477271, 0.511135).
        assert_eq!(cpu.find_bucket(0.5), 25);
        assert!((cpu.bucket_start(25) - 0.477271).abs() < 1e-6);
        assert_eq!(mem.find_bucket(268_435_456.0), 17);
    }

    #[test]
    fn exponential_options_match_upstream_test() {
        // TestExponentialHistogramOptions.
        let o = HistogramOptions::exponential(500.0, 40.0, 1.5, 0.001).unwrap();
        assert_eq!(o.num_buckets(), 6);
        let starts: Vec<f64> = (0..6).map(|b| o.bucket_start(b)).collect();
        assert_eq!(starts, [0.0, 40.0, 100.0, 190.0, 325.0, 527.5]);
        for (v, b) in [(-1.0, 0), (39.99, 0), (40.0, 1), (100.0, 2), (900.0, 5)] {
            assert_eq!(o.find_bucket(v), b, "find_bucket({v})");
        }
    }

    #[test]
    fn invalid_options_are_errors() {
        assert!(HistogramOptions::linear(0.0, 1.0, 0.0).is_err());
        assert!(HistogramOptions::exponential(10.0, 1.0, 1.0, 0.0).is_err());
        assert!(matches!(
            HistogramOptions::linear(1e9, 1.0, 0.0),
            Err(HistogramError::TooManyBuckets(_))
        ));
    }

    #[test]
    fn record_round_trip_keeps_sub_epsilon_weight() {
        let mut h = Histogram::new(HistogramOptions::linear(10.0, 1.0, 1e-3).unwrap());
        h.add_sample(1.0, 1e-6).unwrap();
        h.add_sample(5.0, 2.0).unwrap();
        let json = serde_json::to_string(&h).unwrap();
        let back: Histogram = serde_json::from_str(&json).unwrap();
        assert_eq!(back, h);
        let mut cpu = Histogram::new(HistogramOptions::cpu());
        cpu.add_sample(0.5, 0.1).unwrap();
        let json = serde_json::to_string(&cpu).unwrap();
        assert!(json.contains(r#""options":"cpu""#), "{json}");
        assert_eq!(serde_json::from_str::<Histogram>(&json).unwrap(), cpu);
    }
}
