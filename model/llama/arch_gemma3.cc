// Gemma 3, text only (Gemma3ForCausalLM, model_type gemma3_text): Gemma 2's
// block — norms before and after attention and the MLP, each (1 + w);
// GeGLU-tanh; embeddings times sqrt(hidden); query_pre_attn_scalar — with
// per-head Q/K norms ((1 + w) too) before rotary, and local and global
// layers in a pattern: every sliding_window_pattern-th layer (6: five local
// to one global) is global, turning by rope_theta with rope_scaling; the
// others attend within sliding_window and turn by rope_local_base_freq,
// unscaled. transformers 4.51 applies no attention soft-capping to Gemma 3
// (attn_logit_softcapping is read and ignored, as there); the final one
// when set. transformers 5 saves the layers' kinds as layer_types and the
// rotaries as rope_parameters by layer type (full_attention: rope_theta
// and the scaling; sliding_attention: the local base, unscaled).
//
// Its image-text checkpoints (model_type gemma3, Gemma3ForConditional-
// Generation) hold this language model under language_model.model.; their
// image rows attend to each other both ways (model/vision/vision_encoder.h).
#include "absl/strings/str_cat.h"
#include "model/decoder/rotary.h"
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_config.h"
#include "model/loader/gguf.h"
#include "util/json.h"
#include "util/status_macros.h"

namespace flover {
namespace {

absl::Status ParseGemma3(const google::protobuf::Struct& s, absl::string_view what, LlamaConfig* c) {
  auto refuse = [&](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(what, ": ", m...)); };
  if (absl::Status st = ParseSlidingWindow(s, what, /*absent=*/4096, c); !st.ok()) return st;  // Gemma3TextConfig's
  auto scalar = JsonNumberField(s, "query_pre_attn_scalar", 256, what);
  if (!scalar.ok()) return scalar.status();
  if (!(*scalar > 0)) return refuse("query_pre_attn_scalar must be > 0");
  c->query_pre_attn_scalar = *scalar;
  auto it = s.fields().find("final_logit_softcapping");
  if (it != s.fields().end() && it->second.kind_case() != google::protobuf::Value::kNullValue) {
    auto cap = JsonNumberField(s, "final_logit_softcapping", 0, what);
    if (!cap.ok()) return cap.status();
    if (!(*cap > 0)) return refuse("final_logit_softcapping must be > 0 or null");
    c->final_logit_softcapping = static_cast<float>(*cap);
  }
  auto pattern = JsonIntField(s, "sliding_window_pattern", 1, 1 << 20, what);
  if (JsonHas(s, "sliding_window_pattern") && !pattern.ok()) return pattern.status();
  c->sliding_window_pattern = JsonHas(s, "sliding_window_pattern") ? static_cast<int>(*pattern) : 6;
  auto local = JsonNumberField(s, "rope_local_base_freq", 10000.0, what);
  if (!local.ok()) return local.status();
  if (!(*local > 1)) return refuse("rope_local_base_freq must be > 1");
  c->rope_local_base = *local;
  // transformers 5: layer_types, and rope_parameters by layer type.
  if (auto types = s.fields().find("layer_types"); types != s.fields().end() &&
                                                   types->second.kind_case() == google::protobuf::Value::kListValue) {
    c->sliding_layers.clear();
    for (const google::protobuf::Value& v : types->second.list_value().values()) {
      const std::string kind = v.string_value();
      if (kind != "sliding_attention" && kind != "full_attention") {
        return refuse("layer_types holds \"", kind, "\" (Gemma 3 has sliding_attention and full_attention)");
      }
      c->sliding_layers.push_back(kind == "sliding_attention" ? 1 : 0);
    }
  }
  if (const google::protobuf::Struct* rope = JsonObjectField(s, "rope_parameters")) {
    for (const char* kind : {"full_attention", "sliding_attention"}) {
      const google::protobuf::Struct* p = JsonObjectField(*rope, kind);
      if (p == nullptr) return refuse("rope_parameters has no ", kind, " object");
      const bool full = std::string(kind) == "full_attention";
      FLOVER_ASSIGN_OR_RETURN(const double theta, JsonNumberField(*p, "rope_theta", full ? 1e6 : 1e4, what));
      if (!(theta > 1)) return refuse("rope_parameters.", kind, ".rope_theta must be > 1");
      google::protobuf::Struct scaling;
      (*scaling.mutable_fields())["rope_scaling"].mutable_struct_value()->CopyFrom(*p);
      RopeScaling parsed;
      FLOVER_RETURN_IF_ERROR(ParseRopeScaling(scaling, absl::StrCat(what, ": rope_parameters.", kind), &parsed));
      if (full) {
        c->rope_theta = theta;
        c->rope_scaling = parsed;
      } else {
        if (parsed.type != RopeScaling::Type::kNone) {
          return refuse("rope_parameters.sliding_attention is scaled; Gemma 3's local layers turn unscaled");
        }
        c->rope_local_base = theta;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

const LlamaArchitecture& Gemma3Arch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a = GemmaArchitecture("gemma3_text");
    a.qk_norm = true;
    a.gguf = true;
    a.gguf_name = "gemma3";
    // As llama.cpp reads it: no attention soft-cap; with a window, every
    // sliding_window_pattern-th layer global (6 by default), the local ones
    // turning by rope.freq_base_swa (1e4 by default); without one, every
    // layer global; 62 layers for the 27B model.
    a.gguf_parse = [](const GgufFile& f, const std::string& prefix, LlamaConfig* c) -> absl::Status {
      FLOVER_RETURN_IF_ERROR(GemmaGguf(f, prefix, /*large_layers=*/62, /*window_absent=*/0, c));
      FLOVER_ASSIGN_OR_RETURN(const int64_t pattern, f.GetIntOr(prefix + "attention.sliding_window_pattern", 6));
      if (pattern < 1 || pattern > (int64_t{1} << 20)) {
        return absl::InvalidArgumentError(absl::StrCat(f.name(), ": ", prefix, "attention.sliding_window_pattern ",
                                                       pattern, " is out of range"));
      }
      c->sliding_window_pattern = c->sliding_window > 0 ? static_cast<int>(pattern) : 1;
      FLOVER_ASSIGN_OR_RETURN(c->rope_local_base, f.GetFloatOr(prefix + "rope.freq_base_swa", 10000.0));
      return absl::OkStatus();
    };
    a.parse = ParseGemma3;
    a.rope_by_layer_type = true;
    a.image_text = {{"gemma3", "language_model.model."}};
    a.spec = [](const LlamaConfig& c, DecoderSpec* s) {
      GemmaBlock(c, s);
      s->inv_freq_local = RotaryInvFreq(static_cast<float>(c.rope_local_base), c.head_dim);
      s->local_rope.assign(c.n_layer, false);
      for (int l = 0; l < c.n_layer; ++l) {
        const bool global = !c.sliding_layers.empty() ? c.sliding_layers[l] == 0
                                                      : c.sliding_window_pattern > 0 &&
                                                            (l + 1) % c.sliding_window_pattern == 0;
        s->local_rope[l] = !global;
        if (global) s->attention[l].window = 0;
        s->attention[l].softcap = 0;  // not applied to Gemma 3 (above)
      }
    };
    return a;
  }();
  return entry;
}

}  // namespace flover
