#!/usr/bin/env bash
# Sets up the machine and runs every test (`bazel test //...`), then prints
# one "N passed, N failed" line (test targets), and a line counting the test
# cases that skipped (e.g. every CUDA case where no GPU is visible) by suite,
# so a skip is never read as a pass.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
tools/setup.sh || exit 1
log=$(mktemp)
tools/bazelw test //... --test_summary=short "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
passed=$(grep -cE '^//\S+\s+(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//\S+\s+.*(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log")
# This run's targets (//pkg:name), so that logs left by targets since moved
# or deleted are not counted.
targets=$(grep -oE '^//[^ ]+' "$log" | sort -u)
rm -f "$log"
echo "${passed} passed, ${failed} failed"
# GoogleTest prints "[  SKIPPED ] Suite.Test" for each skipped case (twice:
# as it runs and in the summary), and the shell tests print the same line
# for a part they skip; Python's unittest "OK (skipped=N)".
testlogs=$(tools/bazelw info bazel-testlogs 2>/dev/null)
if [ -d "$testlogs" ]; then
  logs=()
  # The target's test.log, or its shards' where it has no log of its own
  # (run_N_of_M folders left by an earlier --runs_per_test are not this run).
  for t in $targets; do
    dir="$testlogs/$(sed 's|^//||; s|:|/|' <<< "$t")"
    if [ -f "$dir/test.log" ]; then
      logs+=("$dir/test.log")
    elif [ -d "$dir" ]; then
      while IFS= read -r f; do logs+=("$f"); done < <(find "$dir" -path '*shard_*' -name test.log)
    fi
  done
  [ ${#logs[@]} -gt 0 ] || logs=(/dev/null)
  cases=$(grep -hoE '^\[  SKIPPED \] [A-Za-z0-9_/]+\.[A-Za-z0-9_/]+' "${logs[@]}" |
          sed 's/^\[  SKIPPED \] //' | sort -u)
  gtest=$(grep -c . <<< "$cases")
  by_suite=$(sed 's/\..*//' <<< "$cases" | grep . | sort | uniq -c |
             awk '{printf "%s%s %d", (NR > 1 ? ", " : ""), $2, $1}')
  py=$(grep -hoE 'skipped=[0-9]+' "${logs[@]}" | awk -F= '{n += $2} END {print n + 0}')
  echo "skipped test cases: $((gtest + py)) (GoogleTest ${gtest}: ${by_suite:-none}; Python ${py})"
fi
exit "$rc"
