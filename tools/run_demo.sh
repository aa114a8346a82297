#!/usr/bin/env bash
# The main job: set up, build, start flover_server on its default model,
# SmolLM2-135M-Instruct (a real instruct model, fetched by tools/setup.sh),
# on loopback; ask it one chat question (flover_client --chat over gRPC);
# run the bundled Poisson load client with chat requests
# (tools/demo_chats.jsonl, streamed through the OpenAI API's
# /v1/chat/completions); print its report; stop the server. Exits 0 when all
# of that worked.
#
# Extra arguments go to the load client (e.g. --rate=8 --num_requests=64).
# FLOVER_DEMO_BIN=DIR runs binaries already built under DIR (server/ and
# clients/), without setup or a build: its test does.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bin="${FLOVER_DEMO_BIN:-}"
if [ -z "$bin" ]; then
  tools/setup.sh
  tools/bazelw build //server:flover_server //clients:flover_loadgen //clients:flover_client
  bin=.bazel-root/bin
fi
out=$(mktemp -d)
server=""
# On any exit: stop a server still running; a stopped one is not an error.
cleanup() {
  if [ -n "$server" ] && kill -0 "$server" 2>/dev/null; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  rm -rf "$out"
}
trap cleanup EXIT
"$bin/server/flover_server" --listen=127.0.0.1:0 --http_listen=127.0.0.1:0 \
  --max_batch=16 --max_seq_len=1024 > "$out/server.log" 2>&1 &
server=$!
for _ in $(seq 1 600); do
  grep -q "^openai api on" "$out/server.log" 2>/dev/null && break
  kill -0 "$server" 2>/dev/null || { cat "$out/server.log"; exit 1; }
  sleep 0.1
done
grep -q "^openai api on" "$out/server.log" || { cat "$out/server.log"; exit 1; }
target=$(sed -n 's/^listening on //p' "$out/server.log" | head -1)
http=$(sed -n 's|^openai api on http://\(.*\)/v1$|\1|p' "$out/server.log" | head -1)
sed -n '3,6p' "$out/server.log"
echo
echo "one chat question (gRPC, the model's chat template):"
echo "> Which city is the capital of France?"
"$bin/clients/flover_client" --target="$target" --chat="Which city is the capital of France?" \
  --max_new_tokens=48 --temperature=0
echo
echo
"$bin/clients/flover_loadgen" --target="$http" --chat --dataset=tools/demo_chats.jsonl \
  --rate=4 --num_requests=24 --output_len=uniform:32:128 --temperature=0.7 --seed=1 "$@"
kill -TERM "$server"
wait "$server"  # drains and exits 0; anything else fails the demo
server=""
