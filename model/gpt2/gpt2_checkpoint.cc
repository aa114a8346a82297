#include "model/gpt2/gpt2_checkpoint.h"

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/gpt2/gpt_architecture.h"
#include "model/loader/checkpoint.h"
#include "model/loader/tokenizer_files.h"
#include "util/file_util.h"
#include "util/runfiles.h"

namespace flover {
namespace {

constexpr uint64_t kBuiltinSeed = 0x466c6f766572ull;  // "Flover"

// GPT-2's own vocabulary for builtin:gpt2-small, when tools/setup.sh has put
// it in third_party/gpt2_vocab (or $FLOVER_GPT2_VOCAB_DIR names a directory
// with vocab.json and merges.txt); null when it is not there.
absl::StatusOr<std::shared_ptr<const HfTokenizer>> BuiltinGpt2Vocabulary(int vocab_size) {
  std::string dir;
  if (const char* env = std::getenv("FLOVER_GPT2_VOCAB_DIR"); env != nullptr && *env != '\0') {
    dir = env;
    if (!FileExists(dir + "/vocab.json") || !FileExists(dir + "/merges.txt")) {
      return absl::FailedPreconditionError(absl::StrCat(
          "FLOVER_GPT2_VOCAB_DIR=", dir, " has no vocab.json and merges.txt"));
    }
  } else {
    const std::string vocab = FindRunfile("", "", "third_party/gpt2_vocab/vocab.json");
    if (vocab.empty()) return std::shared_ptr<const HfTokenizer>();
    dir = vocab.substr(0, vocab.rfind('/'));
  }
  return LoadDirectoryTokenizer(dir, vocab_size, "gpt2");
}

}  // namespace

absl::StatusOr<GptConfig> BuiltinGpt2Config(absl::string_view name) {
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
  } else if (name == "gptj-1b") {
    // GPT-J's layout at about 1B parameters (benchmarks): 16 heads of 128,
    // rotary on 64 dims, tied here (the built-ins have no separate head).
    c.architecture = "gptj";
    c.n_layer = 16;
    c.n_head = 16;
    c.n_embd = 2048;
    c.n_positions = 2048;
    c.vocab_size = 50400;
    c.rotary_dim = 64;
  } else {
    return absl::NotFoundError(absl::StrCat("no built-in GPT-2 model \"", name, "\""));
  }
  c.n_inner = 4 * c.n_embd;
  c.eos_token_id = c.vocab_size - 1;  // GPT-2's <|endoftext|> is its last id
  return c;
}

void Gpt2Checkpoint::Describe() { info_ = InfoOf(config_); }

absl::StatusOr<std::unique_ptr<Gpt2Checkpoint>> Gpt2Checkpoint::Builtin(absl::string_view name) {
  auto config = BuiltinGpt2Config(name);
  if (!config.ok()) return config.status();
  std::unique_ptr<Gpt2Checkpoint> m(new Gpt2Checkpoint());
  m->spec_ = absl::StrCat("builtin:", name);
  m->config_ = *config;
  m->source_ = GeneratedGptSource(kBuiltinSeed);
  if (name == "gpt2-small") {
    auto tokenizer = BuiltinGpt2Vocabulary(m->config_.vocab_size);
    if (!tokenizer.ok()) return tokenizer.status();
    m->tokenizer_ = std::move(*tokenizer);
  }
  m->Describe();
  return m;
}

absl::StatusOr<std::unique_ptr<Gpt2Checkpoint>> Gpt2Checkpoint::LoadDirectory(
    const std::string& dir) {
  std::unique_ptr<Gpt2Checkpoint> m(new Gpt2Checkpoint());
  m->spec_ = dir;
  const std::string config_path = dir + "/config.json";
  auto config_text = ReadFile(config_path);
  if (!config_text.ok()) return config_text.status();
  auto config = ParseGptConfig(*config_text, config_path);
  if (!config.ok()) return config.status();
  m->config_ = *config;

  auto ckpt = Checkpoint::Open(dir);
  if (!ckpt.ok()) return ckpt.status();
  for (const char* key : {"transformer.wte.weight", "wte.weight"}) {
    if (const TensorInfo* t = ckpt->Find(key)) m->stored_dtype_ = std::string(DTypeName(t->dtype));
  }
  // Hugging Face saves GPT2LMHeadModel with "transformer.", GPT2Model without.
  m->source_ = std::make_unique<CheckpointSource>(std::move(*ckpt), "transformer.", m->stored_dtype_);
  // GPT-2's head is wte unless the checkpoint saved an lm_head.
  if (m->config_.arch().tied_unless_stored) {
    m->config_.tie_word_embeddings = !m->source_->Has("lm_head.weight");
  }
  // Every tensor there, with its shape, now; the data when a rank needs it.
  if (absl::Status st = m->CheckWeights(); !st.ok()) return st;

  auto tokenizer = LoadDirectoryTokenizer(dir, m->config_.vocab_size, "gpt2");
  if (!tokenizer.ok()) return tokenizer.status();
  if (*tokenizer != nullptr && m->config_.eos_token_id < 0) {
    m->config_.eos_token_id = (*tokenizer)->TokenId("<|endoftext|>");
  }
  m->tokenizer_ = std::move(*tokenizer);
  auto chat = LoadDirectoryChatTemplate(dir);
  if (!chat.ok()) return chat.status();
  m->chat_template_ = std::move(*chat);
  m->Describe();
  return m;
}

absl::StatusOr<std::unique_ptr<Gpt2Checkpoint>> Gpt2Checkpoint::Load(absl::string_view spec) {
  constexpr absl::string_view kBuiltin = "builtin:";
  if (absl::StartsWith(spec, kBuiltin)) return Builtin(spec.substr(kBuiltin.size()));
  return LoadDirectory(std::string(spec));
}

}  // namespace flover
