// Qwen2-MoE (Qwen1.5-MoE, Qwen2-57B-A14B): Qwen2 (biases on q, k and v)
// with mixture-of-experts layers: num_experts gated MLPs of width
// moe_intermediate_size, num_experts_per_tok per token, weighted by the
// router's softmax (renormalised with norm_topk_prob, off by default), plus a
// shared expert of width shared_expert_intermediate_size that every token
// goes through, scaled by a sigmoid gate (mlp.shared_expert_gate); in every
// decoder_sparse_step-th layer but those of mlp_only_layers. A config that
// turns its sliding window on is refused, as Qwen2's.
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_config.h"
#include "util/json.h"

namespace flover {

const LlamaArchitecture& Qwen2MoeArch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a;
    a.model_type = "qwen2_moe";
    a.gguf = true;
    a.gguf_name = "qwen2moe";
    a.moe = true;
    a.qkv_bias = true;
    a.parse = [](const google::protobuf::Struct& s, absl::string_view what, LlamaConfig* c) {
      if (JsonBoolField(s, "use_sliding_window", false)) return SlidingWindowRefused(what, "qwen2_moe");
      if (absl::Status st = ParseMoe(s, what, "num_experts", "moe_intermediate_size", /*renormalize=*/false, c);
          !st.ok()) {
        return st;
      }
      if (!JsonHas(s, "shared_expert_intermediate_size")) return absl::OkStatus();
      auto shared = JsonIntField(s, "shared_expert_intermediate_size", 0, 1 << 20, what);
      if (!shared.ok()) return shared.status();
      c->shared_expert_intermediate = static_cast<int>(*shared);
      return absl::OkStatus();
    };
    return a;
  }();
  return entry;
}

}  // namespace flover
