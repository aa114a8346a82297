#include "model/gpt2/gpt_family.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/decoder/rotary.h"

namespace flover {

DecoderSpec GptDecoderSpec(const GptConfig& c) {
  const bool gptj = c.architecture == "gptj";
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
  s.block = gptj ? DecoderSpec::Block::kParallel : DecoderSpec::Block::kSequential;
  s.mlp = DecoderSpec::Mlp::kGelu;
  s.layout = gptj ? kernels::WeightLayout::kOutIn : kernels::WeightLayout::kInOut;
  s.position_table = !gptj;
  if (gptj) {
    // As transformers' create_sinusoidal_positions: base 10000 over the
    // rotary dims.
    s.inv_freq = RotaryInvFreq(10000.0f, c.rotary_dim > 0 ? c.rotary_dim : c.head_dim());
    s.rope_style = kernels::RopeStyle::kInterleaved;
  }
  s.attention.assign(c.n_layer, kernels::AttentionParams{});
  return s;
}

DecoderRecipes GptRecipes(const GptConfig& c) {
  DecoderRecipes r;
  const int64_t C = c.n_embd, D = c.head_dim(), F = c.n_inner, V = c.vocab_size,
                P = c.n_positions;
  const bool gptj = c.architecture == "gptj", tied = c.tie_word_embeddings;
  r.embedding = [=](const DecoderShard& sh) {
    return RowSlice("wte.weight", {V, C}, sh.vocab_begin, sh.vocab_end);
  };
  r.globals = [=](const DecoderShard& sh, DecoderWeights& w, const DecoderRecipes::Visit& visit) {
    // Positions are embedded once, by rank 0.
    if (!gptj && sh.adds_replicated_bias) visit(Whole("wpe.weight", {P, C}), &w.position_table);
    visit(Whole("ln_f.weight", {C}), &w.norm);
    visit(Whole("ln_f.bias", {C}), &w.norm_b);
    if (!tied) visit(RowSlice("lm_head.weight", {V, C}, sh.vocab_begin, sh.vocab_end), &w.lm_head);
    if (gptj) visit(ColSlice("lm_head.bias", {V}, sh.vocab_begin, sh.vocab_end), &w.lm_head_b);
  };
  r.layer = [=](int l, const DecoderShard& sh, DecoderLayerWeights& L,
                const DecoderRecipes::Visit& visit) {
    const int64_t q0 = sh.q_head_begin * D, q1 = q0 + sh.q_heads * D;  // this rank's heads
    const int64_t f0 = sh.inner_begin, f1 = f0 + sh.inner;
    // Row-split layers' biases: added once, by rank 0.
    auto replicated_bias = [&](std::string name) {
      return sh.adds_replicated_bias ? Whole(std::move(name), {C}) : Zeros(C);
    };
    const std::string h = absl::StrCat("h.", l, ".");
    visit(Whole(h + "ln_1.weight", {C}), &L.norm1);
    visit(Whole(h + "ln_1.bias", {C}), &L.norm1_b);
    if (gptj) {  // nn.Linear [out, in]; one norm for attention and MLP
      visit(Stack(WeightRecipe::kRows, {RowSlice(h + "attn.q_proj.weight", {C, C}, q0, q1),
                                        RowSlice(h + "attn.k_proj.weight", {C, C}, q0, q1),
                                        RowSlice(h + "attn.v_proj.weight", {C, C}, q0, q1)}),
            &L.qkv);
      visit(ColSlice(h + "attn.out_proj.weight", {C, C}, q0, q1), &L.o);
      visit(RowSlice(h + "mlp.fc_in.weight", {F, C}, f0, f1), &L.up);
      visit(ColSlice(h + "mlp.fc_in.bias", {F}, f0, f1), &L.up_b);
      visit(ColSlice(h + "mlp.fc_out.weight", {C, F}, f0, f1), &L.down);
      visit(replicated_bias(h + "mlp.fc_out.bias"), &L.down_b);
      return;
    }
    // Conv1D [in, out]. c_attn [C, 3C] -> [C, 3 C_local]: this rank's heads
    // of Q, then K, then V.
    std::vector<WeightRecipe> qkv_w, qkv_b;
    for (int64_t part = 0; part < 3; ++part) {
      qkv_w.push_back(ColSlice(h + "attn.c_attn.weight", {C, 3 * C}, part * C + q0, part * C + q1));
      qkv_b.push_back(ColSlice(h + "attn.c_attn.bias", {3 * C}, part * C + q0, part * C + q1));
    }
    visit(Stack(WeightRecipe::kCols, std::move(qkv_w)), &L.qkv);
    visit(Stack(WeightRecipe::kCols, std::move(qkv_b)), &L.qkv_b);
    visit(RowSlice(h + "attn.c_proj.weight", {C, C}, q0, q1), &L.o);
    visit(replicated_bias(h + "attn.c_proj.bias"), &L.o_b);
    visit(Whole(h + "ln_2.weight", {C}), &L.norm2);
    visit(Whole(h + "ln_2.bias", {C}), &L.norm2_b);
    visit(ColSlice(h + "mlp.c_fc.weight", {C, F}, f0, f1), &L.up);
    visit(ColSlice(h + "mlp.c_fc.bias", {F}, f0, f1), &L.up_b);
    visit(RowSlice(h + "mlp.c_proj.weight", {F, C}, f0, f1), &L.down);
    visit(replicated_bias(h + "mlp.c_proj.bias"), &L.down_b);
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
