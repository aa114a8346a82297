// The CUDA backend: one GPU, one stream, device memory for everything
// (weights uploaded once in the matmul dtype, activations, the KV arena,
// work space), cuBLASLt for the linear layers with one algorithm per weight
// shape (batch-invariant), our kernels for the rest. --dtype=native keeps a
// GGUF file's quantized blocks and runs them on a dequantize-in-register
// kernel (LaunchBlockLinear); other weights are f32 there. Built into
// libflover_cuda.so and loaded on demand by kernels/backend_factory; no other
// part of Flover links the CUDA libraries.
#ifndef FLOVER_KERNELS_CUDA_CUDA_BACKEND_H_
#define FLOVER_KERNELS_CUDA_CUDA_BACKEND_H_

#include <cuda_runtime_api.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_gemm.h"

namespace flover::kernels::cuda {

// cudaSuccess, or an error naming `what` (ResourceExhausted for memory).
absl::Status CudaStatus(cudaError_t error, const std::string& what);

class CudaBackend final : public Backend, private Roofline {
 public:
  // The GPU options.device names ("cuda" is "cuda:0"). FailedPrecondition,
  // in one line, when there is no driver, no GPU or no such GPU.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const BackendOptions& options);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  DeviceInfo Device() const override;
  MatmulDtype matmul_dtype() const override { return matmul_; }
  KvFormat kv_format() const override { return kv_; }
  DType activation_dtype() const override { return ToDType(matmul_); }

  absl::StatusOr<Buffer> Allocate(DType dtype, int64_t rows, int64_t cols) override;
  void Free(void* data) override;
  absl::Status Upload(const void* host, const Tensor& dst) override;
  absl::Status Download(const Tensor& src, void* host) override;
  absl::Status Synchronize() override;
  void* stream() override { return stream_; }
  kernels::Roofline* roofline() override { return this; }
  void* AllocateStaging(size_t bytes) override;
  void FreeStaging(void* host) override;
  absl::Status RunRecorded(const std::string& key,
                           const std::function<absl::Status()>& enqueue) override;
  void ForgetRecorded() override;
  int64_t replays() const override { return replays_; }

  absl::StatusOr<std::unique_ptr<Weight>> PrepareWeight(HostValues w, int K, int N,
                                                        WeightLayout layout) override;
  absl::Status PrepareLinear(const Weight& w, int max_rows, bool has_bias,
                             Epilogue epilogue) override;

  absl::StatusOr<std::unique_ptr<BlockRows>> PrepareBlockRows(BlockFormat format,
                                                              const uint8_t* bytes, int64_t rows,
                                                              int cols) override;
  absl::Status ArgmaxRows(const Tensor& x, const Tensor& out) override;
  absl::Status EmbedBlocks(const Tensor& tokens, const Tensor& positions, const BlockRows& table,
                           int vocab_begin, float scale, const Tensor* wpe,
                           const Tensor& out) override;
  absl::Status Embed(const Tensor& tokens, const Tensor& positions, const Tensor& wte_rows,
                     int vocab_begin, const Tensor* wpe, const Tensor& out) override;
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
  bool LinearByIdWaits(absl::Span<const Weight* const> experts) const override;
  absl::Status WeightedRowSum(const Tensor& y, const Tensor& weights, const Tensor& out) override;
  absl::Status Linear(const Tensor& x, const Weight& w, const Tensor* bias, Epilogue epilogue,
                      const Tensor& out) override;
  absl::Status AppendKv(const Tensor& qkv, const SeqTable& seqs, const KvLayer& kv) override;
  absl::Status Attention(const Tensor& qkv, const SeqTable& seqs, const KvLayer& kv,
                         const AttentionParams& p, const Tensor& out) override;
  absl::Status EncoderAttention(const Tensor& qkv, absl::Span<const int32_t> group_ends, int heads, float scale,
                                const Tensor& out) override;
  absl::Status GatherLastRows(const Tensor& x, const SeqTable& seqs, const Tensor& out) override;
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
  CudaBackend(int ordinal, MatmulDtype matmul, KvFormat kv) : ordinal_(ordinal), matmul_(matmul), kv_(kv) {}
  // --dtype=native: a matrix of GGUF blocks uploaded as the file stores them.
  absl::StatusOr<std::unique_ptr<Weight>> PrepareBlocks(const HostValues& stored, int K, int N,
                                                        WeightLayout layout);
  // `size` bytes as they are, in whole 4-byte words of device memory (i32
  // [1, words]); waits for the copy.
  absl::StatusOr<Buffer> UploadBytes(const uint8_t* bytes, int64_t size);
  // Makes this backend's GPU current on the calling thread (the engine
  // loop runs on its own thread).
  absl::Status Activate() const;
  // `bytes` of scratch (f32 GEMM output before gelu, inputs converted to
  // the matmul dtype, attention partials), grown as needed and kept.
  absl::StatusOr<void*> Scratch(int slot, size_t bytes);

  // Roofline.
  absl::StatusOr<double> GemmTflops(int M, int N, int K, MatmulDtype dtype) override;
  absl::StatusOr<double> CopyGBs(int64_t bytes) override;
  std::vector<std::string> GemmPlans() const override;

  // LinearById on the device: whether these experts can be (every one
  // dense, 16-bit, taken by the mma GEMM; FLOVER_CUDA_EXPERTS not "host"),
  // and the call itself.
  bool GroupsOnDevice(absl::Span<const Weight* const> experts) const;
  absl::Status LinearByIdOnDevice(const Tensor& x, absl::Span<const Weight* const> experts, const Tensor* bias,
                                  const Tensor& ids, const Tensor& out);
  // A span of experts' weights as a device array of their data pointers,
  // made on the span's first call outside a recording and kept (a model's
  // layer holds its span for its life), made again if its pointers change.
  absl::StatusOr<const void* const*> ExpertTable(absl::Span<const Weight* const> experts);

  int ordinal_;
  MatmulDtype matmul_;
  KvFormat kv_;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<LtGemm> gemm_;
  std::set<std::string> block_plans_;  // GemmPlans' lines for weights in blocks
  // CUDA graphs by RunRecorded key (null: the key could not be recorded
  // and runs plainly); keys met once and not yet recorded.
  // Bounded: past kMaxRecordings every recording is dropped and they are
  // made again as keys come back.
  static constexpr size_t kMaxRecordings = 1024;
  bool record_steps_ = true;
  bool capturing_ = false;
  int64_t replays_ = 0;
  std::map<std::string, cudaGraphExec_t> recordings_;
  std::set<std::string> met_once_;
  bool experts_on_host_ = false;  // FLOVER_CUDA_EXPERTS=host
  struct ExpertTableEntry {
    std::vector<const void*> pointers;
    void* device = nullptr;
  };
  std::map<const Weight* const*, ExpertTableEntry> expert_tables_;
  static constexpr int kScratchSlots = 4;
  void* scratch_[kScratchSlots] = {};
  size_t scratch_bytes_[kScratchSlots] = {};
};

}  // namespace flover::kernels::cuda

#endif  // FLOVER_KERNELS_CUDA_CUDA_BACKEND_H_
