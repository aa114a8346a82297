#include "model/gpt2/gpt_family.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/gpt2/gpt_architecture.h"

namespace flover {

DecoderSpec GptDecoderSpec(const GptConfig& c) {
  DecoderSpec s;
  s.n_layer = c.n_layer;
  s.hidden = c.n_embd;
  s.n_head = c.n_head;
  s.n_kv_head = c.n_head;
  s.head_dim = c.head_dim();
  s.intermediate = c.n_inner;
  s.vocab_size = c.vocab_size;
  s.max_positions = c.n_positions;
  s.norm = DecoderSpec::Norm::kLayerNorm;
  s.norm_eps = c.layer_norm_epsilon;
  s.mlp = DecoderSpec::Mlp::kGelu;
  s.attention.assign(c.n_layer, kernels::AttentionParams{});
  c.arch().spec(c, &s);  // the block, the layout, the positions
  return s;
}

DecoderRecipes GptRecipes(const GptConfig& c) {
  DecoderRecipes r;
  const int64_t C = c.n_embd, V = c.vocab_size, P = c.n_positions;
  const GptArchitecture& arch = c.arch();
  const bool tied = c.tie_word_embeddings;
  r.embedding = [=](const DecoderShard& sh) {
    return RowSlice("wte.weight", {V, C}, sh.vocab_begin, sh.vocab_end);
  };
  r.globals = [=, &arch](const DecoderShard& sh, DecoderWeights& w, const DecoderRecipes::Visit& visit) {
    // Positions are embedded once, by rank 0.
    if (arch.position_table && sh.adds_replicated_bias) visit(Whole("wpe.weight", {P, C}), &w.position_table);
    visit(Whole("ln_f.weight", {C}), &w.norm);
    visit(Whole("ln_f.bias", {C}), &w.norm_b);
    if (!tied) visit(RowSlice("lm_head.weight", {V, C}, sh.vocab_begin, sh.vocab_end), &w.lm_head);
    if (arch.head_bias) visit(ColSlice("lm_head.bias", {V}, sh.vocab_begin, sh.vocab_end), &w.lm_head_b);
  };
  r.layer = [c, &arch](int l, const DecoderShard& sh, DecoderLayerWeights& L, const DecoderRecipes::Visit& visit) {
    arch.layer(c, l, sh, L, visit);
  };
  return r;
}

absl::StatusOr<DecoderWeights> LoadGptWeights(const WeightSource& source, const GptConfig& config,
                                              const ShardSpec& spec, WeightPart part) {
  if (absl::Status st = config.Validate(); !st.ok()) return st;
  return LoadDecoderWeights(source, GptDecoderSpec(config), GptRecipes(config), spec, part);
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
