#!/usr/bin/env bash
# Runs a binary under mpirun with 2 ranks on this machine, 1 thread each.
# --allow-run-as-root: CI runs as root. --oversubscribe: 2 ranks may exceed
# the slots OpenMPI counts on a 2-core VM.
set -euo pipefail
exec mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$@"
