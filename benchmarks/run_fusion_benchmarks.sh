#!/usr/bin/env bash
# Runs the scheduler comparison of docs/performance.md on builtin:gpt2-small (about
# 25 minutes on 2 cores: every row is the median-total run of 3, since one
# run on these VMs can be 20% off) and draws the plot. Run on an idle machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/bazelw build //benchmarks:fusion_benchmark >&2  # the figures alone go to stdout
bin=.bazel-root/bin/benchmarks/fusion_benchmark
out=benchmarks/results
mkdir -p "$out"
"$bin" --model=builtin:gpt2-small --num_requests=32 --output_len=128 --repeats=3 \
  --gaps_ms=0,50,200,1000 --json="$out/fusion_fixed128.json" | tee "$out/fusion_fixed128.md"
"$bin" --model=builtin:gpt2-small --num_requests=32 --output_len=uniform:32:256 --repeats=3 \
  --gaps_ms=0,200 --schedulers=fusion,dynamic \
  --json="$out/fusion_uniform.json" | tee "$out/fusion_uniform.md"
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  /usr/bin/python3 benchmarks/plot_fusion.py "$out/fusion_fixed128.json" "$out/fusion_fixed128.png"
else
  echo "matplotlib missing (apt-get install python3-matplotlib): no plot" >&2
fi
