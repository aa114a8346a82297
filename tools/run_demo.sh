#!/usr/bin/env bash
# The main job, until the server exists: set up, build, and generate with the
# built-in GPT-2-small-shaped model.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
tools/setup.sh
tools/bazelw build //engine:flover_generate
time .bazel-root/bin/engine/flover_generate --model=builtin:gpt2-small \
  --prompt_ids=464,2068,7586,21831 --max_new_tokens=32 --temperature=0.8 --top_k=40 --seed=1
