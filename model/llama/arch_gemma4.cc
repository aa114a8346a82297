// Gemma 4, text (Gemma4ForConditionalGeneration's language model, model_type
// gemma4 with a text_config of gemma4_text, or Gemma4ForCausalLM; GGUF
// gemma4). Gemma 3's block — norms before and after attention and the MLP,
// per-head Q/K norms, GeGLU-tanh, embeddings times sqrt(hidden), local
// (sliding) and global layers from layer_types — with its norms scaling by
// w (not 1 + w), attention unscaled (the Q/K norms carry the scale), V normed
// per head without a weight, and:
//   - global layers with heads of their own size (global_head_dim) and
//     key/value heads (num_global_key_value_heads, with attention_k_eq_v:
//     no v_proj there, V is K's projection before its norm);
//   - "proportional" rotary embeddings on the global layers: only the first
//     partial_rotary_factor * global_head_dim / 2 frequencies of a full-width
//     table at their theta turn (pairs (j, j + D/2)), the others stand still;
//     the local layers turn by theirs;
//   - the last num_kv_shared_layers layers read the K and V of the last
//     earlier layer of their kind, keep none, and (use_double_wide_mlp) have
//     MLPs twice intermediate_size wide;
//   - per-layer inputs (hidden_size_per_layer_input), DecoderSpec's
//     per_layer_input;
//   - each layer's output times its layer_scalar; the final logits
//     soft-capped.
//   - the 26B-A4B mixture (enable_moe_block): in every layer, top-k of a
//     softmax over all experts, renormalised, each expert's weight times its
//     per_expert_scale, beside the dense MLP (DecoderSpec::Moe::beside_dense);
//     the experts as 3-D tensors, gate rows then up rows.
// The released checkpoints' vision and audio towers are not read.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/struct.pb.h"
#include "model/decoder/rotary.h"
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_config.h"
#include "model/loader/gguf.h"
#include "util/json.h"
#include "util/status_macros.h"

namespace flover {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

constexpr int kMaxLayersHere = 1024;

// An object field, or null when absent.
const Struct* ObjectField(const Struct& s, const char* key) {
  auto it = s.fields().find(key);
  if (it == s.fields().end() || it->second.kind_case() != Value::kStructValue) return nullptr;
  return &it->second.struct_value();
}

absl::Status ParseGemma4(const Struct& s, absl::string_view what, LlamaConfig* c) {
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(what, ": ", m...)); };
  if (JsonBoolField(s, "enable_moe_block", false)) {  // 26B-A4B: experts beside the dense MLP in every layer
    FLOVER_ASSIGN_OR_RETURN(c->experts, JsonIntField(s, "num_experts", 1, 1024, what));
    FLOVER_ASSIGN_OR_RETURN(c->experts_per_tok, JsonIntField(s, "top_k_experts", 1, c->experts, what));
    FLOVER_ASSIGN_OR_RETURN(c->expert_intermediate, JsonIntField(s, "moe_intermediate_size", 1, 1 << 20, what));
    c->norm_topk_prob = true;
  }
  if (auto it = s.fields().find("use_bidirectional_attention");
      it != s.fields().end() && it->second.kind_case() == Value::kStringValue && it->second.string_value() == "all") {
    return refuse("use_bidirectional_attention \"all\" (non-causal attention) is not supported");
  }
  FLOVER_RETURN_IF_ERROR(ParseSlidingWindow(s, what, /*absent=*/512, c));
  FLOVER_ASSIGN_OR_RETURN(const int layers, JsonIntField(s, "num_hidden_layers", 1, kMaxLayersHere, what));
  // layer_types, or every sixth layer global; the last one global always.
  auto types = s.fields().find("layer_types");
  if (types != s.fields().end() && types->second.kind_case() == Value::kListValue) {
    for (const Value& v : types->second.list_value().values()) {
      const std::string kind = v.kind_case() == Value::kStringValue ? v.string_value() : "";
      if (kind != "sliding_attention" && kind != "full_attention") {
        return refuse("layer_types holds \"", kind, "\" (Gemma 4 has sliding_attention and full_attention)");
      }
      c->sliding_layers.push_back(kind == "sliding_attention" ? 1 : 0);
    }
    if (static_cast<int>(c->sliding_layers.size()) != layers) {
      return refuse("layer_types has ", c->sliding_layers.size(), " entries for ", layers, " layers");
    }
  } else {
    for (int l = 0; l < layers; ++l) c->sliding_layers.push_back((l + 1) % 6 != 0 ? 1 : 0);
  }
  c->sliding_layers.back() = 0;
  // The global layers' heads: per_layer_config (as transformers saves it)
  // or global_head_dim and num_global_key_value_heads (as released).
  c->k_eq_v = JsonBoolField(s, "attention_k_eq_v", false);
  FLOVER_ASSIGN_OR_RETURN(c->global_head_dim, JsonIntFieldOr(s, "global_head_dim", 512, 0, 1 << 16, what));
  if (c->k_eq_v && JsonHas(s, "num_global_key_value_heads")) {
    FLOVER_ASSIGN_OR_RETURN(c->global_kv_heads, JsonIntField(s, "num_global_key_value_heads", 1, 1 << 16, what));
  }
  if (const Struct* per_layer = ObjectField(s, "per_layer_config")) {
    int dim = 0, kv = 0;
    for (const auto& [key, value] : per_layer->fields()) {
      int l = -1;
      if (!absl::SimpleAtoi(key, &l) || l < 0 || l >= layers || c->sliding_layers[l] != 0 ||
          value.kind_case() != Value::kStructValue) {
        return refuse("per_layer_config names \"", key, "\", which is not a full_attention layer");
      }
      const Struct& entry = value.struct_value();
      FLOVER_ASSIGN_OR_RETURN(const int d, JsonIntFieldOr(entry, "head_dim", 0, 0, 1 << 16, what));
      FLOVER_ASSIGN_OR_RETURN(const int h, JsonIntFieldOr(entry, "num_key_value_heads", 0, 0, 1 << 16, what));
      if ((dim > 0 && d != dim) || (kv > 0 && h != kv)) {
        return refuse("per_layer_config gives the full_attention layers different heads");
      }
      dim = d;
      kv = h;
    }
    c->global_head_dim = dim;
    c->global_kv_heads = kv;
  }
  if (JsonHas(s, "num_kv_shared_layers")) {
    FLOVER_ASSIGN_OR_RETURN(c->kv_shared_layers, JsonIntField(s, "num_kv_shared_layers", 0, layers - 1, what));
  }
  c->double_wide_mlp = JsonBoolField(s, "use_double_wide_mlp", false);
  if (JsonHas(s, "hidden_size_per_layer_input")) {
    FLOVER_ASSIGN_OR_RETURN(c->ple_dim, JsonIntField(s, "hidden_size_per_layer_input", 0, 1 << 16, what));
    if (c->ple_dim > 0) {
      FLOVER_ASSIGN_OR_RETURN(c->ple_vocab, JsonIntField(s, "vocab_size_per_layer_input", 1, 1 << 22, what));
    }
  }
  c->layer_scalars = true;
  if (auto it = s.fields().find("final_logit_softcapping");
      it != s.fields().end() && it->second.kind_case() != Value::kNullValue) {
    FLOVER_ASSIGN_OR_RETURN(const double cap, JsonNumberField(s, "final_logit_softcapping", 0, what));
    if (!(cap > 0)) return refuse("final_logit_softcapping must be > 0 or null");
    c->final_logit_softcapping = static_cast<float>(cap);
  }
  // rope_parameters by layer type: the local layers' default rope, the
  // global ones' proportional (or default) rope.
  c->rope_local_base = 10000.0;
  c->global_rope_theta = 1000000.0;
  double factor = 0.25;
  if (const Struct* rope = ObjectField(s, "rope_parameters")) {
    for (const char* kind : {"sliding_attention", "full_attention"}) {
      const Struct* p = ObjectField(*rope, kind);
      if (p == nullptr) return refuse("rope_parameters has no ", kind, " object");
      auto type = p->fields().find("rope_type");
      const std::string t = type == p->fields().end() ? "default" : type->second.string_value();
      const bool full = std::string(kind) == "full_attention";
      if (t != "default" && !(full && t == "proportional")) {
        return refuse("rope_parameters.", kind, ".rope_type \"", t, "\" is not supported");
      }
      FLOVER_ASSIGN_OR_RETURN(const double theta, JsonNumberField(*p, "rope_theta", full ? 1e6 : 1e4, what));
      if (!(theta > 1)) return refuse("rope_parameters.", kind, ".rope_theta must be > 1");
      (full ? c->global_rope_theta : c->rope_local_base) = theta;
      if (full) {
        FLOVER_ASSIGN_OR_RETURN(factor, JsonNumberField(*p, "partial_rotary_factor", t == "default" ? 1.0 : 0.25, what));
        if (!(factor > 0 && factor <= 1)) return refuse("partial_rotary_factor must be in (0, 1]");
      }
      if (JsonHas(*p, "factor")) {
        FLOVER_ASSIGN_OR_RETURN(const double f, JsonNumberField(*p, "factor", 1, what));
        if (f != 1) return refuse("rope_parameters.", kind, ".factor ", f, " is not supported");
      }
    }
  }
  // As transformers: int(factor * D // 2) of the D / 2 frequencies.
  c->global_rope_angles = static_cast<int>(std::floor(factor * c->global_head_dim / 2));
  return absl::OkStatus();
}

// llama.cpp's gemma4 files: per-layer MLP widths and key/value heads,
// key_length the global layers' head and key_length_swa the local ones',
// sliding_window_pattern (true: sliding), shared_kv_layers, the per-layer
// input's width, rope_freqs marking the global layers' turning pairs (1;
// the others 1e30), no v_proj on the global layers where V is K.
absl::Status Gemma4Gguf(const GgufFile& f, const std::string& a, LlamaConfig* c) {
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(f.name(), ": ", a, m...)); };
  FLOVER_ASSIGN_OR_RETURN(const double cap, f.GetFloatOr(a + "final_logit_softcapping", 0));
  c->final_logit_softcapping = static_cast<float>(cap);
  FLOVER_ASSIGN_OR_RETURN(const int64_t window, f.GetIntOr(a + "attention.sliding_window", 512));
  if (window < 1 || window > (int64_t{1} << 24)) return refuse("attention.sliding_window ", window, " is out of range");
  c->sliding_window = static_cast<int>(window);
  const GgufValue* pattern = f.Find(a + "attention.sliding_window_pattern");
  if (pattern == nullptr || pattern->array_size() != c->n_layer || pattern->integers.size() != size_t(c->n_layer)) {
    return refuse("attention.sliding_window_pattern needs one mark per layer");
  }
  c->sliding_layers.clear();
  for (int64_t v : pattern->integers) c->sliding_layers.push_back(v != 0 ? 1 : 0);
  // Per layer, or one value: the first local and first global layer's.
  auto per_layer = [&](const char* key, int64_t max, std::vector<int64_t>* out) -> absl::Status {
    const GgufValue* v = f.Find(a + key);
    if (v == nullptr) return refuse(key, " is missing");
    if (v->type != GgufType::kArray) {
      out->assign(c->n_layer, v->integer);
    } else if (v->integers.size() != size_t(c->n_layer)) {
      return refuse(key, " has ", v->integers.size(), " entries for ", c->n_layer, " layers");
    } else {
      *out = v->integers;
    }
    for (int64_t x : *out) {
      if (x < 1 || x > max) return refuse(key, " holds ", x);
    }
    return absl::OkStatus();
  };
  std::vector<int64_t> ffn, kv;
  FLOVER_RETURN_IF_ERROR(per_layer("feed_forward_length", int64_t{1} << 24, &ffn));
  FLOVER_RETURN_IF_ERROR(per_layer("attention.head_count_kv", 1 << 16, &kv));
  FLOVER_ASSIGN_OR_RETURN(const int64_t shared, f.GetIntOr(a + "attention.shared_kv_layers", 0));
  if (shared < 0 || shared >= c->n_layer) return refuse("attention.shared_kv_layers ", shared, " is out of range");
  c->kv_shared_layers = static_cast<int>(shared);
  int first_local = -1, first_global = -1;
  for (int l = c->n_layer - 1; l >= 0; --l) (c->sliding_layers[l] ? first_local : first_global) = l;
  if (first_global < 0) return refuse("attention.sliding_window_pattern marks no global layer");
  c->intermediate = static_cast<int>(ffn[0]);
  c->double_wide_mlp = c->kv_shared_layers > 0 && ffn.back() == 2 * ffn[0];
  for (int l = 0; l < c->n_layer; ++l) {
    if (ffn[l] != c->intermediate_of(l)) {
      return refuse("feed_forward_length of layer ", l, " is ", ffn[l], ", not ", c->intermediate_of(l));
    }
  }
  c->n_kv_head = static_cast<int>(first_local >= 0 ? kv[first_local] : kv[first_global]);
  c->global_kv_heads = static_cast<int>(kv[first_global]);
  for (int l = 0; l < c->n_layer; ++l) {
    if (kv[l] != c->kv_heads_of(l)) return refuse("attention.head_count_kv of layer ", l, " differs from its kind's");
  }
  // The family read key_length (the global layers') as head_dim.
  c->global_head_dim = c->head_dim;
  FLOVER_ASSIGN_OR_RETURN(const int64_t local_dim, f.GetIntOr(a + "attention.key_length_swa", c->head_dim));
  if (local_dim < 2 || local_dim > 1024 || local_dim % 2 != 0) return refuse("attention.key_length_swa ", local_dim);
  c->head_dim = static_cast<int>(local_dim);
  c->rotary_dim = 0;
  c->global_rope_theta = c->rope_theta;
  FLOVER_ASSIGN_OR_RETURN(c->rope_local_base, f.GetFloatOr(a + "rope.freq_base_swa", 10000.0));
  // rope_freqs: 1 for the global layers' turning pairs, first; 1e30 after.
  c->global_rope_angles = c->global_head_dim / 2;
  if (!c->rope_freq_factors.empty()) {
    int turning = 0;
    while (turning < static_cast<int>(c->rope_freq_factors.size()) && c->rope_freq_factors[turning] == 1.0f) ++turning;
    for (size_t j = turning; j < c->rope_freq_factors.size(); ++j) {
      if (!(c->rope_freq_factors[j] >= 1e29f)) {
        return refuse("rope_freqs.weight is not ones then 1e30 (Gemma 4's proportional rope)");
      }
    }
    c->global_rope_angles = turning;
    c->rope_freq_factors.clear();
  }
  FLOVER_ASSIGN_OR_RETURN(const int64_t ple, f.GetIntOr(a + "embedding_length_per_layer_input", 0));
  if (ple < 0 || ple > (1 << 16)) return refuse("embedding_length_per_layer_input ", ple, " is out of range");
  c->ple_dim = static_cast<int>(ple);
  if (ple > 0) {
    const GgufTensor* table = f.FindTensor("per_layer_token_embd.weight");
    if (table == nullptr || table->ne.size() != 2 || table->ne[0] != ple * c->n_layer) {
      return refuse("per_layer_token_embd.weight must be [rows, ", ple * c->n_layer, "]");
    }
    c->ple_vocab = static_cast<int>(table->ne[1]);
  }
  c->k_eq_v = f.FindTensor(absl::StrCat("blk.", first_global, ".attn_v.weight")) == nullptr;
  c->layer_scalars = true;
  return absl::OkStatus();
}

void Gemma4Spec(const LlamaConfig& c, DecoderSpec* s) {
  GemmaBlock(c, s);
  s->v_norm = true;
  s->layer_scale = c.layer_scalars;
  s->per_layer_input = c.ple_dim;
  s->moe.beside_dense = c.experts > 0;
  // The global layers: a full-width table at their theta, the frequencies
  // past global_rope_angles zero; the local ones their own.
  const int Dg = c.global_head_dim > 0 ? c.global_head_dim : c.head_dim;
  s->inv_freq = RotaryInvFreq(static_cast<float>(c.global_rope_theta), Dg);
  for (size_t j = c.global_rope_angles; j < s->inv_freq.size(); ++j) s->inv_freq[j] = 0.0f;
  s->inv_freq_local = RotaryInvFreq(static_cast<float>(c.rope_local_base), c.head_dim);
  s->local_rope.assign(c.n_layer, false);
  for (int l = 0; l < c.n_layer; ++l) {
    s->local_rope[l] = !c.global_layer(l);
    kernels::AttentionParams& a = s->attention[l];
    a.scale = 1.0f;
    a.softcap = 0.0f;
    a.window = c.global_layer(l) ? 0 : c.sliding_window;
  }
}

// Gemma 4's per-layer parameters beyond the family's.
void Gemma4LayerRecipes(const LlamaConfig& c, int l, const DecoderShard& sh, DecoderLayerWeights& L,
                        const DecoderRecipes::Visit& visit) {
  const std::string p = absl::StrCat("model.layers.", l, ".");
  const int64_t C = c.hidden, P = c.ple_dim, N = c.n_layer;
  if (c.layer_scalars) visit(Whole(p + "layer_scalar", {1}), &L.layer_scale);
  if (c.sparse(l)) {  // the dense MLP beside the experts (the family's recipes read those), and the norms
    const int64_t F = c.intermediate, f0 = sh.tp_rank * (F / sh.tp_size), f1 = f0 + F / sh.tp_size;
    visit(Stack(WeightRecipe::kRows, {RowSlice(p + "mlp.gate_proj.weight", {F, C}, f0, f1),
                                      RowSlice(p + "mlp.up_proj.weight", {F, C}, f0, f1)}),
          &L.up);
    visit(ColSlice(p + "mlp.down_proj.weight", {C, F}, f0, f1), &L.down);
    visit(Whole(p + "router.scale", {C}), &L.moe_router_norm);
    visit(Whole(p + "router.per_expert_scale", {c.experts}), &L.moe_expert_scale);
    visit(Whole(p + "pre_feedforward_layernorm_2.weight", {C}), &L.moe_pre_norm);
    visit(Whole(p + "post_feedforward_layernorm_1.weight", {C}), &L.moe_dense_norm);
    visit(Whole(p + "post_feedforward_layernorm_2.weight", {C}), &L.moe_experts_norm);
  }
  if (P == 0) return;
  visit(RowSlice("model.per_layer_model_projection.weight", {N * P, C}, l * P, (l + 1) * P), &L.ple_model_proj);
  visit(Whole("model.per_layer_projection_norm.weight", {P}), &L.ple_proj_norm);
  visit(Whole(p + "per_layer_input_gate.weight", {P, C}), &L.ple_gate);
  visit(Whole(p + "per_layer_projection.weight", {C, P}), &L.ple_proj);
  visit(Whole(p + "post_per_layer_input_norm.weight", {C}), &L.ple_post_norm);
}

}  // namespace

const LlamaArchitecture& Gemma4Arch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a = GemmaArchitecture("gemma4_text");
    a.image_text = {{"gemma4"}};
    a.plain_norms = true;
    a.qk_norm = true;
    a.gguf = true;
    a.gguf_name = "gemma4";
    a.gguf_layer_arrays = true;
    a.rope_by_layer_type = true;
    a.gguf_parse = Gemma4Gguf;
    a.parse = ParseGemma4;
    a.spec = Gemma4Spec;
    a.layer_recipes = Gemma4LayerRecipes;
    a.experts_optional = true;
    a.gguf_moe_renormalize = true;
    a.moe_router = "router.proj";
    a.moe_experts = "experts";
    a.moe_packed_gate_up = "experts.gate_up_proj";
    a.moe_packed_down = "experts.down_proj";
    a.gguf_fused_gate_up = true;
    a.gguf_layer_names = {{"router.proj.weight", "ffn_gate_inp.weight"},
                          {"router.scale", "ffn_gate_inp.scale"},
                          {"router.per_expert_scale", "ffn_down_exps.scale"},
                          {"pre_feedforward_layernorm_2.weight", "pre_ffw_norm_2.weight"},
                          {"post_feedforward_layernorm_1.weight", "post_ffw_norm_1.weight"},
                          {"post_feedforward_layernorm_2.weight", "post_ffw_norm_2.weight"},
                          {"per_layer_input_gate.weight", "inp_gate.weight"},
                          {"per_layer_projection.weight", "proj.weight"},
                          {"post_per_layer_input_norm.weight", "post_norm.weight"},
                          {"layer_scalar", "layer_output_scale.weight"}};
    return a;
  }();
  return entry;
}

}  // namespace flover
