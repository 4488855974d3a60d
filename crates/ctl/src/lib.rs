//! `autoscalectl`: the tools around an autoscaled server, kept out of the binary a production
//! pod runs (as etcdctl is kept apart from etcd).
//!
//! * [`client`]: `recommend` and `history` against a server (with `client::security` for TLS
//!   and tokens, `client::migration` for the KEDA fields of the printed report);
//! * [`kube`]: Kubernetes quantities and `autoscaling/v2` HorizontalPodAutoscaler manifests;
//! * [`conformance`]: the shared conformance cases through the engine, or through a server;
//! * [`whatif`]: `simulate` (the replay is autoscaled-wire's `simulate`, as the server runs it), the recording
//!   proxy (`record`) and the HTML report (`report`), with their pictures;
//! * [`cli`]: the command line.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod cli;
pub mod client;
pub mod conformance;
pub mod kube;
pub mod whatif;
