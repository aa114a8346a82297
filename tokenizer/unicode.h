// UTF-8 decoding, the Unicode character classes pre-tokenizer patterns use
// (letters, marks, numbers, punctuation, white space as Python's `regex`
// defines them), and normalization form C (Qwen's tokenizer.json normalizer).
#ifndef FLOVER_TOKENIZER_UNICODE_H_
#define FLOVER_TOKENIZER_UNICODE_H_

#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace flover {

struct CodepointRange {
  char32_t first, last;
};

// One decoded code point and the byte range it came from.
struct Utf8Char {
  char32_t cp;
  uint32_t begin, end;
};

// Decodes well-formed UTF-8; any ill-formed sequence is an error naming its
// byte offset.
absl::StatusOr<std::vector<Utf8Char>> DecodeUtf8(absl::string_view s);

// Replaces each maximal ill-formed subpart with U+FFFD, as Python's
// bytes.decode("utf-8", errors="replace") does.
std::string SanitizeUtf8(absl::string_view s);

// Length of the longest prefix of `s` that ends on a character boundary of
// well-formed UTF-8 (an incomplete trailing sequence is left out), used when
// text is streamed token by token.
size_t CompleteUtf8Prefix(absl::string_view s);

void AppendUtf8(char32_t cp, std::string* out);

// Unicode normalization form C of well-formed UTF-8 (canonical
// decomposition, canonical ordering, canonical composition, as Python's
// unicodedata.normalize("NFC") and Hugging Face tokenizers' NFC normalizer
// do; tables from tools/gen_nfc_tables.py, Hangul by arithmetic). Text
// without any code point NFC can change comes back as it is.
std::string NfcNormalize(absl::string_view utf8);

bool IsLetter(char32_t cp);   // \p{L}
bool IsMark(char32_t cp);     // \p{M}: combining marks (Qwen3.5 keeps them with letters)
bool IsNumber(char32_t cp);   // \p{N}
bool IsSpace(char32_t cp);    // \s
bool IsPunctuation(char32_t cp);  // \p{P}
// The letters' general categories (o200k's pattern names them):
// \p{Lu} \p{Ll} \p{Lt} \p{Lm} \p{Lo}.
enum class LetterCategory { kUpper, kLower, kTitle, kModifier, kOther };
bool IsLetterOf(LetterCategory category, char32_t cp);

}  // namespace flover

#endif  // FLOVER_TOKENIZER_UNICODE_H_
