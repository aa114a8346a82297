#include "engine/model_loader.h"

#include <sys/stat.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/file_util.h"

namespace flover {
namespace {

constexpr absl::string_view kBuiltinPrefix = "builtin:";
constexpr uint64_t kBuiltinSeed = 0x466c6f766572ull;  // "Flover"

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

absl::StatusOr<std::unique_ptr<LoadedModel>> LoadDirectory(const std::string& dir) {
  auto model = std::make_unique<LoadedModel>();
  model->spec = dir;
  const std::string config_path = dir + "/config.json";
  auto config_text = ReadFile(config_path);
  if (!config_text.ok()) return config_text.status();
  auto config = ParseGptConfig(*config_text, config_path);
  if (!config.ok()) return config.status();
  model->config = *config;

  auto file = SafetensorsFile::Open(dir + "/model.safetensors");
  if (!file.ok()) return file.status();
  auto weights = LoadGptWeights(*file, model->config);
  if (!weights.ok()) return weights.status();
  model->weights = std::move(*weights);
  for (const char* key : {"transformer.wte.weight", "wte.weight"}) {
    if (const TensorInfo* t = file->Find(key)) model->stored_dtype = std::string(DTypeName(t->dtype));
  }

  const std::string vocab = dir + "/vocab.json", merges = dir + "/merges.txt";
  if (FileExists(vocab) != FileExists(merges)) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": a tokenizer needs both vocab.json and merges.txt, found only one"));
  }
  if (FileExists(vocab)) {
    auto tokenizer = BpeTokenizer::Load(vocab, merges);
    if (!tokenizer.ok()) return tokenizer.status();
    if (tokenizer->vocab_size() > model->config.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          dir, ": the tokenizer has ", tokenizer->vocab_size(),
          " tokens but the model's vocab_size is ", model->config.vocab_size));
    }
    model->tokenizer = std::move(*tokenizer);
    if (model->config.eos_token_id < 0) {
      model->config.eos_token_id = model->tokenizer->end_of_text_id();
    }
  }
  return model;
}

}  // namespace

absl::StatusOr<GptConfig> BuiltinConfig(absl::string_view name) {
  GptConfig c;
  if (name == "tiny") {
    c.n_layer = 2;
    c.n_head = 4;
    c.n_embd = 64;
    c.n_positions = 512;
    c.vocab_size = 512;
  } else if (name == "gpt2-small") {
    c.n_layer = 12;
    c.n_head = 12;
    c.n_embd = 768;
    c.n_positions = 1024;
    c.vocab_size = 50257;
  } else {
    return absl::NotFoundError(absl::StrCat(
        "unknown built-in model \"", name, "\" (available: builtin:tiny, builtin:gpt2-small)"));
  }
  c.n_inner = 4 * c.n_embd;
  c.eos_token_id = c.vocab_size - 1;  // GPT-2's <|endoftext|> is its last id
  return c;
}

absl::StatusOr<std::unique_ptr<LoadedModel>> LoadModel(absl::string_view spec) {
  if (absl::StartsWith(spec, kBuiltinPrefix)) {
    auto config = BuiltinConfig(spec.substr(kBuiltinPrefix.size()));
    if (!config.ok()) return config.status();
    auto model = std::make_unique<LoadedModel>();
    model->spec = std::string(spec);
    model->stored_dtype = "F32";
    model->config = *config;
    model->weights = RandomGptWeights(*config, kBuiltinSeed);
    return model;
  }
  if (spec.empty()) return absl::InvalidArgumentError("model spec is empty");
  return LoadDirectory(std::string(spec));
}

}  // namespace flover
