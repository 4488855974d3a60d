//! The request limits every door of the server enforces (`--max-pods` and the others), with
//! their defaults: the codec checks them on the wire bytes before decoding ([`crate::codec`],
//! [`crate::wire_limits`]), the conversion on the decoded message ([`crate::convert`]).

/// Default maximum size of one decoded request (tonic's own default, 4 MiB).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
/// Default maximum number of pods in one request.
pub const DEFAULT_MAX_PODS: usize = 10_000;
/// Default maximum number of metrics in one spec.
pub const DEFAULT_MAX_METRICS: usize = 64;
/// Default maximum number of containers in one request (over all its pods).
pub const DEFAULT_MAX_CONTAINERS: usize = 100_000;
/// Default maximum number of VPA usage samples plus OOM events in one RecordUsage.
pub const DEFAULT_MAX_SAMPLES: usize = 100_000;
/// Default maximum number of requests in one RecommendBatch.
pub const DEFAULT_MAX_BATCH_REQUESTS: usize = 100;
/// Default maximum length of a target key, in bytes.
pub const DEFAULT_MAX_KEY_BYTES: usize = 512;

/// Request limits, enforced by [`crate::convert`] (and the message size by the codec).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// `--max-message-bytes`: larger bodies are refused before they are decoded.
    pub max_message_bytes: usize,
    /// `--max-pods`: pods in one request; bounds the engine's per-request work.
    pub max_pods: usize,
    /// `--max-metrics`: metrics in one spec.
    pub max_metrics: usize,
    /// `--max-key-bytes`: a target key is a store key and a log field, so it stays short.
    pub max_key_bytes: usize,
    /// `--max-samples`: VPA samples and OOM events in one RecordUsage, and pod values in one
    /// Recommend.
    pub max_samples: usize,
    /// Containers in one request, over all its pods.
    pub max_containers: usize,
    /// `--max-batch-requests`: requests in one RecommendBatch. A batch's pods, containers
    /// and values count together against their limits, so a batch costs the memory of one
    /// request; this bounds the work one call holds a slot for.
    pub max_batch_requests: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_pods: DEFAULT_MAX_PODS,
            max_metrics: DEFAULT_MAX_METRICS,
            max_key_bytes: DEFAULT_MAX_KEY_BYTES,
            max_samples: DEFAULT_MAX_SAMPLES,
            max_containers: DEFAULT_MAX_CONTAINERS,
            max_batch_requests: DEFAULT_MAX_BATCH_REQUESTS,
        }
    }
}
