#include "util/byte_size.h"

#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace flover {

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", text, "\" is not a memory size (e.g. 4GiB, 512MiB, 1.5G, or bytes)"));
  };
  const std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  size_t digits = 0;
  while (digits < s.size() && (absl::ascii_isdigit(s[digits]) || s[digits] == '.')) ++digits;
  if (digits == 0) return bad();
  const std::string number = s.substr(0, digits);
  std::string unit(absl::StripAsciiWhitespace(absl::string_view(s).substr(digits)));
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},           {"b", 1},
      {"k", 0x1p10},     {"kib", 0x1p10}, {"kb", 1e3},
      {"m", 0x1p20},     {"mib", 0x1p20}, {"mb", 1e6},
      {"g", 0x1p30},     {"gib", 0x1p30}, {"gb", 1e9},
      {"t", 0x1p40},     {"tib", 0x1p40}, {"tb", 1e12},
  };
  double scale = 0;
  for (const auto& [name, factor] : kUnits) {
    if (unit == name) scale = factor;
  }
  if (scale == 0) return bad();
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size()) return bad();
  if (scale == 1 && number.find('.') != std::string::npos) return bad();  // fractions of a byte
  const double bytes = std::floor(value * scale);
  if (!(bytes >= 0) || bytes > 0x1p62) return bad();
  return static_cast<int64_t>(bytes);
}

std::string FormatByteSize(int64_t bytes) {
  static const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = static_cast<double>(bytes);
  while (u < 4 && v >= 1024) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrCat(bytes, " B") : absl::StrFormat("%.1f %s", v, kNames[u]);
}

}  // namespace flover
