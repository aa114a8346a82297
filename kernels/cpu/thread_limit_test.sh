#!/usr/bin/env bash
# The CPU backend's results must not depend on how OpenMP is told to size
# its teams: OMP_THREAD_LIMIT below the thread count (and OMP_DYNAMIC) once
# made oneDNN's matmul leave rows unwritten. Runs the backend's tests so.
set -euo pipefail
OMP_NUM_THREADS=2 OMP_THREAD_LIMIT=1 "$1"
OMP_NUM_THREADS=2 OMP_DYNAMIC=true "$1"
