//! Instant queries against Prometheus' HTTP API (`POST /api/v1/query`). A query that fails
//! (Prometheus down, a PromQL error, a timeout, a non-numeric answer) is an error with
//! Prometheus' own words, which the caller turns into the metric's failure: never a zero.

use std::{collections::BTreeMap, time::Duration};

use hyper::{Method, StatusCode};
use serde::Deserialize;

use crate::http::{Client, form_encode};

/// One series of a vector result: its labels, its value (NaN and infinities are dropped:
/// they are no sample) and the instant Prometheus gave it (Unix seconds: the query's
/// evaluation time for an instant query).
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
    pub time: f64,
}

#[derive(Deserialize)]
struct Envelope {
    status: String,
    #[serde(default)]
    error: Option<String>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    data: Option<Data>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct VectorItem {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

/// Runs `query` at Prometheus' `url` (base, e.g. `http://127.0.0.1:9090`): a vector's series,
/// or a scalar as one series without labels.
pub async fn query(
    client: &Client,
    url: &str,
    query: &str,
    timeout: Duration,
) -> Result<Vec<Sample>, String> {
    let endpoint = format!("{}/api/v1/query", url.trim_end_matches('/'));
    let body = format!(
        "query={}&timeout={}ms",
        form_encode(query),
        timeout.as_millis()
    );
    let answer = client
        .send(
            Method::POST,
            &endpoint,
            "application/x-www-form-urlencoded",
            body.into_bytes(),
            timeout,
        )
        .await
        .map_err(|e| format!("Prometheus at {} unreachable: {e}", crate::http::shown(url)))?;
    let envelope: Result<Envelope, _> = serde_json::from_slice(&answer.body);
    let envelope = match envelope {
        Ok(e) => e,
        Err(_) => {
            let text = String::from_utf8_lossy(&answer.body);
            let text: String = text.chars().take(200).collect();
            return Err(format!(
                "Prometheus at {} answered {} without its JSON: {text}",
                crate::http::shown(url),
                answer.status
            ));
        }
    };
    if envelope.status != "success" || answer.status != StatusCode::OK {
        return Err(format!(
            "Prometheus refused the query ({} {}): {}",
            answer.status.as_u16(),
            envelope.error_type.unwrap_or_default(),
            envelope.error.unwrap_or_default()
        ));
    }
    let data = envelope
        .data
        .ok_or("Prometheus answered success without data")?;
    let number = |s: &str| s.parse::<f64>().ok().filter(|v| v.is_finite());
    match data.result_type.as_str() {
        "vector" => {
            let items: Vec<VectorItem> = serde_json::from_value(data.result)
                .map_err(|e| format!("a vector Prometheus answered cannot be read: {e}"))?;
            Ok(items
                .into_iter()
                .filter_map(|i| {
                    number(&i.value.1).map(|value| Sample {
                        labels: i.metric,
                        value,
                        time: i.value.0,
                    })
                })
                .collect())
        }
        "scalar" => {
            let (time, v): (f64, String) = serde_json::from_value(data.result)
                .map_err(|e| format!("a scalar Prometheus answered cannot be read: {e}"))?;
            Ok(number(&v)
                .map(|value| Sample {
                    labels: BTreeMap::new(),
                    value,
                    time,
                })
                .into_iter()
                .collect())
        }
        other => Err(format!(
            "the query gives a {other}; an instant vector or scalar is needed"
        )),
    }
}

/// The series of `samples` by the value of `label`; series without it are left out (and a
/// second series for one instance is ignored: the first wins).
pub fn by_label(samples: &[Sample], label: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for s in samples {
        if let Some(name) = s.labels.get(label) {
            out.entry(name.clone()).or_insert(s.value);
        }
    }
    out
}

/// A value in base units as milli-units (Kubernetes' `MilliValue`, rounding up as
/// `Quantity` does for fractions of a milli-unit).
pub fn milli(value: f64) -> i64 {
    let m = (value * 1000.0).ceil();
    if m >= i64::MAX as f64 {
        i64::MAX
    } else if m <= i64::MIN as f64 {
        i64::MIN
    } else {
        m as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milli_rounds_up_like_a_quantity() {
        assert_eq!(milli(1.5), 1500);
        assert_eq!(milli(0.0001), 1);
        assert_eq!(milli(15.0), 15000);
    }
}
