// Llama 2/3, TinyLlama, SmolLM/SmolLM2: the family's skeleton as it is.
// transformers applies no sliding window to Llama: a config that sets one
// is refused rather than run without it.
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_config.h"
#include "util/json.h"

namespace flover {

const LlamaArchitecture& LlamaArch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a;
    a.model_type = "llama";
    // SmolVLM (transformers' Idefics3 and SmolVLM classes): a Llama under
    // model.text_model.; its vision tower is model/vision's to read.
    a.image_text = {{"idefics3", "model.text_model."}, {"smolvlm", "model.text_model."}};
    a.gguf = true;
    a.gguf_permuted_qk = true;
    a.parse = [](const google::protobuf::Struct& s, absl::string_view what, LlamaConfig*) {
      return JsonHas(s, "sliding_window") ? SlidingWindowRefused(what, "llama") : absl::OkStatus();
    };
    return a;
  }();
  return entry;
}

}  // namespace flover
