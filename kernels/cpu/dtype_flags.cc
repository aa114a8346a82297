#include "kernels/cpu/dtype_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "kernels/cpu/cpu_ops.h"

ABSL_FLAG(std::string, dtype, "f32",
          "Linear layers' precision: f32, or bf16 (weights and their inputs in bfloat16, "
          "f32 sums; ~2x faster on AVX-512 BF16 CPUs, logits within ~1% of f32)");
ABSL_FLAG(std::string, kv_dtype, "f32",
          "KV cache element type: f32, or bf16 (half the memory and attention reads; "
          "keys/values rounded to bfloat16, f32 math)");

namespace flover::kernels {

absl::StatusOr<CpuDtypes> DtypesFromFlags() {
  auto matmul = ParseMatmulDtype(absl::GetFlag(FLAGS_dtype));
  if (!matmul.ok()) return matmul.status();
  auto kv = ParseKvDtype(absl::GetFlag(FLAGS_kv_dtype));
  if (!kv.ok()) return kv.status();
  return CpuDtypes{*matmul, *kv};
}

}  // namespace flover::kernels
