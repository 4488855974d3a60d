//! What Kubernetes users type, read by the command-line client: resource quantities
//! (`500m`, `1Gi`) in a request file, and `autoscaling/v2` HorizontalPodAutoscaler manifests.
//! The wire stays integer milli-units; nothing here is used by the server.

pub mod hpa;
pub mod quantity;
pub(crate) mod request_json;
