//! The per-target settings policy of the vertical service: how the recommender's flags are
//! layered. Server defaults (the VPA's own flags), then the target's stored overrides (the
//! last RecordUsage that carried settings), then a GetRecommendation's own overrides, field by
//! field. The overrides are stored with the target ([`VpaOverrides`], a plain record in
//! `store::vpa`); combining them is API policy, so it lives here.

use crate::{engine::vpa::settings::VpaSettings, store::VpaOverrides};

macro_rules! each_override {
    ($m:ident) => {
        $m!(
            target_cpu_percentile,
            target_memory_percentile,
            lower_bound_cpu_percentile,
            lower_bound_memory_percentile,
            upper_bound_cpu_percentile,
            upper_bound_memory_percentile,
            safety_margin_fraction,
            pod_min_cpu_millicores,
            pod_min_memory_mb,
            confidence_interval_cpu,
            confidence_interval_memory,
            cpu_histogram_decay_half_life,
            memory_histogram_decay_half_life,
            memory_aggregation_interval,
            memory_aggregation_interval_count,
            oom_bump_up_ratio,
            oom_min_bump_up_bytes,
            round_cpu_millicores,
            round_memory_bytes,
            container_recommendation_max_allowed,
            cpu_integer_post_processor_enabled
        )
    };
}

impl VpaOverrides {
    /// `base` with every present override applied.
    pub fn apply(&self, base: &VpaSettings) -> VpaSettings {
        let mut out = base.clone();
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = self.$f { out.$f = v; } )* };
        }
        each_override!(set);
        out
    }

    /// These overrides on top of `lower`, field by field (a per-call layer over the stored one).
    pub fn over(&self, lower: &VpaOverrides) -> VpaOverrides {
        let mut out = lower.clone();
        macro_rules! set {
            ($($f:ident),*) => { $( if self.$f.is_some() { out.$f = self.$f; } )* };
        }
        each_override!(set);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_layer_field_by_field() {
        let stored = VpaOverrides {
            target_cpu_percentile: Some(0.8),
            safety_margin_fraction: Some(0.3),
            ..Default::default()
        };
        let call = VpaOverrides {
            target_cpu_percentile: Some(0.99),
            ..Default::default()
        };
        let s = call.over(&stored).apply(&VpaSettings::default());
        assert_eq!(s.target_cpu_percentile, 0.99);
        assert_eq!(s.safety_margin_fraction, 0.3);
        assert_eq!(s.target_memory_percentile, 0.9);
    }
}
