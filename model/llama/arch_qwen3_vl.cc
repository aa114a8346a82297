// Qwen3-VL's language model (Qwen3VLForConditionalGeneration's
// text_config, model_type qwen3_vl_text): Qwen3's layers (per-head Q and K
// norms, grouped-query, no biases), turned by a multimodal rotary whose
// interleaved sections (rope_parameters' mrope_section) give an image's
// rows their height and width positions; text rows' three positions are
// equal. Its image rows also take the vision tower's middle layers'
// features after the first layers (deepstack). The vision side is
// model/vision's.
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_config.h"
#include "util/json.h"

namespace flover {

const LlamaArchitecture& Qwen3VlArch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a;
    a.model_type = "qwen3_vl_text";
    a.default_head_dim = 128;  // Qwen3VLTextConfig's default
    a.qk_norm = true;
    a.image_text = {{"qwen3_vl", "model.language_model.", /*deepstack=*/true}};
    return a;
  }();
  return entry;
}

}  // namespace flover
