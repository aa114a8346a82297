// Gemma 2: norms before and after attention and the MLP, each scaling by
// (1 + w); GeGLU with gelu's tanh form; embeddings times sqrt(hidden);
// attention scaled by query_pre_attn_scalar^-1/2; attention and final logit
// soft-capping (null: off); local (sliding-window) and global layers in
// turn; head_dim 256 and a tied head unless the config says otherwise.
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_config.h"
#include "model/loader/gguf.h"
#include "util/json.h"
#include "util/status_macros.h"

namespace flover {
namespace {

absl::Status ParseGemma2(const google::protobuf::Struct& s, absl::string_view what, LlamaConfig* c) {
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(what, ": ", m...)); };
  if (absl::Status st = ParseSlidingWindow(s, what, /*absent=*/4096, c); !st.ok()) return st;  // Gemma2Config's default
  auto scalar = JsonNumberField(s, "query_pre_attn_scalar", 224, what);
  if (!scalar.ok()) return scalar.status();
  if (!(*scalar > 0)) return refuse("query_pre_attn_scalar must be > 0");
  c->query_pre_attn_scalar = *scalar;
  // Soft-capping: null turns it off.
  for (auto [key, fallback, out] : {std::tuple{"attn_logit_softcapping", 50.0, &c->attn_logit_softcapping},
                                    {"final_logit_softcapping", 30.0, &c->final_logit_softcapping}}) {
    auto it = s.fields().find(key);
    if (it != s.fields().end() && it->second.kind_case() == google::protobuf::Value::kNullValue) continue;
    auto cap = JsonNumberField(s, key, fallback, what);
    if (!cap.ok()) return cap.status();
    if (!(*cap > 0)) return refuse(key, " must be > 0 or null");
    *out = static_cast<float>(*cap);
  }
  return absl::OkStatus();
}

}  // namespace

LlamaArchitecture GemmaArchitecture(const char* model_type) {
  LlamaArchitecture a;
  a.model_type = model_type;
  a.activation = "gelu_pytorch_tanh";
  a.tied_by_default = true;
  a.default_head_dim = 256;
  a.gemma_norms = true;
  return a;
}

void GemmaBlock(const LlamaConfig& c, DecoderSpec* s) {
  s->block = DecoderSpec::Block::kSandwich;
  s->glu = kernels::GluKind::kGeluTanh;
  // Embeddings times sqrt(hidden), rounded to float32 as transformers does.
  s->embed_scale = static_cast<float>(std::sqrt(static_cast<double>(c.hidden)));
}

absl::Status GemmaGguf(const GgufFile& f, const std::string& a, int large_layers, int64_t window_absent,
                       LlamaConfig* c) {
  c->norms_stored_plus_one = true;
  FLOVER_ASSIGN_OR_RETURN(const double final_cap, f.GetFloatOr(a + "final_logit_softcapping", 0));
  c->final_logit_softcapping = static_cast<float>(final_cap);
  FLOVER_ASSIGN_OR_RETURN(const int64_t window, f.GetIntOr(a + "attention.sliding_window", window_absent));
  if (window < 0 || window > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(f.name(), ": ", a, "attention.sliding_window ", window,
                                                   " is out of range"));
  }
  c->sliding_window = static_cast<int>(window);
  c->query_pre_attn_scalar = c->n_layer == large_layers ? double(c->hidden / c->n_head) : double(c->head_dim);
  return absl::OkStatus();
}

const LlamaArchitecture& Gemma2Arch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a = GemmaArchitecture("gemma2");
    a.gguf = true;
    // As llama.cpp reads it: the window 4096 on even layers where the file
    // has none, both soft-caps, 46 layers for the 27B model.
    a.gguf_parse = [](const GgufFile& f, const std::string& prefix, LlamaConfig* c) -> absl::Status {
      FLOVER_RETURN_IF_ERROR(GemmaGguf(f, prefix, /*large_layers=*/46, /*window_absent=*/4096, c));
      FLOVER_ASSIGN_OR_RETURN(const double cap, f.GetFloatOr(prefix + "attn_logit_softcapping", 0));
      c->attn_logit_softcapping = static_cast<float>(cap);
      return absl::OkStatus();
    };
    a.parse = ParseGemma2;
    a.builtin = [](LlamaConfig* c) {
      c->tie_word_embeddings = true;
      c->query_pre_attn_scalar = 64;
      c->attn_logit_softcapping = 50;
      c->final_logit_softcapping = 30;
      c->sliding_window = 4096;
    };
    a.spec = [](const LlamaConfig& c, DecoderSpec* s) {
      GemmaBlock(c, s);
      // Even layers are local (sliding), odd ones global.
      for (size_t l = 1; l < s->attention.size(); l += 2) s->attention[l].window = 0;
    };
    return a;
  }();
  return entry;
}

}  // namespace flover
