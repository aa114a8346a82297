// Arbitrary bytes as a model's config.json, for each family: a status for
// anything malformed or out of range, never a crash.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "model/gpt2/gpt_config.h"
#include "model/llama/llama_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view json(reinterpret_cast<const char*>(data), size);
  (void)flover::ParseGptConfig(json, "config.json");
  (void)flover::ParseLlamaConfig(json, "config.json");
  return 0;
}
