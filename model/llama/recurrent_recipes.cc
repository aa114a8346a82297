// The recurrent layers' recipes. A rank takes whole heads of the gated delta
// net (key heads k0..k1 and the value heads that read them, which are
// together in transformers' checkpoints and tiled in llama.cpp's files: value
// head h reads key head h % Hk there) and a band of the short convolution's
// channels; each tensor's rows (or, for the output projection, columns) of
// those heads or channels.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/llama/llama_family.h"

namespace flover {
namespace {

// The rank's value heads as runs [first, end) of consecutive heads.
std::vector<std::pair<int64_t, int64_t>> ValueHeadRuns(const LlamaConfig& c, const DecoderShard& sh) {
  if (!c.linear_tiled) return {{sh.dn_v_head_begin, sh.dn_v_head_begin + sh.dn_v_heads}};
  // Tiled: head m * Hk + g reads key head g, for each of the Hv / Hk rounds m.
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t m = 0; m < c.linear_v_heads / c.linear_k_heads; ++m) {
    const int64_t first = m * c.linear_k_heads + sh.dn_k_head_begin;
    runs.push_back({first, first + sh.dn_k_heads});
  }
  return runs;
}

// Rows (or columns) [offset + head * size, ...) of each run of heads, stacked.
WeightRecipe Heads(const std::string& tensor, const std::vector<int64_t>& shape, WeightRecipe::Axis axis,
                   int64_t offset, int64_t size, const std::vector<std::pair<int64_t, int64_t>>& runs) {
  std::vector<WeightRecipe> parts;
  for (auto [first, end] : runs) {
    const int64_t b = offset + first * size, e = offset + end * size;
    parts.push_back(axis == WeightRecipe::kRows ? RowSlice(tensor, shape, b, e) : ColSlice(tensor, shape, b, e));
  }
  return parts.size() == 1 ? std::move(parts[0]) : Stack(axis, std::move(parts));
}

void DeltaNetRecipes(const LlamaConfig& c, const std::string& p, const DecoderShard& sh, DecoderLayerWeights& L,
                     const DecoderRecipes::Visit& visit) {
  const int64_t C = c.hidden, dk = c.linear_k_dim, dv = c.linear_v_dim, Hk = c.linear_k_heads,
                Hv = c.linear_v_heads, Kd = Hk * dk, Vd = Hv * dv, channels = 2 * Kd + Vd, K = c.conv_kernel;
  const std::vector<std::pair<int64_t, int64_t>> keys = {{sh.dn_k_head_begin, sh.dn_k_head_begin + sh.dn_k_heads}};
  const std::vector<std::pair<int64_t, int64_t>> values = ValueHeadRuns(c, sh);
  // The convolution's channels, as in_proj_qkv's rows: this rank's Q key
  // heads, its K key heads, its value heads.
  auto channel_rows = [&](const std::string& tensor, const std::vector<int64_t>& shape) {
    std::vector<WeightRecipe> parts = {Heads(tensor, shape, WeightRecipe::kRows, 0, dk, keys),
                                       Heads(tensor, shape, WeightRecipe::kRows, Kd, dk, keys),
                                       Heads(tensor, shape, WeightRecipe::kRows, 2 * Kd, dv, values)};
    return Stack(WeightRecipe::kRows, std::move(parts));
  };
  const std::string a = p + "linear_attn.";
  visit(channel_rows(a + "in_proj_qkv.weight", {channels, C}), &L.in_x);
  visit(channel_rows(a + "conv1d.weight", {channels, 1, K}), &L.conv);
  visit(Heads(a + "in_proj_z.weight", {Vd, C}, WeightRecipe::kRows, 0, dv, values), &L.in_gate);
  visit(Heads(a + "in_proj_b.weight", {Hv, C}, WeightRecipe::kRows, 0, 1, values), &L.in_b);
  visit(Heads(a + "in_proj_a.weight", {Hv, C}, WeightRecipe::kRows, 0, 1, values), &L.in_a);
  visit(Heads(a + "A_log", {Hv}, WeightRecipe::kCols, 0, 1, values), &L.decay_a);
  visit(Heads(a + "dt_bias", {Hv}, WeightRecipe::kCols, 0, 1, values), &L.dt_bias);
  visit(Whole(a + "norm.weight", {dv}), &L.mixer_norm);  // w, not (1 + w)
  visit(Heads(a + "out_proj.weight", {C, Vd}, WeightRecipe::kCols, 0, dv, values), &L.o);
}

void ShortConvRecipes(const LlamaConfig& c, const std::string& p, const DecoderShard& sh, DecoderLayerWeights& L,
                      const DecoderRecipes::Visit& visit) {
  const int64_t C = c.hidden, c0 = sh.conv_channel_begin, c1 = c0 + sh.conv_channels;
  // in_proj: [3C, C], B's rows, C's, then x's.
  const std::string in = p + "conv.in_proj.weight";
  visit(RowSlice(in, {3 * C, C}, c0, c1), &L.in_b);
  visit(RowSlice(in, {3 * C, C}, C + c0, C + c1), &L.in_gate);
  visit(RowSlice(in, {3 * C, C}, 2 * C + c0, 2 * C + c1), &L.in_x);
  visit(RowSlice(p + "conv.conv.weight", {C, 1, c.conv_kernel}, c0, c1), &L.conv);
  visit(ColSlice(p + "conv.out_proj.weight", {C, C}, c0, c1), &L.o);
}

}  // namespace

void RecurrentLayerRecipes(const LlamaConfig& c, int l, const DecoderShard& sh, DecoderLayerWeights& L,
                           const DecoderRecipes::Visit& visit) {
  const std::string p = absl::StrCat("model.layers.", l, ".");
  if (c.layer_kind(l) == LlamaConfig::LayerKind::kLinearAttention) {
    DeltaNetRecipes(c, p, sh, L, visit);
  } else {
    ShortConvRecipes(c, p, sh, L, visit);
  }
}

}  // namespace flover
