// SplitMix64: a tiny, fully specified 64-bit generator, so what is seeded
// with it (built-in models' weights, samplers' states) is the same on every
// platform and standard library.
#ifndef FLOVER_UTIL_SPLIT_MIX64_H_
#define FLOVER_UTIL_SPLIT_MIX64_H_

#include <cstdint>

namespace flover {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float NextSigned() { return static_cast<float>((Next() >> 40) * 0x1.0p-23 - 1.0); }

 private:
  uint64_t state_;
};

}  // namespace flover

#endif  // FLOVER_UTIL_SPLIT_MIX64_H_
