// Qwen3-MoE: Qwen3 (per-head Q/K norms, head_dim 128 by default) with
// mixture-of-experts layers: num_experts gated MLPs of width
// moe_intermediate_size, num_experts_per_tok per token, weighted by the
// router's softmax (renormalised over the chosen ones with norm_topk_prob),
// in every decoder_sparse_step-th layer but those of mlp_only_layers, which
// keep a dense MLP of intermediate_size.
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_config.h"
#include "util/json.h"

namespace flover {

const LlamaArchitecture& Qwen3MoeArch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a;
    a.model_type = "qwen3_moe";
    a.gguf = true;
    a.gguf_name = "qwen3moe";
    a.moe = true;
    a.gguf_moe_renormalize = true;
    a.default_head_dim = 128;
    a.qk_norm = true;
    a.parse = [](const google::protobuf::Struct& s, absl::string_view what, LlamaConfig* c) {
      if (JsonBoolField(s, "use_sliding_window", false)) return SlidingWindowRefused(what, "qwen3_moe");
      return ParseMoe(s, what, "num_experts", "moe_intermediate_size", /*renormalize=*/false, c);
    };
    return a;
  }();
  return entry;
}

}  // namespace flover
