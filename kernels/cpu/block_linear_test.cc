// BlockLinear against ggml's dequantization (model/loader/gguf_quants, which
// is bitwise gguf-py's): each format's products equal the dequantized weights
// times the quantized input up to float32 sums, and the float32 input within
// the input rounding's bound; a row's result does not depend on the batch,
// the tile its column falls in, or the spans around it.
#include "kernels/cpu/block_linear.h"


#include <gtest/gtest.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "testing/random_blocks.h"

namespace flover::kernels {
namespace {

std::vector<uint8_t> RandomRows(BlockFormat f, int rows, int K, uint32_t seed) {
  return testing::RandomBlockRows(f, rows, K, seed);
}

std::vector<float> Dequantize(BlockFormat f, const uint8_t* rows, int n, int K) {
  return testing::DequantizeBlockRows(f, rows, n, K);
}

std::vector<float> RandomInput(int M, int K, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(M) * K);
  for (float& v : x) v = normal(rng);
  // An outlier in some blocks, as activations have.
  for (size_t i = 7; i < x.size(); i += 97) x[i] *= 20.0f;
  return x;
}

struct Case {
  BlockFormat format;
  int K;
};

void PrintTo(const Case& c, std::ostream* os) { *os << InfoOf(c.format).name << " K=" << c.K; }

class BlockLinearTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (absl::Status st = BlockLinear::CheckSupported(); !st.ok()) {
      GTEST_SKIP() << "skipped: " << st.message();
    }
  }
};

// Products against the dequantized weights: times the quantized input, up to
// float32 sums; times the float32 input, within what rounding the input to
// 8 bits per 32-value block can change.
TEST_P(BlockLinearTest, MatchesTheDequantizedWeights) {
  const auto [f, K] = GetParam();
  const int N = 23, M = 6;
  const std::vector<uint8_t> bytes = RandomRows(f, N, K, 1);
  const std::vector<float> w = Dequantize(f, bytes.data(), N, K);
  const std::vector<float> x = RandomInput(M, K, 2);
  const BlockSpan span{f, N};
  BlockLinear linear;
  auto weight = linear.Prepare(HostValues(bytes.data(), &span, 1), K, N, WeightLayout::kOutIn);
  ASSERT_TRUE(weight.ok()) << weight.status();
  std::vector<float> bias(N);
  for (int n = 0; n < N; ++n) bias[n] = 0.01f * n;
  std::vector<float> out(static_cast<size_t>(M) * N);
  linear.Run(x.data(), M, **weight, bias.data(), Epilogue::kBias, out.data());

  std::vector<int8_t> q(K);
  std::vector<BlockLinear::InputBlock> blocks(K / 32);
  for (int m = 0; m < M; ++m) {
    BlockLinear::QuantizeRow(x.data() + m * K, K, q.data(), blocks.data(), BlockLinear::InputScaleValues(f));
    for (int n = 0; n < N; ++n) {
      double exact = 0, quantized = 0, magnitude = 0, rounding = 0;
      for (int k = 0; k < K; ++k) {
        const double dx = blocks[k / 32].dx;
        const int qx = q[k];
        const double wk = w[static_cast<size_t>(n) * K + k];
        exact += wk * x[m * K + k];
        quantized += wk * (dx * qx);
        magnitude += std::fabs(wk * x[m * K + k]);
        rounding += std::fabs(wk) * dx / 2;
      }
      const double got = out[m * N + n] - bias[n];
      // float32 sums of K / 32 exact block products: a few ulps of the magnitude.
      const double sums = 4e-6 * (magnitude + rounding * 2) + 1e-6;
      EXPECT_NEAR(got, quantized, sums) << InfoOf(f).name << " m=" << m << " n=" << n;
      EXPECT_NEAR(got, exact, rounding + sums) << InfoOf(f).name << " m=" << m << " n=" << n;
    }
  }
}

// Every set of tiles the instruction set in use allows (AVX-512 VNNI,
// AVX-VNNI, AVX2) gives bitwise the same outputs, at several row counts.
TEST_P(BlockLinearTest, EveryInstructionSetGivesTheSameBits) {
  const auto [f, K] = GetParam();
  const int N = 37;
  const std::vector<uint8_t> bytes = RandomRows(f, N, K, 7);
  const BlockSpan span{f, N};
  std::vector<float> bias(N);
  for (int n = 0; n < N; ++n) bias[n] = 0.01f * n;
  const BlockLinear::Tiles all[] = {BlockLinear::Tiles::kAvx512Vnni, BlockLinear::Tiles::kAvx2Vnni,
                                    BlockLinear::Tiles::kAvx2};
  // 1 and 2 rows: AVX2's one-pass tiles; 8: a tile of 6 and one of 2.
  for (int M : {1, 2, 3, 8, 9}) {
    const std::vector<float> x = RandomInput(M, K, 8 + M);
    std::vector<float> first;
    int ran = 0;
    for (BlockLinear::Tiles tiles : all) {
      if (!BlockLinear::Runs(tiles)) continue;
      BlockLinear linear;
      linear.set_tiles(tiles);
      auto weight = linear.Prepare(HostValues(bytes.data(), &span, 1), K, N, WeightLayout::kOutIn);
      ASSERT_TRUE(weight.ok()) << weight.status();
      std::vector<float> out(static_cast<size_t>(M) * N);
      linear.Run(x.data(), M, **weight, bias.data(), Epilogue::kBiasGelu, out.data());
      if (ran++ == 0) {
        first = out;
      } else {
        ASSERT_EQ(out, first) << "tiles " << static_cast<int>(tiles) << " M=" << M;
      }
    }
    if (ran < 2) GTEST_SKIP() << "skipped: one set of tiles under isa " << CpuIsaName();
  }
}

// A row's outputs are bitwise the same alone, in any batch, in either of two
// 16-column tiles or in the one-column tail, with any epilogue's input.
TEST_P(BlockLinearTest, RowsDoNotDependOnTheBatchOrTheTile) {
  const auto [f, K] = GetParam();
  const int N = 33, M = 11;  // two tiles of 16 and a tail of 1
  std::vector<uint8_t> bytes = RandomRows(f, N, K, 3);
  const std::vector<float> x = RandomInput(M, K, 4);
  const BlockSpan span{f, N};
  BlockLinear linear;
  auto weight = linear.Prepare(HostValues(bytes.data(), &span, 1), K, N, WeightLayout::kOutIn);
  ASSERT_TRUE(weight.ok()) << weight.status();
  std::vector<float> all(static_cast<size_t>(M) * N);
  linear.Run(x.data(), M, **weight, nullptr, Epilogue::kBias, all.data());
  for (int m = 0; m < M; ++m) {
    std::vector<float> one(N);
    linear.Run(x.data() + m * K, 1, **weight, nullptr, Epilogue::kBias, one.data());
    EXPECT_EQ(0, std::memcmp(one.data(), all.data() + m * N, N * sizeof(float))) << "row " << m;
  }
  // The tail column (32) moved into the first tile's lane 0, and the first
  // tile's last column (15) into the tail: the same bits.
  const int64_t row_bytes = BlockRowBytes(f, K);
  std::vector<uint8_t> moved(bytes.size());
  std::vector<int> from(N);
  for (int n = 0; n < N; ++n) from[n] = n == 0 ? 32 : n - 1;
  std::swap(from[16], from[32]);  // 15 to the tail, 31 to the second tile's lane 0
  for (int n = 0; n < N; ++n) std::memcpy(moved.data() + n * row_bytes, bytes.data() + from[n] * row_bytes, row_bytes);
  auto moved_weight = linear.Prepare(HostValues(moved.data(), &span, 1), K, N, WeightLayout::kOutIn);
  ASSERT_TRUE(moved_weight.ok());
  std::vector<float> again(static_cast<size_t>(M) * N);
  linear.Run(x.data(), M, **moved_weight, nullptr, Epilogue::kBias, again.data());
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      EXPECT_EQ(0, std::memcmp(&again[m * N + n], &all[m * N + from[n]], sizeof(float))) << "row " << m << " col " << n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, BlockLinearTest,
                         ::testing::Values(Case{BlockFormat::kQ8_0, 64}, Case{BlockFormat::kQ8_0, 576},
                                           Case{BlockFormat::kQ4_0, 128}, Case{BlockFormat::kQ4_1, 576},
                                           Case{BlockFormat::kQ4_K, 256}, Case{BlockFormat::kQ4_K, 1536},
                                           Case{BlockFormat::kQ6_K, 256}, Case{BlockFormat::kQ6_K, 768},
                                           Case{BlockFormat::kQ5_0, 576}, Case{BlockFormat::kQ5_1, 192},
                                           Case{BlockFormat::kQ5_0, 64}, Case{BlockFormat::kQ5_1, 64},
                                           Case{BlockFormat::kQ5_K, 256}, Case{BlockFormat::kQ5_K, 1280},
                                           Case{BlockFormat::kMXFP4, 64}, Case{BlockFormat::kMXFP4, 2880}),
                         [](const auto& info) {
                           return std::string(InfoOf(info.param.format).name) + "_K" +
                                  std::to_string(info.param.K);
                         });

// Mixed spans (Q4_K then Q6_K rows, as llama.cpp's Q4_K_M stacks Q/K/V) give
// each row what its own format alone gives; epilogues apply per element.
TEST(BlockLinearSpansTest, MixedFormatsAndEpilogues) {
  if (absl::Status st = BlockLinear::CheckSupported(); !st.ok()) GTEST_SKIP() << "skipped: " << st.message();
  const int K = 512, M = 3;
  const std::vector<uint8_t> a = RandomRows(BlockFormat::kQ4_K, 5, K, 5);
  const std::vector<uint8_t> b = RandomRows(BlockFormat::kQ6_K, 3, K, 6);
  std::vector<uint8_t> both(a);
  both.insert(both.end(), b.begin(), b.end());
  const BlockSpan spans[] = {{BlockFormat::kQ4_K, 5}, {BlockFormat::kQ6_K, 3}};
  BlockLinear linear;
  auto mixed = linear.Prepare(HostValues(both.data(), spans, 2), K, 8, WeightLayout::kOutIn);
  auto wa = linear.Prepare(HostValues(a.data(), &spans[0], 1), K, 5, WeightLayout::kOutIn);
  auto wb = linear.Prepare(HostValues(b.data(), &spans[1], 1), K, 3, WeightLayout::kOutIn);
  ASSERT_TRUE(mixed.ok() && wa.ok() && wb.ok());
  const std::vector<float> x = RandomInput(M, K, 7);
  std::vector<float> bias(8);
  for (int n = 0; n < 8; ++n) bias[n] = 0.1f * n - 0.3f;
  std::vector<float> got(M * 8, 1.0f), pa(M * 5), pb(M * 3);
  linear.Run(x.data(), M, **mixed, bias.data(), Epilogue::kBiasResidual, got.data());
  linear.Run(x.data(), M, **wa, nullptr, Epilogue::kBias, pa.data());
  linear.Run(x.data(), M, **wb, nullptr, Epilogue::kBias, pb.data());
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < 8; ++n) {
      const float plain = n < 5 ? pa[m * 5 + n] : pb[m * 3 + n - 5];
      EXPECT_EQ(got[m * 8 + n], 1.0f + (plain + bias[n])) << m << "," << n;
    }
  }
  std::vector<float> gelu(M * 8);
  linear.Run(x.data(), M, **mixed, bias.data(), Epilogue::kBiasGelu, gelu.data());
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < 8; ++n) {
      const double v = (n < 5 ? pa[m * 5 + n] : pb[m * 3 + n - 5]) + bias[n];
      const double want = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
      EXPECT_NEAR(gelu[m * 8 + n], want, 1e-5 * (1 + std::fabs(want)));
    }
  }
}

// The K-quants' inputs go in scales of 256 values: groups of zeros (a scale
// of 0) in front, between and at the end change nothing of what the others
// give.
TEST(BlockLinearSpansTest, ZeroInputGroupsLeaveTheOthersAlone) {
  if (absl::Status st = BlockLinear::CheckSupported(); !st.ok()) GTEST_SKIP() << "skipped: " << st.message();
  const int K = 1280, N = 6;
  for (BlockFormat f : {BlockFormat::kQ4_K, BlockFormat::kQ5_K, BlockFormat::kQ6_K}) {
    const std::vector<uint8_t> bytes = RandomRows(f, N, K, 9);
    const std::vector<float> w = Dequantize(f, bytes.data(), N, K);
    std::vector<float> x = RandomInput(1, K, 10);
    for (int g : {0, 2, 4}) std::fill(x.begin() + 256 * g, x.begin() + 256 * (g + 1), 0.0f);
    const BlockSpan span{f, N};
    BlockLinear linear;
    auto weight = linear.Prepare(HostValues(bytes.data(), &span, 1), K, N, WeightLayout::kOutIn);
    ASSERT_TRUE(weight.ok());
    std::vector<float> out(N);
    linear.Run(x.data(), 1, **weight, nullptr, Epilogue::kBias, out.data());
    for (int n = 0; n < N; ++n) {
      double exact = 0, rounding = 0, magnitude = 0;
      for (int g = 0; g < K / 256; ++g) {
        float amax = 0;
        for (int k = 256 * g; k < 256 * (g + 1); ++k) amax = std::max(amax, std::fabs(x[k]));
        for (int k = 256 * g; k < 256 * (g + 1); ++k) {
          exact += double{w[size_t(n) * K + k]} * x[k];
          magnitude += std::fabs(double{w[size_t(n) * K + k]} * x[k]);
          rounding += std::fabs(w[size_t(n) * K + k]) * amax / 127 / 2;
        }
      }
      EXPECT_NEAR(out[n], exact, rounding + 4e-6 * (magnitude + 2 * rounding) + 1e-6) << InfoOf(f).name << " n=" << n;
    }
  }
}

// A NaN in the input gives NaN outputs, at either input scale.
// MXFP4's smallest scales (e8m0 0 and 1: subnormal halves, 2^-128 and
// 2^-127 as ggml's bits 0x00200000 << e) and the next ones, under inputs
// large enough that every product is a normal float: each tile set gives
// the dequantized weights times the quantized input.
TEST(BlockLinearSpansTest, Mxfp4SubnormalScales) {
  const int K = 128, N = 16;
  std::vector<uint8_t> bytes = RandomRows(BlockFormat::kMXFP4, N, K, 11);
  for (int n = 0; n < N; ++n) {
    for (int b = 0; b < K / 32; ++b) bytes[17 * (n * K / 32 + b)] = static_cast<uint8_t>((n + b) % 4);
  }
  const std::vector<float> w = Dequantize(BlockFormat::kMXFP4, bytes.data(), N, K);
  std::vector<float> x = RandomInput(1, K, 12);
  for (float& v : x) v *= 1e30f;
  std::vector<int8_t> q(K);
  std::vector<BlockLinear::InputBlock> blocks(K / 32);
  BlockLinear::QuantizeRow(x.data(), K, q.data(), blocks.data(), 32);
  const BlockSpan span{BlockFormat::kMXFP4, N};
  for (BlockLinear::Tiles tiles : {BlockLinear::Tiles::kAvx512Vnni, BlockLinear::Tiles::kAvx2Vnni,
                                   BlockLinear::Tiles::kAvx2}) {
    if (!BlockLinear::Runs(tiles)) continue;
    BlockLinear linear;
    linear.set_tiles(tiles);
    auto weight = linear.Prepare(HostValues(bytes.data(), &span, 1), K, N, WeightLayout::kOutIn);
    ASSERT_TRUE(weight.ok()) << weight.status();
    std::vector<float> out(N);
    linear.Run(x.data(), 1, **weight, nullptr, Epilogue::kBias, out.data());
    for (int n = 0; n < N; ++n) {
      double want = 0, magnitude = 0;
      for (int k = 0; k < K; ++k) {
        want += double{w[n * K + k]} * blocks[k / 32].dx * q[k];
        magnitude += std::fabs(double{w[n * K + k]} * blocks[k / 32].dx * q[k]);
      }
      ASSERT_GT(magnitude, 1e-30) << n;  // normal floats, not flushed
      EXPECT_NEAR(out[n], want, 4e-6 * magnitude) << "n=" << n;
    }
  }
}

TEST(BlockLinearSpansTest, NanInputsGiveNan) {
  if (absl::Status st = BlockLinear::CheckSupported(); !st.ok()) GTEST_SKIP() << "skipped: " << st.message();
  const int K = 512, N = 4;
  for (BlockFormat f : {BlockFormat::kQ8_0, BlockFormat::kQ4_K}) {
    const std::vector<uint8_t> bytes = RandomRows(f, N, K, 11);
    const BlockSpan span{f, N};
    BlockLinear linear;
    auto weight = linear.Prepare(HostValues(bytes.data(), &span, 1), K, N, WeightLayout::kOutIn);
    ASSERT_TRUE(weight.ok());
    std::vector<float> x = RandomInput(1, K, 12), out(N);
    x[300] = std::nanf("");
    linear.Run(x.data(), 1, **weight, nullptr, Epilogue::kBias, out.data());
    for (int n = 0; n < N; ++n) EXPECT_TRUE(std::isnan(out[n])) << InfoOf(f).name << " n=" << n;
  }
}

TEST(BlockLinearSpansTest, RefusesShapesTheKernelsDoNotTake) {
  const std::vector<uint8_t> bytes(4096);
  const BlockSpan q4k{BlockFormat::kQ4_K, 2}, q8{BlockFormat::kQ8_0, 2};
  EXPECT_FALSE(BlockLinear::CheckShape(HostValues(bytes.data(), &q4k, 1), 128, 2, WeightLayout::kOutIn).ok());
  EXPECT_FALSE(BlockLinear::CheckShape(HostValues(bytes.data(), &q8, 1), 96, 2, WeightLayout::kOutIn).ok());
  EXPECT_FALSE(BlockLinear::CheckShape(HostValues(bytes.data(), &q8, 1), 64, 3, WeightLayout::kOutIn).ok());
  EXPECT_FALSE(BlockLinear::CheckShape(HostValues(bytes.data(), &q8, 1), 64, 2, WeightLayout::kInOut).ok());
  EXPECT_TRUE(BlockLinear::CheckShape(HostValues(bytes.data(), &q8, 1), 64, 2, WeightLayout::kOutIn).ok());
}

}  // namespace
}  // namespace flover::kernels
