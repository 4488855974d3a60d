//! The decaying histogram (`recommender/util/decaying_histogram.go`; specification section 5).
//!
//! A sample of weight `w` at time `t` is stored with weight `w × 2^((t − R) / H)` for half-life
//! `H` and reference timestamp `R`. `R` starts at Go's zero time and is moved forward
//! (renormalization) whenever a sample is more than 100 half-lives past it.

use serde::{Deserialize, Serialize};

use super::checkpoint::HistogramCheckpoint;
use super::gomath::go_exp2;
use super::histogram::{Histogram, HistogramError, HistogramOptions};
use crate::time::{
    Time,
    go::{go_offset, go_round, go_sub},
};

/// `maxDecayExponent`: renormalize once a sample is this many half-lives past the reference.
pub(crate) const MAX_DECAY_EXPONENT: i64 = 100;

/// A histogram whose samples lose half their relative weight every half-life.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecayingHistogram {
    histogram: Histogram,
    /// Half-life in nanoseconds (> 0).
    half_life_ns: i64,
    /// Reference timestamp; `None` is Go's zero time (the initial value).
    #[serde(default, with = "crate::time::serde_nanos_option")]
    reference: Option<Time>,
}

/// Go's `round(x) = int(math.Floor(x + 0.5))`, clamped so that `2^x` stays computable.
fn go_round_exponent(x: f64) -> i32 {
    let r = (x + 0.5).floor();
    if r.is_nan() {
        0
    } else {
        r.clamp(-4096.0, 4096.0) as i32
    }
}

/// Go's `math.Ldexp(1, exponent)`: `2^exponent`, subnormal below 2^-1022 rather than 0
/// (`powi` builds 2^|e| and inverts it, which overflows to 0 from 2^-1024 down). The two
/// halves are exact powers of two, so their product is exact wherever 2^e is representable.
fn ldexp_one(exponent: i32) -> f64 {
    let half = exponent / 2;
    2f64.powi(half) * 2f64.powi(exponent - half)
}

impl DecayingHistogram {
    /// `NewDecayingHistogram(options, halfLife)`. A half-life ≤ 0 gives a plain histogram
    /// (upstream `NewHistogram`: every decay factor is 1 and the reference never moves), which
    /// some upstream estimator tests use; the settings reject it for real aggregations.
    pub fn new(options: HistogramOptions, half_life_ns: i64) -> Self {
        Self {
            histogram: Histogram::new(options),
            half_life_ns: half_life_ns.max(0),
            reference: None,
        }
    }

    /// Whether this is a plain (non-decaying) histogram.
    pub(crate) const fn is_plain(&self) -> bool {
        self.half_life_ns <= 0
    }

    /// The underlying histogram (weights already decayed relative to the reference).
    pub const fn histogram(&self) -> &Histogram {
        &self.histogram
    }

    /// Half-life in nanoseconds.
    pub const fn half_life_ns(&self) -> i64 {
        self.half_life_ns
    }

    /// Reference timestamp (`None`: Go's zero time, i.e. never set).
    pub const fn reference(&self) -> Option<Time> {
        self.reference
    }

    /// `AddSample(value, weight, t)`: add with weight `weight × decayFactor(t)`.
    pub fn add_sample(&mut self, value: f64, weight: f64, t: Time) -> Result<(), HistogramError> {
        let factor = self.decay_factor(t)?;
        self.histogram.add_sample(value, weight * factor)
    }

    /// `SubtractSample(value, weight, t)`: subtract with the same factor as an add at `t`.
    pub fn subtract_sample(
        &mut self,
        value: f64,
        weight: f64,
        t: Time,
    ) -> Result<(), HistogramError> {
        let factor = self.decay_factor(t)?;
        self.histogram.subtract_sample(value, weight * factor)
    }

    /// `Percentile(p)` of the underlying histogram ("now" never enters).
    pub fn percentile(&self, percentile: f64) -> f64 {
        self.histogram.percentile(percentile)
    }

    /// `IsEmpty` of the underlying histogram.
    pub fn is_empty(&self) -> bool {
        self.histogram.is_empty()
    }

    /// `Merge`: same half-life required; the older reference is moved to the younger one,
    /// then the buckets are added. `other` is not modified (upstream shifts it in place,
    /// which only rescales it).
    pub fn merge(&mut self, other: &DecayingHistogram) -> Result<(), HistogramError> {
        if self.half_life_ns != other.half_life_ns {
            return Err(HistogramError::DifferentHalfLife);
        }
        if self.histogram.options() != other.histogram.options() {
            return Err(HistogramError::DifferentOptions);
        }
        let (mine, theirs) = (go_offset(self.reference), go_offset(other.reference));
        if mine < theirs {
            // `theirs > mine >= 0` implies `other.reference` is set.
            if let Some(r) = other.reference {
                self.shift_reference(r)?;
            }
            self.histogram.merge(&other.histogram)
        } else if theirs < mine {
            let mut shifted = other.clone();
            if let Some(r) = self.reference {
                shifted.shift_reference(r)?;
            }
            self.histogram.merge(&shifted.histogram)
        } else {
            self.histogram.merge(&other.histogram)
        }
    }

    /// `Equals`: same half-life, same reference, equal histograms.
    pub fn equals(&self, other: &DecayingHistogram) -> bool {
        self.half_life_ns == other.half_life_ns
            && self.reference == other.reference
            && self.histogram.equals(&other.histogram)
    }

    /// `shiftReferenceTimestamp`: round the new reference to a multiple of the half-life
    /// (Go `time.Round`, from the zero time) and scale every weight by
    /// `2^round((R_old − R_new) / H)`.
    fn shift_reference(&mut self, new_reference: Time) -> Result<(), HistogramError> {
        if self.is_plain() {
            return Ok(());
        }
        let new_reference = go_round(new_reference, self.half_life_ns);
        let exponent = go_round_exponent(
            go_sub(self.reference, Some(new_reference)) as f64 / self.half_life_ns as f64,
        );
        self.histogram.scale(ldexp_one(exponent))?;
        self.reference = Some(new_reference);
        Ok(())
    }

    /// `decayFactor(t)`: renormalize if `t` is more than 100 half-lives past the reference,
    /// then `2^((t − R) / H)`.
    fn decay_factor(&mut self, t: Time) -> Result<f64, HistogramError> {
        if self.is_plain() {
            return Ok(1.0);
        }
        let max_allowed = go_offset(self.reference)
            + i128::from(self.half_life_ns) * i128::from(MAX_DECAY_EXPONENT);
        if go_offset(Some(t)) > max_allowed {
            self.shift_reference(t)?;
        }
        Ok(go_exp2(
            go_sub(Some(t), self.reference) as f64 / self.half_life_ns as f64,
        ))
    }

    /// `SaveToChekpoint`: the histogram's checkpoint plus the reference timestamp.
    pub fn save_checkpoint(&self) -> HistogramCheckpoint {
        let mut checkpoint = self.histogram.save_checkpoint();
        checkpoint.reference = self.reference;
        checkpoint
    }

    /// `LoadFromCheckpoint`: load the buckets (adding), then take the stored reference
    /// verbatim (no rounding).
    pub fn load_checkpoint(
        &mut self,
        checkpoint: Option<&HistogramCheckpoint>,
    ) -> Result<(), HistogramError> {
        self.histogram.load_checkpoint(checkpoint)?;
        if let Some(c) = checkpoint {
            self.reference = c.reference;
        }
        Ok(())
    }
}

/// Building a decaying histogram from stored parts (the store's own records).
impl DecayingHistogram {
    /// The decaying histogram with these parts, as [`Self::histogram`],
    /// [`Self::half_life_ns`] and [`Self::reference`] return them.
    pub fn from_parts(histogram: Histogram, half_life_ns: i64, reference: Option<Time>) -> Self {
        Self {
            histogram,
            half_life_ns: half_life_ns.max(0),
            reference,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_sample_sets_reference_to_rounded_time() {
        let hour = 3_600_000_000_000;
        let mut h =
            DecayingHistogram::new(HistogramOptions::linear(10.0, 1.0, 1e-15).unwrap(), hour);
        // 2009-02-13T23:31:30Z: 31m30s past the hour is over half, so it rounds up to 00:00.
        let t = Time::from_unix_seconds(1_234_567_890);
        h.add_sample(1.0, 1.0, t).unwrap();
        let r = h.reference().unwrap();
        assert_eq!(r, Time::from_unix_seconds(1_234_569_600));
        let w = h.histogram().bucket_weight(1);
        assert!((w - 2f64.powf(-1710.0 / 3600.0)).abs() < 1e-12);
    }

    #[test]
    fn ldexp_one_is_exact_down_to_the_subnormals() {
        for e in [
            -4096, -1075, -1074, -1050, -1024, -1022, -1, 0, 1, 1023, 1024, 4096,
        ] {
            let expected = match e {
                ..-1074 => 0.0,
                -1074..-1022 => f64::from_bits(1u64 << (e + 1074)),
                -1022..1024 => f64::from_bits(((e + 1023) as u64) << 52),
                _ => f64::INFINITY,
            };
            assert_eq!(ldexp_one(e), expected, "2^{e}");
        }
    }
}
