#!/usr/bin/env bash
# Regenerates the Python stubs in clients/python/flover_client from
# proto/flover.proto (protoc + grpc_python_plugin from Debian), with the
# import made package-relative. tests/python checks they are up to date.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/clients/python/flover_client}"
protoc --proto_path="$root/proto" --python_out="$out" --grpc_out="$out" \
  --plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin "$root/proto/flover.proto"
sed -i 's/^import flover_pb2 as flover__pb2$/from . import flover_pb2 as flover__pb2/' "$out/flover_pb2_grpc.py"
