#include "tokenizer/unicode.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace flover {
namespace {

#include "tokenizer/unicode_tables.inc"

template <size_t N>
bool InRanges(const CodepointRange (&ranges)[N], char32_t cp) {
  auto it = std::upper_bound(ranges, ranges + N, cp,
                             [](char32_t c, const CodepointRange& r) { return c < r.first; });
  return it != ranges && cp <= (it - 1)->last;
}

// Length of the well-formed sequence starting at s[i] (Unicode Table 3-7), or
// -k where k >= 1 is the length of the maximal ill-formed subpart there.
int SequenceLength(absl::string_view s, size_t i, char32_t* cp) {
  const unsigned char b0 = s[i];
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  int len;
  unsigned char lo = 0x80, hi = 0xBF;  // valid range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  char32_t c = b0 & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    if (i + k >= s.size()) return -k;
    const unsigned char b = s[i + k];
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return -k;
    c = (c << 6) | (b & 0x3F);
  }
  *cp = c;
  return len;
}

}  // namespace

absl::StatusOr<std::vector<Utf8Char>> DecodeUtf8(absl::string_view s) {
  std::vector<Utf8Char> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    const int n = SequenceLength(s, i, &cp);
    if (n < 0) {
      return absl::InvalidArgumentError(absl::StrCat("invalid UTF-8 at byte ", i));
    }
    out.push_back({cp, static_cast<uint32_t>(i), static_cast<uint32_t>(i + n)});
    i += n;
  }
  return out;
}

std::string SanitizeUtf8(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    const int n = SequenceLength(s, i, &cp);
    if (n > 0) {
      out.append(s.data() + i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += -n;
    }
  }
  return out;
}

size_t CompleteUtf8Prefix(absl::string_view s) {
  // Only the last up-to-3 bytes can be an unfinished sequence.
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const size_t i = s.size() - back;
    const unsigned char b = s[i];
    if (b < 0x80) return s.size();
    if (b >= 0xC0) {  // a lead byte: is its sequence cut short by the end?
      char32_t cp;
      const int n = SequenceLength(s, i, &cp);
      return (n < 0 && size_t(-n) == back) ? i : s.size();
    }
  }
  return s.size();
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool IsLetter(char32_t cp) { return InRanges(kLetterRanges, cp); }
bool IsNumber(char32_t cp) { return InRanges(kNumberRanges, cp); }
bool IsSpace(char32_t cp) { return InRanges(kSpaceRanges, cp); }
bool IsPunctuation(char32_t cp) { return InRanges(kPunctuationRanges, cp); }

}  // namespace flover
