//! Trace files: one `RecommendRequest` per line in the proto3 JSON mapping (the exact requests
//! an adapter sends, with the `evaluation_time` they were decided at), read and written through
//! `prost-reflect` as `autoscalectl recommend` reads its request file, so that grpcurl, the Go
//! client and a shell `jq` see the same lines. Blank lines and lines starting with `#` are
//! skipped.

use std::{path::Path, sync::OnceLock};

use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};

use crate::client::{ClientError, parse_recommend_request};
use autoscaled_wire::pb::{self, v1 as api};

fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(pb::FILE_DESCRIPTOR_SET)
            .expect("the descriptor set embedded by build.rs decodes")
    })
}

/// Parses a trace; errors name `FILE:LINE`.
pub(crate) fn parse_trace(
    text: &str,
    origin: &str,
) -> Result<Vec<api::RecommendRequest>, ClientError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        out.push(parse_recommend_request(
            line,
            &format!("{origin}:{}", i + 1),
        )?);
    }
    Ok(out)
}

/// Reads a trace file.
pub fn read_trace(path: &Path) -> Result<Vec<api::RecommendRequest>, ClientError> {
    let text = std::fs::read_to_string(path).map_err(|source| ClientError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse_trace(&text, &path.display().to_string())
}

/// Parses a message of type `full_name` from proto3 JSON (unknown fields rejected).
pub(crate) fn parse_json<M: prost::Message + Default>(
    json: &str,
    full_name: &'static str,
    origin: &str,
) -> Result<M, ClientError> {
    let json_error = |detail: String| ClientError::Json {
        path: origin.to_owned(),
        message: full_name,
        detail,
    };
    let descriptor =
        pool()
            .get_message_by_name(full_name)
            .ok_or_else(|| ClientError::Descriptor {
                message: full_name,
                detail: "not in the descriptor set".to_owned(),
            })?;
    let mut de = serde_json::Deserializer::from_str(json);
    let message =
        DynamicMessage::deserialize(descriptor, &mut de).map_err(|e| json_error(e.to_string()))?;
    de.end().map_err(|e| json_error(e.to_string()))?;
    message
        .transcode_to::<M>()
        .map_err(|e| ClientError::Descriptor {
            message: full_name,
            detail: e.to_string(),
        })
}

/// One trace line: the request in compact proto3 JSON, defaults omitted.
pub(crate) fn to_line(request: &api::RecommendRequest) -> Result<String, ClientError> {
    const NAME: &str = "autoscaled.v1.RecommendRequest";
    let descriptor_error = |detail: String| ClientError::Descriptor {
        message: NAME,
        detail,
    };
    let descriptor = pool()
        .get_message_by_name(NAME)
        .ok_or_else(|| descriptor_error("not in the descriptor set".to_owned()))?;
    let dynamic = DynamicMessage::decode(
        descriptor,
        prost::Message::encode_to_vec(request).as_slice(),
    )
    .map_err(|e| descriptor_error(e.to_string()))?;
    let mut serializer = serde_json::Serializer::new(Vec::new());
    dynamic
        .serialize_with_options(&mut serializer, &SerializeOptions::new())
        .map_err(|e| descriptor_error(e.to_string()))?;
    String::from_utf8(serializer.into_inner()).map_err(|e| descriptor_error(e.to_string()))
}
