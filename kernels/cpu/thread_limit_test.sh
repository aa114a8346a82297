#!/usr/bin/env bash
# The CPU backend's results must not depend on how OpenMP is told to size
# its teams: OMP_THREAD_LIMIT below the thread count (and OMP_DYNAMIC) once
# made oneDNN's matmul leave rows unwritten — f32 through the backend, then
# int8 used on its own. Runs the given tests (the backend's, int8's) so.
#
#   thread_limit_test.sh TEST...
set -euo pipefail
for test in "$@"; do
  OMP_NUM_THREADS=2 OMP_THREAD_LIMIT=1 "$test"
  OMP_NUM_THREADS=2 OMP_DYNAMIC=true "$test"
done
