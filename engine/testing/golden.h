// Helpers shared by the tests that compare with golden fixtures.
#ifndef FLOVER_ENGINE_TESTING_GOLDEN_H_
#define FLOVER_ENGINE_TESTING_GOLDEN_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "google/protobuf/struct.pb.h"

namespace flover::testing {

// max |a - b| / max |b| over n values: "within 1e-4 relative to the logit scale".
inline double ScaledError(const float* a, const float* b, size_t n) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < n; ++i) {
    diff = std::max(diff, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(b[i])));
  }
  return diff / scale;
}

// A JSON list of numbers as token ids.
inline std::vector<int32_t> JsonIds(const google::protobuf::Value& list) {
  std::vector<int32_t> ids;
  for (const auto& v : list.list_value().values()) ids.push_back(static_cast<int32_t>(v.number_value()));
  return ids;
}

}  // namespace flover::testing

#endif  // FLOVER_ENGINE_TESTING_GOLDEN_H_
