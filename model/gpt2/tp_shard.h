// Megatron-style tensor-parallel sharding of GPT-2 weights: Q, K and V
// column-split by heads, attention c_proj row-split, MLP c_fc column-split,
// MLP c_proj row-split (biases of row-split layers kept on rank 0 only, so
// the all-reduce adds them once), wte/lm_head split by vocabulary in
// contiguous ranges of any size, layernorms and wpe replicated. (Which
// regions of which tensors that makes is gpt_weights.cc's recipe table.)
#ifndef FLOVER_MODEL_GPT2_TP_SHARD_H_
#define FLOVER_MODEL_GPT2_TP_SHARD_H_

#include "absl/status/status.h"
#include "model/gpt2/gpt_config.h"
#include "model/shard_spec.h"

namespace flover {

// What one rank holds.
struct ShardShape {
  int heads = 0;        // local heads
  int head_begin = 0;
  int inner = 0;        // local MLP width
  int inner_begin = 0;
  int vocab_begin = 0;  // wte / lm_head rows [vocab_begin, vocab_end)
  int vocab_end = 0;
  bool adds_replicated_bias = true;  // rank 0 adds row-split layers' biases
};

// Checks that the model can be split `tp_size` ways (heads and MLP width
// divisible), naming the problem otherwise.
absl::Status ValidateShardSpec(const GptConfig& config, const ShardSpec& spec);

ShardShape ShapeOf(const GptConfig& config, const ShardSpec& spec);

}  // namespace flover

#endif  // FLOVER_MODEL_GPT2_TP_SHARD_H_
