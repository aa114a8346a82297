// Q3_K super-blocks rewritten as Q6_K ones hold the same values: each
// dequantizes to the same bits, for random blocks and for the extremes of
// every field (scales 0 and 63, every high bit clear or set).
#include "kernels/ggml_dequant.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace flover::kernels {
namespace {

std::vector<float> Dequantize(GgmlType type, const std::vector<uint8_t>& blocks, int n) {
  std::vector<float> out(n);
  GgmlDequantize(*GgmlTypeOf(static_cast<uint32_t>(type)), blocks.data(), n, out.data());
  return out;
}

TEST(GgmlQ3KAsQ6KTest, HoldsTheSameValues) {
  constexpr int kBlocks = 64;
  std::mt19937 rng(7);
  std::vector<uint8_t> q3(kBlocks * 110);
  for (uint8_t& b : q3) b = static_cast<uint8_t>(rng());
  // Block 0: every byte 0 (scales 0, so -32; every high bit clear); block
  // 1: every byte 0xFF (scales 63, so 31; every high bit set).
  std::memset(q3.data(), 0x00, 108);
  std::memset(q3.data() + 110, 0xFF, 108);
  // Finite scales d: an f16 of magnitude 2^-14 .. 2^1, either sign.
  for (int i = 0; i < kBlocks; ++i) {
    const uint16_t d = static_cast<uint16_t>(((rng() & 1) << 15) | ((1 + rng() % 16) << 10) | (rng() & 0x3FF));
    std::memcpy(&q3[i * 110 + 108], &d, 2);
  }
  std::vector<uint8_t> q6(kBlocks * 210);
  GgmlQ3KAsQ6K(q3.data(), kBlocks, q6.data());
  const std::vector<float> want = Dequantize(GgmlType::kQ3_K, q3, kBlocks * 256);
  const std::vector<float> got = Dequantize(GgmlType::kQ6_K, q6, kBlocks * 256);
  ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
  // The extremes are there: -32 * -4 and 31 * 3 times d.
  const float d0 = want[0] / 128.0f, d1 = want[256] / 93.0f;
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(want[e], d0 * 128.0f) << e;
    EXPECT_EQ(want[256 + e], d1 * 93.0f) << e;
  }
}

}  // namespace
}  // namespace flover::kernels
