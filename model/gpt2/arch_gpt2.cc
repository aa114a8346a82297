// GPT-2: a learned position table, Conv1D matrices [in, out] with biases
// (Q/K/V in one c_attn), a norm before attention and one before the MLP,
// the head tied to the embedding unless the checkpoint stores lm_head.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/gpt2/gpt_architecture.h"

namespace flover {
namespace {

void Gpt2Layer(const GptConfig& c, int l, const DecoderShard& sh, DecoderLayerWeights& L,
               const DecoderRecipes::Visit& visit) {
  const int64_t C = c.n_embd, D = c.head_dim(), F = c.n_inner;
  const int64_t q0 = sh.q_head_begin * D, q1 = q0 + sh.q_heads * D;  // this rank's heads
  const int64_t f0 = sh.inner_begin, f1 = f0 + sh.inner;
  // Row-split layers' biases: added once, by rank 0.
  auto replicated_bias = [&](std::string name) {
    return sh.adds_replicated_bias ? Whole(std::move(name), {C}) : Zeros(C);
  };
  const std::string h = absl::StrCat("h.", l, ".");
  visit(Whole(h + "ln_1.weight", {C}), &L.norm1);
  visit(Whole(h + "ln_1.bias", {C}), &L.norm1_b);
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
}

}  // namespace

const GptArchitecture& Gpt2Arch() {
  static const GptArchitecture entry = [] {
    GptArchitecture a;
    a.model_type = "gpt2";
    a.position_table = true;
    a.tied_unless_stored = true;
    a.layer_parameters = [](const GptConfig& c) {
      const int64_t C = c.n_embd, F = c.n_inner;
      return 4 * C + (C * 3 * C + 3 * C) + (C * C + C) + (C * F + F) + (F * C + C);
    };
    a.spec = [](const GptConfig&, DecoderSpec* s) {
      s->block = DecoderSpec::Block::kSequential;
      s->layout = kernels::WeightLayout::kInOut;
      s->position_table = true;
    };
    a.layer = Gpt2Layer;
    return a;
  }();
  return entry;
}

}  // namespace flover
