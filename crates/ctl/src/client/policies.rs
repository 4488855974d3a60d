//! Policies and scaling groups from the command line (docs/groups.md):
//!
//! * `autoscalectl apply -f FILE.yaml`: puts each document and prints its version (the same
//!   again changes nothing and keeps the version); each document is a `kind: Policy` or
//!   `kind: ScalingGroup`, its other fields those of the message in the proto3 JSON mapping
//!   (written in YAML), e.g. `name`, `spec` (a HorizontalSpec), `capacity`, `memberPrefixes`;
//! * `get policies`, `get groups`: one line each;
//! * `describe group NAME`: the capacity, what each member holds and its fair share;
//! * `delete policy NAME [--force]`, `delete group NAME`.

use std::{fmt::Write as _, path::Path};

use serde::Deserialize as _;

use super::{ClientError, descriptor, rpc_error, security::ClientSecurity};
use autoscaled_wire::pb::v1 as api;

/// One document of an `apply` file.
#[derive(Debug, PartialEq)]
pub enum Applied {
    /// A `kind: Policy`.
    Policy(Box<api::Policy>),
    /// A `kind: ScalingGroup`.
    Group(api::ScalingGroup),
}

/// The documents of an `apply` file (YAML or JSON), in order; `origin` names it in errors.
pub fn parse_apply(text: &str, origin: &str) -> Result<Vec<Applied>, ClientError> {
    let error = |message: &'static str, detail: String| ClientError::Json {
        path: origin.to_owned(),
        message,
        detail,
    };
    let mut out = Vec::new();
    for (index, document) in serde_norway::Deserializer::from_str(text).enumerate() {
        let value = serde_norway::Value::deserialize(document)
            .map_err(|e| error("document", format!("document {}: {e}", index + 1)))?;
        if value.is_null() {
            continue;
        }
        let mut json = serde_json::to_value(&value)
            .map_err(|e| error("document", format!("document {}: {e}", index + 1)))?;
        let kind = json
            .as_object_mut()
            .and_then(|o| o.remove("kind"))
            .and_then(|k| k.as_str().map(str::to_owned))
            .unwrap_or_default();
        let (message, name) = match kind.as_str() {
            "Policy" => ("Policy", "autoscaled.v1.Policy"),
            "ScalingGroup" => ("ScalingGroup", "autoscaled.v1.ScalingGroup"),
            other => {
                return Err(error(
                    "document",
                    format!(
                        "document {}: kind {other:?}: give kind: Policy or kind: ScalingGroup",
                        index + 1
                    ),
                ));
            }
        };
        let dynamic = super::deserialize_named(descriptor(name)?, json)
            .map_err(|e| error(message, format!("document {}: {e}", index + 1)))?;
        let transcode = |e: prost::DecodeError| ClientError::Descriptor {
            message: name,
            detail: e.to_string(),
        };
        out.push(match kind.as_str() {
            "Policy" => Applied::Policy(Box::new(dynamic.transcode_to().map_err(transcode)?)),
            _ => Applied::Group(dynamic.transcode_to().map_err(transcode)?),
        });
    }
    Ok(out)
}

/// `autoscalectl apply -f FILE`: puts each document, one line per document.
pub async fn apply(
    addr: &str,
    security: &ClientSecurity,
    file: &Path,
) -> Result<String, ClientError> {
    let text = std::fs::read_to_string(file).map_err(|source| ClientError::Read {
        path: file.display().to_string(),
        source,
    })?;
    let documents = parse_apply(&text, &file.display().to_string())?;
    let mut client = security.horizontal(addr).await?;
    let mut out = String::new();
    for document in documents {
        match document {
            Applied::Policy(policy) => {
                let put = client
                    .put_policy(api::PutPolicyRequest {
                        policy: Some(*policy),
                        expected_version: None,
                    })
                    .await
                    .map_err(rpc_error("PutPolicy"))?
                    .into_inner();
                let _ = writeln!(out, "policy/{}: version {}", put.name, put.version);
            }
            Applied::Group(group) => {
                let put = client
                    .put_scaling_group(api::PutScalingGroupRequest {
                        group: Some(group),
                        expected_version: None,
                    })
                    .await
                    .map_err(rpc_error("PutScalingGroup"))?
                    .into_inner();
                let _ = writeln!(out, "scalinggroup/{}: version {}", put.name, put.version);
            }
        }
    }
    Ok(out)
}

/// `autoscalectl get policies`: every policy, through all pages.
pub async fn get_policies(addr: &str, security: &ClientSecurity) -> Result<String, ClientError> {
    let mut client = security.horizontal(addr).await?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let mut rows = vec![["NAME", "VERSION", "MIN", "MAX", "METRICS", "AGE"].map(str::to_owned)];
    let mut page_token = String::new();
    loop {
        let page = client
            .list_policies(api::ListPoliciesRequest {
                page_size: 0,
                page_token,
            })
            .await
            .map_err(rpc_error("ListPolicies"))?
            .into_inner();
        for p in page.policies {
            let spec = p.spec.unwrap_or_default();
            rows.push([
                p.name,
                p.version.to_string(),
                spec.min_replicas.map_or("-".into(), |m| m.to_string()),
                if spec.max_replicas == 0 {
                    "-".into()
                } else {
                    spec.max_replicas.to_string()
                },
                spec.metrics
                    .iter()
                    .map(|m| m.name.clone())
                    .collect::<Vec<_>>()
                    .join(","),
                super::targets::age(p.update_time.as_ref(), now),
            ]);
        }
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    Ok(table(&rows))
}

/// `autoscalectl get groups`: every scaling group with its use, through all pages.
pub async fn get_groups(addr: &str, security: &ClientSecurity) -> Result<String, ClientError> {
    let mut client = security.horizontal(addr).await?;
    let mut rows =
        vec![["NAME", "CAPACITY", "USED", "RESIDUAL", "MEMBERS", "SELECTS"].map(str::to_owned)];
    let mut page_token = String::new();
    loop {
        let page = client
            .list_scaling_groups(api::ListScalingGroupsRequest {
                page_size: 0,
                page_token,
            })
            .await
            .map_err(rpc_error("ListScalingGroups"))?
            .into_inner();
        for g in page.groups {
            let status = client
                .get_scaling_group(api::GetScalingGroupRequest {
                    name: g.name.clone(),
                })
                .await
                .map_err(rpc_error("GetScalingGroup"))?
                .into_inner();
            rows.push([
                g.name.clone(),
                g.capacity.to_string(),
                status.used.to_string(),
                status.residual.to_string(),
                status.members.len().to_string(),
                selects(&g),
            ]);
        }
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    Ok(table(&rows))
}

/// `autoscalectl describe group NAME`.
pub async fn describe_group(
    addr: &str,
    security: &ClientSecurity,
    name: &str,
) -> Result<String, ClientError> {
    let status = security
        .horizontal(addr)
        .await?
        .get_scaling_group(api::GetScalingGroupRequest {
            name: name.to_owned(),
        })
        .await
        .map_err(rpc_error("GetScalingGroup"))?
        .into_inner();
    Ok(describe_group_status(&status))
}

/// A group's status in the manner of `kubectl describe`.
pub fn describe_group_status(status: &api::ScalingGroupStatus) -> String {
    let g = status.group.clone().unwrap_or_default();
    let mut out = String::new();
    let _ = writeln!(out, "Name:               {}", g.name);
    let _ = writeln!(out, "Version:            {}", g.version);
    let _ = writeln!(
        out,
        "Capacity:           {} units ({} per replica unless listed)",
        g.capacity, g.units_per_replica
    );
    for c in &g.capacity_schedules {
        let bound = |label: &str, v: Option<i64>| v.map(|v| format!(" {label} {v}"));
        let _ = writeln!(
            out,
            "Capacity schedule:  {} ({} to {}, {}){}{}",
            c.name,
            c.start,
            if c.end.is_empty() {
                c.duration
                    .map_or_else(String::new, |d| format!("+{}s", d.seconds))
            } else {
                c.end.clone()
            },
            c.time_zone,
            bound("at least", c.min_capacity).unwrap_or_default(),
            bound("at most", c.max_capacity).unwrap_or_default(),
        );
    }
    if !g.capacity_schedules.is_empty() {
        let _ = writeln!(
            out,
            "Capacity now:       {} units{}{}",
            status.capacity_in_force,
            if status.capacity_schedules_open.is_empty() {
                String::new()
            } else {
                format!(" (open: {})", status.capacity_schedules_open.join(", "))
            },
            status
                .capacity_next_change
                .as_ref()
                .map_or_else(String::new, |t| format!("; next change {t}")),
        );
    }
    let _ = writeln!(out, "Used:               {} units", status.used);
    let _ = writeln!(out, "Residual:           {} units", status.residual);
    let _ = writeln!(out, "Selects:            {}", selects(&g));
    let _ = writeln!(out, "Members:");
    let mut rows = vec![
        [
            "TARGET",
            "UNCAPPED",
            "CURRENT",
            "DESIRED",
            "FAIR SHARE",
            "MIN",
            "UNITS/REPLICA",
            "HELD",
        ]
        .map(str::to_owned),
    ];
    for m in &status.members {
        rows.push([
            m.target_key.clone(),
            m.uncapped_replicas.to_string(),
            m.current_replicas.to_string(),
            m.desired_replicas.to_string(),
            m.fair_share.to_string(),
            m.min_replicas.to_string(),
            m.units_per_replica.to_string(),
            m.held.to_string(),
        ]);
    }
    if status.members.is_empty() {
        out.push_str("  (none has decided yet)\n");
    } else {
        for line in table(&rows).lines() {
            let _ = writeln!(out, "  {line}");
        }
    }
    out
}

/// `autoscalectl delete policy NAME` / `delete group NAME`.
pub async fn delete(
    addr: &str,
    security: &ClientSecurity,
    what: &str,
    name: &str,
    force: bool,
) -> Result<String, ClientError> {
    let mut client = security.horizontal(addr).await?;
    if what == "policy" {
        client
            .delete_policy(api::DeletePolicyRequest {
                name: name.to_owned(),
                force,
            })
            .await
            .map_err(rpc_error("DeletePolicy"))?;
    } else {
        client
            .delete_scaling_group(api::DeleteScalingGroupRequest {
                name: name.to_owned(),
            })
            .await
            .map_err(rpc_error("DeleteScalingGroup"))?;
    }
    let kind = if what == "policy" {
        "policy"
    } else {
        "scalinggroup"
    };
    Ok(format!("{kind}/{name} deleted"))
}

/// What a group selects, in one cell.
fn selects(g: &api::ScalingGroup) -> String {
    let mut parts: Vec<String> = Vec::new();
    parts.extend(g.member_prefixes.iter().map(|p| format!("{p}*")));
    parts.extend(g.member_policies.iter().map(|p| format!("policy={p}")));
    parts.extend(g.member_keys.iter().cloned());
    parts.join(",")
}

/// Left-aligned columns, two spaces apart (as `kubectl get`).
fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_apply_file_holds_policies_and_groups() {
        let text = r#"
kind: Policy
name: gpu-tier
spec:
  minReplicas: 1
  maxReplicas: 20
  metrics:
    - type: METRIC_SOURCE_TYPE_EXTERNAL
      name: queue
      target: {type: METRIC_TARGET_TYPE_AVERAGE_VALUE, averageValueMilli: 1000}
---
kind: ScalingGroup
name: gpus
capacity: 10
memberPolicies: [gpu-tier]
memberUnits: {inference/llama: 2}
"#;
        let docs = parse_apply(text, "f.yaml").unwrap();
        let Applied::Policy(p) = &docs[0] else {
            panic!("{docs:?}")
        };
        assert_eq!(p.name, "gpu-tier");
        assert_eq!(p.spec.as_ref().unwrap().max_replicas, 20);
        assert_eq!(
            p.spec.as_ref().unwrap().metrics[0]
                .target
                .as_ref()
                .unwrap()
                .average_value_milli,
            Some(1000)
        );
        let Applied::Group(g) = &docs[1] else {
            panic!("{docs:?}")
        };
        assert_eq!((g.name.as_str(), g.capacity), ("gpus", 10));
        assert_eq!(g.member_units["inference/llama"], 2);
        let e = parse_apply("kind: Deployment\nname: x\n", "f.yaml").unwrap_err();
        assert!(e.to_string().contains("kind: Policy"), "{e}");
        let e = parse_apply("kind: ScalingGroup\nnmae: x\n", "f.yaml").unwrap_err();
        assert!(e.to_string().contains("nmae"), "{e}");
    }
}
