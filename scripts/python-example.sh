#!/usr/bin/env bash
# Runs examples/python/recommend.py against ADDR and checks its output: the scale-up decision
# with its conditions, then the INVALID_ARGUMENT path (an empty target key) with the field named.
#   scripts/python-example.sh ADDR
# Installs grpcio, grpcio-tools and grpcio-status into .venv (PYTHON_VENV overrides) if absent.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
addr="${1:?usage: scripts/python-example.sh ADDR}"
venv="${PYTHON_VENV:-$root/.venv}"
py="$venv/bin/python"

if [[ ! -x "$py" ]]; then
  python3 -m venv "$venv" || exit 2
fi
if ! "$py" -c 'import grpc, grpc_tools, grpc_status' 2>/dev/null; then
  "$py" -m pip install -q grpcio grpcio-tools grpcio-status || exit 2
fi

failed=0
check() { # NAME EXPECTED_RC OUTPUT RC PATTERN...
  local name="$1" want_rc="$2" out="$3" rc="$4"; shift 4
  local missing=() p
  for p in "$@"; do grep -Eq -- "$p" <<<"$out" || missing+=("$p"); done
  if [[ "$rc" -eq "$want_rc" && ${#missing[@]} -eq 0 ]]; then
    echo "ok   $name"
  else
    failed=$((failed + 1))
    echo "FAIL $name (exit $rc, want $want_rc)"
    for p in "${missing[@]}"; do echo "     expected /$p/"; done
  fi
  sed 's/^/     | /' <<<"$out"
}

key="python-example/prod/web-$$-$(date +%s)"
out="$("$py" "$root/examples/python/recommend.py" "$addr" --target-key "$key" 2>&1)"
check "recommend.py scale-up" 0 "$out" $? \
  "^target $key: 3 -> 6 replicas \(path [A-Za-z]+, recorded True\)$" \
  '^  AbleToScale=True ' '^  ScalingActive=True ValidMetricFound' '^  ScalingLimited=False DesiredWithinRange' \
  '^  metric cpu: 90% proposes 6$'

out="$("$py" "$root/examples/python/recommend.py" "$addr" --target-key "" 2>&1)"
check "recommend.py invalid argument" 2 "$out" $? '^error: INVALID_ARGUMENT: ' '^invalid field [a-z_.]*target_key'

echo "python example: $failed failed"
[[ $failed -eq 0 ]]
