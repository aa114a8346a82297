// The GPT family on the decoder skeleton (model/decoder): LayerNorms with
// biases and a gelu_new MLP with biases in both; what each architecture
// changes is its entry's (gpt_architecture.h: GPT-2 in arch_gpt2.cc, GPT-J
// in model/gptj/arch_gptj.cc). Megatron split: Q/K/V by heads, the output projection and
// the MLP's second matrix by rows (their biases added by rank 0 alone),
// the MLP's first by columns, embedding and head by vocabulary ranges.
#ifndef FLOVER_MODEL_GPT2_GPT_FAMILY_H_
#define FLOVER_MODEL_GPT2_GPT_FAMILY_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "model/decoder/decoder_spec.h"
#include "model/decoder/decoder_weights.h"
#include "model/gpt2/gpt_config.h"
#include "model/loader/weight_source.h"

namespace flover {

DecoderSpec GptDecoderSpec(const GptConfig& config);

// Hugging Face names without the "transformer." prefix (the checkpoint
// source finds them under it too): "wte", "wpe" (GPT-2), "h.N.*", "ln_f",
// "lm_head" (GPT-J; GPT-2's when untied).
DecoderRecipes GptRecipes(const GptConfig& config);

// This rank's weights (the part's layers): the recipe table read.
absl::StatusOr<DecoderWeights> LoadGptWeights(const WeightSource& source, const GptConfig& config,
                                              const ShardSpec& spec, WeightPart part = {});

// The built-in models' weights: seeded uniform values with std 0.02,
// layernorms 1 and 0, biases 0, the head tied.
std::unique_ptr<WeightSource> GeneratedGptSource(uint64_t seed);

}  // namespace flover

#endif  // FLOVER_MODEL_GPT2_GPT_FAMILY_H_
