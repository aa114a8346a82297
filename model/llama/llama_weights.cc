#include "model/llama/llama_weights.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "model/host_matrix.h"
#include "util/split_mix64.h"

namespace flover {
namespace {

std::vector<float> Concat(std::vector<float> a, const std::vector<float>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

absl::StatusOr<LlamaWeights> LoadLlamaWeights(const Checkpoint& ckpt, const LlamaConfig& config) {
  const int64_t C = config.hidden, F = config.intermediate, V = config.vocab_size,
                Q = config.q_dim(), KV = config.kv_dim();
  absl::Status st;
  auto read = [&](const std::string& key, std::vector<int64_t> shape) {
    std::vector<float> out;
    if (!st.ok()) return out;
    auto t = ckpt.ReadFloat(key, shape);
    if (!t.ok()) {
      st = t.status();
      return out;
    }
    return std::move(*t);
  };
  LlamaWeights w;
  w.embed = read("model.embed_tokens.weight", {V, C});
  w.norm = read("model.norm.weight", {C});
  const bool has_head = ckpt.Find("lm_head.weight") != nullptr;
  if (!config.tie_word_embeddings || has_head) {
    // An untied head must be there; a tied one may still be saved (as a copy).
    if (!config.tie_word_embeddings) w.lm_head = read("lm_head.weight", {V, C});
  }
  for (int l = 0; l < config.n_layer && st.ok(); ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    LlamaLayerWeights layer;
    layer.attn_norm = read(p + "input_layernorm.weight", {C});
    layer.qkv = Concat(Concat(read(p + "self_attn.q_proj.weight", {Q, C}),
                              read(p + "self_attn.k_proj.weight", {KV, C})),
                       read(p + "self_attn.v_proj.weight", {KV, C}));
    layer.o = read(p + "self_attn.o_proj.weight", {C, Q});
    layer.mlp_norm = read(p + "post_attention_layernorm.weight", {C});
    layer.gate_up = Concat(read(p + "mlp.gate_proj.weight", {F, C}), read(p + "mlp.up_proj.weight", {F, C}));
    layer.down = read(p + "mlp.down_proj.weight", {C, F});
    w.layers.push_back(std::move(layer));
  }
  if (!st.ok()) return st;
  return w;
}

LlamaWeights RandomLlamaWeights(const LlamaConfig& config, uint64_t seed) {
  const int64_t C = config.hidden, F = config.intermediate, V = config.vocab_size,
                Q = config.q_dim(), KV = config.kv_dim();
  SplitMix64 rng(seed);
  LlamaWeights w;
  w.embed = RandomInit(V * C, rng);
  for (int l = 0; l < config.n_layer; ++l) {
    LlamaLayerWeights layer;
    layer.attn_norm.assign(C, 1.0f);
    layer.qkv = RandomInit((Q + 2 * KV) * C, rng);
    layer.o = RandomInit(C * Q, rng);
    layer.mlp_norm.assign(C, 1.0f);
    layer.gate_up = RandomInit(2 * F * C, rng);
    layer.down = RandomInit(C * F, rng);
    w.layers.push_back(std::move(layer));
  }
  w.norm.assign(C, 1.0f);
  if (!config.tie_word_embeddings) w.lm_head = RandomInit(V * C, rng);
  return w;
}

}  // namespace flover
