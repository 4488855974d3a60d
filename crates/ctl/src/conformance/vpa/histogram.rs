//! Cases of kinds `histogram` and `container`: a histogram's adds, decay and checkpoints,
//! and a container's calls into its histograms.

use super::*;

#[derive(Clone, Copy)]
pub(super) struct HistogramSpec {
    options: HistogramOptions,
    half_life_ns: i64,
}

impl HistogramSpec {
    fn parse(v: &HistogramSpecJson) -> Result<Self, String> {
        let f = |x: Option<f64>, key: &str| required(x, key);
        let options = match v.buckets.as_str() {
            "linear" => HistogramOptions::linear(
                f(v.max_value, "max_value")?,
                f(v.bucket_size, "bucket_size")?,
                f(v.epsilon, "epsilon")?,
            ),
            "exponential" => HistogramOptions::exponential(
                f(v.max_value, "max_value")?,
                f(v.first_bucket_size, "first_bucket_size")?,
                f(v.ratio, "ratio")?,
                f(v.epsilon, "epsilon")?,
            ),
            "cpu" => Ok(HistogramOptions::cpu()),
            "memory" => Ok(HistogramOptions::memory()),
            other => return Err(format!("buckets: unknown scheme {other:?}")),
        }
        .map_err(|e| e.to_string())?;
        let half_life_ns = v.half_life_s.map_or(0, |s| duration_nanos(secs(s)));
        Ok(Self {
            options,
            half_life_ns,
        })
    }

    fn fresh(&self) -> DecayingHistogram {
        DecayingHistogram::new(self.options, self.half_life_ns)
    }
}

/// Applies `steps` in order; a step subtracts when its `op` is `"subtract"` or, for a
/// top-level step, when `subtract` says so.
pub(super) fn apply_adds<'a>(
    ctx: &Ctx,
    h: &mut DecayingHistogram,
    steps: impl IntoIterator<Item = (&'a AddStep, bool)>,
) -> R {
    for (i, (s, subtract)) in steps.into_iter().enumerate() {
        let at = ctx.at(s.at_s.unwrap_or(0.0));
        let r = if subtract || s.op.0.as_deref() == Some("subtract") {
            h.subtract_sample(s.value, s.weight, at)
        } else {
            h.add_sample(s.value, s.weight, at)
        };
        r.map_err(|e| format!("steps[{i}]: {e}"))?;
    }
    Ok(())
}

pub(super) fn adds(steps: &Option<Vec<AddStep>>) -> impl Iterator<Item = (&AddStep, bool)> {
    steps.iter().flatten().map(|s| (s, false))
}

pub(super) fn histogram_checkpoint(
    ctx: &Ctx,
    v: &HistogramCheckpointJson,
) -> Result<HistogramCheckpoint, String> {
    let mut bucket_weights = BTreeMap::new();
    for (k, w) in v.bucket_weights.iter().flatten() {
        let bucket: i64 = k
            .parse()
            .map_err(|_| format!("bucket_weights: bad index {k:?}"))?;
        bucket_weights.insert(bucket, *w);
    }
    Ok(HistogramCheckpoint {
        reference: v.reference_at_s.map(|s| ctx.at(s)),
        bucket_weights,
        total_weight: v.total_weight.unwrap_or(0.0),
    })
}

pub(super) fn check_error(what: &str, expected_error: Option<bool>, failed: Option<String>) -> R {
    match (expected_error, failed) {
        (Some(true), None) => Err(format!("{what}: expected an error, got none")),
        (Some(false) | None, Some(e)) => Err(format!("{what}: expected no error, got {e}")),
        _ => Ok(()),
    }
}

pub(super) fn run_histogram(ctx: &Ctx, case: &Value) -> R {
    let case: HistogramCase = schema::parse(case)?;
    let spec = HistogramSpec::parse(&case.histogram).map_err(prefix("histogram"))?;
    let mut h = spec.fresh();
    let mut last_save: Option<HistogramCheckpoint> = None;
    for (i, step) in case.steps.iter().flatten().enumerate() {
        let at = |what: String| format!("steps[{i}] ({}): {what}", step.op());
        histogram_step(ctx, &spec, &mut h, &mut last_save, step).map_err(at)?;
    }
    Ok(())
}

pub(super) fn histogram_step(
    ctx: &Ctx,
    spec: &HistogramSpec,
    h: &mut DecayingHistogram,
    last_save: &mut Option<HistogramCheckpoint>,
    step: &HistogramStep,
) -> R {
    match step {
        HistogramStep::Add(s) => apply_adds(ctx, h, [(s, false)]),
        HistogramStep::Subtract(s) => apply_adds(ctx, h, [(s, true)]),
        HistogramStep::Merge { steps } => {
            let mut other = spec.fresh();
            apply_adds(ctx, &mut other, adds(steps))?;
            h.merge(&other).map_err(|e| e.to_string())
        }
        HistogramStep::SaveCheckpoint { expect } => {
            let cp = h.save_checkpoint();
            if let Some(e) = expect {
                no_rest("expect", &e.rest)?;
                if let Some(t) = e.total_weight {
                    check_f64("total_weight", t, cp.total_weight, None)?;
                }
                for (k, w) in e.bucket_weights.iter().flatten() {
                    let bucket: i64 = k
                        .parse()
                        .map_err(|_| format!("bucket_weights: bad index {k:?}"))?;
                    check_eq(
                        &format!("bucket_weights[{k}]"),
                        *w,
                        cp.bucket_weights.get(&bucket).map(|w| u64::from(*w)),
                    )?;
                }
                if let Some(n) = e.bucket_count {
                    check_eq("bucket_count", n.0, cp.bucket_weights.len() as i64)?;
                }
                if let Some(Int(n)) = e.bucket_count_min
                    && (cp.bucket_weights.len() as i64) < n
                {
                    return Err(format!(
                        "bucket_count_min: expected at least {n}, got {}",
                        cp.bucket_weights.len()
                    ));
                }
                if let Some(b) = e.total_weight_nonzero {
                    check_eq("total_weight_nonzero", b, cp.total_weight != 0.0)?;
                }
                if let Some(b) = e.reference_equals_histogram {
                    check_eq(
                        "reference_equals_histogram",
                        b,
                        cp.reference == h.reference(),
                    )?;
                }
            }
            *last_save = Some(cp);
            Ok(())
        }
        HistogramStep::LoadCheckpoint(step) => {
            if let Some(e) = &step.expect {
                no_rest("expect", &e.rest)?;
            }
            let checkpoint = if step.from_last_save.unwrap_or(false) {
                Some(
                    last_save
                        .clone()
                        .ok_or("from_last_save: nothing saved yet")?,
                )
            } else {
                step.checkpoint
                    .as_ref()
                    .map(|c| histogram_checkpoint(ctx, c))
                    .transpose()?
            };
            let failed = if step.into.0.as_deref() == Some("new") {
                let mut fresh = spec.fresh();
                let r = fresh.load_checkpoint(checkpoint.as_ref());
                if r.is_ok() {
                    *h = fresh;
                }
                r.err()
            } else {
                h.load_checkpoint(checkpoint.as_ref()).err()
            };
            check_error(
                "load_checkpoint",
                step.expect.as_ref().and_then(|e| e.error),
                failed.map(|e| e.to_string()),
            )
        }
        HistogramStep::Expect(e) => histogram_expect(ctx, spec, h, e),
    }
}

pub(super) fn histogram_expect(
    ctx: &Ctx,
    spec: &HistogramSpec,
    h: &DecayingHistogram,
    e: &HistogramExpect,
) -> R {
    no_rest("expect", &e.rest)?;
    if let Some(b) = e.is_empty {
        check_eq("is_empty", b, h.is_empty())?;
    }
    for p in e.percentiles.iter().flatten() {
        check_f64(
            &format!("percentile({})", p.p),
            p.value,
            h.percentile(p.p),
            p.tolerance,
        )?;
    }
    if let Some(t) = e.total_weight {
        check_f64("total_weight", t, h.histogram().total_weight(), e.tolerance)?;
    }
    for (k, w) in e.bucket_weights.iter().flatten() {
        let bucket: usize = k
            .parse()
            .map_err(|_| format!("bucket_weights: bad index {k:?}"))?;
        check_f64(
            &format!("bucket_weights[{k}]"),
            *w,
            h.histogram().bucket_weight(bucket),
            e.tolerance,
        )?;
    }
    if let Some(eq) = &e.equals {
        let mut other = spec.fresh();
        let none = None;
        let steps = eq.as_ref().map_or(&none, |eq| &eq.steps);
        apply_adds(ctx, &mut other, adds(steps)).map_err(prefix("equals"))?;
        if !h.equals(&other) {
            return Err(format!(
                "equals: expected a histogram equal to {other:?}, got {h:?}"
            ));
        }
    }
    let options = h.histogram().options();
    if let Some(n) = e.num_buckets {
        check_eq("num_buckets", n.0, options.num_buckets() as i64)?;
    }
    if let Some(eps) = e.epsilon {
        check_f64("epsilon", eps, options.epsilon(), None)?;
    }
    for (k, v) in e.bucket_starts.iter().flatten() {
        let bucket: usize = k
            .parse()
            .map_err(|_| format!("bucket_starts: bad index {k:?}"))?;
        check_f64(
            &format!("bucket_starts[{k}]"),
            *v,
            options.bucket_start(bucket),
            e.tolerance,
        )?;
    }
    for f in e.find_bucket.iter().flatten() {
        check_eq(
            &format!("find_bucket({})", f.value),
            f.bucket.0,
            options.find_bucket(f.value) as i64,
        )?;
    }
    if let Some(b) = e.reference_is_set {
        check_eq("reference_is_set", b, h.reference().is_some())?;
    }
    if let Some(r) = e.reference_at_s.map(|s| ctx.at(s)) {
        check_eq("reference_at_s", Some(r), h.reference())?;
    }
    Ok(())
}

// === kind: container ===

pub(super) fn run_container(ctx: &Ctx, case: &Value) -> R {
    let case: ContainerCase = schema::parse(case)?;
    let policy = ctx.aggregation_policy();
    let mut aggregate = AggregateContainerState::new(&ctx.settings, ctx.at(0.0));
    let mut container = ContainerState::default();
    let mut calls: Vec<HistogramCall> = Vec::new();
    for (i, step) in case.steps.iter().flatten().enumerate() {
        let at = ctx.at(step.at_s.unwrap_or(0.0));
        let value = step.value.0;
        let accepted = match step.op.as_str() {
            "sample" => match Resource::from(step.resource.get("resource")?) {
                Resource::Cpu => container.add_cpu_sample(&mut aggregate, at, value, &mut calls),
                Resource::Memory => container.add_memory_sample(
                    &mut aggregate,
                    at,
                    value,
                    false,
                    &policy,
                    &mut calls,
                ),
            },
            "oom" => container
                .record_oom(&mut aggregate, at, value, &policy, &mut calls)
                .is_ok(),
            other => return Err(format!("steps[{i}]: unknown op {other:?}")),
        };
        if let Some(b) = step.expect_accepted {
            check_eq(&format!("steps[{i}] accepted"), b, accepted)?;
        }
    }
    if let Some(e) = case.expect {
        if let Some(e) = &e {
            no_rest("expect", &e.rest)?;
        }
        let expected: Vec<HistogramCall> = e
            .and_then(|e| e.histogram_calls)
            .unwrap_or_default()
            .into_iter()
            .map(|c| HistogramCall {
                histogram: c.histogram.into(),
                op: match c.call {
                    CallName::Add => HistogramOp::Add,
                    CallName::Subtract => HistogramOp::Subtract,
                },
                value: c.value,
                weight: c.weight,
                at: ctx.at(c.at_s.unwrap_or(0.0)),
            })
            .collect();
        compare_calls(ctx, &expected, &calls)?;
    }
    Ok(())
}

pub(super) fn describe_call(ctx: &Ctx, c: &HistogramCall) -> String {
    let at_s = (c.at.unix_nanos() - ctx.t0_ns) as f64 / 1e9;
    format!(
        "{:?} {:?} value={} weight={} at_s={}",
        c.histogram, c.op, c.value, c.weight, at_s
    )
}

/// Multiset comparison (upstream mocks check the calls as a set).
pub(super) fn compare_calls(ctx: &Ctx, expected: &[HistogramCall], got: &[HistogramCall]) -> R {
    let mut unmatched: Vec<&HistogramCall> = got.iter().collect();
    for e in expected {
        match unmatched.iter().position(|g| *g == e) {
            Some(i) => {
                unmatched.remove(i);
            }
            None => {
                let made: Vec<String> = got.iter().map(|c| describe_call(ctx, c)).collect();
                return Err(format!(
                    "histogram_calls: expected [{}], got calls [{}]",
                    describe_call(ctx, e),
                    made.join("; ")
                ));
            }
        }
    }
    if let Some(extra) = unmatched.first() {
        return Err(format!(
            "histogram_calls: expected no further call, got [{}]",
            describe_call(ctx, extra)
        ));
    }
    Ok(())
}
