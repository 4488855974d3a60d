//! Applies a decision: the scheduler's scale command, or a webhook (POST JSON, a timeout per
//! attempt, retries with doubling backoff). An error is the message the agent reports to the
//! service as the scale's failure (AbleToScale=False/FailedUpdateScale).

use std::time::Duration;

use hyper::Method;
use serde::Serialize;

use crate::{
    command,
    config::{Actuator, Target},
    http::Client,
};

/// What a webhook receives.
#[derive(Debug, Serialize)]
pub struct ScaleRequest<'a> {
    pub target_key: &'a str,
    pub current_replicas: i32,
    pub desired_replicas: i32,
    /// RFC 3339, the decision's evaluation time.
    pub evaluation_time: String,
    /// Why, in Kubernetes' words (`pods metric inflight above target`).
    pub reason: &'a str,
}

/// Applies `desired` to `target` (at `current`).
pub async fn apply(
    client: &Client,
    target: &Target,
    request: &ScaleRequest<'_>,
) -> Result<(), String> {
    match &target.actuator {
        Actuator::Command(spec) => {
            let argv = command::render(
                &spec.argv,
                &target.key,
                request.current_replicas,
                request.desired_replicas,
            );
            command::run_spec(spec, argv).await.map(|_| ())
        }
        Actuator::Webhook {
            url,
            timeout,
            retries,
            backoff,
        } => {
            let body = serde_json::to_vec(request).map_err(|e| e.to_string())?;
            let mut wait = (*backoff).min(Duration::from_secs(60));
            let mut last = String::new();
            for attempt in 0..=*retries {
                if attempt > 0 {
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(60));
                }
                match client
                    .send(
                        Method::POST,
                        url,
                        "application/json",
                        body.clone(),
                        *timeout,
                    )
                    .await
                {
                    Ok(answer) if answer.status.is_success() => return Ok(()),
                    // A client error will not change on a retry, but a timeout or a rate limit
                    // may.
                    Ok(answer)
                        if answer.status.is_client_error()
                            && answer.status.as_u16() != 408
                            && answer.status.as_u16() != 429 =>
                    {
                        return Err(webhook_error(url, &answer));
                    }
                    Ok(answer) => last = webhook_error(url, &answer),
                    Err(e) => last = format!("webhook {}: {e}", crate::http::shown(url)),
                }
            }
            Err(format!("{last} (after {} attempts)", retries + 1))
        }
    }
}

fn webhook_error(url: &str, answer: &crate::http::Answer) -> String {
    let body = String::from_utf8_lossy(&answer.body);
    let body: String = body.trim().chars().take(200).collect();
    format!(
        "webhook {} answered {}: {body}",
        crate::http::shown(url),
        answer.status
    )
}
