//! Cases of kind `aggregate`: observations folded into a target's aggregations, compared
//! step by step.

use super::*;

pub(super) fn default_decaying(ctx: &Ctx, kind: HistogramKind) -> DecayingHistogram {
    match kind {
        HistogramKind::Cpu => DecayingHistogram::new(
            HistogramOptions::cpu(),
            duration_nanos(ctx.settings.cpu_histogram_decay_half_life),
        ),
        HistogramKind::Memory => DecayingHistogram::new(
            HistogramOptions::memory(),
            duration_nanos(ctx.settings.memory_histogram_decay_half_life),
        ),
    }
}

pub(super) fn aggregate_checkpoint(
    ctx: &Ctx,
    v: &AggregateCheckpointJson,
) -> Result<AggregateCheckpoint, String> {
    let hist = |key: &str, h: &Option<HistogramCheckpointJson>| match h {
        None => Ok(HistogramCheckpoint::default()),
        Some(h) => histogram_checkpoint(ctx, h).map_err(prefix(key)),
    };
    Ok(AggregateCheckpoint {
        version: v.version.0.clone().unwrap_or_default(),
        first_sample_start: v.first_sample_at_s.map(|s| ctx.at(s)),
        last_sample_start: v.last_sample_at_s.map(|s| ctx.at(s)),
        total_samples_count: v.total_samples_count.map_or(0, |n| n.0).max(0) as u64,
        cpu_histogram: hist("cpu_histogram", &v.cpu_histogram)?,
        memory_histogram: hist("memory_histogram", &v.memory_histogram)?,
    })
}

pub(super) fn observation_from_step(
    ctx: &Ctx,
    step: &ObservationStep,
    oom: bool,
) -> Result<Observation, String> {
    let pod = step.pod.or("pod-1").to_owned();
    let container = step.container.or("app").to_owned();
    let at = ctx.at(step.at_s.unwrap_or(0.0));
    let value = step.value.0;
    Ok(if oom {
        Observation::Oom(OomEvent {
            pod,
            container,
            at,
            memory_bytes: value,
        })
    } else {
        Observation::Usage(UsageSample {
            pod,
            container,
            resource: step.resource.get("resource")?.into(),
            usage: value,
            at,
        })
    })
}

pub(super) fn run_aggregate(ctx: &Ctx, case: &Value) -> R {
    let case: AggregateCase = schema::parse(case)?;
    let mut target = VpaTarget::default();
    let settings = &ctx.settings;
    for (i, step) in case.steps.iter().flatten().enumerate() {
        let at_step = |e: String| format!("steps[{i}] ({}): {e}", step.op());
        aggregate_step(ctx, settings, &mut target, step).map_err(at_step)?;
    }
    Ok(())
}

pub(super) fn aggregate_step(
    ctx: &Ctx,
    settings: &VpaSettings,
    target: &mut VpaTarget,
    step: &AggregateStep,
) -> R {
    match step {
        AggregateStep::Sample(s) | AggregateStep::Oom(s) => {
            let oom = matches!(step, AggregateStep::Oom(_));
            let o = observation_from_step(ctx, s, oom)?;
            let at = ctx.at(s.at_s.unwrap_or(0.0));
            let accepted = target.record_observation(&o, None, settings, at, &mut ());
            if let Some(b) = s.expect_accepted {
                check_eq("accepted", b, accepted)?;
            }
            Ok(())
        }
        AggregateStep::SetState(s) => {
            let creation = s.creation_at_s.map(|t| ctx.at(t));
            let agg = target.aggregate_mut(
                s.container.or("app"),
                settings,
                creation.unwrap_or(ctx.at(0.0)),
            );
            if let Some(t) = creation {
                agg.creation_time = t;
            }
            if let Some(t) = s.first_sample_at_s {
                agg.first_sample_start = Some(ctx.at(t));
            }
            if let Some(t) = s.last_sample_at_s {
                agg.last_sample_start = Some(ctx.at(t));
            }
            if let Some(n) = s.total_samples_count {
                agg.total_samples_count = n.0.max(0) as u64;
            }
            Ok(())
        }
        AggregateStep::HistogramAdd(s) => {
            let at = ctx.at(s.at_s.unwrap_or(0.0));
            let agg = target.aggregate_mut(s.container.or("app"), settings, ctx.at(0.0));
            let h = match s.histogram {
                HistogramName::Cpu => &mut agg.cpu,
                HistogramName::Memory => &mut agg.memory,
            };
            h.add_sample(s.value, s.weight, at)
                .map_err(|e| e.to_string())
        }
        AggregateStep::SaveCheckpoint { container, expect } => {
            let cp = target
                .aggregate_mut(container.or("app"), settings, ctx.at(0.0))
                .save_checkpoint();
            let Some(e) = expect else {
                return Ok(());
            };
            no_rest("expect", &e.rest)?;
            check_error("save_checkpoint", e.error, None)?;
            if let Some(v) = e.version.0.as_deref() {
                check_eq("version", v, cp.version.as_str())?;
            }
            if let Some(t) = e.first_sample_at_s {
                check_eq(
                    "first_sample_at_s",
                    t.map(|s| ctx.at(s)),
                    cp.first_sample_start,
                )?;
            }
            if let Some(t) = e.last_sample_at_s {
                check_eq(
                    "last_sample_at_s",
                    t.map(|s| ctx.at(s)),
                    cp.last_sample_start,
                )?;
            }
            if let Some(n) = e.total_samples_count {
                check_eq("total_samples_count", n.0, cp.total_samples_count as i64)?;
            }
            if let Some(n) = e.cpu_bucket_count {
                check_eq(
                    "cpu_bucket_count",
                    n.0,
                    cp.cpu_histogram.bucket_weights.len() as i64,
                )?;
            }
            if let Some(n) = e.memory_bucket_count {
                check_eq(
                    "memory_bucket_count",
                    n.0,
                    cp.memory_histogram.bucket_weights.len() as i64,
                )?;
            }
            Ok(())
        }
        AggregateStep::LoadCheckpoint {
            container,
            checkpoint,
            expect,
        } => {
            let cp = checkpoint
                .as_ref()
                .map(|c| aggregate_checkpoint(ctx, c))
                .transpose()?;
            // Upstream `LoadFromCheckpoint` on the aggregation itself (adds buckets, overwrites
            // counters and reference, may fail half-way).
            let failed = match cp {
                None => Some("missing checkpoint".to_owned()),
                Some(cp) => target
                    .aggregate_mut(container.or("app"), settings, ctx.at(0.0))
                    .load_checkpoint(&cp)
                    .err()
                    .map(|e| e.to_string()),
            };
            if let Some(e) = expect {
                no_rest("expect", &e.rest)?;
            }
            check_error(
                "load_checkpoint",
                expect.as_ref().and_then(|e| e.error),
                failed,
            )
        }
        AggregateStep::CheckpointView { at_s, expect } => {
            let now = ctx.at(at_s.unwrap_or(0.0));
            let view = target.checkpoint_view(now);
            for (name, e) in expect.iter().flatten() {
                no_rest(&format!("expect.{name}"), &e.rest)?;
                let agg = view
                    .get(name)
                    .ok_or_else(|| format!("{name}: no aggregation"))?;
                if let Some(b) = e.memory_is_empty {
                    check_eq(&format!("{name}.memory_is_empty"), b, agg.memory.is_empty())?;
                }
                if let Some(b) = e.cpu_is_empty {
                    check_eq(&format!("{name}.cpu_is_empty"), b, agg.cpu.is_empty())?;
                }
            }
            Ok(())
        }
        AggregateStep::Expect(e) => aggregate_expect(ctx, target, e),
    }
}

pub(super) fn histogram_equals(
    ctx: &Ctx,
    what: &str,
    kind: HistogramKind,
    got: &DecayingHistogram,
    spec: &Option<HistogramAdds>,
) -> R {
    let mut want = default_decaying(ctx, kind);
    for a in spec.iter().flat_map(|s| s.adds.iter().flatten()) {
        want.add_sample(a.value, a.weight, ctx.at(a.at_s.unwrap_or(0.0)))
            .map_err(|e| format!("{what}: {e}"))?;
    }
    if got.equals(&want) {
        Ok(())
    } else {
        Err(format!("{what}: expected {want:?}, got {got:?}"))
    }
}

pub(super) fn aggregate_expect(ctx: &Ctx, target: &VpaTarget, e: &AggregateExpect) -> R {
    no_rest("expect", &e.rest)?;
    for (name, x) in e.by_container_name.iter().flatten() {
        no_rest(&format!("by_container_name.{name}"), &x.rest)?;
        let agg = target
            .aggregates
            .get(name)
            .ok_or_else(|| format!("by_container_name.{name}: no aggregation"))?;
        if let Some(n) = x.total_samples_count {
            check_eq(
                &format!("{name}.total_samples_count"),
                n.0,
                agg.total_samples_count as i64,
            )?;
        }
        if let Some(spec) = &x.cpu_histogram_equals {
            histogram_equals(
                ctx,
                &format!("{name}.cpu_histogram"),
                HistogramKind::Cpu,
                &agg.cpu,
                spec,
            )?;
        }
        if let Some(spec) = &x.memory_histogram_equals {
            histogram_equals(
                ctx,
                &format!("{name}.memory_histogram"),
                HistogramKind::Memory,
                &agg.memory,
                spec,
            )?;
        }
    }
    if let Some(name) = e.container.0.as_deref() {
        let agg = target
            .aggregates
            .get(name)
            .ok_or_else(|| format!("{name}: no aggregation"))?;
        if let Some(t) = e.first_sample_at_s {
            check_eq(
                "first_sample_at_s",
                t.map(|s| ctx.at(s)),
                agg.first_sample_start,
            )?;
        }
        if let Some(t) = e.last_sample_at_s {
            check_eq(
                "last_sample_at_s",
                t.map(|s| ctx.at(s)),
                agg.last_sample_start,
            )?;
        }
        if let Some(n) = e.total_samples_count {
            check_eq("total_samples_count", n.0, agg.total_samples_count as i64)?;
        }
        if let Some(b) = e.cpu_is_empty {
            check_eq("cpu_is_empty", b, agg.cpu.is_empty())?;
        }
        if let Some(b) = e.memory_is_empty {
            check_eq("memory_is_empty", b, agg.memory.is_empty())?;
        }
        let window = ctx.aggregation_policy().window_length_ns();
        for x in e.is_expired_at.iter().flatten() {
            let expired = x.expired.ok_or("is_expired_at.expired: missing")?;
            check_eq(
                &format!("is_expired_at({})", x.at_s),
                expired,
                agg.is_expired(ctx.at(x.at_s), window),
            )?;
        }
    }
    Ok(())
}
