//! Generated protobuf and tonic code for `proto/autoscaled/v1`, and the descriptor sets
//! `build.rs` writes. Nothing else lives here: the wire types stop at [`crate::convert`].
#![allow(missing_docs, clippy::all, clippy::pedantic)]

/// `autoscaled.v1`
pub mod v1 {
    tonic::include_proto!("autoscaled.v1");
}

/// The encoded file descriptor set of `proto/`, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/autoscaled_descriptor.bin"));

/// The encoded file descriptor set of `google/rpc/status.proto` and
/// `google/rpc/error_details.proto`, for server reflection only (the Rust types are
/// `tonic-types`'): with it, grpcurl decodes the `google.rpc.BadRequest` error details.
pub const RPC_FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/rpc_descriptor.bin"));
