// Phi-3: Llama with q/k/v stored as one qkv_proj and gate/up as one
// gate_up_proj. Its sliding_window is applied by transformers only with
// FlashAttention-2, so it is ignored as transformers' default path ignores
// it. Phi-4-mini is the same model_type with partial rotary embeddings
// (partial_rotary_factor: the first dims of each head turn, as halves) and
// LongRoPE; its GGUF files carry the rotary dims, LongRoPE's factors as
// tensors and its attention factor.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_config.h"
#include "model/loader/gguf.h"
#include "util/json.h"
#include "util/status_macros.h"

namespace flover {
namespace {

absl::Status ParsePhi3(const google::protobuf::Struct& s, absl::string_view what, LlamaConfig* c) {
  auto factor = JsonNumberField(s, "partial_rotary_factor", 1.0, what);
  if (!factor.ok()) return factor.status();
  if (!(*factor > 0 && *factor <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": partial_rotary_factor must be in (0, 1], got ", *factor));
  }
  c->partial_rotary_factor = *factor;
  return absl::OkStatus();
}

// LongRoPE as llama.cpp's converter writes it: the factors as tensors of
// rotary_dim / 2 values, the context it was trained to and the attention
// factor (absent: worked out as transformers does). Served with the short
// factors to that context unless asked for more, as the config.json path is.
absl::Status Phi3Gguf(const GgufFile& f, const std::string& a, LlamaConfig* c) {
  const GgufTensor* short_factor = f.FindTensor("rope_factors_short.weight");
  const GgufTensor* long_factor = f.FindTensor("rope_factors_long.weight");
  if (short_factor == nullptr && long_factor == nullptr) return absl::OkStatus();
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat("GGUF phi3: ", m...)); };
  if (short_factor == nullptr || long_factor == nullptr) {
    return refuse("LongRoPE needs both rope_factors_short.weight and rope_factors_long.weight");
  }
  RopeScaling& r = c->rope_scaling;
  r.type = RopeScaling::Type::kLongRope;
  for (auto [t, out] : {std::pair{short_factor, &r.short_factor}, {long_factor, &r.long_factor}}) {
    if (t->ne != std::vector<int64_t>{c->rotary() / 2}) {
      return refuse(t->name, " holds ", t->ne.empty() ? 0 : t->ne[0], " factors for ", c->rotary(),
                    " rotary dims (", c->rotary() / 2, ")");
    }
    auto values = f.ReadRows(*t, 0, 1);
    if (!values.ok()) return values.status();
    for (float v : *values) {
      if (!(v > 0 && v < 1e30f)) return refuse(t->name, " holds ", v, ", not a positive number");
    }
    *out = std::move(*values);
  }
  auto original = f.GetIntOr(a + "rope.scaling.original_context_length", c->max_positions);
  if (!original.ok()) return original.status();
  if (*original < 2 || *original > c->max_positions) {
    return refuse(a, "rope.scaling.original_context_length ", *original, " must be in [2, ", c->max_positions, "]");
  }
  r.original_max_positions = static_cast<int>(*original);
  const double scale = double(c->max_positions) / r.original_max_positions;
  auto attn = f.GetFloatOr(a + "rope.scaling.attn_factor",
                           scale <= 1.0 ? 1.0 : std::sqrt(1 + std::log(scale) / std::log(double(r.original_max_positions))));
  if (!attn.ok()) return attn.status();
  if (!(*attn > 0 && *attn < 1e30)) return refuse(a, "rope.scaling.attn_factor ", *attn, " is not a positive number");
  r.attention_factor = *attn;
  r.long_max_positions = c->max_positions;
  c->max_positions = r.original_max_positions;
  return absl::OkStatus();
}

}  // namespace

const LlamaArchitecture& Phi3Arch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a;
    a.model_type = "phi3";
    a.gguf = true;  // attn_qkv and ffn_up (gate then up) fused, as transformers stores them
    a.fused_projections = true;
    a.parse = ParsePhi3;
    a.gguf_parse = Phi3Gguf;
    return a;
  }();
  return entry;
}

}  // namespace flover
