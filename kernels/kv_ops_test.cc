// The KV-cache ops of the backend contract (appending K/V and attention over
// a ragged batch, each sequence's positions in its own list of blocks; plain,
// windowed, scaled and soft-capped) on every backend
// present, against naive references, the CPU backend's results, and itself
// (batch, chunk and block-placement invariance, bitwise).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/ggml_quant.h"
#include "kernels/cpu/vec_math.h"
#include "testing/numerics.h"
#include "testing/op_harness.h"

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

// OCP e4m3 (bias 7, no infinities, S.1111.111 NaN) as float, from the
// definition.
float E4m3ToFloat(uint8_t b) {
  const int exp = (b >> 3) & 15, mant = b & 7;
  const float v = exp == 0 ? std::ldexp(mant / 8.0f, -6) : std::ldexp(1.0f + mant / 8.0f, exp - 7);
  return (b & 0x80) ? -v : v;
}

// The e4m3 nearest x (ties to the even code; past 448 the largest), found
// by trying every finite code.
uint8_t E4m3Of(float x) {
  int best = 0;
  double best_err = INFINITY;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN
    const double err = std::abs(double{E4m3ToFloat(static_cast<uint8_t>(c))} - x);
    if (err < best_err || (err == best_err && (c & 1) == 0 && (best & 1) == 1)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

// A key or value as a head block of `dtype` holds it (kv_layer.h's
// layouts, read here from their description): dim d of position j.
float Decode(const uint8_t* block, KvDtype dtype, bool key, int D, int d, int j) {
  constexpr int kJ = KvLayer::kBlockSize;
  float f = 0;
  switch (dtype) {
    case KvDtype::kF32:
      std::memcpy(&f, block + 4 * (key ? d * kJ + j : j * D + d), 4);
      return f;
    case KvDtype::kBF16: {
      uint16_t b;
      std::memcpy(&b, block + 2 * (key ? d * kJ + j : j * D + d), 2);
      return Bf16ToFloat(b);
    }
    case KvDtype::kFp8:
      return E4m3ToFloat(block[key ? d * kJ + j : j * D + d]);
    default: break;
  }
  const bool q8 = dtype == KvDtype::kQ8_0;
  const uint8_t* scales = block + (q8 ? D * kJ : D * kJ / 2);
  const int g = d / 32, i = d % 32;
  uint16_t scale;
  std::memcpy(&scale, scales + 2 * (key ? g * kJ + j : j * (D / 32) + g), 2);
  int code;
  if (q8) {
    code = static_cast<int8_t>(block[key ? d * kJ + j : j * D + d]);
  } else {
    const uint8_t byte = key ? block[(g * 16 + i % 16) * kJ + j] : block[(j * D + g * 32) / 2 + i % 16];
    code = (i < 16 ? byte & 15 : byte >> 4) - 8;
  }
  return testing::HalfToFloat(scale) * static_cast<float>(code);
}

// A row of D values as `dtype` stores it: bf16 rounded, q8_0 / q4_0 each
// group of 32 quantized as ggml does (kernels/ggml_quant, checked against
// gguf-py) and scaled back.
std::vector<float> StoredRow(KvDtype dtype, const float* x, int D) {
  std::vector<float> out(x, x + D);
  if (dtype == KvDtype::kBF16) {
    for (float& v : out) v = Bf16ToFloat(ToBf16(v));
  } else if (dtype == KvDtype::kFp8) {
    for (float& v : out) v = E4m3ToFloat(E4m3Of(v));
  } else if (KvDtypeQuantized(dtype)) {
    for (int g0 = 0; g0 < D; g0 += 32) {
      uint16_t scale;
      int codes[32];
      if (dtype == KvDtype::kQ8_0) {
        int8_t c[32];
        QuantizeQ8_0Group(x + g0, c, &scale);
        for (int i = 0; i < 32; ++i) codes[i] = c[i];
      } else {
        uint8_t c[16];
        QuantizeQ4_0Group(x + g0, c, &scale);
        for (int i = 0; i < 16; ++i) {
          codes[i] = (c[i] & 15) - 8;
          codes[16 + i] = (c[i] >> 4) - 8;
        }
      }
      for (int i = 0; i < 32; ++i) out[g0 + i] = testing::HalfToFloat(scale) * static_cast<float>(codes[i]);
    }
  }
  return out;
}

// A layer's k (or v) in one KV dtype: host bytes of content a cache could
// hold (random values, or random codes with small scales), uploaded to the
// backend and read back value by value.
struct Arena {
  Arena(const KvLayer& kv, bool key, uint32_t seed)
      : dtype(key ? kv.format.k : kv.format.v), key(key), D(kv.head_dim),
        bytes(key ? kv.key_bytes() : kv.value_bytes()) {
    const int64_t per_block = KvHeadBlockBytes(dtype, D);
    if (!KvDtypeQuantized(dtype)) {
      const int size = dtype == KvDtype::kBF16 ? 2 : dtype == KvDtype::kFp8 ? 1 : 4;
      const std::vector<float> v = Random(bytes.size() / size, seed);
      for (size_t i = 0; i < v.size(); ++i) {
        if (dtype == KvDtype::kFp8) {
          bytes[i] = E4m3Of(v[i]);
        } else if (dtype == KvDtype::kBF16) {
          const uint16_t b = ToBf16(v[i]);
          std::memcpy(&bytes[2 * i], &b, 2);
        } else {
          std::memcpy(&bytes[4 * i], &v[i], 4);
        }
      }
      return;
    }
    const std::vector<float> codes = Random(bytes.size(), seed, 127.0f);
    const std::vector<float> scales = Random(bytes.size(), seed + 1, 0.01f);
    const int64_t code_bytes = int64_t{D} * KvLayer::kBlockSize / (dtype == KvDtype::kQ8_0 ? 1 : 2);
    for (size_t at = 0; at < bytes.size(); at += per_block) {
      for (int64_t i = 0; i < per_block; ++i) {
        if (i < code_bytes) {
          bytes[at + i] = static_cast<uint8_t>(static_cast<int>(codes[at + i]) & 0xff);
        } else if ((i - code_bytes) % 2 == 0) {
          const uint16_t h = testing::HalfBits(testing::RoundTo(std::abs(scales[at + i]) + 1e-3f, DType::kF16));
          std::memcpy(&bytes[at + i], &h, 2);
        }
      }
    }
  }
  Tensor Upload(Dev& d) const {
    const Tensor t = d.New(DType::kF32, 1, static_cast<int64_t>(bytes.size() / 4));
    EXPECT_TRUE(d->Upload(bytes.data(), t).ok());
    return t;
  }
  // Dim dd of head h at position p of a sequence with these blocks, as
  // `content` (these bytes, or another copy of the layer's) holds it.
  float At(const KvLayer& kv, const std::vector<uint8_t>& content, const std::vector<int32_t>& blocks, int h,
           int dd, int p) const {
    const int32_t block = blocks[p / KvLayer::kBlockSize];
    const int64_t at = key ? kv.key_block(block, h) : kv.value_block(block, h);
    return Decode(content.data() + at, dtype, key, D, dd, p % KvLayer::kBlockSize);
  }
  float At(const KvLayer& kv, const std::vector<int32_t>& blocks, int h, int dd, int p) const {
    return At(kv, bytes, blocks, h, dd, p);
  }
  std::vector<uint8_t> Down(Dev& d, const Tensor& t) const {
    std::vector<uint8_t> out(bytes.size());
    EXPECT_TRUE(d->Download(t, out.data()).ok());
    return out;
  }

  KvDtype dtype;
  bool key;
  int D;
  std::vector<uint8_t> bytes;
};

class KvOpsTest : public ::testing::TestWithParam<std::tuple<const char*, KvFormat>> {
 protected:
  std::string device() const { return std::get<0>(GetParam()); }
  KvFormat kv_format() const { return std::get<1>(GetParam()); }
  bool quantized() const { return KvDtypeQuantized(kv_format().k) || KvDtypeQuantized(kv_format().v); }
};

// Four sequences with scattered blocks, at different positions, with 1 to
// 45 rows each: a decode row, a fresh prompt and continued chunks; two of
// them share their first block (a cached prefix both only read); with and
// without grouped-query attention. The reference reads the keys and values
// as stored (bf16: rounded; q8_0 / q4_0: quantized as ggml does, decoded
// from the documented layout). The output goes to f32 and (CUDA bf16) to
// the activation dtype. Quantized formats run the cases whose head dims
// are multiples of 32.
TEST_P(KvOpsTest, AttentionOverRaggedBatch) {
  const KvFormat kvf = kv_format();
  Ran ran;
  // GPT-2's head dim, one that is not a multiple of a warp (the fixtures'
  // heads are 4 to 16 wide), grouped-query attention (2 query heads per
  // key/value head, as Llama's), Qwen3's and Llama 3's head dim of 128, and
  // Gemma 4's global layers' 512.
  // Then the parameters families differ in: a sliding window shorter than
  // some contexts (Mistral), a scale other than 1/sqrt(D) with soft-capped
  // scores (Gemma 2), and both; then attention sinks (gpt-oss: a logit per
  // query head in the softmax's denominator) with a window. Then rows that
  // see past their own position (SeqTable::horizon: Gemma 3's image rows
  // attend to the whole image), with and without a window.
  struct Case {
    MatmulDtype matmul;
    int D, group;
    AttentionParams params;
    bool sinks = false;
    bool horizons = false;
  };
  const AttentionParams plain, window{0, 0, 9}, capped{0.3f, 1.5f, 0}, both{0.2f, 2.0f, 33};
  for (const Case c : {Case{MatmulDtype::kF32, 64, 1, plain}, Case{MatmulDtype::kBF16, 64, 1, plain},
                       Case{MatmulDtype::kF32, 12, 1, plain}, Case{MatmulDtype::kF32, 32, 2, plain},
                       Case{MatmulDtype::kF32, 64, 2, window}, Case{MatmulDtype::kF32, 12, 1, capped},
                       Case{MatmulDtype::kBF16, 64, 1, both}, Case{MatmulDtype::kF32, 128, 2, plain},
                       Case{MatmulDtype::kBF16, 128, 2, window}, Case{MatmulDtype::kBF16, 512, 2, plain},
                       Case{MatmulDtype::kF32, 64, 2, window, true},
                       Case{MatmulDtype::kBF16, 32, 1, plain, true}, Case{MatmulDtype::kF32, 64, 2, plain, false, true},
                       Case{MatmulDtype::kBF16, 32, 2, window, false, true}}) {
    if (c.D % 32 != 0 && quantized()) continue;
    ran.Run(device(), c.matmul, kvf, 1e-2, [&, D = c.D, group = c.group, with_sinks = c.sinks](Dev& d) {
      SCOPED_TRACE(::testing::Message() << "D " << D << " group " << group << " window " << c.params.window
                                        << (c.horizons ? " horizons" : ""));
      AttentionParams params = c.params;
      const int H = 3, HQ = H * group, N = 12, HD = H * D, QD = HQ * D;
      const int W = QD + 2 * HD;  // a row of qkv: [Q | K | V]
      KvLayer kv{nullptr, nullptr, N, H, D, kvf};
      const Arena k_before(kv, true, 15), v_before(kv, false, 16);
      const Tensor kt = k_before.Upload(d), vt = v_before.Upload(d);
      kv.k = kt.data;
      kv.v = vt.data;
      // Block lists out of order; block 6 is shared (positions 0-31 of the
      // second and fourth sequences, which both start past it); blocks 2 and
      // 11 belong to nobody.
      const std::vector<std::vector<int32_t>> lists = {{9}, {7}, {6, 0}, {6, 3, 10, 1}};
      const std::vector<SeqRows> shapes = {{0, /*pos=*/11, /*len=*/1, /*row=*/0},
                                           {0, /*pos=*/0, /*len=*/20, /*row=*/1},
                                           {0, /*pos=*/37, /*len=*/7, /*row=*/21},
                                           {0, /*pos=*/32, /*len=*/45, /*row=*/28}};
      std::vector<SeqRows> seqs;
      std::vector<int32_t> table;
      for (size_t i = 0; i < shapes.size(); ++i) {
        SeqRows s = shapes[i];
        s.blocks = static_cast<int32_t>(table.size());
        table.insert(table.end(), lists[i].begin(), lists[i].end());
        seqs.push_back(s);
      }
      const int T = 73;
      auto qkv = Random(T * W, 17);
      // Sinks of either sign, some above every score of a row.
      const std::vector<float> sinks = Random(HQ, 18, 4.0f);
      const Tensor sinks_t = d.Up(sinks, 1, HQ);
      if (with_sinks) params.sinks = sinks_t.as<float>();
      const DType act = d->activation_dtype();
      const Tensor out = d.New(act, T, QD);
      const Tensor qkv_t = d.Up(qkv, T, W);
      SeqTable seq_table = d.Seqs(seqs, T, table);
      // Horizons: the second sequence's rows 5..12 see up to its row 12, and
      // the fourth's rows at positions 40..60 up to 60 and its last 9 rows
      // to its last (a span that ends the chunk); the others their own.
      std::vector<int32_t> horizon(T);
      for (const SeqRows& s : seqs) {
        for (int i = 0; i < s.len; ++i) horizon[s.row + i] = s.pos + i;
      }
      if (c.horizons) {
        for (int i = 5; i <= 12; ++i) horizon[seqs[1].row + i] = 12;
        for (int p = 40; p <= 60; ++p) horizon[seqs[3].row + p - seqs[3].pos] = 60;
        for (int i = seqs[3].len - 9; i < seqs[3].len; ++i) horizon[seqs[3].row + i] = seqs[3].pos + seqs[3].len - 1;
        seq_table.horizon = horizon.data();
        seq_table.horizon_device = d.UpInts(horizon, 1, T);
      }
      EXPECT_TRUE(d->AppendKv(qkv_t, seq_table, kv).ok());
      EXPECT_TRUE(d->Attention(qkv_t, seq_table, kv, params, out).ok());
      const std::vector<float> got = d.Down(out);
      const std::vector<uint8_t> k_after = k_before.Down(d, kt), v_after = v_before.Down(d, vt);

      std::vector<double> want(T * QD);
      // Positions each (block, head) had written.
      std::vector<bool> written(size_t(N) * H * KvLayer::kBlockSize, false);
      // The new rows' K and V as stored.
      std::vector<std::vector<float>> k_new(T * H), v_new(T * H);
      for (int t = 0; t < T; ++t) {
        for (int h = 0; h < H; ++h) {
          k_new[t * H + h] = StoredRow(kvf.k, &qkv[t * W + QD + h * D], D);
          v_new[t * H + h] = StoredRow(kvf.v, &qkv[t * W + QD + HD + h * D], D);
        }
      }
      for (size_t si = 0; si < seqs.size(); ++si) {
        const SeqRows& s = seqs[si];
        const std::vector<int32_t>& blocks = lists[si];
        for (int qh = 0; qh < HQ; ++qh) {
          const int h = qh / group;  // its key/value head
          // The key/value history: old cache content before pos, the new
          // rows (as stored) after.
          auto key = [&](int p, int dd) -> double {
            if (p < s.pos) return k_before.At(kv, blocks, h, dd, p);
            return k_new[(s.row + p - s.pos) * H + h][dd];
          };
          auto value = [&](int p, int dd) -> double {
            if (p < s.pos) return v_before.At(kv, blocks, h, dd, p);
            return v_new[(s.row + p - s.pos) * H + h][dd];
          };
          for (int i = 0; i < s.len; ++i) {
            const int r = s.row + i, own = s.pos + i + 1, n = horizon[r] + 1;
            const int first = params.window > 0 ? std::max(0, own - params.window) : 0;
            const double scale = params.scale > 0 ? params.scale : 1 / std::sqrt(double(D));
            std::vector<double> w(n, 0.0);
            double mx = with_sinks ? sinks[qh] : -1e300, sum = 0;
            for (int p = first; p < n; ++p) {
              double dot = 0;
              for (int dd = 0; dd < D; ++dd) dot += qkv[r * W + qh * D + dd] * key(p, dd);
              w[p] = dot * scale;
              if (params.softcap > 0) w[p] = params.softcap * std::tanh(w[p] / params.softcap);
              mx = std::max(mx, w[p]);
            }
            for (int p = first; p < n; ++p) sum += (w[p] = std::exp(w[p] - mx));
            if (with_sinks) sum += std::exp(sinks[qh] - mx);
            for (int dd = 0; dd < D; ++dd) {
              double acc = 0;
              for (int p = first; p < n; ++p) acc += w[p] / sum * value(p, dd);
              want[r * QD + qh * D + dd] = RoundTo(static_cast<float>(acc), act);
            }
            // The new row's K/V landed in the block of its position.
            const int p = s.pos + i;
            for (int dd = 0; dd < D; ++dd) {
              EXPECT_EQ(k_before.At(kv, k_after, blocks, h, dd, p), key(p, dd));
              EXPECT_EQ(v_before.At(kv, v_after, blocks, h, dd, p), value(p, dd));
            }
            written[(size_t(blocks[p / KvLayer::kBlockSize]) * H + h) * KvLayer::kBlockSize +
                    p % KvLayer::kBlockSize] = true;
          }
        }
      }
      EXPECT_LT(RelErr(got, want), act == DType::kF32 ? 1e-5 : 8e-3);
      // Nothing else changed: the shared block, the blocks of nobody, the
      // positions no row wrote.
      for (int32_t block = 0; block < N; ++block) {
        for (int h = 0; h < H; ++h) {
          for (int j = 0; j < KvLayer::kBlockSize; ++j) {
            if (written[(size_t(block) * H + h) * KvLayer::kBlockSize + j]) continue;
            for (int dd = 0; dd < D; ++dd) {
              EXPECT_EQ(k_before.At(kv, k_after, {block}, h, dd, j), k_before.At(kv, {block}, h, dd, j));
              EXPECT_EQ(v_before.At(kv, v_after, {block}, h, dd, j), v_before.At(kv, {block}, h, dd, j));
            }
          }
        }
      }
      return got;
    });
  }
  if (ran.none()) GTEST_SKIP() << ran.why();
}

// A block table that names a block outside the layer, or does not cover a
// sequence's positions, or params out of range, are refused naming the
// problem; nothing is written.
TEST_P(KvOpsTest, AttentionRefusesABadBlockTable) {
  const int D = quantized() ? 32 : 8;
  RUN_OR_SKIP(device(), MatmulDtype::kF32, kv_format(), 0, [&](Dev& d) {
    const int H = 1, N = 2;
    KvLayer kv{nullptr, nullptr, N, H, D, kv_format()};
    const Arena k0(kv, true, 50), v0(kv, false, 50);
    const Tensor kt = k0.Upload(d), vt = v0.Upload(d);
    kv.k = kt.data;
    kv.v = vt.data;
    const std::vector<float> qkv = Random(3 * D, 51);
    const Tensor out = d.New(DType::kF32, 1, D);
    const std::vector<SeqRows> seqs = {{0, /*pos=*/40, /*len=*/1, /*row=*/0}};
    const absl::Status outside = d->AppendKv(d.Up(qkv, 1, 3 * D), d.Seqs(seqs, 1, {0, 2}), kv);
    EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(outside.message().find("names KV block 2, outside the cache's 2 blocks"),
              std::string::npos) << outside;
    const absl::Status short_table = d->Attention(d.Up(qkv, 1, 3 * D), d.Seqs(seqs, 1, {1}), kv, {}, out);
    EXPECT_EQ(short_table.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(short_table.message().find("needs 2 block ids from 0"), std::string::npos) << short_table;
    AttentionParams negative;
    negative.window = -1;
    const absl::Status bad_params = d->Attention(d.Up(qkv, 1, 3 * D), d.Seqs(seqs, 1, {0, 1}), kv, negative, out);
    EXPECT_EQ(bad_params.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(bad_params.message().find("window -1"), std::string::npos) << bad_params;
    // kNoBlock (a block given back) only wholly behind what the op touches:
    // a row at 40 writes block 1; with a window of 8 it reads [33, 40].
    const absl::Status no_block_written =
        d->AppendKv(d.Up(qkv, 1, 3 * D), d.Seqs(seqs, 1, {0, KvLayer::kNoBlock}), kv);
    EXPECT_EQ(no_block_written.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(no_block_written.message().find("block 1 (positions [32, 64)) is -1: its rows write positions 40 on"),
              std::string::npos) << no_block_written;
    AttentionParams window;
    window.window = 8;
    const absl::Status no_block_read =
        d->Attention(d.Up(qkv, 1, 3 * D), d.Seqs(seqs, 1, {KvLayer::kNoBlock, 1}), kv, {}, out);
    EXPECT_EQ(no_block_read.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(no_block_read.message().find("block 0 (positions [0, 32)) is -1: its rows attend positions 0 on"),
              std::string::npos) << no_block_read;
    const absl::Status other_negative =
        d->Attention(d.Up(qkv, 1, 3 * D), d.Seqs(seqs, 1, {-2, 1}), kv, window, out);
    EXPECT_EQ(other_negative.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(other_negative.message().find("is -2"), std::string::npos) << other_negative;
    // A horizon before the row's own position, or past its sequence's
    // rows in the call (keys not appended yet).
    for (int32_t h : {39, 41}) {
      SeqTable table = d.Seqs(seqs, 1, {0, 1});
      const std::vector<int32_t> horizon = {h};
      table.horizon = horizon.data();
      table.horizon_device = d.UpInts(horizon, 1, 1);
      const absl::Status bad_horizon = d->Attention(d.Up(qkv, 1, 3 * D), table, kv, {}, out);
      EXPECT_EQ(bad_horizon.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(bad_horizon.message().find(absl::StrCat("has horizon ", h, ": it must be within [its position, 41)")),
                std::string::npos) << bad_horizon;
    }
    EXPECT_EQ(k0.Down(d, kt), k0.bytes);
    EXPECT_TRUE(d->Attention(d.Up(qkv, 1, 3 * D), d.Seqs(seqs, 1, {KvLayer::kNoBlock, 1}), kv, window, out).ok());
    return d.Down(out);
  });
}

// A sequence's attention output is bitwise the same alone, batched with
// others, with its rows split into chunks across calls, and whatever blocks
// hold its positions; with contexts long enough that a GPU splits them over
// positions.
TEST_P(KvOpsTest, AttentionDoesNotDependOnBatchChunkingOrBlocks) {
  std::string skip;
  auto d = MakeDev(device(), MatmulDtype::kF32, kv_format(), &skip);
  if (d == nullptr) GTEST_SKIP() << device() << ": " << skip;
  // Plain, and with a window (several GPU chunks wide) and soft-capping.
  for (const AttentionParams params : {AttentionParams{}, AttentionParams{0, 30.0f, 700}})
  for (const int len : {40, 1500}) {
    const int H = 2, D = 64, HD = H * D;
    const int per_seq = static_cast<int>(KvLayer::BlocksFor(len + 8)), N = 3 * per_seq;
    auto qkv_seq = Random(len * 3 * HD, 30);
    // The sequence's blocks: a contiguous run, or every third block from the
    // end backwards (none next to another).
    std::vector<int32_t> contiguous(per_seq), scattered(per_seq);
    for (int i = 0; i < per_seq; ++i) {
      contiguous[i] = 2 * per_seq + i;
      scattered[i] = N - 1 - 3 * i;
    }
    // give_back: each call's table names the blocks wholly behind its first
    // row's window KvLayer::kNoBlock, as the engine's does once it gave
    // them back.
    auto run = [&](const std::vector<std::vector<int>>& chunks_per_call, bool with_others,
                   const std::vector<int32_t>& blocks, bool give_back = false) {
      KvLayer kv{nullptr, nullptr, N, H, D, kv_format()};
      const Arena k0(kv, true, 40), v0(kv, false, 41);
      const Tensor kt = k0.Upload(*d), vt = v0.Upload(*d);
      kv.k = kt.data;
      kv.v = vt.data;
      std::vector<float> result(size_t(len) * HD);
      int pos = 0;
      for (const auto& call : chunks_per_call) {
        for (int n : call) {
          std::vector<SeqRows> seqs;
          std::vector<int32_t> table;
          std::vector<float> qkv;
          if (with_others) {  // another sequence first, in block 1
            seqs.push_back({0, 0, 7, 0});
            table.push_back(1);
            auto other = Random(7 * 3 * HD, 31 + pos);
            qkv.insert(qkv.end(), other.begin(), other.end());
          }
          const int row = with_others ? 7 : 0;
          seqs.push_back({static_cast<int32_t>(table.size()), pos, n, row});
          table.insert(table.end(), blocks.begin(), blocks.begin() + KvLayer::BlocksFor(pos + n));
          const int behind = give_back ? std::max(0, pos + 1 - params.window) / KvLayer::kBlockSize : 0;
          std::fill_n(table.end() - KvLayer::BlocksFor(pos + n), behind, KvLayer::kNoBlock);
          qkv.insert(qkv.end(), qkv_seq.begin() + size_t(pos) * 3 * HD,
                     qkv_seq.begin() + size_t(pos + n) * 3 * HD);
          const int T = row + n;
          const Tensor out = d->New(DType::kF32, T, HD);
          const Tensor qkv_t = d->Up(qkv, T, 3 * HD);
          const SeqTable seq_table = d->Seqs(seqs, T, table);
          EXPECT_TRUE((*d)->AppendKv(qkv_t, seq_table, kv).ok());
          EXPECT_TRUE((*d)->Attention(qkv_t, seq_table, kv, params, out).ok());
          const std::vector<float> o = d->Down(out);
          std::copy(o.begin() + size_t(row) * HD, o.end(), result.begin() + size_t(pos) * HD);
          pos += n;
        }
      }
      return result;
    };
    const auto alone = run({{len}}, false, contiguous);
    EXPECT_EQ(alone, run({{len}}, false, scattered)) << len;
    EXPECT_EQ(alone, run({{len}}, true, scattered)) << len;
    EXPECT_EQ(alone, run({{5, 11, len - 16}}, true, contiguous)) << len;
    EXPECT_EQ(alone, run({{3}, {len - 3}}, false, scattered)) << len;
    if (len <= 64) {
      EXPECT_EQ(alone, run({std::vector<int>(len, 1)}, true, scattered)) << len;
    }
    // Decode steps at the end of a long context.
    EXPECT_EQ(alone, run({{len - 4, 1, 1, 1, 1}}, true, scattered)) << len;
    if (params.window > 0 && len > params.window + 64) {
      // With the blocks behind each call's window given back.
      EXPECT_EQ(alone, run({{800, 300, 1, 1, len - 1102}}, true, scattered, true)) << len;
    }
  }
}

// A layer that reads the K and V another layer appended (Gemma 4's shared
// KV) passes Q alone (AttentionParams::q_only): its output is bitwise what
// attention over the full [Q | K | V] rows gives, with and without a window
// and grouped-query attention, and Rope turns a Q-only row (kv_heads 0) as
// it turns the Q part of a full one.
TEST_P(KvOpsTest, QOnlyRowsReadTheCachedKeysAndValuesAsFullRowsDo) {
  std::string skip;
  auto d = MakeDev(device(), MatmulDtype::kF32, kv_format(), &skip);
  if (d == nullptr) GTEST_SKIP() << device() << ": " << skip;
  for (const int window : {0, 5}) {
    for (const int Hq : {2, 4}) {
      const int H = 2, D = 32, T = 21, W = (Hq + 2 * H) * D;
      KvLayer kv{nullptr, nullptr, 4, H, D, kv_format()};
      const Arena k0(kv, true, 50), v0(kv, false, 51);
      const Tensor kt = k0.Upload(*d), vt = v0.Upload(*d);
      kv.k = kt.data;
      kv.v = vt.data;
      const std::vector<int32_t> blocks = {3, 1};
      const std::vector<SeqRows> seqs = {{0, 2, T, 0}};
      const SeqTable table = d->Seqs(seqs, T, blocks);
      std::vector<float> full = Random(size_t(T) * W, 52), q_only;
      for (int t = 0; t < T; ++t) {
        q_only.insert(q_only.end(), full.begin() + size_t(t) * W, full.begin() + size_t(t) * W + Hq * D);
      }
      std::vector<int32_t> positions(T);
      for (int t = 0; t < T; ++t) positions[t] = 2 + t;
      const Tensor pos = d->UpInts(positions, 1, T);
      const Tensor inv_freq = d->Up(Random(D / 4, 53), 1, D / 4);
      const Tensor full_t = d->Up(full, T, W), q_t = d->Up(q_only, T, Hq * D);
      ASSERT_TRUE((*d)->Rope(full_t, pos, inv_freq, RopeParams{Hq, H, D}).ok());
      ASSERT_TRUE((*d)->Rope(q_t, pos, inv_freq, RopeParams{Hq, 0, D}).ok());
      ASSERT_TRUE((*d)->AppendKv(full_t, table, kv).ok());
      AttentionParams p;
      p.window = window;
      const Tensor out_full = d->New(DType::kF32, T, Hq * D), out_q = d->New(DType::kF32, T, Hq * D);
      ASSERT_TRUE((*d)->Attention(full_t, table, kv, p, out_full).ok());
      p.q_only = true;
      ASSERT_TRUE((*d)->Attention(q_t, table, kv, p, out_q).ok());
      EXPECT_EQ(d->Down(out_full), d->Down(out_q)) << "window " << window << ", " << Hq << " query heads";
      // A Q-only row is not [Q | K | V]: AppendKv refuses it.
      EXPECT_FALSE((*d)->AppendKv(q_t, table, kv).ok());
    }
  }
}

// Every format, and keys and values apart (q8_0 keys with q4_0 values, as
// llama.cpp users pair them; bf16 keys with q8_0 values). Each backend runs
// the formats it keeps (q8_0 / q4_0 the CPU, fp8 CUDA) and skips the rest.
INSTANTIATE_TEST_SUITE_P(DevicesKvFormats, KvOpsTest,
                         ::testing::Combine(::testing::Values("cpu", "cuda"),
                                            ::testing::Values(KvFormat(KvDtype::kF32), KvFormat(KvDtype::kBF16),
                                                              KvFormat(KvDtype::kQ8_0), KvFormat(KvDtype::kQ4_0),
                                                              KvFormat(KvDtype::kQ8_0, KvDtype::kQ4_0),
                                                              KvFormat(KvDtype::kBF16, KvDtype::kQ8_0),
                                                              KvFormat(KvDtype::kFp8))),
                         [](const auto& info) {
                           std::string name = KvFormatName(std::get<1>(info.param));
                           std::replace(name.begin(), name.end(), ',', '_');
                           return std::string(std::get<0>(info.param)) + "_" + name;
                         });

}  // namespace
}  // namespace flover::kernels
