#include "model/vision/vision_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/loader/checkpoint.h"
#include "model/loader/gguf.h"
#include "model/vision/gguf_fields.h"
#include "model/vision/random_weights.h"
#include "util/file_util.h"
#include "util/json.h"
#include "util/status_macros.h"

namespace flover {

using kernels::Buffer;

using kernels::Epilogue;
using kernels::Tensor;
using kernels::Weight;
using kernels::WeightLayout;

struct VisionEncoder::Layer {
  Buffer ln1_gamma, ln1_beta, ln2_gamma, ln2_beta;
  std::unique_ptr<Weight> qkv, out, fc1, fc2;
  Buffer qkv_bias, out_bias, fc1_bias, fc2_bias;
};

struct VisionEncoder::Job {
  uint64_t key = 0;
  int tiles = 0;
  int next_layer = 0;
  Buffer x, h, qkv, att, mlp;
  std::vector<int32_t> ends;  // each tile's end row: attention within a tile
};

VisionEncoder::VisionEncoder(kernels::Backend& backend, VisionInfo info) : backend_(backend), info_(info) {
  encoder_info_.image_token = info.image_token;
  encoder_info_.out_width = info.out_width;
  encoder_info_.bidirectional = info.connector == VisionInfo::Connector::kPoolNorm;
  // Gemma 3's tower over one 896-px tile: a layer a unit (about a second on
  // 2 CPU cores in f32), so running sequences decode between its layers.
  if (info.connector == VisionInfo::Connector::kPoolNorm) layers_per_unit_ = 1;
}
VisionEncoder::~VisionEncoder() = default;

namespace {

using google::protobuf::Struct;

// The vision side of config.json.
absl::StatusOr<VisionInfo> ParseVision(const Struct& top, const std::string& what) {
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(what, ": ", m...)); };
  auto type = top.fields().find("model_type");
  const std::string model_type = type != top.fields().end() ? type->second.string_value() : "";
  const bool gemma = model_type == "gemma3";
  if (model_type != "idefics3" && model_type != "smolvlm" && !gemma) {
    return absl::NotFoundError(absl::StrCat(what, ": model_type \"", model_type,
                                            "\" has no vision tower Flover runs (idefics3, smolvlm, gemma3)"));
  }
  const Struct* v = JsonObjectField(top, "vision_config");
  const Struct* text = JsonObjectField(top, "text_config");
  if (v == nullptr || text == nullptr) return refuse("model_type ", model_type, " needs vision_config and text_config");
  VisionInfo info;
  FLOVER_ASSIGN_OR_RETURN(info.tile, JsonIntFieldOr(*v, "image_size", 224, 1, 4096, what));
  FLOVER_ASSIGN_OR_RETURN(info.patch, JsonIntFieldOr(*v, "patch_size", 32, 1, 256, what));
  FLOVER_ASSIGN_OR_RETURN(info.channels, JsonIntFieldOr(*v, "num_channels", 3, 3, 3, what));
  FLOVER_ASSIGN_OR_RETURN(info.hidden, JsonIntFieldOr(*v, "hidden_size", 1152, 1, 1 << 14, what));
  FLOVER_ASSIGN_OR_RETURN(info.heads, JsonIntFieldOr(*v, "num_attention_heads", 16, 1, 256, what));
  FLOVER_ASSIGN_OR_RETURN(info.layers, JsonIntFieldOr(*v, "num_hidden_layers", 12, 1, 256, what));
  FLOVER_ASSIGN_OR_RETURN(info.intermediate, JsonIntFieldOr(*v, "intermediate_size", 3072, 1, 1 << 16, what));
  FLOVER_ASSIGN_OR_RETURN(const double eps, JsonNumberField(*v, "layer_norm_eps", 1e-6, what));
  if (!(eps > 0 && eps < 1)) return refuse("vision_config.layer_norm_eps must be in (0, 1)");
  info.norm_eps = static_cast<float>(eps);
  if (auto act = v->fields().find("hidden_act");
      act != v->fields().end() && act->second.string_value() != "gelu_pytorch_tanh") {
    return refuse("vision_config.hidden_act \"", act->second.string_value(), "\" is not supported (gelu_pytorch_tanh)");
  }
  if (info.tile % info.patch != 0) return refuse("vision_config.image_size ", info.tile, " is not a whole number of patches");
  if (info.hidden % info.heads != 0) return refuse("vision_config.hidden_size is not a whole number of heads");
  if (gemma) {
    // Gemma3MultiModalProjector: mm_tokens_per_image rows, a square of them,
    // each the average of a square block of patches.
    info.connector = VisionInfo::Connector::kPoolNorm;
    FLOVER_ASSIGN_OR_RETURN(const int tokens, JsonIntFieldOr(top, "mm_tokens_per_image", 256, 1, 1 << 16, what));
    const int side = static_cast<int>(std::lround(std::sqrt(static_cast<double>(tokens))));
    if (side * side != tokens || info.patches_per_side() % side != 0) {
      return refuse("mm_tokens_per_image ", tokens, " is not a square whose side divides the ",
                    info.patches_per_side(), " patches a side");
    }
    info.scale = info.patches_per_side() / side;
    if (v->fields().count("vision_use_head") && JsonBoolField(*v, "vision_use_head", false)) {
      return refuse("vision_config.vision_use_head is true; Gemma 3's tower has no head");
    }
  } else {
    FLOVER_ASSIGN_OR_RETURN(info.scale, JsonIntFieldOr(top, "scale_factor", 2, 1, 16, what));
  }
  if (info.patches_per_side() % info.scale != 0) {
    return refuse("scale_factor ", info.scale, " does not divide the ", info.patches_per_side(), " patches a side");
  }
  FLOVER_ASSIGN_OR_RETURN(info.out_width, JsonIntField(*text, "hidden_size", 1, 1 << 17, what));
  // Gemma 3's config names it image_token_index.
  const char* token_key = JsonHas(top, "image_token_id") || !gemma ? "image_token_id" : "image_token_index";
  FLOVER_ASSIGN_OR_RETURN(info.image_token, JsonIntField(top, token_key, 0, (1 << 24) - 1, what));
  return info;
}

}  // namespace

std::vector<float> PixelShuffle(absl::Span<const float> rows, int n, int d, int s) {
  const int m = n / s;
  std::vector<float> out(rows.size());
  for (int I = 0; I < m; ++I) {
    for (int J = 0; J < m; ++J) {
      float* o = out.data() + (static_cast<size_t>(I) * m + J) * d * s * s;
      for (int dy = 0; dy < s; ++dy) {
        for (int dx = 0; dx < s; ++dx) {
          const float* in = rows.data() + (static_cast<size_t>(I * s + dy) * n + (J * s + dx)) * d;
          std::memcpy(o + (dy * s + dx) * d, in, d * sizeof(float));
        }
      }
    }
  }
  return out;
}

std::vector<float> PoolNorm(absl::Span<const float> rows, int n, int d, int s, absl::Span<const float> scale,
                            float eps) {
  const int m = n / s;
  std::vector<float> out(static_cast<size_t>(m) * m * d);
  std::vector<double> sum(d);
  for (int I = 0; I < m; ++I) {
    for (int J = 0; J < m; ++J) {
      std::fill(sum.begin(), sum.end(), 0.0);
      for (int dy = 0; dy < s; ++dy) {
        for (int dx = 0; dx < s; ++dx) {
          const float* in = rows.data() + (static_cast<size_t>(I * s + dy) * n + (J * s + dx)) * d;
          for (int c = 0; c < d; ++c) sum[c] += in[c];
        }
      }
      float* o = out.data() + (static_cast<size_t>(I) * m + J) * d;
      double squares = 0;
      for (int c = 0; c < d; ++c) {
        const double mean = sum[c] / (s * s);
        o[c] = static_cast<float>(mean);
        squares += mean * mean;
      }
      const double inv = 1.0 / std::sqrt(squares / d + eps);
      for (int c = 0; c < d; ++c) o[c] = static_cast<float>(o[c] * inv * scale[c]);
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<VisionEncoder>> VisionEncoder::Load(const std::string& dir,
                                                                   kernels::Backend& backend) {
  const std::string what = dir + "/config.json";
  FLOVER_ASSIGN_OR_RETURN(const std::string text, ReadFile(what));
  FLOVER_ASSIGN_OR_RETURN(const Struct top, ParseJsonObject(text, what));
  FLOVER_ASSIGN_OR_RETURN(VisionInfo info, ParseVision(top, what));
  FLOVER_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::Open(dir));
  if (info.connector == VisionInfo::Connector::kPoolNorm) {
    // Gemma 3's tensors as the Hub's files name them, as transformers 5.23
    // saves them (the tower without vision_model.), or as it holds them
    // (under model.): whichever has the patch embedding.
    for (const char* tower : {"vision_tower.vision_model.", "vision_tower.", "model.vision_tower.vision_model.",
                              "model.vision_tower."}) {
      if (ckpt.Find(std::string(tower) + "embeddings.patch_embedding.weight") != nullptr) {
        info.tower_prefix = tower;
        info.projector_prefix = absl::StartsWith(tower, "model.") ? "model.multi_modal_projector." :
                                                                    "multi_modal_projector.";
        break;
      }
    }
  }
  return Build(info, backend, [&](const std::string& name, const std::vector<int64_t>& shape) {
    return ckpt.ReadFloat(name, shape);
  });
}

absl::StatusOr<std::unique_ptr<VisionEncoder>> VisionEncoder::LoadGguf(const std::string& path, int image_token,
                                                                       kernels::Backend& backend) {
  FLOVER_ASSIGN_OR_RETURN(GgufFile f, GgufFile::Open(path));
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(path, ": ", m...)); };
  auto projector = f.GetString("clip.projector_type");
  const bool gemma = projector.ok() && *projector == "gemma3";
  if (!projector.ok() || (!gemma && *projector != "idefics3")) {
    return absl::NotFoundError(absl::StrCat(path, ": not a SmolVLM (idefics3) or Gemma 3 projector (clip.projector_type ",
                                            projector.ok() ? *projector : "absent", ")"));
  }
  VisionInfo info;
  // Absent shape keys read as 0, out of range.
  FLOVER_ASSIGN_OR_RETURN(info.tile, GgufIntIn(f, "clip.vision.image_size", 0, 1, 4096));
  FLOVER_ASSIGN_OR_RETURN(info.patch, GgufIntIn(f, "clip.vision.patch_size", 0, 1, 256));
  FLOVER_ASSIGN_OR_RETURN(info.hidden, GgufIntIn(f, "clip.vision.embedding_length", 0, 1, 1 << 14));
  FLOVER_ASSIGN_OR_RETURN(info.intermediate, GgufIntIn(f, "clip.vision.feed_forward_length", 0, 1, 1 << 16));
  FLOVER_ASSIGN_OR_RETURN(info.layers, GgufIntIn(f, "clip.vision.block_count", 0, 1, 256));
  FLOVER_ASSIGN_OR_RETURN(info.heads, GgufIntIn(f, "clip.vision.attention.head_count", 0, 1, 256));
  FLOVER_ASSIGN_OR_RETURN(info.out_width, GgufIntIn(f, "clip.vision.projection_dim", 0, 1, 1 << 17));
  FLOVER_ASSIGN_OR_RETURN(info.scale, GgufIntIn(f, "clip.vision.projector.scale_factor", gemma ? 4 : 2, 1, 64));
  FLOVER_ASSIGN_OR_RETURN(const double eps, f.GetFloatOr("clip.vision.attention.layer_norm_epsilon", 1e-6));
  if (!(eps > 0 && eps < 1)) return refuse("clip.vision.attention.layer_norm_epsilon must be in (0, 1)");
  info.norm_eps = static_cast<float>(eps);
  if (info.tile % info.patch != 0 || info.patches_per_side() % info.scale != 0 || info.hidden % info.heads != 0) {
    return refuse("image_size ", info.tile, ", patch_size ", info.patch, ", scale_factor ", info.scale, " and ",
                  info.heads, " heads of ", info.hidden, " do not fit together");
  }
  info.image_token = image_token;
  if (gemma) {
    info.connector = VisionInfo::Connector::kPoolNorm;
    info.norm_holds_one = true;
  }
  const int64_t D = info.hidden;
  // llama.cpp's tensor of a Hugging Face name (the converter keeps the
  // values' order; some SigLIP files swap ffn_up and ffn_down, which
  // llama.cpp undoes by shape, as here).
  auto tensor = [&](const std::string& name, int64_t n, int64_t cols) -> absl::StatusOr<std::vector<float>> {
    const GgufTensor* t = f.FindTensor(name);
    if (t == nullptr) return refuse("has no tensor ", name);
    if (t->rows() * t->cols() != n || (cols > 0 && t->cols() != cols)) {
      return refuse(name, " is ", t->rows(), " x ", t->cols(), ", not ", n, " values", cols > 0 ? absl::StrCat(" of ", cols, " a row") : "");
    }
    return f.ReadRows(*t, 0, t->rows());
  };
  const std::string hf = info.tower_prefix;
  return Build(info, backend, [&](const std::string& name, const std::vector<int64_t>& shape) -> absl::StatusOr<std::vector<float>> {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    static const std::pair<const char*, const char*> kNames[] = {
        {"embeddings.patch_embedding.", "v.patch_embd."},
        {"embeddings.position_embedding.", "v.position_embd."},
        {"post_layernorm.", "v.post_ln."},
        {"model.connector.modality_projection.proj.", "mm.model.fc."},
        {"multi_modal_projector.mm_soft_emb_norm.", "mm.soft_emb_norm."},
        {"multi_modal_projector.mm_input_projection_weight", "mm.input_projection.weight"},
    };
    const std::string rest = name.rfind(hf, 0) == 0 ? name.substr(hf.size()) : name;
    for (const auto& [from, to] : kNames) {
      if (rest.rfind(from, 0) == 0) return tensor(to + rest.substr(std::string(from).size()), n, 0);
    }
    if (rest.rfind("encoder.layers.", 0) == 0) {
      const size_t dot = rest.find('.', 15);
      const std::string l = rest.substr(15, dot - 15), part = rest.substr(dot + 1);
      const std::string blk = "v.blk." + l + ".";
      static const std::pair<const char*, const char*> kBlock[] = {
          {"layer_norm1.", "ln1."}, {"layer_norm2.", "ln2."},          {"self_attn.q_proj.", "attn_q."},
          {"self_attn.k_proj.", "attn_k."}, {"self_attn.v_proj.", "attn_v."}, {"self_attn.out_proj.", "attn_out."},
      };
      for (const auto& [from, to] : kBlock) {
        if (part.rfind(from, 0) == 0) return tensor(blk + to + part.substr(std::string(from).size()), n, 0);
      }
      const bool up = part.rfind("mlp.fc1.", 0) == 0, down = part.rfind("mlp.fc2.", 0) == 0;
      if (up || down) {
        const std::string suffix = part.substr(8);
        // fc1's rows read the width D; fc2's the MLP's.
        const GgufTensor* u = f.FindTensor(blk + "ffn_up.weight");
        const bool swapped = u != nullptr && u->cols() != D;
        const std::string which = (up != swapped) ? "ffn_up." : "ffn_down.";
        return tensor(blk + which + suffix, n, suffix == "weight" ? (up ? D : info.intermediate) : 0);
      }
    }
    return refuse("no tensor stands for ", name);
  });
}

absl::StatusOr<std::unique_ptr<VisionEncoder>> VisionEncoder::Random(const VisionInfo& info, kernels::Backend& backend,
                                                                     uint64_t seed) {
  return Build(info, backend, [&](const std::string& name, const std::vector<int64_t>& shape) {
    return absl::StatusOr<std::vector<float>>(RandomTowerWeights(name, shape, seed));
  });
}

absl::StatusOr<std::unique_ptr<VisionEncoder>> VisionEncoder::Build(const VisionInfo& info, kernels::Backend& backend,
                                                                    const Reader& read) {
  std::unique_ptr<VisionEncoder> e(new VisionEncoder(backend, info));
  const int64_t D = info.hidden, F = info.intermediate, K = int64_t{info.channels} * info.patch * info.patch;

  auto up = [&](const std::vector<float>& values, int64_t rows, int64_t cols) -> absl::StatusOr<Buffer> {
    FLOVER_ASSIGN_OR_RETURN(Buffer b, backend.Allocate(kernels::DType::kF32, rows, cols));
    FLOVER_RETURN_IF_ERROR(backend.Upload(values.data(), b.tensor()));
    return b;
  };
  // An nn.Linear's [out, in] rows, stacked from `names` (q, k, v into one).
  auto linear = [&](const std::vector<std::string>& names, int64_t in,
                    int64_t out) -> absl::StatusOr<std::unique_ptr<Weight>> {
    std::vector<float> w;
    for (const std::string& name : names) {
      FLOVER_ASSIGN_OR_RETURN(std::vector<float> part, read(name, {out, in}));
      w.insert(w.end(), part.begin(), part.end());
    }
    return backend.PrepareWeight(w.data(), static_cast<int>(in), static_cast<int>(out * names.size()),
                                 WeightLayout::kOutIn);
  };
  // Vectors of n values (norms, biases) as one row, stacked from `names`.
  auto vector = [&](const std::vector<std::string>& names, int64_t n) -> absl::StatusOr<Buffer> {
    std::vector<float> b;
    for (const std::string& name : names) {
      FLOVER_ASSIGN_OR_RETURN(std::vector<float> part, read(name, {n}));
      b.insert(b.end(), part.begin(), part.end());
    }
    return up(b, 1, static_cast<int64_t>(b.size()));
  };

  const std::string& tower = info.tower_prefix;
  const std::string emb = tower + "embeddings.";
  // The patch convolution (kernel = stride = patch) as a product over each
  // patch's values in (channel, y, x) order.
  FLOVER_ASSIGN_OR_RETURN(std::vector<float> conv, read(emb + "patch_embedding.weight", {D, info.channels, info.patch, info.patch}));
  FLOVER_ASSIGN_OR_RETURN(e->patch_, backend.PrepareWeight(conv.data(), static_cast<int>(K), static_cast<int>(D),
                                                           WeightLayout::kOutIn));
  FLOVER_ASSIGN_OR_RETURN(e->patch_bias_, vector({emb + "patch_embedding.bias"}, D));
  FLOVER_ASSIGN_OR_RETURN(std::vector<float> pos, read(emb + "position_embedding.weight", {info.patches(), D}));
  FLOVER_ASSIGN_OR_RETURN(e->positions_, up(pos, info.patches(), D));
  for (int l = 0; l < info.layers; ++l) {
    const std::string p = absl::StrCat(tower, "encoder.layers.", l, ".");
    Layer layer;
    FLOVER_ASSIGN_OR_RETURN(layer.ln1_gamma, vector({p + "layer_norm1.weight"}, D));
    FLOVER_ASSIGN_OR_RETURN(layer.ln1_beta, vector({p + "layer_norm1.bias"}, D));
    FLOVER_ASSIGN_OR_RETURN(layer.ln2_gamma, vector({p + "layer_norm2.weight"}, D));
    FLOVER_ASSIGN_OR_RETURN(layer.ln2_beta, vector({p + "layer_norm2.bias"}, D));
    const std::string a = p + "self_attn.";
    FLOVER_ASSIGN_OR_RETURN(layer.qkv, linear({a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"}, D, D));
    FLOVER_ASSIGN_OR_RETURN(layer.qkv_bias, vector({a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"}, D));
    FLOVER_ASSIGN_OR_RETURN(layer.out, linear({a + "out_proj.weight"}, D, D));
    FLOVER_ASSIGN_OR_RETURN(layer.out_bias, vector({a + "out_proj.bias"}, D));
    FLOVER_ASSIGN_OR_RETURN(layer.fc1, linear({p + "mlp.fc1.weight"}, D, F));
    FLOVER_ASSIGN_OR_RETURN(layer.fc1_bias, vector({p + "mlp.fc1.bias"}, F));
    FLOVER_ASSIGN_OR_RETURN(layer.fc2, linear({p + "mlp.fc2.weight"}, F, D));
    FLOVER_ASSIGN_OR_RETURN(layer.fc2_bias, vector({p + "mlp.fc2.bias"}, D));
    e->layers_.push_back(std::move(layer));
  }
  FLOVER_ASSIGN_OR_RETURN(e->post_gamma_, vector({tower + "post_layernorm.weight"}, D));
  FLOVER_ASSIGN_OR_RETURN(e->post_beta_, vector({tower + "post_layernorm.bias"}, D));
  if (info.connector == VisionInfo::Connector::kPoolNorm) {
    const std::string& m = info.projector_prefix;
    FLOVER_ASSIGN_OR_RETURN(e->pool_norm_, read(m + "mm_soft_emb_norm.weight", {D}));
    if (!info.norm_holds_one) {
      for (float& w : e->pool_norm_) w += 1.0f;  // Gemma's RMSNorm scales by 1 + w
    }
    // A plain matrix of [in, out] (torch.matmul(x, w)), not an nn.Linear.
    FLOVER_ASSIGN_OR_RETURN(std::vector<float> w, read(m + "mm_input_projection_weight", {D, info.out_width}));
    FLOVER_ASSIGN_OR_RETURN(e->projection_, backend.PrepareWeight(w.data(), static_cast<int>(D), info.out_width,
                                                                  WeightLayout::kInOut));
    return e;
  }
  const int64_t shuffled = D * info.scale * info.scale;
  FLOVER_ASSIGN_OR_RETURN(e->projection_,
                          linear({"model.connector.modality_projection.proj.weight"}, shuffled, info.out_width));
  return e;
}

absl::StatusOr<std::unique_ptr<VisionEncoder::Job>> VisionEncoder::Start(absl::Span<const float> tiles, int n) {
  const int S = info_.tile, P = info_.patch, G = info_.patches_per_side(), N = info_.patches();
  const int64_t C = info_.channels, D = info_.hidden, F = info_.intermediate, K = C * P * P;
  if (n < 1 || tiles.size() != static_cast<size_t>(n) * C * S * S) {
    return absl::InvalidArgumentError(absl::StrCat("vision tower: ", n, " tiles of ", C, " x ", S, " x ", S,
                                                   " pixels need ", int64_t{n} * C * S * S, " values, got ",
                                                   tiles.size()));
  }
  const int64_t T = int64_t{n} * N;
  // Each patch's pixels in (channel, y, x) order, patches row-major.
  std::vector<float> patches(T * K);
  for (int t = 0; t < n; ++t) {
    for (int gy = 0; gy < G; ++gy) {
      for (int gx = 0; gx < G; ++gx) {
        float* row = patches.data() + ((int64_t{t} * N) + gy * G + gx) * K;
        for (int c = 0; c < C; ++c) {
          for (int y = 0; y < P; ++y) {
            const float* src = tiles.data() + ((int64_t{t} * C + c) * S + gy * P + y) * S + gx * P;
            std::memcpy(row + (c * P + y) * P, src, P * sizeof(float));
          }
        }
      }
    }
  }
  auto job = std::make_unique<Job>();
  job->tiles = n;
  auto alloc = [&](int64_t cols) { return backend_.Allocate(kernels::DType::kF32, T, cols); };
  FLOVER_ASSIGN_OR_RETURN(Buffer in, alloc(K));
  FLOVER_ASSIGN_OR_RETURN(job->x, alloc(D));
  FLOVER_ASSIGN_OR_RETURN(job->h, alloc(D));
  FLOVER_ASSIGN_OR_RETURN(job->qkv, alloc(3 * D));
  FLOVER_ASSIGN_OR_RETURN(job->att, alloc(D));
  FLOVER_ASSIGN_OR_RETURN(job->mlp, alloc(F));
  FLOVER_RETURN_IF_ERROR(backend_.Upload(patches.data(), in.tensor()));
  const Tensor pb = patch_bias_.tensor();
  FLOVER_RETURN_IF_ERROR(backend_.Linear(in.tensor(), *patch_, &pb, Epilogue::kBias, job->x.tensor()));
  for (int t = 0; t < n; ++t) {
    FLOVER_RETURN_IF_ERROR(backend_.Add(positions_.tensor(), job->x.tensor().Rows(int64_t{t} * N, N)));
  }
  job->ends.resize(n);
  for (int t = 0; t < n; ++t) job->ends[t] = (t + 1) * N;
  return job;
}

absl::Status VisionEncoder::RunLayers(Job& job, int end) {
  const Tensor x = job.x.tensor(), h = job.h.tensor(), qkv = job.qkv.tensor(), att = job.att.tensor(),
               mlp = job.mlp.tensor();
  for (; job.next_layer < std::min(end, info_.layers); ++job.next_layer) {
    const Layer& l = layers_[job.next_layer];
    FLOVER_RETURN_IF_ERROR(backend_.LayerNorm(x, l.ln1_gamma.tensor(), l.ln1_beta.tensor(), info_.norm_eps, h));
    const Tensor qb = l.qkv_bias.tensor(), ob = l.out_bias.tensor(), b1 = l.fc1_bias.tensor(), b2 = l.fc2_bias.tensor();
    FLOVER_RETURN_IF_ERROR(backend_.Linear(h, *l.qkv, &qb, Epilogue::kBias, qkv));
    FLOVER_RETURN_IF_ERROR(backend_.EncoderAttention(qkv, job.ends, info_.heads, 0.0f, att));
    FLOVER_RETURN_IF_ERROR(backend_.Linear(att, *l.out, &ob, Epilogue::kBiasResidual, x));
    FLOVER_RETURN_IF_ERROR(backend_.LayerNorm(x, l.ln2_gamma.tensor(), l.ln2_beta.tensor(), info_.norm_eps, h));
    FLOVER_RETURN_IF_ERROR(backend_.Linear(h, *l.fc1, &b1, Epilogue::kBiasGelu, mlp));
    FLOVER_RETURN_IF_ERROR(backend_.Linear(mlp, *l.fc2, &b2, Epilogue::kBiasResidual, x));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> VisionEncoder::FinishRows(Job& job) {
  const Tensor h = job.h.tensor();
  FLOVER_RETURN_IF_ERROR(
      backend_.LayerNorm(job.x.tensor(), post_gamma_.tensor(), post_beta_.tensor(), info_.norm_eps, h));
  std::vector<float> out(h.rows * h.cols);
  FLOVER_RETURN_IF_ERROR(backend_.Download(h, out.data()));
  FLOVER_RETURN_IF_ERROR(backend_.Synchronize());
  return out;
}

absl::StatusOr<std::vector<float>> VisionEncoder::Tower(absl::Span<const float> tiles, int n) {
  FLOVER_ASSIGN_OR_RETURN(std::unique_ptr<Job> job, Start(tiles, n));
  FLOVER_RETURN_IF_ERROR(RunLayers(*job, info_.layers));
  return FinishRows(*job);
}

absl::StatusOr<std::vector<float>> VisionEncoder::Connect(absl::Span<const float> tower_rows, int n) {
  const int N = info_.patches(), G = info_.patches_per_side(), s = info_.scale, D = info_.hidden;
  if (n < 1 || tower_rows.size() != static_cast<size_t>(n) * N * D) {
    return absl::InvalidArgumentError(absl::StrCat("vision connector: ", n, " tiles need ", int64_t{n} * N * D,
                                                   " values, got ", tower_rows.size()));
  }
  const bool pool = info_.connector == VisionInfo::Connector::kPoolNorm;
  std::vector<float> shuffled;
  shuffled.reserve(tower_rows.size());
  for (int t = 0; t < n; ++t) {
    const absl::Span<const float> rows = tower_rows.subspan(static_cast<size_t>(t) * N * D, N * D);
    const std::vector<float> tile = pool ? PoolNorm(rows, G, D, s, pool_norm_, info_.norm_eps)
                                         : PixelShuffle(rows, G, D, s);
    shuffled.insert(shuffled.end(), tile.begin(), tile.end());
  }
  const int64_t R = int64_t{n} * info_.rows_per_tile(), W = pool ? int64_t{D} : int64_t{D} * s * s;
  FLOVER_ASSIGN_OR_RETURN(Buffer in, backend_.Allocate(kernels::DType::kF32, R, W));
  FLOVER_ASSIGN_OR_RETURN(Buffer out, backend_.Allocate(kernels::DType::kF32, R, info_.out_width));
  FLOVER_RETURN_IF_ERROR(backend_.Upload(shuffled.data(), in.tensor()));
  FLOVER_RETURN_IF_ERROR(backend_.Linear(in.tensor(), *projection_, nullptr, Epilogue::kBias, out.tensor()));
  std::vector<float> features(R * info_.out_width);
  FLOVER_RETURN_IF_ERROR(backend_.Download(out.tensor(), features.data()));
  FLOVER_RETURN_IF_ERROR(backend_.Synchronize());
  return features;
}

absl::Status VisionEncoder::CheckImage(const PromptImage& image) const {
  const size_t per_tile = static_cast<size_t>(info_.channels) * info_.tile * info_.tile;
  if (image.num_tiles < 1 || image.grid_h != 0 || image.grid_w != 0 || image.tiles == nullptr ||
      image.tiles->size() != image.num_tiles * per_tile) {
    return absl::InvalidArgumentError(absl::StrCat("needs ", image.num_tiles, " tiles of ", per_tile, " values, got ",
                                                   image.tiles == nullptr ? 0 : image.tiles->size()));
  }
  return absl::OkStatus();
}

int VisionEncoder::UnitsOf(const PromptImage& image) const {
  return layers_per_unit_ > 0 ? (info_.layers + layers_per_unit_ - 1) / layers_per_unit_ : image.num_tiles;
}

absl::StatusOr<std::vector<float>> VisionEncoder::EncodeUnits(const PromptImage& image, int first, int n) {
  const size_t per_tile = static_cast<size_t>(info_.channels) * info_.tile * info_.tile;
  const int units = UnitsOf(image);
  if (first < 0 || n < 1 || first + n > units) {
    return absl::InvalidArgumentError(absl::StrCat("units ", first, "..", first + n - 1, " of an image of ", units));
  }
  if (layers_per_unit_ == 0) {
    return Encode(absl::MakeConstSpan(image.tiles->data() + first * per_tile, n * per_tile), n);
  }
  // Unit u runs layers [u, u + 1) * layers_per_unit_ of all the image's
  // tiles; its features come with its last. An image is taken up where it
  // was left (the same image, the next unit), else started afresh.
  FLOVER_RETURN_IF_ERROR(CheckImage(image));
  if (first == 0) {
    job_.reset();
    FLOVER_ASSIGN_OR_RETURN(job_, Start(*image.tiles, image.num_tiles));
    job_->key = image.key;
  } else if (job_ == nullptr || job_->key != image.key || job_->tiles != image.num_tiles ||
             job_->next_layer != first * layers_per_unit_) {
    return absl::FailedPreconditionError(absl::StrCat("vision tower: unit ", first, " of an image not begun"));
  }
  absl::Status ran = RunLayers(*job_, (first + n) * layers_per_unit_);
  absl::StatusOr<std::vector<float>> rows = std::vector<float>();
  if (ran.ok() && first + n == units) rows = FinishRows(*job_);
  if (!ran.ok() || first + n == units) job_.reset();
  if (!ran.ok()) return ran;
  if (first + n < units) return std::vector<float>();
  if (!rows.ok()) return rows.status();
  return Connect(*rows, image.num_tiles);
}

absl::StatusOr<std::vector<float>> VisionEncoder::Encode(absl::Span<const float> tiles, int n) {
  FLOVER_ASSIGN_OR_RETURN(std::vector<float> rows, Tower(tiles, n));
  return Connect(rows, n);
}

}  // namespace flover
