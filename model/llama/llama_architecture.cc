#include "model/llama/llama_architecture.h"

namespace flover {

const std::vector<const LlamaArchitecture*>& LlamaArchitectures() {
  static const auto* table = new std::vector<const LlamaArchitecture*>{
      &Gemma2Arch(),   &Gemma3Arch(),  &GraniteHybridArch(), &Lfm2Arch(),      &LlamaArch(),
      &MistralArch(),  &MixtralArch(), &OlmoeArch(),         &Phi3Arch(),      &Qwen2Arch(),
      &Qwen2MoeArch(), &Qwen3Arch(),   &Qwen3_5Arch(),       &Qwen3_5MoeArch(), &Qwen3NextArch(),
      &Qwen3MoeArch(), &SmolLM3Arch()};
  return *table;
}

const LlamaArchitecture* FindLlamaArchitecture(absl::string_view model_type) {
  for (const LlamaArchitecture* a : LlamaArchitectures()) {
    if (model_type == a->model_type) return a;
  }
  return nullptr;
}

const LlamaArchitecture* FindLlamaTextOf(absl::string_view model_type) {
  for (const LlamaArchitecture* a : LlamaArchitectures()) {
    if (a->image_text_type != nullptr && model_type == a->image_text_type) return a;
  }
  return nullptr;
}

const LlamaArchitecture* FindGgufArchitecture(absl::string_view name, bool experts) {
  for (const LlamaArchitecture* a : LlamaArchitectures()) {
    const absl::string_view file_name = a->gguf_name != nullptr ? a->gguf_name : a->model_type;
    if (a->gguf && file_name == name && (a->moe == experts || a->experts_optional)) return a;
  }
  return nullptr;
}

}  // namespace flover
