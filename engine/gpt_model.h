// The GPT-2 forward pass over a ragged token batch: any number of sequences,
// each contributing one or more tokens at its own positions (a prompt, a chunk
// of one, or a single decode token), in one call. Prefill and decode are the
// same path. Dense ops run over all rows at once; attention runs per sequence
// over its own KV slot.
#ifndef FLOVER_ENGINE_GPT_MODEL_H_
#define FLOVER_ENGINE_GPT_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/comm/communicator.h"
#include "engine/gpt_config.h"
#include "engine/gpt_weights.h"
#include "engine/kv_cache.h"
#include "engine/tp_shard.h"
#include "kernels/ops.h"

namespace flover {

// Rows of one forward call. Build it with AddSequence.
struct ForwardBatch {
  std::vector<int32_t> tokens;     // [T]
  std::vector<int32_t> positions;  // [T]
  std::vector<kernels::SeqRows> seqs;

  // Appends `tokens` of the sequence in `slot`, the first at position `pos`.
  void AddSequence(int32_t slot, int32_t pos, absl::Span<const int32_t> new_tokens);
  void Clear();
  int num_rows() const { return static_cast<int>(tokens.size()); }
};

enum class LogitsFor {
  kLastRowOfEachSequence,  // [num_seqs, V]: what generation needs
  kEveryRow,               // [T, V]: for tests and scoring
};

class GptModel {
 public:
  // Takes the weights and prepares every linear layer for `ops` (which must
  // outlive the model), dropping the plain copies the backend no longer needs.
  // With a communicator of tp_size > 1, `weights` is this rank's shard
  // (ShardGptWeights) and every rank must call Forward with the same batch.
  GptModel(const GptConfig& config, GptWeights weights, kernels::Ops& ops,
           Communicator* comm = nullptr);

  const GptConfig& config() const { return config_; }

  // Shape of the KV cache this model needs for `slots` x `max_seq`.
  KvCacheShape CacheShape(int slots, int max_seq) const;

  // Runs the batch, writing its keys/values into `cache` and the logits into
  // `logits` (resized; on tensor-parallel ranks other than 0 left empty).
  // Every sequence must use a distinct slot of `cache`, have rows, and fit in
  // both the cache and the model's positions; token ids must be in the
  // vocabulary. Violations are InvalidArgument errors; a failed collective
  // is Unavailable.
  absl::Status Forward(const ForwardBatch& batch, KvCache& cache, LogitsFor which,
                       std::vector<float>* logits);

  // Prepares everything Forward needs for batches of up to `max_rows` rows
  // and `max_logit_rows` rows of logits (compiled kernels, work buffers), so
  // such a Forward allocates nothing but `logits` and never pauses to compile.
  void PrepareForBatches(int max_rows, int max_logit_rows);

  // Copies positions [0, len) of slot `from` to slot `to` in every layer.
  void MoveSlot(KvCache& cache, int from, int to, int len) { cache.MoveSlot(ops_, from, to, len); }

 private:
  absl::Status Validate(const ForwardBatch& batch, const KvCache& cache) const;

  struct PreparedLayer {
    std::unique_ptr<kernels::Weight> attn, attn_proj, fc, mlp_proj;
  };

  // x: [T, C] += rows @ w + bias, all-reduced over tensor-parallel ranks
  // when the layer is row-split. rows: [T, w.k()].
  absl::Status RowSplitResidual(const float* rows, int T, const kernels::Weight& w,
                                const float* bias, float* x);
  // The epilogue RowSplitResidual's GEMM runs with.
  kernels::Epilogue RowSplitEpilogue() const {
    return spec_.tp_size == 1 ? kernels::Epilogue::kBiasResidual : kernels::Epilogue::kBias;
  }

  GptConfig config_;
  GptWeights weights_;  // embeddings, layernorms, biases; wte doubles as the LM head
  kernels::Ops& ops_;
  Communicator* comm_;  // null: one rank
  ShardSpec spec_;
  ShardShape shard_;
  std::vector<PreparedLayer> layers_;
  std::unique_ptr<kernels::Weight> lm_head_;
  // Activations, grown to the largest batch seen and then reused.
  std::vector<float> x_, h_, qkv_, attn_, fc_, last_, partial_, gathered_;
};

}  // namespace flover

#endif  // FLOVER_ENGINE_GPT_MODEL_H_
