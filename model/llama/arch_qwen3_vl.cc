// Qwen3-VL's language model (Qwen3VLForConditionalGeneration's
// text_config, model_type qwen3_vl_text): Qwen3's layers (per-head Q and K
// norms, grouped-query, no biases), turned by a multimodal rotary whose
// interleaved sections (rope_parameters' mrope_section) give an image's
// rows their height and width positions; text rows' three positions are
// equal. Its image rows also take the vision tower's middle layers'
// features after the first layers (deepstack). The vision side is
// model/vision's. GGUF (llama.cpp's qwen3vl): qwen3's tensors,
// rope.dimension_sections (t, h, w, 0; interleaved, llama.cpp's "imrope")
// and n_deepstack_layers.
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_config.h"
#include "absl/strings/str_cat.h"
#include "model/loader/gguf.h"
#include "util/json.h"
#include "util/status_macros.h"

namespace flover {

namespace {

absl::Status Qwen3VlGguf(const GgufFile& f, const std::string& a, LlamaConfig* c) {
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(f.name(), ": ", a, m...)); };
  FLOVER_RETURN_IF_ERROR(GgufMropeSections(f, a, c));
  FLOVER_ASSIGN_OR_RETURN(const int64_t deepstack, f.GetIntOr(a + "n_deepstack_layers", 0));
  if (deepstack < 0 || deepstack > c->n_layer) return refuse("n_deepstack_layers ", deepstack, " is out of range");
  c->given_layers = static_cast<int>(deepstack);
  return absl::OkStatus();
}

}  // namespace

absl::Status GgufMropeSections(const GgufFile& f, const std::string& a, LlamaConfig* c) {
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(f.name(), ": ", a, m...)); };
  if (f.Find(a + "rope.dimension_sections") == nullptr) return absl::OkStatus();
  FLOVER_ASSIGN_OR_RETURN(const std::vector<int64_t>* sections, f.GetInts(a + "rope.dimension_sections"));
  if (sections->size() < 3) return refuse("rope.dimension_sections needs the t, h and w sections");
  for (int i = 0; i < 3; ++i) {
    const int64_t v = (*sections)[i];
    if (v < 0 || v > 1024) return refuse("rope.dimension_sections holds ", v);
    c->mrope[i] = static_cast<int>(v);
  }
  c->mrope_interleaved = true;
  return absl::OkStatus();
}

const LlamaArchitecture& Qwen3VlArch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a;
    a.model_type = "qwen3_vl_text";
    a.default_head_dim = 128;  // Qwen3VLTextConfig's default
    a.qk_norm = true;
    a.image_text = {{"qwen3_vl", "model.language_model.", /*deepstack=*/true}};
    a.gguf = true;
    a.gguf_name = "qwen3vl";
    a.gguf_parse = Qwen3VlGguf;
    return a;
  }();
  return entry;
}

}  // namespace flover
