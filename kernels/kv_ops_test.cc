// The KV-cache ops of the backend contract (attention over a ragged batch,
// slot moves) on every backend present, against naive references, the CPU
// backend's results, and themselves (batch invariance, bitwise).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/testing/numerics.h"
#include "kernels/testing/op_harness.h"

namespace flover::kernels {
namespace {

using ::flover::testing::GeluRef;
using ::flover::testing::Random;
using ::flover::testing::RelErr;
using testing::Dev;
using testing::MakeDev;
using testing::Ran;
using testing::RoundedTo;
using testing::RoundTo;

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
// rows each: a decode row, a fresh prompt and continued chunks; with and
// without grouped-query attention. With a bf16
// cache the reference reads the stored (rounded) keys and values. The
// output goes to f32 and (CUDA bf16) to the activation dtype.
TEST_P(KvOpsTest, AttentionOverRaggedBatch) {
  const KvDtype kvd = kv_dtype();
  Ran ran;
  // GPT-2's head dim, one that is not a multiple of a warp (the fixtures'
  // heads are 4 to 16 wide), and grouped-query attention (2 query heads per
  // key/value head, as Llama's).
  struct Case {
    MatmulDtype matmul;
    int D, group;
  };
  for (const Case c : {Case{MatmulDtype::kF32, 64, 1}, Case{MatmulDtype::kBF16, 64, 1},
                       Case{MatmulDtype::kF32, 12, 1}, Case{MatmulDtype::kF32, 32, 2}}) {
    ran.Run(device(), c.matmul, kvd, 1e-2, [&, D = c.D, group = c.group](Dev& d) {
      const int H = 3, HQ = H * group, S = 5, L = 80, HD = H * D, QD = HQ * D;
      const int W = QD + 2 * HD;  // a row of qkv: [Q | K | V]
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
      auto qkv = Random(T * W, 17);
      const DType act = d->activation_dtype();
      const Tensor out = d.New(act, T, QD);
      EXPECT_TRUE(d->Attention(d.Up(qkv, T, W), d.Seqs(seqs, T), kv, out).ok());
      const std::vector<float> got = d.Down(out);
      const std::vector<float> k_after = d.Down(kt), v_after = d.Down(vt);

      std::vector<double> want(T * QD);
      for (const SeqRows& s : seqs) {
        for (int qh = 0; qh < HQ; ++qh) {
          const int h = qh / group;  // its key/value head
          // The key/value history: old cache content before pos, the new
          // rows (as stored) after.
          auto key = [&](int p, int dd) -> double {
            if (p < s.pos) return k_before.values[K(s.slot, h, dd, p)];
            return k_before.Stored(qkv[(s.row + p - s.pos) * W + QD + h * D + dd]);
          };
          auto value = [&](int p, int dd) -> double {
            if (p < s.pos) return v_before.values[Vi(s.slot, h, dd, p)];
            return v_before.Stored(qkv[(s.row + p - s.pos) * W + QD + HD + h * D + dd]);
          };
          for (int i = 0; i < s.len; ++i) {
            const int r = s.row + i, n = s.pos + i + 1;
            std::vector<double> w(n);
            double mx = -1e300, sum = 0;
            for (int p = 0; p < n; ++p) {
              double dot = 0;
              for (int dd = 0; dd < D; ++dd) dot += qkv[r * W + qh * D + dd] * key(p, dd);
              w[p] = dot / std::sqrt(static_cast<double>(D));
              mx = std::max(mx, w[p]);
            }
            for (double& x : w) sum += (x = std::exp(x - mx));
            for (int dd = 0; dd < D; ++dd) {
              double acc = 0;
              for (int p = 0; p < n; ++p) acc += w[p] / sum * value(p, dd);
              want[r * QD + qh * D + dd] = RoundTo(static_cast<float>(acc), act);
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

}  // namespace
}  // namespace flover::kernels
