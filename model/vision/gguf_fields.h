// What llama.cpp's mmproj loaders (model/vision) read the same way.
#ifndef FLOVER_MODEL_VISION_GGUF_FIELDS_H_
#define FLOVER_MODEL_VISION_GGUF_FIELDS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "model/loader/gguf.h"

namespace flover {

// The file's integer `key`, which must lie in [lo, hi] (InvalidArgument
// naming the file, the key and its value otherwise); `absent` where the
// file has none, or the file's NotFound without it.
inline absl::StatusOr<int> GgufIntIn(const GgufFile& f, const std::string& key, std::optional<int64_t> absent,
                                     int64_t lo, int64_t hi) {
  absl::StatusOr<int64_t> v = absent.has_value() ? f.GetIntOr(key, *absent) : f.GetInt(key);
  if (!v.ok()) return v.status();
  if (*v < lo || *v > hi) {
    return absl::InvalidArgumentError(absl::StrCat(f.name(), ": ", key, " ", *v, " is out of range"));
  }
  return static_cast<int>(*v);
}

}  // namespace flover

#endif  // FLOVER_MODEL_VISION_GGUF_FIELDS_H_
