#!/usr/bin/env bash
# TLS part of the clients CI (scripts/clients-ci.sh): makes a CA, a server certificate and
# two client certificates with openssl, starts a second server with mTLS (client certificates
# optional, so that token callers get in), an authorization file and the plaintext health
# listener, and runs the grpcurl recipes of docs/security.md against it.
#
#   scripts/tls-ci.sh            needs $AUTOSCALED_BIN and grpcurl in .venv (clients-ci installs both)
#
# Exit status 0 when every check passed.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${AUTOSCALED_BIN:?set AUTOSCALED_BIN}"
export PATH="$root/.venv/bin:$PATH"
work="$(mktemp -d -t autoscaled-tls-ci-XXXXXX)"
pid=""
cleanup() {
  [[ -n "$pid" ]] && kill -INT "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work" || exit 1

# ---- certificates (openssl) -------------------------------------------------------------
quiet() { "$@" >/dev/null 2>&1 || { echo "failed: $*"; exit 1; }; }
quiet openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -subj "/CN=autoscaled test CA" -keyout ca.key -out ca.pem
leaf() { # NAME SUBJECT SAN EXTENDED_KEY_USAGE
  quiet openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "$2" \
    -keyout "$1.key" -out "$1.csr"
  printf 'subjectAltName=%s\nextendedKeyUsage=%s\n' "$3" "$4" > "$1.ext"
  quiet openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
    -extfile "$1.ext" -out "$1.pem"
}
leaf server "/CN=autoscaled" "DNS:localhost,IP:127.0.0.1" serverAuth
leaf team-a "/CN=team-a" "URI:spiffe://example.org/team-a" clientAuth
TOKEN="ci-token-$RANDOM$RANDOM"
HASH="$(printf %s "$TOKEN" | sha256sum | cut -d' ' -f1)"
cat > authz.toml <<TOML
[[rule]]
identity = "spiffe://example.org/team-a"
verbs = ["recommend", "read", "write-usage", "delete"]
prefixes = ["team-a/"]

[[rule]]
identity = "ci-bot"
verbs = ["read"]
prefixes = ["team-a/"]

[[token]]
identity = "ci-bot"
sha256 = "$HASH"
TOML

# ---- server ----------------------------------------------------------------------------
"$bin" serve --listen 127.0.0.1:0 --data-dir "$work/data" --health-listen 127.0.0.1:0 \
  --tls-cert server.pem --tls-key server.key --tls-client-ca ca.pem --tls-client-auth optional \
  --authz authz.toml >server.out 2>server.err &
pid=$!
ADDR="" HEALTH=""
for _ in $(seq 300); do
  ADDR="$(sed -n 's/^autoscaled listening on \(.*\)$/\1/p' server.out)"
  HEALTH="$(sed -n 's/^autoscaled health listening on \(.*\)$/\1/p' server.out)"
  [[ -n "$ADDR" && -n "$HEALTH" ]] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
[[ -n "$ADDR" ]] || { cat server.err; echo "the TLS server did not start"; exit 1; }
echo "TLS server at $ADDR, health listener at $HEALTH"

# ---- recipes -----------------------------------------------------------------------------
passed=0 failed=0
check() { # TITLE WANT_RC REGEX -- COMMAND...
  local title="$1" want="$2" regex="$3"; shift 4
  local out rc
  out="$("$@" 2>&1)"; rc=$?
  if [[ $rc -eq $want ]] && grep -Eq -- "$regex" <<<"$out"; then
    passed=$((passed + 1)); echo "ok   $title"
  else
    failed=$((failed + 1)); echo "FAIL $title (rc $rc, want $want; /$regex/):"; echo "$out" | head -20
  fi
}
MTLS=(-cacert ca.pem -cert team-a.pem -key team-a.key)
REQUEST="$(sed 's#"examples/web"#"team-a/web"#' "$root/examples/recommend.json")"

check "mTLS: list the services over reflection" 0 '^autoscaled\.v1\.HorizontalAutoscaler$' -- \
  grpcurl "${MTLS[@]}" "$ADDR" list
check "mTLS: Recommend under team-a/" 0 '"desiredReplicas"' -- \
  grpcurl "${MTLS[@]}" -d "$REQUEST" "$ADDR" autoscaled.v1.HorizontalAutoscaler/Recommend
check "mTLS: team-b/ is PERMISSION_DENIED" 71 'may not recommend target "team-b/web"' -- \
  grpcurl "${MTLS[@]}" -d "${REQUEST//team-a\/web/team-b/web}" "$ADDR" autoscaled.v1.HorizontalAutoscaler/Recommend
check "token: GetHistory with a bearer token" 0 '"targetKey": "team-a/web"' -- \
  grpcurl -cacert ca.pem -H "authorization: Bearer $TOKEN" -d '{"targetKey": "team-a/web"}' \
    "$ADDR" autoscaled.v1.HorizontalAutoscaler/GetHistory
check "token: ListTargets shows only readable keys" 0 '"team-a/web"' -- \
  grpcurl -cacert ca.pem -H "authorization: Bearer $TOKEN" "$ADDR" autoscaled.v1.HorizontalAutoscaler/ListTargets
check "token: a wrong token is UNAUTHENTICATED" 1 'Unauthenticated' -- \
  grpcurl -cacert ca.pem -H "authorization: Bearer wrong" "$ADDR" list
check "no credentials: UNAUTHENTICATED" 1 'Unauthenticated' -- \
  grpcurl -cacert ca.pem "$ADDR" list
check "plaintext against the TLS port fails" 1 'Failed to dial|connection|EOF|handshake' -- \
  grpcurl -plaintext -max-time 5 "$ADDR" list
# The health listener serves health only (no reflection): give grpcurl the proto.
cat > health.proto <<'PROTO'
syntax = "proto3";
package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse {
  enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
  ServingStatus status = 1;
}
service Health { rpc Check(HealthCheckRequest) returns (HealthCheckResponse); }
PROTO
check "the health listener is plaintext and open" 0 'SERVING' -- \
  grpcurl -plaintext -import-path "$work" -proto health.proto -d '{}' "$HEALTH" grpc.health.v1.Health/Check

echo "tls: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
