#include "model/vision/qwen3_vl_vision.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/loader/checkpoint.h"
#include "model/vision/random_weights.h"
#include "model/loader/gguf.h"
#include "model/vision/gguf_fields.h"
#include "model/vision/vision_encoder.h"
#include "util/file_util.h"
#include "util/json.h"
#include "util/status_macros.h"

namespace flover {

using kernels::Buffer;
using KDType = kernels::DType;
using kernels::Epilogue;
using kernels::Tensor;
using kernels::Weight;
using kernels::WeightLayout;

struct Qwen3VlVision::Layer {
  Buffer ln1_gamma, ln1_beta, ln2_gamma, ln2_beta;
  std::unique_ptr<Weight> qkv, proj, fc1, fc2;
  Buffer qkv_bias, proj_bias, fc1_bias, fc2_bias;
};

struct Qwen3VlVision::Merger {
  bool norm_after_join = false;  // the deepstack mergers' LayerNorm is over the joined row
  Buffer gamma, beta;
  std::unique_ptr<Weight> fc1, fc2;
  Buffer fc1_bias, fc2_bias;
};

Qwen3VlVision::Qwen3VlVision(kernels::Backend& backend, Qwen3VlVisionInfo info)
    : backend_(backend), info_(std::move(info)) {
  encoder_info_.image_token = info_.image_token;
  encoder_info_.out_width = info_.out_width;
  encoder_info_.given_layers = static_cast<int>(info_.deepstack.size());
  encoder_info_.grid_positions = true;
  encoder_info_.merge = info_.merge;
}
Qwen3VlVision::~Qwen3VlVision() = default;

namespace {

using google::protobuf::Struct;

constexpr const char* kTower = "model.visual.";
constexpr float kNormEps = 1e-6f;  // Qwen3VLVisionBlock's and the mergers' LayerNorms

absl::StatusOr<Qwen3VlVisionInfo> ParseQwen3VlVision(const Struct& top, const std::string& what) {
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(what, ": ", m...)); };
  const Struct* v = JsonObjectField(top, "vision_config");
  const Struct* text = JsonObjectField(top, "text_config");
  if (v == nullptr || text == nullptr) return refuse("a Qwen3-VL-style model needs vision_config and text_config");
  Qwen3VlVisionInfo info;
  FLOVER_ASSIGN_OR_RETURN(info.patch, JsonIntFieldOr(*v, "patch_size", 16, 1, 256, what));
  FLOVER_ASSIGN_OR_RETURN(info.temporal, JsonIntFieldOr(*v, "temporal_patch_size", 2, 1, 16, what));
  FLOVER_ASSIGN_OR_RETURN(info.merge, JsonIntFieldOr(*v, "spatial_merge_size", 2, 1, 16, what));
  FLOVER_ASSIGN_OR_RETURN(info.channels, JsonIntFieldOr(*v, "in_channels", 3, 3, 3, what));
  FLOVER_ASSIGN_OR_RETURN(info.hidden, JsonIntFieldOr(*v, "hidden_size", 1152, 1, 1 << 14, what));
  FLOVER_ASSIGN_OR_RETURN(info.heads, JsonIntFieldOr(*v, "num_heads", 16, 1, 256, what));
  FLOVER_ASSIGN_OR_RETURN(info.layers, JsonIntFieldOr(*v, "depth", 27, 1, 256, what));
  FLOVER_ASSIGN_OR_RETURN(info.intermediate, JsonIntFieldOr(*v, "intermediate_size", 4304, 1, 1 << 16, what));
  FLOVER_ASSIGN_OR_RETURN(const int64_t positions, JsonIntFieldOr(*v, "num_position_embeddings", 2304, 1, 1 << 20, what));
  info.positions_side = static_cast<int>(std::lround(std::sqrt(static_cast<double>(positions))));
  if (int64_t{info.positions_side} * info.positions_side != positions) {
    return refuse("vision_config.num_position_embeddings ", positions, " is not a square");
  }
  if (auto act = v->fields().find("hidden_act");
      act != v->fields().end() && act->second.string_value() != "gelu_pytorch_tanh") {
    return refuse("vision_config.hidden_act \"", act->second.string_value(), "\" is not supported (gelu_pytorch_tanh)");
  }
  if (info.hidden % info.heads != 0 || info.head_dim() % 4 != 0) {
    return refuse("vision_config.hidden_size ", info.hidden, " is not ", info.heads,
                  " heads of a dim divisible by 4 (the 2-D rotary's)");
  }
  if (const Struct* rope = JsonObjectField(*v, "rope_parameters"); rope != nullptr) {
    FLOVER_ASSIGN_OR_RETURN(const double theta, JsonNumberField(*rope, "rope_theta", 10000.0, what));
    if (!(theta > 1)) return refuse("vision_config.rope_parameters.rope_theta must be > 1");
    info.rope_theta = static_cast<float>(theta);
  }
  std::vector<int32_t> deepstack;
  FLOVER_RETURN_IF_ERROR(JsonIntListField(*v, "deepstack_visual_indexes", 0, info.layers - 1,
                                          absl::StrCat(what, ": vision_config"), &deepstack));
  info.deepstack.assign(deepstack.begin(), deepstack.end());
  FLOVER_ASSIGN_OR_RETURN(info.out_width, JsonIntFieldOr(*v, "out_hidden_size", 3584, 1, 1 << 17, what));
  FLOVER_ASSIGN_OR_RETURN(const int64_t text_hidden, JsonIntField(*text, "hidden_size", 1, 1 << 17, what));
  if (text_hidden != info.out_width) {
    return refuse("vision_config.out_hidden_size ", info.out_width, " is not text_config.hidden_size ", text_hidden);
  }
  FLOVER_ASSIGN_OR_RETURN(info.image_token, JsonIntFieldOr(top, "image_token_id", 151655, 0, (1 << 24) - 1, what));
  return info;
}

// GELU (erf), in place: the mergers' nn.GELU().
void GeluErf(std::vector<float>& v) {
  for (float& x : v) x = static_cast<float>(0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))));
}

}  // namespace

bool TakesQwen3VlVision(absl::string_view model_type) {
  return model_type == "qwen3_vl" || model_type == "qwen3_5" || model_type == "qwen3_5_moe";
}

absl::StatusOr<std::unique_ptr<ImageEncoder>> LoadImageEncoder(const std::string& dir, kernels::Backend& backend) {
  const std::string what = dir + "/config.json";
  FLOVER_ASSIGN_OR_RETURN(const std::string text, ReadFile(what));
  FLOVER_ASSIGN_OR_RETURN(const Struct top, ParseJsonObject(text, what));
  auto type = top.fields().find("model_type");
  if (type != top.fields().end() && TakesQwen3VlVision(type->second.string_value())) {
    FLOVER_ASSIGN_OR_RETURN(std::unique_ptr<Qwen3VlVision> q, Qwen3VlVision::Load(dir, backend));
    return std::unique_ptr<ImageEncoder>(std::move(q));
  }
  FLOVER_ASSIGN_OR_RETURN(std::unique_ptr<VisionEncoder> e, VisionEncoder::Load(dir, backend));
  return std::unique_ptr<ImageEncoder>(std::move(e));
}

absl::StatusOr<std::unique_ptr<Qwen3VlVision>> Qwen3VlVision::Load(const std::string& dir, kernels::Backend& backend) {
  const std::string what = dir + "/config.json";
  FLOVER_ASSIGN_OR_RETURN(const std::string text, ReadFile(what));
  FLOVER_ASSIGN_OR_RETURN(const Struct top, ParseJsonObject(text, what));
  FLOVER_ASSIGN_OR_RETURN(const Qwen3VlVisionInfo info, ParseQwen3VlVision(top, what));
  FLOVER_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::Open(dir));
  return Build(info, backend, [&](const std::string& name, const std::vector<int64_t>& shape) {
    return ckpt.ReadFloat(name, shape);
  });
}

absl::StatusOr<std::unique_ptr<Qwen3VlVision>> Qwen3VlVision::LoadGguf(const std::string& path, int image_token,
                                                                       kernels::Backend& backend) {
  FLOVER_ASSIGN_OR_RETURN(GgufFile f, GgufFile::Open(path));
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(path, ": ", m...)); };
  auto projector = f.GetString("clip.projector_type");
  if (!projector.ok() || *projector != "qwen3vl_merger") {
    return absl::NotFoundError(absl::StrCat(path, ": not a Qwen3-VL projector (clip.projector_type ",
                                            projector.ok() ? *projector : "absent", ")"));
  }
  Qwen3VlVisionInfo info;
  FLOVER_ASSIGN_OR_RETURN(info.patch, GgufIntIn(f, "clip.vision.patch_size", std::nullopt, 1, 256));
  FLOVER_ASSIGN_OR_RETURN(info.hidden, GgufIntIn(f, "clip.vision.embedding_length", std::nullopt, 1, 1 << 14));
  FLOVER_ASSIGN_OR_RETURN(info.intermediate, GgufIntIn(f, "clip.vision.feed_forward_length", std::nullopt, 1, 1 << 16));
  FLOVER_ASSIGN_OR_RETURN(info.layers, GgufIntIn(f, "clip.vision.block_count", std::nullopt, 1, 256));
  FLOVER_ASSIGN_OR_RETURN(info.heads, GgufIntIn(f, "clip.vision.attention.head_count", std::nullopt, 1, 256));
  FLOVER_ASSIGN_OR_RETURN(info.out_width, GgufIntIn(f, "clip.vision.projection_dim", std::nullopt, 1, 1 << 17));
  FLOVER_ASSIGN_OR_RETURN(const int64_t merge, f.GetIntOr("clip.vision.spatial_merge_size", 2));
  if (merge < 1 || merge > 16) return refuse("clip.vision.spatial_merge_size ", merge, " is out of range");
  info.merge = static_cast<int>(merge);
  if (info.hidden % info.heads != 0 || info.head_dim() % 4 != 0) {
    return refuse("clip.vision.embedding_length ", info.hidden, " is not ", info.heads,
                  " heads of a dim divisible by 4");
  }
  if (const GgufValue* deep = f.Find("clip.vision.is_deepstack_layers"); deep != nullptr) {
    if (deep->integers.size() != static_cast<size_t>(info.layers)) {
      return refuse("clip.vision.is_deepstack_layers has ", deep->integers.size(), " marks for ", info.layers,
                    " blocks");
    }
    for (int l = 0; l < info.layers; ++l) {
      if (deep->integers[l] != 0) info.deepstack.push_back(l);
    }
  }
  const GgufTensor* pos = f.FindTensor("v.position_embd.weight");
  if (pos == nullptr) return refuse("has no v.position_embd.weight");
  info.positions_side = static_cast<int>(std::lround(std::sqrt(static_cast<double>(pos->rows()))));
  if (int64_t{info.positions_side} * info.positions_side != pos->rows()) {
    return refuse("v.position_embd.weight's ", pos->rows(), " positions are not a square");
  }
  info.image_token = image_token;
  // The tower's tensors by Hugging Face's names, from llama.cpp's.
  auto tensor = [&](const std::string& name, int64_t n) -> absl::StatusOr<std::vector<float>> {
    const GgufTensor* t = f.FindTensor(name);
    if (t == nullptr) return refuse("has no tensor ", name);
    if (t->rows() * t->cols() != n) return refuse(name, " has ", t->rows() * t->cols(), " values, not ", n);
    return f.ReadRows(*t, 0, t->rows());
  };
  const std::string hf = kTower;
  const int D = info.hidden, P = info.patch;
  return Build(info, backend, [&](const std::string& name, const std::vector<int64_t>& shape) -> absl::StatusOr<std::vector<float>> {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    if (name == hf + "patch_embed.proj.weight") {
      // Two 2-D kernels, one a frame, into the (channel, frame, y, x) order.
      FLOVER_ASSIGN_OR_RETURN(std::vector<float> t0, tensor("v.patch_embd.weight", n / 2));
      FLOVER_ASSIGN_OR_RETURN(std::vector<float> t1, tensor("v.patch_embd.weight.1", n / 2));
      std::vector<float> w(n);
      const int64_t plane = int64_t{P} * P;
      for (int64_t o = 0; o < int64_t{D} * info.channels; ++o) {
        std::copy_n(t0.data() + o * plane, plane, w.data() + (2 * o) * plane);
        std::copy_n(t1.data() + o * plane, plane, w.data() + (2 * o + 1) * plane);
      }
      return w;
    }
    std::string g;
    const std::string rest = name.substr(hf.size());
    static const std::pair<const char*, const char*> kNames[] = {
        {"patch_embed.proj.bias", "v.patch_embd.bias"}, {"pos_embed.weight", "v.position_embd.weight"},
        {"merger.norm.", "v.post_ln."},                 {"merger.linear_fc1.", "mm.0."},
        {"merger.linear_fc2.", "mm.2."},
    };
    for (const auto& [from, to] : kNames) {
      if (rest.rfind(from, 0) == 0) g = to + rest.substr(std::string(from).size());
    }
    if (g.empty() && rest.rfind("blocks.", 0) == 0) {
      const size_t dot = rest.find('.', 7);
      const std::string l = rest.substr(7, dot - 7), part = rest.substr(dot + 1);
      static const std::pair<const char*, const char*> kBlock[] = {
          {"norm1.", "ln1."}, {"norm2.", "ln2."}, {"attn.qkv.", "attn_qkv."}, {"attn.proj.", "attn_out."},
          {"mlp.linear_fc1.", "ffn_up."}, {"mlp.linear_fc2.", "ffn_down."},
      };
      for (const auto& [from, to] : kBlock) {
        if (part.rfind(from, 0) == 0) g = "v.blk." + l + "." + to + part.substr(std::string(from).size());
      }
    }
    if (g.empty() && rest.rfind("deepstack_merger_list.", 0) == 0) {
      // By the block whose rows it takes: v.deepstack.<block>.
      const size_t dot = rest.find('.', 22);
      const int j = std::stoi(rest.substr(22, dot - 22));
      std::string part = rest.substr(dot + 1);
      for (const auto& [from, to] : {std::pair{"linear_fc1.", "fc1."}, std::pair{"linear_fc2.", "fc2."}}) {
        if (part.rfind(from, 0) == 0) part = to + part.substr(std::string(from).size());
      }
      g = absl::StrCat("v.deepstack.", info.deepstack[j], ".", part);
    }
    if (g.empty()) return refuse("no tensor stands for ", name);
    return tensor(g, n);
  });
}

absl::StatusOr<std::unique_ptr<Qwen3VlVision>> Qwen3VlVision::Random(const Qwen3VlVisionInfo& info,
                                                                     kernels::Backend& backend, uint64_t seed) {
  return Build(info, backend, [&](const std::string& name, const std::vector<int64_t>& shape) {
    return absl::StatusOr<std::vector<float>>(RandomTowerWeights(name, shape, seed));
  });
}

absl::StatusOr<std::unique_ptr<Qwen3VlVision>> Qwen3VlVision::Build(const Qwen3VlVisionInfo& info,
                                                                    kernels::Backend& backend, const Reader& read) {
  std::unique_ptr<Qwen3VlVision> e(new Qwen3VlVision(backend, info));
  const int64_t D = info.hidden, F = info.intermediate, K = info.patch_values();
  const int64_t J = D * info.merge * info.merge;  // a merged row: the block's patches joined
  auto up = [&](const std::vector<float>& values, int64_t rows, int64_t cols) -> absl::StatusOr<Buffer> {
    FLOVER_ASSIGN_OR_RETURN(Buffer b, backend.Allocate(KDType::kF32, rows, cols));
    FLOVER_RETURN_IF_ERROR(backend.Upload(values.data(), b.tensor()));
    return b;
  };
  auto linear = [&](const std::string& name, int64_t in, int64_t out) -> absl::StatusOr<std::unique_ptr<Weight>> {
    FLOVER_ASSIGN_OR_RETURN(std::vector<float> w, read(name, {out, in}));
    return backend.PrepareWeight(w.data(), static_cast<int>(in), static_cast<int>(out), WeightLayout::kOutIn);
  };
  auto vector = [&](const std::string& name, int64_t n) -> absl::StatusOr<Buffer> {
    FLOVER_ASSIGN_OR_RETURN(std::vector<float> v, read(name, {n}));
    return up(v, 1, n);
  };
  const std::string t = kTower;
  // The patch convolution (kernel = stride) as a product over each patch's
  // values in (channel, frame, y, x) order.
  FLOVER_ASSIGN_OR_RETURN(std::vector<float> conv,
                          read(t + "patch_embed.proj.weight", {D, info.channels, info.temporal, info.patch, info.patch}));
  FLOVER_ASSIGN_OR_RETURN(e->patch_, backend.PrepareWeight(conv.data(), static_cast<int>(K), static_cast<int>(D),
                                                           WeightLayout::kOutIn));
  FLOVER_ASSIGN_OR_RETURN(e->patch_bias_, vector(t + "patch_embed.proj.bias", D));
  const int64_t P = int64_t{info.positions_side} * info.positions_side;
  FLOVER_ASSIGN_OR_RETURN(e->position_table_, read(t + "pos_embed.weight", {P, D}));
  // The 2-D rotary: frequency i < Dh/4 by the patch's row, the next Dh/4
  // (the same frequencies) by its column (transformers' axial rope).
  const int quarter = info.head_dim() / 4;
  std::vector<float> inv(2 * quarter);
  for (int i = 0; i < quarter; ++i) {
    inv[i] = inv[quarter + i] =
        static_cast<float>(1.0 / std::pow(static_cast<double>(info.rope_theta), 2.0 * i / (2 * quarter)));
  }
  FLOVER_ASSIGN_OR_RETURN(e->inv_freq_, up(inv, 1, 2 * quarter));
  for (int l = 0; l < info.layers; ++l) {
    const std::string p = absl::StrCat(t, "blocks.", l, ".");
    Layer layer;
    FLOVER_ASSIGN_OR_RETURN(layer.ln1_gamma, vector(p + "norm1.weight", D));
    FLOVER_ASSIGN_OR_RETURN(layer.ln1_beta, vector(p + "norm1.bias", D));
    FLOVER_ASSIGN_OR_RETURN(layer.ln2_gamma, vector(p + "norm2.weight", D));
    FLOVER_ASSIGN_OR_RETURN(layer.ln2_beta, vector(p + "norm2.bias", D));
    FLOVER_ASSIGN_OR_RETURN(layer.qkv, linear(p + "attn.qkv.weight", D, 3 * D));
    FLOVER_ASSIGN_OR_RETURN(layer.qkv_bias, vector(p + "attn.qkv.bias", 3 * D));
    FLOVER_ASSIGN_OR_RETURN(layer.proj, linear(p + "attn.proj.weight", D, D));
    FLOVER_ASSIGN_OR_RETURN(layer.proj_bias, vector(p + "attn.proj.bias", D));
    FLOVER_ASSIGN_OR_RETURN(layer.fc1, linear(p + "mlp.linear_fc1.weight", D, F));
    FLOVER_ASSIGN_OR_RETURN(layer.fc1_bias, vector(p + "mlp.linear_fc1.bias", F));
    FLOVER_ASSIGN_OR_RETURN(layer.fc2, linear(p + "mlp.linear_fc2.weight", F, D));
    FLOVER_ASSIGN_OR_RETURN(layer.fc2_bias, vector(p + "mlp.linear_fc2.bias", D));
    e->layers_.push_back(std::move(layer));
  }
  for (size_t m = 0; m <= info.deepstack.size(); ++m) {
    const std::string p = m == 0 ? t + "merger." : absl::StrCat(t, "deepstack_merger_list.", m - 1, ".");
    Merger merger;
    merger.norm_after_join = m > 0;
    const int64_t normed = m > 0 ? J : D;
    FLOVER_ASSIGN_OR_RETURN(merger.gamma, vector(p + "norm.weight", normed));
    FLOVER_ASSIGN_OR_RETURN(merger.beta, vector(p + "norm.bias", normed));
    FLOVER_ASSIGN_OR_RETURN(merger.fc1, linear(p + "linear_fc1.weight", J, J));
    FLOVER_ASSIGN_OR_RETURN(merger.fc1_bias, vector(p + "linear_fc1.bias", J));
    FLOVER_ASSIGN_OR_RETURN(merger.fc2, linear(p + "linear_fc2.weight", J, info.out_width));
    FLOVER_ASSIGN_OR_RETURN(merger.fc2_bias, vector(p + "linear_fc2.bias", info.out_width));
    e->mergers_.push_back(std::move(merger));
  }
  return e;
}

std::vector<float> Qwen3VlVision::GridPositions(int grid_h, int grid_w) const {
  const int S = info_.positions_side, m = info_.merge, D = info_.hidden;
  const int64_t N = int64_t{grid_h} * grid_w;
  // Along one axis of `size` patches: the two table rows and weights of
  // index i (F.interpolate bilinear, align_corners: ends to ends).
  auto taps = [&](int i, int size, int* a, int* b, double* wa, double* wb) {
    const double src = size > 1 ? static_cast<double>(i) * (S - 1) / (size - 1) : 0.0;
    const double f = std::floor(src);
    *a = std::min(static_cast<int>(f), S - 1);
    *b = std::min(static_cast<int>(f) + 1, S - 1);
    *wb = src - f;
    *wa = 1.0 - *wb;
  };
  std::vector<float> out(N * D);
  std::vector<double> acc(D);
  const int blocks_w = grid_w / m;
  for (int64_t k = 0; k < N; ++k) {
    // The processor's order: merge blocks row-major, then within a block.
    const int64_t block = k / (m * m), within = k % (m * m);
    const int row = static_cast<int>(block / blocks_w) * m + static_cast<int>(within / m);
    const int col = static_cast<int>(block % blocks_w) * m + static_cast<int>(within % m);
    int r0, r1, c0, c1;
    double wr0, wr1, wc0, wc1;
    taps(row, grid_h, &r0, &r1, &wr0, &wr1);
    taps(col, grid_w, &c0, &c1, &wc0, &wc1);
    std::fill(acc.begin(), acc.end(), 0.0);
    for (auto [r, wr] : {std::pair{r0, wr0}, std::pair{r1, wr1}}) {
      for (auto [c, wc] : {std::pair{c0, wc0}, std::pair{c1, wc1}}) {
        const float* src = position_table_.data() + (static_cast<int64_t>(r) * S + c) * D;
        const double w = wr * wc;
        for (int d = 0; d < D; ++d) acc[d] += w * src[d];
      }
    }
    for (int d = 0; d < D; ++d) out[k * D + d] = static_cast<float>(acc[d]);
  }
  return out;
}

absl::StatusOr<std::vector<float>> Qwen3VlVision::Merge(const Merger& m, const Tensor& rows, int64_t n) {
  const int64_t D = info_.hidden, J = D * info_.merge * info_.merge, M = n / (info_.merge * info_.merge);
  FLOVER_ASSIGN_OR_RETURN(Buffer normed, backend_.Allocate(KDType::kF32, n, D));
  FLOVER_ASSIGN_OR_RETURN(Buffer mid, backend_.Allocate(KDType::kF32, M, J));
  FLOVER_ASSIGN_OR_RETURN(Buffer out, backend_.Allocate(KDType::kF32, M, info_.out_width));
  // Each block's patches joined into one row: the rows' memory read as [M, J].
  const Tensor joined{normed.tensor().data, KDType::kF32, M, J};
  if (m.norm_after_join) {
    const Tensor in{rows.data, KDType::kF32, M, J};
    FLOVER_RETURN_IF_ERROR(backend_.LayerNorm(in, m.gamma.tensor(), m.beta.tensor(), kNormEps, joined));
  } else {
    FLOVER_RETURN_IF_ERROR(backend_.LayerNorm(rows, m.gamma.tensor(), m.beta.tensor(), kNormEps, normed.tensor()));
  }
  const Tensor b1 = m.fc1_bias.tensor(), b2 = m.fc2_bias.tensor();
  FLOVER_RETURN_IF_ERROR(backend_.Linear(joined, *m.fc1, &b1, Epilogue::kBias, mid.tensor()));
  // nn.GELU() (erf), which no backend epilogue computes: on the host.
  std::vector<float> act(M * J);
  FLOVER_RETURN_IF_ERROR(backend_.Download(mid.tensor(), act.data()));
  FLOVER_RETURN_IF_ERROR(backend_.Synchronize());
  GeluErf(act);
  FLOVER_RETURN_IF_ERROR(backend_.Upload(act.data(), mid.tensor()));
  FLOVER_RETURN_IF_ERROR(backend_.Linear(mid.tensor(), *m.fc2, &b2, Epilogue::kBias, out.tensor()));
  std::vector<float> result(M * info_.out_width);
  FLOVER_RETURN_IF_ERROR(backend_.Download(out.tensor(), result.data()));
  FLOVER_RETURN_IF_ERROR(backend_.Synchronize());
  return result;
}

// An image part way through the tower: its buffers, the rows after the
// blocks run so far, and the deepstack features made so far.
struct Qwen3VlVision::Job {
  uint64_t key = 0;
  int grid_h = 0, grid_w = 0;
  int64_t N = 0;
  int next_block = 0;
  Buffer x, h, qkv, att, mlp, pos;
  Stages stages;
};

absl::StatusOr<std::unique_ptr<Qwen3VlVision::Job>> Qwen3VlVision::Start(absl::Span<const float> patches, int grid_h,
                                                                          int grid_w) {
  const int m = info_.merge;
  const int64_t N = int64_t{grid_h} * grid_w, K = info_.patch_values(), D = info_.hidden, F = info_.intermediate;
  if (grid_h < m || grid_w < m || grid_h % m != 0 || grid_w % m != 0 || N > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("vision tower: a grid of ", grid_h, " x ", grid_w,
                                                   " patches is not whole blocks of ", m, " x ", m));
  }
  if (patches.size() != static_cast<size_t>(N * K)) {
    return absl::InvalidArgumentError(absl::StrCat("vision tower: ", N, " patches need ", N * K, " values, got ",
                                                   patches.size()));
  }
  auto job = std::make_unique<Job>();
  job->grid_h = grid_h;
  job->grid_w = grid_w;
  job->N = N;
  auto alloc = [&](int64_t cols) { return backend_.Allocate(KDType::kF32, N, cols); };
  FLOVER_ASSIGN_OR_RETURN(Buffer in, alloc(K));
  FLOVER_ASSIGN_OR_RETURN(job->x, alloc(D));
  FLOVER_ASSIGN_OR_RETURN(job->h, alloc(D));
  FLOVER_ASSIGN_OR_RETURN(job->qkv, alloc(3 * D));
  FLOVER_ASSIGN_OR_RETURN(job->att, alloc(D));
  FLOVER_ASSIGN_OR_RETURN(job->mlp, alloc(F));
  FLOVER_ASSIGN_OR_RETURN(job->pos, backend_.Allocate(KDType::kI32, 3, N));
  FLOVER_RETURN_IF_ERROR(backend_.Upload(patches.data(), in.tensor()));
  const Tensor pb = patch_bias_.tensor();
  FLOVER_RETURN_IF_ERROR(backend_.Linear(in.tensor(), *patch_, &pb, Epilogue::kBias, job->x.tensor()));
  job->stages.positions = GridPositions(grid_h, grid_w);
  FLOVER_RETURN_IF_ERROR(backend_.Upload(job->stages.positions.data(), job->h.tensor()));
  FLOVER_RETURN_IF_ERROR(backend_.Add(job->h.tensor(), job->x.tensor()));
  // The rotary's positions: none by time, each patch's row and column.
  std::vector<int32_t> rc(3 * N, 0);
  const int blocks_w = grid_w / m;
  for (int64_t k = 0; k < N; ++k) {
    const int64_t block = k / (m * m), within = k % (m * m);
    rc[N + k] = static_cast<int32_t>((block / blocks_w) * m + within / m);
    rc[2 * N + k] = static_cast<int32_t>((block % blocks_w) * m + within % m);
  }
  FLOVER_RETURN_IF_ERROR(backend_.Upload(rc.data(), job->pos.tensor()));
  job->stages.deepstack.resize(info_.deepstack.size());
  return job;
}

absl::Status Qwen3VlVision::RunBlocks(Job& job, int end) {
  const int64_t N = job.N;
  kernels::RopeParams rope{info_.heads, info_.heads, info_.head_dim()};
  rope.mrope_h = rope.mrope_w = info_.head_dim() / 4;
  const int32_t ends[1] = {static_cast<int32_t>(N)};
  const Tensor x = job.x.tensor(), h = job.h.tensor(), qkv = job.qkv.tensor(), att = job.att.tensor(),
               mlp = job.mlp.tensor();
  for (; job.next_block < std::min<int>(end, static_cast<int>(layers_.size())); ++job.next_block) {
    const int l = job.next_block;
    const Layer& L = layers_[l];
    FLOVER_RETURN_IF_ERROR(backend_.LayerNorm(x, L.ln1_gamma.tensor(), L.ln1_beta.tensor(), kNormEps, h));
    const Tensor qb = L.qkv_bias.tensor(), ob = L.proj_bias.tensor(), b1 = L.fc1_bias.tensor(), b2 = L.fc2_bias.tensor();
    FLOVER_RETURN_IF_ERROR(backend_.Linear(h, *L.qkv, &qb, Epilogue::kBias, qkv));
    FLOVER_RETURN_IF_ERROR(backend_.Rope(qkv, job.pos.tensor(), inv_freq_.tensor(), rope));
    FLOVER_RETURN_IF_ERROR(backend_.EncoderAttention(qkv, ends, info_.heads, 0.0f, att));
    FLOVER_RETURN_IF_ERROR(backend_.Linear(att, *L.proj, &ob, Epilogue::kBiasResidual, x));
    FLOVER_RETURN_IF_ERROR(backend_.LayerNorm(x, L.ln2_gamma.tensor(), L.ln2_beta.tensor(), kNormEps, h));
    FLOVER_RETURN_IF_ERROR(backend_.Linear(h, *L.fc1, &b1, Epilogue::kBiasGelu, mlp));
    FLOVER_RETURN_IF_ERROR(backend_.Linear(mlp, *L.fc2, &b2, Epilogue::kBiasResidual, x));
    for (size_t j = 0; j < info_.deepstack.size(); ++j) {
      if (info_.deepstack[j] != l) continue;
      FLOVER_ASSIGN_OR_RETURN(job.stages.deepstack[j], Merge(mergers_[1 + j], x, N));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Qwen3VlVision::Stages> Qwen3VlVision::Finish(Job& job) {
  if (job.next_block != static_cast<int>(layers_.size())) return absl::InternalError("vision tower: blocks left to run");
  job.stages.last.resize(job.N * info_.hidden);
  FLOVER_RETURN_IF_ERROR(backend_.Download(job.x.tensor(), job.stages.last.data()));
  FLOVER_RETURN_IF_ERROR(backend_.Synchronize());
  FLOVER_ASSIGN_OR_RETURN(job.stages.merged, Merge(mergers_[0], job.x.tensor(), job.N));
  return std::move(job.stages);
}

absl::StatusOr<Qwen3VlVision::Stages> Qwen3VlVision::Run(absl::Span<const float> patches, int grid_h, int grid_w) {
  FLOVER_ASSIGN_OR_RETURN(std::unique_ptr<Job> job, Start(patches, grid_h, grid_w));
  FLOVER_RETURN_IF_ERROR(RunBlocks(*job, static_cast<int>(layers_.size())));
  return Finish(*job);
}

absl::Status Qwen3VlVision::CheckImage(const PromptImage& image) const {
  const int m = info_.merge;
  const int64_t N = int64_t{image.grid_h} * image.grid_w;
  // Attention over the whole image holds N x N scores: 4 GiB at this bound.
  constexpr int64_t kMaxPatches = int64_t{1} << 15;
  if (N > kMaxPatches) {
    return absl::InvalidArgumentError(absl::StrCat("has ", N, " patches; at most ", kMaxPatches, " are taken"));
  }
  if (image.num_tiles != 1 || image.grid_h < m || image.grid_w < m || image.grid_h % m != 0 ||
      image.grid_w % m != 0 || image.tiles == nullptr || image.tiles->size() != static_cast<size_t>(N) * info_.patch_values()) {
    return absl::InvalidArgumentError(absl::StrCat("needs one grid of whole ", m, " x ", m, " blocks of patches of ",
                                                   info_.patch_values(), " values; got a grid of ", image.grid_h,
                                                   " x ", image.grid_w, " and ",
                                                   image.tiles == nullptr ? 0 : image.tiles->size(), " values"));
  }
  return absl::OkStatus();
}

int Qwen3VlVision::UnitsOf(const PromptImage&) const {
  return std::max(1, (static_cast<int>(layers_.size()) + blocks_per_unit_ - 1) / blocks_per_unit_);
}

absl::StatusOr<std::vector<float>> Qwen3VlVision::EncodeUnits(const PromptImage& image, int first, int n) {
  FLOVER_RETURN_IF_ERROR(CheckImage(image));
  const int units = UnitsOf(image);
  if (first < 0 || n < 1 || first + n > units) {
    return absl::InvalidArgumentError(absl::StrCat("units ", first, "..", first + n - 1, " of an image of ", units));
  }
  // Unit u runs blocks [u, u + 1) * blocks_per_unit_; the
  // image's features come with its last. An image is taken up where it was
  // left (the same image, the next unit), else started afresh from unit 0.
  if (first == 0) {
    job_.reset();
    FLOVER_ASSIGN_OR_RETURN(job_, Start(*image.tiles, image.grid_h, image.grid_w));
    job_->key = image.key;
  } else if (job_ == nullptr || job_->key != image.key || job_->grid_h != image.grid_h ||
             job_->grid_w != image.grid_w || job_->next_block != first * blocks_per_unit_) {
    return absl::FailedPreconditionError(absl::StrCat("vision tower: unit ", first, " of an image not begun"));
  }
  const absl::Status ran = RunBlocks(*job_, (first + n) * blocks_per_unit_);
  if (!ran.ok()) {
    job_.reset();
    return ran;
  }
  if (first + n < units) return std::vector<float>();
  absl::StatusOr<Stages> s = Finish(*job_);
  job_.reset();
  if (!s.ok()) return s.status();
  std::vector<float> out = std::move(s->merged);
  for (const std::vector<float>& deep : s->deepstack) out.insert(out.end(), deep.begin(), deep.end());
  return out;
}

}  // namespace flover
