#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, unit/property/conformance/end-to-end
# tests, the conformance runner as a command, packaging lints, and the Go, grpcurl and Python
# clients against the real server. Needs ../shared beside the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n=== %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --check
step "cargo clippy"
cargo clippy --all-targets --locked -- -D warnings
step "etcd (installs etcd-server for tests/etcd_ha.rs)"
bash scripts/etcd-ci.sh install
step "cargo test"
cargo test --locked
step "cargo build --release"
cargo build --release --locked
step "conformance runner"
target/release/autoscaled conformance ../shared/conformance/hpa
target/release/autoscaled conformance ../shared/conformance/vpa
step "packaging (Dockerfile, Helm chart)"
bash scripts/check-packaging.sh
step "clients (Go, grpcurl, Python) against the real server"
bash scripts/clients-ci.sh
