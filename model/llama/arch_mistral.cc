// Mistral: Llama with sliding-window attention on every layer
// (sliding_window; null or absent: none), as transformers' eager and SDPA
// paths apply it.
#include "model/llama/llama_architecture.h"
#include "model/llama/llama_config.h"

namespace flover {

const LlamaArchitecture& MistralArch() {
  static const LlamaArchitecture entry = [] {
    LlamaArchitecture a;
    a.model_type = "mistral";
    a.parse = [](const google::protobuf::Struct& s, absl::string_view what, LlamaConfig* c) {
      return ParseSlidingWindow(s, what, /*absent=*/0, c);
    };
    return a;
  }();
  return entry;
}

}  // namespace flover
