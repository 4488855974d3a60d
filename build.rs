//! Compiles `proto/` with protox (pure Rust, no `protoc` needed) and writes the descriptor set
//! that server reflection serves.
use std::{env, fs, path::PathBuf};

use prost::Message;

const PROTOS: &[&str] = &[
    "proto/autoscaled/v1/horizontal.proto",
    "proto/autoscaled/v1/vertical.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    let fds = protox::compile(PROTOS, ["proto"])?;
    fs::write(
        out_dir.join("autoscaled_descriptor.bin"),
        fds.encode_to_vec(),
    )?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
