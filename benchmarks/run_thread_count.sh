#!/usr/bin/env bash
# What --threads means for a server's throughput on builtin:gpt2-small (run
# on an idle machine; about 6 minutes on 2 cores): the serving burst (32
# requests at once, 8-token prompts, 64 output tokens, greedy) through
# flover_server + flover_loadgen, in four layouts:
#   one-1t:  one server, --threads=1
#   two-1t:  two servers, --threads=1 each, loaded at once (the sum)
#   tp2:     mpirun -np 2 --tp=2, the default threads (cores / ranks)
#   one-all: one server, the default threads (every core)
# and, when BEFORE=path/to/flover_server names another build, that binary
# too. The binaries take turns, ROUNDS rounds (default 3); medians printed,
# beside the machine's roofline (model_benchmark, first).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/bazelw build //server:flover_server //clients:flover_loadgen //benchmarks:model_benchmark >&2
bin=.bazel-root/bin
rounds="${ROUNDS:-3}"
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# start LOG COMMAND...: starts a server writing LOG; sets addr to its address.
start() {
  local log=$1
  shift
  "$@" --model=builtin:gpt2-small --listen=127.0.0.1:0 --max_batch=32 --max_seq_len=80 \
    > "$log" 2>&1 &
  pids+=($!)
  until grep -q "^listening on" "$log"; do sleep 0.1; done
  addr=$(sed -n 's/^listening on //p' "$log")
}
burst() {
  "$bin/clients/flover_loadgen" --target="$1" --progress=false --temperature=0 --ignore_eos \
    --rate=inf --num_requests=32 --prompt_len=8 --output_len=64 |
    grep -o 'output [0-9.]* tokens/s' | awk '{print $2}'
}
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}

# layouts NAME SERVER: one round of the four layouts; appends tokens/s to
# $tmp/NAME.LAYOUT.
layouts() {
  local name=$1 server=$2 a b bg
  start "$tmp/a.log" "$server" --threads=1
  a=$addr
  burst "$a" > /dev/null  # warm-up
  burst "$a" >> "$tmp/$name.one-1t"
  start "$tmp/b.log" "$server" --threads=1
  b=$addr
  burst "$b" > /dev/null
  burst "$a" > "$tmp/x" &
  bg=$!
  burst "$b" > "$tmp/y"
  wait "$bg"
  awk '{s += $1} END {print s}' "$tmp/x" "$tmp/y" >> "$tmp/$name.two-1t"
  stop_all
  start "$tmp/a.log" mpirun --allow-run-as-root --oversubscribe -np 2 "$server" --tp=2
  burst "$addr" > /dev/null
  burst "$addr" >> "$tmp/$name.tp2"
  stop_all
  start "$tmp/a.log" "$server"
  burst "$addr" > /dev/null
  burst "$addr" >> "$tmp/$name.one-all"
  stop_all
}

median() { sort -n "$1" | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

"$bin/benchmarks/model_benchmark" --prefill_lengths=128 --decode_batches=1 --repeats=3
echo
for r in $(seq 1 "$rounds"); do
  if [ -n "${BEFORE:-}" ]; then layouts before "$BEFORE"; fi
  layouts now "$bin/server/flover_server"
done
echo "| layout | binary | output tokens/s (median of $rounds) | runs |"
echo "|---|---|---:|---|"
for layout in one-1t two-1t tp2 one-all; do
  for name in before now; do
    [ -f "$tmp/$name.$layout" ] || continue
    echo "| $layout | $name | $(median "$tmp/$name.$layout") | $(tr '\n' ' ' < "$tmp/$name.$layout")|"
  done
done
