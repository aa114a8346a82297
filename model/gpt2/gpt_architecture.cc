#include "model/gpt2/gpt_architecture.h"

namespace flover {

const std::vector<const GptArchitecture*>& GptArchitectures() {
  static const auto* table = new std::vector<const GptArchitecture*>{&Gpt2Arch(), &GptJArch()};
  return *table;
}

const GptArchitecture* FindGptArchitecture(absl::string_view model_type) {
  for (const GptArchitecture* a : GptArchitectures()) {
    if (model_type == a->model_type) return a;
  }
  return nullptr;
}

const GptArchitecture& GptConfig::arch() const {
  const GptArchitecture* a = FindGptArchitecture(architecture);
  return a != nullptr ? *a : Gpt2Arch();
}

}  // namespace flover
