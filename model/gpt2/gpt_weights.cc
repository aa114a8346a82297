#include "model/gpt2/gpt_weights.h"

#include <algorithm>
#include <functional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace flover {
namespace {

// The recipe table: every parameter of the rank, where it comes from, and
// where it goes in `w`.
void ForEachParam(const WeightSource& source, const GptConfig& c, const ShardSpec& spec,
                  const WeightPart& part, GptWeights& w,
                  const std::function<void(const WeightRecipe&, ParamDest)>& visit) {
  const ShardShape sh = ShapeOf(c, spec);
  const int64_t C = c.n_embd, D = c.head_dim(), F = c.n_inner, V = c.vocab_size,
                P = c.n_positions;
  const int64_t q0 = sh.head_begin * D, q1 = q0 + sh.heads * D;  // this rank's head columns
  const int64_t f0 = sh.inner_begin, f1 = f0 + sh.inner;
  // Row-split layers' biases: added once, by rank 0.
  auto replicated_bias = [&](std::string name) {
    return sh.adds_replicated_bias ? Whole(std::move(name), {C}) : Zeros(C);
  };
  const int first = part.layer_begin, last = part.layer_end < 0 ? c.n_layer : part.layer_end;
  w.layers.resize(std::max(0, last - first));
  for (int i = first; i < last; ++i) {
    LayerWeights& l = w.layers[i - first];
    const std::string h = absl::StrCat("h.", i, ".");
    visit(Whole(h + "ln_1.weight", {C}), &l.ln_1_g);
    visit(Whole(h + "ln_1.bias", {C}), &l.ln_1_b);
    // [C, 3C] -> [C, 3 C_local]: this rank's heads of Q, then K, then V.
    std::vector<WeightRecipe> qkv_w, qkv_b;
    for (int64_t part = 0; part < 3; ++part) {
      qkv_w.push_back(ColSlice(h + "attn.c_attn.weight", {C, 3 * C}, part * C + q0, part * C + q1));
      qkv_b.push_back(ColSlice(h + "attn.c_attn.bias", {3 * C}, part * C + q0, part * C + q1));
    }
    visit(Stack(WeightRecipe::kCols, std::move(qkv_w)), &l.attn_w);
    visit(Stack(WeightRecipe::kCols, std::move(qkv_b)), &l.attn_b);
    visit(RowSlice(h + "attn.c_proj.weight", {C, C}, q0, q1), &l.attn_proj_w);
    visit(replicated_bias(h + "attn.c_proj.bias"), &l.attn_proj_b);
    visit(Whole(h + "ln_2.weight", {C}), &l.ln_2_g);
    visit(Whole(h + "ln_2.bias", {C}), &l.ln_2_b);
    visit(ColSlice(h + "mlp.c_fc.weight", {C, F}, f0, f1), &l.fc_w);
    visit(ColSlice(h + "mlp.c_fc.bias", {F}, f0, f1), &l.fc_b);
    visit(RowSlice(h + "mlp.c_proj.weight", {F, C}, f0, f1), &l.mlp_proj_w);
    visit(replicated_bias(h + "mlp.c_proj.bias"), &l.mlp_proj_b);
  }
  if (!part.globals) return;
  if (part.embedding) visit(GptEmbeddingRecipe(c, spec), &w.wte);
  // Positions are embedded once, by rank 0.
  visit(sh.adds_replicated_bias ? Whole("wpe.weight", {P, C}) : Zeros(0), &w.wpe);
  visit(Whole("ln_f.weight", {C}), &w.ln_f_g);
  visit(Whole("ln_f.bias", {C}), &w.ln_f_b);
  // lm_head is saved only when it is not tied to wte.
  if (source.Has("lm_head.weight")) {
    visit(RowSlice("lm_head.weight", {V, C}, sh.vocab_begin, sh.vocab_end), &w.lm_head);
  }
}

}  // namespace

WeightRecipe GptEmbeddingRecipe(const GptConfig& c, const ShardSpec& spec) {
  const ShardShape sh = ShapeOf(c, spec);
  return RowSlice("wte.weight", {c.vocab_size, c.n_embd}, sh.vocab_begin, sh.vocab_end);
}

absl::StatusOr<GptWeights> LoadGptWeights(const WeightSource& source, const GptConfig& config,
                                          const ShardSpec& spec, WeightPart part) {
  if (absl::Status st = ValidateShardSpec(config, spec); !st.ok()) return st;
  if (absl::Status st = CheckWeightPart(part, config.n_layer); !st.ok()) return st;
  GptWeights w;
  absl::Status st;
  ForEachParam(source, config, spec, part, w, [&](const WeightRecipe& r, ParamDest out) {
    if (st.ok()) st = ReadInto(source, r, out);
  });
  if (!st.ok()) return st;
  return w;
}

absl::Status CheckGptWeights(const WeightSource& source, const GptConfig& config) {
  absl::Status st;
  GptWeights unused;
  ForEachParam(source, config, ShardSpec{1, 0}, WeightPart{}, unused,
               [&](const WeightRecipe& r, ParamDest) {
                 for (const WeightBlock& b : r.blocks) {
                   if (st.ok()) st = source.Read(b.tensor, b.shape, TensorRegion{}).status();
                 }
               });
  return st;
}

std::unique_ptr<WeightSource> GeneratedGptSource(uint64_t seed) {
  return std::make_unique<GeneratedSource>(seed, [](absl::string_view name) {
    using Fill = GeneratedSource::Fill;
    if (name == "lm_head.weight") return Fill::kAbsent;  // tied
    if (absl::StartsWith(name, "ln_") || absl::StrContains(name, ".ln_")) {
      return absl::EndsWith(name, ".weight") ? Fill::kOnes : Fill::kZeros;
    }
    return absl::EndsWith(name, ".bias") ? Fill::kZeros : Fill::kRandom;
  });
}

}  // namespace flover
