//! Compiles `proto/autoscaled/v1` (at the repository root, shared with go/generate.sh) with
//! protox (pure Rust, no `protoc`): Rust code and a descriptor set for `autoscaled.v1`, and a
//! second descriptor set, for server reflection only, of the `google.rpc` error model the
//! error details use (`google/rpc/status.proto`, `google/rpc/error_details.proto`, vendored
//! from googleapis). Its Rust types come from `tonic-types`, so no code is generated for it;
//! reflection serving it lets grpcurl decode a `google.rpc.BadRequest` detail. The server's
//! own protos (etcd's KV API, the storage records) are compiled by its build script.
use std::{env, fs, path::PathBuf};

use prost::Message;

/// The repository's proto folder, from this package's folder (where build scripts run).
const PROTO_ROOT: &str = "../../proto";
const PROTOS: &[&str] = &[
    "autoscaled/v1/horizontal.proto",
    "autoscaled/v1/vertical.proto",
];
const RPC_PROTOS: &[&str] = &["google/rpc/status.proto", "google/rpc/error_details.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for proto in PROTOS.iter().chain(RPC_PROTOS) {
        println!("cargo:rerun-if-changed={PROTO_ROOT}/{proto}");
    }
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    let fds = protox::compile(PROTOS, [PROTO_ROOT])?;
    fs::write(
        out_dir.join("autoscaled_descriptor.bin"),
        fds.encode_to_vec(),
    )?;
    // Our codec: wire limits before decoding, and INVALID_ARGUMENT for a body that does not
    // decode (`src/codec.rs`). Maps as `BTreeMap`: a Recommend carries two maps per pod,
    // which `HashMap` decoded with a fresh SipHash `RandomState` and table each, and the
    // engine keys them in order anyway (same wire format; maps are encoded in key order).
    tonic_prost_build::configure()
        .codec_path("crate::codec::Codec")
        .btree_map(".autoscaled.v1")
        .compile_fds(fds)?;
    let rpc = protox::compile(RPC_PROTOS, [PROTO_ROOT])?;
    fs::write(out_dir.join("rpc_descriptor.bin"), rpc.encode_to_vec())?;
    Ok(())
}
