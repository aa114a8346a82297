#include "model/gpt2/gpt_config.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/gpt2/gpt_architecture.h"
#include "util/json.h"

namespace flover {
namespace {

// Generous bounds that keep every size computed from a config in range.
constexpr int64_t kMaxDim = 1 << 16;
constexpr int64_t kMaxVocab = 1 << 22;
constexpr int64_t kMaxLayers = 1024;

using google::protobuf::Struct;
using google::protobuf::Value;

}  // namespace

int64_t GptConfig::num_parameters() const {
  const int64_t C = n_embd, V = vocab_size;
  return V * C * (tie_word_embeddings ? 1 : 2) + (arch().head_bias ? V : 0) +
         (arch().position_table ? int64_t{n_positions} * C : 0) + n_layer * arch().layer_parameters(*this) + 2 * C;
}

absl::Status GptConfig::Validate() const {
  auto bad = [](std::string msg) { return absl::InvalidArgumentError(msg); };
  if (n_layer < 1 || n_layer > kMaxLayers) return bad(absl::StrCat("n_layer out of range: ", n_layer));
  if (n_head < 1 || n_head > kMaxDim) return bad(absl::StrCat("n_head out of range: ", n_head));
  if (n_embd < 1 || n_embd > kMaxDim) return bad(absl::StrCat("n_embd out of range: ", n_embd));
  if (n_embd % n_head != 0) {
    return bad(absl::StrFormat("n_embd (%d) is not divisible by n_head (%d)", n_embd, n_head));
  }
  if (n_positions < 1 || n_positions > kMaxDim) return bad(absl::StrCat("n_positions out of range: ", n_positions));
  if (vocab_size < 1 || vocab_size > kMaxVocab) return bad(absl::StrCat("vocab_size out of range: ", vocab_size));
  if (n_inner < 1 || n_inner > 4 * kMaxDim) return bad(absl::StrCat("n_inner out of range: ", n_inner));
  if (rotary_dim < 0 || rotary_dim > head_dim() || rotary_dim % 2 != 0) {
    return bad(absl::StrFormat("rotary_dim %d must be even and at most the head's %d dims",
                               rotary_dim, head_dim()));
  }
  if (!(layer_norm_epsilon > 0 && layer_norm_epsilon < 1)) return bad("layer_norm_epsilon must be in (0, 1)");
  if (eos_token_id < -1 || eos_token_id >= vocab_size) {
    return bad(absl::StrFormat("eos_token_id %d is outside the vocabulary (%d)", eos_token_id, vocab_size));
  }
  return absl::OkStatus();
}

ModelInfo InfoOf(const GptConfig& c) {
  ModelInfo info;
  info.architecture = c.architecture;
  info.n_layer = c.n_layer;
  info.n_head = c.n_head;
  info.n_kv_head = c.n_head;
  info.hidden = c.n_embd;
  info.vocab_size = c.vocab_size;
  info.max_positions = c.n_positions;
  if (c.eos_token_id >= 0) info.eos_token_ids = {c.eos_token_id};
  info.num_parameters = c.num_parameters();
  // Every weight a token goes through: all but the embedding table (the
  // position table too for GPT-2); a tied head is the table once more.
  const int64_t table = int64_t{c.vocab_size} * c.n_embd;
  info.matmul_parameters =
      c.num_parameters() - table + (c.tie_word_embeddings ? table : 0) -
      (c.arch().position_table ? int64_t{c.n_positions} * c.n_embd : 0);
  return info;
}

absl::StatusOr<GptConfig> ParseGptConfig(absl::string_view json, absl::string_view what) {
  auto parsed = ParseJsonObject(json, what);
  if (!parsed.ok()) return parsed.status();
  const Struct& s = *parsed;
  const auto& fields = s.fields();

  GptConfig c;
  if (auto it = fields.find("model_type"); it != fields.end()) {
    c.architecture = it->second.string_value();
    if (FindGptArchitecture(c.architecture) == nullptr) {
      std::vector<std::string> types;
      for (const GptArchitecture* a : GptArchitectures()) types.push_back(a->model_type);
      return absl::InvalidArgumentError(absl::StrCat(what, ": model_type \"", c.architecture,
                                                     "\" is not supported (", absl::StrJoin(types, ", "), ")"));
    }
  }
  if (auto it = fields.find("activation_function"); it != fields.end()) {
    const std::string& act = it->second.string_value();
    if (act != "gelu_new" && act != "gelu_pytorch_tanh") {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": activation_function \"", act, "\" is not supported (only gelu_new)"));
    }
  }
  if (!JsonBoolField(s, "scale_attn_weights", true) ||
      JsonBoolField(s, "scale_attn_by_inverse_layer_idx", false)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": only scale_attn_weights=true, scale_attn_by_inverse_layer_idx=false is supported"));
  }

  auto read = [&](const char* key, int64_t max, int* out) -> absl::Status {
    auto v = JsonIntField(s, key, 1, max, what);
    if (!v.ok()) return v.status();
    *out = *v;
    return absl::OkStatus();
  };
  for (auto [key, max, out] : {std::tuple{"n_layer", kMaxLayers, &c.n_layer},
                               {"n_head", kMaxDim, &c.n_head},
                               {"n_embd", kMaxDim, &c.n_embd},
                               {"n_positions", kMaxDim, &c.n_positions},
                               {"vocab_size", kMaxVocab, &c.vocab_size}}) {
    if (auto st = read(key, max, out); !st.ok()) return st;
  }
  c.n_inner = 4 * c.n_embd;
  if (auto it = fields.find("n_inner"); it != fields.end() &&
      it->second.kind_case() != Value::kNullValue) {
    if (auto st = read("n_inner", 4 * kMaxDim, &c.n_inner); !st.ok()) return st;
  }
  if (c.arch().parse != nullptr) {
    if (auto st = c.arch().parse(s, what, &c); !st.ok()) return st;
  }
  if (auto it = fields.find("layer_norm_epsilon"); it != fields.end()) {
    c.layer_norm_epsilon = static_cast<float>(it->second.number_value());
  }
  if (auto it = fields.find("eos_token_id"); it != fields.end() &&
      it->second.kind_case() == Value::kNumberValue) {
    auto v = JsonIntField(s, "eos_token_id", 0, c.vocab_size - 1, what);
    if (!v.ok()) return v.status();
    c.eos_token_id = *v;
  }
  if (auto st = c.Validate(); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", st.message()));
  }
  return c;
}

}  // namespace flover
