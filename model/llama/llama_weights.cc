#include "model/llama/llama_weights.h"

#include <algorithm>
#include <functional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace flover {
namespace {

// The recipe table: every parameter of the rank, where it comes from, and
// where it goes in `w` (null: validation only).
void ForEachParam(const LlamaConfig& c, const ShardSpec& spec, const WeightPart& part,
                  LlamaWeights* w,
                  const std::function<void(const WeightRecipe&, ParamDest)>& visit) {
  const LlamaShard sh = LlamaShapeOf(c, spec);
  const int64_t C = c.hidden, D = c.head_dim, F = c.intermediate, V = c.vocab_size,
                Q = c.q_dim(), KV = c.kv_dim();
  const int64_t q0 = sh.q_head_begin * D, q1 = q0 + sh.q_heads * D;
  const int64_t k0 = sh.kv_head_begin * D, k1 = k0 + sh.kv_heads * D;
  const int64_t f0 = sh.inner_begin, f1 = f0 + sh.inner;
  const bool fused = c.architecture == "phi3";
  auto dst = [&](auto* p) { return w != nullptr ? ParamDest(p) : ParamDest(); };
  LlamaWeights unused;
  LlamaWeights& out = w != nullptr ? *w : unused;
  const int first = part.layer_begin, last = part.layer_end < 0 ? c.n_layer : part.layer_end;
  out.layers.resize(std::max(0, last - first));
  if (part.globals) {
    if (part.embedding) visit(LlamaEmbeddingRecipe(c, spec), dst(&out.embed));
    visit(Whole("model.norm.weight", {C}), dst(&out.norm));
    if (!c.tie_word_embeddings) {
      visit(RowSlice("lm_head.weight", {V, C}, sh.vocab_begin, sh.vocab_end), dst(&out.lm_head));
    }
  }
  for (int l = first; l < last; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    LlamaLayerWeights& L = out.layers[l - first];
    visit(Whole(p + "input_layernorm.weight", {C}), dst(&L.attn_norm));
    visit(Whole(p + "post_attention_layernorm.weight", {C}), dst(&L.mlp_norm));
    // Q by query heads, K and V by key/value heads: whole GQA groups; from
    // one [Q + 2 KV, C] qkv_proj where the checkpoint fuses them (Phi-3).
    if (fused) {
      const std::string qkv = p + "self_attn.qkv_proj.weight";
      const std::vector<int64_t> shape = {Q + 2 * KV, C};
      visit(Stack(WeightRecipe::kRows, {RowSlice(qkv, shape, q0, q1),
                                        RowSlice(qkv, shape, Q + k0, Q + k1),
                                        RowSlice(qkv, shape, Q + KV + k0, Q + KV + k1)}),
            dst(&L.qkv));
    } else {
      visit(Stack(WeightRecipe::kRows, {RowSlice(p + "self_attn.q_proj.weight", {Q, C}, q0, q1),
                                        RowSlice(p + "self_attn.k_proj.weight", {KV, C}, k0, k1),
                                        RowSlice(p + "self_attn.v_proj.weight", {KV, C}, k0, k1)}),
            dst(&L.qkv));
    }
    if (c.qkv_bias) {  // one row of the q, k and v biases side by side
      visit(Stack(WeightRecipe::kCols, {ColSlice(p + "self_attn.q_proj.bias", {Q}, q0, q1),
                                        ColSlice(p + "self_attn.k_proj.bias", {KV}, k0, k1),
                                        ColSlice(p + "self_attn.v_proj.bias", {KV}, k0, k1)}),
            dst(&L.qkv_bias));
    }
    visit(ColSlice(p + "self_attn.o_proj.weight", {C, Q}, q0, q1), dst(&L.o));
    if (fused) {  // gate_up_proj: [2F, C], gate rows then up rows
      const std::string gate_up = p + "mlp.gate_up_proj.weight";
      visit(Stack(WeightRecipe::kRows, {RowSlice(gate_up, {2 * F, C}, f0, f1),
                                        RowSlice(gate_up, {2 * F, C}, F + f0, F + f1)}),
            dst(&L.gate_up));
    } else {
      visit(Stack(WeightRecipe::kRows, {RowSlice(p + "mlp.gate_proj.weight", {F, C}, f0, f1),
                                        RowSlice(p + "mlp.up_proj.weight", {F, C}, f0, f1)}),
            dst(&L.gate_up));
    }
    visit(ColSlice(p + "mlp.down_proj.weight", {C, F}, f0, f1), dst(&L.down));
  }
}

}  // namespace

WeightRecipe LlamaEmbeddingRecipe(const LlamaConfig& c, const ShardSpec& spec) {
  const LlamaShard sh = LlamaShapeOf(c, spec);
  return RowSlice("model.embed_tokens.weight", {c.vocab_size, c.hidden}, sh.vocab_begin,
                  sh.vocab_end);
}

absl::StatusOr<LlamaWeights> LoadLlamaWeights(const WeightSource& source, const LlamaConfig& config,
                                              const ShardSpec& spec, WeightPart part) {
  if (absl::Status st = ValidateLlamaShard(config, spec); !st.ok()) return st;
  if (absl::Status st = CheckWeightPart(part, config.n_layer); !st.ok()) return st;
  LlamaWeights w;
  absl::Status st;
  ForEachParam(config, spec, part, &w, [&](const WeightRecipe& r, ParamDest out) {
    if (st.ok()) st = ReadInto(source, r, out);
  });
  if (!st.ok()) return st;
  return w;
}

absl::Status CheckLlamaWeights(const WeightSource& source, const LlamaConfig& config) {
  absl::Status st;
  ForEachParam(config, ShardSpec{1, 0}, WeightPart{}, nullptr, [&](const WeightRecipe& r, ParamDest) {
    for (const WeightBlock& b : r.blocks) {
      if (st.ok()) st = source.Read(b.tensor, b.shape, TensorRegion{}).status();
    }
  });
  return st;
}

std::unique_ptr<WeightSource> GeneratedLlamaSource(const LlamaConfig& config, uint64_t seed) {
  const bool tied = config.tie_word_embeddings;
  return std::make_unique<GeneratedSource>(seed, [tied](absl::string_view name) {
    using Fill = GeneratedSource::Fill;
    if (name == "lm_head.weight" && tied) return Fill::kAbsent;
    if (absl::EndsWith(name, ".bias")) return Fill::kZeros;
    return absl::EndsWith(name, "norm.weight") ? Fill::kOnes : Fill::kRandom;
  });
}

}  // namespace flover
