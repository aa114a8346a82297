#!/usr/bin/env bash
# What Prometheus metrics cost a server under load, on builtin:gpt2-small,
# 2 threads (run on an idle machine; about 4 minutes): the serving burst (32
# requests at once, 8-token prompts, 128 output tokens, greedy) through
# flover_server + flover_loadgen,
#   off: no --metrics_listen (the engine still records; nobody reads),
#   on:  --metrics_listen with one scraper process reading /metrics every
#        SCRAPE_S seconds (default 1: 15x Prometheus' default rate),
# and, when BEFORE=path/to/flover_server names a binary built before the
# metrics existed, that binary too: the cost of recording itself. The
# configurations take turns, ROUNDS rounds (default 3); medians are printed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/bazelw build //server:flover_server //clients:flover_loadgen >&2
bin=.bazel-root/bin
rounds="${ROUNDS:-3}"
scrape_s="${SCRAPE_S:-1}"
tmp=$(mktemp -d)
server=""
scraper=""
cleanup() {
  [ -n "$scraper" ] && kill "$scraper" 2>/dev/null
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

# run NAME BINARY [FLAGS...]: one burst on a fresh server; appends tokens/s
# to $tmp/NAME.
run() {
  local name=$1 binary=$2
  shift 2
  "$binary" --model=builtin:gpt2-small --listen=127.0.0.1:0 --threads=2 --max_batch=32 \
    --max_seq_len=136 "$@" > "$tmp/server.log" 2>&1 &
  server=$!
  until grep -q "^listening on" "$tmp/server.log"; do sleep 0.1; done
  local target metrics
  target=$(sed -n 's/^listening on //p' "$tmp/server.log")
  metrics=$(sed -n 's/^metrics on //p' "$tmp/server.log")
  if [ -n "$metrics" ]; then
    # One process for all scrapes: on 2 busy cores, a process spawned per
    # scrape would cost more than the scrape.
    python3 -c 'import sys, time, urllib.request
while True:
    urllib.request.urlopen(sys.argv[1]).read()
    time.sleep(float(sys.argv[2]))' "$metrics" "$scrape_s" &
    scraper=$!
  fi
  lg() { "$bin/clients/flover_loadgen" --target="$target" --progress=false --temperature=0 \
    --ignore_eos --rate=inf --num_requests=32 --prompt_len=8 --output_len=128 "$@"; }
  lg > /dev/null  # warm-up
  lg | grep -o 'output [0-9.]* tokens/s' | awk '{print $2}' >> "$tmp/$name"
  if [ -n "$scraper" ]; then kill "$scraper"; wait "$scraper" 2>/dev/null || true; scraper=""; fi
  kill "$server"
  wait "$server" 2>/dev/null || true
  server=""
}

median() { sort -n "$1" | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

for r in $(seq 1 "$rounds"); do
  run off "$bin/server/flover_server"
  run on "$bin/server/flover_server" --metrics_listen=127.0.0.1:0
  if [ -n "${BEFORE:-}" ]; then run before "$BEFORE"; fi
done
echo "| configuration | output tokens/s (median of $rounds) | runs |"
echo "|---|---:|---|"
for name in before off on; do
  [ -f "$tmp/$name" ] || continue
  echo "| $name | $(median "$tmp/$name") | $(tr '\n' ' ' < "$tmp/$name")|"
done
off=$(median "$tmp/off")
on=$(median "$tmp/on")
awk -v a="$off" -v b="$on" -v s="$scrape_s" 'BEGIN {printf "metrics on (scraped every %s s) vs off: %+.1f%%\n", s, 100 * (b / a - 1)}'
if [ -f "$tmp/before" ]; then
  before=$(median "$tmp/before")
  awk -v a="$before" -v b="$off" 'BEGIN {printf "recording (off) vs the binary before metrics: %+.1f%%\n", 100 * (b / a - 1)}'
fi
