// Granite 4.0-H (GraniteMoeHybridForCausalLM, model_type granitemoehybrid):
// Mamba-2 layers (layer_types "mamba") beside attention layers, each MLP a
// mixture of num_local_experts experts with a shared MLP beside them (or,
// with no experts, the shared MLP alone: Granite 4.0-H-Micro). Its
// multipliers: the embedding's rows times embedding_multiplier, each
// branch's output times residual_multiplier before it joins the residual
// stream, attention's scores times attention_multiplier (not
// 1/sqrt(head_dim)), the logits divided by logits_scaling (folded into the
// final norm's weights). position_embedding_type "nope": no rotary
// embeddings (the hybrids as released). The router picks the top k logits
// and weighs them by their softmax; the experts' gate and up rows are one
// 3-D tensor (input_linear [E, 2F, C]), their down another (output_linear
// [E, C, F]); the shared MLP's gate and up rows one matrix. GGUF (llama.cpp's
// granitehybrid): attention.head_count_kv 0 for a Mamba layer, A as
// -exp(A_log), Q and K permuted as its llama's.
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_config.h"
#include "model/loader/gguf.h"
#include "util/json.h"
#include "util/status_macros.h"

namespace flover {
namespace {

using google::protobuf::Value;

absl::Status ParseGranite(const google::protobuf::Struct& s, absl::string_view what, LlamaConfig* c) {
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(what, ": ", m...)); };
  // The mixture, or none.
  absl::StatusOr<int> experts = 0;
  if (JsonHas(s, "num_local_experts")) experts = JsonIntField(s, "num_local_experts", 0, 1 << 10, what);
  if (!experts.ok()) return experts.status();
  auto shared = JsonIntField(s, "shared_intermediate_size", 1, 1 << 20, what);
  if (!shared.ok()) return shared.status();
  if (*experts > 0) {
    auto k = JsonIntField(s, "num_experts_per_tok", 1, *experts, what);
    if (!k.ok()) return k.status();
    auto width = JsonIntField(s, "intermediate_size", 1, 1 << 20, what);
    if (!width.ok()) return width.status();
    c->experts = *experts;
    c->experts_per_tok = *k;
    c->expert_intermediate = *width;
    c->shared_expert_intermediate = *shared;
    c->norm_topk_prob = true;  // a softmax over the chosen logits
  } else {
    c->intermediate = *shared;  // the shared MLP is the layer's MLP
  }
  // The multipliers.
  for (auto [key, out] : {std::pair{"embedding_multiplier", &c->embedding_multiplier},
                          std::pair{"residual_multiplier", &c->residual_multiplier},
                          std::pair{"logits_scaling", &c->logits_scaling}}) {
    auto v = JsonNumberField(s, key, 1.0, what);
    if (!v.ok()) return v.status();
    if (!(*v > 0 && *v < 1e6)) return refuse(key, " must be in (0, 1e6), got ", *v);
    *out = *v;
  }
  auto scale = JsonNumberField(s, "attention_multiplier", 0.0, what);
  if (!scale.ok()) return scale.status();
  if (!(*scale >= 0 && *scale < 1e6)) return refuse("attention_multiplier must be in [0, 1e6), got ", *scale);
  c->attention_multiplier = *scale;
  std::string position = "rope";
  if (auto it = s.fields().find("position_embedding_type");
      it != s.fields().end() && it->second.kind_case() == Value::kStringValue) {
    position = it->second.string_value();
  }
  if (position != "rope" && position != "nope") {
    return refuse("position_embedding_type \"", position, "\" is not supported (rope, nope)");
  }
  c->no_rope = position == "nope";
  // Mamba-2.
  if (JsonBoolField(s, "mamba_proj_bias", false)) return refuse("mamba_proj_bias is not supported");
  c->mamba_conv_bias = JsonBoolField(s, "mamba_conv_bias", true);
  auto get = [&](const char* key, int64_t dflt, int* out) -> absl::Status {
    if (!JsonHas(s, key)) {
      *out = static_cast<int>(dflt);
      return absl::OkStatus();
    }
    auto v = JsonIntField(s, key, 1, 1 << 16, what);
    if (!v.ok()) return v.status();
    *out = *v;
    return absl::OkStatus();
  };
  int expand = 0;
  FLOVER_RETURN_IF_ERROR(get("mamba_n_heads", 128, &c->mamba_heads));
  FLOVER_RETURN_IF_ERROR(get("mamba_n_groups", 1, &c->mamba_groups));
  FLOVER_RETURN_IF_ERROR(get("mamba_d_state", 256, &c->mamba_state));
  FLOVER_RETURN_IF_ERROR(get("mamba_d_conv", 4, &c->conv_kernel));
  FLOVER_RETURN_IF_ERROR(get("mamba_expand", 2, &expand));
  auto hidden = JsonIntField(s, "hidden_size", 1, 1 << 17, what);
  if (!hidden.ok()) return hidden.status();
  const int64_t inner = int64_t{expand} * *hidden;
  // mamba_d_head: a number, or "auto" (the inner size over the heads).
  if (auto it = s.fields().find("mamba_d_head");
      it != s.fields().end() && it->second.kind_case() == Value::kNumberValue) {
    FLOVER_RETURN_IF_ERROR(get("mamba_d_head", 0, &c->mamba_head_dim));
  } else {
    c->mamba_head_dim = static_cast<int>(inner / c->mamba_heads);
  }
  if (int64_t{c->mamba_heads} * c->mamba_head_dim != inner) {
    return refuse("mamba_n_heads (", c->mamba_heads, ") x mamba_d_head (", c->mamba_head_dim,
                  ") is not mamba_expand x hidden_size (", inner, ")");
  }
  // time_step_limit: dt's clamp, (0, inf) by default.
  if (auto it = s.fields().find("time_step_limit"); it != s.fields().end() &&
                                                    it->second.kind_case() != Value::kNullValue) {
    const auto& list = it->second.list_value().values();
    if (it->second.kind_case() != Value::kListValue || list.size() != 2 ||
        list[0].kind_case() != Value::kNumberValue || list[1].kind_case() != Value::kNumberValue ||
        !(list[0].number_value() >= 0 && list[1].number_value() > list[0].number_value())) {
      return refuse("time_step_limit must be two numbers, 0 <= min < max");
    }
    c->dt_min = list[0].number_value();
    c->dt_max = list[1].number_value();
  }
  return absl::OkStatus();
}

// llama.cpp's granitehybrid keys: the multipliers, Mamba-2's shapes under
// ssm.*, rope.scaling.finetuned (false: no rotary embeddings); the layers
// with no K/V heads are Mamba's.
absl::Status GraniteGguf(const GgufFile& f, const std::string& a, LlamaConfig* c) {
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(f.name(), ": ", a, m...)); };
  for (auto [key, out, dflt] : {std::tuple{"embedding_scale", &c->embedding_multiplier, 1.0},
                                std::tuple{"residual_scale", &c->residual_multiplier, 1.0},
                                std::tuple{"logit_scale", &c->logits_scaling, 1.0},
                                std::tuple{"attention.scale", &c->attention_multiplier, 0.0}}) {
    FLOVER_ASSIGN_OR_RETURN(const double v, f.GetFloatOr(a + key, dflt));
    if (!(v >= 0 && v < 1e6) || (v == 0 && dflt != 0)) return refuse(key, " ", v, " is out of range");
    *out = v;
  }
  if (auto rope = f.GetBool(a + "rope.scaling.finetuned"); rope.ok()) {
    c->no_rope = !*rope;
  } else if (!absl::IsNotFound(rope.status())) {
    return rope.status();
  }
  bool mamba = false;
  for (LlamaConfig::LayerKind& kind : c->layer_kinds) {
    if (kind == LlamaConfig::LayerKind::kShortConv) kind = LlamaConfig::LayerKind::kMamba2, mamba = true;
  }
  if (!mamba) return absl::OkStatus();
  FLOVER_ASSIGN_OR_RETURN(const GgufSsmShapes ssm, ReadGgufSsmShapes(f, a));
  c->conv_kernel = ssm.conv_kernel;
  c->mamba_state = ssm.state_size;
  c->mamba_groups = ssm.groups;
  c->mamba_heads = ssm.heads;
  c->mamba_head_dim = ssm.head_dim;
  int first = 0;
  while (c->layer_kinds[first] != LlamaConfig::LayerKind::kMamba2) ++first;
  c->mamba_conv_bias = f.FindTensor(absl::StrCat("blk.", first, ".ssm_conv1d.bias")) != nullptr;
  c->decay_stored = true;
  return absl::OkStatus();
}

}  // namespace

const LlamaArchitecture& GraniteHybridArch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a;
    a.model_type = "granitemoehybrid";
    a.gguf = true;
    a.gguf_name = "granitehybrid";
    a.moe = true;
    a.experts_optional = true;
    a.gguf_moe_renormalize = true;
    a.gguf_permuted_qk = true;
    a.layer_types = true;
    a.recurrent_layer = "mamba";
    a.mamba_layers = true;
    a.parse = ParseGranite;
    a.gguf_parse = GraniteGguf;
    a.renames = {
        {".mlp.gate.weight", ".block_sparse_moe.router.layer.weight"},
        {".mlp.shared_expert.down_proj.", ".shared_mlp.output_linear."},
        {".mlp.down_proj.", ".shared_mlp.output_linear."},
    };
    a.moe_packed_gate_up = "block_sparse_moe.input_linear.weight";
    a.moe_packed_down = "block_sparse_moe.output_linear.weight";
    a.shared_fused_up = "shared_mlp.input_linear.weight";
    a.shared_expert_gated = false;
    a.gguf_layer_names = {
        {"mamba.in_proj.weight", "ssm_in.weight"},   {"mamba.conv1d.weight", "ssm_conv1d.weight"},
        {"mamba.conv1d.bias", "ssm_conv1d.bias"},    {"mamba.A_log", "ssm_a"},
        {"mamba.D", "ssm_d"},                        {"mamba.dt_bias", "ssm_dt.bias"},
        {"mamba.norm.weight", "ssm_norm.weight"},    {"mamba.out_proj.weight", "ssm_out.weight"},
    };
    return a;
  }();
  return entry;
}

}  // namespace flover
