#!/usr/bin/env bash
# The "scheduler" of the autoscaled-agent example: runs N local worker.py instances and
# publishes them to Prometheus through a file_sd targets file.
#
#   scale.sh DIR count      print the number of live workers (a bare integer)
#   scale.sh DIR set N      scale to N workers (0..50), rewrite DIR/targets.json,
#                           print "scaled to N (was M)"
#   scale.sh DIR stop-all   stop every worker (test cleanup)
#
# The workers are published with the label job="worker", or job="<content of DIR/job>" when
# that file exists (several pools scraped by one Prometheus).
#
# Fault injection for the agent's tests (checked by `set` only):
#   DIR/hang   `set` hangs (sleeps an hour) until killed: exec'd so a kill of the shell's
#              pid or process group (timeout) leaves nothing behind
#   DIR/fail   `set` exits 1 with "scale refused: <content of DIR/fail>" on stderr
set -euo pipefail

usage() { echo "usage: $0 DIR count | DIR set N | DIR stop-all" >&2; exit 2; }
[ $# -ge 2 ] || usage
dir=$1 cmd=$2
workers=$dir/workers
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$workers"

# A pid is alive if it runs and is not a zombie: this machine's init reaps orphans only
# every ~1.7 s, and kill -0 succeeds on a zombie.
alive() { [[ $(ps -o stat= -p "$1" 2>/dev/null) == [!Z]* ]]; }

# Live = a port file whose pid file names a running process. Port files of workers that
# died without cleaning up (SIGKILL) are removed, since worker.py divides the load by the
# number of port files.
live_names() {
  local f name pid
  for f in "$workers"/*.port; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .port)
    pid=$(cat "$workers/$name.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && alive "$pid"; then
      echo "$name"
    else
      rm -f "$f" "$workers/$name.pid"
    fi
  done | sort -t w -k 2 -n # w1 w2 ... w10: oldest first
}

stop_worker() { # SIGTERM, wait until it is gone (worker.py removes its own files)
  local name=$1 pid i
  pid=$(cat "$workers/$name.pid" 2>/dev/null || true)
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      alive "$pid" || break
      sleep 0.1
    done
    ! alive "$pid" || kill -KILL "$pid" 2>/dev/null || true # still there after 10 s
  fi
  rm -f "$workers/$name.port" "$workers/$name.pid"
}

write_targets() { # atomically (tmp + rename): Prometheus must never read half a file
  local name targets="" json='[]' job=worker
  [ ! -e "$dir/job" ] || job=$(cat "$dir/job")
  while read -r name; do
    targets+="${targets:+, }\"127.0.0.1:$(cat "$workers/$name.port")\""
  done < <(live_names)
  [ -z "$targets" ] || json="[{\"targets\": [$targets], \"labels\": {\"job\": \"$job\"}}]"
  echo "$json" >"$dir/targets.json.tmp"
  mv -f "$dir/targets.json.tmp" "$dir/targets.json"
}

case $cmd in
  count)
    live_names | wc -l
    ;;
  set)
    [ $# -eq 3 ] || usage
    n=$3
    if ! [[ $n =~ ^[0-9]+$ ]] || ((10#$n > 50)); then
      echo "scale.sh: replica count must be an integer in 0..50, got '$n'" >&2
      exit 2
    fi
    n=$((10#$n))
    [ ! -e "$dir/hang" ] || exec sleep 3600
    if [ -e "$dir/fail" ]; then
      echo "scale refused: $(cat "$dir/fail")" >&2
      exit 1
    fi
    # One scale at a time; fd 9 is closed for the workers, or they would hold the lock.
    exec 9>"$dir/.scale.lock"
    flock -w 30 9
    mapfile -t names < <(live_names)
    was=${#names[@]}
    new=()
    next=1 # after the newest live worker's number
    [ "$was" -eq 0 ] || next=$((${names[$((was - 1))]#w} + 1))
    for ((have = was; have < n; have++)); do
      name=w$next
      next=$((next + 1))
      # setsid: own session and process group, so the worker outlives this script and a
      # timeout killing the scale command's group; no fd of ours (stdout pipe, lock) kept.
      setsid python3 "$here/worker.py" "$dir" "$name" </dev/null >/dev/null 2>>"$workers/$name.log" 9>&- &
      new+=("$name")
    done
    for ((i = was - 1; i >= n; i--)); do stop_worker "${names[$i]}"; done # newest first
    for name in "${new[@]}"; do
      for ((i = 0; i < 100; i++)); do
        [ ! -e "$workers/$name.port" ] || continue 2
        sleep 0.1
      done
      echo "scale.sh: worker $name did not start within 10 s (see $workers/$name.log)" >&2
      write_targets
      exit 1
    done
    write_targets
    echo "scaled to $n (was $was)"
    ;;
  stop-all)
    exec 9>"$dir/.scale.lock"
    flock -w 30 9
    while read -r name; do stop_worker "$name"; done < <(live_names)
    write_targets
    ;;
  *) usage ;;
esac
