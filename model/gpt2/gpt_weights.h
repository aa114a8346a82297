// One tensor-parallel rank's GPT-2 weights, in the layout the forward pass
// uses (Conv1D weights [in, out], as Hugging Face stores them): layernorms,
// biases and embeddings in float32, the GEMM weights in the dtype the
// checkpoint stores them in (a backend prepares them from that),
// read from a WeightSource (a checkpoint, or generated values for the
// built-ins) through the family's recipe table: only this rank's regions of
// each tensor are read.
#ifndef FLOVER_MODEL_GPT2_GPT_WEIGHTS_H_
#define FLOVER_MODEL_GPT2_GPT_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "model/gpt2/gpt_config.h"
#include "model/gpt2/tp_shard.h"
#include "model/loader/weight_source.h"

namespace flover {

struct LayerWeights {
  std::vector<float> ln_1_g, ln_1_b;                // [C]
  StoredValues attn_w;                              // [C, 3C]
  std::vector<float> attn_b;                        // [3C]
  StoredValues attn_proj_w;                         // [C, C]
  std::vector<float> attn_proj_b;                   // [C]
  std::vector<float> ln_2_g, ln_2_b;                // [C]
  StoredValues fc_w;                                // [C, F]
  std::vector<float> fc_b;                          // [F]
  StoredValues mlp_proj_w;                          // [F, C]
  std::vector<float> mlp_proj_b;                    // [C]
};

struct GptWeights {
  std::vector<float> wte;             // [V, C]
  std::vector<float> wpe;             // [P, C]
  std::vector<LayerWeights> layers;   // [n_layer]
  std::vector<float> ln_f_g, ln_f_b;  // [C]
  StoredValues lm_head;               // [V, C]; empty when tied to wte
};

// Reads this rank's weights (with or without the "transformer." prefix;
// "lm_head.weight" when the checkpoint has it, else the head is tied to
// wte); a missing tensor or a shape that disagrees with `config` is an error
// naming the tensor. Ranks other than 0 get zeros for the biases of
// row-split layers (the all-reduce adds rank 0's once).
// `part`: as for Llama, layers [layer_begin, layer_end) and, with
// `globals`, wte, wpe, the final layernorm and the head.
absl::StatusOr<GptWeights> LoadGptWeights(const WeightSource& source, const GptConfig& config,
                                          const ShardSpec& spec, WeightPart part = {});

// This rank's rows of wte (also the head's when it is tied).
WeightRecipe GptEmbeddingRecipe(const GptConfig& config, const ShardSpec& spec);

// Checks every tensor's presence, shape and dtype, reading no data.
absl::Status CheckGptWeights(const WeightSource& source, const GptConfig& config);

// The built-in models' weights: seeded uniform values with std 0.02,
// layernorm gains 1, biases 0, the head tied.
std::unique_ptr<WeightSource> GeneratedGptSource(uint64_t seed);

}  // namespace flover

#endif  // FLOVER_MODEL_GPT2_GPT_WEIGHTS_H_
