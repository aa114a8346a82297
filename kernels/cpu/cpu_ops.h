// CPU implementation of kernels::Ops: oneDNN sgemm for the GEMMs, OpenMP
// loops (the same thread pool oneDNN uses) for everything else.
#ifndef FLOVER_KERNELS_CPU_CPU_OPS_H_
#define FLOVER_KERNELS_CPU_CPU_OPS_H_

#include "kernels/ops.h"

namespace flover::kernels {

class CpuOps final : public Ops {
 public:
  std::string_view name() const override { return "cpu"; }

  void Embed(const int32_t* tokens, const int32_t* positions, int T,
             const float* wte, const float* wpe, int C, float* out) override;
  void LayerNorm(const float* x, int T, int C, const float* gamma,
                 const float* beta, float eps, float* out) override;
  void Linear(const float* x, int M, int K, const float* w, int N,
              const float* bias, bool accumulate, float* out) override;
  void LinearGelu(const float* x, int M, int K, const float* w, int N,
                  const float* bias, float* out) override;
  void LinearTransposed(const float* x, int M, int K, const float* w, int N,
                        float* out) override;
  void Attention(const float* qkv, const SeqRows* seqs, int num_seqs,
                 const KvLayer& kv, float* out) override;
  void MoveKvSlot(const KvLayer& kv, int from, int to, int len) override;
};

// Sets the OpenMP thread count used by CpuOps and oneDNN (0 keeps the default).
void SetCpuThreads(int threads);
int CpuThreads();

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_CPU_CPU_OPS_H_
