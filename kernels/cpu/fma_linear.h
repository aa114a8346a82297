// Linear layers in f32 or bf16 that sum each output one k at a time, with one
// fused multiply-add per k, in the same order at every row count: where
// oneDNN's kernels do not keep a row's result independent of the batch
// (bf16 on a CPU, or under a FLOVER_CPU_ISA cap, without AVX-512 BF16:
// oneDNN then emulates bf16 with kernels whose K blocking follows M; f32
// without AVX-512, where oneDNN's AVX2 kernels do the same), the CPU backend
// runs its f32 and bf16 linear layers here instead.
//
// Weights are packed once into panels of 16 columns, [K][16] each (the last
// padded with zero columns), in the layer's dtype: bf16 stays 2 bytes a value
// and is widened in registers (exactly: bf16 is float32's top half).
//
// The arithmetic, per output (row m, column n), for every row count, tile,
// thread and vector width (AVX-512 or AVX2: the same lanes):
//   acc = 0; for k = 0 .. K-1: acc = fma(x[m, k], w[k, n], acc);
//   then acc + bias[n], then gelu_new or + the residual.
// bf16 layers take their inputs rounded to bf16 (to nearest even) first, as
// oneDNN's bf16 matmul does; the products of two bf16 values are exact in
// float32, so bf16 differs from f32 only by its rounded operands.
#ifndef FLOVER_KERNELS_CPU_FMA_LINEAR_H_
#define FLOVER_KERNELS_CPU_FMA_LINEAR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/host_values.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/weight_arena.h"

namespace flover::kernels {

class FmaLinear {
 public:
  // `dtype`: kF32 or kBF16.
  explicit FmaLinear(MatmulDtype dtype);
  MatmulDtype dtype() const { return dtype_; }

  // Whether oneDNN's matmul for `dtype` would let a row's result depend on
  // the batch under the instruction set in use (cpu_isa.h), so that linear
  // layers of that dtype run here.
  static bool Replaces(MatmulDtype dtype);

  // `w`: f32, bf16 or f16 values, [K, N] (kInOut) or [N, K] (kOutIn).
  absl::StatusOr<std::unique_ptr<Weight>> Prepare(HostValues w, int K, int N, WeightLayout layout);
  static bool Holds(const Weight& w);
  // out[M, N] = epilogue(x[M, K] @ W + bias).
  void Run(const float* x, int M, const Weight& w, const float* bias, Epilogue epilogue, float* out);

  // AVX-512 tiles where the instruction set in use has AVX-512 (the
  // default), else AVX2's; tests turn them off to compare the two.
  void set_wide_tiles(bool on) { wide_ = on && CpuIsa().avx512; }
  bool wide_tiles() const { return wide_; }

 private:
  MatmulDtype dtype_;
  bool wide_;
  WeightArena arena_;
  std::vector<float> rounded_;  // bf16 layers' inputs, rounded
};

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_CPU_FMA_LINEAR_H_
