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
  // Tiled: head m * Hk + g reads key head g, for each of the Hv / Hk rounds m;
  // runs that meet are one (every key head's: all the value heads, so that a
  // whole out_proj stays one tensor's columns, in its GGUF blocks).
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t m = 0; m < c.linear_v_heads / c.linear_k_heads; ++m) {
    const int64_t first = m * c.linear_k_heads + sh.dn_k_head_begin;
    if (!runs.empty() && runs.back().second == first) {
      runs.back().second = first + sh.dn_k_heads;
    } else {
      runs.push_back({first, first + sh.dn_k_heads});
    }
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
  // Rows [offset, offset + n) of each of this rank's key heads' blocks of
  // `block` rows (Qwen3-Next's projections, packed per key head), stacked.
  auto per_key_head = [&](const std::string& tensor, int64_t block, int64_t offset, int64_t n) {
    std::vector<WeightRecipe> parts;
    for (int64_t g = sh.dn_k_head_begin; g < sh.dn_k_head_begin + sh.dn_k_heads; ++g) {
      parts.push_back(RowSlice(tensor, {Hk * block, C}, g * block + offset, g * block + offset + n));
    }
    return Stack(WeightRecipe::kRows, std::move(parts));
  };
  const int64_t r = Hv / Hk;  // value heads per key head
  if (c.linear_qkvz_packed) {  // each key head's [q | k | v | z]
    const std::string qkvz = a + "in_proj_qkvz.weight";
    const int64_t block = 2 * dk + 2 * r * dv;
    visit(Stack(WeightRecipe::kRows, {per_key_head(qkvz, block, 0, dk), per_key_head(qkvz, block, dk, dk),
                                      per_key_head(qkvz, block, 2 * dk, r * dv)}),
          &L.in_x);
    visit(per_key_head(qkvz, block, 2 * dk + r * dv, r * dv), &L.in_gate);
  } else {
    visit(channel_rows(a + "in_proj_qkv.weight", {channels, C}), &L.in_x);
    visit(Heads(a + "in_proj_z.weight", {Vd, C}, WeightRecipe::kRows, 0, dv, values), &L.in_gate);
  }
  visit(channel_rows(a + "conv1d.weight", {channels, 1, K}), &L.conv);
  if (c.linear_ba_packed) {  // each key head's [b | a]
    visit(per_key_head(a + "in_proj_ba.weight", 2 * r, 0, r), &L.in_b);
    visit(per_key_head(a + "in_proj_ba.weight", 2 * r, r, r), &L.in_a);
  } else {
    visit(Heads(a + "in_proj_b.weight", {Hv, C}, WeightRecipe::kRows, 0, 1, values), &L.in_b);
    visit(Heads(a + "in_proj_a.weight", {Hv, C}, WeightRecipe::kRows, 0, 1, values), &L.in_a);
  }
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

// Mamba-2 on this rank's groups and their heads: in_proj's rows [z | x | B |
// C | dt] (z and x by heads, B and C by groups, dt by heads), the
// convolution's channels [x | B | C] the same way, the heads' A, D and
// dt_bias, the norm's and out_proj's channels.
void Mamba2Recipes(const LlamaConfig& c, const std::string& p, const DecoderShard& sh, DecoderLayerWeights& L,
                   const DecoderRecipes::Visit& visit) {
  const int64_t C = c.hidden, P = c.mamba_head_dim, N = c.mamba_state, H = c.mamba_heads, G = c.mamba_groups,
                D = H * P, channels = D + 2 * G * N, K = c.conv_kernel;
  const int64_t h0 = sh.mamba_head_begin, h1 = h0 + sh.mamba_heads;
  const int64_t g0 = sh.mamba_group_begin, g1 = g0 + sh.mamba_groups;
  const std::string m = p + "mamba.";
  const std::string in = m + "in_proj.weight";
  const std::vector<int64_t> in_shape = {D + channels + H, C};
  // The convolution's channels of this rank, at `at` within `rows` rows.
  auto xbc = [&](const std::string& tensor, const std::vector<int64_t>& shape, int64_t at, WeightRecipe::Axis axis) {
    auto slice = [&](int64_t b, int64_t e) {
      return axis == WeightRecipe::kRows ? RowSlice(tensor, shape, at + b, at + e) : ColSlice(tensor, shape, at + b, at + e);
    };
    return Stack(axis, {slice(h0 * P, h1 * P), slice(D + g0 * N, D + g1 * N), slice(D + G * N + g0 * N, D + G * N + g1 * N)});
  };
  visit(xbc(in, in_shape, D, WeightRecipe::kRows), &L.in_x);
  visit(RowSlice(in, in_shape, h0 * P, h1 * P), &L.in_gate);
  visit(RowSlice(in, in_shape, D + channels + h0, D + channels + h1), &L.in_a);
  visit(xbc(m + "conv1d.weight", {channels, 1, K}, 0, WeightRecipe::kRows), &L.conv);
  if (c.mamba_conv_bias) visit(xbc(m + "conv1d.bias", {channels}, 0, WeightRecipe::kCols), &L.conv_b);
  visit(ColSlice(m + "A_log", {H}, h0, h1), &L.decay_a);
  visit(ColSlice(m + "D", {H}, h0, h1), &L.d_skip);
  visit(ColSlice(m + "dt_bias", {H}, h0, h1), &L.dt_bias);
  visit(ColSlice(m + "norm.weight", {D}, h0 * P, h1 * P), &L.mixer_norm);
  visit(ColSlice(m + "out_proj.weight", {C, D}, h0 * P, h1 * P), &L.o);
}

}  // namespace

void RecurrentLayerRecipes(const LlamaConfig& c, int l, const DecoderShard& sh, DecoderLayerWeights& L,
                           const DecoderRecipes::Visit& visit) {
  const std::string p = absl::StrCat("model.layers.", l, ".");
  if (c.layer_kind(l) == LlamaConfig::LayerKind::kLinearAttention) {
    DeltaNetRecipes(c, p, sh, L, visit);
  } else if (c.layer_kind(l) == LlamaConfig::LayerKind::kMamba2) {
    Mamba2Recipes(c, p, sh, L, visit);
  } else {
    ShortConvRecipes(c, p, sh, L, visit);
  }
}

}  // namespace flover
