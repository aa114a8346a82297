// Llama weights in float32, as the forward pass uses them: nn.Linear
// matrices stored [out, in] as Hugging Face saves them, with q/k/v fused into
// one [(Hq + 2 Hkv) * D, C] matrix and gate/up into one [2F, C], so each is
// one GEMM. Loaded from a checkpoint (one file or shards) or generated for
// the built-ins.
#ifndef FLOVER_MODEL_LLAMA_LLAMA_WEIGHTS_H_
#define FLOVER_MODEL_LLAMA_LLAMA_WEIGHTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/llama/llama_config.h"
#include "model/loader/checkpoint.h"

namespace flover {

struct LlamaLayerWeights {
  std::vector<float> attn_norm;  // [C]
  std::vector<float> qkv;        // [(Hq + 2 Hkv) * D, C]: q_proj, k_proj, v_proj rows
  std::vector<float> o;          // [C, Hq * D]
  std::vector<float> mlp_norm;   // [C]
  std::vector<float> gate_up;    // [2F, C]: gate_proj rows, then up_proj rows
  std::vector<float> down;       // [C, F]
};

struct LlamaWeights {
  std::vector<float> embed;               // [V, C]
  std::vector<LlamaLayerWeights> layers;  // [n_layer]
  std::vector<float> norm;                // [C]
  std::vector<float> lm_head;             // [V, C]; empty when tied to embed

  const std::vector<float>& head() const { return lm_head.empty() ? embed : lm_head; }
};

// Reads every tensor of a LlamaForCausalLM checkpoint ("model.embed_tokens",
// "model.layers.N.*", "model.norm", "lm_head" unless tied); a missing tensor
// or a shape that disagrees with `config` is an error naming the tensor.
absl::StatusOr<LlamaWeights> LoadLlamaWeights(const Checkpoint& checkpoint,
                                              const LlamaConfig& config);

// Random initialization (uniform with std 0.02, norms 1), the same for the
// same seed.
LlamaWeights RandomLlamaWeights(const LlamaConfig& config, uint64_t seed);

}  // namespace flover

#endif  // FLOVER_MODEL_LLAMA_LLAMA_WEIGHTS_H_
