#!/usr/bin/env bash
# Builds the libFuzzer targets of //fuzz with clang (coverage, ASan, UBSan)
# in their own output base, then runs each for a while:
#
#   tools/fuzz.sh [SECONDS_PER_TARGET] [NAME...]     (default 60 s; NAMEs:
#                                                     safetensors config tokenizer request gguf
#                                                     chat_template openai_body tool_call
#                                                     reply_reader image)
#
# Each starts from its committed seeds (fuzz/corpus/NAME) plus what earlier
# runs here found (.bazel-root/fuzz-work/NAME, not committed). A crash stops
# that target, leaves the input in .bazel-root/fuzz-crashes/NAME/ and makes
# this script fail; copy the input into fuzz/corpus/NAME/ (as crash-...)
# once fixed, so the replay test keeps it fixed. The last lines of each
# target's log give executions and coverage (cov = edges, ft = features).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
seconds="${1:-60}"
[ $# -gt 0 ] && shift
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(safetensors config tokenizer request gguf chat_template openai_body tool_call reply_reader image)
clang="$(command -v clang-14 || command -v clang || true)"
[ -n "$clang" ] || { echo "tools/fuzz.sh: needs clang (apt install clang)" >&2; exit 1; }

CC="$clang" bazel --output_user_root="$root/.bazel-root" --output_base="$root/.bazel-root/fuzz-base" \
    build --config=fuzz --repo_env=CC="$clang" --symlink_prefix=.bazel-root/fuzz- //fuzz:all

status=0
for name in "${names[@]}"; do
  work=".bazel-root/fuzz-work/$name" crashes=".bazel-root/fuzz-crashes/$name"
  log=".bazel-root/fuzz-logs/$name.log"
  mkdir -p "$work" "$crashes" "$(dirname "$log")"
  echo "== ${name}_fuzzer, ${seconds} s"
  if ! ".bazel-root/fuzz-bin/fuzz/${name}_fuzzer" -max_total_time="$seconds" -print_final_stats=1 \
      -rss_limit_mb=4096 -timeout=30 -artifact_prefix="$crashes/" "$work" "fuzz/corpus/$name" \
      > "$log" 2>&1; then
    echo "   FOUND A CRASH: $(ls "$crashes" | head -3)"; tail -n 30 "$log"; status=1
  fi
  grep -E "^#[0-9]+ +DONE" "$log" | tail -1 || grep -E "^#[0-9]+" "$log" | tail -1
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$log" | tr '\n' ' '; echo
done
exit $status
