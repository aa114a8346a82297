#include "model/llama/llama_architecture.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "model/loader/gguf.h"
#include "util/status_macros.h"

namespace flover {

const std::vector<const LlamaArchitecture*>& LlamaArchitectures() {
  static const auto* table = new std::vector<const LlamaArchitecture*>{
      &Gemma2Arch(),   &Gemma3Arch(),  &Gemma4Arch(),  &GptOssArch(),        &GraniteHybridArch(), &Lfm2Arch(),      &LlamaArch(),
      &MistralArch(),  &MixtralArch(), &OlmoeArch(),         &Phi3Arch(),      &Qwen2Arch(),
      &Qwen2MoeArch(), &Qwen3Arch(),   &Qwen3_5Arch(),       &Qwen3_5MoeArch(), &Qwen3NextArch(),
      &Qwen3MoeArch(), &Qwen3VlArch(),     &SmolLM3Arch()};
  return *table;
}

absl::StatusOr<GgufSsmShapes> ReadGgufSsmShapes(const GgufFile& f, const std::string& a) {
  GgufSsmShapes out;
  int inner = 0;
  for (auto [key, value] : {std::pair{"ssm.conv_kernel", &out.conv_kernel}, std::pair{"ssm.state_size", &out.state_size},
                            std::pair{"ssm.group_count", &out.groups}, std::pair{"ssm.time_step_rank", &out.heads},
                            std::pair{"ssm.inner_size", &inner}}) {
    FLOVER_ASSIGN_OR_RETURN(const int64_t v, f.GetInt(a + key));
    if (v < 1 || v > (1 << 20)) {
      return absl::InvalidArgumentError(absl::StrCat(f.name(), ": ", a, key, " ", v, " is out of range"));
    }
    *value = static_cast<int>(v);
  }
  if (inner % out.heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.name(), ": ", a, "ssm.inner_size ", inner, " is not a multiple of its ", out.heads, " heads"));
  }
  out.head_dim = inner / out.heads;
  return out;
}

const LlamaArchitecture* FindLlamaArchitecture(absl::string_view model_type) {
  for (const LlamaArchitecture* a : LlamaArchitectures()) {
    if (model_type == a->model_type) return a;
  }
  return nullptr;
}

const LlamaArchitecture* FindLlamaTextOf(absl::string_view model_type, std::string* text_prefix, bool* deepstack) {
  for (const LlamaArchitecture* a : LlamaArchitectures()) {
    for (const LlamaArchitecture::ImageText& it : a->image_text) {
      if (model_type != it.model_type) continue;
      *text_prefix = it.text_prefix;
      if (deepstack != nullptr) *deepstack = it.deepstack;
      return a;
    }
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
