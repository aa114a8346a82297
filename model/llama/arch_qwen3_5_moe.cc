// Qwen3.5-MoE (Qwen3.5-35B-A3B, Qwen3.6-35B-A3B; model_type
// qwen3_5_moe_text, its released image-text checkpoints qwen3_5_moe): Qwen3.5
// with every MLP a mixture of num_experts experts of width
// moe_intermediate_size, num_experts_per_tok per token, their router's
// softmax always renormalised over the chosen ones, and a shared expert of
// width shared_expert_intermediate_size scaled by sigmoid(shared_expert_gate
// . x). Its checkpoints hold a layer's experts as two 3-D tensors
// (mlp.experts.gate_up_proj [E, 2F, C]: each expert's gate rows then its up
// rows; mlp.experts.down_proj [E, C, F]); transformers' save_pretrained
// writes them one expert at a time, which is read too. GGUF (llama.cpp's
// qwen35moe): as qwen35, the experts merged per projection.
#include "absl/strings/str_cat.h"
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_config.h"
#include "util/json.h"
#include "util/status_macros.h"

namespace flover {
namespace {

absl::Status ParseQwen3_5Moe(const google::protobuf::Struct& s, absl::string_view what, LlamaConfig* c) {
  FLOVER_RETURN_IF_ERROR(ParseQwen3_5Linear(s, what, c));
  FLOVER_RETURN_IF_ERROR(ParseMoe(s, what, "num_experts", "moe_intermediate_size", /*renormalize=*/true, c));
  c->norm_topk_prob = true;  // the class has no norm_topk_prob: it always renormalises
  auto shared = JsonIntField(s, "shared_expert_intermediate_size", 0, 1 << 20, what);
  if (!shared.ok()) return shared.status();
  c->shared_expert_intermediate = static_cast<int>(*shared);
  // No dense MLP: its width is the shared expert's (or an expert's) where
  // config.json has no intermediate_size.
  if (!JsonHas(s, "intermediate_size")) {
    c->intermediate = c->shared_expert_intermediate > 0 ? c->shared_expert_intermediate : c->expert_intermediate;
  }
  return absl::OkStatus();
}

}  // namespace

const LlamaArchitecture& Qwen3_5MoeArch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a;
    a.model_type = "qwen3_5_moe_text";
    a.image_text = {{"qwen3_5_moe"}};
    a.gguf_name = "qwen35moe";
    Qwen3_5Entry(&a);
    a.moe = true;
    a.gguf_moe_renormalize = true;
    a.parse = ParseQwen3_5Moe;
    a.gguf_parse = Qwen3_5TiledGguf;  // as qwen35's
    a.moe_packed_gate_up = "mlp.experts.gate_up_proj";
    a.moe_packed_down = "mlp.experts.down_proj";
    return a;
  }();
  return entry;
}

}  // namespace flover
