#!/usr/bin/env bash
# Runs model_benchmark RUNS times (default 3) and prints the median of each
# figure: timings on these VMs move by 10-20% between runs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
runs="${RUNS:-3}"
tools/bazelw build //benchmarks:model_benchmark >&2  # the figures alone go to stdout
tmp=$(mktemp -d)
for i in $(seq 1 "$runs"); do
  .bazel-root/bin/benchmarks/model_benchmark --threads=2 --repeats=5 "$@" > "$tmp/run$i.md"
done
/usr/bin/python3 - "$tmp"/run*.md <<'PY'
import re, statistics, sys
runs = [open(p).read().splitlines() for p in sys.argv[1:]]
print(f"median of {len(runs)} runs\n")
for i, line in enumerate(runs[0]):
    cells = line.split("|")
    if len(cells) > 2 and re.fullmatch(r"[\d. ]+", cells[2].strip() or "x"):
        cols = [[r[i].split("|")[k].strip() for r in runs] for k in range(2, len(cells) - 1)]
        med = [f"{statistics.median(float(v) for v in c):g}" for c in cols]
        print("|" + cells[1] + "| " + " | ".join(med) + " |")
    elif "bandwidth" in line or "peak" in line:
        nums = [re.findall(r"[\d.]+", r[i]) for r in runs]
        first = nums[0]
        med = [f"{statistics.median(float(n[k]) for n in nums):g}" for k in range(len(first))]
        out, k = "", 0
        for part in re.split(r"([\d.]+)", line):
            if re.fullmatch(r"[\d.]+", part):
                out += med[k]; k += 1
            else:
                out += part
        print("\n" + out)
    elif not line.startswith("  profile"):
        print(line)
PY
rm -rf "$tmp"
