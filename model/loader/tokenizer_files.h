// What a Hugging Face model directory says about text, beside the weights:
// its tokenizer (tokenizer.json, or GPT-2's vocab.json + merges.txt), the ids
// generation stops at (generation_config.json, tokenizer_config.json), and
// its chat template.
#ifndef FLOVER_MODEL_LOADER_TOKENIZER_FILES_H_
#define FLOVER_MODEL_LOADER_TOKENIZER_FILES_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/loader/chat_template_info.h"
#include "tokenizer/hf_tokenizer.h"

namespace flover {

// tokenizer_config.json, as far as Flover reads it ({} when the directory
// has none; a field of the wrong type is an error naming it).
struct TokenizerConfig {
  std::string tokenizer_class;  // without a "Fast" suffix
  std::optional<bool> add_bos_token, add_eos_token;
  std::string bos_token, eos_token;  // strings, or an AddedToken's content
  std::string chat_template;         // a string, or the list's "default"
};
absl::StatusOr<TokenizerConfig> ReadTokenizerConfig(const std::string& dir);

// tokenizer.json when the directory has one, else vocab.json + merges.txt
// (both or neither), else null: the model then takes token ids only. A
// tokenizer with ids beyond the model's vocabulary is refused. As
// transformers: where the tokenizer class (tokenizer_config.json's, or the
// one `model_type` implies) is Llama's, CodeLlama's, Gemma's, Cohere's or
// GPT-NeoX's, BOS and EOS go around the text as add_bos_token and
// add_eos_token say (each class's defaults otherwise), whatever
// tokenizer.json's post-processor did.
absl::StatusOr<std::shared_ptr<const HfTokenizer>> LoadDirectoryTokenizer(
    const std::string& dir, int model_vocab_size, const std::string& model_type);

// The directory's chat template: chat_template.jinja if present, else
// tokenizer_config.json's chat_template; with its bos and eos tokens.
absl::StatusOr<ChatTemplateInfo> LoadDirectoryChatTemplate(const std::string& dir);

// The ids generation stops at: generation_config.json's eos_token_id when the
// directory has that file and field (transformers' generate() uses it over
// config.json's), else `config_eos` (config.json's), else the eos_token named
// in tokenizer_config.json, looked up in `tokenizer` (may be null). Every id
// must be in the model's vocabulary.
absl::StatusOr<std::vector<int32_t>> ResolveEosIds(const std::string& dir,
                                                   std::vector<int32_t> config_eos,
                                                   const HfTokenizer* tokenizer,
                                                   int model_vocab_size);

}  // namespace flover

#endif  // FLOVER_MODEL_LOADER_TOKENIZER_FILES_H_
