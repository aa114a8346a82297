// Qwen3-Next (Qwen3NextForCausalLM, Qwen3-Next-80B-A3B): the hybrid Qwen3.5
// grew from. Gated delta net and attention layers as layer_types (or
// full_attention_interval) says, Qwen3.5's attention with its output gate
// and partial rotary, (1 + w) norms; its MLPs a mixture of experts with a
// gated shared expert, as Qwen2-MoE's (norm_topk_prob, decoder_sparse_step,
// mlp_only_layers). Its delta net's projections are packed per key head:
// in_proj_qkvz holds, for each key head, its q and k rows, then the v rows
// and the z rows of the value heads that read it; in_proj_ba its b rows then
// its a rows. GGUF (llama.cpp's qwen3next): q, k, v apart from z (attn_qkv,
// attn_gate) with the value heads grouped as transformers has them, b and a
// packed as transformers has them (ssm_ba).
#include "absl/strings/str_cat.h"
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_config.h"
#include "util/json.h"
#include "util/status_macros.h"

namespace flover {
namespace {

absl::Status ParseQwen3Next(const google::protobuf::Struct& s, absl::string_view what, LlamaConfig* c) {
  FLOVER_RETURN_IF_ERROR(ParseQwen3_5Linear(s, what, c));
  FLOVER_RETURN_IF_ERROR(ParseMoe(s, what, "num_experts", "moe_intermediate_size", /*renormalize=*/true, c));
  auto shared = JsonIntField(s, "shared_expert_intermediate_size", 0, 1 << 20, what);
  if (!shared.ok()) return shared.status();
  c->shared_expert_intermediate = static_cast<int>(*shared);
  c->linear_qkvz_packed = true;
  c->linear_ba_packed = true;
  return absl::OkStatus();
}

}  // namespace

const LlamaArchitecture& Qwen3NextArch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a;
    a.model_type = "qwen3_next";
    a.gguf_name = "qwen3next";
    Qwen3_5Entry(&a);
    a.moe = true;
    a.gguf_moe_renormalize = true;
    a.parse = ParseQwen3Next;
    a.gguf_parse = [](const GgufFile& f, const std::string& prefix, LlamaConfig* c) {
      FLOVER_RETURN_IF_ERROR(Qwen3_5LinearGguf(f, prefix, c));
      c->linear_ba_packed = true;
      return absl::OkStatus();
    };
    return a;
  }();
  return entry;
}

}  // namespace flover
