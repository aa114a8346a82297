// Megatron tensor-parallel split of Llama weights: Q by query heads, K and V
// by key/value heads (each rank keeps whole groups of grouped-query
// attention), gate and up by columns, o and down by rows (their all-reduce
// sums the ranks' parts), the embedding and LM head by vocabulary ranges,
// the norms replicated. No biases to place. (Which regions of which
// tensors that makes is llama_weights.cc's recipe table.)
#ifndef FLOVER_MODEL_LLAMA_LLAMA_SHARD_H_
#define FLOVER_MODEL_LLAMA_LLAMA_SHARD_H_

#include "absl/status/status.h"
#include "model/llama/llama_config.h"
#include "model/shard_spec.h"

namespace flover {

struct LlamaShard {
  int q_heads = 0, q_head_begin = 0;    // local query heads
  int kv_heads = 0, kv_head_begin = 0;  // local key/value heads
  int inner = 0, inner_begin = 0;       // local SwiGLU width
  int vocab_begin = 0, vocab_end = 0;
};

// OK when `tp` divides the key/value heads (and so the query heads) and the
// SwiGLU width; InvalidArgument naming what does not divide otherwise.
absl::Status ValidateLlamaShard(const LlamaConfig& config, const ShardSpec& spec);

LlamaShard LlamaShapeOf(const LlamaConfig& config, const ShardSpec& spec);

}  // namespace flover

#endif  // FLOVER_MODEL_LLAMA_LLAMA_SHARD_H_
