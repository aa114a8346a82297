// Qwen3.5 (Qwen3_5ForCausalLM, model_type qwen3_5_text; the released image-
// text checkpoints, qwen3_5, are read for their language model): a hybrid
// of gated delta net layers (linear_attention) and attention layers
// (full_attention), three to one, as layer_types says. Its attention is
// Qwen3's (per-head Q/K norms, grouped-query) with an output gate: q_proj
// holds each head's Q rows then its gate's, and the output is times
// sigmoid(gate) before o_proj; rotary embeddings turn the first
// partial_rotary_factor of each head (its interleaved multimodal sections
// reduce to plain rotary for text, whose three positions are equal). Every
// norm but the delta net's own scales by (1 + w). GGUF (llama.cpp's qwen35):
// norms stored as 1 + w, A as -exp(A_log), the value heads tiled over the
// key heads.
#include "absl/strings/str_cat.h"
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_config.h"
#include "model/loader/gguf.h"
#include "util/json.h"
#include "util/status_macros.h"

namespace flover {

absl::Status ParseQwen3_5Linear(const google::protobuf::Struct& s, absl::string_view what, LlamaConfig* c) {
  for (auto [key, out] : {std::pair{"linear_conv_kernel_dim", &c->conv_kernel},
                          std::pair{"linear_key_head_dim", &c->linear_k_dim},
                          std::pair{"linear_value_head_dim", &c->linear_v_dim},
                          std::pair{"linear_num_key_heads", &c->linear_k_heads},
                          std::pair{"linear_num_value_heads", &c->linear_v_heads}}) {
    auto v = JsonIntField(s, key, 1, 1 << 16, what);
    if (!v.ok()) return v.status();
    *out = *v;
  }
  if (JsonBoolField(s, "use_sliding_window", false)) return SlidingWindowRefused(what, c->architecture);
  // The multi-token-prediction layer (mtp.*, beside the text model), read
  // by --speculative=mtp alone; the released checkpoints have one.
  if (JsonHas(s, "mtp_num_hidden_layers")) {
    auto mtp = JsonIntField(s, "mtp_num_hidden_layers", 0, 1, what);
    if (!mtp.ok()) return mtp.status();
    c->mtp_layers = *mtp;
  }
  if (c->mtp_layers > 0 && JsonBoolField(s, "mtp_use_dedicated_embeddings", false)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": mtp_use_dedicated_embeddings true (an embedding table of the MTP layer's own) is not read"));
  }
  return absl::OkStatus();
}

// llama.cpp's qwen35 keys: the delta net's shapes under ssm.*, and which
// layers are recurrent (every full_attention_interval-th is attention).
absl::Status Qwen3_5LinearGguf(const GgufFile& f, const std::string& a, LlamaConfig* c) {
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(f.name(), ": ", a, m...)); };
  FLOVER_ASSIGN_OR_RETURN(const GgufSsmShapes ssm, ReadGgufSsmShapes(f, a));
  c->conv_kernel = ssm.conv_kernel;
  c->linear_k_dim = ssm.state_size;
  c->linear_k_heads = ssm.groups;
  c->linear_v_heads = ssm.heads;
  c->linear_v_dim = ssm.head_dim;
  FLOVER_ASSIGN_OR_RETURN(const int64_t interval, f.GetIntOr(a + "full_attention_interval", 4));
  if (interval < 1 || interval > c->n_layer) return refuse("full_attention_interval ", interval, " is out of range");
  c->layer_kinds.clear();
  for (int l = 0; l < c->n_layer; ++l) {
    c->layer_kinds.push_back((l + 1) % interval == 0 ? LlamaConfig::LayerKind::kAttention
                                                     : LlamaConfig::LayerKind::kLinearAttention);
  }
  c->norms_stored_plus_one = true;
  c->decay_stored = true;
  return absl::OkStatus();
}

absl::Status Qwen3_5TiledGguf(const GgufFile& f, const std::string& prefix, LlamaConfig* c) {
  FLOVER_RETURN_IF_ERROR(Qwen3_5LinearGguf(f, prefix, c));
  // Its multimodal rotary: the same as plain rotary for text (every section
  // at the token's position), what images on a grid need.
  FLOVER_RETURN_IF_ERROR(GgufMropeSections(f, prefix, c));
  c->linear_tiled = true;  // llama.cpp's converter tiles the value heads over the key heads
  return absl::OkStatus();
}

void Qwen3_5Entry(LlamaArchitecture* a) {
  a->gguf = true;
  a->default_head_dim = 256;
  a->qk_norm = true;
  a->zero_centered_norms = true;
  a->attn_output_gate = true;
  a->layer_types = true;
  a->recurrent_layer = "linear_attention";
  a->gguf_layer_names = {
      {"post_attention_layernorm.weight", "post_attention_norm.weight"},
      {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight"},
      {"linear_attn.in_proj_z.weight", "attn_gate.weight"},
      {"linear_attn.in_proj_b.weight", "ssm_beta.weight"},
      {"linear_attn.in_proj_a.weight", "ssm_alpha.weight"},
      {"linear_attn.in_proj_ba.weight", "ssm_ba.weight"},
      {"linear_attn.conv1d.weight", "ssm_conv1d.weight"},
      {"linear_attn.A_log", "ssm_a"},
      {"linear_attn.dt_bias", "ssm_dt.bias"},
      {"linear_attn.norm.weight", "ssm_norm.weight"},
      {"linear_attn.out_proj.weight", "ssm_out.weight"},
      // The multi-token-prediction layer's own (block n_layer; the recipes
      // use these names: LlamaMtpRecipes).
      {"nextn.eh_proj.weight", "nextn.eh_proj.weight"},
      {"nextn.enorm.weight", "nextn.enorm.weight"},
      {"nextn.hnorm.weight", "nextn.hnorm.weight"},
      {"nextn.shared_head_norm.weight", "nextn.shared_head_norm.weight"},
  };
  a->builtin = [](LlamaConfig* c) {
    c->partial_rotary_factor = 0.25;
    c->rotary_dim = c->head_dim / 4;
  };
}

const LlamaArchitecture& Qwen3_5Arch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a;
    a.model_type = "qwen3_5_text";
    a.image_text = {{"qwen3_5"}};
    a.gguf_name = "qwen35";
    Qwen3_5Entry(&a);
    a.parse = ParseQwen3_5Linear;
    a.gguf_parse = Qwen3_5TiledGguf;
    return a;
  }();
  return entry;
}

}  // namespace flover
