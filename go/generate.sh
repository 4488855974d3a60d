#!/usr/bin/env bash
# Regenerates the Go protobuf + gRPC code in go/autoscaledv1 from proto/autoscaled/v1.
# Tools (Debian bookworm): protobuf-compiler (libprotoc 3.21.12), protoc-gen-go 1.28.1,
# protoc-gen-go-grpc 1.33.3. The well-known types come from /usr/include.
#
# Usage: go/generate.sh [OUT_DIR]   (OUT_DIR defaults to go/, i.e. writes go/autoscaledv1)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
out="${1:-$here}"
module="github.com/autoscaled/autoscaled/go"

for tool in protoc protoc-gen-go protoc-gen-go-grpc; do
  command -v "$tool" >/dev/null || { echo "generate.sh: $tool not found (apt-get install -y protobuf-compiler protoc-gen-go protoc-gen-go-grpc)" >&2; exit 2; }
done

mkdir -p "$out/autoscaledv1"
rm -f "$out"/autoscaledv1/*.pb.go
cd "$root/proto"
protoc -I . -I /usr/include \
  --go_out="$out" --go_opt=module="$module" \
  --go-grpc_out="$out" --go-grpc_opt=module="$module" \
  autoscaled/v1/*.proto
