#!/usr/bin/env bash
# etcd for the HA tests (tests/etcd_ha.rs) and the etcd bench (benches/etcd_load.rs).
#
#   scripts/etcd-ci.sh install   installs Debian's etcd-server and etcd-client (3.4) if `etcd`
#                                or `etcdctl` is missing (apt-get; nothing starts: the tests
#                                start their own members on 127.0.0.1, free ports, temp dirs)
#   scripts/etcd-ci.sh test      install, then `CI=true cargo test --test etcd_ha` (with CI=true a
#                                missing etcd fails the tests instead of skipping them)
#   scripts/etcd-ci.sh bench     install, then the short etcd bench (benches/etcd_load.rs)
#
# No protoc is needed: the etcd client is generated from proto/etcd/kv.proto with protox.
set -euo pipefail
cd "$(dirname "$0")/.."

install() {
  if command -v etcd >/dev/null && command -v etcdctl >/dev/null; then
    echo "etcd: $(etcd --version | head -1)"
    return
  fi
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq etcd-server etcd-client
  echo "etcd: $(etcd --version | head -1)"
}

case "${1:-test}" in
  install) install ;;
  test)
    install
    CI=true cargo test --locked --test etcd_ha -- --test-threads 1
    ;;
  bench)
    install
    cargo bench --locked --bench etcd_load
    ;;
  *) echo "usage: $0 [install|test|bench]" >&2; exit 64 ;;
esac
