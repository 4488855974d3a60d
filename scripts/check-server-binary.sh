#!/usr/bin/env bash
# What a production pod runs contains only what serves: the release `autoscaled` binary (built
# with `-p autoscaled`, as the Dockerfile builds it) must hold no code of autoscalectl's crate,
# of the plotting, PNG and font crates, of the conformance runner or of the recording proxy.
# Reads the binary's symbol table (the release profile strips debug info, not symbols).
# Usage: scripts/check-server-binary.sh [BINARY]   (default target/release/autoscaled)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/autoscaled}
[[ -x $bin ]] || { echo "check-server-binary: $bin is missing (cargo build --release --locked -p autoscaled)" >&2; exit 2; }
tools='(^|[^A-Za-z0-9_])(autoscaled_ctl|plotters|plotters_backend|plotters_svg|plotters_bitmap|png|ab_glyph|ab_glyph_rasterizer|owned_ttf_parser|ttf_parser|serde_norway)::'
# The same pattern finds them in autoscalectl, when it was built beside: the check can fail.
ctl=$(dirname "$bin")/autoscalectl
if [[ -x $ctl ]] && [[ $(nm --demangle "$ctl" | cut -d' ' -f3- | grep -cE "$tools" || true) == 0 ]]; then
  echo "check-server-binary: the pattern finds no tool code in $ctl either: it is broken" >&2
  exit 2
fi
symbols=$(nm --demangle "$bin" | cut -d' ' -f3-)
total=$(wc -l <<<"$symbols")
(( total > 1000 )) || { echo "check-server-binary: only $total symbols in $bin: stripped? cannot check" >&2; exit 2; }
found=$(grep -E "$tools" <<<"$symbols" | head -n 5 || true)
if [[ -n $found ]]; then
  echo "check-server-binary: $bin links tool code:" >&2
  echo "$found" >&2
  exit 1
fi
echo "check-server-binary: $bin ($(du -h "$bin" | cut -f1), $total symbols): no autoscalectl, plotting, PNG, font or manifest-reader code"
