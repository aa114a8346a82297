#!/usr/bin/env bash
# What the device tool sends each call: the working tree (tracked files and
# untracked ones git does not ignore) and the carried paths, at most 64 MiB.
# The golden fixtures alone are more (tests/golden, about 90 MB), so a GPU
# session takes them out of what travels for its calls, carries them in
# parts (tools/gpu_bundle.sh's goldens_N.tar.xz), and puts them back after:
#
#   tools/gpu_tree.sh light            tests/golden leaves git's index and is
#                                      ignored (.git/info/exclude); its files
#                                      stay on disk
#   tools/gpu_tree.sh size [PATH...]   MiB that would travel now, with the
#                                      carried PATHs; fails over 64
#   tools/gpu_tree.sh restore          the index and the ignore list as before
#
# Never commit between light and restore: the index then lacks the fixtures.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exclude="$(git rev-parse --git-path info/exclude)"
line='/tests/golden/'

travelling_bytes() {
  local total=0 f
  total=$( { git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null || true; } |
           awk '{s += $1} END {print s + 0}')
  for f in "$@"; do total=$((total + $(du -sb -- "$f" | cut -f1))); done
  echo "$total"
}

case "${1:-}" in
  light)
    if [ -n "$(git diff --cached --name-only -- tests/golden)" ]; then
      echo "tests/golden has staged changes: commit or unstage them first" >&2; exit 1
    fi
    git rm -r -q --cached tests/golden
    mkdir -p "$(dirname "$exclude")"
    grep -qxF "$line" "$exclude" 2>/dev/null || echo "$line" >> "$exclude"
    echo "tests/golden no longer travels; $(( $(travelling_bytes) / 1048576 )) MiB of tree would"
    ;;
  size)
    shift
    bytes=$(travelling_bytes "$@")
    echo "$(( bytes / 1048576 )) MiB would travel ($bytes bytes)"
    ((bytes <= 64 * 1048576)) || { echo "over the device tool's 64 MiB" >&2; exit 1; }
    ;;
  restore)
    git reset -q HEAD -- tests/golden
    if [ -f "$exclude" ]; then
      grep -vxF "$line" "$exclude" > "$exclude.tmp" || true
      mv "$exclude.tmp" "$exclude"
    fi
    if [ -n "$(git status --porcelain -- tests/golden)" ]; then
      echo "tests/golden differs from HEAD:" >&2; git status --short -- tests/golden | head >&2; exit 1
    fi
    echo "tests/golden is tracked again"
    ;;
  *)
    echo "usage: tools/gpu_tree.sh light | size [PATH...] | restore" >&2; exit 2
    ;;
esac
