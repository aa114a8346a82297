// Small helpers for tests that read fixture files from the runfiles tree.
#ifndef FLOVER_TESTING_FILES_H_
#define FLOVER_TESTING_FILES_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace flover::testing {

// Reads a whole file; an unreadable file is returned as "" and fails the
// test that parses it.
inline std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return std::move(ss).str();
}

inline void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

// Whether `path` (a fixture under tests/golden) is missing from a run that
// carries only part of the fixtures: FLOVER_GOLDENS_PARTIAL=1, which the
// GPU bundle's run_gpu_checks.sh sets when a call carries one part of them
// (the device tool sends at most 64 MiB, less than all of them). A case
// whose fixture is not carried then skips, naming it
// (FLOVER_SKIP_IF_NOT_CARRIED); everywhere else a missing fixture fails the
// test as it always did.
inline bool FixtureNotCarried(const std::string& path) {
  const char* partial = std::getenv("FLOVER_GOLDENS_PARTIAL");
  if (partial == nullptr || std::string(partial) != "1") return false;
  std::error_code error;
  return !std::filesystem::exists(path, error);
}

}  // namespace flover::testing

// In a test (gtest included): skips it when `path` is not carried.
#define FLOVER_SKIP_IF_NOT_CARRIED(path)                                                  \
  do {                                                                                    \
    if (::flover::testing::FixtureNotCarried(path)) {                                     \
      GTEST_SKIP() << (path) << ": not in the part of the fixtures this run carries";    \
    }                                                                                     \
  } while (0)

#endif  // FLOVER_TESTING_FILES_H_
