#include "model/llama/llama_config.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/decoder/rotary.h"
#include "model/llama/llama_architecture.h"
#include "util/json.h"
#include "util/status_macros.h"

namespace flover {
namespace {

// Generous bounds that keep every size computed from a config in range.
constexpr int64_t kMaxDim = 1 << 17;
constexpr int64_t kMaxVocab = 1 << 22;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxPositions = 1 << 20;

using google::protobuf::Struct;
using google::protobuf::Value;

}  // namespace

absl::Status ParseRopeScaling(const Struct& s, absl::string_view what, RopeScaling* out) {
  auto it = s.fields().find("rope_scaling");
  if (it == s.fields().end() || it->second.kind_case() == Value::kNullValue) return absl::OkStatus();
  if (it->second.kind_case() != Value::kStructValue) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": rope_scaling must be an object"));
  }
  const Struct& r = it->second.struct_value();
  std::string type;
  for (const char* key : {"rope_type", "type"}) {
    auto t = r.fields().find(key);
    if (t != r.fields().end() && t->second.kind_case() == Value::kStringValue) {
      type = t->second.string_value();
      break;
    }
  }
  auto factor = JsonNumberField(r, "factor", 1.0, what);
  if (!factor.ok()) return factor.status();
  if (!(*factor >= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": rope_scaling factor must be >= 1"));
  }
  out->factor = *factor;
  if (type == "default") return absl::OkStatus();
  if (type == "linear") {
    out->type = RopeScaling::Type::kLinear;
    return absl::OkStatus();
  }
  if (type == "llama3") {
    out->type = RopeScaling::Type::kLlama3;
    auto low = JsonNumberField(r, "low_freq_factor", 1.0, what);
    auto high = JsonNumberField(r, "high_freq_factor", 4.0, what);
    if (!low.ok()) return low.status();
    if (!high.ok()) return high.status();
    out->low_freq_factor = *low;
    out->high_freq_factor = *high;
    auto original = JsonIntField(r, "original_max_position_embeddings", 1, kMaxPositions, what);
    if (!original.ok()) return original.status();
    out->original_max_positions = *original;
    if (!(out->low_freq_factor > 0 && out->high_freq_factor > out->low_freq_factor)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": rope_scaling needs 0 < low_freq_factor < high_freq_factor"));
    }
    return absl::OkStatus();
  }
  if (type == "longrope" || type == "su") {
    out->type = RopeScaling::Type::kLongRope;
    for (auto [key, list] : {std::pair{"short_factor", &out->short_factor}, {"long_factor", &out->long_factor}}) {
      auto f = r.fields().find(key);
      if (f == r.fields().end() || f->second.kind_case() != Value::kListValue) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": rope_scaling ", key, " must be a list of numbers"));
      }
      for (const Value& v : f->second.list_value().values()) {
        if (v.kind_case() != Value::kNumberValue || !(v.number_value() > 0 && v.number_value() < 1e30)) {
          return absl::InvalidArgumentError(absl::StrCat(what, ": rope_scaling ", key, " holds a value that is not a positive number"));
        }
        list->push_back(static_cast<float>(v.number_value()));
      }
    }
    return absl::OkStatus();
  }
  if (type == "yarn") {
    out->type = RopeScaling::Type::kYarn;
    for (const char* key : {"mscale", "mscale_all_dim"}) {
      if (JsonHas(r, key)) return absl::InvalidArgumentError(absl::StrCat(what, ": rope_scaling ", key, " is not supported"));
    }
    auto original = JsonIntField(r, "original_max_position_embeddings", 1, kMaxPositions, what);
    if (!original.ok()) return original.status();
    out->original_max_positions = static_cast<int>(*original);
    auto fast = JsonNumberField(r, "beta_fast", 32.0, what);
    auto slow = JsonNumberField(r, "beta_slow", 1.0, what);
    if (!fast.ok()) return fast.status();
    if (!slow.ok()) return slow.status();
    out->beta_fast = *fast;
    out->beta_slow = *slow;
    if (!(out->beta_fast > 0 && out->beta_slow > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": rope_scaling beta_fast and beta_slow must be > 0"));
    }
    out->truncate = JsonBoolField(r, "truncate", true);
    out->attention_factor = YarnAttentionFactor(out->factor);
    if (JsonHas(r, "attention_factor")) {
      auto af = JsonNumberField(r, "attention_factor", 1.0, what);
      if (!af.ok()) return af.status();
      if (!(*af > 0)) return absl::InvalidArgumentError(absl::StrCat(what, ": rope_scaling attention_factor must be > 0"));
      out->attention_factor = *af;
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": rope_scaling type \"", type, "\" is not supported (linear, llama3, longrope, yarn)"));
}

const std::vector<std::string>& LlamaFamilyTypes() {
  static const std::vector<std::string>* types = [] {
    auto* names = new std::vector<std::string>;
    for (const LlamaArchitecture* a : LlamaArchitectures()) {
      names->push_back(a->model_type);
      for (const LlamaArchitecture::ImageText& it : a->image_text) names->push_back(it.model_type);
    }
    return names;
  }();
  return *types;
}

absl::Status ParseSlidingWindow(const Struct& s, absl::string_view what, int absent, LlamaConfig* c) {
  auto it = s.fields().find("sliding_window");
  if (it == s.fields().end()) {
    c->sliding_window = absent;
  } else if (it->second.kind_case() != Value::kNullValue) {
    auto window = JsonIntField(s, "sliding_window", 1, kMaxPositions, what);
    if (!window.ok()) return window.status();
    c->sliding_window = static_cast<int>(*window);
  }
  return absl::OkStatus();
}

absl::Status ParseMoe(const Struct& s, absl::string_view what, const char* experts_key, const char* width_key,
                      bool renormalize, LlamaConfig* c) {
  auto experts = JsonIntField(s, experts_key, 1, 1 << 10, what);
  if (!experts.ok()) return experts.status();
  auto k = JsonIntField(s, "num_experts_per_tok", 1, *experts, what);
  if (!k.ok()) return k.status();
  auto width = JsonIntField(s, width_key, 1, 8 * kMaxDim, what);
  if (!width.ok()) return width.status();
  c->experts = static_cast<int>(*experts);
  c->experts_per_tok = static_cast<int>(*k);
  c->expert_intermediate = static_cast<int>(*width);
  c->norm_topk_prob = JsonBoolField(s, "norm_topk_prob", renormalize);
  if (JsonHas(s, "decoder_sparse_step")) {
    auto step = JsonIntField(s, "decoder_sparse_step", 1, kMaxLayers, what);
    if (!step.ok()) return step.status();
    c->sparse_step = static_cast<int>(*step);
  }
  return JsonIntListField(s, "mlp_only_layers", 0, kMaxLayers - 1, what, &c->dense_layers);
}

absl::Status ParseLayerTypes(const Struct& s, absl::string_view what, LlamaConfig* c) {
  auto it = s.fields().find("layer_types");
  if (it == s.fields().end() || it->second.kind_case() == Value::kNullValue) {
    // Older configs: LFM2's full_attn_idxs (the others convolutions), or
    // Qwen3-Next's full_attention_interval (the others linear attention).
    c->layer_kinds.clear();
    if (JsonHas(s, "full_attn_idxs")) {
      std::vector<int32_t> attention;
      FLOVER_RETURN_IF_ERROR(JsonIntListField(s, "full_attn_idxs", 0, c->n_layer - 1, what, &attention));
      c->layer_kinds.assign(c->n_layer, LlamaConfig::LayerKind::kShortConv);
      for (int32_t l : attention) c->layer_kinds[l] = LlamaConfig::LayerKind::kAttention;
    } else if (c->linear_k_heads > 0) {
      auto interval = JsonIntField(s, "full_attention_interval", 1, c->n_layer, what);
      if (JsonHas(s, "full_attention_interval") && !interval.ok()) return interval.status();
      const int every = JsonHas(s, "full_attention_interval") ? *interval : 4;
      for (int l = 0; l < c->n_layer; ++l) {
        c->layer_kinds.push_back((l + 1) % every == 0 ? LlamaConfig::LayerKind::kAttention
                                                      : LlamaConfig::LayerKind::kLinearAttention);
      }
    }
    return absl::OkStatus();
  }
  if (it->second.kind_case() != Value::kListValue) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": layer_types must be a list of strings"));
  }
  c->layer_kinds.clear();
  const LlamaArchitecture& arch = c->arch();
  for (const Value& v : it->second.list_value().values()) {
    const std::string kind = v.kind_case() == Value::kStringValue ? v.string_value() : "";
    // Granite's Mamba layers, as transformers 5 writes them.
    const bool mamba_alias = arch.mamba_layers && kind == "linear_attention";
    if (kind != "full_attention" && kind != "attention" && !mamba_alias &&
        (arch.recurrent_layer == nullptr || kind != arch.recurrent_layer)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": layer_types holds \"", kind, "\" (", c->architecture,
                                                     "'s layers are full_attention and ",
                                                     arch.recurrent_layer != nullptr ? arch.recurrent_layer : "none else",
                                                     ")"));
    }
    if (kind == "full_attention" || kind == "attention") {
      c->layer_kinds.push_back(LlamaConfig::LayerKind::kAttention);
    } else if (kind == "linear_attention") {
      c->layer_kinds.push_back(mamba_alias ? LlamaConfig::LayerKind::kMamba2
                                           : LlamaConfig::LayerKind::kLinearAttention);
    } else if (kind == "conv") {
      c->layer_kinds.push_back(LlamaConfig::LayerKind::kShortConv);
    } else if (kind == "mamba") {
      c->layer_kinds.push_back(LlamaConfig::LayerKind::kMamba2);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(what, ": layer_types holds \"", kind,
                                                     "\" (Flover runs full_attention, linear_attention, conv and mamba)"));
    }
  }
  return absl::OkStatus();
}

absl::Status SlidingWindowRefused(absl::string_view what, absl::string_view model_type) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": sliding_window attention is not supported for model_type ",
                                                 model_type, " (it is for mistral)"));
}

const LlamaArchitecture& LlamaConfig::arch() const {
  const LlamaArchitecture* a = FindLlamaArchitecture(architecture);
  return a != nullptr ? *a : LlamaArch();
}

bool IsLlamaFamily(absl::string_view model_type) {
  const auto& types = LlamaFamilyTypes();
  return std::find(types.begin(), types.end(), model_type) != types.end();
}

int LlamaConfig::kv_from(int l) const {
  const int first_shared = n_layer - kv_shared_layers;
  if (kv_shared_layers <= 0 || l < first_shared) return -1;
  for (int j = first_shared - 1; j >= 0; --j) {
    if (global_layer(j) == global_layer(l)) return j;
  }
  return -1;
}

bool LlamaConfig::sparse(int l) const {
  return experts > 0 && (l + 1) % sparse_step == 0 &&
         std::find(dense_layers.begin(), dense_layers.end(), l) == dense_layers.end();
}

namespace {

// The Q/K norms' values per layer.
int64_t QkNormValues(const LlamaConfig& c, int l) {
  if (!c.arch().qk_norm) return 0;
  return c.arch().qk_norm_whole ? c.q_dim() + c.kv_dim() : (c.kv_from(l) >= 0 ? 1 : 2) * c.head_dim_of(l);
}

// Layer l's MLP parameters: all of them, or those a token goes through.
int64_t MlpParameters(const LlamaConfig& c, int l, bool active) {
  const int64_t C = c.hidden;
  // Gemma 4's per-layer input: its gate, projection and norm.
  const int64_t ple = c.ple_dim > 0 ? 2 * C * c.ple_dim : 0;
  if (!c.sparse(l)) return 3 * C * c.intermediate_of(l) + ple;
  const int64_t shared = c.shared_expert_intermediate > 0
                             ? 3 * C * c.shared_expert_intermediate + (c.arch().shared_expert_gated ? C : 0)
                             : 0;
  return (active ? c.experts_per_tok : c.experts) * 3 * C * c.expert_intermediate + int64_t{c.experts} * C + shared;
}

// Layer l's token mixer's parameters: its matrices', and the others' (Q/K
// norms, biases, a convolution's taps, the delta net's A, dt_bias and norm).
struct MixerParameters {
  int64_t matmul = 0, other = 0;
};
MixerParameters MixerParametersOf(const LlamaConfig& c, int l) {
  const int64_t C = c.hidden;
  switch (c.layer_kind(l)) {
    case LlamaConfig::LayerKind::kAttention: {
      const int64_t Q = int64_t{c.n_head} * c.head_dim_of(l),
                    KV = c.kv_from(l) >= 0 ? 0 : int64_t{c.kv_heads_of(l)} * c.head_dim_of(l) * (c.v_is_k(l) ? 1 : 2);
      return {C * Q * (c.arch().attn_output_gate ? 2 : 1) + C * KV + Q * C,
              QkNormValues(c, l) + (c.qkv_bias ? c.q_dim() + 2 * c.kv_dim() : 0)};
    }
    case LlamaConfig::LayerKind::kLinearAttention: {
      const int64_t Vd = int64_t{c.linear_v_heads} * c.linear_v_dim,
                    channels = 2 * int64_t{c.linear_k_heads} * c.linear_k_dim + Vd;
      return {C * (channels + Vd + 2 * c.linear_v_heads) + Vd * C,
              channels * c.conv_kernel + 2 * c.linear_v_heads + c.linear_v_dim};
    }
    case LlamaConfig::LayerKind::kShortConv:
      return {4 * C * C, C * c.conv_kernel};
    case LlamaConfig::LayerKind::kMamba2: {
      // in_proj [z | x | B | C | dt], out_proj; the convolution over x, B
      // and C (and its bias), A, D, dt_bias and the norm.
      const int64_t inner = int64_t{c.mamba_heads} * c.mamba_head_dim,
                    channels = inner + 2 * int64_t{c.mamba_groups} * c.mamba_state;
      return {C * (inner + channels + c.mamba_heads) + inner * C,
              channels * (c.conv_kernel + (c.mamba_conv_bias ? 1 : 0)) + 3 * c.mamba_heads + inner};
    }
  }
  return {};
}

}  // namespace

int64_t LlamaConfig::num_parameters() const {
  const int64_t C = hidden, V = vocab_size;
  const int64_t norms = arch().norms_per_layer();
  int64_t layers = 0;
  for (int l = 0; l < n_layer; ++l) {
    const MixerParameters mixer = MixerParametersOf(*this, l);
    layers += norms * C + mixer.matmul + mixer.other + MlpParameters(*this, l, /*active=*/false);
  }
  // Gemma 4's per-layer inputs: their table, projection and norm.
  const int64_t ple = ple_dim > 0 ? int64_t{ple_vocab} * n_layer * ple_dim + C * n_layer * ple_dim + ple_dim : 0;
  return V * C * (tie_word_embeddings ? 1 : 2) + layers + C + ple;
}

absl::Status LlamaConfig::Validate() const {
  auto bad = [](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(m...)); };
  if (!IsLlamaFamily(architecture)) {
    return bad("model_type \"", architecture, "\" is not a Llama-family model (", absl::StrJoin(LlamaFamilyTypes(), ", "), ")");
  }
  if (n_layer < 1 || n_layer > kMaxLayers) return bad("num_hidden_layers out of range: ", n_layer);
  if (hidden < 1 || hidden > kMaxDim) return bad("hidden_size out of range: ", hidden);
  if (n_head < 1 || n_head > hidden) return bad("num_attention_heads out of range: ", n_head);
  if (n_kv_head < 1 || n_head % n_kv_head != 0) {
    return bad("num_attention_heads (", n_head, ") is not a multiple of num_key_value_heads (",
               n_kv_head, ")");
  }
  if (head_dim < 2 || head_dim % 2 != 0 || head_dim > 1024) {
    return bad("head_dim must be even and in [2, 1024], got ", head_dim);
  }
  if (intermediate < 1 || intermediate > 8 * kMaxDim) return bad("intermediate_size out of range");
  if (vocab_size < 1 || vocab_size > kMaxVocab) return bad("vocab_size out of range");
  if (max_positions < 2 || max_positions > kMaxPositions) return bad("max_position_embeddings out of range");
  if (!(rms_norm_eps > 0 && rms_norm_eps < 1)) return bad("rms_norm_eps must be in (0, 1)");
  if (!(rope_theta > 1)) return bad("rope_theta must be > 1");
  if (sliding_window < 0) return bad("sliding_window must be >= 0, got ", sliding_window);
  if (!sliding_layers.empty() && static_cast<int>(sliding_layers.size()) != n_layer) {
    return bad("layer_types has ", sliding_layers.size(), " entries for ", n_layer, " layers");
  }
  if (query_pre_attn_scalar < 0 || attn_logit_softcapping < 0 || final_logit_softcapping < 0) {
    return bad("query_pre_attn_scalar and soft-capping must be >= 0");
  }
  for (int32_t id : eos_token_ids) {
    if (id < 0 || id >= vocab_size) return bad("eos_token_id ", id, " is outside the vocabulary");
  }
  if (!rope_layers.empty()) {
    if (static_cast<int>(rope_layers.size()) != n_layer) {
      return bad("no_rope_layers has ", rope_layers.size(), " entries for ", n_layer, " layers");
    }
    for (int32_t v : rope_layers) {
      if (v != 0 && v != 1) return bad("no_rope_layers holds ", v, " (1: a layer with rotary embeddings, 0: without)");
    }
  }
  if (experts < 0 || experts > 1024) return bad("the number of experts is out of range: ", experts);
  if (experts > 0) {
    if (experts_per_tok < 1 || experts_per_tok > experts) {
      return bad("num_experts_per_tok (", experts_per_tok, ") must be in [1, ", experts, "], the number of experts");
    }
    if (expert_intermediate < 1 || expert_intermediate > 8 * kMaxDim) {
      return bad("the experts' intermediate size is out of range: ", expert_intermediate);
    }
    if (sparse_step < 1) return bad("decoder_sparse_step must be >= 1");
    if (shared_expert_intermediate < 0 || shared_expert_intermediate > 8 * kMaxDim) {
      return bad("shared_expert_intermediate_size is out of range: ", shared_expert_intermediate);
    }
    for (int32_t l : dense_layers) {
      if (l < 0 || l >= n_layer) return bad("mlp_only_layers names layer ", l, " of ", n_layer);
    }
  }
  if (!layer_kinds.empty()) {
    if (static_cast<int>(layer_kinds.size()) != n_layer) {
      return bad("layer_types has ", layer_kinds.size(), " entries for ", n_layer, " layers");
    }
    if (std::count(layer_kinds.begin(), layer_kinds.end(), LayerKind::kAttention) == 0) {
      return bad("layer_types has no attention layer");
    }
    const bool linear = std::count(layer_kinds.begin(), layer_kinds.end(), LayerKind::kLinearAttention) > 0;
    const bool conv = std::count(layer_kinds.begin(), layer_kinds.end(), LayerKind::kShortConv) > 0;
    const bool mamba = std::count(layer_kinds.begin(), layer_kinds.end(), LayerKind::kMamba2) > 0;
    if (linear + conv + mamba > 1) return bad("layer_types mixes recurrent kinds (linear_attention, conv, mamba)");
    if ((linear || conv || mamba) && (conv_kernel < 2 || conv_kernel > 16)) {
      return bad("the recurrent layers' convolution has ", conv_kernel, " taps (2 to 16)");
    }
    if (linear) {
      if (linear_k_heads < 1 || linear_v_heads < 1 || linear_v_heads % linear_k_heads != 0) {
        return bad("linear_num_value_heads (", linear_v_heads, ") is not a multiple of linear_num_key_heads (",
                   linear_k_heads, ")");
      }
      if (linear_k_dim < 1 || linear_k_dim > 256 || linear_v_dim < 1 || linear_v_dim > 256) {
        return bad("linear_key_head_dim (", linear_k_dim, ") and linear_value_head_dim (", linear_v_dim,
                   ") must be in [1, 256]");
      }
    }
    if (mamba) {
      if (mamba_heads < 1 || mamba_groups < 1 || mamba_heads % mamba_groups != 0) {
        return bad("mamba_n_heads (", mamba_heads, ") is not a multiple of mamba_n_groups (", mamba_groups, ")");
      }
      if (mamba_head_dim < 1 || mamba_head_dim > 256 || mamba_state < 1 || mamba_state > 256) {
        return bad("mamba_d_head (", mamba_head_dim, ") and mamba_d_state (", mamba_state, ") must be in [1, 256]");
      }
      if (!(dt_min >= 0 && dt_max > dt_min)) return bad("time_step_limit must have 0 <= min < max");
    }
  }
  if (global_head_dim < 0 || global_head_dim % 2 != 0 || global_head_dim > 1024) {
    return bad("global_head_dim must be even and in [0, 1024], got ", global_head_dim);
  }
  if (global_kv_heads < 0 || (global_kv_heads > 0 && n_head % global_kv_heads != 0)) {
    return bad("num_attention_heads (", n_head, ") is not a multiple of num_global_key_value_heads (",
               global_kv_heads, ")");
  }
  if ((global_head_dim > 0 || global_kv_heads > 0 || k_eq_v || global_rope_angles > 0) &&
      std::count(sliding_layers.begin(), sliding_layers.end(), 0) == 0) {
    return bad("global_head_dim, num_global_key_value_heads, attention_k_eq_v and proportional rope need "
               "global layers (full_attention in layer_types)");
  }
  const int global_dim = global_head_dim > 0 ? global_head_dim : head_dim;
  if (global_rope_angles < 0 || global_rope_angles > global_dim / 2) {
    return bad("the global layers turn ", global_rope_angles, " frequencies of their heads' ", global_dim / 2);
  }
  if (kv_shared_layers < 0 || kv_shared_layers >= n_layer) {
    return bad("num_kv_shared_layers (", kv_shared_layers, ") must be in [0, ", n_layer, ")");
  }
  for (int l = n_layer - kv_shared_layers; l < n_layer; ++l) {
    if (kv_from(l) < 0) {
      return bad("num_kv_shared_layers: layer ", l, " shares K and V, but no earlier layer of its kind keeps them");
    }
  }
  if (ple_dim < 0 || ple_dim > kMaxDim || (ple_dim > 0 && (ple_vocab < 1 || ple_vocab > kMaxVocab))) {
    return bad("hidden_size_per_layer_input (", ple_dim, ") and vocab_size_per_layer_input (", ple_vocab,
               ") are out of range");
  }
  if (rotary_dim < 0 || rotary_dim % 2 != 0 || rotary_dim > head_dim) {
    return bad("the rotary dims (", rotary_dim, ") must be even and at most the head's ", head_dim);
  }
  if (!rope_freq_factors.empty()) {
    if (static_cast<int>(rope_freq_factors.size()) != rotary() / 2) {
      return bad(rope_freq_factors.size(), " rope frequency factors for ", rotary(), " rotary dims");
    }
    for (float f : rope_freq_factors) {
      if (!(f > 0 && f < 1e30f)) return bad("rope frequency factor ", f, " is not a positive number");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LlamaConfig> ParseLlamaConfig(absl::string_view json, absl::string_view what) {
  auto parsed = ParseJsonObject(json, what);
  if (!parsed.ok()) return parsed.status();
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(what, ": ", m...)); };
  LlamaConfig c;
  const Struct* top = &*parsed;
  if (auto it = top->fields().find("model_type"); it != top->fields().end()) {
    c.architecture = it->second.string_value();
    if (!IsLlamaFamily(c.architecture)) {
      return refuse("model_type \"", c.architecture, "\" is not a Llama-family model (",
                    absl::StrJoin(LlamaFamilyTypes(), ", "), ")");
    }
  }
  // An image-text checkpoint of a text architecture (Qwen3.5's "qwen3_5"):
  // its text_config is the language model, read as that architecture; its
  // vision tower is not read.
  std::string text_prefix;
  bool deepstack = false;
  if (const LlamaArchitecture* text = FindLlamaTextOf(c.architecture, &text_prefix, &deepstack); text != nullptr) {
    if (deepstack) {  // one addition to the image rows after each first layer
      auto v = top->fields().find("vision_config");
      if (v == top->fields().end() || v->second.kind_case() != Value::kStructValue) {
        return refuse("model_type \"", c.architecture, "\" needs a vision_config object");
      }
      std::vector<int32_t> indexes;
      FLOVER_RETURN_IF_ERROR(JsonIntListField(v->second.struct_value(), "deepstack_visual_indexes", 0, kMaxLayers,
                                              absl::StrCat(what, ": vision_config"), &indexes));
      c.given_layers = static_cast<int>(indexes.size());
    }
    auto it = top->fields().find("text_config");
    if (it == top->fields().end() || it->second.kind_case() != Value::kStructValue) {
      return refuse("model_type \"", c.architecture, "\" needs a text_config object");
    }
    top = &it->second.struct_value();
    auto inner = top->fields().find("model_type");
    if (inner != top->fields().end() && inner->second.string_value() != text->model_type) {
      return refuse("text_config's model_type \"", inner->second.string_value(), "\" is not \"", text->model_type,
                    "\"");
    }
    c.architecture = text->model_type;
    c.text_prefix = text_prefix;
  }
  const Struct& s = *top;
  const LlamaArchitecture& arch = c.arch();
  c.qkv_bias = arch.qkv_bias;  // Qwen2's q, k and v projections always have biases
  // The MLP's activation: silu, or Gemma 2's gelu_pytorch_tanh (which
  // transformers reads from hidden_activation).
  const std::string act = arch.activation;
  for (const char* key : {"hidden_act", "hidden_activation"}) {
    auto it = s.fields().find(key);
    if (it == s.fields().end() || it->second.kind_case() == Value::kNullValue) continue;
    if (it->second.string_value() != act) {
      return refuse(key, " \"", it->second.string_value(), "\" is not supported for model_type ",
                    c.architecture, " (only ", act, ")");
    }
  }
  if (JsonBoolField(s, "attention_bias", false) && !arch.attention_bias) {
    return refuse("attention_bias is not supported");
  }
  if (JsonBoolField(s, "mlp_bias", false)) return refuse("mlp_bias is not supported");
  if (JsonHas(s, "pretraining_tp")) {
    auto tp = JsonIntField(s, "pretraining_tp", 1, 1, what);
    if (!tp.ok()) return refuse("only pretraining_tp 1 is supported");
  }
  // transformers 5's rope_parameters (rope_theta, the scaling, partial
  // rotary) in place of the top-level keys.
  const Struct* rope = &s;
  if (auto it = s.fields().find("rope_parameters"); it != s.fields().end()) {
    if (it->second.kind_case() != Value::kStructValue) return refuse("rope_parameters must be an object");
    rope = &it->second.struct_value();
  }
  if (JsonHas(*rope, "partial_rotary_factor")) {
    auto factor = JsonNumberField(*rope, "partial_rotary_factor", 1.0, what);
    if (!factor.ok()) return factor.status();
    if (!(*factor > 0 && *factor <= 1)) return refuse("partial_rotary_factor must be in (0, 1], got ", *factor);
    c.partial_rotary_factor = *factor;
  }
  // The architecture's own keys (sliding windows, Gemma 2's scalars).
  if (arch.parse != nullptr) {
    if (absl::Status st = arch.parse(s, what, &c); !st.ok()) return st;
  }

  auto read = [&](const char* key, int64_t max, int* out) -> absl::Status {
    auto v = JsonIntField(s, key, 1, max, what);
    if (!v.ok()) return v.status();
    *out = *v;
    return absl::OkStatus();
  };
  for (auto [key, max, out] : {std::tuple{"num_hidden_layers", kMaxLayers, &c.n_layer},
                               {"hidden_size", kMaxDim, &c.hidden},
                               {"num_attention_heads", kMaxDim, &c.n_head},
                               {"intermediate_size", 8 * kMaxDim, &c.intermediate},
                               {"vocab_size", kMaxVocab, &c.vocab_size},
                               {"max_position_embeddings", kMaxPositions, &c.max_positions}}) {
    if (*out > 0) continue;  // the architecture's hook worked it out (LFM2's MLP width)
    if (auto st = read(key, max, out); !st.ok()) return st;
  }
  if (arch.layer_types) {
    if (absl::Status st = ParseLayerTypes(s, what, &c); !st.ok()) return st;
  }
  c.n_kv_head = c.n_head;
  if (JsonHas(s, "num_key_value_heads")) {
    if (auto st = read("num_key_value_heads", kMaxDim, &c.n_kv_head); !st.ok()) return st;
  }
  if (JsonHas(s, "head_dim")) {
    if (auto st = read("head_dim", 1024, &c.head_dim); !st.ok()) return st;
  } else if (arch.default_head_dim > 0) {
    c.head_dim = arch.default_head_dim;  // Gemma2Config's 256, not hidden / heads
  } else {
    if (c.hidden % c.n_head != 0) return refuse("hidden_size is not divisible by num_attention_heads");
    c.head_dim = c.hidden / c.n_head;
  }
  if (JsonHas(s, "rms_norm_eps")) {  // else 1e-6, or what the architecture's hook read
    auto eps = JsonNumberField(s, "rms_norm_eps", 1e-6, what);
    if (!eps.ok()) return eps.status();
    c.rms_norm_eps = static_cast<float>(*eps);
  }
  // rope_parameters keyed by layer type (Gemma 3's and 4's): the
  // architecture's hook read them.
  const bool by_layer_type = JsonHas(*rope, "full_attention") || JsonHas(*rope, "sliding_attention");
  if (!by_layer_type) {
    auto theta = JsonNumberField(*rope, "rope_theta", 10000.0, what);
    if (!theta.ok()) return theta.status();
    c.rope_theta = *theta;
  }
  if (c.partial_rotary_factor != 1.0) {
    // As transformers: int(head_dim * partial_rotary_factor).
    c.rotary_dim = static_cast<int>(c.head_dim * c.partial_rotary_factor);
    if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0) {
      return refuse("partial_rotary_factor ", c.partial_rotary_factor, " of head_dim ", c.head_dim, " turns ",
                    c.rotary_dim, " dims (must be even and at least 2)");
    }
  }
  // A multimodal rotary (transformers 5's rope_parameters, or the
  // rope_scaling of the released Qwen3-VL configs). Consecutive sections
  // cover the rotary frequencies; interleaved ones turn the frequencies
  // their pattern reaches by height and width, the rest by time (as
  // transformers slices them).
  const Struct* mrope = rope;
  if (auto it = s.fields().find("rope_scaling"); rope == &s && it != s.fields().end() &&
                                                 it->second.kind_case() == Value::kStructValue) {
    mrope = &it->second.struct_value();
  }
  if (JsonHas(*mrope, "mrope_section")) {
    std::vector<int32_t> sections;
    FLOVER_RETURN_IF_ERROR(JsonIntListField(*mrope, "mrope_section", 0, 1024, what, &sections));
    c.mrope_interleaved = JsonBoolField(*mrope, "mrope_interleaved", false);
    if (sections.size() != 3 ||
        (!c.mrope_interleaved && sections[0] + sections[1] + sections[2] != c.rotary() / 2)) {
      return refuse("mrope_section must be 3 sections", c.mrope_interleaved ? "" : " adding up to the ",
                    c.mrope_interleaved ? "" : absl::StrCat(c.rotary() / 2, " rotary frequencies"), ", got ",
                    absl::StrJoin(sections, ", "));
    }
    for (int i = 0; i < 3; ++i) c.mrope[i] = sections[i];
  }
  if (c.given_layers > c.n_layer) {
    return refuse("vision_config's deepstack_visual_indexes has ", c.given_layers, " entries for ", c.n_layer,
                  " layers");
  }
  if (by_layer_type && !arch.rope_by_layer_type) {
    return refuse("rope_parameters by layer type are not supported for model_type ", c.architecture);
  }
  if (rope != &s && !by_layer_type && arch.rope_by_layer_type) {
    return refuse("rope_parameters must be given by layer type (sliding_attention, full_attention) for model_type ",
                  c.architecture);
  }
  if (by_layer_type) {
    // Read by the architecture's hook (Gemma 4's).
  } else if (rope != &s) {
    // rope_parameters' rope_type is the scaling (default: none).
    Struct scaling;
    (*scaling.mutable_fields())["rope_scaling"].mutable_struct_value()->CopyFrom(*rope);
    if (auto st = ParseRopeScaling(scaling, what, &c.rope_scaling); !st.ok()) return st;
  } else if (auto st = ParseRopeScaling(s, what, &c.rope_scaling); !st.ok()) {
    return st;
  }
  if (c.rope_scaling.type == RopeScaling::Type::kLongRope) {
    // Served with the short factors, to original_max_position_embeddings,
    // unless ServeLlamaContext asks for more.
    RopeScaling& r = c.rope_scaling;
    auto original = JsonIntField(s, "original_max_position_embeddings", 2, kMaxPositions, what);
    if (!original.ok()) return original.status();
    r.original_max_positions = *original;
    if (static_cast<int>(r.short_factor.size()) != c.rotary() / 2 ||
        static_cast<int>(r.long_factor.size()) != c.rotary() / 2) {
      return refuse("rope_scaling has ", r.short_factor.size(), " short and ", r.long_factor.size(),
                    " long factors for ", c.rotary(), " rotary dims (", c.rotary() / 2, " each)");
    }
    const double scale = double(c.max_positions) / r.original_max_positions;
    r.attention_factor = scale <= 1.0 ? 1.0 : std::sqrt(1 + std::log(scale) / std::log(double(r.original_max_positions)));
    r.long_max_positions = c.max_positions;
    c.max_positions = std::min(c.max_positions, r.original_max_positions);
  }
  // Gemma 2's head is the embedding unless the config says otherwise.
  c.tie_word_embeddings = JsonBoolField(s, "tie_word_embeddings", arch.tied_by_default);
  if (auto st = JsonIntListField(s, "eos_token_id", 0, c.vocab_size - 1, what, &c.eos_token_ids);
      !st.ok()) {
    return st;
  }
  if (JsonHas(s, "bos_token_id")) {
    auto bos = JsonIntField(s, "bos_token_id", 0, c.vocab_size - 1, what);
    if (!bos.ok()) return bos.status();
    c.bos_token_id = *bos;
  }
  if (auto st = c.Validate(); !st.ok()) return refuse(st.message());
  return c;
}

ModelInfo InfoOf(const LlamaConfig& c) {
  ModelInfo info;
  info.architecture = c.architecture;
  info.n_layer = c.n_layer;
  info.n_head = c.n_head;
  info.n_kv_head = c.n_kv_head;
  info.hidden = c.hidden;
  info.experts = c.experts;
  info.experts_per_token = c.experts > 0 ? c.experts_per_tok : 0;
  info.vocab_size = c.vocab_size;
  info.max_positions = c.max_positions;
  info.eos_token_ids = c.eos_token_ids;
  info.num_parameters = c.num_parameters();
  // Every weight but the embedding table and the norms is a matrix a token
  // goes through; a tied head is the embedding table once more.
  // A mixture of experts: only the k experts a token is routed to.
  int64_t norms = (c.arch().norms_per_layer() * int64_t{c.n_layer} + 1) * c.hidden;
  for (int l = 0; l < c.n_layer; ++l) norms += MixerParametersOf(c, l).other;
  int64_t idle_experts = 0;
  for (int l = 0; l < c.n_layer; ++l) idle_experts += MlpParameters(c, l, false) - MlpParameters(c, l, true);
  // Gemma 4's per-layer table: a token reads one row of it.
  const int64_t ple_table = c.ple_dim > 0 ? int64_t{c.ple_vocab} * c.n_layer * c.ple_dim : 0;
  info.matmul_parameters = c.num_parameters() - int64_t{c.vocab_size} * c.hidden - norms - idle_experts - ple_table +
                           (c.tie_word_embeddings ? int64_t{c.vocab_size} * c.hidden : 0);
  return info;
}

void ServeLlamaContext(LlamaConfig* c, int positions) {
  RopeScaling& r = c->rope_scaling;
  if (r.type != RopeScaling::Type::kLongRope) return;
  r.use_long = positions > r.original_max_positions && r.long_max_positions > r.original_max_positions;
  c->max_positions = r.use_long ? r.long_max_positions : std::min(r.long_max_positions, r.original_max_positions);
}

double YarnAttentionFactor(double factor) { return factor <= 1 ? 1.0 : 0.1 * std::log(factor) + 1.0; }

namespace {

// Frequency i of R rotary dims under YaRN, as transformers'
// _compute_yarn_parameters: the dim that turns `rotations` times over the
// original context bounds the ramp; below it (low dims, high frequencies)
// the frequency is kept, above it divided by the factor.
float YarnFrequency(const RopeScaling& r, double base, int R, int i, float f) {
  auto dim_of = [&](double rotations) {
    return R * std::log(r.original_max_positions / (rotations * 2 * M_PI)) / (2 * std::log(base));
  };
  double low = dim_of(r.beta_fast), high = dim_of(r.beta_slow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(R - 1));
  if (low == high) high += 0.001;  // as transformers: no singularity
  const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
  const double keep = 1 - ramp;  // the extrapolation's share
  return static_cast<float>(f / r.factor * (1 - keep) + double{f} * keep);
}

}  // namespace

std::vector<float> RopeInvFreq(const LlamaConfig& c) {
  std::vector<float> inv = RotaryInvFreq(static_cast<float>(c.rope_theta), c.rotary());
  const RopeScaling& r = c.rope_scaling;
  for (size_t i = 0; i < inv.size(); ++i) {
    float f = inv[i];
    if (r.type == RopeScaling::Type::kLinear) {
      f = static_cast<float>(f / r.factor);
    } else if (r.type == RopeScaling::Type::kLlama3) {
      const double low_wavelen = r.original_max_positions / r.low_freq_factor;
      const double high_wavelen = r.original_max_positions / r.high_freq_factor;
      const double wavelen = 2 * M_PI / f;
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / r.factor);
      } else if (wavelen >= high_wavelen) {  // the band between: interpolate
        const double smooth = (r.original_max_positions / wavelen - r.low_freq_factor) /
                              (r.high_freq_factor - r.low_freq_factor);
        f = static_cast<float>((1 - smooth) * f / r.factor + smooth * f);
      }
    }
    if (r.type == RopeScaling::Type::kYarn) f = YarnFrequency(r, c.rope_theta, c.rotary(), static_cast<int>(i), f);
    if (r.type == RopeScaling::Type::kLongRope) f = f / (r.use_long ? r.long_factor[i] : r.short_factor[i]);
    if (!c.rope_freq_factors.empty()) f = f / c.rope_freq_factors[i];
    inv[i] = f;
  }
  return inv;
}

}  // namespace flover
