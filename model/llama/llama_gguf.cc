#include "model/llama/llama_gguf.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "model/llama/llama_architecture.h"
#include "model/loader/gguf_source.h"
#include "util/status_macros.h"

namespace flover {
namespace {

// transformers' name -> llama.cpp's, for one layer's tensors (after
// "model.layers.N.") and the others.
constexpr std::pair<const char*, const char*> kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"self_attn.qkv_proj.weight", "attn_qkv.weight"},  // Phi-3's fused projections
    {"mlp.gate_up_proj.weight", "ffn_up.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},  // a mixture of experts' router
    {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},  // Qwen2-MoE's shared expert
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
};
// Gemma's norms around the attention and the MLP, whose transformers names
// mean other norms in Llama's files.
constexpr std::pair<const char*, const char*> kGemmaLayerNames[] = {
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
};
// An expert's projection (transformers' names, Qwen/OLMoE's and Mixtral's)
// -> the 3-D tensor llama.cpp merges a layer's experts into: [E, Fe, C]
// for gate and up, [E, C, Fe] for down.
constexpr std::pair<const char*, const char*> kExpertNames[] = {
    {"gate_proj", "ffn_gate_exps.weight"}, {"w1", "ffn_gate_exps.weight"},
    {"up_proj", "ffn_up_exps.weight"},     {"w3", "ffn_up_exps.weight"},
    {"down_proj", "ffn_down_exps.weight"}, {"w2", "ffn_down_exps.weight"},
};
constexpr std::pair<const char*, const char*> kGlobalNames[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    // Gemma 4's per-layer inputs.
    {"model.embed_tokens_per_layer.weight", "per_layer_token_embd.weight"},
    {"model.per_layer_model_projection.weight", "per_layer_model_proj.weight"},
    {"model.per_layer_projection_norm.weight", "per_layer_proj_norm.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};

// The GGUF name of a transformers tensor name (the architecture's own names
// first: Gemma's norms, Qwen3.5's linear attention, LFM2's convolution),
// or "" for none; for an expert's projection
// ("<mlp|block_sparse_moe>.experts.E.<proj>.weight") the merged tensor, with
// *expert = E (else -1).
std::string GgufName(absl::string_view hf, const LlamaArchitecture& arch, int* expert) {
  *expert = -1;
  const bool gemma = arch.gemma_norms;
  if (hf == "model.norm.weight" && arch.gguf_output_norm != nullptr) return arch.gguf_output_norm;
  for (const auto& [from, to] : kGlobalNames) {
    if (hf == from) return to;
  }
  constexpr absl::string_view kLayers = "model.layers.";
  if (!absl::ConsumePrefix(&hf, kLayers)) return "";
  const size_t dot = hf.find('.');
  int layer = 0;
  if (dot == absl::string_view::npos || !absl::SimpleAtoi(hf.substr(0, dot), &layer)) return "";
  absl::string_view rest = hf.substr(dot + 1);
  for (const auto& [from, to] : arch.gguf_layer_names) {
    if (rest == from) return absl::StrCat("blk.", layer, ".", to);
  }
  for (const auto& [from, to] : kGemmaLayerNames) {
    if (gemma && rest == from) return absl::StrCat("blk.", layer, ".", to);
  }
  for (const auto& [from, to] : kLayerNames) {
    if (rest == from) return absl::StrCat("blk.", layer, ".", to);
  }
  if (!(absl::ConsumePrefix(&rest, "mlp.experts.") || absl::ConsumePrefix(&rest, "block_sparse_moe.experts.") ||
        absl::ConsumePrefix(&rest, absl::StrCat(arch.moe_experts, "."))) ||
      !absl::ConsumeSuffix(&rest, ".weight")) {
    return "";
  }
  const size_t sep = rest.find('.');
  int e = 0;
  if (sep == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, sep), &e) || e < 0) return "";
  const absl::string_view proj = rest.substr(sep + 1);
  if (arch.gguf_fused_gate_up && (proj == "gate_proj" || proj == "up_proj")) {
    *expert = e;
    return absl::StrCat("blk.", layer, ".ffn_gate_up_exps.weight");
  }
  for (const auto& [from, to] : kExpertNames) {
    if (rest.substr(sep + 1) == from) {
      *expert = e;
      return absl::StrCat("blk.", layer, ".", to);
    }
  }
  return "";
}

}  // namespace

std::unique_ptr<WeightSource> GgufLlamaSource(std::shared_ptr<const GgufFile> file,
                                              const LlamaConfig& config) {
  GgufNaming naming;
  const LlamaArchitecture* arch = &config.arch();
  naming.name = [arch](absl::string_view hf, int* expert) { return GgufName(hf, *arch, expert); };
  if (arch->gguf_fused_gate_up) {  // gate's rows, then up's
    naming.half = [](absl::string_view hf) {
      return absl::EndsWith(hf, ".gate_proj.weight") ? 0 : absl::EndsWith(hf, ".up_proj.weight") ? 1 : -1;
    };
  }
  // A recurrent layer's convolution: [channels, K] in llama.cpp's files,
  // [channels, 1, K] in transformers'.
  naming.middle_one = {"ssm_conv1d.weight", "shortconv.conv.weight"};
  // Mamba-2's A and D ([1, H] there), its norm ([G, D / G]): vectors.
  naming.flat = {"ssm_a", "ssm_d", "ssm_norm.weight"};
  // Qwen2-MoE's shared expert gate: [C] in llama.cpp's files, [1, C] in transformers'.
  naming.one_row = {"ffn_gate_inp_shexp.weight"};
  // llama.cpp's converter permutes Q by query heads and K by key/value
  // heads for its llama architecture; its qwen2 keeps transformers' rows.
  if (config.arch().gguf_permuted_qk) {
    for (int l = 0; l < config.n_layer; ++l) {
      for (const char* kind : {"weight", "bias"}) {
        naming.permuted_heads[absl::StrCat("blk.", l, ".attn_q.", kind)] = config.n_head;
        naming.permuted_heads[absl::StrCat("blk.", l, ".attn_k.", kind)] = config.n_kv_head;
      }
    }
  }
  return GgufWeightSource(std::move(file), std::move(naming));
}

absl::StatusOr<LlamaConfig> LlamaConfigFromGguf(const GgufFile& f) {
  auto refuse = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(f.name(), ": ", parts...));
  };
  auto arch = f.GetString("general.architecture");
  if (!arch.ok()) return arch.status();
  const std::string a = *arch + ".";
  int experts = 0;
  if (auto n = f.GetInt(a + "expert_count"); n.ok()) {
    if (*n < 0 || *n > kernels::kMaxExperts) return refuse(a, "expert_count ", *n, " is out of range");
    experts = static_cast<int>(*n);
  } else if (!absl::IsNotFound(n.status())) {
    return n.status();
  }
  const LlamaArchitecture* family = FindGgufArchitecture(*arch, experts > 0);
  if (family == nullptr) {
    std::vector<std::string> read;
    for (const LlamaArchitecture* e : LlamaArchitectures()) {
      if (!e->gguf) continue;
      const std::string name = e->gguf_name != nullptr ? e->gguf_name : e->model_type;
      if (std::find(read.begin(), read.end(), name) == read.end()) read.push_back(name);
    }
    if (FindGgufArchitecture(*arch, experts == 0) != nullptr) {
      return refuse("general.architecture \"", *arch, "\" ", experts > 0 ? "with" : "without",
                    " experts is not supported");
    }
    return refuse("general.architecture \"", *arch, "\" is not supported (Flover reads ", absl::StrJoin(read, ", "), ")");
  }
  LlamaConfig c;
  c.architecture = family->model_type;
  // Biases on q, k and v (Qwen2's, always; a llama file's where it has them);
  // none on the attention's output projection.
  c.qkv_bias = f.FindTensor("blk.0.attn_q.bias") != nullptr;
  c.o_bias = f.FindTensor("blk.0.attn_output.bias") != nullptr;
  if (f.FindTensor("blk.0.attn_output.bias") != nullptr && !family->attention_bias) {
    return refuse("attn_output.bias: a bias on the attention's output is not supported");
  }
  auto get_int = [&](const std::string& key, int* out, bool required, int64_t max) -> absl::Status {
    auto v = f.GetInt(a + key);
    if (absl::IsNotFound(v.status()) && !required) return absl::OkStatus();
    if (!v.ok()) return v.status();
    if (*v < 1 || *v > max) return refuse(a, key, " ", *v, " is out of range");
    *out = static_cast<int>(*v);
    return absl::OkStatus();
  };
  for (auto [key, out] : {std::pair{"block_count", &c.n_layer},
                          std::pair{"embedding_length", &c.hidden},
                          std::pair{"feed_forward_length", &c.intermediate},
                          std::pair{"attention.head_count", &c.n_head},
                          std::pair{"context_length", &c.max_positions}}) {
    // A mixture with no dense layer may leave out the dense MLP's width
    // (qwen35moe): the experts' below.
    const bool required = !(experts > 0 && out == &c.intermediate);
    if (const GgufValue* v = f.Find(a + key);
        v != nullptr && v->type == GgufType::kArray && family->gguf_layer_arrays && !v->integers.empty()) {
      *out = static_cast<int>(std::clamp<int64_t>(v->integers[0], 0, int64_t{1} << 24));  // gguf_parse reads them all
      continue;
    }
    if (auto st = get_int(key, out, required, int64_t{1} << 24); !st.ok()) {
      if (const GgufValue* v = f.Find(a + key); v != nullptr && v->type == GgufType::kArray) {
        return refuse(a, key, " differs per layer, which Flover does not run");
      }
      return st;
    }
  }
  // Multi-token-prediction layers (Qwen3.5's MTP, llama.cpp's nextn): the
  // last nextn_predict_layers of block_count's blocks, not the model's.
  if (auto nextn = f.GetInt(a + "nextn_predict_layers"); nextn.ok()) {
    if (*nextn < 0 || *nextn >= c.n_layer) {
      return refuse(a, "nextn_predict_layers ", *nextn, " is out of range (block_count ", c.n_layer, ")");
    }
    c.mtp_layers = static_cast<int>(*nextn);
    c.n_layer -= c.mtp_layers;
  } else if (!absl::IsNotFound(nextn.status())) {
    return nextn.status();
  }
  c.n_kv_head = c.n_head;
  if (const GgufValue* kv = f.Find(a + "attention.head_count_kv");
      kv != nullptr && kv->type == GgufType::kArray && family->gguf_layer_arrays) {
    // Per layer (Gemma 4's global layers): the architecture's gguf_parse reads them.
    c.n_kv_head = kv->integers.empty() ? 0 : static_cast<int>(std::clamp<int64_t>(kv->integers[0], 0, 1 << 17));
  } else if (const GgufValue* kv = f.Find(a + "attention.head_count_kv"); kv != nullptr && kv->type == GgufType::kArray) {
    // Per layer (LFM2): 0 for a layer that keeps no K and V (a short
    // convolution), the attention layers' count for the others.
    FLOVER_ASSIGN_OR_RETURN(const std::vector<int64_t>* counts, f.GetInts(a + "attention.head_count_kv"));
    if (!family->layer_types || static_cast<int>(counts->size()) != c.n_layer) {
      return refuse(a, "attention.head_count_kv differs per layer, which Flover runs only for hybrid models "
                       "(one count per layer, 0 for a recurrent layer)");
    }
    c.n_kv_head = 0;
    for (int64_t n : *counts) {
      if (n < 0 || n > (1 << 17) || (n > 0 && c.n_kv_head > 0 && n != c.n_kv_head)) {
        return refuse(a, "attention.head_count_kv holds ", n, " (the attention layers' counts must be equal)");
      }
      c.layer_kinds.push_back(n == 0 ? LlamaConfig::LayerKind::kShortConv : LlamaConfig::LayerKind::kAttention);
      if (n > 0) c.n_kv_head = static_cast<int>(n);
    }
  } else if (auto st = get_int("attention.head_count_kv", &c.n_kv_head, false, 1 << 17); !st.ok()) {
    return st;
  }
  c.head_dim = c.n_head > 0 && c.hidden % c.n_head == 0 ? c.hidden / c.n_head : 0;
  if (auto st = get_int("attention.key_length", &c.head_dim, false, 1024); !st.ok()) return st;
  int value_length = c.head_dim;
  if (auto st = get_int("attention.value_length", &value_length, false, 1024); !st.ok()) return st;
  if (value_length != c.head_dim) {
    return refuse(a, "attention.value_length ", value_length, " differs from key_length ", c.head_dim);
  }
  int rotary = c.head_dim;
  if (auto st = get_int("rope.dimension_count", &rotary, false, 1024); !st.ok()) return st;
  if (rotary != c.head_dim) {
    // Partial rotary (Phi-4-mini) turns the first dims as halves; where the
    // converter permuted Q and K for llama.cpp's pairs, it would not be so.
    if (family->gguf_permuted_qk || rotary < 2 || rotary % 2 != 0 || rotary > c.head_dim) {
      return refuse(a, "rope.dimension_count ", rotary, " for a head dimension of ", c.head_dim,
                    " (partial rotary embeddings only unpermuted, even and at most the head)");
    }
    c.rotary_dim = rotary;
  }
  if (experts > 0) {  // a mixture of experts: a layer without a router is dense
    c.experts = experts;
    c.expert_intermediate = c.intermediate;
    if (auto st = get_int("expert_used_count", &c.experts_per_tok, true, experts); !st.ok()) return st;
    if (auto st = get_int("expert_feed_forward_length", &c.expert_intermediate, false, int64_t{1} << 24); !st.ok()) {
      return st;
    }
    c.norm_topk_prob = family->gguf_moe_renormalize;
    if (c.intermediate == 0) c.intermediate = c.expert_intermediate;
    if (auto st = get_int("expert_shared_feed_forward_length", &c.shared_expert_intermediate, false,
                          int64_t{1} << 24);
        !st.ok()) {
      return st;
    }
    for (int l = 0; l < c.n_layer; ++l) {
      if (f.FindTensor(absl::StrCat("blk.", l, ".ffn_gate_inp.weight")) == nullptr) c.dense_layers.push_back(l);
    }
  }
  if (auto eps = f.GetFloat(a + "attention.layer_norm_rms_epsilon"); eps.ok()) {
    c.rms_norm_eps = static_cast<float>(*eps);
  } else if (!absl::IsNotFound(eps.status())) {
    return eps.status();
  }
  if (auto base = f.GetFloat(a + "rope.freq_base"); base.ok()) {
    c.rope_theta = *base;
  } else if (!absl::IsNotFound(base.status())) {
    return base.status();
  }
  // Rope scaling: rope.scaling.type (none, linear; yarn refused), or the
  // older rope.scale_linear; llama3's as factors in rope_freqs.weight.
  std::string scaling = "none";
  if (auto type = f.GetString(a + "rope.scaling.type"); type.ok()) {
    scaling = *type;
  } else if (!absl::IsNotFound(type.status())) {
    return type.status();
  }
  double factor = 1.0;
  if (auto v = f.GetFloat(a + "rope.scaling.factor"); v.ok()) factor = *v;
  if (auto v = f.GetFloat(a + "rope.scale_linear"); v.ok()) scaling = "linear", factor = *v;
  if (scaling == "linear" && factor != 1.0) {
    if (!(factor >= 1.0)) return refuse(a, "rope.scaling.factor must be >= 1, got ", factor);
    c.rope_scaling.type = RopeScaling::Type::kLinear;
    c.rope_scaling.factor = factor;
  } else if (scaling == "yarn") {
    // As llama.cpp: rope.scaling.original_context_length, the betas 32 and 1
    // unless rope.scaling.yarn_beta_*, the ramp's ends floored and ceiled,
    // cos and sin times 0.1 ln(factor) + 1 (times rope.scaling.attn_factor).
    RopeScaling& r = c.rope_scaling;
    if (!(factor >= 1.0)) return refuse(a, "rope.scaling.factor must be >= 1, got ", factor);
    r.type = RopeScaling::Type::kYarn;
    r.factor = factor;
    FLOVER_ASSIGN_OR_RETURN(const int64_t original, f.GetIntOr(a + "rope.scaling.original_context_length", 0));
    if (original < 1 || original > (int64_t{1} << 24)) {
      return refuse(a, "rope.scaling.original_context_length ", original, " is out of range (yarn needs it)");
    }
    r.original_max_positions = static_cast<int>(original);
    FLOVER_ASSIGN_OR_RETURN(r.beta_fast, f.GetFloatOr(a + "rope.scaling.yarn_beta_fast", 32.0));
    FLOVER_ASSIGN_OR_RETURN(r.beta_slow, f.GetFloatOr(a + "rope.scaling.yarn_beta_slow", 1.0));
    FLOVER_ASSIGN_OR_RETURN(const double attn, f.GetFloatOr(a + "rope.scaling.attn_factor", 1.0));
    if (!(r.beta_fast > 0 && r.beta_slow > 0 && attn > 0)) {
      return refuse(a, "rope.scaling's yarn betas and attn_factor must be > 0");
    }
    r.truncate = true;
    r.attention_factor = attn * YarnAttentionFactor(factor);
  } else if (scaling != "none" && scaling != "linear") {
    return refuse(a, "rope.scaling.type \"", scaling, "\" is not supported (none, linear, yarn)");
  }
  if (const GgufTensor* freqs = f.FindTensor("rope_freqs.weight")) {
    if (freqs->ne != std::vector<int64_t>{c.rotary() / 2}) {
      return refuse("rope_freqs.weight has ", freqs->ne[0], " factors for ", c.rotary(), " rotary dims");
    }
    auto values = f.ReadRows(*freqs, 0, 1);
    if (!values.ok()) return values.status();
    c.rope_freq_factors = std::move(*values);
  }
  if (family->gguf_parse != nullptr) FLOVER_RETURN_IF_ERROR(family->gguf_parse(f, a, &c));
  if (c.rope_scaling.type != RopeScaling::Type::kLongRope &&
      (f.FindTensor("rope_factors_short.weight") != nullptr || f.FindTensor("rope_factors_long.weight") != nullptr)) {
    return refuse("rope_factors_short/long (LongRoPE) are read only for phi3, not ", c.architecture);
  }
  const GgufTensor* embed = f.FindTensor("token_embd.weight");
  if (embed == nullptr) return refuse("no tensor 'token_embd.weight'");
  if (embed->ne.size() != 2) return refuse("token_embd.weight is not a matrix");
  c.vocab_size = static_cast<int>(std::min<int64_t>(embed->ne[1], INT32_MAX));
  c.tie_word_embeddings = f.FindTensor("output.weight") == nullptr;
  if (auto st = c.Validate(); !st.ok()) return refuse(st.message());
  return c;
}

}  // namespace flover
