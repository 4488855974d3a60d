//! Compiles `proto/` with protox (pure Rust, no `protoc` needed): Rust code and a descriptor
//! set for `autoscaled.v1`, and a second descriptor set, for server reflection only, of the
//! `google.rpc` error model the server's error details use (`google/rpc/status.proto`,
//! `google/rpc/error_details.proto`, vendored from googleapis). Its Rust types come from
//! `tonic-types`, so no code is generated for it; reflection serving it lets grpcurl decode a
//! `google.rpc.BadRequest` detail instead of printing raw bytes.
use std::{env, fs, path::PathBuf};

use prost::Message;

const PROTOS: &[&str] = &[
    "proto/autoscaled/v1/horizontal.proto",
    "proto/autoscaled/v1/vertical.proto",
];

/// The subset of etcd's v3 KV API used by `store::etcd` (client only; declared in this repo so
/// that no `protoc` is needed, unlike the etcd-client crate whose build script runs prost-build).
const ETCD_PROTOS: &[&str] = &["proto/etcd/kv.proto"];
/// Storage-only records (`src/store/record/`): Rust messages only, no services, no
/// descriptor set (never served or registered for reflection).
const STORE_PROTOS: &[&str] = &["proto/store/v1/records.proto"];

const RPC_PROTOS: &[&str] = &[
    "proto/google/rpc/status.proto",
    "proto/google/rpc/error_details.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for proto in PROTOS
        .iter()
        .chain(RPC_PROTOS)
        .chain(STORE_PROTOS)
        .chain(ETCD_PROTOS)
    {
        println!("cargo:rerun-if-changed={proto}");
    }
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    let fds = protox::compile(PROTOS, ["proto"])?;
    fs::write(
        out_dir.join("autoscaled_descriptor.bin"),
        fds.encode_to_vec(),
    )?;
    // Our codec: wire limits before decoding, and INVALID_ARGUMENT for a body that does not
    // decode (`src/api/codec.rs`). Maps as `BTreeMap`: a Recommend carries two maps per pod,
    // which `HashMap` decoded with a fresh SipHash `RandomState` and table each, and the
    // engine keys them in order anyway (same wire format; maps are encoded in key order).
    tonic_prost_build::configure()
        .codec_path("crate::api::codec::Codec")
        .btree_map(".autoscaled.v1")
        .compile_fds(fds)?;
    let etcd = protox::compile(ETCD_PROTOS, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .compile_fds(etcd)?;
    let store = protox::compile(STORE_PROTOS, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        .compile_fds(store)?;
    let rpc = protox::compile(RPC_PROTOS, ["proto"])?;
    fs::write(out_dir.join("rpc_descriptor.bin"), rpc.encode_to_vec())?;
    Ok(())
}
