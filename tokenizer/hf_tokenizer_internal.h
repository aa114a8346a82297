// What the parts of HfTokenizer share (hf_tokenizer.cc: reading
// tokenizer.json; hf_pretokenize.cc: normalizing, added tokens,
// pre-tokenization; hf_bpe.cc: BPE and Encode; hf_decode.cc: decoding and
// streaming): GPT-2's byte alphabet and split pattern, byte tokens, the
// bounds on a hostile file. Not an API: only the tokenizer's files include it.
#ifndef FLOVER_TOKENIZER_HF_TOKENIZER_INTERNAL_H_
#define FLOVER_TOKENIZER_HF_TOKENIZER_INTERNAL_H_

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"

#include "absl/strings/string_view.h"
#include "tokenizer/split_regex.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/unicode.h"

namespace flover::hf_internal {

using Piece = HfTokenizer::Piece;

// Bounds that keep a hostile file from asking for absurd allocations.
constexpr int64_t kMaxVocab = 1 << 22;

// GPT-2's pre-tokenizer pattern (ByteLevel with use_regex).
constexpr absl::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr absl::string_view kEndOfText = "<|endoftext|>";

// GPT-2's bytes_to_unicode(): printable bytes stand for themselves, the rest
// for code points from U+0100 up, so that every byte is a visible symbol.
struct ByteSymbols {
  std::string of_byte[256];
  absl::flat_hash_map<char32_t, uint8_t> byte_of;
  ByteSymbols() {
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? b : 256 + next++;
      AppendUtf8(cp, &of_byte[b]);
      byte_of[cp] = static_cast<uint8_t>(b);
    }
  }
};
const ByteSymbols& Bytes();
const SplitRegex& Gpt2Regex();

// A byte-level token's raw bytes; a token with a character outside the byte
// alphabet stands for its own UTF-8 (the library's ByteLevel decoder).
std::string ByteLevelBytes(absl::string_view token);

// "<0xNN>" -> the byte, as the ByteFallback decoder reads it.
bool ByteToken(absl::string_view t, uint8_t* byte);

// The code point starting at byte i of well-formed UTF-8 (Encode checks its
// input; every later stage keeps it well formed), and its length.
inline char32_t CodePointAt(absl::string_view s, size_t i, size_t* len) {
  const unsigned char b = s[i];
  *len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  if (i + *len > s.size()) {
    *len = 1;
    return 0xFFFD;
  }
  char32_t cp = *len == 1 ? b : b & (0x7F >> *len);
  for (size_t k = 1; k < *len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

inline bool IsWordChar(char32_t c) { return IsLetter(c) || IsNumber(c); }

// Ids per merge: both halves' and the result's.
inline uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace flover::hf_internal

#endif  // FLOVER_TOKENIZER_HF_TOKENIZER_INTERNAL_H_
