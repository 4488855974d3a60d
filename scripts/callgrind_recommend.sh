#!/usr/bin/env bash
# Instructions per Recommend, repeatable on a busy machine, for autoscaled and for the load
# benches' no-op server on the same calls: each server runs under callgrind; a separate client
# process (examples/recommend_fixed.rs) first calls every key once (start-up, connections,
# the first state of every target), then callgrind's counters are zeroed and the measured
# Recommends are sent; the server stops with SIGTERM and the script prints the instructions
# of all server threads per measured Recommend, for each server, and the ratios to the no-op.
# "dry-run" is autoscaled again with `dry_run` set on the measured calls (after the same real
# warm-up): reading the state and deciding, without the durable write.
#
# Zeroing after the warm-up matters: sled starts its I/O threads lazily, and they spin on the
# thread pool's initialization lock while it is built. Under callgrind, which runs one thread
# at a time, that spin counted up to 2.4 G instructions (120 k per call over 20,000 calls)
# and varied from run to run.
#
# Build first:
#   cargo build --release --bin autoscaled --example recommend_fixed
# Usage: scripts/callgrind_recommend.sh OUT_DIR [requests] [keys] [in_flight]
# AUTOSCALED_BIN: another server binary, e.g. a build of an older commit. The release profile
# has no debug info; for annotated source lines build `--profile profiling` and set
# AUTOSCALED_BIN=target/profiling/autoscaled. CALLGRIND_SERVERS: which to run, of
# "autoscaled dry-run no-op" (the default, all three; about 3 minutes for 20,000 calls).
set -euo pipefail
out=${1:?usage: callgrind_recommend.sh OUT_DIR [requests] [keys] [in_flight]}
requests=${2:-2000}
keys=${3:-1000}
in_flight=${4:-4}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${AUTOSCALED_BIN:-$root/target/release/autoscaled}
client=$root/target/release/examples/recommend_fixed
mkdir -p "$out"
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT

# measure NAME PREFIX [dry-run] -- COMMAND...: runs COMMAND under callgrind, waits for
# "PREFIXADDR" on its stdout, warms up, zeroes, measures (with `dry_run` set if asked), stops
# it; prints instructions per measured Recommend.
measure() {
  local name=$1 prefix=$2 mode=
  shift 2
  [ "$1" = dry-run ] && { mode=dry-run; shift; }
  [ "$1" = -- ] && shift
  local dir=$out/$name hold
  rm -rf "$dir"
  mkdir -p "$dir"
  # stdin is a FIFO this script holds open: the no-op server exits when its stdin closes.
  mkfifo "$dir/stdin"
  exec {hold}<>"$dir/stdin"
  valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out" "$@" \
    <"$dir/stdin" >"$dir/server.stdout" 2>"$dir/server.stderr" &
  local server=$! addr=
  for _ in $(seq 1 600); do
    addr=$(sed -n "s/^${prefix}//p" "$dir/server.stdout" | head -1)
    [ -n "$addr" ] && break
    sleep 0.2
  done
  if [ -z "$addr" ]; then
    echo "$name did not start" >&2
    cat "$dir/server.stderr" >&2
    kill "$server" 2>/dev/null || true
    return 1
  fi
  "$client" "$addr" "$keys" "$keys" "$in_flight" >/dev/null
  # Handled at the next instruction any server thread runs: sled's and tokio's idle threads
  # wake at least once a second.
  callgrind_control --zero "$server" >/dev/null 2>&1
  "$client" "$addr" "$requests" "$keys" "$in_flight" $mode >&2
  callgrind_control --dump "$server" >/dev/null 2>&1
  kill -TERM "$server"
  wait "$server" || true
  exec {hold}>&-
  rm -f "$dir/stdin"
  # The dump's part file holds the counts from the zeroing to the dump.
  local total
  total=$(callgrind_annotate "$dir/callgrind.out.1" 2>/dev/null | sed -n 's/^\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
  echo "$((total / requests))"
}

declare -A per_call=()
for s in ${CALLGRIND_SERVERS:-autoscaled dry-run no-op}; do
  case $s in
    autoscaled | dry-run)
      mode=
      [ "$s" = dry-run ] && mode=dry-run
      rm -rf "$data/sled"
      per_call[$s]=$(AUTOSCALED_LOG=warn measure "$s" "autoscaled listening on " $mode -- \
        "$bin" serve --listen 127.0.0.1:0 --data-dir "$data/sled")
      ;;
    no-op)
      nb=$("$root/scripts/fleet_bench_bin.sh")
      per_call[$s]=$(AUTOSCALED_LOAD_NOOP_SERVER=1 measure no-op "no-op listening on " -- "$nb")
      ;;
    *) echo "unknown server $s (autoscaled, dry-run, no-op)" >&2; exit 1 ;;
  esac
done
for s in autoscaled dry-run no-op; do
  [ -n "${per_call[$s]:-}" ] || continue
  line="$s: ${per_call[$s]} instructions per Recommend"
  if [ "$s" != no-op ] && [ -n "${per_call[no-op]:-}" ]; then
    line+=$(python3 -c "print(f', {${per_call[$s]} / ${per_call[no-op]}:.2f}x the no-op')")
  fi
  echo "$line"
done
