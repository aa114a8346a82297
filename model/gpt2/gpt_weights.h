// GPT-2 weights in float32, in the layout the forward pass uses (Conv1D
// weights [in, out], as Hugging Face stores them), loaded from safetensors or
// generated for the built-in models.
#ifndef FLOVER_MODEL_GPT2_GPT_WEIGHTS_H_
#define FLOVER_MODEL_GPT2_GPT_WEIGHTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/gpt2/gpt_config.h"
#include "model/loader/safetensors.h"

namespace flover {

struct LayerWeights {
  std::vector<float> ln_1_g, ln_1_b;                // [C]
  std::vector<float> attn_w, attn_b;                // [C, 3C], [3C]
  std::vector<float> attn_proj_w, attn_proj_b;      // [C, C], [C]
  std::vector<float> ln_2_g, ln_2_b;                // [C]
  std::vector<float> fc_w, fc_b;                    // [C, F], [F]
  std::vector<float> mlp_proj_w, mlp_proj_b;        // [F, C], [C]
};

struct GptWeights {
  std::vector<float> wte;             // [V, C]
  std::vector<float> wpe;             // [P, C]
  std::vector<LayerWeights> layers;   // [n_layer]
  std::vector<float> ln_f_g, ln_f_b;  // [C]
  std::vector<float> lm_head;         // [V, C]; empty when tied to wte

  const float* lm_head_data() const {
    return lm_head.empty() ? wte.data() : lm_head.data();
  }
};

// Reads every tensor of a GPT-2 checkpoint, with or without the
// "transformer." key prefix; a missing tensor or a shape that disagrees with
// `config` is an error naming the tensor.
absl::StatusOr<GptWeights> LoadGptWeights(const SafetensorsFile& file,
                                          const GptConfig& config);

// GPT-2-style random initialization (weights uniform with std 0.02, layernorm
// gains 1, biases 0), the same for the same seed.
GptWeights RandomGptWeights(const GptConfig& config, uint64_t seed);

}  // namespace flover

#endif  // FLOVER_MODEL_GPT2_GPT_WEIGHTS_H_
