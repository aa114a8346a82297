#include "chat/jinja_text.h"

namespace flover::jinja {
namespace {

size_t CharLength(unsigned char c) {
  return c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
}

// The start of the character that ends at `end` (exclusive).
size_t PreviousStart(absl::string_view s, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  return start;
}

}  // namespace

bool SpaceAt(absl::string_view s, size_t i, size_t* n) {
  const unsigned char c = s[i];
  *n = std::min(CharLength(c), s.size() - i);
  if (c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1C && c <= 0x1F)) return true;
  const absl::string_view ch = s.substr(i, *n);
  // U+0085, U+00A0, U+1680, U+2000-200A, U+2028, U+2029, U+202F, U+205F, U+3000
  if (ch == "\xC2\x85" || ch == "\xC2\xA0" || ch == "\xE1\x9A\x80" || ch == "\xE2\x80\xA8" ||
      ch == "\xE2\x80\xA9" || ch == "\xE2\x80\xAF" || ch == "\xE2\x81\x9F" || ch == "\xE3\x80\x80") {
    return true;
  }
  return ch.size() == 3 && ch.substr(0, 2) == "\xE2\x80" && static_cast<unsigned char>(ch[2]) >= 0x80 &&
         static_cast<unsigned char>(ch[2]) <= 0x8A;
}

size_t LeadingSpace(absl::string_view s) {
  size_t i = 0, n = 0;
  while (i < s.size() && SpaceAt(s, i, &n)) i += n;
  return i;
}

absl::string_view RStrip(absl::string_view s) {
  size_t end = s.size(), n = 0;
  while (end > 0) {
    const size_t start = PreviousStart(s, end);
    if (!SpaceAt(s, start, &n) || start + n != end) break;
    end = start;
  }
  return s.substr(0, end);
}

absl::string_view LStrip(absl::string_view s) { return s.substr(LeadingSpace(s)); }

absl::string_view Strip(absl::string_view s) { return LStrip(RStrip(s)); }

std::vector<std::string> Characters(absl::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = std::min(CharLength(static_cast<unsigned char>(s[i])), s.size() - i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

absl::string_view StripChars(absl::string_view s, absl::string_view chars, bool left, bool right) {
  const std::vector<std::string> set = Characters(chars);
  auto in_set = [&](absl::string_view c) {
    for (const std::string& x : set) {
      if (x == c) return true;
    }
    return false;
  };
  size_t begin = 0, end = s.size();
  while (left && begin < end) {
    const size_t n = std::min(CharLength(static_cast<unsigned char>(s[begin])), end - begin);
    if (!in_set(s.substr(begin, n))) break;
    begin += n;
  }
  while (right && end > begin) {
    const size_t start = std::max(PreviousStart(s, end), begin);
    if (!in_set(s.substr(start, end - start))) break;
    end = start;
  }
  return s.substr(begin, end - begin);
}

}  // namespace flover::jinja
