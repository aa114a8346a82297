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
// and down as [F, C], [F, C] and [C, F]. llama.cpp's GGUF files (arch
// "gpt-oss") keep them as Flover's other mixtures do, MXFP4 blocks with
// ffn_*_exps.bias beside.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "google/protobuf/struct.pb.h"
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
  c->sliding_layers.clear();
  for (int l = 0; l < c->n_layer; ++l) c->sliding_layers.push_back(l % 2 == 0 ? 1 : 0);
  // The family's reading took the YaRN keys; gpt-oss's ramp is not truncated.
  c->rope_scaling.truncate = false;
  return absl::OkStatus();
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
    return Locate(tensor, &w) ? inner_->Has(w.tensor) : inner_->Has(tensor);
  }
  absl::StatusOr<std::vector<float>> Read(absl::string_view tensor, const std::vector<int64_t>& shape,
                                          const TensorRegion& region) const override {
    Where w;
    if (!Locate(tensor, &w)) return inner_->Read(tensor, shape, region);
    if (shape != w.shape) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", tensor, "': gpt-oss's experts give [",
                                                     w.shape[0], ", ", w.shape[1], "], not the shape asked for"));
    }
    if (region.row_begin < 0 || region.row_end > w.shape[0] || region.col_begin < 0 ||
        region.col_end > w.shape[1] || region.row_begin > region.row_end || region.col_begin > region.col_end) {
      return absl::OutOfRangeError(absl::StrCat("tensor '", tensor, "': region outside the tensor"));
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
    int column_stride = 1, column_offset = 0;
  };

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
    if (proj == "gate_proj.weight" || proj == "up_proj.weight") {
      *w = {p + "gate_up_proj", {E_, C_, 2 * F_}, e, {F_, C_}, true, 2, proj == "up_proj.weight" ? 1 : 0};
      return true;
    }
    if (proj == "down_proj.weight") {
      *w = {p + "down_proj", {E_, F_, C_}, e, {C_, F_}, true, 1, 0};
      return true;
    }
    return false;
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
