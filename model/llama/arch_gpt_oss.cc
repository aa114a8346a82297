// gpt-oss (OpenAI's gpt-oss-20b and -120b): attention with biases on q, k,
// v and o and a learned sink logit per query head, in layers that alternate
// a sliding window (layer_types' sliding_attention) and the whole context;
// YaRN rotary embeddings; a mixture of experts in every layer whose router
// has a bias and takes the top k logits before its softmax, and whose
// experts have biases and gpt-oss's clamped SwiGLU (swiglu_limit 7, alpha
// 1.702, up + 1). Its checkpoints keep each layer's experts as
// gate_up_proj [E, C, 2F] (input-major, gate and up interleaved by
// column), down_proj [E, F, C], and their biases [E, 2F] and [E, C]:
// GptOssExpertsSource reads them as the recipes ask, one expert's gate, up
// and down as [F, C], [F, C] and [C, F]. The released checkpoints keep the
// experts in MXFP4 instead (quantization_config's mxfp4): gate_up_proj_blocks
// [E, 2F, C/32, 16] and _scales [E, 2F, C/32] (rows the outputs, gate and up
// interleaved by row; a byte's low nibble the even value), down_proj_blocks
// [E, C, F/32, 16]; the source hands them on as ggml's MXFP4 rows (the
// scale byte, then value j and j + 16 in byte j: the same codes and scale,
// transformers' lut * 2^(s - 127) being ggml's doubled values * 2^(e - 128)
// with e = s), kept in blocks by --dtype=native, dequantized by ggml's rule
// otherwise. llama.cpp's GGUF files (arch
// "gpt-oss") keep them as Flover's other mixtures do, MXFP4 blocks with
// ffn_*_exps.bias beside.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "google/protobuf/struct.pb.h"
#include "kernels/ggml_dequant.h"
#include "kernels/ggml_types.h"
#include "kernels/op_params.h"
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_config.h"
#include "model/loader/gguf.h"
#include "model/loader/weight_source.h"
#include "util/json.h"
#include "util/status_macros.h"

namespace flover {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

absl::Status ParseGptOss(const Struct& s, absl::string_view what, LlamaConfig* c) {
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(what, ": ", m...)); };
  const bool bias = JsonBoolField(s, "attention_bias", true);
  c->qkv_bias = c->o_bias = bias;
  c->attention_sinks = true;
  c->moe_biases = true;
  FLOVER_RETURN_IF_ERROR(ParseMoe(s, what, "num_local_experts", "intermediate_size", /*renormalize=*/false, c));
  // The experts' activation: its constants are the kernels'.
  for (auto [key, want] : {std::pair{"swiglu_limit", double{kernels::kSwigluOaiLimit}},
                           std::pair{"swiglu_alpha", 1.702}}) {
    if (!JsonHas(s, key)) continue;
    auto v = JsonNumberField(s, key, want, what);
    if (!v.ok()) return v.status();
    if (*v != want) return refuse(key, " ", *v, " is not supported (gpt-oss's is ", want, ")");
  }
  FLOVER_RETURN_IF_ERROR(ParseSlidingWindow(s, what, /*absent=*/128, c));
  auto it = s.fields().find("layer_types");
  if (it == s.fields().end() || it->second.kind_case() == Value::kNullValue) {
    return refuse("layer_types is missing (sliding_attention or full_attention per layer)");
  }
  if (it->second.kind_case() != Value::kListValue) return refuse("layer_types must be a list");
  for (const Value& v : it->second.list_value().values()) {
    const std::string kind = v.kind_case() == Value::kStringValue ? v.string_value() : "";
    if (kind != "sliding_attention" && kind != "full_attention") {
      return refuse("layer_types holds \"", kind, "\" (gpt-oss has sliding_attention and full_attention)");
    }
    c->sliding_layers.push_back(kind == "sliding_attention" ? 1 : 0);
  }
  return absl::OkStatus();
}

// The window on even layers, the whole context on odd ones: the released
// config's layer_types, and llama.cpp's swa pattern 2.
void WindowEvenLayers(LlamaConfig* c) {
  c->sliding_layers.clear();
  for (int l = 0; l < c->n_layer; ++l) c->sliding_layers.push_back(l % 2 == 0 ? 1 : 0);
}

// llama.cpp's gpt-oss files: the window on even layers (its swa pattern 2),
// YaRN as transformers computes it for the released config (the ramp not
// truncated: files do not record that), biases on q, k, v and o.
absl::Status GptOssGguf(const GgufFile& f, const std::string& a, LlamaConfig* c) {
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(f.name(), ": ", m...)); };
  c->attention_sinks = true;
  c->moe_biases = true;
  FLOVER_ASSIGN_OR_RETURN(const int64_t window, f.GetIntOr(a + "attention.sliding_window", 128));
  if (window < 1 || window > (int64_t{1} << 24)) {
    return refuse(a, "attention.sliding_window ", window, " is out of range");
  }
  c->sliding_window = static_cast<int>(window);
  WindowEvenLayers(c);
  // The family's reading took the YaRN keys; gpt-oss's ramp is not truncated.
  c->rope_scaling.truncate = false;
  return absl::OkStatus();
}

// A built-in model's settings beside its shapes (LlamaCheckpoint's
// gpt-oss-tiny, gpt-oss-20b): as the released config has them.
void GptOssBuiltin(LlamaConfig* c) {
  c->qkv_bias = c->o_bias = c->attention_sinks = c->moe_biases = true;
  c->rms_norm_eps = 1e-5f;
  c->rope_theta = 150000.0;
  RopeScaling& r = c->rope_scaling;
  r.type = RopeScaling::Type::kYarn;
  r.factor = 32.0;
  r.original_max_positions = 4096;
  r.truncate = false;
  r.attention_factor = YarnAttentionFactor(r.factor);
  WindowEvenLayers(c);
}

void GptOssSpec(const LlamaConfig& c, DecoderSpec* s) {
  s->glu = kernels::GluKind::kSwigluOai;
  s->moe.router.scoring = kernels::RouterParams::Scoring::kTopKSoftmax;
}

// The checkpoint's experts as the recipes name them (see the top).
class GptOssExpertsSource final : public WeightSource {
 public:
  GptOssExpertsSource(std::unique_ptr<WeightSource> inner, const LlamaConfig& c)
      : inner_(std::move(inner)), E_(c.experts), C_(c.hidden), F_(c.expert_intermediate), prefix_(c.text_prefix) {}

  bool Has(absl::string_view tensor) const override {
    Where w;
    if (!Locate(tensor, &w)) return inner_->Has(tensor);
    return w.mxfp4 ? inner_->Has(w.blocks) && inner_->Has(w.scales) : inner_->Has(w.tensor);
  }
  bool BlockFormatOf(absl::string_view tensor, kernels::BlockFormat* format) const override {
    Where w;
    if (!Locate(tensor, &w) || !w.mxfp4) return inner_->BlockFormatOf(tensor, format);
    *format = kernels::BlockFormat::kMXFP4;
    return true;
  }
  // Rows of an expert's matrix in MXFP4, as ggml's blocks.
  absl::StatusOr<std::vector<uint8_t>> ReadBlockRows(absl::string_view tensor, const std::vector<int64_t>& shape,
                                                     int64_t row_begin, int64_t row_end) const override {
    Where w;
    if (!Locate(tensor, &w) || !w.mxfp4) return inner_->ReadBlockRows(tensor, shape, row_begin, row_end);
    FLOVER_RETURN_IF_ERROR(CheckRegion(tensor, w, shape, {row_begin, row_end, 0, w.shape[1]}));
    const int64_t G = w.shape[1] / 32, R = w.source_shape[1];
    std::vector<uint8_t> out(static_cast<size_t>((row_end - row_begin) * G * 17));
    if (row_end == row_begin) return out;
    // The source rows that hold them (every other one for gate and up).
    const int64_t s0 = w.column_stride * row_begin + w.column_offset;
    const int64_t s1 = w.column_stride * (row_end - 1) + w.column_offset + 1;
    FLOVER_ASSIGN_OR_RETURN(const std::vector<uint8_t> blocks,
                            inner_->ReadBytes(w.blocks, {E_, R, G, 16}, {w.expert, w.expert + 1, s0 * G * 16, s1 * G * 16}));
    FLOVER_ASSIGN_OR_RETURN(const std::vector<uint8_t> scales,
                            inner_->ReadBytes(w.scales, {E_, R, G}, {w.expert, w.expert + 1, s0 * G, s1 * G}));
    uint8_t* o = out.data();
    for (int64_t r = row_begin; r < row_end; ++r) {
      const int64_t s = w.column_stride * r + w.column_offset - s0;
      for (int64_t g = 0; g < G; ++g, o += 17) {
        const uint8_t* b = &blocks[(s * G + g) * 16];
        uint8_t v[32];
        for (int i = 0; i < 16; ++i) {
          v[2 * i] = b[i] & 0x0F;
          v[2 * i + 1] = b[i] >> 4;
        }
        o[0] = scales[s * G + g];
        for (int j = 0; j < 16; ++j) o[1 + j] = static_cast<uint8_t>(v[j] | (v[j + 16] << 4));
      }
    }
    return out;
  }
  absl::StatusOr<std::vector<float>> Read(absl::string_view tensor, const std::vector<int64_t>& shape,
                                          const TensorRegion& region) const override {
    Where w;
    if (!Locate(tensor, &w)) return inner_->Read(tensor, shape, region);
    FLOVER_RETURN_IF_ERROR(CheckRegion(tensor, w, shape, region));
    if (w.mxfp4) {  // the rows' blocks as ggml dequantizes them, then the columns asked for
      FLOVER_ASSIGN_OR_RETURN(const std::vector<uint8_t> rows,
                              ReadBlockRows(tensor, shape, region.row_begin, region.row_end));
      const int64_t K = w.shape[1];
      std::vector<float> row(K), out;
      out.reserve(region.numel());
      for (int64_t r = 0; r < region.rows(); ++r) {
        kernels::GgmlDequantize(*kernels::GgmlTypeOf(static_cast<uint32_t>(kernels::GgmlType::kMXFP4)),
                                rows.data() + r * (K / 32) * 17, K, row.data());
        out.insert(out.end(), row.begin() + region.col_begin, row.begin() + region.col_end);
      }
      return out;
    }
    // The source matrix [R, S] (an expert's slab, or the layer's biases).
    const int64_t R = w.source_shape[w.source_shape.size() - 2], S = w.source_shape.back();
    TensorRegion all{0, R, 0, S};
    if (w.expert >= 0) all = {w.expert, w.expert + 1, 0, R * S};
    FLOVER_ASSIGN_OR_RETURN(std::vector<float> src, inner_->Read(w.tensor, w.source_shape, all));
    std::vector<float> out;
    out.reserve(region.numel());
    for (int64_t r = region.row_begin; r < region.row_end; ++r) {
      for (int64_t col = region.col_begin; col < region.col_end; ++col) {
        // Output (r, col) of the recipe's matrix from the source's (i, j).
        int64_t i = r, j = col;
        if (w.transposed) std::swap(i, j);
        if (w.column_stride == 2) j = 2 * j + w.column_offset;  // gate: even columns, up: odd
        out.push_back(src[i * S + j]);
      }
    }
    return out;
  }
  std::string stored_dtype() const override { return inner_->stored_dtype(); }
  kernels::DType StoredDtypeOf(absl::string_view tensor) const override {
    Where w;
    return Locate(tensor, &w) ? kernels::DType::kF32 : inner_->StoredDtypeOf(tensor);
  }
  absl::StatusOr<StoredValues> ReadStored(absl::string_view tensor, const std::vector<int64_t>& shape,
                                          const TensorRegion& region) const override {
    Where w;
    if (!Locate(tensor, &w)) return inner_->ReadStored(tensor, shape, region);
    return WeightSource::ReadStored(tensor, shape, region);  // float32, rearranged
  }

 private:
  struct Where {
    std::string tensor;                  // in the checkpoint
    std::vector<int64_t> source_shape;   // its shape
    int64_t expert = -1;                 // the slab of a 3-D tensor; -1: a matrix
    std::vector<int64_t> shape;          // what the recipe asks for
    bool transposed = false;             // the recipe's (r, c) is the source's (c, r)
    // Which of the source's columns (MXFP4: its rows) hold the recipe's
    // rows: stride 2 for gate (offset 0) and up (1).
    int column_stride = 1, column_offset = 0;
    // The experts in MXFP4: the blocks and scales tensors ([E, R, K/32,
    // 16], [E, R, K/32]; source_shape is then [E, R, K]).
    bool mxfp4 = false;
    std::string blocks, scales;
  };

  static absl::Status CheckRegion(absl::string_view tensor, const Where& w, const std::vector<int64_t>& shape,
                                  const TensorRegion& region) {
    if (shape != w.shape) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", tensor, "': gpt-oss's experts give [",
                                                     w.shape[0], ", ", w.shape[1], "], not the shape asked for"));
    }
    if (region.row_begin < 0 || region.row_end > w.shape[0] || region.col_begin < 0 ||
        region.col_end > w.shape[1] || region.row_begin > region.row_end || region.col_begin > region.col_end) {
      return absl::OutOfRangeError(absl::StrCat("tensor '", tensor, "': region outside the tensor"));
    }
    return absl::OkStatus();
  }

  // "<prefix>layers.N.mlp.experts.<e>.{gate,up,down}_proj.weight" and
  // "<prefix>layers.N.mlp.experts.{gate,up,down}_bias".
  bool Locate(absl::string_view name, Where* w) const {
    const std::string layers = prefix_ + "layers.";
    if (!absl::ConsumePrefix(&name, layers)) return false;
    const size_t dot = name.find('.');
    int l = 0;
    if (dot == absl::string_view::npos || !absl::SimpleAtoi(name.substr(0, dot), &l)) return false;
    absl::string_view rest = name.substr(dot + 1);
    if (!absl::ConsumePrefix(&rest, "mlp.experts.")) return false;
    const std::string p = absl::StrCat(layers, l, ".mlp.experts.");
    if (rest == "gate_bias" || rest == "up_bias") {
      *w = {p + "gate_up_proj_bias", {E_, 2 * F_}, -1, {E_, F_}, false, 2, rest == "up_bias" ? 1 : 0};
      return true;
    }
    if (rest == "down_bias") {
      *w = {p + "down_proj_bias", {E_, C_}, -1, {E_, C_}, false, 1, 0};
      return true;
    }
    const size_t sep = rest.find('.');
    int e = 0;
    if (sep == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, sep), &e) || e < 0 || e >= E_) {
      return false;
    }
    const absl::string_view proj = rest.substr(sep + 1);
    const bool gate_up = proj == "gate_proj.weight" || proj == "up_proj.weight";
    if (!gate_up && proj != "down_proj.weight") return false;
    const std::string packed = p + (gate_up ? "gate_up_proj" : "down_proj");
    if (inner_->Has(packed + "_blocks")) {  // MXFP4: rows the outputs
      *w = {packed, gate_up ? std::vector<int64_t>{E_, 2 * F_, C_} : std::vector<int64_t>{E_, C_, F_}, e,
            gate_up ? std::vector<int64_t>{F_, C_} : std::vector<int64_t>{C_, F_}, false, gate_up ? 2 : 1,
            proj == "up_proj.weight" ? 1 : 0, true, packed + "_blocks", packed + "_scales"};
      return true;
    }
    if (gate_up) {
      *w = {packed, {E_, C_, 2 * F_}, e, {F_, C_}, true, 2, proj == "up_proj.weight" ? 1 : 0};
    } else {
      *w = {packed, {E_, F_, C_}, e, {C_, F_}, true, 1, 0};
    }
    return true;
  }

  std::unique_ptr<WeightSource> inner_;
  int64_t E_, C_, F_;
  std::string prefix_;
};

std::unique_ptr<WeightSource> GptOssCheckpointSource(std::unique_ptr<WeightSource> inner, const LlamaConfig& c) {
  return std::make_unique<GptOssExpertsSource>(std::move(inner), c);
}

}  // namespace

const LlamaArchitecture& GptOssArch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a;
    a.model_type = "gpt_oss";
    a.gguf = true;
    a.gguf_name = "gpt-oss";
    a.moe = true;
    a.attention_bias = true;
    a.moe_router = "mlp.router";
    a.parse = ParseGptOss;
    a.gguf_parse = GptOssGguf;
    a.spec = GptOssSpec;
    a.builtin = GptOssBuiltin;
    a.checkpoint_source = GptOssCheckpointSource;
    a.gguf_layer_names = {
        {"post_attention_layernorm.weight", "post_attention_norm.weight"},
        {"self_attn.o_proj.bias", "attn_output.bias"},
        {"self_attn.sinks", "attn_sinks.weight"},
        {"mlp.router.weight", "ffn_gate_inp.weight"},
        {"mlp.router.bias", "ffn_gate_inp.bias"},
        {"mlp.experts.gate_bias", "ffn_gate_exps.bias"},
        {"mlp.experts.up_bias", "ffn_up_exps.bias"},
        {"mlp.experts.down_bias", "ffn_down_exps.bias"},
    };
    return a;
  }();
  return entry;
}

}  // namespace flover
