#!/usr/bin/env bash
# Every shell block of README.md is either run by CI as written or says why not (issue 14).
#
#   scripts/readme-blocks.sh            check the marks, then run every `run` block
#   scripts/readme-blocks.sh --list     print each ```sh block's line, mark and session
#
# Each ```sh block must be
#   * inside a generated region whose own script runs it (`readme-tour:begin/end`,
#     scripts/readme-tour.sh; `grpcurl-recipes:begin/end`, scripts/grpcurl-recipes.sh: both
#     print the section and fail CI when README.md differs), or
#   * directly under `<!-- ci: run SESSION -->` or `<!-- ci: run SESSION background -->`:
#     the block's text, extracted from README.md at run time, is run by bash (-e, pipefail),
#     or
#   * directly under `<!-- ci: not-run: REASON -->` with a reason.
# An unmarked block, an unknown session or an empty reason fails the run.
#
# Blocks of one session run in README order in one shell, in a scratch directory that holds
# `examples/` (a link to the checkout's) and `../shared`, inside a fresh network namespace
# (`unshare -rnpf`): the README's fixed ports (50051, 8086, 2379) and 0.0.0.0 reach nothing
# outside it and collide with nothing else on the machine; and in its own PID namespace, so
# the servers a block starts (`&`) end with the session. A `background` block is started as
# a job and must print `listening on` (the server's and the proxy's first line) within 30 s.
# A session may have a prelude (what the reader brings: certificates, an etcd, a server with
# a target's history) and an epilogue (what the blocks should have produced), below.
#
# Needs `autoscaled`, `autoscalectl` and `autoscaled-agent` on PATH (clients-ci puts the
# binaries under test first), grpcurl (.venv), openssl, etcd, and for the agent session
# (examples/agent/run.sh) prometheus and python3; `unshare` with user namespaces.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readme="$root/README.md"
export PATH="$root/.venv/bin:$PATH"
SESSIONS=(serve security etcd whatif conformance agent)

# ---- parsing ------------------------------------------------------------------------------
# Prints one record per ```sh block: LINE<TAB>MARK<TAB>SESSION<TAB>FLAGS (MARK: generated,
# run, not-run, unmarked; for not-run, SESSION is the reason).
blocks() {
  awk '
    /^<!-- (readme-tour|grpcurl-recipes):begin -->$/ { gen = 1 }
    /^<!-- (readme-tour|grpcurl-recipes):end -->$/ { gen = 0 }
    /^```/ {
      if (inblock) { inblock = 0; next }
      inblock = 1
      if ($0 != "```sh") next
      mark = "unmarked"; session = ""; flags = ""
      if (gen) mark = "generated"
      else if (prev ~ /^<!-- ci: run [a-z-]+( background)? -->$/) {
        split(prev, w, " "); mark = "run"; session = w[4]
        if (w[5] == "background") flags = "background"
      } else if (prev ~ /^<!-- ci: not-run:/) {
        mark = "not-run"; session = prev
        sub(/^<!-- ci: not-run: */, "", session); sub(/ *-->$/, "", session)
      }
      printf "%d\t%s\t%s\t%s\n", NR, mark, session, flags
      next
    }
    !inblock && NF { prev = $0 }
  ' "$readme"
}

# The text of the block whose fence is at LINE.
block_text() { awk -v start="$1" 'NR > start && /^```/ { exit } NR > start { print }' "$readme"; }

# The text of the ```sh block under the heading TEXT (for preludes that reuse a recipe).
block_under() {
  local line
  line="$(awk -v h="$1" '$0 == h { found = 1 } found && $0 == "```sh" { print NR; exit }' "$readme")"
  [[ -n "$line" ]] || { echo "no block under '$1' in README.md" >&2; return 1; }
  block_text "$line"
}

# ---- helpers used inside a session ---------------------------------------------------------
say() { printf '   %s\n' "$*"; }
# Waits until FILE has a line matching REGEX (a server's `listening on`), at most 30 s.
wait_line() { # FILE REGEX
  local _
  for _ in $(seq 300); do grep -Eq "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "no /$2/ in $1 after 30 s:"; cat "$1"; return 1
}
serving() { # ADDR [grpcurl TLS flags...]: health SERVING within 30 s
  local addr="$1" _; shift
  for _ in $(seq 300); do
    grpcurl -plaintext "$@" -d '{"service": ""}' "$addr" grpc.health.v1.Health/Check 2>/dev/null |
      grep -q '"SERVING"' && return 0
    sleep 0.1
  done
  echo "$addr never SERVING"; return 1
}

# ---- preludes and epilogues ----------------------------------------------------------------
# The security session's certificates, token and authz.toml are made by the README's own
# first block of the section (openssl), as a reader makes them: no prelude.
epilogue_security() {
  grep -q team-a/web blocks.out || { echo "the token's ListTargets did not show team-a/web"; return 1; }
}

prelude_etcd() {
  # The block's `apt-get install` runs as the stub below: the sandbox has no network and its
  # root is a user-namespace root that cannot lock dpkg. The stub checks the packages are
  # installed (CI installs etcd with scripts/etcd-ci.sh), so a renamed package still fails.
  apt-get() {
    [[ "$1" == install ]] || return 1
    shift; local p
    for p in "$@"; do [[ "$p" == -* ]] || dpkg -s "$p" >/dev/null 2>&1 || { echo "package $p is not installed"; return 1; }; done
  }
  export -f apt-get
  # "or use your etcd cluster": one member on the README's endpoint.
  etcd --name readme --data-dir ./etcd-data --listen-client-urls http://127.0.0.1:2379 \
    --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
    --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster readme=http://127.0.0.1:2380 >etcd.log 2>&1 &
  ETCD_PID=$!
  local _
  for _ in $(seq 300); do
    etcdctl --endpoints http://127.0.0.1:2379 endpoint health >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "etcd did not start:"; tail etcd.log; return 1
}
epilogue_etcd() {
  # Both replicas serve, and a decision taken by one is in the other's history.
  serving 127.0.0.1:50051 && serving 127.0.0.1:50052 || return 1
  autoscalectl recommend --addr 127.0.0.1:50051 --file examples/recommend.json >/dev/null &&
    autoscalectl history --addr 127.0.0.1:50052 examples/web >/dev/null ||
    { echo "a decision made on 50051 is not in 50052's history"; return 1; }
}

prelude_whatif() {
  # A server with the history of grpcurl/prod/web: the README's grpcurl Recommend recipe.
  autoscaled serve --listen 127.0.0.1:50051 --data-dir ./data >server.out 2>&1 &
  wait_line server.out 'listening on' || return 1
  ADDR=127.0.0.1:50051 bash -eo pipefail -c \
    "$(block_under '### Recommend: 3 pods requesting 1 CPU each use 900m against a 50% target')" >/dev/null
}
epilogue_whatif() {
  grep -q '<svg' whatif.svg && grep -q '<svg' report.html ||
    { echo "whatif.svg or report.html lacks its picture"; return 1; }
  # The recording proxy writes what goes through it.
  autoscalectl recommend --addr 127.0.0.1:50052 --file examples/recommend.json >/dev/null &&
    grep -q '"targetKey"' web.jsonl || { echo "the proxy recorded nothing in web.jsonl"; return 1; }
}

# ---- one session, inside its namespace ----------------------------------------------------
run_session() { # SESSION
  local session="$1" line mark s flags n=0
  ip link set lo up || return 1
  if declare -F "prelude_$session" >/dev/null; then "prelude_$session" || { echo "prelude failed"; return 1; }; fi
  while IFS=$'\t' read -r line mark s flags; do
    [[ "$mark" == run && "$s" == "$session" ]] || continue
    n=$((n + 1))
    block_text "$line" >"block-$line.sh"
    if [[ "$flags" == background ]]; then
      bash -eo pipefail "block-$line.sh" >"block-$line.out" 2>&1 &
      wait_line "block-$line.out" 'listening on' || return 1
      say "README.md:$line started (background)"
    else
      if ! bash -eo pipefail "block-$line.sh" >"block-$line.out" 2>&1; then
        echo "README.md:$line failed:"; sed 's/^/   | /' "block-$line.sh"; tail -n 30 "block-$line.out"
        return 1
      fi
      cat "block-$line.out" >>blocks.out
      say "README.md:$line ran ($(wc -l <"block-$line.out") lines of output)"
    fi
  done < <(blocks)
  ((n > 0)) || { echo "no block is marked for session $session"; return 1; }
  if declare -F "epilogue_$session" >/dev/null; then "epilogue_$session" || return 1; fi
}

in_namespace() { # SESSION: the scratch directory and the cleanup of background jobs
  local session="$1" dir rc
  dir="$(mktemp -d -t "readme-$session-XXXXXX")"
  mkdir "$dir/repo" && ln -s "$root/examples" "$dir/repo/examples" &&
    ln -s "$(cd "$root/.." && pwd)/shared" "$dir/shared"
  cd "$dir/repo" || return 1
  run_session "$session"; rc=$?
  # This shell is PID 1 of the session's own PID namespace (unshare -p): SIGINT to every
  # other process in it (the servers' graceful stop), the session's etcd last so that the
  # servers' final writes reach it; whatever is left when this shell exits, the kernel kills
  # with the namespace.
  stop_all() { # PIDS TO SPARE...
    local pid _ alive spare=" $$ $* " targets=()
    for pid in $(ps -e -o pid=); do [[ "$spare" == *" $pid "* ]] || targets+=("$pid"); done
    ((${#targets[@]})) || return 0
    kill -INT "${targets[@]}" 2>/dev/null
    for _ in $(seq 100); do
      alive=""
      for pid in "${targets[@]}"; do
        [[ -d /proc/$pid && "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] && alive=1
      done
      [[ -z "$alive" ]] && break
      sleep 0.1
    done
  }
  stop_all "${ETCD_PID:-}"
  [[ -n "${ETCD_PID:-}" ]] && stop_all
  cd / && rm -rf "$dir"
  return "$rc"
}

# ---- main -----------------------------------------------------------------------------------
case "${1:-}" in
  --session) shift; in_namespace "$1"; exit ;;
  --list) blocks; exit 0 ;;
esac

failed=0 passed=0
while IFS=$'\t' read -r line mark s _; do
  case "$mark" in
    unmarked) echo "FAIL README.md:$line: a \`\`\`sh block with no '<!-- ci: run SESSION -->' or '<!-- ci: not-run: REASON -->' above it"; failed=$((failed + 1)) ;;
    not-run) [[ -n "$s" ]] || { echo "FAIL README.md:$line: not-run without a reason"; failed=$((failed + 1)); } ;;
    run) [[ " ${SESSIONS[*]} " == *" $s "* ]] || { echo "FAIL README.md:$line: unknown session '$s'"; failed=$((failed + 1)); } ;;
  esac
done < <(blocks)
for b in autoscaled autoscalectl; do command -v $b >/dev/null || { echo "$b not on PATH"; exit 2; }; done
# A user namespace (-r) where the kernel allows one; as root, plain network and PID namespaces.
ns=(unshare -rnpf --mount-proc)
"${ns[@]}" true 2>/dev/null || ns=(unshare -npf --mount-proc)
"${ns[@]}" true 2>/dev/null || { echo "FAIL: unshare -npf (network and PID namespaces) is not available"; exit 1; }
for session in "${SESSIONS[@]}"; do
  t0=$(date +%s%N)
  if timeout 180 "${ns[@]}" "$0" --session "$session"; then
    passed=$((passed + 1)); echo "ok   readme session $session ($(( ($(date +%s%N) - t0) / 1000000 )) ms)"
  else
    failed=$((failed + 1)); echo "FAIL readme session $session"
  fi
done
echo "readme blocks: $(blocks | grep -c $'\t'run$'\t') run in $passed sessions, $(blocks | grep -c $'\t'not-run$'\t') marked not-run, $(blocks | grep -c $'\t'generated$'\t') in generated sections; $failed failed"
[[ $failed -eq 0 ]]
