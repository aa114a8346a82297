// Int8Linear against references written here: the quantization of weights
// (per column) and inputs (per row), exact integer sums in int64, the
// dequantizing epilogue in double, the error against f32, and a row's result
// bitwise the same at every row count (panel kernel and oneDNN alike).
#include "kernels/cpu/int8_linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "testing/numerics.h"

namespace flover::kernels {
namespace {

using testing::GeluRef;
using testing::Random;
using testing::RelErr;

#define SKIP_UNLESS_INT8()                                                   \
  if (absl::Status st = Int8Linear::CheckSupported(); !st.ok()) {            \
    GTEST_SKIP() << "int8 does not run on this CPU: " << st.message();       \
  }

// Columns of very different sizes, so one scale per column matters.
std::vector<float> ScaledColumns(int K, int N, int seed) {
  std::vector<float> w = Random(size_t(K) * N, seed, 0.05f);
  for (int k = 0; k < K; ++k) {
    for (int n = 0; n < N; ++n) w[size_t(k) * N + n] *= 1.0f + float(n % 7) * 3.0f;
  }
  return w;
}

// The definition of a row's quantization: q = round(x * 127 / max |x|).
float QuantizeByDefinition(const std::vector<float>& x, size_t at, int K, std::vector<int>* q) {
  float amax = 0.0f;
  for (int k = 0; k < K; ++k) amax = std::max(amax, std::fabs(x[at + k]));
  const float inv = amax > 0 ? 127.0f / amax : 0.0f;
  q->resize(K);
  for (int k = 0; k < K; ++k) (*q)[k] = static_cast<int>(std::nearbyint(x[at + k] * inv));
  return amax / 127.0f;
}

// out = epilogue(x_q @ w_q, dequantized) from the quantized weight read back
// from the packed one, summed exactly in int64, scaled in double.
std::vector<double> IntegerReference(const Weight& weight, const std::vector<float>& x, int M,
                                     const float* bias, Epilogue epilogue,
                                     const std::vector<float>& residual) {
  const int K = weight.k(), N = weight.n();
  std::vector<int8_t> wq;
  std::vector<float> scale;
  Int8Linear::Quantized(weight, &wq, &scale);
  std::vector<double> out(size_t(M) * N);
  std::vector<int> xq;
  for (int m = 0; m < M; ++m) {
    const float row_scale = QuantizeByDefinition(x, size_t(m) * K, K, &xq);
    for (int n = 0; n < N; ++n) {
      int64_t sum = 0;
      for (int k = 0; k < K; ++k) sum += int64_t{xq[k]} * wq[size_t(k) * N + n];
      double v = double(sum) * row_scale * scale[n] + (bias != nullptr ? bias[n] : 0.0);
      if (epilogue == Epilogue::kBiasGelu) v = GeluRef(v);
      if (epilogue == Epilogue::kBiasResidual) v += residual[size_t(m) * N + n];
      out[size_t(m) * N + n] = v;
    }
  }
  return out;
}

TEST(Int8LinearTest, QuantizesEachColumnToItsOwnScale) {
  SKIP_UNLESS_INT8();
  Int8Linear linear;
  const int K = 300, N = 70;
  const std::vector<float> w = ScaledColumns(K, N, 1);
  std::vector<float> w_out_in(w.size());  // the same matrix as [N, K]
  for (int k = 0; k < K; ++k) {
    for (int n = 0; n < N; ++n) w_out_in[size_t(n) * K + k] = w[size_t(k) * N + n];
  }
  auto in_out = linear.Prepare(w.data(), K, N, WeightLayout::kInOut);
  auto out_in = linear.Prepare(w_out_in.data(), K, N, WeightLayout::kOutIn);
  ASSERT_TRUE(in_out.ok() && out_in.ok());
  std::vector<int8_t> q, q2;
  std::vector<float> scale, scale2;
  Int8Linear::Quantized(**in_out, &q, &scale);
  Int8Linear::Quantized(**out_in, &q2, &scale2);
  EXPECT_EQ(q, q2);
  EXPECT_EQ(scale, scale2);
  for (int n = 0; n < N; ++n) {
    double amax = 0;
    for (int k = 0; k < K; ++k) amax = std::max(amax, std::fabs(double{w[size_t(k) * N + n]}));
    EXPECT_NEAR(scale[n], amax / 127.0, amax / 127.0 * 1e-6) << n;
    int top = 0;
    for (int k = 0; k < K; ++k) {
      const int8_t v = q[size_t(k) * N + n];
      ASSERT_GE(v, -127);
      top = std::max(top, std::abs(int{v}));
      // Rounded to the nearest step: off by at most half a step.
      EXPECT_LE(std::fabs(v * double{scale[n]} - w[size_t(k) * N + n]), scale[n] * 0.5 * (1 + 1e-5))
          << k << "," << n;
    }
    EXPECT_EQ(top, 127) << "column " << n << " does not use its full range";
  }
}

// Exact integer sums, dequantized: what the kernels compute is the
// definition, for every epilogue, on the panel kernel and on oneDNN.
TEST(Int8LinearTest, MatchesTheIntegerDefinition) {
  SKIP_UNLESS_INT8();
  Int8Linear linear;
  const int K = 1100, N = 150;
  const std::vector<float> w = ScaledColumns(K, N, 2), b = Random(N, 3);
  auto weight = linear.Prepare(w.data(), K, N, WeightLayout::kInOut);
  ASSERT_TRUE(weight.ok());
  for (Epilogue ep : {Epilogue::kBias, Epilogue::kBiasGelu, Epilogue::kBiasResidual}) {
    for (int M : {1, 3, 4, 40}) {
      const std::vector<float> x = Random(size_t(M) * K, 4 + M), residual = Random(size_t(M) * N, 5);
      std::vector<float> out = residual;
      linear.Run(x.data(), M, **weight, b.data(), ep, out.data());
      const std::vector<double> want = IntegerReference(**weight, x, M, b.data(), ep, residual);
      EXPECT_LT(RelErr(out, want), 1e-6) << "epilogue " << int(ep) << " M=" << M;
    }
  }
}

// Against f32 (the error int8 adds): a scale per column and per row keeps a
// matmul of random data within ~1% (measured 0.48%).
TEST(Int8LinearTest, StaysCloseToF32) {
  SKIP_UNLESS_INT8();
  Int8Linear linear;
  const int K = 768, N = 256, M = 8;
  const std::vector<float> w = ScaledColumns(K, N, 6), x = Random(size_t(M) * K, 7);
  auto weight = linear.Prepare(w.data(), K, N, WeightLayout::kInOut);
  ASSERT_TRUE(weight.ok());
  std::vector<float> out(size_t(M) * N);
  linear.Run(x.data(), M, **weight, nullptr, Epilogue::kBias, out.data());
  std::vector<double> want(size_t(M) * N, 0.0);
  for (int m = 0; m < M; ++m) {
    for (int k = 0; k < K; ++k) {
      for (int n = 0; n < N; ++n) want[size_t(m) * N + n] += double{x[size_t(m) * K + k]} * w[size_t(k) * N + n];
    }
  }
  const double err = RelErr(out, want);
  std::printf("int8 vs f32 on random data: relative error %.2e\n", err);
  EXPECT_LT(err, 1e-2);
  EXPECT_GT(err, 1e-4) << "no quantization error at all: is int8 really running?";
}

// A row's result is bitwise the same at every row count, whichever kernel
// runs it (panels up to kPanelMaxRows, oneDNN with row buckets beyond).
TEST(Int8LinearTest, RowDoesNotDependOnRowCountBitwise) {
  SKIP_UNLESS_INT8();
  Int8Linear linear;
  struct Case {
    int K, N;
    bool has_bias;
    Epilogue epilogue;
  };
  const Case cases[] = {{768, 200, true, Epilogue::kBias},        {768, 130, true, Epilogue::kBiasGelu},
                        {3072, 96, true, Epilogue::kBiasResidual}, {1100, 70, false, Epilogue::kBias},
                        {5632, 64, false, Epilogue::kBiasResidual}, {96, 33, true, Epilogue::kBiasGelu},
                        {2050, 2100, true, Epilogue::kBias}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "K=" << c.K << " N=" << c.N << " epilogue "
                                      << static_cast<int>(c.epilogue));
    const auto w = Random(size_t(c.K) * c.N, 40, 0.05f), b = Random(c.N, 41);
    const auto row = Random(c.K, 42), residual_row = Random(c.N, 43);
    const float* bias = c.has_bias ? b.data() : nullptr;
    auto weight = linear.Prepare(w.data(), c.K, c.N, WeightLayout::kInOut);
    ASSERT_TRUE(weight.ok());
    linear.PrepareRows(**weight, 64);
    std::vector<float> alone = residual_row;
    linear.Run(row.data(), 1, **weight, bias, c.epilogue, alone.data());
    for (int M : {2, 3, 4, 5, 17, 33, 64, 200, 512}) {
      auto x = Random(size_t(M) * c.K, 44 + M);
      std::copy(row.begin(), row.end(), x.begin() + size_t(M / 2) * c.K);
      std::vector<float> out = Random(size_t(M) * c.N, 45);
      std::copy(residual_row.begin(), residual_row.end(), out.begin() + size_t(M / 2) * c.N);
      linear.Run(x.data(), M, **weight, bias, c.epilogue, out.data());
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), out.begin() + size_t(M / 2) * c.N))
          << "M=" << M << (linear.RunsOnPanels(**weight, M) ? " (panels)" : " (oneDNN)");
    }
  }
}

TEST(Int8LinearTest, PanelsRunForFewRows) {
  SKIP_UNLESS_INT8();
  Int8Linear linear;
  const int K = 768, N = 150;
  const auto w = Random(size_t(K) * N, 50, 0.05f);
  auto weight = linear.Prepare(w.data(), K, N, WeightLayout::kOutIn);
  ASSERT_TRUE(weight.ok());
  for (int M = 1; M <= kPanelMaxRows; ++M) EXPECT_TRUE(linear.RunsOnPanels(**weight, M)) << M;
  EXPECT_FALSE(linear.RunsOnPanels(**weight, kPanelMaxRows + 1));
  linear.set_panels_enabled(false);
  EXPECT_FALSE(linear.RunsOnPanels(**weight, 1));
}

TEST(Int8LinearTest, ZerosStayZeroAndLongSumsAreRefused) {
  SKIP_UNLESS_INT8();
  Int8Linear linear;
  const int K = 64, N = 40;
  std::vector<float> w = Random(size_t(K) * N, 60);
  for (int k = 0; k < K; ++k) w[size_t(k) * N + 7] = 0.0f;  // an all-zero column
  const std::vector<float> b = Random(N, 61);
  auto weight = linear.Prepare(w.data(), K, N, WeightLayout::kInOut);
  ASSERT_TRUE(weight.ok());
  std::vector<float> x = Random(size_t(2) * K, 62);
  std::fill(x.begin() + K, x.end(), 0.0f);  // row 1 all zeros
  std::vector<float> out(size_t(2) * N);
  linear.Run(x.data(), 2, **weight, b.data(), Epilogue::kBias, out.data());
  EXPECT_EQ(out[7], b[7]);
  for (int n = 0; n < N; ++n) EXPECT_EQ(out[size_t(N) + n], b[n]) << n;

  const int too_long = Int8Linear::kMaxK + 1;
  const std::vector<float> long_w(too_long, 0.5f);
  auto refused = linear.Prepare(long_w.data(), too_long, 1, WeightLayout::kInOut);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("65536"), std::string::npos) << refused.status();
}

}  // namespace
}  // namespace flover::kernels
