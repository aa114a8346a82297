// SmolLM3: Llama with no rotary embeddings on some layers (NoPE):
// no_rope_layers, one entry per layer, 1 where a layer turns and 0 where it
// does not; absent, every no_rope_layer_interval-th layer (4 by default)
// goes without. A tied head by default. A config that turns its sliding
// window on is refused. In GGUF files (llama.cpp's smollm3: Q and K
// permuted as for llama) every fourth layer goes without, as llama.cpp
// fixes it.
#include "absl/strings/str_cat.h"
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_config.h"
#include "util/json.h"

namespace flover {

const LlamaArchitecture& SmolLM3Arch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a;
    a.model_type = "smollm3";
    a.gguf = true;
    a.gguf_permuted_qk = true;
    a.tied_by_default = true;
    a.gguf_parse = [](const GgufFile&, const std::string&, LlamaConfig* c) {
      c->no_rope_interval = 4;  // llama.cpp fixes it
      return absl::OkStatus();
    };
    a.parse = [](const google::protobuf::Struct& s, absl::string_view what, LlamaConfig* c) {
      if (JsonBoolField(s, "use_sliding_window", false)) return SlidingWindowRefused(what, "smollm3");
      if (JsonHas(s, "no_rope_layers")) {
        return JsonIntListField(s, "no_rope_layers", 0, 1, what, &c->rope_layers);
      }
      c->no_rope_interval = 4;  // SmolLM3Config's no_rope_layer_interval
      if (!JsonHas(s, "no_rope_layer_interval")) return absl::OkStatus();
      auto interval = JsonIntField(s, "no_rope_layer_interval", 1, 1 << 20, what);
      if (!interval.ok()) return interval.status();
      c->no_rope_interval = *interval;
      return absl::OkStatus();
    };
    return a;
  }();
  return entry;
}

}  // namespace flover
