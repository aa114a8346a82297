// Seeded random weights for a vision tower's tensors, for benchmarks:
// norm weights near 1, everything else small, as trained weights are; a
// tensor's values depend on its name and the seed only.
#ifndef FLOVER_MODEL_VISION_RANDOM_WEIGHTS_H_
#define FLOVER_MODEL_VISION_RANDOM_WEIGHTS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace flover {

inline std::vector<float> RandomTowerWeights(const std::string& name, const std::vector<int64_t>& shape,
                                             uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const bool norm = name.find("norm") != std::string::npos && name.find(".weight") != std::string::npos;
  std::vector<float> v(n);
  uint64_t x = seed ^ std::hash<std::string>{}(name);
  for (float& f : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const float u = static_cast<float>((x >> 40) & 0xffffff) / (1 << 24) - 0.5f;
    f = norm ? 1.0f + 0.1f * u : 0.04f * u;
  }
  return v;
}

}  // namespace flover

#endif  // FLOVER_MODEL_VISION_RANDOM_WEIGHTS_H_
