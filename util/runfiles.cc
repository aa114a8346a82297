#include "util/runfiles.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace flover {
namespace {

std::string ExecutablePath() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : std::string();
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

std::vector<std::string> RunfileCandidates(absl::string_view env_var, absl::string_view beside,
                                           absl::string_view runfile) {
  std::vector<std::string> out;
  if (!env_var.empty()) {
    const char* env = std::getenv(std::string(env_var).c_str());
    if (env != nullptr && *env != '\0') out.push_back(env);
  }
  const std::string exe = ExecutablePath();
  if (!exe.empty()) {
    if (!beside.empty()) out.push_back(absl::StrCat(Dirname(exe), "/", beside));
    out.push_back(absl::StrCat(exe, ".runfiles/flover/", runfile));
  }
  for (const char* var : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* dir = std::getenv(var); dir != nullptr && *dir != '\0') {
      out.push_back(absl::StrCat(dir, "/flover/", runfile));
    }
  }
  return out;
}

std::string FindRunfile(absl::string_view env_var, absl::string_view beside,
                        absl::string_view runfile) {
  for (const std::string& c : RunfileCandidates(env_var, beside, runfile)) {
    if (access(c.c_str(), R_OK) == 0) return c;
  }
  return "";
}

}  // namespace flover
