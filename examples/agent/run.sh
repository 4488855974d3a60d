#!/usr/bin/env bash
# The autoscaled-agent demo (about 30 s): local worker processes (worker.py) scraped by
# Prometheus, autoscaled deciding, autoscaled-agent scaling them with scale.sh.
#
#   examples/agent/run.sh          (KEEP=1 keeps the working directory and its logs)
#
# It starts Prometheus, autoscaled and autoscaled-agent on free ports of 127.0.0.1 with a
# temporary directory, sets a load of 45 against a target of 10 per worker (5 workers), then
# a load of 10 (1 worker, after the 10 s scale-down stabilization window), prints what
# autoscalectl shows, and stops everything it started. Exit status: 0 when the workers went
# 1 -> 5 -> 1 in time, 1 when they did not (the end of the agent's log is printed), 2 when a
# program is missing.
#
# Needs prometheus, python3, and autoscaled, autoscaled-agent and autoscalectl on PATH.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
scale=$here/scale.sh

# ---- what it needs ------------------------------------------------------------------------
missing=0
need() { # PROGRAM HOW-TO-INSTALL
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "run.sh: $1 is not on PATH; $2" >&2
  missing=1
}
need prometheus "install it with scripts/prometheus-ci.sh install (Debian's package), or from https://prometheus.io/download/"
need python3 "install Python 3 (the workers are stdlib-only Python scripts)"
ours=()
for program in autoscaled autoscaled-agent autoscalectl; do
  command -v "$program" >/dev/null 2>&1 || ours+=("$program")
done
if ((${#ours[@]})); then
  echo "run.sh: ${ours[*]} not on PATH; from the checkout:" >&2
  echo "  cargo install --path . && cargo install --path crates/agent && cargo install --path crates/ctl" >&2
  missing=1
fi
[ "$missing" = 0 ] || exit 2

# ---- helpers ------------------------------------------------------------------------------
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# A process is alive if it exists and is not a zombie (our children stay zombies until waited).
alive() { [[ $(ps -o stat= -p "$1" 2>/dev/null) == [!Z]* ]]; }

# GET URL: the body on stdout, exit status non-zero on any error. Everything is on 127.0.0.1,
# so no proxy. curl where there is one (this runs every 2 s), else Python.
if command -v curl >/dev/null 2>&1; then
  http_get() { curl -fsS --max-time 2 --noproxy '*' "$1" 2>/dev/null; }
else
  http_get() {
    python3 -c '
import sys, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
try:
    sys.stdout.write(opener.open(sys.argv[1], timeout=2).read().decode())
except Exception:
    sys.exit(1)' "$1"
  }
fi

# Waits up to SECONDS for COMMAND to succeed.
wait_for() { # SECONDS COMMAND...
  local end=$(($(now_ms) + $1 * 1000))
  shift
  until "$@"; do
    (($(now_ms) < end)) || return 1
    sleep 0.2
  done
}

# Replaces @NAME@ placeholders (NAME=VALUE arguments) in FILE, printing the result.
render() { # FILE NAME=VALUE...
  python3 -c '
import sys
text = open(sys.argv[1]).read()
for pair in sys.argv[2:]:
    name, value = pair.split("=", 1)
    text = text.replace("@" + name + "@", value)
sys.stdout.write(text)' "$@"
}

# ---- cleanup ------------------------------------------------------------------------------
dir="" agent_pid="" server_pid="" prom_pid=""
stop() { # PID: SIGTERM, then SIGKILL after 35 s (the agent waits up to 30 s for a period)
  local pid=$1 i
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 350; i++)); do
    alive "$pid" || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop "$agent_pid" # first, so that it scales nothing while the rest stops
  stop "$server_pid"
  stop "$prom_pid"
  if [ -n "$dir" ]; then
    "$scale" "$dir" stop-all >/dev/null 2>&1 || true
    if [ "${KEEP:-}" = 1 ]; then
      echo "kept $dir (agent.log, server.log, prometheus.log, agent.toml)"
    else
      rm -rf "$dir"
    fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() { # MESSAGE: the end of the agent's log, exit 1
  echo "run.sh: FAILED: $*" >&2
  if [ -s "$dir/agent.log" ]; then
    echo "--- the last 40 lines of the agent's log (KEEP=1 keeps $dir) ---" >&2
    tail -n 40 "$dir/agent.log" >&2
  fi
  exit 1
}

# ---- start --------------------------------------------------------------------------------
dir=$(mktemp -d -t autoscaled-agent-demo-XXXXXX)
# Three free ports on 127.0.0.1, bound together so that they differ.
read -r prom_port server_port metrics_port < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))')
server=127.0.0.1:$server_port
prometheus_url=http://127.0.0.1:$prom_port

# One worker with no load.
echo 0 >"$dir/load"
"$scale" "$dir" set 1 >/dev/null

render "$here/prometheus.yml.in" DIR="$dir" >"$dir/prometheus.yml"
prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" >"$dir/prometheus.log" 2>&1 &
prom_pid=$!
wait_for 30 http_get "$prometheus_url/-/ready" >/dev/null ||
  { tail -n 20 "$dir/prometheus.log" >&2; fail "Prometheus did not start on 127.0.0.1:$prom_port"; }

autoscaled serve --listen "$server" --data-dir "$dir/data" >"$dir/server.log" 2>&1 &
server_pid=$!
wait_for 30 grep -q 'autoscaled listening on' "$dir/server.log" ||
  { tail -n 20 "$dir/server.log" >&2; fail "autoscaled did not start on $server"; }

render "$here/agent.toml.in" DIR="$dir" SCALE="$scale" SERVER="$server" \
  PROMETHEUS="$prometheus_url" METRICS="127.0.0.1:$metrics_port" >"$dir/agent.toml"
autoscaled-agent --check --config "$dir/agent.toml" >/dev/null ||
  fail "$(autoscaled-agent --check --config "$dir/agent.toml" 2>&1)"
autoscaled-agent --config "$dir/agent.toml" >"$dir/agent.log" 2>&1 &
agent_pid=$!
wait_for 10 grep -q 'agent started' "$dir/agent.log" || fail "autoscaled-agent did not start"

echo "prometheus on $prometheus_url, autoscaled on $server, agent metrics on http://127.0.0.1:$metrics_port/metrics"
echo "working directory $dir; target demo/worker: 1 to 8 workers, a load of 10 per worker"

# How many workers Prometheus scrapes successfully (its instance count lags the scheduler's
# by seconds: docs/agent.md).
scraped() {
  local body n
  body=$(http_get "$prometheus_url/api/v1/query?query=count(up%7Bjob%3D%22worker%22%7D%3D%3D1)") ||
    { echo -; return; }
  n=$(sed -n 's/.*"value":\[[^,]*,"\([0-9]*\)"\].*/\1/p' <<<"$body")
  echo "${n:-0}"
}
# Prometheus discovers the first worker a few seconds after its start.
first_scraped() { [ "$(scraped)" = 1 ]; }
wait_for 30 first_scraped || fail "Prometheus did not scrape the first worker within 30 s"

# ---- the load -----------------------------------------------------------------------------
# The agent's last decision for the target, from its own metrics.
desired() {
  local line
  line=$(http_get "http://127.0.0.1:$metrics_port/metrics" |
    grep -F 'autoscaled_agent_replicas{target="demo/worker",kind="desired"}') || { echo -; return; }
  echo "${line##* }"
}

# Fails when a process the demo started has exited.
running() {
  alive "$prom_pid" || { tail -n 20 "$dir/prometheus.log" >&2; fail "prometheus exited"; }
  alive "$server_pid" || { tail -n 20 "$dir/server.log" >&2; fail "autoscaled exited"; }
  alive "$agent_pid" || fail "autoscaled-agent exited"
}

t0=$(now_ms)
# Sets LOAD and prints a line every 2 s until WANT workers run (and, with SCRAPED=1,
# Prometheus scrapes them all); fails after WITHIN seconds.
phase() { # LOAD WANT WITHIN
  local load=$1 want=$2 end=$(($(now_ms) + $3 * 1000)) next n s wait_ms
  echo "$load" >"$dir/load"
  next=$(now_ms)
  while :; do
    running
    n=$("$scale" "$dir" count)
    s=$(scraped)
    printf 't=%3ds  load=%-3s replicas=%s  scraped=%s  desired=%s\n' \
      $((($(now_ms) - t0) / 1000)) "$load" "$n" "$s" "$(desired)"
    [[ $n == "$want" && (-z ${SCRAPED:-} || $s == "$want") ]] && return 0
    (($(now_ms) < end)) || fail "$want replicas not reached within $3 s of load $load (replicas $n, scraped $s)"
    next=$((next + 2000))
    wait_ms=$((next - $(now_ms)))
    ((wait_ms <= 0)) || sleep "$((wait_ms / 1000)).$(printf '%03d' $((wait_ms % 1000)))"
  done
}

echo "load 45: ceil(45 / 10) = 5 workers (kept until Prometheus scrapes all 5)"
SCRAPED=1 phase 45 5 30
up_s=$((($(now_ms) - t0) / 1000))
echo "load 10: 1 worker, once the 10 s scale-down stabilization window has passed"
t1=$(now_ms)
phase 10 1 40
down_s=$((($(now_ms) - t1) / 1000))
echo "1 -> 5 workers in ${up_s} s, 5 -> 1 in ${down_s} s"
# One more period, so that the last decision is taken at 1 replica.
settled() {
  http_get "http://127.0.0.1:$metrics_port/metrics" |
    grep -xF 'autoscaled_agent_replicas{target="demo/worker",kind="current"} 1' >/dev/null
}
wait_for 6 settled || true

echo
echo "\$ autoscalectl get targets --addr $server"
autoscalectl get targets --addr "$server"
echo
echo "\$ autoscalectl describe target demo/worker --addr $server"
autoscalectl describe target demo/worker --addr "$server"
echo
echo "demo done: scaled 1 -> 5 -> 1"
