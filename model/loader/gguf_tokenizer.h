// What a GGUF file says about text beside its weights: the tokenizer
// (tokenizer.ggml.*), the ids generation stops at, and the chat template.
#ifndef FLOVER_MODEL_LOADER_GGUF_TOKENIZER_H_
#define FLOVER_MODEL_LOADER_GGUF_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/loader/gguf.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/hf_tokenizer.h"

namespace flover {

struct GgufText {
  std::shared_ptr<const HfTokenizer> tokenizer;  // null: the file has no tokenizer
  // eos_token_id, then eot_token_id and eom_token_id where they differ: a
  // chat model's end of turn ends generation as its EOS does (llama.cpp
  // stops at all of them); with harmony's <|return|> as the EOS (gpt-oss),
  // its <|call|> too.
  std::vector<int32_t> eos_ids;
  int32_t bos_id = -1;
  std::string chat_template;  // tokenizer.chat_template, or ""
};

// The tokenizer.ggml.* keys as a GgufVocab (NotFound when the file has no
// tokenizer.ggml.tokens); a key of the wrong type is an error naming it.
absl::StatusOr<GgufVocab> ReadGgufVocab(const GgufFile& file);

// Everything above; a vocabulary larger than the model's embedding
// (`model_vocab_size` rows) is refused.
absl::StatusOr<GgufText> ReadGgufText(const GgufFile& file, int model_vocab_size);

}  // namespace flover

#endif  // FLOVER_MODEL_LOADER_GGUF_TOKENIZER_H_
