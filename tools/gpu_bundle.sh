#!/usr/bin/env bash
# Packs the GPU tests, benchmarks and server into one archive that runs on a
# plain CUDA host (driver, CUDA runtime, cuBLAS; no Bazel, no Debian
# packages): the binaries, libflover_cuda.so, every shared library they
# load from this machine (gRPC, protobuf, abseil, oneDNN, OpenMPI, ... and
# Debian's glibc with its loader, so the host's own glibc version does not
# matter) except the driver and the CUDA libraries, which the host has, the
# transformers peer script, and BUNDLE_INFO (the commit,
# whether the tree was dirty, and the CUDA, cuBLAS and NCCL versions built
# against). Run it where the CUDA toolkit is (the module must be built).
# The golden fixtures the tests read go beside it in parts,
# goldens_1.tar.xz, goldens_2.tar.xz, ..., each compressed to at most what a
# call has room for (FLOVER_GOLDEN_PART_MIB, else 61 MiB less the bundle and
# the tree without tests/golden): the device tool sends the working tree and
# the carried paths, at most 64 MiB a call, and the fixtures alone (85 MB,
# 70 MB compressed) are more than that. tools/gpu_tree.sh light
# takes tests/golden out of what travels; each call then carries the bundle
# and one part, and the checks script, given GOLDENS=that part, runs the
# tests on the fixtures it holds (the other parts' cases skip, naming their
# fixture). Without GOLDENS it links the tree's tests/golden
# (FLOVER_GOLDENS, or tests/golden under the directory it is started from).
#
#   tools/gpu_bundle.sh [--dry_run] [OUT_DIR]     (default .gpu-bundle, git-ignored)
#
# --dry_run then unpacks the archive here, checks every binary's libraries
# through the bundled loader (--list) and runs the checks script without a
# GPU and without FLOVER_REQUIRE_DEVICES: every test must pass with its CUDA
# cases skipped (the GPU benchmarks fail here, as they must without a GPU).
#
# On the GPU host, a call per part with a deadline (results under LOG_DIR
# after every step, so a run cut off still brings back what it did): the
# first runs every step on part 1, each later one only the steps that read
# fixtures (ONLY=goldens) on its part:
#   tar xJf .gpu-bundle/flover_gpu.tar.xz -C /tmp && GOLDENS=.gpu-bundle/goldens_1.tar.xz DEADLINE=360 \
#     /tmp/flover_gpu/run_gpu_checks.sh LOG_DIR
#   ONLY=goldens GOLDENS=.gpu-bundle/goldens_2.tar.xz DEADLINE=180 /tmp/flover_gpu/run_gpu_checks.sh LOG_DIR
# (docs/gpu.md: tools/gpu_tree.sh light before the calls, restore after)
# or any one binary:  /tmp/flover_gpu/run.sh model_benchmark --device=cuda ...
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dry_run=0
if [ "${1:-}" = "--dry_run" ]; then dry_run=1; shift; fi
out="$(realpath -m "${1:-$root/.gpu-bundle}")"
cd "$root"

TESTS=(//kernels:backend_ops_test //kernels:kv_ops_test //kernels:recurrent_ops_test //model/gpt2:gpt_model_golden_test
       //model/decoder:decoder_golden_test //model/decoder:mtp_golden_test //model:paged_kv_test
       //model:recorded_steps_test //model:given_rows_test //model/vision:vision_encoder_test
       //model/vision:qwen3_vl_vision_test //engine:engine_invariance_test //dist:device_collectives_test
       //dist:nccl_two_ranks_test)
BINARIES=(//benchmarks:model_benchmark //benchmarks:fusion_benchmark //benchmarks:vision_benchmark //server:flover_server
          //cli:flover_generate //clients:flover_client //clients:flover_loadgen //tools:gpu_probe)
tools/bazelw build "${TESTS[@]}" "${BINARIES[@]}" //kernels/cuda:libflover_cuda.so >&2
bin="$root/.bazel-root/bin"
[ -f "$bin/kernels/cuda/libflover_cuda.so" ] || { echo "no CUDA module was built" >&2; exit 1; }

stage="$(mktemp -d)/flover_gpu"
mkdir -p "$stage/bin" "$stage/lib" "$stage/tests" "$stage/py"
originals=("$bin/kernels/cuda/libflover_cuda.so")
for target in "${TESTS[@]}" "${BINARIES[@]}"; do
  path="${target#//}"
  originals+=("$bin/${path/://}")
  cp "$bin/${path/://}" "$stage/bin/"
done
cp "$bin/kernels/cuda/libflover_cuda.so" "$stage/lib/"
cp benchmarks/hf_gpu_peer.py "$stage/py/"

# Libraries the host provides (the driver and CUDA's own): never bundled.
host_provided='^(libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia|libnvrtc|libnvJitLink)\.so'
# (ldd on the originals: tests link Bazel's per-library .so files through a
# RUNPATH relative to where they were built.)
for f in "${originals[@]}"; do
  if grep -q "not found" <<< "$(ldd "$f")"; then
    echo "$f: $(ldd "$f" | grep "not found")" >&2
    exit 1
  fi
  ldd "$f" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  name="$(basename "$lib")"
  if [[ "$name" =~ $host_provided ]]; then continue; fi
  cp -L "$lib" "$stage/lib/$name"
done
# The loader itself, so the bundled glibc is the one in use.
cp -L /lib64/ld-linux-x86-64.so.2 "$stage/lib/"

# What was built, from what, against which CUDA libraries.
cuda_include="${CUDA_PATH:-/usr/local/cuda}/include"
header_value() { sed -n "s/^#define $2 \([0-9]*\).*/\1/p" "$cuda_include/$1" | head -1; }
nccl_header="$cuda_include/nccl.h"
[ -f "$nccl_header" ] || nccl_header=/usr/local/include/nccl.h
cuda_version="$(header_value cuda.h CUDA_VERSION)"
{
  echo "commit $(git rev-parse HEAD)"
  if [ -n "$(git status --porcelain --untracked-files=no)" ]; then echo "dirty yes"; else echo "dirty no"; fi
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(ldd --version | head -1)"
  echo "cuda $((cuda_version / 1000)).$((cuda_version % 1000 / 10))"
  echo "cublas $(header_value cublas_api.h CUBLAS_VER_MAJOR).$(header_value cublas_api.h CUBLAS_VER_MINOR).$(header_value cublas_api.h CUBLAS_VER_PATCH)"
  echo "nccl $(sed -n 's/^#define NCCL_MAJOR \([0-9]*\).*/\1/p' "$nccl_header").$(sed -n 's/^#define NCCL_MINOR \([0-9]*\).*/\1/p' "$nccl_header").$(sed -n 's/^#define NCCL_PATCH \([0-9]*\).*/\1/p' "$nccl_header")"
} > "$stage/BUNDLE_INFO"

cat > "$stage/lib_paths.sh" <<'EOF'
# Prints the library path for the bundled loader: the bundle's libraries,
# then the host's CUDA libraries (its library cache, /usr/local/cuda, or
# Python's nvidia wheels). run_gpu_checks.sh resolves it once and exports
# FLOVER_LIB_PATH; run.sh resolves it itself when that is unset.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
paths="$here/lib"
for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$dir" ] && paths="$paths:$dir"
done
# NCCL from Python's nvidia wheel first where there is one: a system NCCL
# may need a newer C library than the bundled one (Ubuntu 24.04's needs
# glibc 2.38). The CUDA module opens NCCL only for tensor parallelism.
wheel_nccl="$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)"
[ -n "$wheel_nccl" ] && [ -e "$wheel_nccl/lib/libnccl.so.2" ] && paths="$paths:$wheel_nccl/lib"
cache="$(ldconfig -p 2>/dev/null)"
for want in libcublasLt.so.13 libcudart.so.13; do
  grep -q "$want" <<< "$cache" && continue
  [ -e "/usr/local/cuda/lib64/$want" ] && continue
  lib="$(find / -xdev -name "$want" 2>/dev/null | head -1)"
  [ -n "$lib" ] && paths="$paths:$(dirname "$lib")"
done
echo "$paths"
EOF

cat > "$stage/run.sh" <<'EOF'
#!/usr/bin/env bash
# Runs a bundled binary with the bundled loader and libraries, plus the
# host's CUDA libraries (lib_paths.sh, or $FLOVER_LIB_PATH when set).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
name="$1"; shift
paths="${FLOVER_LIB_PATH:-$(bash "$here/lib_paths.sh")}"
export FLOVER_CUDA_MODULE="$here/lib/libflover_cuda.so"
cd "$here"  # tests read tests/golden relative to here
exec "$here/lib/ld-linux-x86-64.so.2" --library-path "$paths" "$here/bin/$name" "$@"
EOF

cat > "$stage/serve_smoke.sh" <<'EOF'
#!/usr/bin/env bash
# A server on the GPU answers one request through the real client. The
# server is always stopped: TERM, then KILL after 10 s, and waited for.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log="$(mktemp)"
"$here/run.sh" flover_server --device=cuda --dtype=bf16 --kv_dtype=bf16 \
  --model=builtin:gpt2-small --listen=127.0.0.1:0 > "$log" 2>&1 &
pid=$!
stop() {
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  echo "--- server log"; cat "$log"
}
trap stop EXIT
addr=""
for _ in $(seq 1 600); do  # the model loads and uploads first
  addr="$(sed -n 's/^listening on //p' "$log" | head -1)"
  [ -n "$addr" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
[ -n "$addr" ] || { echo "the server did not start"; exit 1; }
"$here/run.sh" flover_client --target="$addr" --prompt_ids=1,2,3 --max_new_tokens=16 \
  --temperature=0 --ignore_eos --json
EOF

cat > "$stage/pdl_same_tokens.sh" <<'EOF'
#!/usr/bin/env bash
# Programmatic launch (FLOVER_CUDA_PDL=1) changes when kernels start, never
# what they compute: 200 greedy tokens of Llama-1B shapes in bf16 must be
# the same with it as without, with either GEMM, and the device line must
# say it was on.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
args=(--model=builtin:llama-1b --device=cuda --dtype=bf16 --kv_dtype=bf16 --prompt_ids=1,2,3,4,5,6,7,8
      --max_new_tokens=200 --temperature=0 --ignore_eos)
err="$(mktemp)"
for gemm in cublaslt mma; do
  plain="$(FLOVER_CUDA_GEMM=$gemm FLOVER_CUDA_PDL=0 "$here/run.sh" flover_generate "${args[@]}" 2>"$err")" ||
    { cat "$err"; exit 1; }
  programmatic="$(FLOVER_CUDA_GEMM=$gemm FLOVER_CUDA_PDL=1 "$here/run.sh" flover_generate "${args[@]}" 2>"$err")" ||
    { cat "$err"; exit 1; }
  grep -q "programmatic launch" "$err" || { echo "$gemm: programmatic launch was not on:"; cat "$err"; exit 1; }
  [ "$plain" = "$programmatic" ] || { echo "$gemm: tokens differ"; echo "$plain"; echo "$programmatic"; exit 1; }
  echo "$gemm: the same 200 tokens with and without programmatic launch ($(cat "$err"))"
done
EOF

cat > "$stage/run_gpu_checks.sh" <<'EOF'
#!/usr/bin/env bash
# Every GPU check of the bundle in one run bounded by $DEADLINE seconds
# (default 480), in order of value: the probe, the op tests, the decoder
# goldens, recorded steps, collectives on one and two ranks, engine
# invariance, GPT-2 and Llama-1B bf16, Llama-1B in Q4_K blocks, transformers
# on the same GPU, a server, then whatever fits. Each step gets the smaller
# of its cap and the time left; a step with under 15 s left is SKIPPED.
# After every step OUT_DIR gets summary.tsv (one row per step), console.log
# (this script's output) and steps.log (every step's full output), synced,
# so a run cut off still brings back what it did.
#
#   GOLDENS=goldens_1.tar.xz DEADLINE=360 run_gpu_checks.sh OUT_DIR
# GOLDENS=PATH: the part of the fixtures this call carries (else the
#   working tree's tests/golden).
# FLOVER_DRY_RUN=1: no FLOVER_REQUIRE_DEVICES, so a missing GPU skips.
# ONLY="step step ...": run just those steps (a second call that checks
#   fixes); ONLY=goldens: the steps that read fixtures (a later part's call).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$(realpath -m "${1:-$here/logs}")"
mkdir -p "$out"
deadline=$((SECONDS + ${DEADLINE:-480}))
summary="$out/summary.tsv" console="$out/console.log" steps="$out/steps.log"
work="$(mktemp -d)"
printf 'step\tstatus\tseconds\tcap_s\tresult\n' > "$summary"
: > "$console"; : > "$steps"
say() { echo "$*" | tee -a "$console"; }
say "bundle: $(tr '\n' ';' < "$here/BUNDLE_INFO")"
say "host: $(uname -r), $(nproc) cores, deadline ${DEADLINE:-480} s"
export FLOVER_LIB_PATH="$(bash "$here/lib_paths.sh")"  # resolved once
say "library path: $FLOVER_LIB_PATH"
export TEST_TMPDIR="$work/tmp"; mkdir -p "$TEST_TMPDIR"
# The tests read tests/golden relative to the bundle (run.sh starts them
# there). GOLDENS=PATH (a goldens_N.tar.xz of tools/gpu_bundle.sh): this
# call's part of the fixtures, unpacked afresh (a part an earlier call left
# on a warm machine goes), and a case whose fixture is in another part skips
# naming it (FLOVER_GOLDENS_PARTIAL). Otherwise the fixtures of the working
# tree (FLOVER_GOLDENS, or tests/golden here).
if [ -n "${GOLDENS:-}" ]; then
  part="$here/goldens_part"
  rm -rf "$part" && mkdir -p "$part"
  tar -C "$part" -xJf "$GOLDENS" || say "CANNOT UNPACK $GOLDENS"
  goldens="$part/tests/golden"
  export FLOVER_GOLDENS_PARTIAL=1
  say "goldens: $GOLDENS, $(ls "$goldens" 2>/dev/null | wc -l) fixtures: $(ls "$goldens" 2>/dev/null | tr '\n' ' ')"
else
  goldens="$(realpath -m "${FLOVER_GOLDENS:-$PWD/tests/golden}")"
  [ -f "$goldens/tiny_f32/config.json" ] ||
    say "NO GOLDEN FIXTURES at $goldens: start in the repository's root, set FLOVER_GOLDENS or GOLDENS"
  say "goldens: $goldens"
fi
mkdir -p "$here/tests" && ln -sfn "$goldens" "$here/tests/golden"
# A GPU test that cannot create its device fails here instead of skipping.
[ "${FLOVER_DRY_RUN:-0}" = 1 ] || export FLOVER_REQUIRE_DEVICES=cuda
failed=0

# What a step's output says in one line: gtest's counts, or its last line.
result_of() {
  local log="$1" passed skipped failed_n
  passed="$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)"
  skipped="$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)"
  failed_n="$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)"
  if [ -n "$passed$failed_n" ]; then
    echo "passed ${passed:-0}, skipped ${skipped:-0}, failed ${failed_n:-0}"
  else
    tail -n 1 "$log" | tr '\t' ' ' | cut -c1-160
  fi
}

# The steps that read fixtures: ONLY=goldens runs just these (a later
# call, on another part of the fixtures).
golden_steps="gpt_golden decoder_golden mtp_golden given_rows vision_towers vision_qwen3vl invariance invariance_mma
  decoder_golden_pdl invariance_pdl invariance_mma_pdl decoder_golden_mma"
[ "${ONLY:-}" = goldens ] && ONLY="$(echo $golden_steps)"

step() {  # name, cap in seconds, then the command
  local name="$1" cap="$2"; shift 2
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  local left=$((deadline - SECONDS))
  if ((left < 15)); then
    printf '%s\tSKIPPED\t0\t%s\tno time left (%s s)\n' "$name" "$cap" "$left" >> "$summary"
    say "== $name: SKIPPED (${left} s left)"; sync; return
  fi
  local limit=$((cap < left ? cap : left)) start=$SECONDS rc status
  say "== $name (limit ${limit} s): $*"
  timeout -k 5 "$limit" "$@" > "$work/$name.log" 2>&1
  rc=$?
  case $rc in
    0) status=ok ;;
    124|137) status=TIMEOUT; failed=1 ;;
    *) status="FAILED(rc=$rc)"; failed=1 ;;
  esac
  local took=$((SECONDS - start)) result
  result="$(result_of "$work/$name.log")"
  { echo "===== $name: $* -> $status, $took s"; cat "$work/$name.log"; echo; } >> "$steps"
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$took" "$limit" "$result" >> "$summary"
  say "   $status ($took s): $result"
  sync
}

R="$here/run.sh"
cuda_tests=(--gtest_filter='*cuda*')
bench=(--device=cuda --prefill_lengths=512 --decode_batches=1,32,256 --repeats=5)
# 1. The probe.
step nvidia_smi 15 nvidia-smi
step probe 20 "$R" gpu_probe
# 2. The ops.
step backend_ops 90 "$R" backend_ops_test "${cuda_tests[@]}"
# Our tensor-core GEMM (FLOVER_CUDA_GEMM=mma) in place of cuBLASLt.
step backend_ops_mma 90 env FLOVER_CUDA_GEMM=mma "$R" backend_ops_test "${cuda_tests[@]}"
step kv_ops 60 "$R" kv_ops_test "${cuda_tests[@]}"
step paged_kv 60 "$R" paged_kv_test "${cuda_tests[@]}"
# Compiled only until a GPU runs them: the recurrent mixers (causal
# convolution, the gated delta rule, Mamba-2's scan, state copies), the MTP
# layer, rows given to the model (an image's), and the vision towers on the
# device (EncoderAttention).
step recurrent_ops 60 "$R" recurrent_ops_test "${cuda_tests[@]}"
step mtp_golden 60 "$R" mtp_golden_test "${cuda_tests[@]}"
step given_rows 60 "$R" given_rows_test "${cuda_tests[@]}"
step vision_towers 90 "$R" vision_encoder_test "${cuda_tests[@]}"
step vision_qwen3vl 90 "$R" qwen3_vl_vision_test "${cuda_tests[@]}"
# 3. The decoder goldens: every family and dtype, native blocks included.
step decoder_golden 150 "$R" decoder_golden_test "${cuda_tests[@]}"
step gpt_golden 120 "$R" gpt_model_golden_test "${cuda_tests[@]}"
# 4. Recorded steps (CUDA graphs).
step recorded_steps 60 "$R" recorded_steps_test "${cuda_tests[@]}"
step recorded_steps_mma 60 env FLOVER_CUDA_GEMM=mma "$R" recorded_steps_test "${cuda_tests[@]}"
# 5. Collectives on one and on two ranks.
step nccl_one_rank 40 "$R" device_collectives_test "${cuda_tests[@]}"
step nccl_two_ranks 90 "$R" nccl_two_ranks_test
# 6. Engine invariance.
step invariance 150 "$R" engine_invariance_test "${cuda_tests[@]}"
step invariance_mma 150 env FLOVER_CUDA_GEMM=mma "$R" engine_invariance_test "${cuda_tests[@]}"
# Programmatic dependent launch (FLOVER_CUDA_PDL=1): the same bits, the
# tests again with it on.
step pdl_same_tokens 90 "$here/pdl_same_tokens.sh"
step backend_ops_pdl 90 env FLOVER_CUDA_PDL=1 "$R" backend_ops_test "${cuda_tests[@]}"
step kv_ops_pdl 60 env FLOVER_CUDA_PDL=1 "$R" kv_ops_test "${cuda_tests[@]}"
step paged_kv_pdl 60 env FLOVER_CUDA_PDL=1 "$R" paged_kv_test "${cuda_tests[@]}"
step decoder_golden_pdl 150 env FLOVER_CUDA_PDL=1 "$R" decoder_golden_test "${cuda_tests[@]}"
step recorded_steps_pdl 60 env FLOVER_CUDA_PDL=1 "$R" recorded_steps_test "${cuda_tests[@]}"
step recorded_steps_mma_pdl 60 env FLOVER_CUDA_PDL=1 FLOVER_CUDA_GEMM=mma "$R" recorded_steps_test "${cuda_tests[@]}"
step invariance_pdl 150 env FLOVER_CUDA_PDL=1 "$R" engine_invariance_test "${cuda_tests[@]}"
step invariance_mma_pdl 150 env FLOVER_CUDA_PDL=1 FLOVER_CUDA_GEMM=mma "$R" engine_invariance_test "${cuda_tests[@]}"
# 7. OLMoE's experts grouped on the device (the default) against grouped on
# the host (the path before), back to back; then GPT-2 and Llama-1B in bf16
# (each GEMM, without and with programmatic launch, back to back), then the
# transformers peer on GPT-2.
olmoe=(--model=builtin:olmoe-1b --dtype=bf16 --kv_dtype=bf16 --device=cuda --prefill_lengths=512 --decode_batches=1,32 --repeats=3)
step bench_olmoe_experts_device 90 "$R" model_benchmark "${olmoe[@]}"
step bench_olmoe_experts_host 90 env FLOVER_CUDA_EXPERTS=host "$R" model_benchmark "${olmoe[@]}"
step bench_olmoe_experts_device_mma 90 env FLOVER_CUDA_GEMM=mma "$R" model_benchmark "${olmoe[@]}"
step bench_gpt2_bf16 60 "$R" model_benchmark --model=builtin:gpt2-small --dtype=bf16 --kv_dtype=bf16 "${bench[@]}"
step bench_gpt2_bf16_mma 60 env FLOVER_CUDA_GEMM=mma "$R" model_benchmark --model=builtin:gpt2-small --dtype=bf16 --kv_dtype=bf16 "${bench[@]}"
step bench_llama1b_bf16 90 "$R" model_benchmark --model=builtin:llama-1b --dtype=bf16 --kv_dtype=bf16 "${bench[@]}"
step bench_llama1b_bf16_mma 90 env FLOVER_CUDA_GEMM=mma "$R" model_benchmark --model=builtin:llama-1b --dtype=bf16 --kv_dtype=bf16 "${bench[@]}"
step bench_gpt2_bf16_pdl 60 env FLOVER_CUDA_PDL=1 "$R" model_benchmark --model=builtin:gpt2-small --dtype=bf16 --kv_dtype=bf16 "${bench[@]}"
step bench_gpt2_bf16_mma_pdl 60 env FLOVER_CUDA_PDL=1 FLOVER_CUDA_GEMM=mma "$R" model_benchmark --model=builtin:gpt2-small --dtype=bf16 --kv_dtype=bf16 "${bench[@]}"
step bench_llama1b_bf16_pdl 90 env FLOVER_CUDA_PDL=1 "$R" model_benchmark --model=builtin:llama-1b --dtype=bf16 --kv_dtype=bf16 "${bench[@]}"
step bench_llama1b_bf16_mma_pdl 90 env FLOVER_CUDA_PDL=1 FLOVER_CUDA_GEMM=mma "$R" model_benchmark --model=builtin:llama-1b --dtype=bf16 --kv_dtype=bf16 "${bench[@]}"
# The best token on the device (ForwardGreedy, as the engine's greedy
# steps): ids come back instead of a vocabulary of logits per row.
step bench_gpt2_bf16_greedy 60 "$R" model_benchmark --model=builtin:gpt2-small --dtype=bf16 --kv_dtype=bf16 --greedy_on_device "${bench[@]}"
step bench_qwen3_bf16_greedy 60 "$R" model_benchmark --model=builtin:qwen3-0.6b --dtype=bf16 --kv_dtype=bf16 --greedy_on_device "${bench[@]}"
step decoder_golden_mma 150 env FLOVER_CUDA_GEMM=mma "$R" decoder_golden_test "${cuda_tests[@]}"
# 8. Llama-1B in native Q4_K blocks (random, generated on the host).
step bench_llama1b_q4k 90 "$R" model_benchmark --model=builtin:llama-1b --random_blocks=Q4_K --dtype=native --kv_dtype=bf16 "${bench[@]}"
step hf_peer_gpt2 90 env PYTHONUNBUFFERED=1 python3 "$here/py/hf_gpu_peer.py" --modes=eager,static --batches=1,32,256 --repeats=3
# 9. A server on the GPU.
step serve 60 "$here/serve_smoke.sh"
# 10. Whatever fits.
step fusion 90 "$R" fusion_benchmark --device=cuda --dtype=bf16 --kv_dtype=bf16 --gaps_ms="${FLOVER_FUSION_GAPS:-0,20,200}" --output_len=uniform:16:256
# The newer families at their real shapes: grouped-query heads of 128
# (Qwen3), local layers in blocks of their own (Gemma 3), 64 experts (OLMoE).
step bench_qwen3_bf16 60 "$R" model_benchmark --model=builtin:qwen3-0.6b --dtype=bf16 --kv_dtype=bf16 "${bench[@]}"
step bench_qwen3_bf16_mma_pdl 60 env FLOVER_CUDA_PDL=1 FLOVER_CUDA_GEMM=mma "$R" model_benchmark --model=builtin:qwen3-0.6b --dtype=bf16 --kv_dtype=bf16 "${bench[@]}"
step profile_qwen3 60 "$R" model_benchmark --model=builtin:qwen3-0.6b --dtype=bf16 --kv_dtype=bf16 --device=cuda --prefill_lengths=512 --decode_batches=1,256 --repeats=2 --profile
step bench_gemma3_bf16 60 "$R" model_benchmark --model=builtin:gemma3-1b --dtype=bf16 --kv_dtype=bf16 "${bench[@]}"
step profile_olmoe_bf16 90 "$R" model_benchmark "${olmoe[@]}" --profile
# The vision towers on the GPU (EncoderAttention on CUDA; the server still
# runs them on the CPU): Gemma 3 4B's at 896 px and Qwen3-VL-2B's.
step bench_vision_gemma3 60 "$R" vision_benchmark --device=cuda --model=gemma3 --bf16 --repeats=2
step bench_vision_qwen3vl 60 "$R" vision_benchmark --device=cuda --model=qwen3vl --bf16 --repeats=2
step bench_gpt2_no_graphs 45 "$R" model_benchmark --model=builtin:gpt2-small --dtype=bf16 --kv_dtype=bf16 --cuda_graphs=false "${bench[@]}"
step bench_gpt2_f32 45 "$R" model_benchmark --model=builtin:gpt2-small --dtype=f32 "${bench[@]}"
# Where a step's time goes: the time per op (synchronised per op), then
# Nsight Compute's time per kernel over 400 kernels of batch-1 decode.
step profile_llama1b_mma 60 env FLOVER_CUDA_GEMM=mma "$R" model_benchmark --model=builtin:llama-1b --dtype=bf16 --kv_dtype=bf16 --device=cuda --prefill_lengths=512 --decode_batches=1,256 --repeats=2 --profile
step ncu_llama1b_b1_mma 90 env FLOVER_CUDA_GEMM=mma ncu --metrics gpu__time_duration.sum --print-summary per-kernel --launch-skip 3000 --launch-count 400 "$R" model_benchmark --model=builtin:llama-1b --dtype=bf16 --kv_dtype=bf16 --device=cuda --prefill_lengths=8 --decode_batches=1 --decode_steps=64 --repeats=2 --cuda_graphs=false
say "done, $((SECONDS)) s; failed: $failed"
sync
exit $failed
EOF
chmod +x "$stage/run.sh" "$stage/run_gpu_checks.sh" "$stage/serve_smoke.sh" "$stage/pdl_same_tokens.sh"

mkdir -p "$out"
tar -C "$(dirname "$stage")" -cf - flover_gpu | xz -T0 -6 > "$out/flover_gpu.tar.xz"
rm -rf "$(dirname "$stage")"
size_mb=$(( $(stat -c %s "$out/flover_gpu.tar.xz") / 1048576 ))
echo "$out/flover_gpu.tar.xz ($size_mb MiB)"

# The fixtures the tests read, a fixture's files (those the tests depend
# on) kept together, packed first-fit by compressed size, largest first,
# into parts of at most FLOVER_GOLDEN_PART_MIB, by default what a call has
# left under 61 MiB (3 to spare) beside the tree without tests/golden and
# the bundle.
tree_bytes=$(git ls-files -z --cached --others --exclude-standard -- . ':(exclude)tests/golden' |
             xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {print s + 0}')
bundle_bytes=$(stat -c %s "$out/flover_gpu.tar.xz")
if [ -n "${FLOVER_GOLDEN_PART_MIB:-}" ]; then
  part_budget=$((FLOVER_GOLDEN_PART_MIB * 1048576))
else
  part_budget=$((61 * 1048576 - tree_bytes - bundle_bytes))
fi
((part_budget >= 8 * 1048576)) || { echo "under 8 MiB left for the goldens in a call: the bundle is too big" >&2; exit 1; }
pack="$(mktemp -d)"
tools/bazelw query "kind('source file', deps(set(${TESTS[*]})))" 2>/dev/null |
  sed -n 's|^//tests/golden|tests/golden|p' | sed 's|:|/|' | sort > "$pack/files"
cut -d/ -f1-3 "$pack/files" | sort -u | while read -r dir; do
  grep "^$dir/" "$pack/files" > "$pack/$(basename "$dir").list"
  echo "$(tar -cf - -T "$pack/$(basename "$dir").list" | xz -T0 -6 | wc -c) $(basename "$dir")"
done | sort -rn > "$pack/by_size"
# The fixtures that steps of the first call alone read (nccl_two_ranks_test's
# llama_gqa) go first, so into part 1; the rest by size, largest first.
first_call_fixtures="llama_gqa"
{
  for f in $first_call_fixtures; do grep " $f\$" "$pack/by_size"; done
  grep -v -E " ($(echo $first_call_fixtures | tr ' ' '|'))\$" "$pack/by_size"
} > "$pack/sizes"
rm -f "$out"/goldens_*.tar.xz
declare -a part_bytes=()
while read -r bytes fixture; do
  ((bytes > part_budget)) && { echo "fixture $fixture alone is over the part budget" >&2; exit 1; }
  p=0
  while ((p < ${#part_bytes[@]})) && ((part_bytes[p] + bytes > part_budget)); do p=$((p + 1)); done
  part_bytes[p]=$(( ${part_bytes[p]:-0} + bytes ))
  cat "$pack/$fixture.list" >> "$pack/part_$((p + 1))"
done < "$pack/sizes"
for list in "$pack"/part_*; do tar -cf - -T "$list" | xz -T0 -6 > "$list.tar.xz"; done
# Fixtures share weights (a GGUF file and the directory it came from), so a
# part compresses below the sum of its fixtures' sizes: while the two
# smallest parts fit together, they become one.
while (($(ls "$pack"/part_*.tar.xz | wc -l) > 1)); do
  # The two smallest, the lower-numbered first: the merged part keeps its
  # number (part 1 holds the first call's fixtures).
  read -r a b <<< "$(for f in "$pack"/part_*.tar.xz; do echo "$(stat -c %s "$f") ${f%.tar.xz}"; done |
                    sort -n | head -2 | cut -d' ' -f2 | sort -V | tr '\n' ' ')"
  (($(stat -c %s "$a.tar.xz") + $(stat -c %s "$b.tar.xz") <= part_budget)) || break
  cat "$b" >> "$a" && rm -f "$b" "$b.tar.xz"
  tar -cf - -T "$a" | xz -T0 -6 > "$a.tar.xz"
done
n=0
for list in $(ls "$pack"/part_* | grep -v '\.tar\.xz$' | sort -V); do
  n=$((n + 1))
  mv "$list.tar.xz" "$out/goldens_$n.tar.xz"
  echo "$out/goldens_$n.tar.xz ($(( $(stat -c %s "$out/goldens_$n.tar.xz") / 1048576 )) MiB, $(cut -d/ -f3 "$list" | sort -u | wc -l) fixtures)"
done
rm -rf "$pack"
largest=$(stat -c %s "$out"/goldens_*.tar.xz | sort -n | tail -1)
call=$((tree_bytes + bundle_bytes + largest))
echo "a call sends at most $((call / 1048576)) MiB: the tree without tests/golden (tools/gpu_tree.sh light), the bundle, one part"
((call <= 64 * 1048576)) || { echo "that is over the device tool's 64 MiB" >&2; exit 1; }

if ((dry_run)); then
  check="$(mktemp -d)"
  tar -C "$check" -xJf "$out/flover_gpu.tar.xz"
  b="$check/flover_gpu"
  paths="$(bash "$b/lib_paths.sh")"
  for f in "$b"/bin/*; do
    if ! listing="$("$b/lib/ld-linux-x86-64.so.2" --library-path "$paths" --list "$f" 2>&1)" ||
        grep -q "not found" <<< "$listing"; then
      echo "dry run: $(basename "$f") does not load:" >&2; echo "$listing" >&2; exit 1
    fi
  done
  echo "dry run: every binary loads through the bundled loader" >&2
  # As the calls would run: every step on part 1, the fixtures' steps on
  # each other part.
  for part in "$out"/goldens_*.tar.xz; do
    n="${part##*_}"; n="${n%%.*}"
    only=""; ((n == 1)) || only=goldens
    ONLY="$only" GOLDENS="$part" FLOVER_DRY_RUN=1 DEADLINE="${DEADLINE:-900}" "$b/run_gpu_checks.sh" "$check/out_$n" || true
  done
  echo "dry run: results in $check/out_N (summary.tsv, console.log, steps.log), N a part"
fi
