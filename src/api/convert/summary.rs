//! `ListTargets` with `include_summaries`: each target's newest decision run as a
//! `TargetSummary`, and the page that holds them, kept under the response budget of
//! `GetHistory` pages so that a gRPC client's default 4 MiB limit is never crossed.

use prost::Message;

use super::{decision_record, history::RESPONSE_BUDGET_BYTES, page_token, wire::Violations};
use crate::{
    api::status::ApiError,
    engine::hpa::{
        defaults::DEFAULT_CPU_UTILIZATION,
        spec::{MetricSpec, MetricTarget, MetricTargetType},
    },
    pb::v1 as pb,
    store::DecisionEntry,
};

/// Checks a List request's `prefix`: empty (every key) or a string a key could start with
/// (at most `max_key_bytes`, no control characters). A prefix no key can have is refused
/// rather than answered with an empty list, so that a typo in a script is an error.
pub(crate) fn key_prefix(prefix: &str, max_key_bytes: usize) -> Result<(), ApiError> {
    let mut v = Violations::default();
    if prefix.len() > max_key_bytes {
        v.add(
            "prefix",
            format!(
                "must be at most {max_key_bytes} bytes, got {}",
                prefix.len()
            ),
        );
    } else if prefix.chars().any(char::is_control) {
        v.add("prefix", "must not contain control characters");
    }
    v.into_result(())
}

/// The spec's target of a metric, on the wire. An empty spec is Kubernetes' default metric
/// (cpu at 80% utilization), as the engine evaluated it.
fn metric_target(metrics: &[MetricSpec], index: usize) -> Option<pb::MetricTarget> {
    let target: MetricTarget = match metrics.get(index) {
        None if metrics.is_empty() => MetricTarget {
            target_type: MetricTargetType::Utilization,
            average_utilization: Some(DEFAULT_CPU_UTILIZATION),
            average_value: None,
            value: None,
        },
        None | Some(MetricSpec::Unknown { .. }) => return None,
        Some(
            MetricSpec::Resource { target, .. }
            | MetricSpec::ContainerResource { target, .. }
            | MetricSpec::Pods { target, .. }
            | MetricSpec::Object { target, .. }
            | MetricSpec::External { target, .. },
        ) => target.clone(),
    };
    let r#type = match target.target_type {
        MetricTargetType::Utilization => pb::MetricTargetType::Utilization,
        MetricTargetType::AverageValue => pb::MetricTargetType::AverageValue,
        MetricTargetType::Value => pb::MetricTargetType::Value,
    };
    Some(pb::MetricTarget {
        r#type: r#type as i32,
        average_utilization: target.average_utilization,
        average_value_milli: target.average_value,
        value_milli: target.value,
    })
}

/// The summary of `key` from its newest run (GetHistory's record of that run, without pod
/// names); only the key when it has none.
pub(crate) fn target_summary(key: &str, newest: Option<&DecisionEntry>) -> pb::TargetSummary {
    let Some(e) = newest else {
        return pb::TargetSummary {
            target_key: key.to_owned(),
            ..Default::default()
        };
    };
    let record = decision_record(e);
    let metrics = record
        .metrics
        .into_iter()
        .zip(&e.decision.metrics)
        .map(|(mut status, outcome)| {
            // Names are for one target's describe; a fleet listing keeps the counts.
            if let Some(g) = status.pod_groups.as_mut() {
                g.unready.clear();
                g.missing.clear();
                g.ignored.clear();
            }
            pb::MetricSummary {
                status: Some(status),
                target: metric_target(&e.metrics, outcome.index),
            }
        })
        .collect();
    pb::TargetSummary {
        target_key: key.to_owned(),
        evaluation_time: record.evaluation_time,
        current_replicas: record.current_replicas,
        desired_replicas: record.desired_replicas,
        min_replicas: e.inputs.as_ref().map(|i| i.min_replicas.unwrap_or(1)),
        max_replicas: e.inputs.as_ref().map(|i| i.max_replicas),
        metrics,
        conditions: record.conditions,
        explanation: record.explanation,
        run_count: record.run_count,
        first_evaluation_time: record.first_evaluation_time,
        shadow: record.shadow,
        schedule: record.schedule,
        predictive: record.predictive,
    }
}

/// A `ListTargets` response with summaries, filled one target at a time: [`Self::push`]
/// refuses a summary that would take the response over [`RESPONSE_BUDGET_BYTES`] (the first
/// is always taken), and the page then ends with a token after the last key it holds.
pub(crate) struct SummaryPage {
    response: pb::ListTargetsResponse,
    used: usize,
    cut: bool,
}

impl SummaryPage {
    pub(crate) fn new() -> Self {
        SummaryPage {
            response: pb::ListTargetsResponse::default(),
            used: 0,
            cut: false,
        }
    }

    /// Adds `key`'s summary; false (and nothing added) when the budget is spent.
    pub(crate) fn push(&mut self, key: &str, newest: Option<&DecisionEntry>) -> bool {
        let summary = target_summary(key, newest);
        let framed = |len: usize| len + 1 + prost::length_delimiter_len(len);
        let cost = framed(summary.encoded_len()) + framed(key.len());
        // Room for the token that would continue after this key (its hex).
        let token = framed(2 * key.len());
        if self.used + cost + token > RESPONSE_BUDGET_BYTES && !self.response.target_keys.is_empty()
        {
            self.cut = true;
            return false;
        }
        self.used += cost;
        self.response.target_keys.push(key.to_owned());
        self.response.summaries.push(summary);
        true
    }

    /// The response: `next_page_token` continues after the last key held when the budget cut
    /// the page, else it is the scan's own.
    pub(crate) fn finish(mut self, next_page_token: String) -> pb::ListTargetsResponse {
        self.response.next_page_token = match (self.cut, self.response.target_keys.last()) {
            (true, Some(last)) => page_token(last),
            _ => next_page_token,
        };
        self.response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_no_key_can_have_are_invalid_argument_naming_the_field() {
        assert!(key_prefix("", 8).is_ok());
        assert!(key_prefix("ns/", 8).is_ok());
        for bad in ["ns/\n", "123456789"] {
            let status = tonic::Status::from(key_prefix(bad, 8).unwrap_err());
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{bad:?}");
            assert!(status.message().contains("prefix"), "{}", status.message());
        }
    }

    #[test]
    fn a_page_of_summaries_stays_under_the_budget_and_resumes_after_its_last_key() {
        let mut page = SummaryPage::new();
        let long = "k".repeat(400_000);
        let mut held = 0;
        for i in 0..20 {
            if !page.push(&format!("{long}{i:02}"), None) {
                break;
            }
            held += 1;
        }
        assert!((1..20).contains(&held), "{held}");
        let response = page.finish(String::new());
        assert!(response.encoded_len() <= RESPONSE_BUDGET_BYTES);
        assert_eq!(
            response.next_page_token,
            page_token(&format!("{long}{:02}", held - 1))
        );
        assert_eq!(response.summaries.len(), response.target_keys.len());
    }
}
