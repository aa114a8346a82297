// Qwen2 / Qwen2.5: Llama with biases on q, k and v. Its configs carry
// sliding_window even where use_sliding_window is off; transformers applies
// the window only with FlashAttention-2, so a config that turns it on is
// refused.
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_config.h"
#include "util/json.h"

namespace flover {

const LlamaArchitecture& Qwen2Arch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a;
    a.model_type = "qwen2";
    a.gguf = true;
    a.qkv_bias = true;
    a.parse = [](const google::protobuf::Struct& s, absl::string_view what, LlamaConfig*) {
      return JsonBoolField(s, "use_sliding_window", false) ? SlidingWindowRefused(what, "qwen2") : absl::OkStatus();
    };
    a.builtin = [](LlamaConfig* c) { c->tie_word_embeddings = true; };
    return a;
  }();
  return entry;
}

}  // namespace flover
