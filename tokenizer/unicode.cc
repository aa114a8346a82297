#include "tokenizer/unicode.h"

#include <algorithm>
#include <iterator>
#include <tuple>
#include <utility>

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
bool IsMark(char32_t cp) { return InRanges(kMarkRanges, cp); }
bool IsNumber(char32_t cp) { return InRanges(kNumberRanges, cp); }
bool IsSpace(char32_t cp) { return InRanges(kSpaceRanges, cp); }
bool IsPunctuation(char32_t cp) { return InRanges(kPunctuationRanges, cp); }

bool IsLetterOf(LetterCategory category, char32_t cp) {
  switch (category) {
    case LetterCategory::kUpper: return InRanges(kUpperRanges, cp);
    case LetterCategory::kLower: return InRanges(kLowerRanges, cp);
    case LetterCategory::kTitle: return InRanges(kTitleRanges, cp);
    case LetterCategory::kModifier: return InRanges(kModifierLetterRanges, cp);
    case LetterCategory::kOther: return InRanges(kOtherLetterRanges, cp);
  }
  return false;
}

}  // namespace flover

namespace flover {
namespace {

#include "tokenizer/nfc_tables.inc"

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

int CombiningClass(char32_t cp) {
  const auto* end = std::end(kCombiningClass);
  const auto* it = std::lower_bound(std::begin(kCombiningClass), end, cp,
                                    [](const uint32_t (&e)[2], char32_t c) { return e[0] < c; });
  return it != end && (*it)[0] == cp ? static_cast<int>((*it)[1]) : 0;
}

void Decompose(char32_t cp, std::vector<char32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const int s = static_cast<int>(cp - kSBase);
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const auto* end = std::end(kDecomposition);
  const auto* it = std::lower_bound(std::begin(kDecomposition), end, cp,
                                    [](const auto& e, char32_t c) { return e[0] < c; });
  if (it == end || (*it)[0] != cp) {
    out->push_back(cp);
    return;
  }
  for (uint32_t i = 0; i < (*it)[1]; ++i) out->push_back((*it)[2 + i]);
}

// The primary composite of a and b, or 0.
char32_t Compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto* end = std::end(kComposition);
  const auto* it = std::lower_bound(std::begin(kComposition), end, std::pair<char32_t, char32_t>(a, b),
                                    [](const uint32_t (&e)[3], const std::pair<char32_t, char32_t>& k) {
                                      return e[0] != k.first ? e[0] < k.first : e[1] < k.second;
                                    });
  return it != end && (*it)[0] == a && (*it)[1] == b ? (*it)[2] : 0;
}

// Whether NFC may change a text with this code point: anything but ASCII
// below U+0300 (no decomposition, class 0, no composition with a later
// ASCII one).
bool MayChange(char32_t cp) { return cp >= 0xC0; }

}  // namespace

std::string NfcNormalize(absl::string_view utf8) {
  auto chars = DecodeUtf8(utf8);
  if (!chars.ok()) return std::string(utf8);
  if (std::none_of(chars->begin(), chars->end(), [](const Utf8Char& c) { return MayChange(c.cp); })) {
    return std::string(utf8);
  }
  // Canonical decomposition, then each run of non-starters stably sorted by
  // combining class.
  std::vector<char32_t> cps;
  for (const Utf8Char& c : *chars) Decompose(c.cp, &cps);
  std::vector<int> ccc(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) ccc[i] = CombiningClass(cps[i]);
  for (size_t i = 0; i < cps.size();) {
    if (ccc[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc[j] != 0) ++j;
    std::vector<std::pair<int, char32_t>> run;
    for (size_t k = i; k < j; ++k) run.push_back({ccc[k], cps[k]});
    std::stable_sort(run.begin(), run.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t k = i; k < j; ++k) std::tie(ccc[k], cps[k]) = run[k - i];
    i = j;
  }
  // Canonical composition: each character joins the last starter when
  // nothing between them blocks it (a character of the same or a higher
  // class, or a starter).
  std::vector<char32_t> out;
  std::vector<int> out_ccc;
  int starter = -1;  // index in out
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t cp = cps[i];
    const int cc = ccc[i];
    if (starter >= 0) {
      const int last = out_ccc.back();
      const bool blocked = static_cast<int>(out.size()) - 1 != starter && (last == 0 || last >= cc);
      if (!blocked) {
        if (const char32_t composite = Compose(out[starter], cp); composite != 0) {
          out[starter] = composite;
          continue;
        }
      }
    }
    if (cc == 0) starter = static_cast<int>(out.size());
    out.push_back(cp);
    out_ccc.push_back(cc);
  }
  std::string s;
  s.reserve(utf8.size());
  for (char32_t cp : out) AppendUtf8(cp, &s);
  return s;
}

}  // namespace flover
