#!/usr/bin/env bash
# Multi-node for real, on one machine: three "hosts" are Linux network
# namespaces (each with its own host name, through a UTS namespace), each
# joined by a veth pair to a bridge in a fourth namespace (the switch), with
# private addresses that exist only inside them. mpirun runs in host A and
# starts the other ranks in B and C through an rsh agent that enters their
# namespaces (tests/multinode/netns_rsh_agent.sh); the ranks talk TCP only
# (the shared-memory transport is off), over the veth, named by
# btl_tcp_if_include / oob_tcp_if_include. --bind-to none: Open MPI takes
# the two "hosts" for two machines and would pin both ranks to core 0 of
# this one (steps ~10x slower as they time-share it). TCP keepalives on
# Open MPI's own connections (oob_tcp_keepalive_*) are what notice a dead
# link when nothing is being sent.
#
#   1. tp=2 across two hosts (Llama, GQA) and tp=3 across three (GPT-2, 3
#      heads) give transformers' greedy tokens through gRPC (a client in
#      host A), and the ranks' traffic crossed the veths.
#   2. With a 5 ms delay each way on the link the tokens stay equal, and the
#      delay was in the path (steps of at least one round trip); prints the
#      step time with and without it. `tc netem` where the kernel has
#      sch_netem, else a user-space delay line over TAP devices
#      (delay_line.py); skipped, printed, where neither can be made.
#   3. The link is cut (ip link set down) under load: the job ends within a
#      bounded time, clients see UNAVAILABLE, no process is left in either
#      host.
#
# Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN); skips, printed, without.
# Namespaces and processes are removed on exit, whatever happens.
#
#   netns_test.sh SERVER CLIENT LOADGEN AGENT LLAMA_DIR GPT2_DIR DELAY_LINE
set -uo pipefail
server="$(realpath "$1")" client="$(realpath "$2")" loadgen="$(realpath "$3")"
agent="$(realpath "$4")" llama="$(realpath "$5")" gpt2="$(realpath "$6")"
delay_line="$(realpath "$7")"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/netns.XXXXXX")"
tag="flv$$"                       # namespace and host names: ${tag}a, ${tag}b, ${tag}c
ns_a="${tag}a" ns_b="${tag}b" ns_c="${tag}c" ns_sw="${tag}s" dev=flvnet0
hosts=("$ns_a" "$ns_b" "$ns_c")
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "[  SKIPPED ] netns_test.$1 ($2)"; }

cleanup() {
  for ns in "${hosts[@]}" "$ns_sw"; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  true
}
trap cleanup EXIT

for tool in ip unshare mpirun curl python3; do
  command -v "$tool" > /dev/null || { skip all "$tool is not installed"; exit 0; }
done
if ! ip netns add "$ns_a" 2> "$work/err"; then
  skip all "cannot create a network namespace here: $(cat "$work/err")"
  exit 0
fi
if ! unshare --uts true 2> "$work/err"; then
  skip all "cannot create a UTS namespace here: $(cat "$work/err")"
  exit 0
fi
ip netns add "$ns_sw" || fail "switch namespace"
ip -n "$ns_sw" link add br0 type bridge && ip -n "$ns_sw" link set br0 up || fail "bridge"
for i in 0 1 2; do
  ns="${hosts[$i]}"
  [ "$i" -eq 0 ] || ip netns add "$ns" || fail "namespace $ns"
  ip link add "${tag}h$i" type veth peer name "${tag}p$i" || fail "veth pair $i"
  ip link set "${tag}h$i" netns "$ns" && ip link set "${tag}p$i" netns "$ns_sw" || fail "moving veth $i"
  ip -n "$ns" link set "${tag}h$i" name "$dev" || fail "rename in $ns"
  ip -n "$ns" addr add "10.211.0.$((i + 1))/24" dev "$dev" || fail "address in $ns"
  ip -n "$ns" link set lo up && ip -n "$ns" link set "$dev" up || fail "links up in $ns"
  ip -n "$ns_sw" link set "${tag}p$i" master br0 && ip -n "$ns_sw" link set "${tag}p$i" up || fail "switch port $i"
done
echo "hosts: $ns_a (10.211.0.1), $ns_b (10.211.0.2), $ns_c (10.211.0.3) on a bridge in $ns_sw"

in_a() { ip netns exec "$ns_a" "$@"; }
rx_bytes() { ip netns exec "$1" cat "/sys/class/net/$dev/statistics/rx_bytes"; }

# start_job NAME TP MODEL: rank r on host r (A, B, C); sets $job, $target, $metrics.
start_job() {
  local out="$work/server.$1" np="$2" model="$3"
  local on; on=$(IFS=,; echo "${hosts[*]:0:$np}")
  in_a unshare --uts sh -c "hostname $ns_a && exec mpirun \
      --allow-run-as-root --oversubscribe --bind-to none --host $on -np $np \
      -mca plm_rsh_agent '$agent' -x OMP_NUM_THREADS=1 \
      -mca btl tcp,self -mca btl_tcp_if_include $dev -mca oob_tcp_if_include $dev \
      -mca oob_tcp_keepalive_time 1 -mca oob_tcp_keepalive_intvl 1 -mca oob_tcp_keepalive_probes 3 \
      '$server' --tp=$np --threads=1 --model='$model' --max_batch=16 \
      --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0" > "$out.out" 2> "$out.err" &
  job=$!
  for _ in $(seq 1 600); do
    grep -q "^metrics on" "$out.out" && break
    kill -0 $job 2> /dev/null || fail "job exited early: $(cat "$out.err")"
    sleep 0.1
  done
  target=$(sed -n 's/^listening on //p' "$out.out")
  metrics=$(sed -n 's/^metrics on //p' "$out.out")
  [ -n "$target" ] && [ -n "$metrics" ] || fail "server did not start: $(cat "$out.err")"
}
metric() { in_a curl -s "$metrics" | awk -v m="$1" '$1 == m {print $2}'; }
stop_job() {  # SIGTERM to rank 0 (the server in host A): it drains, then every rank exits 0
  local rank0=""
  for p in $(ip netns pids "$ns_a"); do
    [ "$(readlink "/proc/$p/exe")" = "$server" ] && rank0=$p
  done
  [ -n "$rank0" ] || fail "rank 0 not found in $ns_a"
  kill -TERM "$rank0"
  wait $job
}

# transformers' greedy continuation of MODEL's golden prompt, through gRPC.
golden() {  # golden MODEL prompt|output|len: "1,2,3", "[4, 5]" (as the client's check prints it), 2
  python3 - "$1/golden.json" "$2" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
what = sys.argv[2]
if what == "prompt":
    print(",".join(map(str, g["greedy_prompt"])))
elif what == "output":
    print(g["greedy_output"])
else:
    print(len(g["greedy_output"]))
PY
}
greedy() {  # greedy MODEL
  in_a "$client" --target="$target" --prompt_ids="$(golden "$1" prompt)" --max_new_tokens="$(golden "$1" len)" \
    --temperature=0 --ignore_eos --json | python3 -c "import json,sys; print(json.load(sys.stdin)['token_ids'])"
}
step_ms() {  # mean step time so far, ms
  python3 -c "import sys; s, n = float(sys.argv[1]), float(sys.argv[2]); print(f'{1000 * s / n:.2f}')" \
    "$(metric flover_step_duration_seconds_sum)" "$(metric flover_step_duration_seconds_count)"
}

# 1. Golden tokens across the hosts: GPT-2 over three, then Llama over two
# (kept running for the delay case).
start_job gpt2 3 "$gpt2"
rx_before=$(rx_bytes "$ns_c")
tokens=$(greedy "$gpt2")
[ "$tokens" = "$(golden "$gpt2" output)" ] || fail "tp=3 across hosts: $tokens, transformers: $(golden "$gpt2" output)"
rx=$(( $(rx_bytes "$ns_c") - rx_before ))
[ "$rx" -gt 10000 ] || fail "host C received only $rx bytes over $dev while rank 2 worked"
echo "PASS golden tp=3: GPT-2 across three hosts = transformers' $(golden "$gpt2" len) greedy tokens; host C received $rx bytes"
stop_job
code=$?
[ "$code" -eq 0 ] || fail "the tp=3 job exited $code after SIGTERM (expected a clean drain)"

start_job golden 2 "$llama"
rx_before=$(rx_bytes "$ns_b")
tokens=$(greedy "$llama")
golden_output=$(golden "$llama" output)
[ "$tokens" = "$golden_output" ] || fail "tp=2 across hosts: $tokens, transformers: $golden_output"
rx=$(( $(rx_bytes "$ns_b") - rx_before ))
[ "$rx" -gt 10000 ] || fail "host B received only $rx bytes over $dev while rank 1 worked"
echo "PASS golden tp=2: Llama across two hosts = transformers' $(golden "$llama" len) greedy tokens; host B received $rx bytes"
# A few more to time the step (the first ran plain and compiled nothing new).
for _ in 1 2 3; do greedy "$llama" > /dev/null; done
plain_ms=$(step_ms)

# 2. A 5 ms delay on the link between hosts A and B, each way: same tokens,
# slower steps. With sch_netem, `tc netem` on both ends; without it, the
# frames between B and the switch go through a user-space delay line
# (delay_line.py: B's switch port moves onto a second bridge whose only way
# to the first is a pair of TAP devices the delay line forwards between).
# Every step needs a round trip between the ranks (rank 0 sends the step,
# rank 1's partial sums come back), so a delay really in the path makes the
# mean step at least 10 ms on any machine; beyond that the step times are
# only a rough figure: the ranks busy-poll, so on a 2-core machine anything
# else running (Bazel, a fuzzer) changes them 10x.
delay_kind="" delay_rx=""
if in_a tc qdisc add dev "$dev" root netem delay 5ms 2> "$work/err"; then
  ip netns exec "$ns_b" tc qdisc add dev "$dev" root netem delay 5ms || fail "netem in $ns_b"
  delay_kind="tc netem"
elif [ -c /dev/net/tun ]; then
  netem_err=$(tr -d '\n' < "$work/err")
  ip -n "$ns_sw" link add br1 type bridge && ip -n "$ns_sw" link set br1 up || fail "second bridge"
  ip netns exec "$ns_sw" python3 "$delay_line" --delay_ms=5 "${tag}da" "${tag}db" \
    > "$work/delay.out" 2> "$work/delay.err" &
  delay_pid=$!
  for _ in $(seq 1 100); do
    grep -q "^ready" "$work/delay.out" && break
    kill -0 $delay_pid 2> /dev/null || fail "delay line exited: $(cat "$work/delay.err")"
    sleep 0.1
  done
  grep -q "^ready" "$work/delay.out" || fail "delay line not ready after 10 s"
  ip -n "$ns_sw" link set "${tag}da" master br0 && ip -n "$ns_sw" link set "${tag}da" up &&
    ip -n "$ns_sw" link set "${tag}db" master br1 && ip -n "$ns_sw" link set "${tag}db" up &&
    ip -n "$ns_sw" link set "${tag}p1" nomaster && ip -n "$ns_sw" link set "${tag}p1" master br1 ||
    fail "wiring host B through the delay line"
  delay_rx=$(ip netns exec "$ns_sw" cat "/sys/class/net/${tag}db/statistics/rx_bytes")
  delay_kind="a user-space delay line (no sch_netem here: $netem_err)"
else
  skip delay_5ms "no netem qdisc in this kernel ($(tr -d '\n' < "$work/err")) and no /dev/net/tun for a delay line; mean step without delay $plain_ms ms"
fi
if [ -n "$delay_kind" ]; then
  s0=$(metric flover_step_duration_seconds_sum) n0=$(metric flover_step_duration_seconds_count)
  for _ in 1 2 3; do
    tokens=$(greedy "$llama")
    [ "$tokens" = "$golden_output" ] || fail "with a 5 ms delay: $tokens, transformers: $golden_output"
  done
  delayed_ms=$(python3 -c "import sys; a=[float(x) for x in sys.argv[1:]]; print(f'{1000 * (a[2] - a[0]) / (a[3] - a[1]):.2f}')" \
    "$s0" "$n0" "$(metric flover_step_duration_seconds_sum)" "$(metric flover_step_duration_seconds_count)")
  python3 -c "import sys; sys.exit(float(sys.argv[1]) < 10)" "$delayed_ms" ||
    fail "mean step $delayed_ms ms with a 5 ms delay each way (a step's round trip alone takes 10 ms): the delay was not in the path"
  if [ -n "$delay_rx" ]; then
    delay_rx=$(( $(ip netns exec "$ns_sw" cat "/sys/class/net/${tag}db/statistics/rx_bytes") - delay_rx ))
    [ "$delay_rx" -gt 10000 ] || fail "only $delay_rx bytes crossed the delay line towards host B"
    # Back onto the one bridge, the delay line gone.
    ip -n "$ns_sw" link set "${tag}p1" nomaster && ip -n "$ns_sw" link set "${tag}p1" master br0 ||
      fail "unwiring the delay line"
    kill $delay_pid; wait $delay_pid 2> /dev/null
    ip -n "$ns_sw" link del br1
    delay_kind="$delay_kind; $delay_rx bytes crossed it towards host B"
  else
    in_a tc qdisc del dev "$dev" root; ip netns exec "$ns_b" tc qdisc del dev "$dev" root
  fi
  echo "PASS delay: 5 ms each way keeps the tokens; mean step $plain_ms ms -> $delayed_ms ms; by $delay_kind"
fi
stop_job
code=$?
[ "$code" -eq 0 ] || fail "the job exited $code after SIGTERM (expected a clean drain)"

# 3. Cut the link under load.
start_job cut 2 "$llama"
in_a "$loadgen" --target="$target" --rate=50 --num_requests=400 --prompt_len=8 --output_len=64 \
  --ignore_eos --progress=false > "$work/loadgen.out" 2>&1 &
client=$!
in_flight=""
for _ in $(seq 1 600); do  # waits for load in flight, not for a guessed time
  running=$(metric flover_requests_running) generated=$(metric flover_generated_tokens_total)
  if [ "${running%.*}" -ge 2 ] 2> /dev/null && [ "${generated%.*}" -gt 0 ]; then in_flight=1; break; fi
  kill -0 $client 2> /dev/null || fail "load ended before the cut: $(cat "$work/loadgen.out")"
  sleep 0.1
done
[ -n "$in_flight" ] || fail "no load in flight after 60 s"
in_a ip link set "$dev" down
cut=$(date +%s.%N)
echo "cut the link with $running requests running, $generated tokens generated"
code=""
for _ in $(seq 1 600); do  # at most 60 s
  if ! kill -0 $job 2> /dev/null; then wait $job; code=$?; break; fi
  sleep 0.1
done
[ -n "$code" ] || fail "the job still runs 60 s after the link was cut"
ended=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$cut" "$(date +%s.%N)")
[ "$code" -ne 0 ] || fail "the job exited 0 after losing its link"
wait $client
[ $? -ne 0 ] || fail "every request succeeded although the link was cut"
grep -q "UNAVAILABLE" "$work/loadgen.out" || fail "clients did not see UNAVAILABLE: $(cat "$work/loadgen.out")"
left=""
for _ in $(seq 1 300); do  # rank 1's daemon notices the lost link by keepalive
  left="$(ip netns pids "$ns_a") $(ip netns pids "$ns_b") $(ip netns pids "$ns_c")"
  [ -z "${left// /}" ] && break
  sleep 0.1
done
[ -z "${left// /}" ] || fail "processes left after the job ended: $(ps -o pid,args -p ${left// /,} 2>/dev/null)"
echo "PASS link cut: the job ended (exit $code) ${ended} s after the cut; clients: $(grep -oE 'completed [0-9]+, failed [0-9]+ \(.*\)' "$work/loadgen.out"); no process left"
echo "netns_test: all checks passed"
