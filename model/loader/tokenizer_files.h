// What a Hugging Face model directory says about text, beside the weights:
// its tokenizer (tokenizer.json, or GPT-2's vocab.json + merges.txt) and the
// ids generation stops at (generation_config.json, tokenizer_config.json).
#ifndef FLOVER_MODEL_LOADER_TOKENIZER_FILES_H_
#define FLOVER_MODEL_LOADER_TOKENIZER_FILES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/hf_tokenizer.h"

namespace flover {

// tokenizer.json when the directory has one, else vocab.json + merges.txt
// (both or neither), else null: the model then takes token ids only. A
// tokenizer with ids beyond the model's vocabulary is refused.
absl::StatusOr<std::shared_ptr<const HfTokenizer>> LoadDirectoryTokenizer(const std::string& dir,
                                                                         int model_vocab_size);

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
