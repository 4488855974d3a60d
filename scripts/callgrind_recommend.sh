#!/usr/bin/env bash
# Instructions per Recommend, repeatable on a busy machine: runs the release `autoscaled serve`
# under callgrind, sends a fixed number of Recommends from a separate client process
# (examples/recommend_fixed.rs), stops the server with SIGTERM and prints total instructions
# (all server threads) / requests. Build first:
#   cargo build --release --bin autoscaled --example recommend_fixed
# Usage: scripts/callgrind_recommend.sh OUT_DIR [requests] [keys] [in_flight]
# (AUTOSCALED_BIN: another server binary, e.g. a build of an older commit. The release
# profile has no debug info; for annotated source lines build `--profile profiling` and set
# AUTOSCALED_BIN=target/profiling/autoscaled.)
set -euo pipefail
out=${1:?usage: callgrind_recommend.sh OUT_DIR [requests] [keys] [in_flight]}
requests=${2:-2000}
keys=${3:-1000}
in_flight=${4:-4}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${AUTOSCALED_BIN:-$root/target/release/autoscaled}
mkdir -p "$out"
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
AUTOSCALED_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out" \
  "$bin" serve --listen 127.0.0.1:0 --data-dir "$data/sled" \
  >"$out/server.stdout" 2>"$out/server.stderr" &
server=$!
addr=
for _ in $(seq 1 600); do
  addr=$(sed -n 's/^autoscaled listening on //p' "$out/server.stdout" | head -1)
  [ -n "$addr" ] && break
  sleep 0.2
done
[ -n "$addr" ] || { echo "server did not start" >&2; kill "$server"; exit 1; }
"$root/target/release/examples/recommend_fixed" "$addr" "$requests" "$keys" "$in_flight"
kill -TERM "$server"
wait "$server" || true
total=$(callgrind_annotate "$out/callgrind.out" 2>/dev/null | sed -n 's/^\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
echo "total instructions: $total; per Recommend: $((total / requests))"
