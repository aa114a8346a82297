#include "model/model_loader.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/block_format.h"
#include "kernels/cpu/block_linear.h"
#include "model/gpt2/gpt2_checkpoint.h"
#include "model/llama/llama_checkpoint.h"
#include "model/loader/gguf.h"
#include "model/loader/gguf_source.h"
#include "util/file_util.h"
#include "util/json.h"

namespace flover {
namespace {

constexpr absl::string_view kBuiltinPrefix = "builtin:";

// The first `n` bytes of a file (fewer if it is shorter).
absl::StatusOr<std::string> ReadFilePrefix(const std::string& path, size_t n) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open file"));
  std::string bytes(n, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(n));
  bytes.resize(static_cast<size_t>(in.gcount()));
  return bytes;
}

// `spec` opened as a GGUF file (its first bytes say so, whatever its name),
// or nullopt for a built-in, a directory, or a missing, foreign or broken
// file (LoadModel says what is wrong with those).
std::optional<GgufFile> OpenIfGguf(absl::string_view spec) {
  const std::string path(spec);
  if (!FileExists(path)) return std::nullopt;
  auto magic = ReadFilePrefix(path, 4);
  if (!magic.ok() || *magic != "GGUF") return std::nullopt;
  auto file = GgufFile::Open(path);
  if (!file.ok()) return std::nullopt;
  return std::move(*file);
}

// config.json's model_type, or "gpt2" when it has none (older GPT-2
// checkpoints); errors name the file.
absl::StatusOr<std::string> ModelType(const std::string& dir) {
  const std::string path = dir + "/config.json";
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  auto parsed = ParseJsonObject(*text, path);
  if (!parsed.ok()) return parsed.status();
  const auto& fields = parsed->fields();
  auto it = fields.find("model_type");
  if (it == fields.end()) return std::string("gpt2");
  if (!it->second.has_string_value()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": model_type must be a string"));
  }
  return it->second.string_value();
}

// The registry: each family, the model_types it reads, and how it loads a
// Hugging Face directory (GGUF files name their architecture inside; the
// Llama family reads those it knows and refuses the rest by name).
struct Family {
  std::vector<std::string> model_types;
  std::function<absl::StatusOr<std::unique_ptr<LoadedModel>>(const std::string&)> load_directory;
};

template <typename Checkpoint>
absl::StatusOr<std::unique_ptr<LoadedModel>> LoadAs(const std::string& dir) {
  auto model = Checkpoint::LoadDirectory(dir);
  if (!model.ok()) return model.status();
  return std::unique_ptr<LoadedModel>(std::move(*model));
}

const std::vector<Family>& Families() {
  static const std::vector<Family>* families = new std::vector<Family>{
      {{"gpt2", "gptj"}, LoadAs<Gpt2Checkpoint>},
      {LlamaFamilyTypes(), LoadAs<LlamaCheckpoint>},
  };
  return *families;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LoadedModel>> LoadModel(absl::string_view spec) {
  if (spec.empty()) return absl::InvalidArgumentError("model spec is empty");
  if (absl::StartsWith(spec, kBuiltinPrefix)) {
    const absl::string_view name = spec.substr(kBuiltinPrefix.size());
    // NotFound: not a name of that family; anything else is that model's
    // own error (e.g. a broken vocabulary for builtin:gpt2-small).
    auto gpt2 = Gpt2Checkpoint::Builtin(name);
    if (gpt2.ok()) return std::unique_ptr<LoadedModel>(std::move(*gpt2));
    if (!absl::IsNotFound(gpt2.status())) return gpt2.status();
    auto llama = LlamaCheckpoint::Builtin(name);
    if (llama.ok()) return std::unique_ptr<LoadedModel>(std::move(*llama));
    if (!absl::IsNotFound(llama.status())) return llama.status();
    return absl::NotFoundError(absl::StrCat(
        "unknown built-in model \"", name,
        "\" (available: builtin:tiny, builtin:gpt2-small, builtin:gptj-1b, ", BuiltinLlamaNames(), ")"));
  }
  const std::string path(spec);
  if (FileExists(path)) {  // a file: GGUF, whatever its name
    auto magic = ReadFilePrefix(path, 4);
    if (!magic.ok()) return magic.status();
    if (*magic != "GGUF") {
      return absl::InvalidArgumentError(absl::StrCat(
          path, " is a file but not a GGUF file; --model takes a .gguf file or a Hugging Face "
                "model directory"));
    }
    auto gguf = LlamaCheckpoint::LoadGguf(path);
    if (!gguf.ok()) return gguf.status();
    return std::unique_ptr<LoadedModel>(std::move(*gguf));
  }
  const std::string& dir = path;
  auto type = ModelType(dir);
  if (!type.ok()) return type.status();
  for (const Family& family : Families()) {
    if (std::find(family.model_types.begin(), family.model_types.end(), *type) ==
        family.model_types.end()) {
      continue;
    }
    auto model = family.load_directory(dir);
    if (!model.ok()) return model.status();
    return std::move(*model);
  }
  std::vector<std::string> supported;
  for (const Family& family : Families()) {
    supported.insert(supported.end(), family.model_types.begin(), family.model_types.end());
  }
  std::sort(supported.begin(), supported.end());
  return absl::InvalidArgumentError(absl::StrCat(dir, "/config.json: model_type \"", *type,
                                                 "\" is not supported (Flover serves ",
                                                 absl::StrJoin(supported, ", "), ")"));
}

absl::StatusOr<std::unique_ptr<LoadedModel>> LoadBuiltinInBlocks(absl::string_view spec,
                                                                 kernels::BlockFormat format) {
  auto llama = absl::StartsWith(spec, kBuiltinPrefix)
                   ? LlamaCheckpoint::Builtin(spec.substr(kBuiltinPrefix.size()), format)
                   : absl::NotFoundError("");
  if (!llama.ok()) {
    if (!absl::IsNotFound(llama.status())) return llama.status();
    return absl::InvalidArgumentError(absl::StrCat(
        spec, ": only built-in Llama-family models come in random blocks (", BuiltinLlamaNames(), ")"));
  }
  return std::unique_ptr<LoadedModel>(std::move(*llama));
}

// Whether a Hugging Face directory's config.json says its weights are in
// MXFP4 (gpt-oss's released checkpoints: quantization_config.quant_method).
bool DirectoryInMxfp4(absl::string_view spec) {
  auto text = ReadFile(absl::StrCat(spec, "/config.json"));
  if (!text.ok()) return false;
  auto config = ParseJsonObject(*text, "config.json");
  if (!config.ok()) return false;
  auto q = config->fields().find("quantization_config");
  if (q == config->fields().end() || !q->second.has_struct_value()) return false;
  auto method = q->second.struct_value().fields().find("quant_method");
  return method != q->second.struct_value().fields().end() && method->second.string_value() == "mxfp4";
}

kernels::MatmulDtype AutoMatmulDtype(absl::string_view spec, absl::string_view device) {
  if (device != "cpu") return kernels::MatmulDtype::kF32;
  if (DirectoryInMxfp4(spec) && kernels::BlockLinear::CheckSupported().ok()) return kernels::MatmulDtype::kNative;
  const std::optional<GgufFile> file = OpenIfGguf(spec);
  if (!file.has_value() || !kernels::BlockLinear::CheckSupported().ok()) return kernels::MatmulDtype::kF32;
  for (const GgufTensor& t : file->tensors()) {
    kernels::BlockFormat format;
    if (t.ne.size() >= 2 && GgufRowsFormat(t.type->id, &format)) {
      return kernels::MatmulDtype::kNative;
    }
  }
  return kernels::MatmulDtype::kF32;
}

std::string WidenedMatrices(absl::string_view spec) {
  const std::optional<GgufFile> file = OpenIfGguf(spec);
  if (!file.has_value()) return "";
  int matrices = 0, widened = 0;
  std::vector<std::string> types;
  for (const GgufTensor& t : file->tensors()) {
    if (t.ne.size() < 2) continue;
    ++matrices;
    kernels::BlockFormat format;
    const bool quantized = t.type->block_size > 1;
    if (!quantized || GgufRowsFormat(t.type->id, &format)) continue;
    ++widened;
    if (std::find(types.begin(), types.end(), t.type->name) == types.end()) types.push_back(t.type->name);
  }
  if (widened == 0) return "";
  return absl::StrCat(widened, " of ", matrices, " matrices (", absl::StrJoin(types, ", "), ")");
}

}  // namespace flover
