// The GPT-2 forward pass (a CausalLm) over a ragged token batch: any number
// of sequences, each contributing one or more tokens at its own positions (a
// prompt, a chunk of one, or a single decode token), in one call. Prefill
// and decode are the same path. Dense ops run over all rows at once;
// attention runs per sequence over its own KV slot.
//
// Everything the forward touches lives in the backend's memory: the weights
// are uploaded once by Create, activations are backend buffers reused across
// calls, and per call only the tokens, positions and sequence table go up
// and only the logit rows that are wanted come back.
#ifndef FLOVER_MODEL_GPT2_GPT_MODEL_H_
#define FLOVER_MODEL_GPT2_GPT_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "dist/communicator.h"
#include "kernels/backend.h"
#include "model/causal_lm.h"
#include "model/forward_batch.h"
#include "model/gpt2/gpt_config.h"
#include "model/gpt2/gpt_weights.h"
#include "model/gpt2/tp_shard.h"
#include "model/kv_cache.h"

namespace flover {

class GptModel final : public CausalLm {
 public:
  // Uploads `weights` to `backend` (which must outlive the model); the host
  // copy may be dropped afterwards. With collectives of tp_size > 1,
  // `weights` is this rank's shard (ShardGptWeights) and every rank must
  // call Forward with the same batch. Fails when the backend cannot hold the
  // model (the error names the size and the device).
  static absl::StatusOr<std::unique_ptr<GptModel>> Create(const GptConfig& config,
                                                          const GptWeights& weights,
                                                          kernels::Backend& backend,
                                                          Collectives* collectives = nullptr);

  const GptConfig& config() const { return config_; }
  const ModelInfo& info() const override { return info_; }
  kernels::Backend& backend() const override { return backend_; }
  KvCacheShape CacheShape(int slots, int max_seq) const override;
  // On the CPU the logits view is the backend's own buffer: no copy.
  absl::StatusOr<absl::Span<float>> Forward(const ForwardBatch& batch, KvCache& cache,
                                            LogitsFor which) override;
  using CausalLm::Forward;
  absl::Status PrepareForBatches(int max_rows, int max_logit_rows) override;
  absl::Status MoveSlot(KvCache& cache, int from, int to, int len) override;

 private:
  struct LayerParams {
    kernels::Buffer ln_1_g, ln_1_b, ln_2_g, ln_2_b;        // [1, C]
    kernels::Buffer attn_b, attn_proj_b, fc_b, mlp_proj_b;  // [1, N]; empty: no bias
    std::unique_ptr<kernels::Weight> attn, attn_proj, fc, mlp_proj;
  };
  // Activation and step buffers, sized for `rows` rows and `logit_rows` rows
  // of logits; grown (never shrunk) when a batch needs more.
  struct Activations {
    int rows = 0, logit_rows = 0;
    kernels::Buffer x;        // f32 [rows, C]: the residual stream
    kernels::Buffer h;        // act [max(rows, logit_rows), C]: layernorm output
    kernels::Buffer qkv;      // f32 [rows, 3 * C_local]
    kernels::Buffer attn;     // act [rows, C_local]
    kernels::Buffer fc;       // act [rows, F_local]
    kernels::Buffer partial;  // f32 [rows, C] (tp > 1): a row-split GEMM before its all-reduce
    kernels::Buffer last;     // f32 [logit_rows, C]: the rows whose logits are wanted
    kernels::Buffer logits;   // f32 [max(rows, logit_rows), V_local]
    kernels::Buffer step;     // i32 [1, 2 * rows + 4 * rows]: tokens, positions, sequences
  };

  GptModel(const GptConfig& config, kernels::Backend& backend, Collectives* collectives);
  absl::Status Upload(const GptWeights& weights);
  absl::Status Reserve(int rows, int logit_rows);
  absl::Status Validate(const ForwardBatch& batch, const KvCache& cache) const;
  // Runs the layers and the LM head; leaves this rank's logits in
  // act_.logits (its first R rows).
  absl::Status Run(const ForwardBatch& b, KvCache& cache, LogitsFor which, int* R);
  // The logits of the rows Run left, in host memory (gathered over ranks).
  absl::StatusOr<absl::Span<float>> HostLogits(int R);

  // x: [T, C] += rows @ w + bias, all-reduced over tensor-parallel ranks
  // when the layer is row-split. rows: [T, w.k()].
  absl::Status RowSplitResidual(const kernels::Tensor& rows, const kernels::Weight& w,
                                const kernels::Buffer& bias, const kernels::Tensor& x);
  // The epilogue RowSplitResidual's GEMM runs with.
  kernels::Epilogue RowSplitEpilogue() const {
    return spec_.tp_size == 1 ? kernels::Epilogue::kBiasResidual : kernels::Epilogue::kBias;
  }

  GptConfig config_;
  ModelInfo info_;
  kernels::Backend& backend_;
  Collectives* collectives_;  // null: one rank
  ShardSpec spec_;
  ShardShape shard_;
  std::vector<LayerParams> layers_;
  kernels::Buffer wte_;         // f32 [V_local, C]: this rank's embedding rows
  kernels::Buffer wpe_;         // f32 [P, C]; empty on ranks that do not add it
  kernels::Buffer ln_f_g_, ln_f_b_;
  std::unique_ptr<kernels::Weight> lm_head_;  // [V_local, C] (tied: wte)
  Activations act_;
  std::vector<int32_t> step_host_;    // the step table before its upload
  std::vector<float> logits_host_;    // logits in host memory when the backend's are not
  std::vector<float> gathered_;       // tp > 1: every rank's logits, rank after rank
};

}  // namespace flover

#endif  // FLOVER_MODEL_GPT2_GPT_MODEL_H_
