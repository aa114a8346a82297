#!/usr/bin/env bash
# Sets up the machine and runs every test (`bazel test //...`), then prints
# one "N passed, N failed" line.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
tools/setup.sh || exit 1
log=$(mktemp)
tools/bazelw test //... --test_summary=short "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
passed=$(grep -cE '^//\S+\s+(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//\S+\s+.*(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log")
rm -f "$log"
echo "${passed} passed, ${failed} failed"
exit "$rc"
