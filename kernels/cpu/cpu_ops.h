// CPU implementation of kernels::Ops: oneDNN matmul for the linear layers,
// OpenMP loops (the same thread pool oneDNN uses) for everything else.
#ifndef FLOVER_KERNELS_CPU_CPU_OPS_H_
#define FLOVER_KERNELS_CPU_CPU_OPS_H_

#include "kernels/cpu/onednn_linear.h"
#include "kernels/ops.h"

namespace flover::kernels {

class CpuOps final : public Ops {
 public:
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
};

// Sets the OpenMP thread count used by CpuOps and oneDNN (0 keeps the default).
void SetCpuThreads(int threads);
int CpuThreads();

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_CPU_CPU_OPS_H_
