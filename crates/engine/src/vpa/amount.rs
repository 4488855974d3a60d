//! Resource amounts and their integer conversions (`recommender/model/types.go`).
//!
//! A [`ResourceAmount`] is CPU in millicores or memory in bytes. Every float → amount
//! conversion goes through [`resource_amount_from_float`], which truncates toward zero and
//! clamps to `[0, MAX_RESOURCE_AMOUNT]`; the estimators truncate after every stage, so the
//! results differ from a formula evaluated in one go (specification section 2).

use serde::{Deserialize, Serialize};

/// CPU in millicores or memory in bytes (upstream `ResourceAmount`, an `int64`).
pub type ResourceAmount = i64;

/// The largest amount (`MaxResourceAmount` = 1e14).
pub const MAX_RESOURCE_AMOUNT: ResourceAmount = 100_000_000_000_000;

/// The two resources the VPA recommends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Resource {
    /// CPU, in millicores.
    Cpu,
    /// Memory, in bytes.
    Memory,
}

impl Resource {
    /// Both resources, CPU first (upstream `DefaultControlledResources` order).
    pub const ALL: [Resource; 2] = [Resource::Cpu, Resource::Memory];
}

/// Per-resource amounts; a missing resource is `None` (upstream: a key absent from the map).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    /// CPU in millicores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<ResourceAmount>,
    /// Memory in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<ResourceAmount>,
}

impl Resources {
    /// Both resources set.
    pub const fn new(cpu: ResourceAmount, memory: ResourceAmount) -> Self {
        Self {
            cpu: Some(cpu),
            memory: Some(memory),
        }
    }

    /// The amount of `resource`, if present.
    pub const fn get(&self, resource: Resource) -> Option<ResourceAmount> {
        match resource {
            Resource::Cpu => self.cpu,
            Resource::Memory => self.memory,
        }
    }

    /// Mutable access to the amount of `resource`.
    pub fn get_mut(&mut self, resource: Resource) -> &mut Option<ResourceAmount> {
        match resource {
            Resource::Cpu => &mut self.cpu,
            Resource::Memory => &mut self.memory,
        }
    }
}

/// Upstream `resourceAmountFromFloat`: above 1e14 → 1e14, negative → 0, else truncated.
/// NaN (0 × ∞ in the confidence multiplier) becomes 0; upstream leaves it to Go's
/// conversion, and the pod minimum lifts it either way (specification section 2).
pub fn resource_amount_from_float(amount: f64) -> ResourceAmount {
    if amount.is_nan() || amount < 0.0 {
        0
    } else if amount > MAX_RESOURCE_AMOUNT as f64 {
        MAX_RESOURCE_AMOUNT
    } else {
        amount as ResourceAmount
    }
}

/// Upstream `CPUAmountFromCores`: millicores from cores, truncated.
pub fn cpu_amount_from_cores(cores: f64) -> ResourceAmount {
    resource_amount_from_float(cores * 1000.0)
}

/// Upstream `CoresFromCPUAmount`.
pub fn cores_from_cpu_amount(millicores: ResourceAmount) -> f64 {
    millicores as f64 / 1000.0
}

/// Upstream `MemoryAmountFromBytes`: bytes from a float, truncated.
pub fn memory_amount_from_bytes(bytes: f64) -> ResourceAmount {
    resource_amount_from_float(bytes)
}

/// Upstream `BytesFromMemoryAmount`.
pub(crate) fn bytes_from_memory_amount(bytes: ResourceAmount) -> f64 {
    bytes as f64
}

/// Upstream `ScaleResource`: `trunc(amount × factor)`, clamped.
pub fn scale_resource(amount: ResourceAmount, factor: f64) -> ResourceAmount {
    resource_amount_from_float(amount as f64 * factor)
}

/// Error of [`round_up_to_scale`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RoundingError {
    /// The rounding scale (`--round-cpu-millicores` / `--round-memory-bytes`) is not positive.
    #[error("rounding scale must be greater than zero, got {0}")]
    NonPositiveScale(i64),
}

/// Upstream `RoundUpToScale`: `ceil(value / scale) × scale` (computed in float, as upstream);
/// zero stays zero. A scale ≤ 0 is an error (the caller keeps the value unchanged).
pub fn round_up_to_scale(
    value: ResourceAmount,
    scale: i64,
) -> Result<ResourceAmount, RoundingError> {
    if scale <= 0 {
        return Err(RoundingError::NonPositiveScale(scale));
    }
    let quotient = (value as f64 / scale as f64).ceil() as i64;
    Ok(quotient.saturating_mul(scale))
}

/// The integer-CPU post-processor's rounding (`cpu_integer_post_processor.go`): millicores
/// rounded up to whole cores.
pub fn round_up_to_whole_cores(millicores: ResourceAmount) -> ResourceAmount {
    let cores = millicores.div_euclid(1000) + i64::from(millicores.rem_euclid(1000) != 0);
    cores.saturating_mul(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_truncate_and_clamp() {
        assert_eq!(cpu_amount_from_cores(0.069946), 69);
        assert_eq!(memory_amount_from_bytes(-3.0), 0);
        assert_eq!(memory_amount_from_bytes(f64::INFINITY), MAX_RESOURCE_AMOUNT);
        assert_eq!(scale_resource(0, f64::INFINITY), 0);
        assert_eq!(scale_resource(12, 1.1), 13);
    }

    #[test]
    fn rounding() {
        assert_eq!(round_up_to_scale(100, 7), Ok(105));
        assert_eq!(round_up_to_scale(0, 7), Ok(0));
        assert!(round_up_to_scale(100, 0).is_err());
        assert_eq!(round_up_to_whole_cores(8001), 9000);
        assert_eq!(round_up_to_whole_cores(8000), 8000);
    }
}
