// The CPU backend's own parts against references written here: the vector
// math, and OneDnnLinear's row buckets, padding and row invariance. The ops
// themselves are tested through the backend contract in
// kernels/backend_ops_test, on every backend.
#include "kernels/cpu/cpu_backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/fma_linear.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/cpu/weight_arena.h"
#include "testing/numerics.h"

namespace flover::kernels {
namespace {

using testing::GeluRef;
using testing::RelErr;
using testing::Random;

TEST(VecMathTest, ExpMatchesLibm) {
  for (float x = -80.0f; x < 80.0f; x += 0.0137f) {
    const double want = std::exp(double{x});
    EXPECT_NEAR(ExpF(x) / want, 1.0, 4e-7) << x;
  }
}

// bfloat16 rounding written independently of ToBf16: the nearer of the two
// bfloat16 neighbours of f, compared in double; a tie goes to the even one.
uint16_t NearestBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isinf(f)) return static_cast<uint16_t>(u >> 16);
  const uint32_t lo_bits = u & 0xffff0000u, hi_bits = lo_bits + 0x10000u;
  auto value = [](uint32_t bits) {
    if ((bits & 0x7f800000u) == 0x7f800000u) {  // one past the largest finite: 2^128
      return std::copysign(std::ldexp(1.0, 128), bits >> 31 ? -1.0 : 1.0);
    }
    float v;
    std::memcpy(&v, &bits, 4);
    return double{v};
  };
  const double dlo = std::abs(double{f} - value(lo_bits)), dhi = std::abs(value(hi_bits) - f);
  if (dlo != dhi) return static_cast<uint16_t>((dlo < dhi ? lo_bits : hi_bits) >> 16);
  return static_cast<uint16_t>((((lo_bits >> 16) & 1) ? hi_bits : lo_bits) >> 16);
}

TEST(VecMathTest, ToBf16RoundsToNearestEven) {
  std::mt19937 rng(5);
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 1e-40f, -3e-39f, 3.0e38f, -3.39e38f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity()};
  // Exact ties: the bit just below bfloat16's last mantissa bit set, with
  // the last bit even and odd.
  for (uint32_t u : {0x3f808000u, 0x3f818000u, 0xbf808000u, 0xbf818000u, 0x7f7f8000u}) {
    float f;
    std::memcpy(&f, &u, 4);
    xs.push_back(f);
  }
  for (int i = 0; i < 200000; ++i) {
    const uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    if (!std::isnan(f)) xs.push_back(f);
  }
  for (float f : xs) {
    ASSERT_EQ(ToBf16(f), NearestBf16(f)) << f;
  }
  EXPECT_TRUE(std::isnan(Bf16ToFloat(ToBf16(std::numeric_limits<float>::quiet_NaN()))));
  uint32_t nan_low_bits = 0x7f800001u;  // a NaN whose payload is only in the dropped bits
  float nan;
  std::memcpy(&nan, &nan_low_bits, 4);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(ToBf16(nan))));
}

TEST(VecMathTest, GeluMatchesTanhForm) {
  for (float x = -20.0f; x < 20.0f; x += 0.001f) {
    const double want = GeluRef(x);
    EXPECT_NEAR(GeluNewF(x), want, 1e-6 * std::max(1.0, std::abs(want))) << x;
  }
}

// y: [M, N] = x @ W + bias, W given as [K, N] or [N, K].
std::vector<double> NaiveLinear(const std::vector<float>& x, int M, int K,
                                const std::vector<float>& w, int N, const float* bias,
                                WeightLayout layout) {
  std::vector<double> y(M * N);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = bias ? bias[n] : 0.0;
      for (int k = 0; k < K; ++k)
        s += double{x[m * K + k]} * (layout == WeightLayout::kOutIn ? w[n * K + k] : w[k * N + n]);
      y[m * N + n] = s;
    }
  return y;
}

// v with every element rounded to bfloat16 (by the test's own rounding).
std::vector<float> RoundedToBf16(std::vector<float> v) {
  for (float& f : v) f = Bf16ToFloat(NearestBf16(f));
  return v;
}

// Skips the test when this CPU has no optimized kernel for `dtype` in
// oneDNN, or the backend runs it on FmaLinear instead.
#define SKIP_UNLESS_SUPPORTED(dtype)                                               \
  if (FmaLinear::Replaces(dtype)) {                                                \
    GTEST_SKIP() << "under isa " << CpuIsaName() << " the backend runs "           \
                 << MatmulDtypeName(dtype) << " on FmaLinear, not oneDNN";        \
  }                                                                                \
  if (absl::Status st = OneDnnLinear::CheckSupported(dtype); !st.ok()) {          \
    GTEST_SKIP() << st.message();                                                  \
  }

TEST(OneDnnLinearTest, RowBucketsPadUnderOneSixteenth) {
  ASSERT_EQ(OneDnnLinear::kExactRows, 32);
  ASSERT_EQ(OneDnnLinear::kBucketsPerOctave, 16);
  int buckets_to_1024 = 0;
  for (int M = 1; M <= 4096; ++M) {
    const int b = OneDnnLinear::RowBucket(M);
    ASSERT_GE(b, M);
    ASSERT_EQ(OneDnnLinear::RowBucket(b), b) << M;
    if (M <= OneDnnLinear::kExactRows) {
      ASSERT_EQ(b, M);
    }
    ASSERT_LT(16 * (b - M), M) << M;  // fewer than M/16 padded rows
    buckets_to_1024 += M <= 1024 && b == M;
  }
  EXPECT_EQ(buckets_to_1024, 32 + 16 * 5);  // 1..32, then 16 per power of two
}

// A padded call writes exactly its M rows (the residual adds into them only)
// and PrepareRows leaves nothing to compile for any M up to its bound.
class OneDnnLinearDtypeTest : public ::testing::TestWithParam<MatmulDtype> {};

TEST_P(OneDnnLinearDtypeTest, PaddedRowsStayInsideTheCallAndPrepareCoversEveryM) {
  SKIP_UNLESS_SUPPORTED(GetParam());
  OneDnnLinear linear(GetParam());
  const bool bf16 = GetParam() == MatmulDtype::kBF16;
  const int K = 40, N = 24, max_rows = 150;
  auto w = Random(K * N, 30), b = Random(N, 31);
  const std::vector<float> wr = bf16 ? RoundedToBf16(w) : w;
  auto weight = linear.Prepare(w.data(), K, N, WeightLayout::kInOut);
  linear.PrepareRows(*weight, max_rows, true, Epilogue::kBiasResidual);
  const size_t prepared = linear.num_primitives();
  int buckets = 0;
  for (int M = 1; M <= max_rows; ++M) buckets += OneDnnLinear::RowBucket(M) == M;
  EXPECT_EQ(prepared, size_t(buckets + (OneDnnLinear::RowBucket(max_rows) != max_rows)));

  const float kSentinel = 12345.0f;
  for (int M = 1; M <= max_rows; ++M) {
    auto x = Random(M * K, 32 + M);
    const std::vector<float> residual = Random(M * N, 33);
    std::vector<float> out(size_t(M + 20) * N, kSentinel);
    std::copy(residual.begin(), residual.end(), out.begin());
    linear.Run(x.data(), M, *weight, b.data(), Epilogue::kBiasResidual, out.data());
    std::vector<double> want = NaiveLinear(bf16 ? RoundedToBf16(x) : x, M, K, wr, N, b.data(),
                                           WeightLayout::kInOut);
    for (int i = 0; i < M * N; ++i) want[i] += residual[i];
    ASSERT_LT(RelErr(std::vector<float>(out.begin(), out.begin() + M * N), want), 1e-5) << M;
    for (size_t i = size_t(M) * N; i < out.size(); ++i) ASSERT_EQ(out[i], kSentinel) << M;
  }
  EXPECT_EQ(linear.num_primitives(), prepared) << "a call compiled a primitive PrepareRows missed";
}

// A row's Linear output is bitwise the same whatever M is.
TEST_P(OneDnnLinearDtypeTest, RowDoesNotDependOnOtherRows) {
  SKIP_UNLESS_SUPPORTED(GetParam());
  OneDnnLinear linear(GetParam());
  const int K = 96, N = 130;
  auto w = Random(K * N, 20), b = Random(N, 21), row = Random(K, 22);
  for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
    auto weight = linear.Prepare(w.data(), K, N, layout);
    std::vector<float> alone(N);
    linear.Run(row.data(), 1, *weight, b.data(), Epilogue::kBiasGelu, alone.data());
    for (int M : {2, 5, 33, 101, 301}) {
      auto x = Random(M * K, 23 + M);
      std::copy(row.begin(), row.end(), x.begin() + (M / 2) * K);
      std::vector<float> out(M * N);
      linear.Run(x.data(), M, *weight, b.data(), Epilogue::kBiasGelu, out.data());
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), out.begin() + (M / 2) * N)) << M;
    }
  }
}

// The panel kernels (calls of 1 to kPanelMaxRows rows) against oneDNN (more
// rows): at K where oneDNN sums in chunks (768 -> 512 + 256, 3072 -> 3 x
// 1024, 1100 -> 512 + 512 + 76) and where it does not (96), every epilogue,
// a row's output is bitwise the same at every row count up to a prefill's
// (row buckets included), and right.
TEST_P(OneDnnLinearDtypeTest, FewRowsMatchManyRowsBitwise) {
  SKIP_UNLESS_SUPPORTED(GetParam());
  const bool bf16 = GetParam() == MatmulDtype::kBF16;
  OneDnnLinear linear(GetParam());
  struct Case {
    int K, N;
    bool has_bias;
    Epilogue epilogue;
  };
  const Case cases[] = {{768, 200, true, Epilogue::kBias},      {768, 130, true, Epilogue::kBiasGelu},
                        {3072, 96, true, Epilogue::kBiasResidual}, {1100, 70, false, Epilogue::kBias},
                        {2048, 64, false, Epilogue::kBiasResidual}, {96, 33, true, Epilogue::kBiasGelu}};
  for (const Case& c : cases) {
    // Two weights of the shape; PrepareRows sees only the first, as in a model.
    for (int copy = 0; copy < 2; ++copy) {
      SCOPED_TRACE(::testing::Message() << "K=" << c.K << " N=" << c.N << " epilogue "
                                        << static_cast<int>(c.epilogue) << " weight " << copy);
      const auto w = Random(size_t(c.K) * c.N, 40 + copy, 0.05f), b = Random(c.N, 41);
      const auto row = Random(c.K, 42), residual_row = Random(c.N, 43);
      const float* bias = c.has_bias ? b.data() : nullptr;
      auto weight = linear.Prepare(w.data(), c.K, c.N, WeightLayout::kInOut);
      if (copy == 0) linear.PrepareRows(*weight, 64, c.has_bias, c.epilogue);
      std::vector<float> alone = residual_row;
      linear.Run(row.data(), 1, *weight, bias, c.epilogue, alone.data());
      std::vector<double> want = NaiveLinear(bf16 ? RoundedToBf16(row) : row, 1, c.K,
                                             bf16 ? RoundedToBf16(w) : w, c.N, bias,
                                             WeightLayout::kInOut);
      for (int n = 0; n < c.N; ++n) {
        if (c.epilogue == Epilogue::kBiasGelu) want[n] = GeluRef(want[n]);
        if (c.epilogue == Epilogue::kBiasResidual) want[n] += residual_row[n];
      }
      EXPECT_LT(RelErr(alone, want), 1e-5);
      for (int M : {2, 3, 4, 5, 17, 33, 64, 200, 512}) {
        auto x = Random(size_t(M) * c.K, 44 + M);
        std::copy(row.begin(), row.end(), x.begin() + size_t(M / 2) * c.K);
        std::vector<float> out = Random(size_t(M) * c.N, 45);
        std::copy(residual_row.begin(), residual_row.end(), out.begin() + size_t(M / 2) * c.N);
        linear.Run(x.data(), M, *weight, bias, c.epilogue, out.data());
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), out.begin() + size_t(M / 2) * c.N))
            << "M=" << M << (linear.RunsOnPanels(*weight, M, c.has_bias, c.epilogue)
                                 ? " (panels)" : " (oneDNN)");
      }
    }
  }
}

// The panel path is taken where it can be, and only for what was checked.
TEST_P(OneDnnLinearDtypeTest, PanelsRunWhereTheCpuHasThem) {
  SKIP_UNLESS_SUPPORTED(GetParam());
  const bool bf16 = GetParam() == MatmulDtype::kBF16;
  if (!PanelKernelsRun(bf16)) {
    GTEST_SKIP() << "this CPU lacks AVX-512" << (bf16 ? " BF16" : "")
                 << ": every row count runs on oneDNN";
  }
  OneDnnLinear linear(GetParam());
  const int K = 768, N = 150;
  const auto w = Random(size_t(K) * N, 50, 0.05f);
  auto weight = linear.Prepare(w.data(), K, N, WeightLayout::kOutIn);
  // Prepare checks the plain matmul; an epilogue waits for PrepareRows.
  EXPECT_TRUE(linear.RunsOnPanels(*weight, 1, false, Epilogue::kBias));
  EXPECT_FALSE(linear.RunsOnPanels(*weight, 1, true, Epilogue::kBiasGelu));
  linear.PrepareRows(*weight, 8, true, Epilogue::kBiasGelu);
  for (int M = 1; M <= kPanelMaxRows; ++M) {
    EXPECT_TRUE(linear.RunsOnPanels(*weight, M, true, Epilogue::kBiasGelu)) << M;
  }
  EXPECT_FALSE(linear.RunsOnPanels(*weight, kPanelMaxRows + 1, true, Epilogue::kBiasGelu));
  EXPECT_FALSE(linear.RunsOnPanels(*weight, 1, true, Epilogue::kBiasResidual));
  // What was checked holds for the shape: another weight of it needs no check.
  const auto w2 = Random(size_t(K) * N, 51, 0.05f);
  auto weight2 = linear.Prepare(w2.data(), K, N, WeightLayout::kOutIn);
  EXPECT_TRUE(linear.RunsOnPanels(*weight2, 1, true, Epilogue::kBiasGelu));
  EXPECT_FALSE(linear.RunsOnPanels(*weight2, 1, true, Epilogue::kBiasResidual));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OneDnnLinearDtypeTest,
                         ::testing::Values(MatmulDtype::kF32, MatmulDtype::kBF16));

// Blocks are aligned, disjoint, and outlive the arena while their owners do;
// a large block has huge-page-aligned memory of its own.
TEST(WeightArenaTest, BlocksAreAlignedDisjointAndOwned) {
  std::vector<WeightArena::Block> blocks;
  {
    WeightArena arena;
    for (size_t bytes : {size_t{1}, size_t{100}, size_t{4096}, size_t{3} << 20, size_t{7},
                         WeightArena::kChunk / 2 + 1, size_t{15} << 20, size_t{15} << 20}) {
      blocks.push_back(arena.Allocate(bytes));
      ASSERT_NE(blocks.back().data, nullptr) << bytes;
      ASSERT_EQ(reinterpret_cast<uintptr_t>(blocks.back().data) % WeightArena::kAlign, 0u);
      std::memset(blocks.back().data, static_cast<int>(blocks.size()), bytes);
    }
    // The large one: its own chunk, huge-page aligned.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(blocks[5].data) % WeightArena::kHugePage, 0u);
    EXPECT_NE(blocks[5].owner.get(), blocks[4].owner.get());
    // Small ones share a chunk: the same owner, one after another.
    EXPECT_EQ(blocks[0].owner.get(), blocks[1].owner.get());
    EXPECT_EQ(static_cast<char*>(blocks[1].data) - static_cast<char*>(blocks[0].data),
              static_cast<ptrdiff_t>(WeightArena::kAlign));
    // A request that does not fit what is left starts a new chunk.
    EXPECT_NE(blocks[7].owner.get(), blocks[6].owner.get());
  }
  // The arena is gone; every block still holds what was written into it.
  const size_t sizes[] = {1, 100, 4096, size_t{3} << 20, 7, WeightArena::kChunk / 2 + 1,
                          size_t{15} << 20, size_t{15} << 20};
  for (size_t i = 0; i < blocks.size(); ++i) {
    const auto* p = static_cast<const unsigned char*>(blocks[i].data);
    EXPECT_EQ(p[0], i + 1);
    EXPECT_EQ(p[sizes[i] - 1], i + 1);
  }
}

TEST(CpuBackendTest, RefusesWhatItCannotRunFast) {
  auto f16 = CpuBackend::Create(MatmulDtype::kF16);
  ASSERT_FALSE(f16.ok());
  EXPECT_EQ(f16.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(f16.status().message().find("--device=cuda"), std::string::npos) << f16.status();
  // f32 and bf16 run on every CPU the kernels start on (AVX2).
  for (MatmulDtype dtype : {MatmulDtype::kF32, MatmulDtype::kBF16}) {
    auto backend = CpuBackend::Create(dtype);
    ASSERT_TRUE(backend.ok()) << backend.status();
    EXPECT_EQ((*backend)->matmul_dtype(), dtype);
  }
  auto int8 = CpuBackend::Create(MatmulDtype::kInt8);
  EXPECT_EQ(int8.ok(), CpuIsa().avx512_vnni) << int8.status();
}

// The device line names the instruction set in use.
TEST(CpuBackendTest, DeviceNamesTheInstructionSet) {
  auto backend = CpuBackend::Create(MatmulDtype::kF32);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_NE((*backend)->Device().name.find("isa " + CpuIsaName()), std::string::npos)
      << (*backend)->Device().name;
}

// FmaLinear, in both dtypes and both tile widths: right against a double
// reference on the operands it takes (bf16: rounded), a row bitwise the same
// at every row count, and AVX-512's tiles bitwise AVX2's.
class FmaLinearTest : public ::testing::TestWithParam<MatmulDtype> {};

TEST_P(FmaLinearTest, RightAndTheSameAtEveryRowCountAndWidth) {
  const bool bf16 = GetParam() == MatmulDtype::kBF16;
  struct Case {
    int K, N;
    bool has_bias;
    Epilogue epilogue;
    WeightLayout layout;
  };
  const Case cases[] = {{768, 200, true, Epilogue::kBias, WeightLayout::kInOut},
                        {1100, 70, false, Epilogue::kBiasResidual, WeightLayout::kOutIn},
                        {96, 33, true, Epilogue::kBiasGelu, WeightLayout::kInOut},
                        {7, 5, true, Epilogue::kBias, WeightLayout::kOutIn}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "K=" << c.K << " N=" << c.N);
    const auto w = Random(size_t(c.K) * c.N, 60, 0.05f), b = Random(c.N, 61);
    const auto row = Random(c.K, 62), residual_row = Random(c.N, 63);
    const float* bias = c.has_bias ? b.data() : nullptr;
    std::vector<float> alone[2];  // narrow, wide
    for (bool wide : {false, true}) {
      FmaLinear linear(GetParam());
      linear.set_wide_tiles(wide);
      if (wide && !linear.wide_tiles()) continue;
      auto weight = linear.Prepare(w.data(), c.K, c.N, c.layout);
      ASSERT_TRUE(weight.ok()) << weight.status();
      alone[wide] = residual_row;
      linear.Run(row.data(), 1, **weight, bias, c.epilogue, alone[wide].data());
      std::vector<double> want = NaiveLinear(bf16 ? RoundedToBf16(row) : row, 1, c.K,
                                             bf16 ? RoundedToBf16(w) : w, c.N, bias, c.layout);
      for (int n = 0; n < c.N; ++n) {
        if (c.epilogue == Epilogue::kBiasGelu) want[n] = GeluRef(want[n]);
        if (c.epilogue == Epilogue::kBiasResidual) want[n] += residual_row[n];
      }
      EXPECT_LT(RelErr(alone[wide], want), 1e-5);
      for (int M : {2, 3, 5, 6, 7, 8, 9, 17, 33, 200}) {
        auto x = Random(size_t(M) * c.K, 64 + M);
        std::copy(row.begin(), row.end(), x.begin() + size_t(M / 2) * c.K);
        std::vector<float> out = Random(size_t(M) * c.N, 65);
        std::copy(residual_row.begin(), residual_row.end(), out.begin() + size_t(M / 2) * c.N);
        linear.Run(x.data(), M, **weight, bias, c.epilogue, out.data());
        ASSERT_TRUE(std::equal(alone[wide].begin(), alone[wide].end(), out.begin() + size_t(M / 2) * c.N))
            << "M=" << M << (wide ? " (AVX-512 tiles)" : " (AVX2 tiles)");
      }
    }
    if (!alone[1].empty()) EXPECT_EQ(alone[0], alone[1]) << "AVX-512 and AVX2 tiles differ";
  }
}

// bf16 values are kept as stored (no double rounding through f32); f16 ones
// are widened exactly.
TEST_P(FmaLinearTest, TakesStoredValuesAsTheyAre) {
  const int K = 3, N = 2;
  const uint16_t bf16_bits[K * N] = {0x3f80, 0x4000, 0xbf80, 0x3f01, 0x0000, 0x4040};  // 1 2 -1 ~0.5039 0 3
  FmaLinear linear(GetParam());
  auto weight = linear.Prepare(HostValues(bf16_bits, DType::kBF16), K, N, WeightLayout::kInOut);
  ASSERT_TRUE(weight.ok()) << weight.status();
  const float x[K] = {1.0f, 2.0f, 4.0f};
  float out[N];
  linear.Run(x, 1, **weight, nullptr, Epilogue::kBias, out);
  EXPECT_EQ(out[0], 1.0f * 1 + 2.0f * -1 + 4.0f * 0);
  EXPECT_EQ(out[1], 1.0f * 2 + 2.0f * Bf16ToFloat(0x3f01) + 4.0f * 3);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FmaLinearTest,
                         ::testing::Values(MatmulDtype::kF32, MatmulDtype::kBF16));

}  // namespace
}  // namespace flover::kernels
