#!/usr/bin/env bash
# The CPU path needs no CUDA at all. No Flover binary links a CUDA library;
# and in a private mount namespace where every /usr/local/cuda* tree is an
# empty tmpfs (the driver, runtime, cuBLAS and NCCL gone), the server starts
# and serves a request on the CPU, flover_generate runs on the CPU, and
# --device=cuda fails with one line that says why.
set -euo pipefail
SERVER="$1" GEN="$2" CLIENT="$3"
fail() { echo "FAIL: $*" >&2; exit 1; }

for bin in "$SERVER" "$GEN" "$CLIENT"; do
  if readelf -d "$bin" | grep NEEDED | grep -E 'libcuda|libcudart|libcublas|libnccl'; then
    fail "$bin links a CUDA library"
  fi
done
echo "no binary links a CUDA library"

if ! unshare --mount --propagation private true 2>/dev/null; then
  echo "[  SKIPPED ] cpu_without_cuda_test.namespace_part (cannot create a mount namespace here: needs root)"
  exit 0
fi
export SERVER GEN CLIENT
exec unshare --mount --propagation private bash -euo pipefail -c '
fail() { echo "FAIL: $*" >&2; exit 1; }
hidden=0
for d in /usr/local/cuda*; do
  [ -d "$d" ] || continue
  mount -t tmpfs -o ro none "$(readlink -f "$d")"
  hidden=$((hidden + 1))
done
echo "hid $hidden CUDA trees"
if grep -q "libcudart" <<< "$(ldconfig -p)"; then
  for lib in $(ldconfig -p | sed -n "s/.*libcudart.* => //p"); do
    [ ! -e "$lib" ] || fail "libcudart is still reachable at $lib"
  done
fi

out=$("$GEN" --model=builtin:tiny --prompt_ids=1,2,3 --max_new_tokens=4 --temperature=0 --ignore_eos)
grep -q "\"token_ids\": \[" <<< "$out" || fail "flover_generate on the CPU printed: $out"

rc=0
err=$("$GEN" --model=builtin:tiny --prompt_ids=1 --device=cuda 2>&1 >/dev/null) || rc=$?
[ "$rc" -ne 0 ] || fail "--device=cuda succeeded without CUDA"
[ "$(echo "$err" | wc -l)" -eq 1 ] || fail "--device=cuda: not one line: $err"
grep -q -e "--device=cuda: " <<< "$err" || fail "--device=cuda error does not name the flag: $err"
echo "--device=cuda without CUDA: $err"

log="$TEST_TMPDIR/server.log"
"$SERVER" --model=builtin:tiny --listen=127.0.0.1:0 --max_seq_len=64 --threads=1 > "$log" 2>&1 &
pid=$!
trap "kill $pid 2>/dev/null || true" EXIT
# Wait for the listening line (or the server to die), bounded.
for _ in $(seq 1 600); do
  grep -q "^listening on " "$log" && break
  kill -0 $pid 2>/dev/null || fail "the server exited: $(cat "$log")"
  sleep 0.1
done
addr=$(sed -n "s/^listening on //p" "$log" | head -1)
[ -n "$addr" ] || fail "the server never listened: $(cat "$log")"
grep -q "^device cpu: " "$log" || fail "no device line: $(cat "$log")"
reply=$("$CLIENT" --target="$addr" --prompt_ids=1,2,3 --max_new_tokens=5 --temperature=0 --ignore_eos --json)
grep -q "length" <<< "$reply" || fail "the request did not finish by length: $reply"
kill -TERM $pid
wait $pid || fail "the server did not exit cleanly: $(cat "$log")"
echo "the CPU server served without CUDA: $reply"
'
