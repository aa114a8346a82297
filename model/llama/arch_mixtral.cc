// Mixtral: Mistral (sliding windows where the config sets one) with a
// mixture of experts in every layer: num_local_experts gated MLPs (w1 the
// gate, w3 the up, w2 the down projection, of width intermediate_size) of
// which a router ("block_sparse_moe.gate") picks num_experts_per_tok per
// token, weighted by its softmax renormalised over the chosen ones.
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_config.h"

namespace flover {

const LlamaArchitecture& MixtralArch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a;
    a.model_type = "mixtral";
    a.gguf = true;
    a.gguf_name = "llama";  // llama.cpp writes Mixtral as llama with expert_count
    a.gguf_permuted_qk = true;
    a.moe = true;
    a.gguf_moe_renormalize = true;
    a.moe_router = "block_sparse_moe.gate";
    a.moe_experts = "block_sparse_moe.experts";
    a.moe_gate = "w1";
    a.moe_up = "w3";
    a.moe_down = "w2";
    a.parse = [](const google::protobuf::Struct& s, absl::string_view what, LlamaConfig* c) {
      if (absl::Status st = ParseSlidingWindow(s, what, /*absent=*/0, c); !st.ok()) return st;
      return ParseMoe(s, what, "num_local_experts", "intermediate_size", /*renormalize=*/true, c);
    };
    return a;
  }();
  return entry;
}

}  // namespace flover
