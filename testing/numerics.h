// Random inputs and error measures shared by the kernel tests.
#ifndef FLOVER_KERNELS_TESTING_NUMERICS_H_
#define FLOVER_KERNELS_TESTING_NUMERICS_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace flover::testing {

// n values uniform in [-scale, scale), the same for the same seed.
inline std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// max |a - b| / max(1, max |b|): the error relative to the reference's scale.
template <typename B>
double RelErr(const std::vector<float>& a, const std::vector<B>& b) {
  EXPECT_EQ(a.size(), b.size());
  double max_diff = 0, max_ref = 1;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    max_diff = std::max(max_diff, std::abs(double{a[i]} - double{b[i]}));
    max_ref = std::max(max_ref, std::abs(double{b[i]}));
  }
  return max_diff / max_ref;
}

// gelu_new (the tanh form) in double.
inline double GeluRef(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

}  // namespace flover::testing

#endif  // FLOVER_KERNELS_TESTING_NUMERICS_H_
