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
#include "model/forward_runtime.h"
#include "model/gpt2/gpt_config.h"
#include "model/gpt2/gpt_weights.h"
#include "model/gpt2/tp_shard.h"
#include "model/kv_cache.h"

namespace flover {

class GptModel final : public CausalLm {
 public:
  // Reads this rank's weights from `source` one layer at a time and puts
  // them on `backend` (which must outlive the model), releasing each host
  // tensor once it is there. With collectives of tp_size > 1 every rank
  // must call Forward with the same batch. Fails when the backend cannot
  // hold the model (the error names the size and the device).
  static absl::StatusOr<std::unique_ptr<GptModel>> Create(const GptConfig& config,
                                                          const WeightSource& source,
                                                          kernels::Backend& backend,
                                                          Collectives* collectives = nullptr);

  const GptConfig& config() const { return config_; }
  const ModelInfo& info() const override { return info_; }
  kernels::Backend& backend() const override { return backend_; }
  KvCacheShape CacheShape(int num_blocks, int max_seq) const override;
  // On the CPU the logits view is the backend's own buffer: no copy.
  absl::StatusOr<absl::Span<float>> Forward(const ForwardBatch& batch, KvCache& cache,
                                            LogitsFor which) override;
  using CausalLm::Forward;
  absl::Status PrepareForBatches(int max_rows, int max_logit_rows) override;

 private:
  struct LayerParams {
    kernels::Buffer ln_1_g, ln_1_b, ln_2_g, ln_2_b;        // [1, C]
    kernels::Buffer attn_b, attn_proj_b, fc_b, mlp_proj_b;  // [1, N]; empty: no bias
    std::unique_ptr<kernels::Weight> attn, attn_proj, fc, mlp_proj;
  };
  // Activation buffers (ForwardRuntime ids), for T rows and R logit rows.
  enum Activation {
    kX,       // f32 [T, C]: the residual stream, replicated on every rank
    kH,       // act [max(T, R), C]: layernorm output
    kQkv,     // f32 [T, 3 * C_local]
    kAttn,    // act [T, C_local]
    kFc,      // act [T, F_local]
    kLast,    // f32 [R, C]: the rows whose logits are wanted
    kLogits,  // f32 [max(T, R), V_local]
  };

  GptModel(const GptConfig& config, kernels::Backend& backend, Collectives* collectives);
  // Puts a part of the weights (its layers, then, with `globals`, wpe, the
  // final layernorm, the head, and wte read from `source` a block of rows
  // at a time) on the backend, releasing each host tensor as it goes.
  absl::Status Upload(GptWeights& part, const WeightSource& source, bool globals);
  // Runs the layers and the LM head; leaves this rank's logits in the first
  // R rows of buffer kLogits.
  absl::Status Run(const ForwardBatch& b, KvCache& cache, LogitsFor which, int* R);

  GptConfig config_;
  ModelInfo info_;
  kernels::Backend& backend_;
  ShardSpec spec_;
  ShardShape shard_;
  ForwardRuntime runtime_;
  std::vector<LayerParams> layers_;
  kernels::Buffer wte_;         // f32 [V_local, C]: this rank's embedding rows
  kernels::Buffer wpe_;         // f32 [P, C]; empty on ranks that do not add it
  kernels::Buffer ln_f_g_, ln_f_b_;
  std::unique_ptr<kernels::Weight> lm_head_;  // [V_local, C] (tied: wte)
};

}  // namespace flover

#endif  // FLOVER_MODEL_GPT2_GPT_MODEL_H_
