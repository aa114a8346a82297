// Text as Python's str methods see it, on UTF-8: white space (str.isspace),
// stripping, and splitting into code points. Shared by the template lexer
// and the string methods and filters.
#ifndef FLOVER_CHAT_JINJA_TEXT_H_
#define FLOVER_CHAT_JINJA_TEXT_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace flover::jinja {

// Whether the character at s[i] is white space to Python (str.isspace); its
// length in bytes in *n either way.
bool SpaceAt(absl::string_view s, size_t i, size_t* n);
// The length of the white space at the start of `s`.
size_t LeadingSpace(absl::string_view s);
// `s` without trailing / leading / either white space (str.rstrip() ...).
absl::string_view RStrip(absl::string_view s);
absl::string_view LStrip(absl::string_view s);
absl::string_view Strip(absl::string_view s);
// `s` without trailing / leading characters that are in `chars` (code points).
absl::string_view StripChars(absl::string_view s, absl::string_view chars, bool left, bool right);
// Each character of `s` (code points as UTF-8 substrings).
std::vector<std::string> Characters(absl::string_view s);

}  // namespace flover::jinja

#endif  // FLOVER_CHAT_JINJA_TEXT_H_
