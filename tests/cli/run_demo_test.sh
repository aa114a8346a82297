#!/usr/bin/env bash
# tools/run_demo.sh, the README's first command, on the binaries built here
# (FLOVER_DEMO_BIN: no setup, no build): SmolLM2 answers the demo's chat
# question, the load client's chat requests all complete, and the script
# exits 0. (It used to exit 1 after a run that worked: its EXIT trap's kill
# of the already stopped server failed under set -e.)
set -uo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
out=$(FLOVER_DEMO_BIN=. tools/run_demo.sh --num_requests=6 --rate=inf --output_len=16 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 0 ] || fail "tools/run_demo.sh exited $rc"
grep -q "The capital of France is Paris." <<< "$out" || fail "no real answer to the chat question"
grep -q "^completed 6, failed 0$" <<< "$out" || fail "the load client's requests did not all complete"
echo "PASS"
