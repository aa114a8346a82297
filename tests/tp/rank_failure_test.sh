#!/usr/bin/env bash
# Killing one tensor-parallel rank mid-load ends the server job with a
# non-zero exit within a bounded time, and clients see UNAVAILABLE: never a
# silent hang.
set -uo pipefail
server="$1"
loadgen="$2"
work="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }
marker="--max_queue=4321"  # finds this test's ranks and nobody else's

mpirun --allow-run-as-root --oversubscribe -np 2 "$server" --tp=2 --threads=1 \
  --model=builtin:gpt2-small --max_seq_len=128 --max_batch=8 "$marker" \
  --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 > "$work/server.out" 2> "$work/server.err" &
job=$!
for _ in $(seq 1 300); do
  grep -q "^metrics on" "$work/server.out" && break
  kill -0 $job 2>/dev/null || fail "server job exited early: $(cat "$work/server.err")"
  sleep 0.1
done
target=$(sed -n 's/^listening on //p' "$work/server.out")
metrics=$(sed -n 's/^metrics on //p' "$work/server.out")
[ -n "$target" ] && [ -n "$metrics" ] || fail "server did not start"
metric() { curl -s "$metrics" | awk -v m="$1" '$1 == m {print int($2)}'; }

"$loadgen" --target="$target" --rate=20 --num_requests=60 --prompt_len=8 --output_len=64 \
  --ignore_eos --progress=false > "$work/loadgen.out" 2>&1 &
client=$!
# The rank dies while the load is in flight: waits (bounded) until both ranks
# have run fused steps with sequences in them, not for a guessed time.
in_flight=""
for _ in $(seq 1 600); do
  running=$(metric flover_requests_running) tokens=$(metric flover_generated_tokens_total)
  if [ "${running:-0}" -ge 2 ] && [ "${tokens:-0}" -gt 0 ]; then in_flight=1; break; fi
  kill -0 $client 2>/dev/null || fail "load ended before a rank was killed: $(cat "$work/loadgen.out")"
  sleep 0.1
done
[ -n "$in_flight" ] || fail "no load in flight after 60 s"
echo "killing rank 1 with $running requests running, $tokens tokens generated"

rank1=""
for p in $(pgrep -f -- "$marker"); do
  if grep -qx "OMPI_COMM_WORLD_RANK=1" <<< "$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null)"; then rank1=$p; fi
done
[ -n "$rank1" ] || fail "could not find rank 1"
kill -9 "$rank1"
start=$(date +%s)

code=""
for _ in $(seq 1 300); do  # at most 30 s
  if ! kill -0 $job 2>/dev/null; then wait $job; code=$?; break; fi
  sleep 0.1
done
[ -n "$code" ] || { kill -9 $job; fail "server job still running 30 s after rank 1 died"; }
[ "$code" -ne 0 ] || fail "server job exited 0 after losing a rank"
echo "server job ended with exit code $code after $(( $(date +%s) - start )) s"

wait $client
client_code=$?
[ "$client_code" -ne 0 ] || fail "every request succeeded although a rank died"
grep -q "UNAVAILABLE" "$work/loadgen.out" || fail "clients did not see UNAVAILABLE: $(cat "$work/loadgen.out")"
grep -E "completed|UNAVAILABLE" "$work/loadgen.out"
echo "rank failure: all checks passed"
