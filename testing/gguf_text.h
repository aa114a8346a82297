// Reads a GGUF file's tokenizer and chat template for tests; a file that
// does not open or parse fails the calling test and gives an empty GgufText.
#ifndef FLOVER_TESTING_GGUF_TEXT_H_
#define FLOVER_TESTING_GGUF_TEXT_H_

#include <gtest/gtest.h>

#include <string>

#include "model/loader/gguf.h"
#include "model/loader/gguf_tokenizer.h"

namespace flover::testing {

inline GgufText LoadGgufText(const std::string& path) {
  auto file = GgufFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return {};
  auto text = ReadGgufText(*file, 1 << 20);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : GgufText{};
}

}  // namespace flover::testing

#endif  // FLOVER_TESTING_GGUF_TEXT_H_
