#include "util/file_util.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace flover {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open file"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return std::move(ss).str();
}

absl::StatusOr<std::string> ReadFlagFile(absl::string_view flag, const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", text.status().message()));
  return text;
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace flover
