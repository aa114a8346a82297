// The CPU backend: oneDNN matmul for the linear layers, OpenMP loops (the
// same thread pool oneDNN uses) for everything else. Its memory is host
// memory, so uploads and downloads are copies and results can be read in
// place (HostAddress).
#ifndef FLOVER_KERNELS_CPU_CPU_BACKEND_H_
#define FLOVER_KERNELS_CPU_CPU_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"
#include "kernels/cpu/block_linear.h"
#include "kernels/cpu/fma_linear.h"
#include "kernels/cpu/int8_linear.h"
#include "kernels/cpu/onednn_linear.h"

namespace flover::kernels {

class CpuBackend final : public Backend {
 public:
  // Refuses (FailedPrecondition, naming the reason) an instruction-set cap
  // above this CPU (cpu_isa.h) and a matmul dtype it has no optimized kernel
  // for: int8 needs AVX-512 VNNI, f16 runs on CUDA only. f32, bf16 and native
  // blocks run on every CPU with AVX2 (bf16 on oneDNN where the CPU has
  // AVX-512 BF16, else on FmaLinear). f32, bf16, q8_0 and q4_0 KV caches
  // run anywhere (any pair of them); fp8 is refused (CUDA only).
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(
      MatmulDtype dtype = MatmulDtype::kF32, KvFormat kv_format = KvDtype::kF32);

  std::string_view name() const override { return "cpu"; }
  DeviceInfo Device() const override;
  MatmulDtype matmul_dtype() const override {
    if (blocks_ != nullptr) return MatmulDtype::kNative;
    if (int8_ != nullptr) return MatmulDtype::kInt8;
    return fma_ != nullptr ? fma_->dtype() : linear_.dtype();
  }
  KvFormat kv_format() const override { return kv_format_; }

  absl::StatusOr<Buffer> Allocate(DType dtype, int64_t rows, int64_t cols) override;
  void Free(void* data) override;
  absl::Status Upload(const void* host, const Tensor& dst) override;
  absl::Status Download(const Tensor& src, void* host) override;
  void* HostAddress(const Tensor& t) override { return t.data; }
  absl::Status Synchronize() override { return absl::OkStatus(); }

  absl::StatusOr<std::unique_ptr<Weight>> PrepareWeight(HostValues w, int K, int N,
                                                        WeightLayout layout) override;
  absl::Status PrepareLinear(const Weight& w, int max_rows, bool has_bias,
                             Epilogue epilogue) override;

  absl::StatusOr<std::unique_ptr<BlockRows>> PrepareBlockRows(BlockFormat format,
                                                              const uint8_t* bytes, int64_t rows,
                                                              int cols) override;

  absl::Status Embed(const Tensor& tokens, const Tensor& positions, const Tensor& wte_rows,
                     int vocab_begin, const Tensor* wpe, const Tensor& out) override;
  absl::StatusOr<std::unique_ptr<BlockRows>> MapBlockRows(BlockFormat format, const uint8_t* base, int64_t rows,
                                                          int cols, int64_t row_stride,
                                                          std::shared_ptr<const void> owner) override;
  absl::Status EmbedBlocks(const Tensor& tokens, const Tensor& positions, const BlockRows& table,
                           int vocab_begin, float scale, const Tensor* wpe,
                           const Tensor& out) override;
  absl::Status ArgmaxRows(const Tensor& x, const Tensor& out) override;
  absl::Status Add(const Tensor& x, const Tensor& out) override;
  absl::Status Copy(const Tensor& src, const Tensor& dst) override;
  absl::Status LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                         const Tensor& out) override;
  absl::Status RmsNorm(const Tensor& x, const Tensor& gamma, float eps,
                       const Tensor& out) override;
  absl::Status Rope(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq,
                    const RopeParams& p) override;
  absl::Status Glu(const Tensor& gate_up, GluKind kind, const Tensor& out) override;
  absl::Status SoftCap(const Tensor& x, float cap) override;
  absl::Status Sigmoid(const Tensor& x) override;
  absl::Status Scale(const Tensor& x, float s) override;
  absl::Status GroupRmsNorm(const Tensor& x, int first, int groups, const Tensor& gamma, float eps) override;
  absl::Status Route(const Tensor& logits, const RouterParams& p, const Tensor& ids, const Tensor& weights) override;
  absl::Status LinearById(const Tensor& x, absl::Span<const Weight* const> experts, const Tensor* bias,
                          const Tensor& ids,
                          const Tensor& out) override;
  absl::Status WeightedRowSum(const Tensor& y, const Tensor& weights, const Tensor& out) override;
  absl::Status Linear(const Tensor& x, const Weight& w, const Tensor* bias, Epilogue epilogue,
                      const Tensor& out) override;
  absl::Status AppendKv(const Tensor& qkv, const SeqTable& seqs, const KvLayer& kv) override;
  absl::Status Attention(const Tensor& qkv, const SeqTable& seqs, const KvLayer& kv,
                         const AttentionParams& p, const Tensor& out) override;
  absl::Status EncoderAttention(const Tensor& qkv, absl::Span<const int32_t> group_ends, int heads, float scale,
                                const Tensor& out) override;
  absl::Status GatherLastRows(const Tensor& x, const SeqTable& seqs, const Tensor& out) override;
  // recurrent_ops.cc:
  absl::Status Gate(const Tensor& x, const Tensor& gate, GateKind act, const Tensor& out) override;
  absl::Status CausalConv(const Tensor& x, const SeqTable& seqs, const StateTable& states, const StateLayer& layer,
                          const Tensor& w, const Tensor* bias, ConvActivation act, const Tensor& out) override;
  absl::Status GatedDeltaRule(const Tensor& qkv, const Tensor& b, const Tensor& a, const Tensor& decay_a,
                              const Tensor& dt_bias, const SeqTable& seqs, const StateTable& states,
                              const StateLayer& layer, const DeltaRuleParams& p, const Tensor& out) override;
  absl::Status SelectiveScan(const Tensor& xbc, const Tensor& dt, const Tensor& a, const Tensor& d,
                             const Tensor& dt_bias, const SeqTable& seqs, const StateTable& states,
                             const StateLayer& layer, const ScanParams& p, const Tensor& out) override;

 private:
  CpuBackend(MatmulDtype dtype, KvFormat kv_format);

  OneDnnLinear linear_;                // f32 and bf16 (f32 when int8_ is set)
  // Instead of linear_ where oneDNN's kernels for its dtype would let a row
  // depend on the batch under the instruction set in use (FmaLinear::Replaces).
  std::unique_ptr<FmaLinear> fma_;
  std::unique_ptr<Int8Linear> int8_;  // --dtype=int8
  std::unique_ptr<BlockLinear> blocks_;  // --dtype=native: quantized blocks
  KvFormat kv_format_;
  // LinearById's gathered inputs and grouped outputs, grown to the largest
  // call and kept (a prompt's routes are tens of MiB: allocated per call,
  // their pages were faulted in anew each time).
  Buffer by_id_in_, by_id_out_;
  // `*buf` as a [rows, cols] tensor of `dtype`, regrown when too small.
  absl::StatusOr<Tensor> Grown(Buffer* buf, DType dtype, int64_t rows, int64_t cols);
};

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_CPU_CPU_BACKEND_H_
