//! `--check`: the file as the agent reads it, then every Prometheus query run once (so a
//! PromQL mistake is named by its field before the agent runs, not at its first period) and
//! every policy a target names read from the server (its metrics checked against the file's
//! queries, as each period checks them). `--offline` checks the file alone.

use crate::{
    config::{Config, Request, Source, Target, check_metrics},
    http::Client,
    prometheus,
    run::{self, Server},
};

/// One line per target: `ok ...` or `rejected targets[i] (key): field: why`; whether all
/// were good.
pub async fn check(config: &Config, offline: bool) -> (Vec<String>, bool) {
    let mut lines = Vec::new();
    let mut good = config.rejected.is_empty();
    let http = Client::default();
    let server = if offline || !config.targets.iter().any(|t| t.policy.is_some()) {
        None
    } else {
        match run::service(&config.server) {
            Ok(s) => Some(s),
            Err(e) => {
                lines.push(format!("rejected server: {e}"));
                good = false;
                None
            }
        }
    };
    for (i, target) in config.targets.iter().enumerate() {
        let problem = if offline {
            None
        } else {
            online(target, &http, server.as_ref()).await.err()
        };
        match problem {
            None => lines.push(format!(
                "ok       {} (every {:?}{}{})",
                target.key,
                target.sync_period,
                if target.shadow { ", shadow" } else { "" },
                target
                    .policy
                    .as_ref()
                    .map_or(String::new(), |p| format!(", policy {p}")),
            )),
            Some(why) => {
                good = false;
                lines.push(format!("rejected targets[{i}] ({}): {why}", target.key));
            }
        }
    }
    lines.extend(config.rejected.iter().map(|l| format!("rejected {l}")));
    (lines, good)
}

/// The target's policy from the server, and each of its queries run once.
async fn online(target: &Target, http: &Client, server: Option<&Server>) -> Result<(), String> {
    let mut metrics = target.spec.metrics.clone();
    if let (Some(policy), Some(server)) = (&target.policy, server) {
        let p = server.policy(policy).await?;
        if metrics.is_empty() {
            metrics = p.spec.map(|s| s.metrics).unwrap_or_default();
        }
    }
    let Source::Prometheus(source) = &target.source else {
        return Ok(());
    };
    if target.spec.metrics.is_empty() {
        check_metrics(&metrics, &source.metrics, source.pods.as_ref())?;
    }
    let (url, timeout, pods, queries) =
        (&source.url, source.timeout, &source.pods, &source.metrics);
    let mut all: Vec<(String, String)> = queries
        .iter()
        .map(|(name, q)| (format!("metrics.{name}"), q.query.clone()))
        .collect();
    if let Some(p) = pods {
        all.push(("pods.ready".to_owned(), p.ready.clone()));
        if let Some(s) = &p.start_time {
            all.push(("pods.start_time".to_owned(), s.clone()));
        }
        for (resource, r) in &p.requests {
            if let Request::Query(q) = r {
                all.push((format!("pods.requests.{resource}"), q.clone()));
            }
        }
    }
    for (field, query) in all {
        prometheus::query(http, url, &query, timeout)
            .await
            .map_err(|e| format!("{field}: {e} (--offline checks the file alone)"))?;
    }
    Ok(())
}
