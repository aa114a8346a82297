// What the engine, the tensor-parallel workers, the server and the
// benchmarks know of a model: "a causal LM" that runs a forward pass over a
// ragged batch with a KV cache. model/decoder's DecoderModel implements it
// for every family (configured by model/gpt2 and model/llama); nothing
// outside model/ names an implementation.
#ifndef FLOVER_MODEL_CAUSAL_LM_H_
#define FLOVER_MODEL_CAUSAL_LM_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "model/model_info.h"

namespace flover {

class CausalLm {
 public:
  virtual ~CausalLm() = default;

  virtual const ModelInfo& info() const = 0;
  virtual kernels::Backend& backend() const = 0;

  // Shape of the KV cache this model (this rank's part of it) needs for
  // `num_blocks` blocks, sequences of up to `max_seq` positions, and (a
  // model with recurrent layers) the state of `state_slots` sequences.
  virtual KvCacheShape CacheShape(int num_blocks, int max_seq, int state_slots = 1) const = 0;

  // Runs the batch, writing its keys/values into `cache`, and returns the
  // logits ([num_seqs, V] or [T, V] per `which`) in host memory: a view that
  // stays valid until the next Forward. Tensor-parallel ranks other than 0
  // get an empty view. Every sequence must have rows, blocks of `cache`
  // covering its positions (none written by another sequence of the batch),
  // and fit the model's positions; token ids must be in the vocabulary. Violations are InvalidArgument; a failed
  // collective is Unavailable; a device fault is the backend's error.
  virtual absl::StatusOr<absl::Span<float>> Forward(const ForwardBatch& batch, KvCache& cache,
                                                    LogitsFor which) = 0;

  // Forward for greedy decoding: each sequence's last logit_rows rows'
  // best token (the first of the largest logits, as std::max_element over a
  // row picks it, so as Sampler picks a greedy token with no processors),
  // worked out where the logits are (the backend's ArgmaxRows), so only the
  // ids come back: [num_logit_rows] in host memory, valid until the next
  // Forward; empty on tensor-parallel ranks other than 0. Errors as Forward's.
  virtual absl::StatusOr<absl::Span<const int32_t>> ForwardGreedy(const ForwardBatch& batch,
                                                                  KvCache& cache) = 0;

  // Prepares everything Forward needs for batches of up to `max_rows` rows
  // and `max_logit_rows` rows of logits (compiled kernels, chosen GEMM
  // algorithms, activation buffers), so such a Forward allocates nothing and
  // never pauses to compile.
  virtual absl::Status PrepareForBatches(int max_rows, int max_logit_rows) = 0;

  // Whether every Forward from now keeps each row's final hidden state (the
  // residual stream after the final norm: the rows the head reads), for
  // FinalHidden. A drafter that reads the model's hidden rows (Qwen3.5's
  // multi-token prediction) asks for them; Unimplemented where a model
  // cannot keep them.
  virtual absl::Status KeepFinalHidden(bool on) {
    return on ? absl::UnimplementedError("this model does not keep its final hidden rows") : absl::OkStatus();
  }
  // With KeepFinalHidden: the last Forward's rows, [T, hidden] in host
  // memory in the batch's order, valid until the next Forward; else empty.
  virtual absl::Span<const float> FinalHidden() const { return {}; }

  // Forward, copying the logits into `logits` (resized; cleared on ranks > 0).
  absl::Status Forward(const ForwardBatch& batch, KvCache& cache, LogitsFor which,
                       std::vector<float>* logits);
};

}  // namespace flover

#endif  // FLOVER_MODEL_CAUSAL_LM_H_
