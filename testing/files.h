// Small helpers for tests that read fixture files from the runfiles tree.
#ifndef FLOVER_TESTING_FILES_H_
#define FLOVER_TESTING_FILES_H_

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

}  // namespace flover::testing

#endif  // FLOVER_TESTING_FILES_H_
