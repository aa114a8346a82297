#!/usr/bin/env bash
# The main job: set up, build, start flover_server on the built-in
# GPT-2-small-shaped model (loopback, a free port; GPT-2's own vocabulary,
# random weights, so the text is noise), send one text prompt, run the
# bundled Poisson load client with text prompts (tools/demo_prompts.jsonl)
# against it, print its report, and stop the server.
# Extra arguments go to the load client (e.g. --rate=8 --num_requests=64).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
tools/setup.sh
tools/bazelw build //server:flover_server //clients:flover_loadgen //clients:flover_client
bin=.bazel-root/bin
out=$(mktemp -d)
"$bin/server/flover_server" --model=builtin:gpt2-small --listen=127.0.0.1:0 \
  --max_batch=32 --max_seq_len=512 > "$out/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$out"' EXIT
for _ in $(seq 1 600); do
  grep -q "^listening on" "$out/server.log" 2>/dev/null && break
  kill -0 $server 2>/dev/null || { cat "$out/server.log"; exit 1; }
  sleep 0.1
done
target=$(sed -n 's/^listening on //p' "$out/server.log" | head -1)
sed -n '2,3p' "$out/server.log"
echo "one request (text in, text out):"
"$bin/clients/flover_client" --target="$target" --prompt="The capital of France is" \
  --max_new_tokens=12 --temperature=0
echo
"$bin/clients/flover_loadgen" --target="$target" --rate=4 --num_requests=48 \
  --dataset=tools/demo_prompts.jsonl --output_len=uniform:16:96 --seed=1 "$@"
kill -TERM $server
wait $server
