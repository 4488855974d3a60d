//! Generated protobuf and tonic code for `proto/autoscaled/v1`. Nothing else lives here: the
//! wire types stop at `api::convert`.
#![allow(missing_docs, clippy::all, clippy::pedantic)]

/// `autoscaled.v1`
pub mod v1 {
    tonic::include_proto!("autoscaled.v1");
}

/// The encoded file descriptor set of `proto/`, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/autoscaled_descriptor.bin"));
