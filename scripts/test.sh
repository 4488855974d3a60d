#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, unit/property/conformance/end-to-end
# tests, the conformance runner as a command, packaging lints, and the Go, grpcurl and Python
# clients against the real server. Needs ../shared beside the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n=== %s\n' "$*"; }

# ../shared (beside the checkout) holds the conformance cases translated from the upstream
# Kubernetes tests and the reference docs; the tests read it. Say so before any build starts.
if [[ ! -d ../shared/conformance/hpa || ! -d ../shared/conformance/vpa ]]; then
  echo "scripts/test.sh: ../shared/conformance is missing ($(cd .. && pwd)/shared)." >&2
  echo "  The tests need the project's shared folder (conformance cases and reference docs)" >&2
  echo "  checked out beside this repository, as ../shared." >&2
  exit 2
fi

step "cargo fmt --check"
cargo fmt --all --check
step "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
step "etcd (installs etcd-server for tests/etcd_ha.rs)"
bash scripts/etcd-ci.sh install
step "Prometheus (installs Debian's prometheus for the agent's end-to-end test)"
bash scripts/prometheus-ci.sh install
step "Chromium (installs Debian's chromium and chromium-driver for the console test)"
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-driver
fi
step "cargo test (every member: engine, server, autoscalectl, agent)"
cargo test --workspace --locked
step "cargo build --release (autoscaled, autoscalectl, autoscaled-agent)"
cargo build --release --locked --workspace
step "the server binary holds only what serves"
bash scripts/check-server-binary.sh target/release/autoscaled
step "packages (the .deb installed, its systemd units verified, the server run as its unit runs it; the tarball)"
bash scripts/check-package.sh
step "conformance runner"
target/release/autoscalectl conformance ../shared/conformance/hpa
target/release/autoscalectl conformance ../shared/conformance/vpa
# The project's own cases with the HPAScaleToZero gate on (Kubernetes 1.37).
target/release/autoscalectl conformance tests/conformance/hpa-1.37
step "packaging (Dockerfile, Helm chart)"
bash scripts/check-packaging.sh
step "clients (Go, grpcurl, Python) against the real server"
bash scripts/clients-ci.sh
step "what-if report in headless Chromium (screenshot in target/report-screenshot)"
bash scripts/report-screenshot.sh target/report-screenshot
