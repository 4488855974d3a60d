#!/usr/bin/env bash
# Server CPU and bytes written per Recommend for a fixed load: starts the release
# `autoscaled serve` on a fresh data folder, sends a fixed number of Recommends from a separate
# process (examples/recommend_fixed.rs), and reads the server's utime/stime (/proc/PID/stat)
# and write counters (/proc/PID/io) before and after. Build first:
#   cargo build --release --bin autoscaled --example recommend_fixed
# Usage: scripts/cpu_per_call.sh [requests] [keys] [in_flight] [extra serve args...]
# (AUTOSCALED_BIN: another server binary, e.g. a build of an older commit.)
set -euo pipefail
requests=${1:-10000}
keys=${2:-1000}
in_flight=${3:-16}
shift 3 2>/dev/null || shift $#
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${AUTOSCALED_BIN:-$root/target/release/autoscaled}
data=$(mktemp -d)
server=
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$data"; }
trap cleanup EXIT
AUTOSCALED_LOG=warn "$bin" serve --listen 127.0.0.1:0 --data-dir "$data/sled" "$@" \
  >"$data/server.stdout" 2>"$data/server.stderr" &
server=$!
addr=
for _ in $(seq 1 300); do
  addr=$(sed -n 's/^autoscaled listening on //p' "$data/server.stdout" | head -1)
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "$addr" ] || { echo "server did not start" >&2; exit 1; }
tck=$(getconf CLK_TCK)
# utime stime (fields 14 and 15; the command name may hold spaces, so cut after ')').
cpu() { sed 's/^.*) //' "/proc/$server/stat" | awk '{print $12, $13}'; }
io() { awk '/^(wchar|write_bytes):/ {printf "%s ", $2} END {print ""}' "/proc/$server/io"; }
# One small warm-up round so that start-up work is not counted.
"$root/target/release/examples/recommend_fixed" "$addr" 100 100 4 >/dev/null
read -r u0 s0 < <(cpu)
read -r w0 b0 < <(io)
"$root/target/release/examples/recommend_fixed" "$addr" "$requests" "$keys" "$in_flight" >/dev/null
read -r u1 s1 < <(cpu)
read -r w1 b1 < <(io)
du_kb=$(du -sk "$data/sled" | cut -f1)
awk -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v t="$tck" -v n="$requests" \
  -v w=$((w1 - w0)) -v b=$((b1 - b0)) -v d="$du_kb" 'BEGIN {
  printf "per Recommend: user %.0f us, sys %.0f us, total %.0f us; wchar %.0f B, write_bytes %.0f B; folder %d KiB\n",
    u * 1e6 / t / n, s * 1e6 / t / n, (u + s) * 1e6 / t / n, w / n, b / n, d }'
