// Qwen3 (dense): Llama with a per-head RMSNorm of Q and K before rotary
// (q_norm, k_norm: [head_dim], shared by the heads), no q/k/v biases, and
// head_dim 128 when the config does not say. As for Qwen2, a config that
// turns its sliding window on is refused (transformers applies it only with
// FlashAttention-2).
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_config.h"
#include "util/json.h"

namespace flover {

const LlamaArchitecture& Qwen3Arch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a;
    a.model_type = "qwen3";
    a.gguf = true;
    a.default_head_dim = 128;  // Qwen3Config's default
    a.qk_norm = true;
    a.parse = [](const google::protobuf::Struct& s, absl::string_view what, LlamaConfig*) {
      return JsonBoolField(s, "use_sliding_window", false) ? SlidingWindowRefused(what, "qwen3") : absl::OkStatus();
    };
    return a;
  }();
  return entry;
}

}  // namespace flover
