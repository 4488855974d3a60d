//! The targets at a glance: `autoscalectl get targets` (one line per target, as `kubectl get
//! hpa`) and `autoscalectl describe target KEY` (as `kubectl describe hpa`).
//!
//! Both read `ListTargets` with summaries: each target's newest decision in one call per page,
//! instead of one `GetHistory` per target. `describe` adds one `GetHistory` page for the
//! recent decisions.

use std::{fmt::Write as _, time::Duration};

use prost_types::Timestamp;
use tonic::transport::Channel;

use super::{
    ClientError, aligned, describe_conditions, describe_explanation, metric_label, metric_value,
    quantity, rpc_error, security::ClientSecurity, table, timestamp, to_json,
};
use autoscaled_wire::pb::v1::{
    self as api, horizontal_autoscaler_client::HorizontalAutoscalerClient,
};

/// The client with the token interceptor, as `ClientSecurity::horizontal` returns it.
type Client = HorizontalAutoscalerClient<
    tonic::service::interceptor::InterceptedService<Channel, super::security::Credentials>,
>;

const LIST_TARGETS_RESPONSE: &str = "autoscaled.v1.ListTargetsResponse";
/// Targets per page asked of the server (its cap).
const PAGE_SIZE: i32 = 1000;
/// Pages read per listing: with the server's cap of 1000 keys a page, a million targets.
const MAX_PAGES: usize = 1000;
/// Decisions `describe target` shows.
const RECENT_DECISIONS: i32 = 10;

/// How `get targets` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum GetOutput {
    /// More columns: the run, the decision path and each condition's reason.
    Wide,
    /// The merged `ListTargetsResponse` in the proto3 JSON mapping.
    Json,
    /// The same as YAML.
    Yaml,
}

/// Every target under `prefix` with its summary, following the pages to the end.
async fn list_summaries(
    client: &mut Client,
    prefix: &str,
) -> Result<Vec<api::TargetSummary>, ClientError> {
    let mut summaries = Vec::new();
    let mut page_token = String::new();
    for _ in 0..MAX_PAGES {
        let page = client
            .list_targets(api::ListTargetsRequest {
                page_size: PAGE_SIZE,
                page_token,
                prefix: prefix.to_owned(),
                include_summaries: true,
            })
            .await
            .map_err(rpc_error("ListTargets"))?
            .into_inner();
        summaries.extend(page.summaries);
        if page.next_page_token.is_empty() {
            return Ok(summaries);
        }
        page_token = page.next_page_token;
    }
    Err(ClientError::Usage(format!(
        "more than {MAX_PAGES} pages of targets: narrow the listing with --prefix"
    )))
}

/// One listing, rendered.
async fn render_targets(
    client: &mut Client,
    prefix: &str,
    output: Option<GetOutput>,
) -> Result<String, ClientError> {
    let summaries = list_summaries(client, prefix).await?;
    let now = now();
    match output {
        None => Ok(targets_table(&summaries, now, false)),
        Some(GetOutput::Wide) => Ok(targets_table(&summaries, now, true)),
        Some(format @ (GetOutput::Json | GetOutput::Yaml)) => {
            let merged = api::ListTargetsResponse {
                target_keys: summaries.iter().map(|s| s.target_key.clone()).collect(),
                next_page_token: String::new(),
                summaries,
            };
            let json = to_json(&merged, LIST_TARGETS_RESPONSE)?;
            if format == GetOutput::Json {
                return Ok(json);
            }
            let value: serde_json::Value =
                serde_json::from_str(&json).map_err(|e| ClientError::Descriptor {
                    message: LIST_TARGETS_RESPONSE,
                    detail: e.to_string(),
                })?;
            serde_norway::to_string(&value).map_err(|e| ClientError::Descriptor {
                message: LIST_TARGETS_RESPONSE,
                detail: e.to_string(),
            })
        }
    }
}

/// What `get targets` does between two listings of `--watch`.
#[derive(Clone, Copy, Debug)]
pub struct Watch {
    /// Time between two listings (at least one second: a watch must not load the server).
    pub interval: Duration,
    /// Listings before it stops by itself; `None`: until SIGINT.
    pub rounds: Option<u64>,
}

/// The shortest `--interval`.
pub const MIN_WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// `autoscalectl get targets`: one listing, or with `watch` one every interval (each printed
/// as it comes) until SIGINT or the rounds are done.
pub async fn get_targets(
    addr: &str,
    security: &ClientSecurity,
    prefix: &str,
    output: Option<GetOutput>,
    watch: Option<Watch>,
) -> Result<String, ClientError> {
    let mut client = security.horizontal(addr).await?;
    let Some(watch) = watch else {
        return render_targets(&mut client, prefix, output).await;
    };
    let interval = watch.interval.max(MIN_WATCH_INTERVAL);
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    let mut round = 0u64;
    loop {
        let text = render_targets(&mut client, prefix, output).await?;
        if !super::write_stdout(&format!("{}\n", text.trim_end())) {
            return Ok(String::new());
        }
        round += 1;
        if watch.rounds.is_some_and(|n| round >= n) {
            return Ok(String::new());
        }
        tokio::select! {
            _ = &mut interrupted => return Ok(String::new()),
            () = tokio::time::sleep(interval) => {}
        }
    }
}

/// `autoscalectl describe target KEY`: the newest decision with its spec bounds and metric
/// targets, its conditions and explanation, then the recent decisions with their runs.
pub async fn describe_target(
    addr: &str,
    security: &ClientSecurity,
    key: &str,
) -> Result<String, ClientError> {
    let mut client = security.horizontal(addr).await?;
    // The key as a prefix: it sorts first among the keys it begins, so one key is enough.
    let page = client
        .list_targets(api::ListTargetsRequest {
            page_size: 1,
            prefix: key.to_owned(),
            include_summaries: true,
            ..Default::default()
        })
        .await
        .map_err(rpc_error("ListTargets"))?
        .into_inner();
    let summary = page
        .summaries
        .into_iter()
        .find(|s| s.target_key == key)
        .ok_or_else(|| ClientError::Rpc {
            rpc: "ListTargets",
            code: tonic::Code::NotFound,
            message: format!("no target {key:?}"),
        })?;
    let history = client
        .get_history(api::GetHistoryRequest {
            target_key: key.to_owned(),
            page_size: RECENT_DECISIONS,
            newest_first: true,
            ..Default::default()
        })
        .await
        .map_err(rpc_error("GetHistory"))?
        .into_inner();
    Ok(describe_summary(&summary, &history, now()))
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// An age the way kubectl prints one (`45s`, `3m20s`, `5m`, `2h10m`, `3d`): seconds from
/// `t` to `now`; `<unknown>` without a time.
pub fn age(t: Option<&Timestamp>, now: i64) -> String {
    let Some(t) = t else {
        return "<unknown>".to_owned();
    };
    let s = now.saturating_sub(t.seconds).max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86_400);
    if s < 120 {
        format!("{s}s")
    } else if s < 600 && s % 60 != 0 {
        format!("{m}m{}s", s % 60)
    } else if s < 10_800 {
        format!("{m}m")
    } else if s < 28_800 && m % 60 != 0 {
        format!("{h}h{}m", m % 60)
    } else if s < 172_800 {
        format!("{h}h")
    } else {
        format!("{d}d")
    }
}

/// One metric as `kubectl get hpa`'s TARGETS column shows it: `cpu: 80%/50%`.
fn target_cell(m: &api::MetricSummary) -> String {
    let status = m.status.clone().unwrap_or_default();
    let unknown = || "<unknown>".to_owned();
    let current = status
        .current_average_utilization
        .map(|p| format!("{p}%"))
        .or_else(|| status.current_value_milli.map(quantity))
        .or_else(|| status.current_average_value_milli.map(quantity))
        .unwrap_or_else(unknown);
    let wanted = m
        .target
        .and_then(|t| match api::MetricTargetType::try_from(t.r#type) {
            Ok(api::MetricTargetType::Utilization) => {
                t.average_utilization.map(|p| format!("{p}%"))
            }
            Ok(api::MetricTargetType::AverageValue) => t.average_value_milli.map(quantity),
            Ok(api::MetricTargetType::Value) => t.value_milli.map(quantity),
            _ => None,
        })
        .unwrap_or_else(unknown);
    let name = if status.container.is_empty() {
        status.name
    } else {
        format!("{}/{}", status.name, status.container)
    };
    format!("{name}: {current}/{wanted}")
}

fn condition<'a>(s: &'a api::TargetSummary, kind: &str) -> Option<&'a api::Condition> {
    s.conditions.iter().find(|c| c.r#type == kind)
}

/// The short status of a target: what stops or limits it first (AbleToScale False,
/// ScalingActive False, ScalingLimited True, by that order), else AbleToScale's reason;
/// `shadow:` before it for a target in shadow mode.
pub fn short_status(s: &api::TargetSummary) -> String {
    let when = |kind: &str, status: &str| {
        condition(s, kind)
            .filter(|c| c.status == status)
            .map(|c| c.reason.clone())
    };
    let status = when("AbleToScale", "False")
        .or_else(|| when("ScalingActive", "False"))
        .or_else(|| when("ScalingLimited", "True"))
        .or_else(|| condition(s, "AbleToScale").map(|c| c.reason.clone()))
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "-".to_owned());
    if s.shadow {
        format!("shadow:{status}")
    } else {
        status
    }
}

/// `autoscalectl delete target KEY`: DeleteTarget.
pub async fn delete_target(
    addr: &str,
    security: &ClientSecurity,
    key: &str,
) -> Result<String, ClientError> {
    security
        .horizontal(addr)
        .await?
        .delete_target(api::DeleteTargetRequest {
            target_key: key.to_owned(),
        })
        .await
        .map_err(rpc_error("DeleteTarget"))?;
    Ok(format!("target/{key} deleted"))
}

/// The `get targets` table (kubectl's columns, without REFERENCE: the key is the name).
pub fn targets_table(summaries: &[api::TargetSummary], now: i64, wide: bool) -> String {
    if summaries.is_empty() {
        return "No targets found.".to_owned();
    }
    let optional = |v: Option<i32>| v.map_or_else(|| "<unknown>".to_owned(), |v| v.to_string());
    let mut headers = vec![
        "NAME", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "DESIRED", "LAST", "STATUS",
    ];
    if wide {
        headers.extend(["RUN", "SINCE", "PATH", "ABLE", "ACTIVE", "LIMITED"]);
    }
    let rows: Vec<Vec<String>> = summaries
        .iter()
        .map(|s| {
            let decided = s.evaluation_time.is_some();
            let targets = if s.metrics.is_empty() {
                "<none>".to_owned()
            } else {
                s.metrics
                    .iter()
                    .map(target_cell)
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let replicas = |n: i32| {
                if decided {
                    n.to_string()
                } else {
                    "-".to_owned()
                }
            };
            let mut row = vec![
                s.target_key.clone(),
                targets,
                optional(s.min_replicas),
                optional(s.max_replicas),
                replicas(s.current_replicas),
                replicas(s.desired_replicas),
                age(s.evaluation_time.as_ref(), now),
                short_status(s),
            ];
            if wide {
                let reason = |kind: &str| {
                    condition(s, kind)
                        .map_or_else(|| "-".to_owned(), |c| format!("{}={}", c.status, c.reason))
                };
                row.extend([
                    s.run_count.to_string(),
                    age(s.first_evaluation_time.as_ref(), now),
                    s.explanation
                        .as_ref()
                        .map(|e| e.path.clone())
                        .filter(|p| !p.is_empty())
                        .unwrap_or_else(|| "-".to_owned()),
                    reason("AbleToScale"),
                    reason("ScalingActive"),
                    reason("ScalingLimited"),
                ]);
            }
            row
        })
        .collect();
    // kubectl's tables are not indented.
    table(&headers, rows)
        .lines()
        .enumerate()
        .filter(|(i, _)| *i != 1)
        .map(|(_, l)| l.strip_prefix("  ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `describe target`: the summary in the manner of `kubectl describe hpa`, then the recent
/// decisions (newest first) with their runs.
pub fn describe_summary(s: &api::TargetSummary, history: &api::TargetHistory, now: i64) -> String {
    let optional = |v: Option<i32>| v.map_or_else(|| "<unknown>".to_owned(), |v| v.to_string());
    let mut rows = vec![("Name:".to_owned(), s.target_key.clone())];
    if s.evaluation_time.is_none() {
        rows.push(("Last evaluation:".to_owned(), "<none>".to_owned()));
        return aligned(&rows);
    }
    rows.push((
        "Last evaluation:".to_owned(),
        format!(
            "{} ({} ago)",
            timestamp(s.evaluation_time.as_ref()),
            age(s.evaluation_time.as_ref(), now)
        ),
    ));
    rows.push(("Metrics:".to_owned(), "( current / target )".to_owned()));
    for m in &s.metrics {
        let status = m.status.clone().unwrap_or_default();
        rows.push((
            format!("  {}:", metric_label(&status, m.target.as_ref())),
            metric_value(&status, m.target.as_ref()),
        ));
    }
    if s.metrics.is_empty() {
        rows.push(("  <none evaluated>".to_owned(), String::new()));
    }
    rows.push(("Min replicas:".to_owned(), optional(s.min_replicas)));
    rows.push(("Max replicas:".to_owned(), optional(s.max_replicas)));
    rows.push((
        "Current replicas:".to_owned(),
        s.current_replicas.to_string(),
    ));
    rows.push((
        "Desired replicas:".to_owned(),
        s.desired_replicas.to_string(),
    ));
    if s.shadow {
        rows.push((
            "Mode:".to_owned(),
            "shadow (decisions recorded as if applied; nothing scaled)".to_owned(),
        ));
    }
    rows.push((
        "Decided so:".to_owned(),
        format!(
            "{} time(s) in a row since {} ({} ago)",
            s.run_count,
            timestamp(s.first_evaluation_time.as_ref()),
            age(s.first_evaluation_time.as_ref(), now)
        ),
    ));
    // The policy and the group are in the logged decision, not in the summary.
    if let Some(newest) = history
        .decisions
        .first()
        .filter(|d| d.evaluation_time == s.evaluation_time)
    {
        rows.extend(super::policy_and_budget(
            newest.policy.as_ref(),
            newest.budget.as_ref(),
        ));
    }
    rows.extend(super::schedule_rows(s.schedule.as_ref()));
    rows.extend(super::predictive_rows(s.predictive.as_ref()));
    let mut out = aligned(&rows);
    out.push_str(&describe_conditions(&s.conditions));
    let statuses: Vec<api::MetricStatus> = s
        .metrics
        .iter()
        .map(|m| m.status.clone().unwrap_or_default())
        .collect();
    // The pod names are in the logged decision, not in the summary.
    let newest = history
        .decisions
        .first()
        .filter(|d| d.evaluation_time == s.evaluation_time);
    out.push_str(&describe_explanation(
        s.explanation.as_ref(),
        newest.map_or(&statuses, |d| &d.metrics),
    ));
    out.push_str(&super::migration::describe_extensions(
        newest.and_then(|d| d.extensions.as_ref()),
    ));
    out.push_str("Recent decisions (newest first):\n");
    out.push_str(&super::runs_table(&history.decisions));
    if !history.next_page_token.is_empty() {
        let _ = writeln!(
            out,
            "  (older decisions: autoscalectl history {})",
            s.target_key
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(seconds: i64) -> Option<Timestamp> {
        Some(Timestamp { seconds, nanos: 0 })
    }

    fn summary() -> api::TargetSummary {
        api::TargetSummary {
            target_key: "ns/web".into(),
            evaluation_time: ts(1000),
            current_replicas: 3,
            desired_replicas: 4,
            min_replicas: Some(1),
            max_replicas: Some(4),
            metrics: vec![api::MetricSummary {
                status: Some(api::MetricStatus {
                    r#type: api::MetricSourceType::Resource as i32,
                    name: "cpu".into(),
                    current_average_utilization: Some(80),
                    current_average_value_milli: Some(800),
                    proposed_replicas: Some(5),
                    ..Default::default()
                }),
                target: Some(api::MetricTarget {
                    r#type: api::MetricTargetType::Utilization as i32,
                    average_utilization: Some(50),
                    ..Default::default()
                }),
            }],
            conditions: vec![
                api::Condition {
                    r#type: "AbleToScale".into(),
                    status: "True".into(),
                    reason: "SucceededRescale".into(),
                    message: "m".into(),
                },
                api::Condition {
                    r#type: "ScalingLimited".into(),
                    status: "True".into(),
                    reason: "TooManyReplicas".into(),
                    message: "the desired replica count is more than the maximum".into(),
                },
            ],
            run_count: 2,
            first_evaluation_time: ts(985),
            ..Default::default()
        }
    }

    #[test]
    fn ages_read_like_kubectl() {
        let at = |s: i64| age(ts(0).as_ref(), s);
        assert_eq!(at(45), "45s");
        assert_eq!(at(200), "3m20s");
        assert_eq!(at(300), "5m");
        assert_eq!(at(3000), "50m");
        assert_eq!(at(7800 + 3 * 3600), "5h10m");
        assert_eq!(at(30 * 3600), "30h");
        assert_eq!(at(3 * 86_400), "3d");
        assert_eq!(age(None, 0), "<unknown>");
    }

    #[test]
    fn one_line_per_target_like_kubectl_get_hpa() {
        let never = api::TargetSummary {
            target_key: "ns/old".into(),
            ..Default::default()
        };
        let text = targets_table(&[summary(), never], 1030, false);
        let lines: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            lines[0],
            [
                "NAME", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "DESIRED", "LAST", "STATUS"
            ]
        );
        assert_eq!(
            lines[1],
            [
                "ns/web",
                "cpu:",
                "80%/50%",
                "1",
                "4",
                "3",
                "4",
                "30s",
                "TooManyReplicas"
            ]
        );
        assert_eq!(
            lines[2],
            [
                "ns/old",
                "<none>",
                "<unknown>",
                "<unknown>",
                "-",
                "-",
                "<unknown>",
                "-"
            ]
        );
        let wide = targets_table(&[summary()], 1030, true);
        assert!(
            wide.lines()
                .nth(1)
                .unwrap()
                .split_whitespace()
                .collect::<Vec<_>>()
                .ends_with(&[
                    "2",
                    "45s",
                    "-",
                    "True=SucceededRescale",
                    "-",
                    "True=TooManyReplicas"
                ]),
            "{wide}"
        );
        assert_eq!(targets_table(&[], 0, false), "No targets found.");
    }

    #[test]
    fn describe_shows_targets_bounds_conditions_and_the_run() {
        let history = api::TargetHistory {
            target_key: "ns/web".into(),
            decisions: vec![api::DecisionRecord {
                evaluation_time: ts(1000),
                current_replicas: 3,
                desired_replicas: 4,
                run_count: 2,
                first_evaluation_time: ts(985),
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = describe_summary(&summary(), &history, 1030);
        let has = |words: &[&str]| {
            text.lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == words)
        };
        assert!(
            text.contains("resource cpu on pods  (as a percentage of request):")
                && text.contains("80% (800m) / 50%"),
            "{text}"
        );
        assert!(has(&["Max", "replicas:", "4"]), "{text}");
        assert!(has(&["Desired", "replicas:", "4"]), "{text}");
        assert!(text.contains("2 time(s) in a row since"), "{text}");
        assert!(
            text.lines().any(|l| l.contains("TooManyReplicas")
                && l.contains("the desired replica count is more than the maximum")),
            "{text}"
        );
        assert!(text.contains("Recent decisions (newest first):"), "{text}");
    }
}
