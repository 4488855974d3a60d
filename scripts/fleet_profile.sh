#!/usr/bin/env bash
# Where the fleet bench's server CPU goes, by part of the call. Runs `benches/fleet.rs` (10,000
# targets unless FLEET_TARGETS says otherwise; 16 measured rounds, so that even the no-op's
# rounds outlast the recording), records `perf` samples with DWARF call stacks of the
# autoscaled server during its second measured round and of the no-op server during its own,
# puts every sample in the innermost part of the call its stack passes through
# (scripts/fleet_profile.py) and prints a table per server, in µs per call at the CPU per
# call the bench measured. Needs `perf` (Debian: linux-perf) and permission to profile the
# process (kernel.perf_event_paranoid <= 1, or root).
# Usage: scripts/fleet_profile.sh OUT_DIR [seconds recorded per server, default 3]
set -euo pipefail
out=${1:?usage: fleet_profile.sh OUT_DIR [seconds]}
secs=${2:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
bench=$("$root/scripts/fleet_bench_bin.sh")
mkdir -p "$out"
data=$(mktemp -d)
bench_pid=
cleanup() { [ -n "$bench_pid" ] && kill "$bench_pid" 2>/dev/null; rm -rf "$data"; }
trap cleanup EXIT
measure=${FLEET_MEASURE_ROUNDS:-16}
FLEET_DATA_DIR=$data FLEET_MEASURE_ROUNDS=$measure FLEET_DRY_RUN_ROUNDS=$measure \
  "$bench" --bench >"$out/fleet.md" 2>"$out/fleet.err" &
bench_pid=$!
warmup=${FLEET_WARMUP_ROUNDS:-21}
# Waits for the bench's stderr line of `$1`'s second measured round (`$2`: rounds before
# its first, default the warm-up).
wait_round() {
  until grep -q "^  $1 round $((${2:-$warmup} + 1)) " "$out/fleet.err"; do
    kill -0 "$bench_pid" 2>/dev/null || { echo "the bench ended early: $out/fleet.err" >&2; exit 1; }
    sleep 0.2
  done
}
wait_round real
real=$(pgrep -P "$bench_pid" -x autoscaled | head -1)
perf record -q -F 2000 --call-graph dwarf,16384 -p "$real" -o "$out/real.perf" -- sleep "$secs"
# The same server deciding the same calls as dry runs (read and decide, write nothing).
wait_round dry-run $((warmup + measure))
perf record -q -F 2000 --call-graph dwarf,16384 -p "$real" -o "$out/dry.perf" -- sleep "$secs"
wait_round no-op
noop=$(pgrep -P "$bench_pid" -f 'deps/fleet-' | head -1)
perf record -q -F 2000 --call-graph dwarf,16384 -p "$noop" -o "$out/noop.perf" -- sleep "$secs"
wait "$bench_pid"
bench_pid=
cpu() { sed -n 's/^| server CPU per Recommend[^|]*| \([0-9]*\) µs.*| \([0-9]*\) µs.*/\1 \2/p' "$out/fleet.md"; }
read -r real_us noop_us < <(cpu)
dry_us=$(sed -n 's/.*as dry runs.* cost \([0-9]*\) µs per call.*/\1/p' "$out/fleet.md")
for who in real dry noop; do
  perf script -i "$out/$who.perf" -F comm,tid,ip,sym >"$out/$who.script" 2>/dev/null
done
echo "autoscaled ($real_us µs per call in the bench's measured rounds):"
python3 "$root/scripts/fleet_profile.py" "$out/real.script" "$real_us"
echo
echo "dry runs ($dry_us µs per call):"
python3 "$root/scripts/fleet_profile.py" "$out/dry.script" "$dry_us"
echo
echo "no-op ($noop_us µs per call):"
python3 "$root/scripts/fleet_profile.py" "$out/noop.script" "$noop_us"
