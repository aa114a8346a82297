#include "server/api_keys.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "util/file_util.h"

namespace flover::server {

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  // Every byte of the longer string is read whatever the contents.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

absl::StatusOr<std::vector<std::string>> ApiKeys::Read(const std::string& path) {
  auto text = ReadFlagFile("--api_key_file", path);
  if (!text.ok()) return text.status();
  std::vector<std::string> keys;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    keys.emplace_back(line);
  }
  if (keys.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--api_key_file: ", path, " has no keys"));
  }
  return keys;
}

absl::StatusOr<std::unique_ptr<ApiKeys>> ApiKeys::Load(const std::string& path) {
  std::unique_ptr<ApiKeys> keys(new ApiKeys(path));
  if (absl::Status st = keys->Reload(); !st.ok()) return st;
  return keys;
}

absl::Status ApiKeys::Reload() {
  auto keys = Read(path_);
  if (!keys.ok()) return keys.status();
  auto fresh = std::make_shared<const std::vector<std::string>>(std::move(*keys));
  std::lock_guard<std::mutex> lock(mu_);
  keys_ = std::move(fresh);
  return absl::OkStatus();
}

size_t ApiKeys::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return keys_ ? keys_->size() : 0;
}

absl::Status ApiKeys::Check(absl::string_view authorization) const {
  std::shared_ptr<const std::vector<std::string>> keys;
  {
    std::lock_guard<std::mutex> lock(mu_);
    keys = keys_;
  }
  constexpr absl::string_view kBearer = "Bearer ";
  if (!absl::StartsWith(authorization, kBearer)) {
    return absl::UnauthenticatedError(
        "missing API key: send the header authorization: Bearer KEY");
  }
  const absl::string_view given = authorization.substr(kBearer.size());
  bool found = false;
  for (const std::string& key : *keys) found |= ConstantTimeEquals(given, key);
  if (!found) return absl::UnauthenticatedError("invalid API key");
  return absl::OkStatus();
}

}  // namespace flover::server
