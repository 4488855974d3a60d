#!/usr/bin/env bash
# What autoscaled-agent costs per target and period: N targets on a short sync period against
# a real Prometheus and a real autoscaled (release builds), for a fixed time; the agent's own
# CPU time (utime + stime), its children's (the replicas commands it runs), and its resident
# memory, divided by the target-periods it ran (from its /metrics).
#
#   benches/agent_cost.sh [TARGETS] [SECONDS] [SYNC]       defaults: 200 60 1s
#
# Each target: the current count from `echo 3` (a command, as a scheduler's would be), one
# instant query (`vector(...)`, an External metric), one Recommend; the decision keeps the
# count, so no scale runs (the scale command's cost is the scheduler's). Needs prometheus
# (scripts/prometheus-ci.sh install); builds the release binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGETS=${1:-200} SECONDS_RUN=${2:-60} SYNC=${3:-1s}
cargo build --release --quiet --bin autoscaled --bin autoscaled-agent
WORK=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
PROM=$(port) METRICS=$(port)

printf 'global:\n  scrape_interval: 15s\nscrape_configs: []\n' >"$WORK/prometheus.yml"
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address="127.0.0.1:$PROM" >"$WORK/prometheus.log" 2>&1 &
pids+=($!)
target/release/autoscaled serve --listen 127.0.0.1:0 --data-dir "$WORK/data" >"$WORK/server.out" 2>"$WORK/server.err" &
pids+=($!)
for _ in $(seq 100); do grep -q 'listening on' "$WORK/server.out" 2>/dev/null && break; sleep 0.1; done
SERVER=$(sed -n 's/^autoscaled listening on //p' "$WORK/server.out")
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PROM/-/ready" >/dev/null && break; sleep 0.1; done

{
  printf '[server]\naddr = "%s"\n[agent]\nmetrics_listen = "127.0.0.1:%s"\n[prometheus]\nurl = "http://127.0.0.1:%s"\n' \
    "$SERVER" "$METRICS" "$PROM"
  for i in $(seq "$TARGETS"); do
    cat <<TOML
[[targets]]
key = "cost/t$i"
sync_period = "$SYNC"
replicas = { command = ["echo", "3"] }
actuator = { command = ["true"] }
metrics = { queue = 'vector(3)' }
spec = { max_replicas = 10, metrics = [{ type = "METRIC_SOURCE_TYPE_EXTERNAL", name = "queue", target = { type = "METRIC_TARGET_TYPE_AVERAGE_VALUE", average_value_milli = 1000 } }] }
TOML
  done
} >"$WORK/agent.toml"
target/release/autoscaled-agent --config "$WORK/agent.toml" --log warn >"$WORK/agent.log" 2>&1 &
AGENT=$!
pids+=("$AGENT")
sleep 5 # past the first (jittered) periods and the connection set-up
ticks=$(getconf CLK_TCK)
stat() { awk '{print $14+$15, $16+$17}' "/proc/$AGENT/stat"; }
periods() { curl -s "http://127.0.0.1:$METRICS/metrics" | awk '/^autoscaled_agent_periods_total\{/ {s += $NF} END {print s+0}'; }
read -r own0 kids0 < <(stat)
p0=$(periods)
sleep "$SECONDS_RUN"
read -r own1 kids1 < <(stat)
p1=$(periods)
rss=$(awk '/VmRSS/ {print $2}' "/proc/$AGENT/status")
decided=$(curl -s "http://127.0.0.1:$METRICS/metrics" | awk '/^autoscaled_agent_periods_total\{.*result="failed"/ {s += $NF} END {print s+0}')
python3 - "$own0" "$own1" "$kids0" "$kids1" "$p0" "$p1" "$ticks" "$TARGETS" "$SECONDS_RUN" "$SYNC" "$rss" "$decided" <<'PY'
import sys
own0, own1, kids0, kids1, p0, p1, ticks = map(float, sys.argv[1:8])
targets, secs, sync, rss, failed = sys.argv[8], sys.argv[9], sys.argv[10], sys.argv[11], sys.argv[12]
periods = p1 - p0
own = (own1 - own0) / ticks
kids = (kids1 - kids0) / ticks
print(f"agent: {targets} targets every {sync} for {secs} s: {periods:.0f} target-periods ({failed} failed in all)")
print(f"  own CPU {own:.2f} s = {own * 1000 / max(periods, 1):.3f} ms per target-period")
print(f"  children (the replicas commands) {kids:.2f} s = {kids * 1000 / max(periods, 1):.3f} ms per target-period")
print(f"  resident memory {int(rss) / 1024:.1f} MiB")
PY
