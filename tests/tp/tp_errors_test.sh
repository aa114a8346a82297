#!/usr/bin/env bash
# Clear errors for tensor-parallel launches that cannot work: --tp without
# mpirun, a world size that does not match --tp, and a --tp that does not
# divide the head count. Each exits non-zero naming the problem.
set -uo pipefail
server="$1"
fail() { echo "FAIL: $*" >&2; exit 1; }
mpi=(mpirun --allow-run-as-root --oversubscribe)
common=(--model=builtin:tiny --listen=127.0.0.1:0 --threads=1)

expect_failure() {
  local pattern="$1"; shift
  local out rc=0
  out=$(timeout 120 "$@" 2>&1) || rc=$?
  [ "$rc" -ne 0 ] || fail "exit 0 for: $*"
  [ "$rc" -ne 124 ] || fail "timed out (a hang) for: $*"
  grep -q -- "$pattern" <<< "$out" || fail "no '$pattern' in the output of $*: $out"
  echo "ok (exit $rc): $pattern"
}

expect_failure "needs exactly 2 MPI ranks, but the job has 1 (launch with mpirun -np 2)" \
  "$server" --tp=2 "${common[@]}"
expect_failure "needs exactly 3 MPI ranks, but the job has 2" \
  "${mpi[@]}" -np 2 "$server" --tp=3 "${common[@]}"
expect_failure "does not divide the model's 4 attention heads" \
  "${mpi[@]}" -np 3 "$server" --tp=3 "${common[@]}"
expect_failure "tp must be >= 1" "$server" --tp=0 "${common[@]}"
echo "tp launch errors: all checks passed"
