// Every dense op of the backend contract, one test body per op, run against
// every backend this build and host have: the CPU always, CUDA when the
// module is built and a GPU is visible (skipped with the reason otherwise).
// Each backend is checked against a naive double-precision reference written
// here; a backend other than the CPU is also checked against the CPU
// backend's own result on the same case (in the manner of llama.cpp's
// test-backend-ops). The KV-cache ops are in kv_ops_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/backend.h"
#include "kernels/block_format.h"
#include "kernels/cpu/vec_math.h"
#include "testing/numerics.h"
#include "testing/op_harness.h"
#include "testing/random_blocks.h"

namespace flover::kernels {
namespace {

// A product and a sum each rounded to float32 (never fused into one
// multiply-add, whatever the compiler's contraction setting).
float RoundedProduct(float a, float b) {
  volatile float p = a * b;
  return p;
}
float RoundedSum(float a, float b) {
  volatile float sum = a + b;
  return sum;
}

using ::flover::testing::GeluRef;
using ::flover::testing::Random;
using ::flover::testing::RelErr;
using testing::Dev;
using testing::MakeDev;
using testing::Ran;
using testing::RoundedTo;
using testing::RoundTo;

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

// ArgmaxRows picks each row's token as the sampler's greedy pick
// (std::max_element): the first of equal largest values; NaNs passed over
// unless the row starts with one; -inf and +inf as numbers. A vocabulary's
// width, so the device's reduction spans many threads.
TEST_P(OpsTest, ArgmaxRowsPicksAsMaxElement) {
  RUN_OR_SKIP(device(), MatmulDtype::kF32, KvDtype::kF32, 0, [](Dev& d) {
    const int R = 8, V = 50257;
    std::vector<float> x = Random(R * V, 70);
    auto row = [&](int r) { return x.data() + size_t(r) * V; };
    row(1)[300] = row(1)[40000] = row(1)[7] = 5.0f;             // ties: the first, 7
    row(2)[0] = NAN;                                            // a leading NaN: 0
    row(2)[9] = 9.0f;
    row(3)[11] = NAN;                                           // a NaN later: passed over
    row(3)[12] = 8.0f;
    std::fill(row(4), row(4) + V, -INFINITY);                   // all -inf: 0
    row(5)[V - 1] = INFINITY;                                   // +inf last
    for (int i = 0; i < V; ++i) row(6)[i] = (i % 3 == 1) ? NAN : -1.0f;  // NaNs between
    row(6)[5] = 2.0f;
    row(7)[V / 2] = 0.0f;                                       // -0 and +0 tie: the first
    for (int i = 0; i < V; ++i) row(7)[i] = std::min(row(7)[i], -0.5f);
    row(7)[100] = -0.0f;
    row(7)[V / 2] = 0.0f;
    const Tensor out = d.New(DType::kI32, 1, R);
    EXPECT_TRUE(d->ArgmaxRows(d.Up(x, R, V), out).ok());
    std::vector<int32_t> got(R);
    EXPECT_TRUE(d->Download(out, got.data()).ok());
    std::vector<float> as_floats;
    for (int r = 0; r < R; ++r) {
      const int32_t want = static_cast<int32_t>(std::max_element(row(r), row(r) + V) - row(r));
      EXPECT_EQ(got[r], want) << "row " << r;
      as_floats.push_back(static_cast<float>(got[r]));
    }
    EXPECT_EQ(got[1], 7);
    EXPECT_EQ(got[2], 0);
    EXPECT_EQ(got[3], 12);
    EXPECT_EQ(got[4], 0);
    EXPECT_EQ(got[5], V - 1);
    EXPECT_EQ(got[6], 5);
    EXPECT_EQ(got[7], 100);
    const absl::Status wrong = d->ArgmaxRows(d.Up(x, R, V), d.New(DType::kI32, 1, R - 1));
    EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(wrong.message().find("ArgmaxRows"), std::string::npos) << wrong;
    return as_floats;
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

// Against a float64 softmax; a group's rows computed beside other groups
// equal those computed alone, bitwise. Heads of 8 and of 72 dims (SigLIP's:
// past a warp's 32 lanes, not a multiple of them), two and three groups.
TEST_P(OpsTest, EncoderAttention) {
  RUN_OR_SKIP(device(), MatmulDtype::kF32, KvDtype::kF32, 1e-5, [](Dev& d) {
    struct Shape {
      int H, D;
      std::vector<int32_t> ends;
    };
    const int T = 11;
    std::vector<float> all;
    for (const Shape& shape : {Shape{3, 8, {4, 11}}, Shape{2, 72, {3, 7, 11}}}) {
      const int H = shape.H, D = shape.D, W = 3 * H * D;
      const std::vector<int32_t>& ends = shape.ends;
      auto qkv = Random(T * W, 21 + D, 2.0f);
      const Tensor out = d.New(DType::kF32, T, H * D);
      EXPECT_TRUE(d->EncoderAttention(d.Up(qkv, T, W), ends, H, 0.0f, out).ok());
      const std::vector<float> got = d.Down(out);
      std::vector<double> want(T * H * D);
      for (int t = 0; t < T; ++t) {
        const size_t g = std::upper_bound(ends.begin(), ends.end(), t) - ends.begin();
        const int b = g == 0 ? 0 : ends[g - 1], e = ends[g];
        for (int h = 0; h < H; ++h) {
          std::vector<double> p;
          double top = -1e300, sum = 0;
          for (int j = b; j < e; ++j) {
            double dot = 0;
            for (int c = 0; c < D; ++c) dot += double(qkv[t * W + h * D + c]) * qkv[j * W + (H + h) * D + c];
            p.push_back(dot / std::sqrt(double(D)));
            top = std::max(top, p.back());
          }
          for (double& x : p) sum += x = std::exp(x - top);
          for (int j = b; j < e; ++j)
            for (int c = 0; c < D; ++c)
              want[t * H * D + h * D + c] += p[j - b] / sum * qkv[j * W + (2 * H + h) * D + c];
        }
      }
      EXPECT_LT(RelErr(got, want), 1e-5) << "D " << D;
      // The last group alone: the same bits.
      const int first = ends[ends.size() - 2];
      const std::vector<float> tail(qkv.begin() + first * W, qkv.end());
      const Tensor alone = d.New(DType::kF32, T - first, H * D);
      EXPECT_TRUE(d->EncoderAttention(d.Up(tail, T - first, W), std::vector<int32_t>{T - first}, H, 0.0f, alone).ok());
      const std::vector<float> alone_got = d.Down(alone);
      EXPECT_TRUE(std::equal(alone_got.begin(), alone_got.end(), got.begin() + first * H * D)) << "D " << D;
      // Groups that do not cover the rows are refused.
      EXPECT_FALSE(d->EncoderAttention(d.Up(qkv, T, W), std::vector<int32_t>{4, 10}, H, 0.0f, out).ok());
      EXPECT_FALSE(d->EncoderAttention(d.Up(qkv, T, W), std::vector<int32_t>{4, 4, 11}, H, 0.0f, out).ok());
      all.insert(all.end(), got.begin(), got.end());
    }
    return all;
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

// RMSNorm (Llama's), into f32 and the activation dtype.
TEST_P(OpsTest, RmsNorm) {
  Ran ran;
  for (MatmulDtype matmul : {MatmulDtype::kF32, MatmulDtype::kBF16}) {
    ran.Run(device(), matmul, KvDtype::kF32, 1e-2, [](Dev& d) {
      const int T = 6, C = 517;
      auto x = Random(T * C, 31, 3.0f), g = Random(C, 32);
      const DType act = d->activation_dtype();
      const Tensor out = d.New(act, T, C);
      EXPECT_TRUE(d->RmsNorm(d.Up(x, T, C), d.Up(g, 1, C), 1e-6f, out).ok());
      std::vector<double> want(T * C);
      for (int t = 0; t < T; ++t) {
        double ss = 0;
        for (int c = 0; c < C; ++c) ss += double{x[t * C + c]} * x[t * C + c];
        const double rstd = 1 / std::sqrt(ss / C + 1e-6);
        for (int c = 0; c < C; ++c) want[t * C + c] = RoundTo(g[c] * (x[t * C + c] * rstd), act);
      }
      const std::vector<float> got = d.Down(out);
      EXPECT_LT(RelErr(got, want), act == DType::kF32 ? 1e-5 : 8e-3) << DTypeName(act);
      return got;
    });
  }
  if (ran.none()) GTEST_SKIP() << ran.why();
}

// RMSNorm of column groups in place (Q/K norms): each head of Q and of K
// in a qkv row on its own, V and the columns outside untouched; and one
// group of all of Q (OLMoE's). A row's result is the same in any batch.
TEST_P(OpsTest, GroupRmsNorm) {
  Ran ran;
  ran.Run(device(), MatmulDtype::kF32, KvDtype::kF32, 1e-2, [](Dev& d) {
    const int T = 5, Hq = 4, Hkv = 2, D = 48, W = (Hq + 2 * Hkv) * D;
    auto x = Random(T * W, 41, 3.0f), gq = Random(D, 42), gk = Random(D, 43), gall = Random(Hq * D, 44);
    auto reference = [&](std::vector<float> v, int first, int groups, const std::vector<float>& g) {
      const int G = static_cast<int>(g.size());
      std::vector<double> out(v.begin(), v.end());
      for (int t = 0; t < T; ++t) {
        for (int h = 0; h < groups; ++h) {
          const int at = t * W + first + h * G;
          double ss = 0;
          for (int c = 0; c < G; ++c) ss += double{v[at + c]} * v[at + c];
          const double rstd = 1 / std::sqrt(ss / G + 1e-6);
          for (int c = 0; c < G; ++c) out[at + c] = g[c] * (v[at + c] * rstd);
        }
      }
      return out;
    };
    // Q's heads, then K's.
    const Tensor qkv = d.Up(x, T, W);
    EXPECT_TRUE(d->GroupRmsNorm(qkv, 0, Hq, d.Up(gq, 1, D), 1e-6f).ok());
    EXPECT_TRUE(d->GroupRmsNorm(qkv, Hq * D, Hkv, d.Up(gk, 1, D), 1e-6f).ok());
    std::vector<double> want = reference(x, 0, Hq, gq);
    std::vector<float> after_q(want.begin(), want.end());
    want = reference(after_q, Hq * D, Hkv, gk);
    const std::vector<float> got = d.Down(qkv);
    EXPECT_LT(RelErr(got, want), 1e-5);
    for (int t = 0; t < T; ++t) {  // V exactly as it was
      for (int c = (Hq + Hkv) * D; c < W; ++c) EXPECT_EQ(got[t * W + c], x[t * W + c]);
    }
    // One row alone gives that row's result, bitwise.
    const std::vector<float> row(x.begin() + 2 * W, x.begin() + 3 * W);
    const Tensor one = d.Up(row, 1, W);
    EXPECT_TRUE(d->GroupRmsNorm(one, 0, Hq, d.Up(gq, 1, D), 1e-6f).ok());
    EXPECT_TRUE(d->GroupRmsNorm(one, Hq * D, Hkv, d.Up(gk, 1, D), 1e-6f).ok());
    EXPECT_EQ(d.Down(one), std::vector<float>(got.begin() + 2 * W, got.begin() + 3 * W));
    // All of Q as one group.
    const Tensor whole = d.Up(x, T, W);
    EXPECT_TRUE(d->GroupRmsNorm(whole, 0, 1, d.Up(gall, 1, Hq * D), 1e-6f).ok());
    EXPECT_LT(RelErr(d.Down(whole), reference(x, 0, 1, gall)), 1e-5);
    // Groups that do not fit are refused.
    EXPECT_EQ(d->GroupRmsNorm(whole, D, Hq + 2 * Hkv, d.Up(gq, 1, D), 1e-6f).code(),
              absl::StatusCode::kInvalidArgument);
    return got;
  });
  if (ran.none()) GTEST_SKIP() << ran.why();
}

// Rotary embeddings on Q and K heads (2 query heads per key/value head), V
// untouched, against the rotation computed in double from the same f32
// angle: what Hugging Face's models compute. Every dim turning as halves
// (Llama), a part of them as halves (NeoX's partial rotary), a part of them
// as interleaved pairs (GPT-J); the dims past the rotary part stay. With a
// scale (LongRoPE's attention factor, Phi-4-mini's partial rotary) cos and
// sin grow by it and the dims past the rotary part still stay.
TEST_P(OpsTest, Rope) {
  struct Case {
    int rotary;
    RopeStyle style;
    float scale = 1.0f;
  };
  const int T = 5, HQ = 4, HKV = 2, D = 16, W = (HQ + 2 * HKV) * D;
  for (const Case c : {Case{D, RopeStyle::kHalf}, Case{6, RopeStyle::kHalf},
                       Case{8, RopeStyle::kInterleaved}, Case{D, RopeStyle::kInterleaved},
                       Case{12, RopeStyle::kHalf, 1.19f}}) {
    RUN_OR_SKIP(device(), MatmulDtype::kF32, KvDtype::kF32, 1e-5, [&](Dev& d) {
      const int R = c.rotary, half = R / 2;
      auto qkv = Random(T * W, 33);
      std::vector<int32_t> pos = {0, 1, 7, 500, 4095};
      std::vector<float> freq(half);
      for (int i = 0; i < half; ++i) freq[i] = static_cast<float>(1.0 / std::pow(500000.0, 2.0 * i / R));
      const Tensor t = d.Up(qkv, T, W);
      EXPECT_TRUE(d->Rope(t, d.UpInts(pos, 1, T), d.Up(freq, 1, half), {HQ, HKV, D, c.style, c.scale}).ok());
      const std::vector<float> got = d.Down(t);
      std::vector<double> want(qkv.begin(), qkv.end());
      const bool interleaved = c.style == RopeStyle::kInterleaved;
      for (int r = 0; r < T; ++r) {
        for (int h = 0; h < HQ + HKV; ++h) {
          for (int i = 0; i < half; ++i) {
            const int ia = r * W + h * D + (interleaved ? 2 * i : i);
            const int ib = ia + (interleaved ? 1 : half);
            const double angle = static_cast<float>(pos[r]) * freq[i];
            const double a = qkv[ia], b = qkv[ib];
            const double cs = std::cos(angle) * c.scale, sn = std::sin(angle) * c.scale;
            want[ia] = a * cs - b * sn;
            want[ib] = b * cs + a * sn;
          }
        }
      }
      EXPECT_LT(RelErr(got, want), 1e-5) << R;
      for (int r = 0; r < T; ++r) {
        for (int h = 0; h < HQ + HKV; ++h) {  // past the rotary dims: as they were
          for (int x = R; x < D; ++x) EXPECT_EQ(got[r * W + h * D + x], qkv[r * W + h * D + x]);
        }
        for (int x = (HQ + HKV) * D; x < W; ++x) EXPECT_EQ(got[r * W + x], qkv[r * W + x]);  // V
      }
      return got;
    });
  }
  // Multimodal rotary: positions of 3 rows (temporal, height, width), each
  // frequency turned by the row its section names. The reference builds the
  // angle table as transformers' Qwen3-VL does (every frequency by the
  // temporal row, then slices [1 : 3h : 3] by the height row and [2 : 3w :
  // 3] by the width row) and Qwen2-VL does (consecutive sections); rows
  // whose three positions are equal turn as plain rotary does, bitwise.
  for (const bool interleaved : {true, false}) {
    RUN_OR_SKIP(device(), MatmulDtype::kF32, KvDtype::kF32, 1e-5, [&](Dev& d) {
      const int half = D / 2;                  // 8 frequencies
      const int sec[3] = {4, 2, 2};
      auto qkv = Random(T * W, 35);
      const std::vector<int32_t> pos3 = {0, 3, 9, 9, 11,    // temporal
                                         0, 4, 10, 9, 11,   // height
                                         0, 6, 12, 9, 11};  // width
      std::vector<float> freq(half);
      for (int i = 0; i < half; ++i) freq[i] = static_cast<float>(1.0 / std::pow(5e5, 2.0 * i / D));
      const Tensor t = d.Up(qkv, T, W);
      RopeParams rp{HQ, HKV, D};
      rp.mrope_t = sec[0];
      rp.mrope_h = sec[1];
      rp.mrope_w = sec[2];
      rp.mrope_interleaved = interleaved;
      EXPECT_TRUE(d->Rope(t, d.UpInts(pos3, 3, T), d.Up(freq, 1, half), rp).ok());
      const std::vector<float> got = d.Down(t);
      std::vector<double> want(qkv.begin(), qkv.end());
      for (int r = 0; r < T; ++r) {
        std::vector<int32_t> which(half, 0);  // the row of positions each frequency reads
        if (interleaved) {
          for (int i = 1; i < 3 * sec[1]; i += 3) which[i] = 1;
          for (int i = 2; i < 3 * sec[2]; i += 3) which[i] = 2;
        } else {
          for (int i = sec[0]; i < sec[0] + sec[1]; ++i) which[i] = 1;
          for (int i = sec[0] + sec[1]; i < half; ++i) which[i] = 2;
        }
        for (int h = 0; h < HQ + HKV; ++h) {
          for (int i = 0; i < half; ++i) {
            const int ia = r * W + h * D + i, ib = ia + half;
            const double angle = static_cast<float>(pos3[which[i] * T + r]) * freq[i];
            const double a = qkv[ia], b = qkv[ib];
            want[ia] = a * std::cos(angle) - b * std::sin(angle);
            want[ib] = b * std::cos(angle) + a * std::sin(angle);
          }
        }
      }
      EXPECT_LT(RelErr(got, want), 1e-5) << interleaved;
      // Rows 3 and 4 (all three positions equal) as plain rotary turns them.
      const Tensor plain = d.Up(qkv, T, W);
      EXPECT_TRUE(d->Rope(plain, d.UpInts(std::vector<int32_t>(pos3.begin(), pos3.begin() + T), 1, T),
                          d.Up(freq, 1, half), {HQ, HKV, D})
                      .ok());
      const std::vector<float> flat = d.Down(plain);
      for (int r = 3; r < T; ++r) {
        for (int x = 0; x < W; ++x) EXPECT_EQ(got[r * W + x], flat[r * W + x]) << r << " " << x;
      }
      // Consecutive sections that do not cover the frequencies are refused,
      // naming them (interleaved ones turn the rest by time).
      rp.mrope_w = 1;
      const absl::Status st = d->Rope(t, d.UpInts(pos3, 3, T), d.Up(freq, 1, half), rp);
      EXPECT_EQ(st.ok(), interleaved) << st;
      if (!interleaved) {
        EXPECT_NE(st.message().find("sections 4, 2, 1 do not add up to the 8"), std::string::npos) << st;
      }
      return got;
    });
  }
  // More rotary dims than the head has is refused, naming both.
  RUN_OR_SKIP(device(), MatmulDtype::kF32, KvDtype::kF32, 0, [&](Dev& d) {
    const std::vector<float> qkv(size_t(W), 1.0f), freq(D, 1.0f);
    const Tensor t = d.Up(qkv, 1, W);
    const absl::Status st = d->Rope(t, d.UpInts({0}, 1, 1), d.Up(freq, 1, D), {HQ, HKV, D});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("of dim 16, 32 of them rotary"), std::string::npos) << st;
    const std::vector<float> two(2, 1.0f);
    const absl::Status zero = d->Rope(t, d.UpInts({0}, 1, 1), d.Up(two, 1, 2), {HQ, HKV, D, RopeStyle::kHalf, 0.0f});
    EXPECT_EQ(zero.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(zero.message().find("scale 0 must be positive"), std::string::npos) << zero;
    return d.Down(t);
  });
}

// Gated MLP activations: silu(gate) * up (SwiGLU), gelu_tanh(gate) * up
// (GeGLU) and gpt-oss's clamped SwiGLU, into f32 and the activation dtype,
// against double (inputs up to 12 in magnitude: the clamps at 7 bite).
TEST_P(OpsTest, Glu) {
  Ran ran;
  for (GluKind kind : {GluKind::kSilu, GluKind::kGeluTanh, GluKind::kSwigluOai}) {
    for (MatmulDtype matmul : {MatmulDtype::kF32, MatmulDtype::kBF16}) {
      ran.Run(device(), matmul, KvDtype::kF32, 1e-2, [kind](Dev& d) {
        const int T = 7, F = 301;
        auto gu = Random(T * 2 * F, 34, 12.0f);
        const DType act = d->activation_dtype();
        const Tensor out = d.New(act, T, F);
        EXPECT_TRUE(d->Glu(d.Up(gu, T, 2 * F), kind, out).ok());
        std::vector<double> want(T * F);
        for (int t = 0; t < T; ++t) {
          for (int f = 0; f < F; ++f) {
            const double g = gu[t * 2 * F + f], u = gu[t * 2 * F + F + f];
            double a = kind == GluKind::kSilu ? g / (1 + std::exp(-g)) : GeluRef(g), v = u;
            if (kind == GluKind::kSwigluOai) {  // transformers' GptOssExperts; inputs past +-7 clamp
              const double gc = std::min(g, 7.0);
              a = gc / (1 + std::exp(-1.702 * gc));
              v = std::clamp(u, -7.0, 7.0) + 1;
            }
            want[t * F + f] = RoundTo(static_cast<float>(a * v), act);
          }
        }
        const std::vector<float> got = d.Down(out);
        EXPECT_LT(RelErr(got, want), act == DType::kF32 ? 1e-6 : 8e-3) << DTypeName(act);
        return got;
      });
    }
  }
  if (ran.none()) GTEST_SKIP() << ran.why();
}

// Logit soft-capping in place: tanh(x / cap) * cap, against double; values
// far past the cap saturate at it. A cap of 0 is refused.
TEST_P(OpsTest, SoftCap) {
  RUN_OR_SKIP(device(), MatmulDtype::kF32, KvDtype::kF32, 1e-6, [](Dev& d) {
    const int R = 3, V = 517;
    auto x = Random(R * V, 35, 200.0f);
    const Tensor t = d.Up(x, R, V);
    EXPECT_TRUE(d->SoftCap(t, 30.0f).ok());
    const std::vector<float> got = d.Down(t);
    std::vector<double> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = std::tanh(double(x[i]) / 30.0) * 30.0;
    EXPECT_LT(RelErr(got, want), 1e-6);
    for (float v : got) EXPECT_LE(std::fabs(v), 30.0f);
    const absl::Status zero = d->SoftCap(t, 0.0f);
    EXPECT_EQ(zero.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(zero.message().find("SoftCap: cap 0"), std::string::npos) << zero;
    return got;
  });
}

// Sigmoid in place, against double; far negative and positive values
// reach 0 and 1 without NaN.
TEST_P(OpsTest, Sigmoid) {
  RUN_OR_SKIP(device(), MatmulDtype::kF32, KvDtype::kF32, 1e-6, [](Dev& d) {
    const int R = 5, C = 37;
    auto x = Random(R * C, 61, 8.0f);
    x[0] = -200.0f;
    x[1] = 200.0f;
    const Tensor t = d.Up(x, R, C);
    EXPECT_TRUE(d->Sigmoid(t).ok());
    const std::vector<float> got = d.Down(t);
    std::vector<double> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = 1.0 / (1.0 + std::exp(-double(x[i])));
    EXPECT_LT(RelErr(got, want), 1e-6);
    EXPECT_EQ(got[0], 0.0f);
    EXPECT_EQ(got[1], 1.0f);
    return got;
  });
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

// Mixture-of-experts routing: the k experts of largest logit (the lower id
// among equals), weighted per scoring, against a double reference.
TEST_P(OpsTest, Scale) {
  RUN_OR_SKIP(device(), MatmulDtype::kF32, KvDtype::kF32, 0, [](Dev& d) {
    const auto x = Random(3 * 11, 71);
    const Tensor t = d.Up(x, 3, 11);
    EXPECT_TRUE(d->Scale(t, 0.22f).ok());
    const std::vector<float> got = d.Down(t);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(got[i], x[i] * 0.22f);
    EXPECT_FALSE(d->Scale(t, INFINITY).ok());
    return got;
  });
}

TEST_P(OpsTest, Route) {
  RUN_OR_SKIP(device(), MatmulDtype::kF32, KvDtype::kF32, 1e-6, [](Dev& d) {
    const int T = 7, E = 8;
    std::vector<float> logits = Random(T * E, 51, 2.0f);
    for (int e = 0; e < E; ++e) logits[3 * E + e] = 0.5f;  // row 3: all equal
    logits[4 * E + 6] = logits[4 * E + 1] = 9.0f;          // row 4: a tie at the top
    std::vector<float> all;
    for (const RouterParams::Scoring scoring : {RouterParams::Scoring::kSoftmaxTopK, RouterParams::Scoring::kTopKSoftmax}) {
      for (const auto& [k, renormalize] : {std::pair{2, false}, std::pair{3, true}, std::pair{E, false}}) {
        RouterParams p;
        p.scoring = scoring;
        p.k = k;
        p.renormalize = renormalize;
        const Tensor ids = d.New(DType::kI32, T, k), weights = d.New(DType::kF32, T, k);
        EXPECT_TRUE(d->Route(d.Up(logits, T, E), p, ids, weights).ok());
        std::vector<int32_t> got_ids(T * k);
        EXPECT_TRUE(d->Download(ids, got_ids.data()).ok());
        const std::vector<float> got = d.Down(weights);
        std::vector<double> want(T * k);
        for (int t = 0; t < T; ++t) {
          std::vector<int> order(E);
          for (int e = 0; e < E; ++e) order[e] = e;
          std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[t * E + a] > logits[t * E + b]; });
          double mx = logits[t * E + order[0]], all_sum = 0, top_sum = 0;
          for (int e = 0; e < E; ++e) all_sum += std::exp(double{logits[t * E + e]} - mx);
          for (int j = 0; j < k; ++j) top_sum += std::exp(double{logits[t * E + order[j]]} - mx);
          for (int j = 0; j < k; ++j) {
            EXPECT_EQ(got_ids[t * k + j], order[j]) << t << " " << j;
            const double v = std::exp(double{logits[t * E + order[j]]} - mx);
            want[t * k + j] = scoring == RouterParams::Scoring::kTopKSoftmax || renormalize ? v / top_sum : v / all_sum;
          }
        }
        EXPECT_LT(RelErr(got, want), 1e-6);
        EXPECT_EQ(got_ids[4 * k], 1);  // the tie: the lower id first
        EXPECT_EQ(got_ids[4 * k + 1], 6);
        all.insert(all.end(), got.begin(), got.end());
      }
    }
    // Per-expert scales (Gemma 4's) multiply the chosen experts' weights
    // last: the same choice, each weight times its expert's scale, bitwise.
    {
      RouterParams p;
      p.k = 3;
      p.renormalize = true;
      const Tensor ids = d.New(DType::kI32, T, 3), weights = d.New(DType::kF32, T, 3);
      EXPECT_TRUE(d->Route(d.Up(logits, T, E), p, ids, weights).ok());
      std::vector<int32_t> plain_ids(T * 3), scaled_ids(T * 3);
      EXPECT_TRUE(d->Download(ids, plain_ids.data()).ok());
      const std::vector<float> plain = d.Down(weights);
      const std::vector<float> scales = Random(E, 52, 1.0f);
      const Tensor scale_t = d.Up(scales, 1, E);
      p.expert_scale = scale_t.as<float>();
      EXPECT_TRUE(d->Route(d.Up(logits, T, E), p, ids, weights).ok());
      EXPECT_TRUE(d->Download(ids, scaled_ids.data()).ok());
      const std::vector<float> scaled = d.Down(weights);
      EXPECT_EQ(scaled_ids, plain_ids);
      for (int i = 0; i < T * 3; ++i) EXPECT_EQ(scaled[i], plain[i] * scales[plain_ids[i]]) << i;
      all.insert(all.end(), scaled.begin(), scaled.end());
    }
    RouterParams too_many;
    too_many.k = E + 1;
    EXPECT_EQ(d->Route(d.Up(logits, T, E), too_many, d.New(DType::kI32, T, E + 1), d.New(DType::kF32, T, E + 1))
                  .code(),
              absl::StatusCode::kInvalidArgument);
    return all;
  });
}

// E experts of random [K -> N] weights (seeds seed, seed + 1, ...) on d's
// backend, with their host values for the references.
struct RandomExperts {
  std::vector<std::vector<float>> w;
  std::vector<std::unique_ptr<Weight>> prepared;
  std::vector<const Weight*> experts;
};
RandomExperts MakeExperts(Dev& d, int E, int K, int N, uint32_t seed) {
  RandomExperts r;
  for (int e = 0; e < E; ++e) {
    r.w.push_back(Random(K * N, seed + e, 0.3f));
    auto weight = d->PrepareWeight(r.w.back().data(), K, N, WeightLayout::kOutIn);
    EXPECT_TRUE(weight.ok()) << weight.status();
    r.prepared.push_back(std::move(*weight));
    r.experts.push_back(r.prepared.back().get());
  }
  return r;
}

// Rows routed to experts (ggml's mul_mat_id): each route's row times its
// expert, from x's rows (one per token, or one per route); each row's
// result is bitwise that of the row alone, whatever the other rows chose;
// and the weighted join of the experts' outputs. K = 64 in bf16 takes
// CUDA's grouping on the device (the mma GEMM's shapes), K = 40 its grouping
// on the host.
TEST_P(OpsTest, LinearByIdAndWeightedRowSum) {
  Ran ran;
  for (MatmulDtype matmul : {MatmulDtype::kF32, MatmulDtype::kBF16}) {
    for (const int K : {40, 64}) {
      ran.Run(device(), matmul, KvDtype::kF32, 1e-5, [matmul, K](Dev& d) {
        const int E = 4, N = 24, T = 9, k = 2;
        const DType wt = ToDType(matmul);
        const RandomExperts made = MakeExperts(d, E, K, N, 60);
        const std::vector<std::vector<float>>& w = made.w;
        const std::vector<const Weight*>& experts = made.experts;
        // Expert 2 gets no rows, expert 0 most.
        const std::vector<int32_t> ids = {0, 1, 3, 0, 0, 3, 1, 0, 0, 1, 3, 0, 0, 3, 1, 3, 0, 1};
        const std::vector<float> x = Random(T * K, 70, 2.0f), per_route = Random(T * k * K, 71, 2.0f);
        const Tensor id_t = d.UpInts(ids, T, k), out = d.New(DType::kF32, T * k, N);
        std::vector<float> all;
        for (const std::vector<float>* in : {&x, &per_route}) {
          const int rows = in == &x ? T : T * k;
          EXPECT_TRUE(d->LinearById(d.Up(*in, rows, K), experts, nullptr, id_t, out).ok());
          const std::vector<float> got = d.Down(out);
          {  // Each expert's bias (gpt-oss): its row joins the routes that chose it.
            const std::vector<float> bias = Random(E * N, 74);
            const Tensor bias_t = d.Up(bias, E, N), biased = d.New(DType::kF32, T * k, N);
            EXPECT_TRUE(d->LinearById(d.Up(*in, rows, K), experts, &bias_t, id_t, biased).ok());
            const std::vector<float> with = d.Down(biased);
            std::vector<double> want(with.size());
            for (int r = 0; r < T * k; ++r) {
              for (int n = 0; n < N; ++n) want[r * N + n] = double{got[r * N + n]} + bias[ids[r] * N + n];
            }
            EXPECT_LT(RelErr(with, want), 1e-6);
          }
          const std::vector<float> xr = RoundedTo(*in, wt);
          std::vector<double> want;
          for (int r = 0; r < T * k; ++r) {
            const int src = in == &x ? r / k : r;
            const std::vector<float> row(xr.begin() + src * K, xr.begin() + (src + 1) * K);
            const auto y = NaiveLinear(row, 1, K, RoundedTo(w[ids[r]], wt), N, nullptr, WeightLayout::kOutIn);
            want.insert(want.end(), y.begin(), y.end());
          }
          EXPECT_LT(RelErr(got, want), 1e-5);
          // Each token alone (its k routes, the other experts' groups gone).
          for (int t = 0; t < T; ++t) {
            const std::vector<int32_t> one_ids(ids.begin() + t * k, ids.begin() + (t + 1) * k);
            const int one_rows = in == &x ? 1 : k;
            const std::vector<float> one(in->begin() + (in == &x ? t : t * k) * K,
                                         in->begin() + (in == &x ? t + 1 : (t + 1) * k) * K);
            const Tensor one_out = d.New(DType::kF32, k, N);
            EXPECT_TRUE(d->LinearById(d.Up(one, one_rows, K), experts, nullptr, d.UpInts(one_ids, 1, k), one_out).ok());
            EXPECT_EQ(d.Down(one_out), std::vector<float>(got.begin() + t * k * N, got.begin() + (t + 1) * k * N)) << t;
          }
          all.insert(all.end(), got.begin(), got.end());
        }
        // The join: out[t] += sum_j weights[t, j] * y[t * k + j].
        const std::vector<float> y = d.Down(out), weights = Random(T * k, 72), base = Random(T * N, 73);
        const Tensor joined = d.Up(base, T, N);
        EXPECT_TRUE(d->WeightedRowSum(out, d.Up(weights, T, k), joined).ok());
        std::vector<double> want(T * N);
        for (int t = 0; t < T; ++t) {
          for (int c = 0; c < N; ++c) {
            double s = 0;
            for (int j = 0; j < k; ++j) s += double{weights[t * k + j]} * y[(t * k + j) * N + c];
            want[t * N + c] = base[t * N + c] + s;
          }
        }
        const std::vector<float> got = d.Down(joined);
        EXPECT_LT(RelErr(got, want), 1e-5);
        all.insert(all.end(), got.begin(), got.end());
        // An expert that is not there is refused where the ids are read on the
        // host; CUDA's grouping on the device gives that route a zero row and
        // every other route its own.
        const bool waits = d->LinearByIdWaits(experts);
        std::vector<int32_t> bad = ids;
        bad[3] = E;
        bad[10] = -1;
        const Tensor bad_out = d.New(DType::kF32, T * k, N);
        const absl::Status refused = d->LinearById(d.Up(x, T, K), experts, nullptr, d.UpInts(bad, T, k), bad_out);
        if (waits || d->name() == "cpu") {
          EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
        } else {
          EXPECT_TRUE(refused.ok()) << refused;
          const std::vector<float> got_bad = d.Down(bad_out);
          const std::vector<float> first(all.begin(), all.begin() + T * k * N);  // x's rows, the good ids
          for (int r = 0; r < T * k; ++r) {
            for (int n = 0; n < N; ++n) {
              EXPECT_EQ(got_bad[r * N + n], r == 3 || r == 10 ? 0.0f : first[r * N + n]) << r << " " << n;
            }
          }
        }
        return all;
      });
    }
  }
  if (ran.none()) GTEST_SKIP() << ran.why();
}

// Many routes per expert: groups that span several of CUDA's device tiles
// (32 routes a tile at 100 routes over 4 experts, 64 at 200), experts 0
// and 1 taking most of them. Each route's row against a float64 product of the
// rounded values, and each token alone gives its rows bitwise.
TEST_P(OpsTest, LinearByIdWithManyRoutesPerExpert) {
  Ran ran;
  for (MatmulDtype matmul : {MatmulDtype::kF32, MatmulDtype::kBF16}) {
    ran.Run(device(), matmul, KvDtype::kF32, 1e-5, [matmul](Dev& d) {
      const int E = 4, K = 64, N = 24, k = 2;
      const DType wt = ToDType(matmul);
      const RandomExperts made = MakeExperts(d, E, K, N, 80);
      const std::vector<std::vector<float>>& w = made.w;
      const std::vector<const Weight*>& experts = made.experts;
      std::vector<float> all;
      for (const int T : {50, 100}) {
        std::vector<int32_t> ids(T * k);
        // Mostly expert 0, then (a row's k being distinct) expert 1.
        for (int r = 0; r < T * k; ++r) ids[r] = r % 5 == 0 ? 1 + r % 3 : 0;
        for (int t = 0; t < T; ++t) {
          if (ids[t * k] == ids[t * k + 1]) ids[t * k + 1] = (ids[t * k] + 1) % E;
        }
        const std::vector<float> x = Random(T * K, 90 + T, 2.0f);
        const Tensor out = d.New(DType::kF32, T * k, N);
        EXPECT_TRUE(d->LinearById(d.Up(x, T, K), experts, nullptr, d.UpInts(ids, T, k), out).ok());
        const std::vector<float> got = d.Down(out);
        const std::vector<float> xr = RoundedTo(x, wt);
        std::vector<double> want;
        for (int r = 0; r < T * k; ++r) {
          const std::vector<float> row(xr.begin() + (r / k) * K, xr.begin() + (r / k + 1) * K);
          const auto y = NaiveLinear(row, 1, K, RoundedTo(w[ids[r]], wt), N, nullptr, WeightLayout::kOutIn);
          want.insert(want.end(), y.begin(), y.end());
        }
        EXPECT_LT(RelErr(got, want), 1e-5) << "T " << T;
        for (int t = 0; t < T; t += 7) {
          const std::vector<float> one(x.begin() + t * K, x.begin() + (t + 1) * K);
          const std::vector<int32_t> one_ids(ids.begin() + t * k, ids.begin() + (t + 1) * k);
          const Tensor one_out = d.New(DType::kF32, k, N);
          EXPECT_TRUE(d->LinearById(d.Up(one, 1, K), experts, nullptr, d.UpInts(one_ids, 1, k), one_out).ok());
          EXPECT_EQ(d.Down(one_out), std::vector<float>(got.begin() + t * k * N, got.begin() + (t + 1) * k * N))
              << "T " << T << " token " << t;
        }
        all.insert(all.end(), got.begin(), got.end());
      }
      return all;
    });
  }
  if (ran.none()) GTEST_SKIP() << ran.why();
}

// Rows x layout x dtype. 33, 101 and 201 rows are not CPU row buckets: they
// run padded there. With bf16/f16 the reference takes the inputs and weights
// rounded to that type, so the only error left is float32 summation.
class LinearTest
    : public ::testing::TestWithParam<std::tuple<const char*, int, WeightLayout, MatmulDtype>> {};

TEST_P(LinearTest, EveryEpilogueMatchesNaive) {
  const auto [device, M, layout, dtype] = GetParam();
  RUN_OR_SKIP(device, dtype, KvDtype::kF32, 1e-5, [&, M = M, layout = layout, dtype = dtype](Dev& d) {
    std::vector<float> all;  // every output of both shapes, for the comparison with the CPU
    // K = 45: cuBLASLt's or the fallback GEMM on CUDA; K = 320 (whole
    // chunks of 32, two segments of K, the second short): the tensor-core
    // GEMM where FLOVER_CUDA_GEMM=mma.
    for (const auto& [K, N] : {std::pair<int, int>{45, 67}, std::pair<int, int>{320, 67}}) {
      auto x = Random(M * K, 6, 2.0f), w = Random(K * N, 7), b = Random(N, 8);
      auto weight = d->PrepareWeight(w.data(), K, N, layout);
      EXPECT_TRUE(weight.ok()) << weight.status();
      EXPECT_EQ((*weight)->k(), K);
      EXPECT_EQ((*weight)->n(), N);
      const DType wt = ToDType(dtype), act = d->activation_dtype();
      const std::vector<float> xr = RoundedTo(x, wt), wr = RoundedTo(w, wt);
      const auto want = NaiveLinear(xr, M, K, wr, N, b.data(), layout);
      const Tensor xt = d.Up(x, M, K), bt = d.Up(b, 1, N), out = d.New(DType::kF32, M, N);

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

      for (int which = 0; which < 2; ++which) {
        const DType gelu_out = which == 0 ? DType::kF32 : act;
        const Tensor g = d.New(gelu_out, M, N);
        EXPECT_TRUE(d->Linear(xt, **weight, &bt, Epilogue::kBiasGelu, g).ok());
        std::vector<double> gelu = want;
        for (double& v : gelu) v = RoundTo(GeluRef(v), gelu_out);
        got = d.Down(g);
        EXPECT_LT(RelErr(got, gelu), gelu_out == DType::kF32 ? 1e-5 : 8e-3) << DTypeName(gelu_out);
        // Compared with the CPU: the f32 output only (the CPU keeps activations
        // in f32, so its second pass is the first again).
        if (which == 0) all.insert(all.end(), got.begin(), got.end());
      }

      const std::vector<float> residual = Random(M * N, 9);
      const Tensor acc = d.Up(residual, M, N);
      EXPECT_TRUE(d->Linear(xt, **weight, &bt, Epilogue::kBiasResidual, acc).ok());
      std::vector<double> summed = want;
      for (int i = 0; i < M * N; ++i) summed[i] += residual[i];
      got = d.Down(acc);
      EXPECT_LT(RelErr(got, summed), 1e-5);
      all.insert(all.end(), got.begin(), got.end());
    }
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

// --dtype=native: GGUF blocks as stored, eight formats stacked in one weight
// (as llama.cpp's Q4_K_M stacks Q/K/V), against ggml's dequantized values
// times the input. CUDA dequantizes in registers and takes f32 inputs: float
// sums of the dequantized products. The CPU quantizes its inputs per 32
// values (per 256 for the K-quants): within that rounding's bound (as
// block_linear_test). A row alone
// and in a batch gives the same bits; the epilogues apply per element.
class BlockLinearOpsTest : public ::testing::TestWithParam<const char*> {};

TEST_P(BlockLinearOpsTest, StackedFormatsMatchTheDequantizedWeights) {
  const std::string device = GetParam();
  std::string skip;
  auto d = MakeDev(device, MatmulDtype::kNative, KvDtype::kF32, &skip);
  if (d == nullptr) GTEST_SKIP() << device << ": " << skip;
  const int K = 512, M = 9;
  const BlockSpan spans[] = {{BlockFormat::kQ8_0, 5}, {BlockFormat::kQ4_0, 3}, {BlockFormat::kQ4_1, 6},
                             {BlockFormat::kQ4_K, 7}, {BlockFormat::kQ6_K, 4}, {BlockFormat::kQ5_0, 2},
                             {BlockFormat::kQ5_1, 5}, {BlockFormat::kQ5_K, 3}, {BlockFormat::kMXFP4, 4}};
  std::vector<uint8_t> bytes;
  std::vector<float> w;
  std::vector<int> scale_values;  // per output: the CPU's input values per scale
  int N = 0;
  const int num_spans = static_cast<int>(std::size(spans));
  for (int i = 0; i < num_spans; ++i) {
    const BlockFormat f = spans[i].format;
    const bool k_quant = f == BlockFormat::kQ4_K || f == BlockFormat::kQ5_K || f == BlockFormat::kQ6_K;
    scale_values.insert(scale_values.end(), spans[i].rows, k_quant ? 256 : 32);
    const std::vector<uint8_t> rows = ::flover::testing::RandomBlockRows(spans[i].format, spans[i].rows, K, 40 + i);
    const std::vector<float> values = ::flover::testing::DequantizeBlockRows(spans[i].format, rows.data(), spans[i].rows, K);
    bytes.insert(bytes.end(), rows.begin(), rows.end());
    w.insert(w.end(), values.begin(), values.end());
    N += spans[i].rows;
  }
  auto weight = (*d)->PrepareWeight(HostValues(bytes.data(), spans, num_spans), K, N, WeightLayout::kOutIn);
  ASSERT_TRUE(weight.ok()) << weight.status();
  ASSERT_TRUE((*d)->PrepareLinear(**weight, M, true, Epilogue::kBiasGelu).ok());
  const std::vector<float> x = Random(M * K, 45), b = Random(N, 46);
  const Tensor xt = d->Up(x, M, K), bt = d->Up(b, 1, N), out = d->New(DType::kF32, M, N);
  ASSERT_TRUE((*d)->Linear(xt, **weight, &bt, Epilogue::kBias, out).ok());
  const std::vector<float> got = d->Down(out);
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double exact = 0, magnitude = 0, rounding = 0;
      const int step = scale_values[n];  // the CPU quantizes inputs per 32 values, per 256 for K-quants
      for (int k0 = 0; k0 < K; k0 += step) {
        float amax = 0;
        for (int k = k0; k < k0 + step; ++k) amax = std::max(amax, std::fabs(x[m * K + k]));
        for (int k = k0; k < k0 + step; ++k) {
          const double wk = w[size_t(n) * K + k];
          exact += wk * x[m * K + k];
          magnitude += std::fabs(wk * x[m * K + k]);
          rounding += std::fabs(wk) * amax / 127 / 2;
        }
      }
      const double sums = 4e-6 * (magnitude + 2 * rounding) + 1e-6;
      EXPECT_NEAR(got[m * N + n] - b[n], exact, device == "cpu" ? rounding + sums : sums)
          << device << " m=" << m << " n=" << n;
    }
  }
  for (int m = 0; m < M; ++m) {  // each row alone: the same bits
    const std::vector<float> row(x.begin() + m * K, x.begin() + (m + 1) * K);
    const Tensor one = d->New(DType::kF32, 1, N);
    ASSERT_TRUE((*d)->Linear(d->Up(row, 1, K), **weight, &bt, Epilogue::kBias, one).ok());
    const std::vector<float> alone = d->Down(one);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), got.begin() + m * N)) << device << " row " << m;
  }
  const Tensor acc = d->Up(got, M, N), gelu = d->New(DType::kF32, M, N);
  ASSERT_TRUE((*d)->Linear(xt, **weight, &bt, Epilogue::kBiasResidual, acc).ok());
  ASSERT_TRUE((*d)->Linear(xt, **weight, &bt, Epilogue::kBiasGelu, gelu).ok());
  const std::vector<float> twice = d->Down(acc), g = d->Down(gelu);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(twice[i], got[i] + got[i]) << device << " " << i;
    EXPECT_NEAR(g[i], GeluRef(got[i]), 1e-5 * (1 + std::fabs(got[i]))) << device << " " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, BlockLinearOpsTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return std::string(info.param); });

// EmbedBlocks looks up rows of blocks as ggml's get_rows does: each format's
// row dequantized (ggml's reference, kernels/ggml_dequant), times the scale
// (rounded), plus the position's row (rounded); zero outside the rank's
// vocabulary range. Bitwise on the CPU; on CUDA the dequantization may fuse
// a multiply-add, so within a few ulps.
TEST_P(BlockLinearOpsTest, EmbedBlocksLooksUpDequantizedRows) {
  const std::string device = GetParam();
  std::string skip;
  auto d = MakeDev(device, MatmulDtype::kNative, KvDtype::kF32, &skip);
  if (d == nullptr) GTEST_SKIP() << device << ": " << skip;
  const int C = 512, rows = 6, P = 4, vocab_begin = 10, T = 5;
  const std::vector<int32_t> tokens = {15, 10, 9, 13, 16}, positions = {3, 0, 1, 2, 3};
  const std::vector<float> wpe = Random(P * C, 60);
  for (BlockFormat f : kAllBlockFormats) {
    const std::vector<uint8_t> bytes = ::flover::testing::RandomBlockRows(f, rows, C, 61);
    const std::vector<float> values = ::flover::testing::DequantizeBlockRows(f, bytes.data(), rows, C);
    auto table = (*d)->PrepareBlockRows(f, bytes.data(), rows, C);
    ASSERT_TRUE(table.ok()) << table.status();
    ASSERT_EQ((*table)->rows(), rows);
    for (const float scale : {1.0f, 33.9411255f}) {  // Gemma's sqrt(1152)
      for (const bool with_wpe : {false, true}) {
        const Tensor wpe_t = d->Up(wpe, P, C), out = d->New(DType::kF32, T, C);
        ASSERT_TRUE((*d)->EmbedBlocks(d->UpInts(tokens, 1, T), d->UpInts(positions, 1, T), **table,
                                      vocab_begin, scale, with_wpe ? &wpe_t : nullptr, out)
                        .ok());
        const std::vector<float> got = d->Down(out);
        for (int t = 0; t < T; ++t) {
          const int local = tokens[t] - vocab_begin;
          for (int c = 0; c < C; ++c) {
            float want = local >= 0 && local < rows ? values[size_t(local) * C + c] : 0.0f;
            if (scale != 1.0f) want = RoundedProduct(want, scale);
            if (with_wpe) want = RoundedSum(want, wpe[positions[t] * C + c]);
            const float g = got[t * C + c];
            if (device == "cpu") {
              ASSERT_EQ(g, want) << InfoOf(f).name << " t=" << t << " c=" << c;
            } else {
              ASSERT_NEAR(g, want, 4e-7 * (std::fabs(want) + 1)) << InfoOf(f).name << " t=" << t << " c=" << c;
            }
          }
        }
      }
    }
  }
  // Refused by name: rows that are not whole blocks, a C that is not the table's.
  EXPECT_EQ((*d)->PrepareBlockRows(BlockFormat::kQ4_K, std::vector<uint8_t>(1000).data(), 2, 100).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto table = (*d)->PrepareBlockRows(BlockFormat::kQ8_0, ::flover::testing::RandomBlockRows(BlockFormat::kQ8_0, 2, 64, 62).data(), 2, 64);
  ASSERT_TRUE(table.ok());
  const absl::Status wrong = (*d)->EmbedBlocks(d->UpInts({0}, 1, 1), d->UpInts({0}, 1, 1), **table, 0, 1.0f,
                                               nullptr, d->New(DType::kF32, 1, 32));
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.message().find("EmbedBlocks"), std::string::npos) << wrong;
}

// Weights handed over in the dtype a checkpoint stores them in (bf16 or f16
// bits) prepare to the same weight as their float32 values: every Linear
// output bitwise equal, for every matmul dtype and layout. (The CPU's
// oneDNN reorder takes bf16 values as they are for f32 and bf16 matmuls;
// f16 values, and int8's, are widened first; CUDA widens on the host.)
// Another dtype is refused, naming it.
class StoredWeightTest : public ::testing::TestWithParam<std::tuple<const char*, MatmulDtype>> {};

TEST_P(StoredWeightTest, StoredDtypePreparesAsItsFloatValues) {
  const auto [device, dtype] = GetParam();
  std::string skip;
  auto d = MakeDev(device, dtype, KvDtype::kF32, &skip);
  if (d == nullptr) GTEST_SKIP() << device << ": " << skip;
  const int K = 96, N = 130;
  const std::vector<float> b = Random(N, 31);
  const Tensor bt = d->Up(b, 1, N);
  for (DType stored : {DType::kBF16, DType::kF16}) {
    // Values the stored dtype holds exactly, as its bits and as floats
    // (widened by the harness's own conversions).
    const std::vector<float> w = RoundedTo(Random(K * N, 32, 0.3f), stored);
    std::vector<uint16_t> bits(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      bits[i] = stored == DType::kBF16 ? ToBf16(w[i]) : testing::HalfBits(w[i]);
      const float back =
          stored == DType::kBF16 ? Bf16ToFloat(bits[i]) : testing::HalfToFloat(bits[i]);
      ASSERT_EQ(back, w[i]) << "test data not exact in " << DTypeName(stored);
    }
    for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
      auto from_bits = (*d)->PrepareWeight(HostValues(bits.data(), stored), K, N, layout);
      auto from_floats = (*d)->PrepareWeight(w.data(), K, N, layout);
      ASSERT_TRUE(from_bits.ok()) << from_bits.status();
      ASSERT_TRUE(from_floats.ok()) << from_floats.status();
      for (int M : {1, 3, 33}) {
        const Tensor x = d->Up(Random(M * K, 33 + M, 2.0f), M, K);
        for (Epilogue e : {Epilogue::kBias, Epilogue::kBiasGelu}) {
          const Tensor a = d->New(DType::kF32, M, N), c = d->New(DType::kF32, M, N);
          ASSERT_TRUE((*d)->Linear(x, **from_bits, &bt, e, a).ok());
          ASSERT_TRUE((*d)->Linear(x, **from_floats, &bt, e, c).ok());
          EXPECT_EQ(d->Down(a), d->Down(c))
              << device << " " << MatmulDtypeName(dtype) << " from " << DTypeName(stored)
              << " M=" << M << (layout == WeightLayout::kInOut ? " inout" : " outin");
        }
      }
    }
  }
  const std::vector<int32_t> ints(K * N, 1);
  auto refused = (*d)->PrepareWeight(HostValues(ints.data(), DType::kI32), K, N,
                                     WeightLayout::kInOut);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("i32"), std::string::npos) << refused.status();
}

INSTANTIATE_TEST_SUITE_P(
    DevicesDtypes, StoredWeightTest,
    ::testing::Combine(::testing::Values("cpu", "cuda"),
                       ::testing::Values(MatmulDtype::kF32, MatmulDtype::kBF16, MatmulDtype::kF16,
                                         MatmulDtype::kInt8)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param)) + "_" + MatmulDtypeName(std::get<1>(info.param));
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

INSTANTIATE_TEST_SUITE_P(Devices, OpsTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace flover::kernels
