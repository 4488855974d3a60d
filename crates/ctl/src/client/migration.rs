//! The text rendering of the migration extensions' report (`docs/migration.md`) for
//! `autoscalectl recommend` and `autoscalectl history`: which rules fired, the removal
//! candidates and the stored counters. Empty without extensions, so existing output is
//! unchanged.

use std::fmt::Write as _;

use autoscaled_wire::pb::v1 as api;

/// An `Extensions:` section, or nothing when the decision had none.
pub(crate) fn describe_extensions(report: Option<&api::ExtensionReport>) -> String {
    let Some(r) = report else {
        return String::new();
    };
    let mut out = String::from("Extensions:\n");
    if let Some(active) = r.active {
        let _ = writeln!(out, "  Active:  {active}");
    }
    for rule in &r.rules {
        let _ = writeln!(out, "  {}:  {}", rule.rule, rule.detail);
    }
    if !r.removal_candidates.is_empty() {
        out.push_str("  Remove first:\n");
        for c in &r.removal_candidates {
            match c.usage_ratio {
                Some(ratio) => {
                    let _ = writeln!(out, "    {}  {} ({ratio:.2})", c.pod, c.reason);
                }
                None => {
                    let _ = writeln!(out, "    {}  {}", c.pod, c.reason);
                }
            }
        }
    }
    if let Some(state) = &r.state {
        for h in &state.metric_health {
            let _ = writeln!(
                out,
                "  Failures of {}:  {} in a row",
                h.metric, h.consecutive_failures
            );
        }
        if state.scaled_to_zero {
            out.push_str("  Scaled to zero by autoscaled:  true\n");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_rules_candidates_and_counters_and_nothing_without_a_report() {
        assert_eq!(describe_extensions(None), "");
        let text = describe_extensions(Some(&api::ExtensionReport {
            rules: vec![api::FiredRule {
                rule: "fallback.target".into(),
                detail: "External/queue failed 3 times in a row".into(),
            }],
            active: Some(true),
            removal_candidates: vec![api::RemovalCandidate {
                pod: "p3".into(),
                reason: "NotReady".into(),
                usage_ratio: None,
            }],
            state: Some(api::ExtensionState {
                metric_health: vec![api::MetricHealth {
                    metric: "External/queue".into(),
                    consecutive_failures: 3,
                    first_failure_time: None,
                }],
                ..Default::default()
            }),
            ..Default::default()
        }));
        assert!(text.contains("fallback.target:  External/queue failed 3 times in a row"));
        assert!(text.contains("p3  NotReady"));
        assert!(text.contains("Failures of External/queue:  3 in a row"));
    }
}
