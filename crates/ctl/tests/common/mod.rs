//! What `autoscalectl`'s tests share with the server's: starting the real `autoscaled` binary.
#![allow(dead_code, unused_imports)]

#[path = "../../../../tests/common/binary.rs"]
mod binary;

pub use binary::*;
