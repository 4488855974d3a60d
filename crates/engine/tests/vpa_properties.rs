//! Property tests of invariants of the VPA engine.

use autoscaled_engine::time::Time;
use autoscaled_engine::vpa::aggregate::AggregateContainerState;
use autoscaled_engine::vpa::decaying::DecayingHistogram;
use autoscaled_engine::vpa::histogram::{Histogram, HistogramOptions};
use autoscaled_engine::vpa::{Observation, Resource, UsageSample, VpaSettings, VpaTarget};
use proptest::prelude::*;

const DAY: i64 = 86_400;
/// 2024-01-01T00:00:00Z.
const T0: i64 = 1_704_067_200;

fn samples() -> impl Strategy<Value = Vec<(f64, f64)>> {
    // (cores, weight): values across the whole CPU scheme, weights above epsilon.
    prop::collection::vec((0.0..2000.0f64, 0.1..10.0f64), 1..60)
}

fn cpu_histogram(samples: &[(f64, f64)]) -> Histogram {
    let mut h = Histogram::new(HistogramOptions::cpu());
    for &(v, w) in samples {
        h.add_sample(v, w).unwrap();
    }
    h
}

proptest! {
    #[test]
    fn percentile_is_monotone_in_p(samples in samples(), mut ps in prop::collection::vec(-0.5..1.5f64, 2..20)) {
        let h = cpu_histogram(&samples);
        ps.sort_by(f64::total_cmp);
        let values: Vec<f64> = ps.iter().map(|p| h.percentile(*p)).collect();
        for w in values.windows(2) {
            prop_assert!(w[0] <= w[1], "percentiles not monotone: {values:?} for {ps:?}");
        }
    }

    #[test]
    fn subtract_undoes_add(samples in samples(), extra in (0.0..2000.0f64, 0.1..10.0f64)) {
        let original = cpu_histogram(&samples);
        let mut h = original.clone();
        h.add_sample(extra.0, extra.1).unwrap();
        h.subtract_sample(extra.0, extra.1).unwrap();
        prop_assert_eq!(h.min_bucket(), original.min_bucket());
        prop_assert_eq!(h.max_bucket(), original.max_bucket());
        for p in [0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0] {
            prop_assert_eq!(h.percentile(p), original.percentile(p), "p = {}", p);
        }
        prop_assert!((h.total_weight() - original.total_weight()).abs() <= 1e-9 * original.total_weight());
    }

    /// The checkpoint keeps every bucket to within 0.5/10000 of the largest, so the loaded
    /// cumulative distribution is within n/(10000 − n/2) < 0.02 of the original: each loaded
    /// percentile lies between the original ones at p ∓ 0.03.
    #[test]
    fn checkpoint_round_trip_preserves_percentiles(samples in samples()) {
        let original = cpu_histogram(&samples);
        let checkpoint = original.save_checkpoint();
        let mut loaded = Histogram::new(HistogramOptions::cpu());
        loaded.load_checkpoint(Some(&checkpoint)).unwrap();
        prop_assert!(!loaded.is_empty());
        for p in [0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95] {
            let got = loaded.percentile(p);
            prop_assert!(original.percentile(p - 0.03) <= got && got <= original.percentile(p + 0.03),
                "p = {}: loaded {}, original [{}, {}]", p, got, original.percentile(p - 0.03), original.percentile(p + 0.03));
        }
    }

    /// Decay only depends on time relative to the reference, which follows the samples: the
    /// same samples shifted by whole half-lives give identical percentiles.
    #[test]
    fn decaying_percentiles_invariant_under_whole_half_life_shift(
        samples in prop::collection::vec((0.0..2000.0f64, 0.1..10.0f64, 0..(20 * DAY)), 1..60),
        shift_days in 0i64..400,
    ) {
        let build = |offset: i64| {
            let mut h = DecayingHistogram::new(HistogramOptions::cpu(), DAY * 1_000_000_000);
            for &(v, w, t) in &samples {
                h.add_sample(v, w, Time::from_unix_seconds(T0 + offset + t)).unwrap();
            }
            h
        };
        let (a, b) = (build(0), build(shift_days * DAY));
        for p in [0.0, 0.1, 0.5, 0.9, 0.95, 1.0] {
            prop_assert_eq!(a.percentile(p), b.percentile(p), "p = {}", p);
        }
    }

    /// With the default estimators, once there is some history (confidence > 0), the bounds
    /// bracket the target.
    #[test]
    fn bounds_bracket_target(
        cpu in prop::collection::vec(0i64..8000, 2..200),
        memory in prop::collection::vec(0i64..8_000_000_000, 1..200),
        step_s in 1i64..3600,
    ) {
        let settings = VpaSettings::default();
        let mut target = VpaTarget::default();
        let mut obs = Vec::new();
        for (i, usage) in cpu.iter().enumerate() {
            obs.push(Observation::Usage(UsageSample { pod: "p".into(), container: "c".into(), resource: Resource::Cpu, usage: *usage, at: Time::from_unix_seconds(T0 + i as i64 * step_s) }));
        }
        for (i, usage) in memory.iter().enumerate() {
            obs.push(Observation::Usage(UsageSample { pod: "p".into(), container: "c".into(), resource: Resource::Memory, usage: *usage, at: Time::from_unix_seconds(T0 + i as i64 * step_s) }));
        }
        let report = target.record_samples(&obs, None, &settings, Time::from_unix_seconds(T0));
        prop_assert_eq!(report.discarded_samples, 0);
        let rec = target.recommend(None, &[], &settings);
        prop_assert_eq!(rec.containers.len(), 1);
        let c = &rec.containers[0];
        for r in Resource::ALL {
            let (lo, t, hi) = (c.lower_bound.get(r).unwrap(), c.target.get(r).unwrap(), c.upper_bound.get(r).unwrap());
            prop_assert!(lo <= t && t <= hi, "{:?}: {} <= {} <= {} fails", r, lo, t, hi);
        }
    }

    /// The persisted state round-trips exactly and recommends the same.
    #[test]
    fn target_state_serde_round_trip(
        cpu in prop::collection::vec((0i64..8000, 1i64..7200), 1..100),
    ) {
        let settings = VpaSettings::default();
        let mut target = VpaTarget::default();
        let mut t = T0;
        let obs: Vec<Observation> = cpu.iter().flat_map(|(usage, dt)| {
            t += dt;
            [Resource::Cpu, Resource::Memory].map(|resource| Observation::Usage(UsageSample {
                pod: "p".into(), container: "c".into(), resource, usage: usage * 100_000, at: Time::from_unix_seconds(t) }))
        }).collect();
        target.record_samples(&obs, None, &settings, Time::from_unix_seconds(T0));
        let json = serde_json::to_string(&target).unwrap();
        let back: VpaTarget = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(&back, &target);
        prop_assert_eq!(back.recommend(None, &[], &settings), target.recommend(None, &[], &settings));
    }

    /// CPU samples are accepted exactly when strictly later than every earlier accepted one.
    #[test]
    fn cpu_ordering(times in prop::collection::vec(0i64..1000, 1..100)) {
        let mut agg = AggregateContainerState::new(&VpaSettings::default(), Time::from_unix_seconds(T0));
        let mut c = autoscaled_engine::vpa::ContainerState::default();
        let mut latest: Option<i64> = None;
        let mut accepted = 0u64;
        for t in times {
            let ok = c.add_cpu_sample(&mut agg, Time::from_unix_seconds(T0 + t), 100, &mut ());
            let want = latest.is_none_or(|l| t > l);
            prop_assert_eq!(ok, want);
            if ok { latest = Some(t); accepted += 1; }
        }
        prop_assert_eq!(agg.total_samples_count, accepted);
    }
}

proptest! {
    /// Arbitrary usage values and timestamps (the whole `i64` range, out of order, OOMs
    /// included) never panic or overflow (tests build with overflow checks), and the
    /// state still serializes.
    #[test]
    fn arbitrary_input_never_panics(
        events in prop::collection::vec(
            (0u8..3, 0usize..3, any::<i64>(), prop_oneof![any::<i64>(), (-(1i64 << 40))..(1i64 << 40)]),
            1..80,
        ),
        interval_s in 1u64..(400 * 86_400),
        count in 0i64..100,
        half_life_s in 1u64..(400 * 86_400),
    ) {
        let settings = VpaSettings {
            memory_aggregation_interval: std::time::Duration::from_secs(interval_s),
            memory_aggregation_interval_count: count,
            cpu_histogram_decay_half_life: std::time::Duration::from_secs(half_life_s),
            memory_histogram_decay_half_life: std::time::Duration::from_secs(half_life_s),
            ..Default::default()
        };
        prop_assert!(settings.validate().is_ok());
        let mut target = VpaTarget::default();
        let names = ["a", "b", "c"];
        let obs: Vec<Observation> = events
            .iter()
            .map(|&(kind, who, value, at)| {
                let at = Time::from_unix_nanos(at);
                let container = names[who].to_owned();
                match kind {
                    0 => Observation::Usage(UsageSample { pod: "p".into(), container, resource: Resource::Cpu, usage: value, at }),
                    1 => Observation::Usage(UsageSample { pod: "p".into(), container, resource: Resource::Memory, usage: value, at }),
                    _ => Observation::Oom(autoscaled_engine::vpa::OomEvent { pod: "p".into(), container, at, memory_bytes: value }),
                }
            })
            .collect();
        let now = Time::from_unix_seconds(T0);
        let report = target.record_samples(&obs, None, &settings, now);
        prop_assert_eq!(
            report.accepted_samples + report.discarded_samples + report.accepted_oom_events + report.discarded_oom_events,
            obs.len() as u64
        );
        let rec = target.recommend(None, &[], &settings);
        for c in &rec.containers {
            for r in Resource::ALL {
                for v in [c.target.get(r), c.lower_bound.get(r), c.upper_bound.get(r)].into_iter().flatten() {
                    prop_assert!((0..=100_000_000_000_000).contains(&v), "{v} out of range");
                }
            }
        }
        let _ = target.save_checkpoints(now);
        target.garbage_collect(None, &settings, now);
        prop_assert!(serde_json::to_string(&target).is_ok());
    }
}
