// One tensor-parallel rank's Llama weights as the forward pass uses them:
// norms and the embedding in float32, the GEMM weights in the dtype the
// checkpoint stores them in (a backend prepares them from that); nn.Linear
// matrices [out, in] as Hugging Face saves them, with
// q/k/v fused into one [(Hq + 2 Hkv) * D, C] matrix and gate/up into one
// [2F, C], so each is one GEMM. Read from a WeightSource (a checkpoint, or
// generated values for the built-ins) through the family's recipe table:
// only this rank's regions of each tensor are read.
#ifndef FLOVER_MODEL_LLAMA_LLAMA_WEIGHTS_H_
#define FLOVER_MODEL_LLAMA_LLAMA_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "model/llama/llama_config.h"
#include "model/llama/llama_shard.h"
#include "model/loader/weight_source.h"

namespace flover {

struct LlamaLayerWeights {
  std::vector<float> attn_norm;  // [C]
  StoredValues qkv;              // [(Hq + 2 Hkv) * D, C] for this rank's heads: q, k, v rows
  std::vector<float> qkv_bias;   // [(Hq + 2 Hkv) * D], the same rows; empty without biases
  StoredValues o;                // [C, Hq * D], this rank's columns
  std::vector<float> mlp_norm;   // [C]
  StoredValues gate_up;          // [2F, C]: this rank's gate_proj rows, then up_proj rows
  StoredValues down;             // [C, F], this rank's columns
};

struct LlamaWeights {
  std::vector<float> embed;               // [V, C], this rank's vocabulary rows
  std::vector<LlamaLayerWeights> layers;  // [n_layer]
  std::vector<float> norm;                // [C]
  StoredValues lm_head;                   // [V, C] rows; empty when tied to embed
};

// Reads this rank's weights ("model.embed_tokens", "model.layers.N.*",
// "model.norm", "lm_head" unless tied); a missing tensor or a shape that
// disagrees with `config` is an error naming the tensor. `layers` holds the
// part's layers only.
absl::StatusOr<LlamaWeights> LoadLlamaWeights(const WeightSource& source,
                                              const LlamaConfig& config, const ShardSpec& spec,
                                              WeightPart part = {});

// This rank's rows of the embedding (also the head's when it is tied).
WeightRecipe LlamaEmbeddingRecipe(const LlamaConfig& config, const ShardSpec& spec);

// Checks that every tensor the model needs is in `source` with the shape the
// config requires and a float dtype, reading no data.
absl::Status CheckLlamaWeights(const WeightSource& source, const LlamaConfig& config);

// The built-in models' weights: seeded uniform values with std 0.02, norms 1.
std::unique_ptr<WeightSource> GeneratedLlamaSource(const LlamaConfig& config, uint64_t seed);

}  // namespace flover

#endif  // FLOVER_MODEL_LLAMA_LLAMA_WEIGHTS_H_
