//! Count limits checked on the protobuf wire bytes, before prost allocates anything.
//!
//! prost decodes an empty repeated element (2 bytes on the wire: tag and zero length) into a
//! whole struct: a `PodSample` is ~200 bytes, a `ContainerSample` ~120, a map entry ~50-100
//! with its hash table slack. A 4 MiB Recommend of 2.1 M empty pods therefore cost +401 MiB
//! RSS, and one pod with 2.1 M empty containers +1.2 GiB, all before `convert` could
//! count them (issue 8). This module walks the wire format once (tags and lengths only, no
//! allocation, as `prost::encoding::skip_field` does) and counts the occurrences of every
//! repeated or map field that amplifies, against `config.limits`, so a request that breaks a
//! limit is refused at a cost proportional to its size and memory stays within a small
//! multiple of the request (at most `max_pods` pods, `max_containers` containers,
//! `max_samples` map entries, `max_metrics` metric specs, each a few hundred bytes).
//!
//! The walk is lenient: bytes it cannot parse stop it with no verdict, and prost's decode
//! (which accepts exactly the same wire format, so it fails on them too) reports the error.
//! Packed scalars (`values_milli`, `controlled_resources`) are not counted: a decoded scalar
//! is at most 8 bytes for at least one byte on the wire.

use std::any::TypeId;

use crate::{
    limits::Limits,
    pb::v1::{
        GetRecommendationRequest, RecommendBatchRequest, RecommendRequest, RecordUsageRequest,
    },
    status::ApiError,
};

/// Which configured limit a counter is held to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Limit {
    Pods,
    Containers,
    Metrics,
    Samples,
    BatchRequests,
}

impl Limit {
    fn value(self, limits: &Limits) -> usize {
        match self {
            Limit::Pods => limits.max_pods,
            Limit::Containers => limits.max_containers,
            Limit::Metrics => limits.max_metrics,
            Limit::Samples => limits.max_samples,
            Limit::BatchRequests => limits.max_batch_requests,
        }
    }

    fn key(self) -> &'static str {
        match self {
            Limit::Pods => "max_pods",
            Limit::Containers => "max_containers",
            Limit::Metrics => "max_metrics",
            Limit::Samples => "max_samples",
            Limit::BatchRequests => "max_batch_requests",
        }
    }
}

/// A count over the whole request (several fields may add to one counter).
#[derive(Debug)]
struct Counter {
    /// What is counted, for the message ("pods", "metric and resource values").
    what: &'static str,
    limit: Limit,
    /// Counted per request of a batch (a spec's lists: each request has its own); the
    /// others count over the whole batch, so that a batch costs the memory of one request.
    per_request: bool,
}

/// A field of a message the walk looks at; other fields are skipped.
#[derive(Debug)]
struct Field {
    number: u32,
    /// The field's names in JSON: its proto name and its proto3 JSON (lowerCamel) name,
    /// both of which the JSON decoder accepts.
    names: [&'static str; 2],
    /// The field path named in the error (`pods[].containers`).
    path: &'static str,
    /// Index in [`Schema::counters`] this field's occurrences add to.
    counter: Option<usize>,
    /// The element's message, to walk into.
    child: Option<&'static [Field]>,
    /// Each element is one request of a batch: counted against `max_batch_requests`, its
    /// per-request counters start again, and errors inside name it (`requests[].pods`).
    request: bool,
}

/// The fields to count of one request type (opaque: a [`schema_named`] for [`check_json`]).
#[derive(Debug)]
pub struct Schema {
    name: &'static str,
    root: &'static [Field],
    counters: &'static [Counter],
}

const fn field(
    number: u32,
    names: [&'static str; 2],
    path: &'static str,
    counter: Option<usize>,
    child: Option<&'static [Field]>,
) -> Field {
    Field {
        number,
        names,
        path,
        counter,
        child,
        request: false,
    }
}

/// The requests of a batch (see [`Field::request`]), each counted in `counter` and walked
/// as `child`.
const fn requests(
    number: u32,
    names: [&'static str; 2],
    path: &'static str,
    counter: usize,
    child: &'static [Field],
) -> Field {
    Field {
        number,
        names,
        path,
        counter: Some(counter),
        child: Some(child),
        request: true,
    }
}

/// A counter of `what`, held to `limit` over the whole request (a batch's included).
const fn total(what: &'static str, limit: Limit) -> Counter {
    Counter {
        what,
        limit,
        per_request: false,
    }
}

/// A counter held to `limit` in each request of a batch.
const fn each(what: &'static str, limit: Limit) -> Counter {
    Counter {
        what,
        limit,
        per_request: true,
    }
}

// RecommendRequest counters.
const PODS: usize = 0;
const CONTAINERS: usize = 1;
const VALUES: usize = 2;
const METRICS: usize = 3;
const POLICIES: usize = 4;
const OBJECT: usize = 5;
const EXTERNAL: usize = 6;
const UNAVAILABLE: usize = 7;
const ORPHANS: usize = 8;
const BATCH: usize = 9;

const CONTAINER_SAMPLE: &[Field] = &[
    field(
        2,
        ["requests_milli", "requestsMilli"],
        "pods[].containers[].requests_milli",
        Some(VALUES),
        None,
    ),
    field(
        3,
        ["usage_milli", "usageMilli"],
        "pods[].containers[].usage_milli",
        Some(VALUES),
        None,
    ),
];
const POD_SAMPLE: &[Field] = &[
    field(
        7,
        ["requests_milli", "requestsMilli"],
        "pods[].requests_milli",
        Some(VALUES),
        None,
    ),
    field(
        8,
        ["containers", "containers"],
        "pods[].containers",
        Some(CONTAINERS),
        Some(CONTAINER_SAMPLE),
    ),
    field(
        9,
        ["metrics", "metrics"],
        "pods[].metrics",
        Some(VALUES),
        None,
    ),
];
const ORPHAN: &[Field] = &[field(
    2,
    ["metrics", "metrics"],
    "orphan_pod_metrics[].metrics",
    Some(VALUES),
    None,
)];
const SCALING_RULES: &[Field] = &[field(
    3,
    ["policies", "policies"],
    "spec.behavior.policies",
    Some(POLICIES),
    None,
)];
const BEHAVIOR: &[Field] = &[
    field(
        1,
        ["scale_up", "scaleUp"],
        "spec.behavior.scale_up",
        None,
        Some(SCALING_RULES),
    ),
    field(
        2,
        ["scale_down", "scaleDown"],
        "spec.behavior.scale_down",
        None,
        Some(SCALING_RULES),
    ),
];
const HORIZONTAL_SPEC: &[Field] = &[
    field(
        3,
        ["metrics", "metrics"],
        "spec.metrics",
        Some(METRICS),
        None,
    ),
    field(
        4,
        ["behavior", "behavior"],
        "spec.behavior",
        None,
        Some(BEHAVIOR),
    ),
];
const RECOMMEND_FIELDS: &[Field] = &[
    field(4, ["spec", "spec"], "spec", None, Some(HORIZONTAL_SPEC)),
    field(5, ["pods", "pods"], "pods", Some(PODS), Some(POD_SAMPLE)),
    field(
        6,
        ["object_metrics_milli", "objectMetricsMilli"],
        "object_metrics_milli",
        Some(OBJECT),
        None,
    ),
    field(
        7,
        ["external_metrics", "externalMetrics"],
        "external_metrics",
        Some(EXTERNAL),
        None,
    ),
    field(
        8,
        ["unavailable_metrics", "unavailableMetrics"],
        "unavailable_metrics",
        Some(UNAVAILABLE),
        None,
    ),
    field(
        9,
        ["orphan_pod_metrics", "orphanPodMetrics"],
        "orphan_pod_metrics",
        Some(ORPHANS),
        Some(ORPHAN),
    ),
];
/// A RecommendRequest's counters; a batch's are the same, plus its requests (`BATCH`).
const RECOMMEND_COUNTERS: [Counter; 10] = [
    total("pods", Limit::Pods),
    total("containers", Limit::Containers),
    total("metric, request and usage values", Limit::Samples),
    each("metrics", Limit::Metrics),
    each("scaling policies", Limit::Metrics),
    each("object metric values", Limit::Metrics),
    each("external metrics", Limit::Metrics),
    each("unavailable metrics", Limit::Metrics),
    total("orphan pods", Limit::Pods),
    total("requests", Limit::BatchRequests),
];
const RECOMMEND: Schema = Schema {
    name: "RecommendRequest",
    root: RECOMMEND_FIELDS,
    counters: &RECOMMEND_COUNTERS,
};
const RECOMMEND_BATCH: Schema = Schema {
    name: "RecommendBatchRequest",
    root: &[requests(
        1,
        ["requests", "requests"],
        "requests",
        BATCH,
        RECOMMEND_FIELDS,
    )],
    counters: &RECOMMEND_COUNTERS,
};

const RECORD_USAGE: Schema = Schema {
    name: "RecordUsageRequest",
    root: &[
        field(2, ["samples", "samples"], "samples", Some(0), None),
        field(3, ["oom_events", "oomEvents"], "oom_events", Some(0), None),
    ],
    counters: &[total("samples and OOM events", Limit::Samples)],
};

const VERTICAL_POLICY: &[Field] = &[field(
    1,
    ["container_policies", "containerPolicies"],
    "policy.container_policies",
    Some(0),
    None,
)];
const GET_RECOMMENDATION: Schema = Schema {
    name: "GetRecommendationRequest",
    root: &[
        field(
            2,
            ["policy", "policy"],
            "policy",
            None,
            Some(VERTICAL_POLICY),
        ),
        field(
            3,
            ["integer_cpu_containers", "integerCpuContainers"],
            "integer_cpu_containers",
            Some(1),
            None,
        ),
    ],
    counters: &[
        total("container policies", Limit::Containers),
        total("integer-CPU containers", Limit::Containers),
    ],
};

/// The schema of request type `U`, if it has fields that amplify.
pub(crate) fn schema_of<U: 'static>() -> Option<&'static Schema> {
    let id = TypeId::of::<U>();
    if id == TypeId::of::<RecommendRequest>() {
        Some(&RECOMMEND)
    } else if id == TypeId::of::<RecommendBatchRequest>() {
        Some(&RECOMMEND_BATCH)
    } else if id == TypeId::of::<RecordUsageRequest>() {
        Some(&RECORD_USAGE)
    } else if id == TypeId::of::<GetRecommendationRequest>() {
        Some(&GET_RECOMMENDATION)
    } else {
        None
    }
}

/// Most counters of any schema.
const MAX_COUNTERS: usize = 10;
/// Group nesting the walk follows (prost's recursion limit).
const MAX_DEPTH: u32 = 100;

/// Why the walk stopped early.
enum Stop {
    /// The bytes are not valid protobuf: prost will say why.
    Malformed,
    /// A limit is exceeded.
    Exceeded(ApiError),
}

/// Checks the encoded message `bytes` of `schema`'s type against `limits`. `Err` is
/// RESOURCE_EXHAUSTED naming the field and the limit; bytes that are not valid protobuf pass
/// (prost rejects them next).
pub(crate) fn check(schema: &Schema, bytes: &[u8], limits: &Limits) -> Result<(), ApiError> {
    let mut walk = Walk {
        schema,
        limits,
        counts: [0; MAX_COUNTERS],
        request: None,
    };
    match walk.message(schema.root, bytes) {
        Ok(()) | Err(Stop::Malformed) => Ok(()),
        Err(Stop::Exceeded(e)) => Err(e),
    }
}

/// What the requests of one RecommendBatch add up to against the limits a batch is held to
/// (pods, containers and values over all its requests; each request's own lists; the number
/// of requests), counted by the walk [`check`] applies on the server: so that a client making
/// batches (the agent) keeps them within the server's limits by the same rule of what counts.
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchTotals {
    counts: [usize; MAX_COUNTERS],
}

impl BatchTotals {
    /// The totals with one more request (a RecommendRequest's protobuf encoding), or the
    /// RESOURCE_EXHAUSTED the server would answer a batch of them with.
    pub fn with(self, request: &[u8], limits: &Limits) -> Result<BatchTotals, ApiError> {
        let batch = &RECOMMEND_BATCH.root[0];
        let mut walk = Walk {
            schema: &RECOMMEND_BATCH,
            limits,
            counts: self.counts,
            request: None,
        };
        let walked = walk.count(BATCH, batch.path).and_then(|()| {
            walk.enter(batch);
            walk.message(RECOMMEND_FIELDS, request)
        });
        match walked {
            Ok(()) | Err(Stop::Malformed) => Ok(BatchTotals {
                counts: walk.counts,
            }),
            Err(Stop::Exceeded(e)) => Err(e),
        }
    }
}

struct Walk<'a> {
    schema: &'a Schema,
    limits: &'a Limits,
    counts: [usize; MAX_COUNTERS],
    /// Inside a request of a batch: the batch's field (`requests`).
    request: Option<&'static str>,
}

impl Walk<'_> {
    fn message(&mut self, fields: &[Field], mut buf: &[u8]) -> Result<(), Stop> {
        while !buf.is_empty() {
            let key = varint(&mut buf)?;
            let number = u32::try_from(key >> 3).map_err(|_| Stop::Malformed)?;
            match key & 7 {
                2 => {
                    let len = usize::try_from(varint(&mut buf)?).map_err(|_| Stop::Malformed)?;
                    if len > buf.len() {
                        return Err(Stop::Malformed);
                    }
                    let (payload, rest) = buf.split_at(len);
                    buf = rest;
                    if let Some(f) = fields.iter().find(|f| f.number == number) {
                        if let Some(counter) = f.counter {
                            self.count(counter, f.path)?;
                        }
                        if let Some(child) = f.child {
                            self.enter(f);
                            self.message(child, payload)?;
                            self.leave(f);
                        }
                    }
                }
                wire => skip(wire, number, &mut buf, 0)?,
            }
        }
        Ok(())
    }

    /// Into an element of `f`: a request of a batch starts its per-request counts again.
    fn enter(&mut self, f: &Field) {
        if f.request {
            self.request = Some(f.path);
            for (count, counter) in self.counts.iter_mut().zip(self.schema.counters) {
                if counter.per_request {
                    *count = 0;
                }
            }
        }
    }

    fn leave(&mut self, f: &Field) {
        if f.request {
            self.request = None;
        }
    }

    fn count(&mut self, counter: usize, path: &'static str) -> Result<(), Stop> {
        let c = &self.schema.counters[counter];
        let limit = c.limit.value(self.limits);
        self.counts[counter] += 1;
        if self.counts[counter] > limit {
            let (field, within) = match self.request {
                Some(batch) if c.per_request => {
                    (format!("{batch}[].{path}"), "RecommendRequest of the batch")
                }
                Some(batch) => (format!("{batch}[].{path}"), self.schema.name),
                None => (path.to_owned(), self.schema.name),
            };
            return Err(Stop::Exceeded(ApiError::ResourceExhausted {
                field,
                message: format!(
                    "more than {limit} {} in one {within} ({})",
                    c.what,
                    c.limit.key()
                ),
            }));
        }
        Ok(())
    }
}

/// Skips a value of wire type `wire` other than length-delimited (groups included).
fn skip(wire: u64, number: u32, buf: &mut &[u8], depth: u32) -> Result<(), Stop> {
    let take = |buf: &mut &[u8], n: usize| {
        if buf.len() < n {
            return Err(Stop::Malformed);
        }
        *buf = &buf[n..];
        Ok(())
    };
    match wire {
        0 => varint(buf).map(drop),
        1 => take(buf, 8),
        5 => take(buf, 4),
        2 => {
            let len = usize::try_from(varint(buf)?).map_err(|_| Stop::Malformed)?;
            take(buf, len)
        }
        3 => {
            if depth >= MAX_DEPTH {
                return Err(Stop::Malformed);
            }
            loop {
                if buf.is_empty() {
                    return Err(Stop::Malformed);
                }
                let key = varint(buf)?;
                let inner = u32::try_from(key >> 3).map_err(|_| Stop::Malformed)?;
                if key & 7 == 4 {
                    return if inner == number {
                        Ok(())
                    } else {
                        Err(Stop::Malformed)
                    };
                }
                skip(key & 7, inner, buf, depth + 1)?;
            }
        }
        _ => Err(Stop::Malformed),
    }
}

/// The schema of the request message named `full_name` (`autoscaled.v1.RecommendRequest`),
/// for a body that arrives as JSON (Connect): the same counts as on the wire.
pub fn schema_named(full_name: &str) -> Option<&'static Schema> {
    match full_name {
        "autoscaled.v1.RecommendRequest" => Some(&RECOMMEND),
        "autoscaled.v1.RecommendBatchRequest" => Some(&RECOMMEND_BATCH),
        "autoscaled.v1.RecordUsageRequest" => Some(&RECORD_USAGE),
        "autoscaled.v1.GetRecommendationRequest" => Some(&GET_RECOMMENDATION),
        _ => None,
    }
}

/// Nesting the JSON walk follows before it gives up (the JSON decoder's own limit, 128, then
/// refuses the body).
const MAX_JSON_DEPTH: u32 = 64;

/// [`check`] on a proto3 JSON encoding of `schema`'s type: each element of a counted list,
/// and each entry of a counted map, counts as its occurrence on the wire does, by the field's
/// proto or JSON name. A scan of the bytes that allocates nothing but short keys, so a body
/// that breaks a limit is refused before the JSON decoder builds anything from it. Bytes
/// that are not JSON pass (the decoder says why next).
pub fn check_json(schema: &Schema, bytes: &[u8], limits: &Limits) -> Result<(), ApiError> {
    let mut walk = Walk {
        schema,
        limits,
        counts: [0; MAX_COUNTERS],
        request: None,
    };
    let mut json = Json { bytes, pos: 0 };
    match json.object(&mut walk, Some(schema.root), 0) {
        Ok(()) | Err(Stop::Malformed) => Ok(()),
        Err(Stop::Exceeded(e)) => Err(e),
    }
}

/// A cursor over JSON bytes.
struct Json<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Json<'_> {
    fn peek(&mut self) -> Option<u8> {
        while let Some(&b) = self.bytes.get(self.pos) {
            if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                self.pos += 1;
            } else {
                return Some(b);
            }
        }
        None
    }

    fn expect(&mut self, byte: u8) -> Result<(), Stop> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(Stop::Malformed)
        }
    }

    /// An object whose fields are `fields` (`None`: skipped whole).
    fn object(
        &mut self,
        walk: &mut Walk<'_>,
        fields: Option<&[Field]>,
        depth: u32,
    ) -> Result<(), Stop> {
        if depth > MAX_JSON_DEPTH {
            return Err(Stop::Malformed);
        }
        self.expect(b'{')?;
        self.entries(|json, key| {
            let field = fields.and_then(|fs| {
                key.as_deref()
                    .and_then(|k| fs.iter().find(|f| f.names.contains(&k)))
            });
            match field {
                Some(f) => json.field_value(walk, f, depth + 1),
                None => json.skip(depth + 1),
            }
        })
    }

    /// The value of a field the walk looks at: a counted list's elements or map's entries are
    /// counted (and a list's messages walked into), a message walked into.
    fn field_value(&mut self, walk: &mut Walk<'_>, f: &Field, depth: u32) -> Result<(), Stop> {
        match (self.peek(), f.counter) {
            (Some(b'['), _) => {
                self.pos += 1;
                self.items(b']', |json| {
                    if let Some(counter) = f.counter {
                        walk.count(counter, f.path)?;
                    }
                    match (f.child, json.peek()) {
                        (Some(child), Some(b'{')) => {
                            walk.enter(f);
                            json.object(walk, Some(child), depth + 1)?;
                            walk.leave(f);
                            Ok(())
                        }
                        _ => json.skip(depth + 1),
                    }
                })
            }
            // A map: each entry counts.
            (Some(b'{'), Some(counter)) => {
                self.pos += 1;
                self.entries(|json, _| {
                    walk.count(counter, f.path)?;
                    json.skip(depth + 1)
                })
            }
            (Some(b'{'), None) => self.object(walk, f.child, depth),
            _ => self.skip(depth),
        }
    }

    /// The elements of a list or the entries of an object, after its opening byte: `item`
    /// for each, separated by commas, up to `close`.
    fn items(
        &mut self,
        close: u8,
        mut item: impl FnMut(&mut Self) -> Result<(), Stop>,
    ) -> Result<(), Stop> {
        if self.peek() == Some(close) {
            self.pos += 1;
            return Ok(());
        }
        loop {
            item(self)?;
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b) if b == close => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(Stop::Malformed),
            }
        }
    }

    /// [`Self::items`] of an object: each entry's key (as [`Self::string`] gives it), then
    /// `value` reads its value.
    fn entries(
        &mut self,
        mut value: impl FnMut(&mut Self, Option<String>) -> Result<(), Stop>,
    ) -> Result<(), Stop> {
        self.items(b'}', |json| {
            let key = json.string()?;
            json.expect(b':')?;
            value(json, key)
        })
    }

    /// A string; its text when short enough to be a field name (keys only), else `None`.
    fn string(&mut self) -> Result<Option<String>, Stop> {
        self.expect(b'"')?;
        let start = self.pos;
        let mut escaped = false;
        loop {
            let Some(&b) = self.bytes.get(self.pos) else {
                return Err(Stop::Malformed);
            };
            self.pos += 1;
            match b {
                b'\\' => {
                    escaped = true;
                    // The escaped character (for \u, the four digits are plain bytes).
                    if self.bytes.get(self.pos).is_none() {
                        return Err(Stop::Malformed);
                    }
                    self.pos += 1;
                }
                b'"' => break,
                _ => {}
            }
        }
        let raw = &self.bytes[start..self.pos - 1];
        // Field names are short ASCII without escapes; anything else matches no field.
        Ok((!escaped && raw.len() <= 64)
            .then(|| std::str::from_utf8(raw).ok().map(str::to_owned))
            .flatten())
    }

    /// Skips one value.
    fn skip(&mut self, depth: u32) -> Result<(), Stop> {
        if depth > MAX_JSON_DEPTH {
            return Err(Stop::Malformed);
        }
        match self.peek() {
            Some(b'{') => {
                self.pos += 1;
                self.entries(|json, _| json.skip(depth + 1))
            }
            Some(b'[') => {
                self.pos += 1;
                self.items(b']', |json| json.skip(depth + 1))
            }
            Some(b'"') => self.string().map(drop),
            Some(_) => {
                // A number or a literal: up to the next delimiter.
                let start = self.pos;
                while let Some(&b) = self.bytes.get(self.pos) {
                    if matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                        break;
                    }
                    self.pos += 1;
                }
                if self.pos == start {
                    Err(Stop::Malformed)
                } else {
                    Ok(())
                }
            }
            None => Err(Stop::Malformed),
        }
    }
}

/// A base-128 varint of at most 10 bytes (prost's `decode_varint`).
fn varint(buf: &mut &[u8]) -> Result<u64, Stop> {
    let mut value = 0u64;
    for i in 0..10 {
        let Some((&byte, rest)) = buf.split_first() else {
            return Err(Stop::Malformed);
        };
        *buf = rest;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte < 0x80 {
            return Ok(value);
        }
    }
    Err(Stop::Malformed)
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::pb::v1 as pb;

    fn limits() -> Limits {
        Limits {
            max_pods: 3,
            max_containers: 4,
            max_samples: 5,
            max_metrics: 2,
            ..Limits::default()
        }
    }

    fn field_of(bytes: &[u8]) -> Option<String> {
        match check(&RECOMMEND, bytes, &limits()) {
            Ok(()) => None,
            Err(ApiError::ResourceExhausted { field, .. }) => Some(field),
            Err(e) => panic!("unexpected {e}"),
        }
    }

    /// A batch's pods (and containers, values) count together, its spec's lists per request,
    /// its requests against `max_batch_requests`; the same on the wire and in JSON, each
    /// refusal naming the field under `requests[]`.
    #[test]
    fn a_batch_counts_its_pods_together_and_each_spec_alone() {
        let limits = Limits {
            max_batch_requests: 3,
            ..limits()
        };
        let request = |pods: usize, metrics: usize| pb::RecommendRequest {
            spec: Some(pb::HorizontalSpec {
                metrics: vec![pb::MetricSpec::default(); metrics],
                ..Default::default()
            }),
            pods: vec![pb::PodSample::default(); pods],
            ..Default::default()
        };
        let json = |r: &pb::RecommendRequest| {
            format!(
                "{{\"spec\":{{\"metrics\":[{}]}},\"pods\":[{}]}}",
                vec!["{}"; r.spec.as_ref().map_or(0, |s| s.metrics.len())].join(","),
                vec!["{}"; r.pods.len()].join(",")
            )
        };
        for (requests, refused) in [
            // Two metrics in each of three requests: within max_metrics (2) in each.
            (vec![request(1, 2), request(1, 2), request(1, 2)], None),
            (vec![request(0, 3)], Some("requests[].spec.metrics")),
            // 2 + 2 pods: over max_pods (3) together.
            (vec![request(2, 0), request(2, 0)], Some("requests[].pods")),
            (vec![request(0, 0); 4], Some("requests")),
        ] {
            let wire = pb::RecommendBatchRequest {
                requests: requests.clone(),
            }
            .encode_to_vec();
            let text = format!(
                "{{\"requests\":[{}]}}",
                requests.iter().map(json).collect::<Vec<_>>().join(",")
            );
            for (door, verdict) in [
                ("wire", check(&RECOMMEND_BATCH, &wire, &limits)),
                (
                    "json",
                    check_json(&RECOMMEND_BATCH, text.as_bytes(), &limits),
                ),
            ] {
                let field = match verdict {
                    Ok(()) => None,
                    Err(ApiError::ResourceExhausted { field, .. }) => Some(field),
                    Err(e) => panic!("{door}: {e}"),
                };
                assert_eq!(field.as_deref(), refused, "{door}: {text}");
            }
        }
    }

    /// The totals a batch-maker adds request by request refuse exactly the batches the
    /// server's check of the whole batch refuses, with the same field.
    #[test]
    fn batch_totals_refuse_where_the_check_of_the_whole_batch_does() {
        let limits = Limits {
            max_batch_requests: 5,
            ..limits()
        };
        let pod = |containers: usize, values: usize| pb::PodSample {
            containers: vec![pb::ContainerSample::default(); containers],
            requests_milli: (0..values).map(|i| (format!("r{i}"), 1)).collect(),
            ..Default::default()
        };
        let request =
            |pods: usize, containers: usize, values: usize, metrics: usize| pb::RecommendRequest {
                spec: Some(pb::HorizontalSpec {
                    metrics: vec![pb::MetricSpec::default(); metrics],
                    ..Default::default()
                }),
                pods: vec![pod(containers, values); pods],
                orphan_pod_metrics: vec![pb::OrphanPodMetrics::default(); pods % 2],
                ..Default::default()
            };
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            usize::try_from((seed >> 33) % n).unwrap()
        };
        let mut refused = 0;
        for _ in 0..300 {
            let mut requests = Vec::new();
            let mut totals = BatchTotals::default();
            for _ in 0..6 {
                let r = request(next(3), next(3), next(3), next(4));
                let incremental = totals.with(&r.encode_to_vec(), &limits);
                requests.push(r);
                let whole = check(
                    &RECOMMEND_BATCH,
                    &pb::RecommendBatchRequest {
                        requests: requests.clone(),
                    }
                    .encode_to_vec(),
                    &limits,
                );
                match (incremental, whole) {
                    (Ok(t), Ok(())) => totals = t,
                    (Err(a), Err(b)) => {
                        assert_eq!(a.to_string(), b.to_string());
                        refused += 1;
                        break;
                    }
                    (a, b) => panic!("request by request {a:?}, whole batch {b:?}"),
                }
            }
        }
        assert!(refused > 50, "only {refused} batches reached a limit");
    }

    #[test]
    fn counts_every_amplifying_field_across_the_request() {
        let pod = |containers: usize| pb::PodSample {
            containers: vec![pb::ContainerSample::default(); containers],
            ..Default::default()
        };
        let ok = pb::RecommendRequest {
            pods: vec![pod(2), pod(2), pod(0)],
            ..Default::default()
        };
        assert_eq!(field_of(&ok.encode_to_vec()), None);
        let pods = pb::RecommendRequest {
            pods: vec![pod(0); 4],
            ..Default::default()
        };
        assert_eq!(field_of(&pods.encode_to_vec()).as_deref(), Some("pods"));
        // Containers are counted over all pods, not per pod.
        let containers = pb::RecommendRequest {
            pods: vec![pod(2), pod(3)],
            ..Default::default()
        };
        assert_eq!(
            field_of(&containers.encode_to_vec()).as_deref(),
            Some("pods[].containers")
        );
        let mut values = pb::PodSample::default();
        for i in 0..6 {
            values
                .metrics
                .insert(format!("m{i}"), pb::MetricSample::default());
        }
        let values = pb::RecommendRequest {
            pods: vec![values],
            ..Default::default()
        };
        assert_eq!(
            field_of(&values.encode_to_vec()).as_deref(),
            Some("pods[].metrics")
        );
        let policies = pb::RecommendRequest {
            spec: Some(pb::HorizontalSpec {
                behavior: Some(pb::Behavior {
                    scale_up: Some(pb::ScalingRules {
                        policies: vec![pb::ScalingPolicy::default(); 3],
                        ..Default::default()
                    }),
                    scale_down: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            field_of(&policies.encode_to_vec()).as_deref(),
            Some("spec.behavior.policies")
        );
    }

    fn json_field_of(json: &str) -> Option<String> {
        match check_json(&RECOMMEND, json.as_bytes(), &limits()) {
            Ok(()) => None,
            Err(ApiError::ResourceExhausted { field, .. }) => Some(field),
            Err(e) => panic!("unexpected {e}"),
        }
    }

    /// The JSON walk counts what the wire walk counts, by either name of each field, and the
    /// same request as JSON and as protobuf gets the same verdict.
    #[test]
    fn json_bodies_are_counted_as_their_wire_encoding() {
        assert_eq!(json_field_of(r#"{"pods":[{},{},{}]}"#), None);
        assert_eq!(
            json_field_of(r#"{"pods":[{},{},{},{}]}"#).as_deref(),
            Some("pods")
        );
        assert_eq!(
            json_field_of(
                r#"{"targetKey":"x", "pods":[{"containers":[{},{}]},{"containers":[{},{},{}]}]}"#
            )
            .as_deref(),
            Some("pods[].containers")
        );
        assert_eq!(
            json_field_of(r#"{"pods":[{"metrics":{"a":{},"b":{},"c":{}},"requests_milli":{"cpu":"1","mem":2,"x":3}}]}"#).as_deref(),
            Some("pods[].requests_milli")
        );
        assert_eq!(
            json_field_of(r#"{"spec":{"behavior":{"scaleUp":{"policies":[{},{},{}]}}}}"#)
                .as_deref(),
            Some("spec.behavior.policies")
        );
        assert_eq!(
            json_field_of(r#"{"unavailable_metrics":["a","b","c"]}"#).as_deref(),
            Some("unavailable_metrics")
        );
        // Strings with escapes and nesting elsewhere are skipped; bad JSON has no verdict.
        assert_eq!(
            json_field_of(r#"{"targetKey":"a\"b{[","x":{"pods":[{},{},{},{}]},"pods":[]}"#),
            None
        );
        assert_eq!(
            json_field_of(r#"{"pods":[{},{},{},{},"#),
            Some("pods".into())
        );
        assert_eq!(json_field_of(r#"{"pods":[{}"#), None);
        assert_eq!(json_field_of(&"[".repeat(10_000)), None);
        for n in 0..6 {
            let request = pb::RecommendRequest {
                pods: vec![pb::PodSample::default(); n],
                ..Default::default()
            };
            let json = format!("{{\"pods\":[{}]}}", vec!["{}"; n].join(","));
            assert_eq!(
                json_field_of(&json),
                field_of(&request.encode_to_vec()),
                "{n} pods"
            );
        }
    }

    #[test]
    fn empty_elements_are_counted_even_when_repeated_on_the_wire() {
        // 10 empty pods written as raw (tag 5, length 0) pairs.
        let bytes: Vec<u8> = std::iter::repeat_n([0x2a, 0x00], 10).flatten().collect();
        assert_eq!(field_of(&bytes).as_deref(), Some("pods"));
        // ...also after an unknown group, which prost skips.
        let mut grouped = vec![0x7b, 0x08, 0x01, 0x7c]; // field 15 start group, varint, end
        grouped.extend(&bytes);
        assert!(pb::RecommendRequest::decode(&grouped[..]).is_ok());
        assert_eq!(field_of(&grouped).as_deref(), Some("pods"));
    }

    #[test]
    fn malformed_bytes_have_no_verdict() {
        assert_eq!(field_of(&[0x2a, 0x05, 0x00]), None);
        assert_eq!(field_of(&[0xff; 11]), None);
        assert_eq!(field_of(&[0x7b]), None);
    }

    #[test]
    fn only_request_types_with_amplifying_fields_have_a_schema() {
        assert!(schema_of::<pb::RecommendRequest>().is_some());
        assert!(schema_of::<pb::RecordUsageRequest>().is_some());
        assert!(schema_of::<pb::GetHistoryRequest>().is_none());
        assert!(schema_of::<pb::RecommendResponse>().is_none());
    }
}
