// GPT-J: rotary embeddings on the first rotary_dim dims of each head in
// interleaved pairs (base 10000, as transformers' create_sinusoidal_positions),
// attention and MLP side by side on one LayerNorm, nn.Linear matrices
// [out, in] without attention biases, a separate head with a bias.
#include <string>

#include "absl/strings/str_cat.h"
#include "model/decoder/rotary.h"
#include "model/gpt2/gpt_architecture.h"
#include "util/json.h"

namespace flover {
namespace {

absl::Status ParseGptJ(const google::protobuf::Struct& s, absl::string_view what, GptConfig* c) {
  // rotary_dim: null turns the whole head; absent, GPTJConfig's 64.
  auto it = s.fields().find("rotary_dim");
  if (it == s.fields().end()) {
    c->rotary_dim = 64;
  } else if (it->second.kind_case() != google::protobuf::Value::kNullValue) {
    auto v = JsonIntField(s, "rotary_dim", 1, 1 << 16, what);
    if (!v.ok()) return v.status();
    c->rotary_dim = static_cast<int>(*v);
  }
  c->tie_word_embeddings = JsonBoolField(s, "tie_word_embeddings", false);
  return absl::OkStatus();
}

void GptJLayer(const GptConfig& c, int l, const DecoderShard& sh, DecoderLayerWeights& L,
               const DecoderRecipes::Visit& visit) {
  const int64_t C = c.n_embd, D = c.head_dim(), F = c.n_inner;
  const int64_t q0 = sh.q_head_begin * D, q1 = q0 + sh.q_heads * D;  // this rank's heads
  const int64_t f0 = sh.inner_begin, f1 = f0 + sh.inner;
  const std::string h = absl::StrCat("h.", l, ".");
  visit(Whole(h + "ln_1.weight", {C}), &L.norm1);
  visit(Whole(h + "ln_1.bias", {C}), &L.norm1_b);
  // nn.Linear [out, in]; one norm for attention and MLP.
  visit(Stack(WeightRecipe::kRows, {RowSlice(h + "attn.q_proj.weight", {C, C}, q0, q1),
                                    RowSlice(h + "attn.k_proj.weight", {C, C}, q0, q1),
                                    RowSlice(h + "attn.v_proj.weight", {C, C}, q0, q1)}),
        &L.qkv);
  visit(ColSlice(h + "attn.out_proj.weight", {C, C}, q0, q1), &L.o);
  visit(RowSlice(h + "mlp.fc_in.weight", {F, C}, f0, f1), &L.up);
  visit(ColSlice(h + "mlp.fc_in.bias", {F}, f0, f1), &L.up_b);
  visit(ColSlice(h + "mlp.fc_out.weight", {C, F}, f0, f1), &L.down);
  // A row-split layer's bias: added once, by rank 0.
  visit(sh.adds_replicated_bias ? Whole(h + "mlp.fc_out.bias", {C}) : Zeros(C), &L.down_b);
}

}  // namespace

const GptArchitecture& GptJArch() {
  static const GptArchitecture entry = [] {
    GptArchitecture a;
    a.model_type = "gptj";
    a.head_bias = true;
    a.parse = ParseGptJ;
    a.layer_parameters = [](const GptConfig& c) {
      const int64_t C = c.n_embd, F = c.n_inner;
      return 2 * C + 4 * C * C + (C * F + F) + (F * C + C);
    };
    a.spec = [](const GptConfig& c, DecoderSpec* s) {
      s->block = DecoderSpec::Block::kParallel;
      s->layout = kernels::WeightLayout::kOutIn;
      s->inv_freq = RotaryInvFreq(10000.0f, c.rotary_dim > 0 ? c.rotary_dim : c.head_dim());
      s->rope_style = kernels::RopeStyle::kInterleaved;
    };
    a.layer = GptJLayer;
    return a;
  }();
  return entry;
}

}  // namespace flover
