// The Llama family on the decoder skeleton (model/decoder): the DecoderSpec
// a config makes and the recipe table that names its tensors, shared by
// every architecture in model/llama/llama_architecture.h's table (Llama 2/3,
// TinyLlama, SmolLM2, Qwen2, Qwen3, Mistral, Phi-3, Gemma 2, ...), with what
// each changes — q/k/v biases, per-head Q/K norms, fused projections, (1 + w)
// sandwich norms, windows, soft-caps — read from its entry (a file per
// architecture).
#ifndef FLOVER_MODEL_LLAMA_LLAMA_FAMILY_H_
#define FLOVER_MODEL_LLAMA_LLAMA_FAMILY_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "model/decoder/decoder_spec.h"
#include "model/decoder/decoder_weights.h"
#include "model/llama/llama_config.h"
#include "model/loader/weight_source.h"

namespace flover {

DecoderSpec LlamaDecoderSpec(const LlamaConfig& config);

// Hugging Face names: "model.embed_tokens", "model.layers.N.*",
// "model.norm", "lm_head" unless tied. Matrices are nn.Linear's [out, in];
// q/k/v become one [(Hq + 2 Hkv) * D, C] matrix and gate/up one [2F, C].
DecoderRecipes LlamaRecipes(const LlamaConfig& config);

// Qwen3.5's multi-token-prediction layer (config.mtp_layers 1) on the
// decoder skeleton: a one-layer spec (DecoderSpec::mtp_input) whose layer
// is an attention layer of the model's (its MLP too), and its recipes under
// the names llama.cpp's files give it, as layer n_layer:
// "model.layers.{n_layer}.*" and its own "model.layers.{n_layer}.nextn.
// {eh_proj,enorm,hnorm,shared_head_norm}.weight" (a Hugging Face
// checkpoint's mtp.* through StoredLlamaName). No embedding or head: the
// model's (DecoderModel::CreateMtp).
DecoderSpec LlamaMtpSpec(const LlamaConfig& config);
DecoderRecipes LlamaMtpRecipes(const LlamaConfig& config);

// A recurrent layer's tensors (recurrent_recipes.cc): Qwen3.5's gated delta
// net (linear_attn.*) on this rank's key heads and their value heads, or
// LFM2's short convolution (conv.*) on this rank's band of channels.
void RecurrentLayerRecipes(const LlamaConfig& config, int l, const DecoderShard& shard, DecoderLayerWeights& out,
                           const DecoderRecipes::Visit& visit);

// This rank's weights (the part's layers): the recipe table read.
absl::StatusOr<DecoderWeights> LoadLlamaWeights(const WeightSource& source,
                                                const LlamaConfig& config, const ShardSpec& spec,
                                                WeightPart part = {});

// The built-in models' weights: seeded uniform values with std 0.02, norms 1;
// with `blocks`, the linear layers are random rows of blocks in that format.
std::unique_ptr<WeightSource> GeneratedLlamaSource(
    const LlamaConfig& config, uint64_t seed,
    std::optional<kernels::BlockFormat> blocks = std::nullopt);

}  // namespace flover

#endif  // FLOVER_MODEL_LLAMA_LLAMA_FAMILY_H_
