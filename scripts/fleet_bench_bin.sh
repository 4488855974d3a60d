#!/usr/bin/env bash
# Prints the path of the fleet bench's binary (benches/fleet.rs), building it if needed. cargo
# names it with a hash, so cargo is asked rather than target/ listed (a listing can find a
# stale build of another profile or toolchain). The binary is also the load benches' no-op
# server when AUTOSCALED_LOAD_NOOP_SERVER is set (benches/support/servers.rs). Fails, with
# cargo's errors, when it does not build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
json=$(cd "$root" && cargo bench --bench fleet --no-run --message-format=json 2>/dev/null) || {
  (cd "$root" && cargo bench --bench fleet --no-run) >&2 || true
  echo "the fleet bench did not build" >&2
  exit 1
}
python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "fleet" and m.get("executable"):
        print(m["executable"])' <<<"$json"
