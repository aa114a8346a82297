#!/usr/bin/env bash
# Runs TEST with FLOVER_CPU_ISA=CAP where this CPU has that level (asked of
# cpu_isa_tool, the kernels' own check); elsewhere prints why it skipped.
#
#   isa_test.sh CAP CPU_ISA_TOOL TEST [ARGS...]
set -euo pipefail
cap=$1 tool=$2 test=$3
shift 3
if ! why=$(FLOVER_CPU_ISA=$cap "$tool" 2>&1); then
  echo "[  SKIPPED ] IsaCap.${cap}: ${why}"
  exit 0
fi
echo "running $(basename "$test") under FLOVER_CPU_ISA=${cap} (${why})"
FLOVER_CPU_ISA=$cap exec "$test" "$@"
