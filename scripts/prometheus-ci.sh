#!/usr/bin/env bash
# Prometheus for the autoscaled-agent end-to-end example (examples/agent/).
#
#   scripts/prometheus-ci.sh install   installs Debian's prometheus (2.42 on bookworm) if
#                                      `prometheus` is missing (apt-get, no Recommends, so no
#                                      node-exporter). Nothing is left running: the example and
#                                      the tests start their own server on 127.0.0.1, a free
#                                      port and a temp dir.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"

install() {
  if ! command -v prometheus >/dev/null; then
    # The package's postinst starts its service through invoke-rc.d (/etc/init.d/prometheus,
    # listening on :9090) when no systemd runs, as here. A policy-rc.d that exits 101 forbids
    # that. Docker-style images already ship one; else add one for this install only.
    local policy=/usr/sbin/policy-rc.d added=""
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
      $sudo chmod 755 "$policy"
      added=1
    fi
    local rc=0
    $sudo apt-get update -qq || rc=$?
    [ "$rc" != 0 ] || DEBIAN_FRONTEND=noninteractive \
      $sudo apt-get install -y -qq --no-install-recommends prometheus || rc=$?
    [ -z "$added" ] || $sudo rm -f "$policy"
    [ "$rc" = 0 ] || exit "$rc"
    # Under a running systemd the unit is enabled for the next boot: disable and stop it.
    if [ -d /run/systemd/system ]; then
      $sudo systemctl disable --now prometheus >/dev/null 2>&1 || true
    fi
  fi
  # Whatever still runs as the packaged daemon (user `prometheus`) would hold :9090 and a
  # core: stop it. Our own servers run as the invoking user.
  if id prometheus >/dev/null 2>&1; then
    local pids
    pids="$(pgrep -u prometheus -x prometheus || true)"
    if [ -n "$pids" ]; then
      echo "stopping the packaged prometheus daemon (pid $pids)" >&2
      # shellcheck disable=SC2086 # one word per pid
      $sudo kill $pids || true
    fi
  fi
  echo "prometheus: $(prometheus --version 2>&1 | head -1)"
}

case "${1:-install}" in
  install) install ;;
  *) echo "usage: $0 [install]" >&2; exit 64 ;;
esac
