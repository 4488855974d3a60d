#!/usr/bin/env bash
# Fails when go/autoscaledv1 is not what go/generate.sh produces from proto/ today
# (someone changed a .proto and did not regenerate, or edited generated code by hand).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$here/generate.sh" "$tmp"
if diff -ru "$here/autoscaledv1" "$tmp/autoscaledv1"; then
  echo "check-generated: go/autoscaledv1 is up to date"
else
  echo "check-generated: go/autoscaledv1 is STALE; run go/generate.sh and commit the result" >&2
  exit 1
fi
