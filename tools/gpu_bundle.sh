#!/usr/bin/env bash
# Packs the GPU tests, benchmarks and server into one archive that runs on a
# plain CUDA host (driver, CUDA runtime, cuBLAS; no Bazel, no Debian
# packages): the binaries, libflover_cuda.so, every shared library they
# load from this machine (gRPC, protobuf, abseil, oneDNN, OpenMPI, ... and
# Debian's glibc with its loader, so the host's own glibc version does not
# matter) except the driver and the CUDA libraries, which the host has, and
# the golden fixtures. Run it where the CUDA toolkit is (the module must be
# built).
#
#   tools/gpu_bundle.sh [OUT_DIR]     (default .gpu-bundle, git-ignored)
#
# On the GPU host:
#   tar xJf OUT_DIR/flover_gpu.tar.xz -C /tmp && /tmp/flover_gpu/run_gpu_checks.sh LOG_DIR
# or any one binary:  /tmp/flover_gpu/run.sh model_benchmark --device=cuda ...
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(realpath -m "${1:-$root/.gpu-bundle}")"
cd "$root"

TESTS=(//kernels:backend_ops_test //kernels:kv_ops_test //model/gpt2:gpt_model_golden_test
       //model/decoder:decoder_golden_test //model:paged_kv_test //model:recorded_steps_test
       //engine:engine_invariance_test //dist:device_collectives_test)
BINARIES=(//benchmarks:model_benchmark //benchmarks:fusion_benchmark //server:flover_server
          //cli:flover_generate //clients:flover_client //clients:flover_loadgen)
tools/bazelw build "${TESTS[@]}" "${BINARIES[@]}" //kernels/cuda:libflover_cuda.so >&2
bin="$root/.bazel-root/bin"
[ -f "$bin/kernels/cuda/libflover_cuda.so" ] || { echo "no CUDA module was built" >&2; exit 1; }

stage="$(mktemp -d)/flover_gpu"
mkdir -p "$stage/bin" "$stage/lib" "$stage/tests"
originals=("$bin/kernels/cuda/libflover_cuda.so")
for target in "${TESTS[@]}" "${BINARIES[@]}"; do
  path="${target#//}"
  originals+=("$bin/${path/://}")
  cp "$bin/${path/://}" "$stage/bin/"
done
cp "$bin/kernels/cuda/libflover_cuda.so" "$stage/lib/"
cp -r tests/golden "$stage/tests/"
rm -f "$stage/tests/golden/BUILD.bazel" "$stage/tests/golden/"make_*.py

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

cat > "$stage/run.sh" <<'EOF'
#!/usr/bin/env bash
# Runs a bundled binary with the bundled loader and libraries, plus the
# host's CUDA libraries (found on its library cache, under /usr/local/cuda,
# or in Python's nvidia wheels).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
name="$1"; shift
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
export FLOVER_CUDA_MODULE="$here/lib/libflover_cuda.so"
cd "$here"  # tests read tests/golden relative to here
exec "$here/lib/ld-linux-x86-64.so.2" --library-path "$paths" "$here/bin/$name" "$@"
EOF

cat > "$stage/run_gpu_checks.sh" <<'EOF'
#!/usr/bin/env bash
# Every GPU check of the bundle, logs under $1: the device, the op tests
# (dense and KV),
# golden logits, paged KV, engine invariance, the model benchmark (bf16
# and f32), and a server that serves on the GPU.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
logs="$(realpath -m "${1:-$here/logs}")"
mkdir -p "$logs"
status=0
run() {  # name, then the command; keeps going after a failure or a hang
  local name="$1"; shift
  echo "== $name: $*"
  local start=$SECONDS
  if timeout "${FLOVER_STEP_TIMEOUT:-300}" "$@" > "$logs/$name.log" 2>&1; then
    echo "   ok ($((SECONDS - start)) s)"
  else
    echo "   FAILED (rc $?, $((SECONDS - start)) s)"; status=1
  fi
  tail -n 5 "$logs/$name.log" | sed 's/^/   /'
}
nvidia-smi > "$logs/nvidia-smi.log" 2>&1 || true
head -n 15 "$logs/nvidia-smi.log"
export TEST_TMPDIR="$(mktemp -d)"
# A GPU test that cannot create its device fails here instead of skipping.
export FLOVER_REQUIRE_DEVICES=cuda
run ops "$here/run.sh" backend_ops_test
run kv_ops "$here/run.sh" kv_ops_test
run golden "$here/run.sh" gpt_model_golden_test
run decoder_golden "$here/run.sh" decoder_golden_test
run paged_kv "$here/run.sh" paged_kv_test
run recorded_steps "$here/run.sh" recorded_steps_test
run nccl "$here/run.sh" device_collectives_test
run invariance "$here/run.sh" engine_invariance_test
run bench_bf16 "$here/run.sh" model_benchmark --device=cuda --dtype=bf16 --kv_dtype=bf16 \
  --prefill_lengths=512 --decode_batches=1,8,32,256 --repeats=10
run bench_bf16_no_graphs "$here/run.sh" model_benchmark --device=cuda --dtype=bf16 --kv_dtype=bf16 \
  --cuda_graphs=false --prefill_lengths=512 --decode_batches=1,8,32,256 --repeats=10
run bench_f32 "$here/run.sh" model_benchmark --device=cuda --dtype=f32 \
  --prefill_lengths=512 --decode_batches=1,8,32,256 --repeats=10
# A server on the GPU, one request through the real client.
"$here/run.sh" flover_server --device=cuda --dtype=bf16 --model=builtin:gpt2-small \
  --listen=127.0.0.1:0 > "$logs/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  grep -q '^listening on ' "$logs/server.log" && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
addr=$(sed -n 's/^listening on //p' "$logs/server.log" | head -1)
if [ -n "$addr" ]; then
  run serve "$here/run.sh" flover_client --target="$addr" --prompt_ids=1,2,3 \
    --max_new_tokens=16 --temperature=0 --ignore_eos --json
  kill -TERM $pid; wait $pid || status=1
else
  echo "== serve: the server did not start"; cat "$logs/server.log"; status=1
fi
head -n 4 "$logs/server.log"
# Temporal fusion against the other schedulers on the GPU (Poisson arrivals).
run fusion "$here/run.sh" fusion_benchmark --device=cuda --dtype=bf16 --kv_dtype=bf16 \
  --gaps_ms="${FLOVER_FUSION_GAPS:-0,20,200}" --output_len=uniform:16:256
exit $status
EOF
chmod +x "$stage/run.sh" "$stage/run_gpu_checks.sh"

mkdir -p "$out"
tar -C "$(dirname "$stage")" -cJf "$out/flover_gpu.tar.xz" flover_gpu
rm -rf "$(dirname "$stage")"
echo "$out/flover_gpu.tar.xz ($(du -h "$out/flover_gpu.tar.xz" | cut -f1))"
