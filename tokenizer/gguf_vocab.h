// A tokenizer as a GGUF file describes it (the tokenizer.ggml.* keys),
// built as the HfTokenizer pipeline that tokenizes as llama.cpp does:
//
//   "gpt2"   byte-level BPE: the file's merges by rank, the pre-tokenizer
//            tokenizer.ggml.pre names (as the Hugging Face tokenizer.json
//            of those models spells it), a ByteLevel decoder;
//   "llama"  SentencePiece BPE: merges from the token scores (the highest
//            scoring pair first, ties to the leftmost, as sentencepiece and
//            llama.cpp merge), byte-fallback tokens, spaces as U+2581 with one
//            prepended to each run of text that starts the input or follows a
//            special token (add_space_prefix).
//
// Control, user-defined and unknown tokens are matched in text as special
// tokens (so a chat template's <|im_start|> is one token), and BOS / EOS are
// added as add_bos_token / add_eos_token say (each model's llama.cpp default
// when the file does not).
#ifndef FLOVER_TOKENIZER_GGUF_VOCAB_H_
#define FLOVER_TOKENIZER_GGUF_VOCAB_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace flover {

// llama.cpp's token types (tokenizer.ggml.token_type).
enum class GgufTokenType : int32_t {
  kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
};

struct GgufVocab {
  std::string model;                // tokenizer.ggml.model: "gpt2", "llama" or "gemma4"
  std::string pre;                  // tokenizer.ggml.pre ("" when absent: "default")
  std::vector<std::string> tokens;  // by id
  std::vector<int32_t> types;       // by id; empty when the file has none (all normal)
  std::vector<float> scores;        // by id; "llama" needs them
  std::vector<std::string> merges;  // "gpt2": "a b", by rank
  int32_t bos_id = -1, eos_id = -1, unk_id = -1;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
};

}  // namespace flover

#endif  // FLOVER_TOKENIZER_GGUF_VOCAB_H_
