#!/usr/bin/env bash
# Serving through gRPC, on builtin:gpt2-small, 2 threads (run on an idle
# machine; about 2 minutes):
#  1. overhead: the fusion benchmark's burst (32 requests, 8-token prompts,
#     128 output tokens) in-process vs through flover_server + flover_loadgen
#     over gRPC and over the OpenAI HTTP API (--http, streamed), in turns;
#  2. the llama-server comparison: a burst of 32 concurrent requests with
#     61-token prompts and 64 output tokens, EOS ignored.
# DTYPE=bf16 runs both with bf16 linear layers and KV_DTYPE=bf16 with a bf16
# KV cache (defaults f32); their results go to files named *_bf16.json,
# *_kvbf16.json or *_bf16_kvbf16.json.
set -euo pipefail
dtype="${DTYPE:-f32}"
kv_dtype="${KV_DTYPE:-f32}"
suffix="$([ "$dtype" = f32 ] || echo "_$dtype")$([ "$kv_dtype" = f32 ] || echo "_kv$kv_dtype")"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/bazelw build //server:flover_server //clients:flover_loadgen //benchmarks:fusion_benchmark >&2  # the figures alone go to stdout
bin=.bazel-root/bin
out=benchmarks/results
mkdir -p "$out"
log=$(mktemp)
# max_seq_len as the in-process run (8 + 128): the KV layout is the same then.
"$bin/server/flover_server" --model=builtin:gpt2-small --listen=127.0.0.1:0 --threads=2 \
  --max_batch=32 --max_seq_len=136 --dtype="$dtype" --kv_dtype="$kv_dtype" \
  --http_listen=127.0.0.1:0 > "$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -f "$log"' EXIT
until grep -q "^listening on" "$log"; do sleep 0.1; done
target=$(sed -n 's/^listening on //p' "$log")
until grep -q "^openai api on" "$log"; do sleep 0.1; done
http_target=$(sed -n 's#^openai api on http://\(.*\)/v1$#\1#p' "$log")
lg() { "$bin/clients/flover_loadgen" --target="$target" --progress=false --temperature=0 --ignore_eos "$@"; }
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
tps() { grep -o 'output [0-9.]* tokens/s' | awk '{print $2}'; }

burst128="--rate=inf --num_requests=32 --prompt_len=8 --output_len=128"
burst61="--rate=inf --num_requests=32 --prompt_len=61 --output_len=64"
lg $burst128 > /dev/null  # warm-up: primitives, KV pages
echo "== 1. overhead: burst of 32, prompt 8, output 128 (3 runs each, median)"
tmp_runs=$(mktemp -d)
for i in 1 2 3; do
  lg $burst128 | tps >> "$tmp_runs/grpc"
  "$bin/clients/flover_loadgen" --target="$http_target" --http --progress=false --temperature=0 \
    --ignore_eos $burst128 | tps >> "$tmp_runs/http"
  "$bin/benchmarks/fusion_benchmark" --gaps_ms=0 --schedulers=fusion --output_len=128 --dtype="$dtype" --kv_dtype="$kv_dtype" | tail -1 |
    awk -F'|' '{print $10}' >> "$tmp_runs/inproc"
done
grpc=$(median < "$tmp_runs/grpc")
http=$(median < "$tmp_runs/http")
inproc=$(median < "$tmp_runs/inproc")
echo "through gRPC: $grpc tokens/s ($(tr '\n' ' ' < "$tmp_runs/grpc")); through HTTP: $http ($(tr '\n' ' ' < "$tmp_runs/http")); in-process: $inproc ($(tr '\n' ' ' < "$tmp_runs/inproc"))"
awk -v g="$grpc" -v h="$http" -v p="$inproc" 'BEGIN {printf "gRPC throughput is %.1f%% lower, HTTP %.1f%% lower\n", 100 * (1 - g / p), 100 * (1 - h / p)}'
rm -rf "$tmp_runs"
echo "== 2. llama-server comparison: burst of 32, prompt 61, output 64 (last of 3 runs shown)"
for i in 1 2; do lg $burst61 > /dev/null; done
lg $burst61 --json="$out/grpc_burst61x64$suffix.json"
