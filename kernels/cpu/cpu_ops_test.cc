// Each CPU op against a naive double-precision reference written here.
#include "kernels/cpu/cpu_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/vec_math.h"

namespace flover::kernels {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Max |a - b| / max(1, max |b|).
double RelErr(const std::vector<float>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double max_diff = 0, max_ref = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(a[i] - b[i]));
    max_ref = std::max(max_ref, std::abs(b[i]));
  }
  return max_diff / max_ref;
}

double GeluRef(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

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

TEST(CpuOpsTest, Embed) {
  CpuOps ops;
  const int V = 7, P = 5, C = 9, T = 4;
  auto wte = Random(V * C, 1), wpe = Random(P * C, 2);
  std::vector<int32_t> tokens = {6, 0, 3, 3}, positions = {0, 4, 1, 2};
  std::vector<float> out(T * C);
  ops.Embed(tokens.data(), positions.data(), T, wte.data(), 0, V, wpe.data(), C, out.data());
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c)
      EXPECT_EQ(out[t * C + c], wte[tokens[t] * C + c] + wpe[positions[t] * C + c]);
}

// A tensor-parallel rank holding vocabulary rows [3, 7) and no wpe.
TEST(CpuOpsTest, EmbedVocabShard) {
  CpuOps ops;
  const int C = 5, T = 4;
  auto rows = Random(4 * C, 3);
  std::vector<int32_t> tokens = {2, 3, 6, 7}, positions = {0, 1, 2, 3};
  std::vector<float> out(T * C, 9.0f);
  ops.Embed(tokens.data(), positions.data(), T, rows.data(), 3, 7, nullptr, C, out.data());
  for (int c = 0; c < C; ++c) {
    EXPECT_EQ(out[0 * C + c], 0.0f);
    EXPECT_EQ(out[1 * C + c], rows[0 * C + c]);
    EXPECT_EQ(out[2 * C + c], rows[3 * C + c]);
    EXPECT_EQ(out[3 * C + c], 0.0f);
  }
}

TEST(CpuOpsTest, Add) {
  CpuOps ops;
  auto x = Random(100003, 4), y = Random(100003, 5);
  auto z = y;
  ops.Add(x.data(), x.size(), z.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(z[i], x[i] + y[i]);
}

TEST(CpuOpsTest, LayerNorm) {
  CpuOps ops;
  const int T = 5, C = 37;
  auto x = Random(T * C, 3, 4.0f), g = Random(C, 4), b = Random(C, 5);
  std::vector<float> out(T * C);
  ops.LayerNorm(x.data(), T, C, g.data(), b.data(), 1e-5f, out.data());
  std::vector<double> want(T * C);
  for (int t = 0; t < T; ++t) {
    double mean = 0, var = 0;
    for (int c = 0; c < C; ++c) mean += x[t * C + c];
    mean /= C;
    for (int c = 0; c < C; ++c) var += std::pow(x[t * C + c] - mean, 2);
    var /= C;
    for (int c = 0; c < C; ++c)
      want[t * C + c] = (x[t * C + c] - mean) / std::sqrt(var + 1e-5) * g[c] + b[c];
  }
  EXPECT_LT(RelErr(out, want), 1e-5);
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

// Skips the test when this CPU has no optimized kernel for `dtype`.
#define SKIP_UNLESS_SUPPORTED(dtype)                                               \
  if (absl::Status st = OneDnnLinear::CheckSupported(dtype); !st.ok()) {          \
    GTEST_SKIP() << st.message();                                                  \
  }

// Rows x layout x dtype. 33, 101 and 201 rows are not row buckets: they run
// padded. With bf16 the reference takes the inputs and weights rounded to
// bfloat16, so the only error left is float32 summation.
class LinearTest
    : public ::testing::TestWithParam<std::tuple<int, WeightLayout, MatmulDtype>> {};

TEST_P(LinearTest, EveryEpilogueMatchesNaive) {
  const auto [M, layout, dtype] = GetParam();
  SKIP_UNLESS_SUPPORTED(dtype);
  CpuOps ops(dtype);
  const int K = 45, N = 67;
  auto x = Random(M * K, 6, 2.0f), w = Random(K * N, 7), b = Random(N, 8);
  auto weight = ops.PrepareWeight(w.data(), K, N, layout);
  EXPECT_EQ(weight->k(), K);
  EXPECT_EQ(weight->n(), N);
  const bool bf16 = dtype == MatmulDtype::kBF16;
  const std::vector<float> xr = bf16 ? RoundedToBf16(x) : x, wr = bf16 ? RoundedToBf16(w) : w;
  const auto want = NaiveLinear(xr, M, K, wr, N, b.data(), layout);

  std::vector<float> out(M * N);
  ops.Linear(x.data(), M, *weight, b.data(), Epilogue::kBias, out.data());
  EXPECT_LT(RelErr(out, want), 1e-5);
  if (bf16) {  // and it really is bf16: far from the float32 product
    EXPECT_GT(RelErr(out, NaiveLinear(x, M, K, w, N, b.data(), layout)), 1e-4);
  }

  ops.Linear(x.data(), M, *weight, nullptr, Epilogue::kBias, out.data());
  EXPECT_LT(RelErr(out, NaiveLinear(xr, M, K, wr, N, nullptr, layout)), 1e-5);

  ops.Linear(x.data(), M, *weight, b.data(), Epilogue::kBiasGelu, out.data());
  std::vector<double> gelu = want;
  for (double& v : gelu) v = GeluRef(v);
  EXPECT_LT(RelErr(out, gelu), 1e-5);

  const std::vector<float> residual = Random(M * N, 9);
  std::vector<float> acc = residual;
  ops.Linear(x.data(), M, *weight, b.data(), Epilogue::kBiasResidual, acc.data());
  std::vector<double> summed = want;
  for (int i = 0; i < M * N; ++i) summed[i] += residual[i];
  EXPECT_LT(RelErr(acc, summed), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(RowsLayoutsDtypes, LinearTest,
                         ::testing::Combine(::testing::Values(1, 3, 4, 5, 33, 64, 101, 201),
                                            ::testing::Values(WeightLayout::kInOut,
                                                              WeightLayout::kOutIn),
                                            ::testing::Values(MatmulDtype::kF32,
                                                              MatmulDtype::kBF16)));

// A K or V arena of either KV dtype, read back as float.
struct Arena {
  Arena(KvDtype dtype, size_t n, uint32_t seed) : dtype(dtype) {
    const std::vector<float> r = Random(n, seed);
    if (dtype == KvDtype::kBF16) {
      bits.resize(n);
      for (size_t i = 0; i < n; ++i) bits[i] = NearestBf16(r[i]);
    } else {
      floats = r;
    }
  }
  void* data() { return dtype == KvDtype::kBF16 ? static_cast<void*>(bits.data()) : floats.data(); }
  float at(int64_t i) const { return dtype == KvDtype::kBF16 ? Bf16ToFloat(bits[i]) : floats[i]; }
  // What storing x keeps.
  float Stored(float x) const { return dtype == KvDtype::kBF16 ? Bf16ToFloat(NearestBf16(x)) : x; }

  KvDtype dtype;
  std::vector<float> floats;
  std::vector<uint16_t> bits;
};

class KvDtypeTest : public ::testing::TestWithParam<KvDtype> {};

// Four sequences in different slots, at different positions, with 1 to 45
// rows each: a decode row, a fresh prompt and continued chunks. With a bf16
// cache the reference reads the stored (rounded) keys and values.
TEST_P(KvDtypeTest, AttentionOverRaggedBatch) {
  CpuOps ops(MatmulDtype::kF32, GetParam());
  const int H = 3, D = 8, S = 5, L = 80, HD = H * D;
  KvLayer kv{nullptr, nullptr, S, H, L, D, GetParam()};
  Arena kbuf(GetParam(), S * kv.slot_stride(), 15), vbuf(GetParam(), S * kv.slot_stride(), 16);
  kv.k = kbuf.data();
  kv.v = vbuf.data();
  auto K = [&](int slot, int h, int d, int p) { return slot * kv.slot_stride() + h * kv.head_stride() + kv.key_offset(d, p); };
  auto Vi = [&](int slot, int h, int d, int p) { return slot * kv.slot_stride() + h * kv.head_stride() + int64_t{p} * D + d; };
  const std::vector<SeqRows> seqs = {
      {/*slot=*/2, /*pos=*/11, /*len=*/1, /*row=*/0},
      {/*slot=*/0, /*pos=*/0, /*len=*/20, /*row=*/1},
      {/*slot=*/3, /*pos=*/5, /*len=*/7, /*row=*/21},
      {/*slot=*/4, /*pos=*/3, /*len=*/45, /*row=*/28}};  // two row blocks
  const int T = 73;
  auto qkv = Random(T * 3 * HD, 17);
  const Arena k_before = kbuf, v_before = vbuf;
  std::vector<float> out(T * HD);
  ops.Attention(qkv.data(), seqs.data(), seqs.size(), kv, out.data());

  std::vector<double> want(T * HD);
  for (const SeqRows& s : seqs) {
    for (int h = 0; h < H; ++h) {
      // The full key/value history: old cache content before pos, new rows
      // after (as stored).
      auto key = [&](int p, int d) -> double {
        if (p < s.pos) return k_before.at(K(s.slot, h, d, p));
        return kbuf.Stored(qkv[(s.row + p - s.pos) * 3 * HD + HD + h * D + d]);
      };
      auto value = [&](int p, int d) -> double {
        if (p < s.pos) return v_before.at(Vi(s.slot, h, d, p));
        return vbuf.Stored(qkv[(s.row + p - s.pos) * 3 * HD + 2 * HD + h * D + d]);
      };
      for (int i = 0; i < s.len; ++i) {
        const int r = s.row + i, n = s.pos + i + 1;
        std::vector<double> w(n);
        double mx = -1e300, sum = 0;
        for (int p = 0; p < n; ++p) {
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += qkv[r * 3 * HD + h * D + d] * key(p, d);
          w[p] = dot / std::sqrt(double{D});
          mx = std::max(mx, w[p]);
        }
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int p = 0; p < n; ++p) acc += w[p] / sum * value(p, d);
          want[r * HD + h * D + d] = acc;
        }
        // The new row's K/V landed in the cache at its position.
        for (int d = 0; d < D; ++d) {
          EXPECT_EQ(kbuf.at(K(s.slot, h, d, s.pos + i)), key(s.pos + i, d));
          EXPECT_EQ(vbuf.at(Vi(s.slot, h, d, s.pos + i)), value(s.pos + i, d));
        }
      }
    }
  }
  EXPECT_LT(RelErr(out, want), 1e-5);
  // Slot 1 is not in the batch and must be untouched.
  for (int64_t i = 1 * kv.slot_stride(); i < 2 * kv.slot_stride(); ++i) {
    EXPECT_EQ(kbuf.at(i), k_before.at(i));
  }
}

// Values move for the filled positions only; keys move in whole blocks of
// kKeyBlock positions, so blocks past the last filled one stay untouched.
TEST_P(KvDtypeTest, MoveKvSlotCopiesFilledPositions) {
  CpuOps ops(MatmulDtype::kF32, GetParam());
  const int H = 2, D = 4, S = 3, L = 70, len = 6;
  KvLayer kv{nullptr, nullptr, S, H, L, D, GetParam()};
  Arena kbuf(GetParam(), S * kv.slot_stride(), 18), vbuf(GetParam(), S * kv.slot_stride(), 19);
  const Arena k0 = kbuf, v0 = vbuf;
  kv.k = kbuf.data();
  kv.v = vbuf.data();
  ops.MoveKvSlot(kv, /*from=*/2, /*to=*/0, len);
  for (int h = 0; h < H; ++h)
    for (int p = 0; p < L; ++p)
      for (int d = 0; d < D; ++d) {
        const int64_t kto = 0 * kv.slot_stride() + h * kv.head_stride() + kv.key_offset(d, p);
        const int64_t kfrom = 2 * kv.slot_stride() + h * kv.head_stride() + kv.key_offset(d, p);
        const int64_t vto = 0 * kv.slot_stride() + h * kv.head_stride() + int64_t{p} * D + d;
        const int64_t vfrom = 2 * kv.slot_stride() + h * kv.head_stride() + int64_t{p} * D + d;
        if (p < len) {
          EXPECT_EQ(kbuf.at(kto), k0.at(kfrom));
          EXPECT_EQ(vbuf.at(vto), v0.at(vfrom));
        } else {
          EXPECT_EQ(vbuf.at(vto), v0.at(vto));
          if (p >= KvLayer::kKeyBlock) {
            EXPECT_EQ(kbuf.at(kto), k0.at(kto));
          }
        }
      }
  // The other slots are untouched.
  for (int64_t i = kv.slot_stride(); i < 3 * kv.slot_stride(); ++i) {
    EXPECT_EQ(kbuf.at(i), k0.at(i));
    EXPECT_EQ(vbuf.at(i), v0.at(i));
  }
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
  CpuOps ops(GetParam());
  const int K = 96, N = 130;
  auto w = Random(K * N, 20), b = Random(N, 21), row = Random(K, 22);
  for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
    auto weight = ops.PrepareWeight(w.data(), K, N, layout);
    std::vector<float> alone(N);
    ops.Linear(row.data(), 1, *weight, b.data(), Epilogue::kBiasGelu, alone.data());
    for (int M : {2, 5, 33, 101, 301}) {
      auto x = Random(M * K, 23 + M);
      std::copy(row.begin(), row.end(), x.begin() + (M / 2) * K);
      std::vector<float> out(M * N);
      ops.Linear(x.data(), M, *weight, b.data(), Epilogue::kBiasGelu, out.data());
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), out.begin() + (M / 2) * N)) << M;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OneDnnLinearDtypeTest,
                         ::testing::Values(MatmulDtype::kF32, MatmulDtype::kBF16));

// A sequence's attention output is bitwise the same alone, batched with
// others, or with its rows split into chunks across calls.
TEST_P(KvDtypeTest, AttentionDoesNotDependOnBatchOrChunking) {
  CpuOps ops(MatmulDtype::kF32, GetParam());
  const int H = 2, D = 16, S = 3, L = 64, HD = H * D, len = 40;
  auto qkv_seq = Random(len * 3 * HD, 30);
  auto run = [&](const std::vector<std::vector<int>>& chunks_per_call, bool with_others) {
    KvLayer kv{nullptr, nullptr, S, H, L, D, GetParam()};
    Arena kbuf(GetParam(), S * kv.slot_stride(), 40), vbuf(GetParam(), S * kv.slot_stride(), 41);
    kv.k = kbuf.data();
    kv.v = vbuf.data();
    std::vector<float> result(len * HD);
    int pos = 0;
    for (const auto& call : chunks_per_call) {
      for (int n : call) {
        std::vector<SeqRows> seqs;
        std::vector<float> qkv;
        if (with_others) {  // another sequence first, in slot 0
          seqs.push_back({0, 0, 7, 0});
          auto other = Random(7 * 3 * HD, 31 + pos);
          qkv.insert(qkv.end(), other.begin(), other.end());
        }
        const int row = with_others ? 7 : 0;
        seqs.push_back({2, pos, n, row});
        qkv.insert(qkv.end(), qkv_seq.begin() + pos * 3 * HD, qkv_seq.begin() + (pos + n) * 3 * HD);
        std::vector<float> out((row + n) * HD);
        ops.Attention(qkv.data(), seqs.data(), seqs.size(), kv, out.data());
        std::copy(out.begin() + row * HD, out.end(), result.begin() + pos * HD);
        pos += n;
      }
    }
    return result;
  };
  const auto alone = run({{40}}, false);
  EXPECT_EQ(alone, run({{40}}, true));
  EXPECT_EQ(alone, run({{5, 11, 24}}, true));
  std::vector<int> ones(40, 1);
  EXPECT_EQ(alone, run({{3}, {37}}, false));
  EXPECT_EQ(alone, run({ones}, true));
}

INSTANTIATE_TEST_SUITE_P(KvDtypes, KvDtypeTest, ::testing::Values(KvDtype::kF32, KvDtype::kBF16));

}  // namespace
}  // namespace flover::kernels
