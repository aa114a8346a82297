// The Llama forward pass (a CausalLm) over a ragged token batch: RMSNorm,
// fused QKV with rotary embeddings applied at each row's own position (so
// prompt chunks and decode rows are exact), grouped-query attention over a
// cache of key/value heads, a SwiGLU MLP, no biases.
#ifndef FLOVER_MODEL_LLAMA_LLAMA_MODEL_H_
#define FLOVER_MODEL_LLAMA_LLAMA_MODEL_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/communicator.h"
#include "kernels/backend.h"
#include "model/causal_lm.h"
#include "model/forward_runtime.h"
#include "model/llama/llama_config.h"
#include "model/llama/llama_shard.h"
#include "model/llama/llama_weights.h"

namespace flover {

class LlamaModel final : public CausalLm {
 public:
  // As GptModel::Create: with collectives of tp_size > 1, `weights` is this
  // rank's. They are read from `source` one layer at a time, each layer's
  // host copy released once it is on the backend.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Create(const LlamaConfig& config,
                                                            const WeightSource& source,
                                                            kernels::Backend& backend,
                                                            Collectives* collectives = nullptr);

  const ModelInfo& info() const override { return info_; }
  kernels::Backend& backend() const override { return backend_; }
  KvCacheShape CacheShape(int num_blocks, int max_seq) const override;
  absl::StatusOr<absl::Span<float>> Forward(const ForwardBatch& batch, KvCache& cache,
                                            LogitsFor which) override;
  using CausalLm::Forward;
  absl::Status PrepareForBatches(int max_rows, int max_logit_rows) override;

 private:
  struct LayerParams {
    kernels::Buffer attn_norm, mlp_norm;  // f32 [1, C]
    kernels::Buffer qkv_b;                // f32 [1, (Hq + 2 Hkv)_local * D]; empty without biases
    std::unique_ptr<kernels::Weight> qkv, o, gate_up, down;
  };
  enum Activation {
    kX,       // f32 [T, C]: the residual stream, replicated on every rank
    kH,       // act [max(T, R), C]: RMSNorm output
    kQkv,     // f32 [T, (Hq + 2 Hkv)_local * D]
    kAttn,    // act [T, Hq_local * D]
    kGateUp,  // f32 [T, 2 F_local]
    kMlp,     // act [T, F_local]: silu(gate) * up
    kLast,    // f32 [R, C]
    kLogits,  // f32 [max(T, R), V_local]
  };

  LlamaModel(const LlamaConfig& config, kernels::Backend& backend, Collectives* collectives);
  // Puts a part of the weights (its layers, then, with `globals`, the
  // final norm and head, and the embedding read from `source` a block of
  // rows at a time) on the backend, releasing each host tensor as it goes.
  absl::Status Upload(LlamaWeights& part, const WeightSource& source, bool globals);
  absl::Status Run(const ForwardBatch& b, KvCache& cache, LogitsFor which, int* R);

  LlamaConfig config_;
  ModelInfo info_;
  kernels::Backend& backend_;
  ShardSpec spec_;
  LlamaShard shard_;
  ForwardRuntime runtime_;
  std::vector<LayerParams> layers_;
  kernels::Buffer embed_;     // f32 [V_local, C]
  kernels::Buffer norm_;      // f32 [1, C]
  kernels::Buffer inv_freq_;  // f32 [1, D / 2]: the rotary frequencies, scaled
  std::unique_ptr<kernels::Weight> lm_head_;  // [V_local, C]
};

}  // namespace flover

#endif  // FLOVER_MODEL_LLAMA_LLAMA_MODEL_H_
