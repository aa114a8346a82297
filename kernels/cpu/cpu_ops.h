// CPU implementation of kernels::Ops: oneDNN matmul for the linear layers,
// OpenMP loops (the same thread pool oneDNN uses) for everything else.
#ifndef FLOVER_KERNELS_CPU_CPU_OPS_H_
#define FLOVER_KERNELS_CPU_CPU_OPS_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/cpu/onednn_linear.h"
#include "kernels/ops.h"

namespace flover::kernels {

class CpuOps final : public Ops {
 public:
  // Call OneDnnLinear::CheckSupported(dtype) first: bf16 matmul needs
  // AVX-512. A bf16 KV cache runs anywhere (our own kernels).
  explicit CpuOps(MatmulDtype dtype = MatmulDtype::kF32, KvDtype kv_dtype = KvDtype::kF32)
      : linear_(dtype), kv_dtype_(kv_dtype) {}
  MatmulDtype matmul_dtype() const { return linear_.dtype(); }
  KvDtype kv_dtype() const override { return kv_dtype_; }

  std::string_view name() const override { return "cpu"; }

  void Embed(const int32_t* tokens, const int32_t* positions, int T,
             const float* wte_rows, int vocab_begin, int vocab_end,
             const float* wpe, int C, float* out) override;
  void Add(const float* x, int64_t n, float* out) override;
  void LayerNorm(const float* x, int T, int C, const float* gamma,
                 const float* beta, float eps, float* out) override;
  std::unique_ptr<Weight> PrepareWeight(const float* w, int K, int N,
                                        WeightLayout layout) override;
  void Linear(const float* x, int M, const Weight& w, const float* bias,
              Epilogue epilogue, float* out) override;
  void PrepareLinear(const Weight& w, int max_rows, bool has_bias, Epilogue epilogue) override;
  void Attention(const float* qkv, const SeqRows* seqs, int num_seqs,
                 const KvLayer& kv, float* out) override;
  void MoveKvSlot(const KvLayer& kv, int from, int to, int len) override;

 private:
  OneDnnLinear linear_;
  KvDtype kv_dtype_;
};

// "f32" or "bf16" (a --dtype flag's value), when this CPU runs it well:
// InvalidArgument for another name, FailedPrecondition (from
// OneDnnLinear::CheckSupported) for bf16 without AVX-512.
absl::StatusOr<MatmulDtype> ParseMatmulDtype(absl::string_view name);

// "f32" or "bf16" (a --kv_dtype flag's value); InvalidArgument otherwise.
absl::StatusOr<KvDtype> ParseKvDtype(absl::string_view name);

// Sets the OpenMP thread count used by CpuOps and oneDNN (0 keeps the default).
void SetCpuThreads(int threads);
int CpuThreads();

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_CPU_CPU_OPS_H_
