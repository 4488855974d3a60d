//! Compiles the server's own protos with protox (pure Rust, no `protoc` needed): the subset
//! of etcd's v3 KV API `store::etcd` uses (client only) and the storage records
//! (`src/store/record/`, messages only). The public API (`proto/autoscaled/v1`) is compiled
//! by `crates/wire`.

/// The subset of etcd's v3 KV API used by `store::etcd` (client only; declared in this repo so
/// that no `protoc` is needed, unlike the etcd-client crate whose build script runs prost-build).
const ETCD_PROTOS: &[&str] = &["proto/etcd/kv.proto"];
/// Storage-only records (`src/store/record/`): Rust messages only, no services, no
/// descriptor set (never served or registered for reflection).
const STORE_PROTOS: &[&str] = &["proto/store/v1/records.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for proto in STORE_PROTOS.iter().chain(ETCD_PROTOS) {
        println!("cargo:rerun-if-changed={proto}");
    }
    let etcd = protox::compile(ETCD_PROTOS, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .compile_fds(etcd)?;
    let store = protox::compile(STORE_PROTOS, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        .compile_fds(store)?;
    Ok(())
}
