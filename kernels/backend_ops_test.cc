// Every op of the backend contract, one test body per op, run against every
// backend this build and host have: the CPU always, CUDA when the module is
// built and a GPU is visible (skipped with the reason otherwise). Each
// backend is checked against a naive double-precision reference written
// here; a backend other than the CPU is also checked against the CPU
// backend's own result on the same case (in the manner of llama.cpp's
// test-backend-ops).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/backend.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/testing/numerics.h"
#include "kernels/testing/required_devices.h"

namespace flover::kernels {
namespace {

using testing::GeluRef;
using testing::RelErr;
using testing::Random;

// f rounded to nearest even in `dtype` (f32: unchanged), written here from
// the definition: a multiple of the quantum at f's binade. Values stay far
// from overflow in these tests.
float RoundTo(float f, DType dtype) {
  if (dtype == DType::kF32 || f == 0.0f || !std::isfinite(f)) return f;
  const int mantissa_bits = dtype == DType::kBF16 ? 7 : 10;
  const int min_exponent = dtype == DType::kBF16 ? -126 : -14;
  int e = 0;
  std::frexp(f, &e);  // f = m * 2^e, m in [0.5, 1)
  const double quantum = std::ldexp(1.0, std::max(e - 1, min_exponent) - mantissa_bits);
  return static_cast<float>(std::nearbyint(f / quantum) * quantum);  // ties to even
}

std::vector<float> RoundedTo(std::vector<float> v, DType dtype) {
  for (float& f : v) f = RoundTo(f, dtype);
  return v;
}

// IEEE half <-> float for test data, exact for the values RoundTo gives.
uint16_t HalfBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const float a = std::abs(f);
  if (a == 0.0f) return static_cast<uint16_t>(sign);
  int e = 0;
  const double m = std::frexp(double{a}, &e);  // a = m * 2^e
  if (e - 1 < -14) return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::ldexp(a, 24)));
  const uint32_t exponent = static_cast<uint32_t>(e - 1 + 15);
  const uint32_t mantissa = static_cast<uint32_t>((m * 2 - 1) * 1024);
  return static_cast<uint16_t>(sign | (exponent << 10) | mantissa);
}

float HalfToFloat(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  const double v = exponent == 0 ? std::ldexp(mantissa, -24)
                                 : std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
  return static_cast<float>((h & 0x8000) ? -v : v);
}

// A backend with host <-> backend helpers that keep their buffers alive.
class Dev {
 public:
  explicit Dev(std::unique_ptr<Backend> backend) : b_(std::move(backend)) {}
  Backend& operator*() { return *b_; }
  Backend* operator->() { return b_.get(); }

  // values (rounded to dtype) as a [rows, cols] tensor of dtype.
  Tensor Up(const std::vector<float>& values, int64_t rows, int64_t cols,
            DType dtype = DType::kF32) {
    EXPECT_EQ(int64_t(values.size()), rows * cols);
    Tensor t = New(dtype, rows, cols);
    if (dtype == DType::kF32) {
      EXPECT_TRUE(b_->Upload(values.data(), t).ok());
    } else {
      std::vector<uint16_t> bits(values.size());
      for (size_t i = 0; i < values.size(); ++i) {
        const float r = RoundTo(values[i], dtype);
        bits[i] = dtype == DType::kBF16 ? ToBf16(r) : HalfBits(r);
      }
      EXPECT_TRUE(b_->Upload(bits.data(), t).ok());
    }
    return t;
  }
  Tensor UpInts(const std::vector<int32_t>& values, int64_t rows, int64_t cols) {
    Tensor t = New(DType::kI32, rows, cols);
    EXPECT_TRUE(b_->Upload(values.data(), t).ok());
    return t;
  }
  Tensor New(DType dtype, int64_t rows, int64_t cols) {
    auto buf = b_->Allocate(dtype, rows, cols);
    EXPECT_TRUE(buf.ok()) << buf.status();
    buffers_.push_back(std::move(*buf));
    return buffers_.back().tensor();
  }
  // A tensor's values as float.
  std::vector<float> Down(const Tensor& t) {
    std::vector<float> out(t.elements());
    if (t.dtype == DType::kF32) {
      EXPECT_TRUE(b_->Download(t, out.data()).ok());
    } else {
      std::vector<uint16_t> bits(t.elements());
      EXPECT_TRUE(b_->Download(t, bits.data()).ok());
      for (size_t i = 0; i < bits.size(); ++i) {
        out[i] = t.dtype == DType::kBF16 ? Bf16ToFloat(bits[i]) : HalfToFloat(bits[i]);
      }
    }
    return out;
  }
  // A sequence table in both memories.
  SeqTable Seqs(const std::vector<SeqRows>& seqs, int num_rows) {
    std::vector<int32_t> flat;
    int max_context = 0;
    for (const SeqRows& s : seqs) {
      flat.insert(flat.end(), {s.slot, s.pos, s.len, s.row});
      max_context = std::max(max_context, s.pos + s.len);
    }
    return SeqTable{seqs.data(), int(seqs.size()), UpInts(flat, int64_t(seqs.size()), 4), num_rows,
                    max_context};
  }

 private:
  std::unique_ptr<Backend> b_;
  std::vector<Buffer> buffers_;
};

// The backend for (device, dtypes), or null with *skip set.
std::unique_ptr<Dev> MakeDev(const std::string& device, MatmulDtype matmul, KvDtype kv,
                             std::string* skip) {
  BackendOptions o;
  o.device = device;
  o.matmul = matmul;
  o.kv = kv;
  auto b = CreateBackend(o);
  if (!b.ok()) {
    *skip = std::string(b.status().message());
    // A device that must run here fails the test; a dtype it does not
    // offer (f16 on the CPU) is still a skip.
    if (testing::DeviceRequired(device) && skip->find("--dtype=") == std::string::npos) {
      ADD_FAILURE() << device << " is required here (FLOVER_REQUIRE_DEVICES): " << *skip;
    }
    return nullptr;
  }
  return std::make_unique<Dev>(std::move(*b));
}

// Runs `run_case` on the device under test (its own checks against the
// naive reference inside) and, for a device other than the CPU, again on the
// CPU backend with the same dtypes, comparing the two outputs within `tol`.
// Returns false (with *skip set) when the device cannot run here.
using Case = std::function<std::vector<float>(Dev&)>;
bool RunOnDeviceAndCpu(const std::string& device, MatmulDtype matmul, KvDtype kv, double tol,
                       const Case& run_case, std::string* skip) {
  auto dev = MakeDev(device, matmul, kv, skip);
  if (dev == nullptr) return false;
  const std::vector<float> out = run_case(*dev);
  if (device != "cpu") {
    std::string cpu_skip;
    auto cpu = MakeDev("cpu", matmul, kv, &cpu_skip);
    if (cpu != nullptr) {
      const std::vector<float> want = run_case(*cpu);
      EXPECT_LE(RelErr(out, want), tol) << device << " vs cpu";
    } else {
      std::printf("no CPU comparison: %s\n", cpu_skip.c_str());
    }
  }
  return true;
}

#define RUN_OR_SKIP(device, matmul, kv, tol, ...)                                \
  do {                                                                          \
    std::string _skip;                                                          \
    if (!RunOnDeviceAndCpu(device, matmul, kv, tol, Case(__VA_ARGS__), &_skip)) { \
      GTEST_SKIP() << device << ": " << _skip;                         \
    }                                                                  \
  } while (0)

// For tests that loop over dtypes: runs what the device can, notes what it
// cannot, and skips only when nothing ran.
class Ran {
 public:
  void Run(const std::string& device, MatmulDtype matmul, KvDtype kv, double tol, const Case& fn) {
    std::string skip;
    if (RunOnDeviceAndCpu(device, matmul, kv, tol, fn, &skip)) {
      ++ran_;
    } else {
      std::printf("%s %s/%s not run: %s\n", device.c_str(), MatmulDtypeName(matmul),
                  KvDtypeName(kv), skip.c_str());
      skip_ = skip;
    }
  }
  bool none() const { return ran_ == 0; }
  const std::string& why() const { return skip_; }

 private:
  int ran_ = 0;
  std::string skip_;
};

class OpsTest : public ::testing::TestWithParam<const char*> {
 protected:
  std::string device() const { return GetParam(); }
};

TEST_P(OpsTest, Embed) {
  RUN_OR_SKIP(device(), MatmulDtype::kF32, KvDtype::kF32, 0, [](Dev& d) {
    const int V = 7, P = 5, C = 9, T = 4;
    auto wte = Random(V * C, 1), wpe = Random(P * C, 2);
    std::vector<int32_t> tokens = {6, 0, 3, 3}, positions = {0, 4, 1, 2};
    const Tensor wpe_t = d.Up(wpe, P, C), out = d.New(DType::kF32, T, C);
    EXPECT_TRUE(d->Embed(d.UpInts(tokens, 1, T), d.UpInts(positions, 1, T), d.Up(wte, V, C), 0,
                         &wpe_t, out)
                    .ok());
    const std::vector<float> got = d.Down(out);
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c)
        EXPECT_EQ(got[t * C + c], wte[tokens[t] * C + c] + wpe[positions[t] * C + c]);
    return got;
  });
}

// A tensor-parallel rank holding vocabulary rows [3, 7) and no wpe.
TEST_P(OpsTest, EmbedVocabShard) {
  RUN_OR_SKIP(device(), MatmulDtype::kF32, KvDtype::kF32, 0, [](Dev& d) {
    const int C = 5, T = 4;
    auto rows = Random(4 * C, 3);
    std::vector<int32_t> tokens = {2, 3, 6, 7}, positions = {0, 1, 2, 3};
    const Tensor out = d.Up(std::vector<float>(T * C, 9.0f), T, C);
    EXPECT_TRUE(
        d->Embed(d.UpInts(tokens, 1, T), d.UpInts(positions, 1, T), d.Up(rows, 4, C), 3, nullptr, out)
            .ok());
    const std::vector<float> got = d.Down(out);
    for (int c = 0; c < C; ++c) {
      EXPECT_EQ(got[0 * C + c], 0.0f);
      EXPECT_EQ(got[1 * C + c], rows[0 * C + c]);
      EXPECT_EQ(got[2 * C + c], rows[3 * C + c]);
      EXPECT_EQ(got[3 * C + c], 0.0f);
    }
    return got;
  });
}

TEST_P(OpsTest, Add) {
  RUN_OR_SKIP(device(), MatmulDtype::kF32, KvDtype::kF32, 0, [](Dev& d) {
    const int R = 7, C = 14287;
    auto x = Random(R * C, 4), y = Random(R * C, 5);
    const Tensor out = d.Up(y, R, C);
    EXPECT_TRUE(d->Add(d.Up(x, R, C), out).ok());
    const std::vector<float> got = d.Down(out);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(got[i], x[i] + y[i]);
    return got;
  });
}

TEST_P(OpsTest, GatherLastRows) {
  RUN_OR_SKIP(device(), MatmulDtype::kF32, KvDtype::kF32, 0, [](Dev& d) {
    const int T = 9, C = 33;
    auto x = Random(T * C, 6);
    const std::vector<SeqRows> seqs = {{0, 0, 3, 0}, {1, 5, 1, 3}, {2, 0, 5, 4}};
    const Tensor out = d.New(DType::kF32, 3, C);
    EXPECT_TRUE(d->GatherLastRows(d.Up(x, T, C), d.Seqs(seqs, T), out).ok());
    const std::vector<float> got = d.Down(out);
    const int last[] = {2, 3, 8};
    for (int s = 0; s < 3; ++s)
      for (int c = 0; c < C; ++c) EXPECT_EQ(got[s * C + c], x[last[s] * C + c]);
    return got;
  });
}

// In f32, and (CUDA) into the dtype Linear takes its inputs in.
TEST_P(OpsTest, LayerNorm) {
  Ran ran;
  for (MatmulDtype matmul : {MatmulDtype::kF32, MatmulDtype::kBF16, MatmulDtype::kF16}) {
    ran.Run(device(), matmul, KvDtype::kF32, 1e-2, [](Dev& d) {
      const int T = 5, C = 777;
      auto x = Random(T * C, 3, 4.0f), g = Random(C, 4), b = Random(C, 5);
      const DType act = d->activation_dtype();
      const Tensor out = d.New(act, T, C);
      EXPECT_TRUE(d->LayerNorm(d.Up(x, T, C), d.Up(g, 1, C), d.Up(b, 1, C), 1e-5f, out).ok());
      std::vector<double> want(T * C);
      for (int t = 0; t < T; ++t) {
        double mean = 0, var = 0;
        for (int c = 0; c < C; ++c) mean += x[t * C + c];
        mean /= C;
        for (int c = 0; c < C; ++c) var += std::pow(x[t * C + c] - mean, 2);
        var /= C;
        for (int c = 0; c < C; ++c)
          want[t * C + c] = RoundTo((x[t * C + c] - mean) / std::sqrt(var + 1e-5) * g[c] + b[c], act);
      }
      // f32 sums, then at most one rounding step of the output type.
      const double tol = act == DType::kF32 ? 1e-5 : act == DType::kBF16 ? 8e-3 : 1e-3;
      const std::vector<float> got = d.Down(out);
      EXPECT_LT(RelErr(got, want), tol) << DTypeName(act);
      return got;
    });
  }
  if (ran.none()) GTEST_SKIP() << ran.why();
}

// y: [M, N] = x @ W + bias, W given as [K, N] or [N, K].
std::vector<double> NaiveLinear(const std::vector<float>& x, int M, int K,
                                const std::vector<float>& w, int N, const float* bias,
                                WeightLayout layout) {
  std::vector<double> y(size_t(M) * N);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = bias ? bias[n] : 0.0;
      for (int k = 0; k < K; ++k)
        s += double{x[m * K + k]} * (layout == WeightLayout::kOutIn ? w[n * K + k] : w[k * N + n]);
      y[size_t(m) * N + n] = s;
    }
  return y;
}

// Rows x layout x dtype. 33, 101 and 201 rows are not CPU row buckets: they
// run padded there. With bf16/f16 the reference takes the inputs and weights
// rounded to that type, so the only error left is float32 summation.
class LinearTest
    : public ::testing::TestWithParam<std::tuple<const char*, int, WeightLayout, MatmulDtype>> {};

TEST_P(LinearTest, EveryEpilogueMatchesNaive) {
  const auto [device, M, layout, dtype] = GetParam();
  RUN_OR_SKIP(device, dtype, KvDtype::kF32, 1e-5, [&, M = M, layout = layout, dtype = dtype](Dev& d) {
    const int K = 45, N = 67;
    auto x = Random(M * K, 6, 2.0f), w = Random(K * N, 7), b = Random(N, 8);
    auto weight = d->PrepareWeight(w.data(), K, N, layout);
    EXPECT_TRUE(weight.ok()) << weight.status();
    EXPECT_EQ((*weight)->k(), K);
    EXPECT_EQ((*weight)->n(), N);
    const DType wt = ToDType(dtype), act = d->activation_dtype();
    const std::vector<float> xr = RoundedTo(x, wt), wr = RoundedTo(w, wt);
    const auto want = NaiveLinear(xr, M, K, wr, N, b.data(), layout);
    const Tensor xt = d.Up(x, M, K), bt = d.Up(b, 1, N), out = d.New(DType::kF32, M, N);
    std::vector<float> all;  // every output, for the comparison with the CPU

    EXPECT_TRUE(d->Linear(xt, **weight, &bt, Epilogue::kBias, out).ok());
    std::vector<float> got = d.Down(out);
    EXPECT_LT(RelErr(got, want), 1e-5);
    if (wt != DType::kF32) {  // and it really is 16-bit: far from the float32 product
      EXPECT_GT(RelErr(got, NaiveLinear(x, M, K, w, N, b.data(), layout)), 1e-5);
    }
    all.insert(all.end(), got.begin(), got.end());
    // Inputs already in the activation dtype give the same result bitwise.
    if (act != DType::kF32) {
      EXPECT_TRUE(d->Linear(d.Up(x, M, K, act), **weight, &bt, Epilogue::kBias, out).ok());
      EXPECT_EQ(d.Down(out), got);
    }

    EXPECT_TRUE(d->Linear(xt, **weight, nullptr, Epilogue::kBias, out).ok());
    got = d.Down(out);
    EXPECT_LT(RelErr(got, NaiveLinear(xr, M, K, wr, N, nullptr, layout)), 1e-5);
    all.insert(all.end(), got.begin(), got.end());

    for (DType gelu_out : {DType::kF32, act}) {
      const Tensor g = d.New(gelu_out, M, N);
      EXPECT_TRUE(d->Linear(xt, **weight, &bt, Epilogue::kBiasGelu, g).ok());
      std::vector<double> gelu = want;
      for (double& v : gelu) v = RoundTo(GeluRef(v), gelu_out);
      got = d.Down(g);
      EXPECT_LT(RelErr(got, gelu), gelu_out == DType::kF32 ? 1e-5 : 8e-3) << DTypeName(gelu_out);
      // (The CPU keeps activations in f32: compare the f32 output only.)
      if (gelu_out == DType::kF32) all.insert(all.end(), got.begin(), got.end());
    }

    const std::vector<float> residual = Random(M * N, 9);
    const Tensor acc = d.Up(residual, M, N);
    EXPECT_TRUE(d->Linear(xt, **weight, &bt, Epilogue::kBiasResidual, acc).ok());
    std::vector<double> summed = want;
    for (int i = 0; i < M * N; ++i) summed[i] += residual[i];
    got = d.Down(acc);
    EXPECT_LT(RelErr(got, summed), 1e-5);
    all.insert(all.end(), got.begin(), got.end());
    return all;
  });
}

INSTANTIATE_TEST_SUITE_P(
    DevicesRowsLayoutsDtypes, LinearTest,
    ::testing::Combine(::testing::Values("cpu", "cuda"), ::testing::Values(1, 3, 4, 33, 101, 201),
                       ::testing::Values(WeightLayout::kInOut, WeightLayout::kOutIn),
                       ::testing::Values(MatmulDtype::kF32, MatmulDtype::kBF16, MatmulDtype::kF16)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param)) + "_M" + std::to_string(std::get<1>(info.param)) +
             (std::get<2>(info.param) == WeightLayout::kInOut ? "_inout_" : "_outin_") +
             MatmulDtypeName(std::get<3>(info.param));
    });

// A row's Linear output is bitwise the same whatever M is: the property the
// engine's batch invariance rests on (a GEMM whose algorithm or K split
// changed with M would fail here).
class LinearInvarianceTest
    : public ::testing::TestWithParam<std::tuple<const char*, MatmulDtype>> {};

TEST_P(LinearInvarianceTest, RowDoesNotDependOnOtherRows) {
  const auto [device, dtype] = GetParam();
  std::string skip;
  auto d = MakeDev(device, dtype, KvDtype::kF32, &skip);
  if (d == nullptr) GTEST_SKIP() << device << ": " << skip;
  const int K = 768, N = 1000;
  auto w = Random(K * N, 20, 0.05f), b = Random(N, 21), row = Random(K, 22);
  for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
    auto weight = (*d)->PrepareWeight(w.data(), K, N, layout);
    ASSERT_TRUE(weight.ok());
    for (Epilogue e : {Epilogue::kBias, Epilogue::kBiasGelu}) {
      ASSERT_TRUE((*d)->PrepareLinear(**weight, 512, true, e).ok());
      const Tensor bt = d->Up(b, 1, N), alone_out = d->New(DType::kF32, 1, N);
      ASSERT_TRUE((*d)->Linear(d->Up(row, 1, K), **weight, &bt, e, alone_out).ok());
      const std::vector<float> alone = d->Down(alone_out);
      for (int M : {2, 5, 33, 64, 101, 256, 301, 512}) {
        auto x = Random(M * K, 23 + M);
        std::copy(row.begin(), row.end(), x.begin() + (M / 2) * K);
        const Tensor out = d->New(DType::kF32, M, N);
        ASSERT_TRUE((*d)->Linear(d->Up(x, M, K), **weight, &bt, e, out).ok());
        const std::vector<float> got = d->Down(out);
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), got.begin() + (M / 2) * N))
            << device << " M=" << M;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    DevicesDtypes, LinearInvarianceTest,
    ::testing::Combine(::testing::Values("cpu", "cuda"),
                       ::testing::Values(MatmulDtype::kF32, MatmulDtype::kBF16, MatmulDtype::kF16)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param)) + "_" + MatmulDtypeName(std::get<1>(info.param));
    });

// A K or V arena of either KV dtype: host content, uploaded to the backend.
struct Arena {
  Arena(KvDtype dtype, size_t n, uint32_t seed) : dtype(dtype), values(Random(n, seed)) {
    for (float& v : values) v = Stored(v);
  }
  // What storing x keeps.
  float Stored(float x) const { return dtype == KvDtype::kBF16 ? Bf16ToFloat(ToBf16(x)) : x; }
  DType elem() const { return dtype == KvDtype::kBF16 ? DType::kBF16 : DType::kF32; }
  Tensor Upload(Dev& d) const { return d.Up(values, 1, int64_t(values.size()), elem()); }

  KvDtype dtype;
  std::vector<float> values;
};

class KvOpsTest : public ::testing::TestWithParam<std::tuple<const char*, KvDtype>> {
 protected:
  std::string device() const { return std::get<0>(GetParam()); }
  KvDtype kv_dtype() const { return std::get<1>(GetParam()); }
};

// Four sequences in different slots, at different positions, with 1 to 45
// rows each: a decode row, a fresh prompt and continued chunks. With a bf16
// cache the reference reads the stored (rounded) keys and values. The
// output goes to f32 and (CUDA bf16) to the activation dtype.
TEST_P(KvOpsTest, AttentionOverRaggedBatch) {
  const KvDtype kvd = kv_dtype();
  Ran ran;
  // GPT-2's head dim, and one that is not a multiple of a warp (the fixtures'
  // heads are 4 to 16 wide).
  for (const auto [matmul, D] : {std::pair{MatmulDtype::kF32, 64}, std::pair{MatmulDtype::kBF16, 64},
                                 std::pair{MatmulDtype::kF32, 12}}) {
    ran.Run(device(), matmul, kvd, 1e-2, [&, D = D](Dev& d) {
      const int H = 3, S = 5, L = 80, HD = H * D;
      KvLayer kv{nullptr, nullptr, S, H, L, D, kvd};
      const Arena k_before(kvd, S * kv.slot_stride(), 15), v_before(kvd, S * kv.slot_stride(), 16);
      const Tensor kt = k_before.Upload(d), vt = v_before.Upload(d);
      kv.k = kt.data;
      kv.v = vt.data;
      auto K = [&](int slot, int h, int dd, int p) {
        return slot * kv.slot_stride() + h * kv.head_stride() + kv.key_offset(dd, p);
      };
      auto Vi = [&](int slot, int h, int dd, int p) {
        return slot * kv.slot_stride() + h * kv.head_stride() + int64_t{p} * D + dd;
      };
      const std::vector<SeqRows> seqs = {{/*slot=*/2, /*pos=*/11, /*len=*/1, /*row=*/0},
                                         {/*slot=*/0, /*pos=*/0, /*len=*/20, /*row=*/1},
                                         {/*slot=*/3, /*pos=*/5, /*len=*/7, /*row=*/21},
                                         {/*slot=*/4, /*pos=*/3, /*len=*/45, /*row=*/28}};
      const int T = 73;
      auto qkv = Random(T * 3 * HD, 17);
      const DType act = d->activation_dtype();
      const Tensor out = d.New(act, T, HD);
      EXPECT_TRUE(d->Attention(d.Up(qkv, T, 3 * HD), d.Seqs(seqs, T), kv, out).ok());
      const std::vector<float> got = d.Down(out);
      const std::vector<float> k_after = d.Down(kt), v_after = d.Down(vt);

      std::vector<double> want(T * HD);
      for (const SeqRows& s : seqs) {
        for (int h = 0; h < H; ++h) {
          // The key/value history: old cache content before pos, the new
          // rows (as stored) after.
          auto key = [&](int p, int dd) -> double {
            if (p < s.pos) return k_before.values[K(s.slot, h, dd, p)];
            return k_before.Stored(qkv[(s.row + p - s.pos) * 3 * HD + HD + h * D + dd]);
          };
          auto value = [&](int p, int dd) -> double {
            if (p < s.pos) return v_before.values[Vi(s.slot, h, dd, p)];
            return v_before.Stored(qkv[(s.row + p - s.pos) * 3 * HD + 2 * HD + h * D + dd]);
          };
          for (int i = 0; i < s.len; ++i) {
            const int r = s.row + i, n = s.pos + i + 1;
            std::vector<double> w(n);
            double mx = -1e300, sum = 0;
            for (int p = 0; p < n; ++p) {
              double dot = 0;
              for (int dd = 0; dd < D; ++dd) dot += qkv[r * 3 * HD + h * D + dd] * key(p, dd);
              w[p] = dot / std::sqrt(double{D});
              mx = std::max(mx, w[p]);
            }
            for (double& x : w) sum += (x = std::exp(x - mx));
            for (int dd = 0; dd < D; ++dd) {
              double acc = 0;
              for (int p = 0; p < n; ++p) acc += w[p] / sum * value(p, dd);
              want[r * HD + h * D + dd] = RoundTo(static_cast<float>(acc), act);
            }
            // The new row's K/V landed in the cache at its position.
            for (int dd = 0; dd < D; ++dd) {
              EXPECT_EQ(k_after[K(s.slot, h, dd, s.pos + i)], key(s.pos + i, dd));
              EXPECT_EQ(v_after[Vi(s.slot, h, dd, s.pos + i)], value(s.pos + i, dd));
            }
          }
        }
      }
      EXPECT_LT(RelErr(got, want), act == DType::kF32 ? 1e-5 : 8e-3);
      // Slot 1 is not in the batch and must be untouched.
      for (int64_t i = 1 * kv.slot_stride(); i < 2 * kv.slot_stride(); ++i) {
        EXPECT_EQ(k_after[i], k_before.values[i]);
        EXPECT_EQ(v_after[i], v_before.values[i]);
      }
      return got;
    });
  }
  if (ran.none()) GTEST_SKIP() << ran.why();
}

// Values move for the filled positions only; keys move in whole blocks of
// kKeyBlock positions, so blocks past the last filled one stay untouched.
TEST_P(KvOpsTest, MoveKvSlotCopiesFilledPositions) {
  const KvDtype kvd = kv_dtype();
  RUN_OR_SKIP(device(), MatmulDtype::kF32, kvd, 0, [&](Dev& d) {
    const int H = 2, D = 4, S = 3, L = 70, len = 6;
    KvLayer kv{nullptr, nullptr, S, H, L, D, kvd};
    const Arena k0(kvd, S * kv.slot_stride(), 18), v0(kvd, S * kv.slot_stride(), 19);
    const Tensor kt = k0.Upload(d), vt = v0.Upload(d);
    kv.k = kt.data;
    kv.v = vt.data;
    EXPECT_TRUE(d->MoveKvSlot(kv, /*from=*/2, /*to=*/0, len).ok());
    std::vector<float> k = d.Down(kt);
    const std::vector<float> v = d.Down(vt);
    for (int h = 0; h < H; ++h)
      for (int p = 0; p < L; ++p)
        for (int dd = 0; dd < D; ++dd) {
          const int64_t kto = 0 * kv.slot_stride() + h * kv.head_stride() + kv.key_offset(dd, p);
          const int64_t kfrom = 2 * kv.slot_stride() + h * kv.head_stride() + kv.key_offset(dd, p);
          const int64_t vto = 0 * kv.slot_stride() + h * kv.head_stride() + int64_t{p} * D + dd;
          const int64_t vfrom = 2 * kv.slot_stride() + h * kv.head_stride() + int64_t{p} * D + dd;
          if (p < len) {
            EXPECT_EQ(k[kto], k0.values[kfrom]);
            EXPECT_EQ(v[vto], v0.values[vfrom]);
          } else {
            EXPECT_EQ(v[vto], v0.values[vto]);
            if (p >= KvLayer::kKeyBlock) {
              EXPECT_EQ(k[kto], k0.values[kto]);
            }
          }
        }
    // The other slots are untouched.
    for (int64_t i = kv.slot_stride(); i < 3 * kv.slot_stride(); ++i) {
      EXPECT_EQ(k[i], k0.values[i]);
      EXPECT_EQ(v[i], v0.values[i]);
    }
    // A move that does not fit is refused, naming the op.
    const absl::Status bad = d->MoveKvSlot(kv, 0, S, 1);
    EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.message().find("MoveKvSlot"), std::string::npos) << bad;
    k.insert(k.end(), v.begin(), v.end());
    return k;
  });
}

// A sequence's attention output is bitwise the same alone, batched with
// others, or with its rows split into chunks across calls; with contexts
// long enough that a GPU splits them over positions.
TEST_P(KvOpsTest, AttentionDoesNotDependOnBatchOrChunking) {
  std::string skip;
  auto d = MakeDev(device(), MatmulDtype::kF32, kv_dtype(), &skip);
  if (d == nullptr) GTEST_SKIP() << device() << ": " << skip;
  for (const int len : {40, 1500}) {
    const int H = 2, D = 64, S = 3, L = len + 8, HD = H * D;
    auto qkv_seq = Random(len * 3 * HD, 30);
    auto run = [&](const std::vector<std::vector<int>>& chunks_per_call, bool with_others) {
      KvLayer kv{nullptr, nullptr, S, H, L, D, kv_dtype()};
      const Arena k0(kv_dtype(), S * kv.slot_stride(), 40), v0(kv_dtype(), S * kv.slot_stride(), 41);
      const Tensor kt = k0.Upload(*d), vt = v0.Upload(*d);
      kv.k = kt.data;
      kv.v = vt.data;
      std::vector<float> result(size_t(len) * HD);
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
          qkv.insert(qkv.end(), qkv_seq.begin() + size_t(pos) * 3 * HD,
                     qkv_seq.begin() + size_t(pos + n) * 3 * HD);
          const int T = row + n;
          const Tensor out = d->New(DType::kF32, T, HD);
          EXPECT_TRUE((*d)->Attention(d->Up(qkv, T, 3 * HD), d->Seqs(seqs, T), kv, out).ok());
          const std::vector<float> o = d->Down(out);
          std::copy(o.begin() + size_t(row) * HD, o.end(), result.begin() + size_t(pos) * HD);
          pos += n;
        }
      }
      return result;
    };
    const auto alone = run({{len}}, false);
    EXPECT_EQ(alone, run({{len}}, true)) << len;
    EXPECT_EQ(alone, run({{5, 11, len - 16}}, true)) << len;
    EXPECT_EQ(alone, run({{3}, {len - 3}}, false)) << len;
    if (len <= 64) {
      EXPECT_EQ(alone, run({std::vector<int>(len, 1)}, true)) << len;
    }
    // Decode steps at the end of a long context.
    EXPECT_EQ(alone, run({{len - 4, 1, 1, 1, 1}}, true)) << len;
  }
}

INSTANTIATE_TEST_SUITE_P(DevicesKvDtypes, KvOpsTest,
                         ::testing::Combine(::testing::Values("cpu", "cuda"),
                                            ::testing::Values(KvDtype::kF32, KvDtype::kBF16)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) + "_" +
                                  KvDtypeName(std::get<1>(info.param));
                         });

// Memory: round trips are exact, an impossible allocation is refused with
// the size, a wrongly shaped argument is refused naming the op and tensor.
TEST_P(OpsTest, MemoryAndArgumentErrors) {
  std::string skip;
  auto d = MakeDev(device(), MatmulDtype::kF32, KvDtype::kF32, &skip);
  if (d == nullptr) GTEST_SKIP() << device() << ": " << skip;
  const std::vector<float> x = Random(1000, 50);
  EXPECT_EQ(d->Down(d->Up(x, 10, 100)), x);
  auto huge = (*d)->Allocate(DType::kF32, int64_t{1} << 40, 1024);  // 4 PiB
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_NE(huge.status().message().find("MiB"), std::string::npos) << huge.status();

  const Tensor a = d->Up(x, 10, 100), b = d->New(DType::kF32, 10, 99);
  const absl::Status st = (*d)->Add(a, b);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("Add: x"), std::string::npos) << st;
  auto w = (*d)->PrepareWeight(x.data(), 10, 100, WeightLayout::kInOut);
  ASSERT_TRUE(w.ok());
  const absl::Status lin = (*d)->Linear(a, **w, nullptr, Epilogue::kBias, d->New(DType::kF32, 10, 100));
  EXPECT_EQ(lin.code(), absl::StatusCode::kInvalidArgument);  // x is [10, 100], K is 10
  EXPECT_NE(lin.message().find("Linear: x"), std::string::npos) << lin;
  EXPECT_TRUE((*d)->Synchronize().ok());
}

INSTANTIATE_TEST_SUITE_P(Devices, OpsTest, ::testing::Values("cpu", "cuda"));

}  // namespace
}  // namespace flover::kernels
