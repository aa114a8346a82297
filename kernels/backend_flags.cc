#include "kernels/backend_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "kernels/backend_factory.h"

ABSL_FLAG(std::string, device, "cpu",
          "Where the model runs: cpu, cuda (the first GPU) or cuda:N. The CUDA backend is "
          "loaded on demand (libflover_cuda.so); the CPU needs no CUDA libraries");
ABSL_FLAG(std::string, dtype, "auto",
          "Linear layers' precision: auto (the default: native for a GGUF file of quantized "
          "blocks on a CPU that runs them, as llama.cpp does; f32 for anything else), f32, bf16 "
          "(weights and their inputs in bfloat16, f32 sums; ~2x faster on AVX-512 BF16 CPUs, "
          "logits within ~1% of f32), f16 (cuda only), int8 (cpu only, AVX-512 VNNI: int8 "
          "weights with a scale per output, inputs quantized per row, int32 sums) or native (a "
          "GGUF file's Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q4_K/Q5_K/Q6_K matrices kept in their blocks; "
          "cpu: any x86-64 CPU since Haswell, inputs quantized per 32 or 256 values; cuda: "
          "dequantized in registers, never run on a GPU yet). FLOVER_CPU_ISA=avx2|avx2_vnni|"
          "avx512|avx512_vnni|avx512_bf16 caps the CPU kernels' instruction set");
ABSL_FLAG(std::string, kv_dtype, "f32",
          "KV cache format: f32; bf16 (half the memory and attention reads; keys/values rounded "
          "to bfloat16, f32 math); q8_0 or q4_0 (cpu only: ggml's blocks, a half scale per 32 "
          "values of a head's row, 8.5 or 4.5 bits a value, each row quantized once when written; "
          "head dims a multiple of 32); fp8 (cuda only: e4m3 with a scale of 1, past +-448 saturated); or "
          "keys' and values' apart as K,V, e.g. q8_0,q4_0");

ABSL_FLAG(bool, cuda_graphs, true,
          "cuda: record decode steps as CUDA graphs and replay them (one per batch size), "
          "so a step costs one launch instead of one per op; same results bitwise");
namespace flover::kernels {

absl::StatusOr<BackendOptions> BackendOptionsFromFlags(
    absl::FunctionRef<MatmulDtype(absl::string_view device)> pick_auto) {
  BackendOptions o;
  o.device = absl::GetFlag(FLAGS_device);
  if (absl::Status st = ValidateDevice(o.device); !st.ok()) return st;
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (dtype == "auto") {
    o.matmul = pick_auto(o.device);
  } else {
    auto matmul = ParseMatmulDtype(dtype);
    if (!matmul.ok()) return matmul.status();
    o.matmul = *matmul;
  }
  auto kv = ParseKvFormat(absl::GetFlag(FLAGS_kv_dtype));
  if (!kv.ok()) return kv.status();
  o.kv = *kv;
  o.record_steps = absl::GetFlag(FLAGS_cuda_graphs);
  return o;
}

}  // namespace flover::kernels
