// Q3_K super-blocks rewritten as Q6_K ones, and IQ4_NL blocks as Q8_0
// ones, hold the same values: each dequantizes to the same bits, for random
// blocks and for the extremes of every field (Q3_K's scales 0 and 63, every
// high bit clear or set; every IQ4_NL index).
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

TEST(GgmlIQ4NLAsQ8_0Test, HoldsTheSameValues) {
  constexpr int kBlocks = 64;
  std::mt19937 rng(11);
  std::vector<uint8_t> nl(kBlocks * 18);
  for (uint8_t& b : nl) b = static_cast<uint8_t>(rng());
  for (int i = 0; i < kBlocks; ++i) {  // finite d
    const uint16_t d = static_cast<uint16_t>(((rng() & 1) << 15) | ((1 + rng() % 16) << 10) | (rng() & 0x3FF));
    std::memcpy(&nl[i * 18], &d, 2);
  }
  // Block 0 holds every index: 0..15 in its low nibbles, 15..0 in its high.
  for (int j = 0; j < 16; ++j) nl[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  std::vector<uint8_t> q8(kBlocks * 34);
  GgmlIQ4NLAsQ8_0(nl.data(), kBlocks, q8.data());
  const std::vector<float> want = Dequantize(GgmlType::kIQ4_NL, nl, kBlocks * 32);
  const std::vector<float> got = Dequantize(GgmlType::kQ8_0, q8, kBlocks * 32);
  ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
  // The table's ends: -127 and 113 times d.
  EXPECT_EQ(want[0] / want[16], -127.0f / 113.0f);
}

TEST(GgmlStandInTest, NamesTheTypesRunAsOthers) {
  ASSERT_NE(GgmlStandInFor(static_cast<uint32_t>(GgmlType::kQ3_K)), nullptr);
  EXPECT_EQ(GgmlStandInFor(static_cast<uint32_t>(GgmlType::kQ3_K))->as, GgmlType::kQ6_K);
  ASSERT_NE(GgmlStandInFor(static_cast<uint32_t>(GgmlType::kIQ4_NL)), nullptr);
  EXPECT_EQ(GgmlStandInFor(static_cast<uint32_t>(GgmlType::kIQ4_NL))->as, GgmlType::kQ8_0);
  for (GgmlType t : {GgmlType::kQ2_K, GgmlType::kQ4_K, GgmlType::kIQ4_XS, GgmlType::kF16}) {
    EXPECT_EQ(GgmlStandInFor(static_cast<uint32_t>(t)), nullptr);
  }
  // Each rewrite keeps the number of values a block holds.
  for (GgmlType t : {GgmlType::kQ3_K, GgmlType::kIQ4_NL}) {
    const GgmlStandIn* s = GgmlStandInFor(static_cast<uint32_t>(t));
    EXPECT_EQ(GgmlTypeOf(static_cast<uint32_t>(t))->block_size,
              GgmlTypeOf(static_cast<uint32_t>(s->as))->block_size);
  }
}

}  // namespace
}  // namespace flover::kernels
