// GPT-2 byte-level BPE tokenizer from vocab.json + merges.txt, producing the
// same ids and text as Hugging Face's GPT2Tokenizer.
#ifndef FLOVER_TOKENIZER_BPE_TOKENIZER_H_
#define FLOVER_TOKENIZER_BPE_TOKENIZER_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tokenizer/tokenizer.h"

namespace flover {

class BpeTokenizer final : public Tokenizer {
 public:
  static absl::StatusOr<BpeTokenizer> Load(const std::string& vocab_path,
                                           const std::string& merges_path);
  // `what` names the source in errors.
  static absl::StatusOr<BpeTokenizer> FromStrings(absl::string_view vocab_json,
                                                  absl::string_view merges,
                                                  absl::string_view what);

  // Text must be valid UTF-8. "<|endoftext|>" in the text is the special
  // token, as in Hugging Face.
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const override;

  // The raw bytes the tokens stand for (may end inside a UTF-8 character).
  // Ids must be < vocab_size().
  std::string DecodeBytes(absl::Span<const int32_t> ids) const override;
  // Text, with ill-formed UTF-8 replaced by U+FFFD (errors="replace").
  std::string Decode(absl::Span<const int32_t> ids) const override;

  int vocab_size() const override { return static_cast<int>(id_to_bytes_.size()); }
  // Id of "<|endoftext|>", or -1.
  int32_t end_of_text_id() const { return end_of_text_id_; }

 private:
  BpeTokenizer() = default;
  // Appends the ids of one pre-tokenized word (raw bytes).
  void EncodeWord(absl::string_view word, std::vector<int32_t>* ids) const;

  absl::flat_hash_map<std::string, int32_t> token_to_id_;  // byte-level strings
  std::vector<std::string> id_to_bytes_;                   // raw bytes per id
  absl::flat_hash_map<std::string, int32_t> merge_rank_;   // "a b" -> rank
  std::string byte_symbol_[256];                           // byte -> UTF-8 symbol
  int32_t end_of_text_id_ = -1;
};

// Splits text as GPT-2's pattern does:
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Text must be valid UTF-8; returns the pieces as views into `text`.
absl::StatusOr<std::vector<absl::string_view>> PreTokenize(absl::string_view text);

}  // namespace flover

#endif  // FLOVER_TOKENIZER_BPE_TOKENIZER_H_
