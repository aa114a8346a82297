#include "kernels/cpu/block_linear.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/vec_math.h"

// Compiled with -ffp-contract=off (BUILD.bazel): every multiply and add below
// is the one written, so the arithmetic is the header's, whatever the tile.

#define FLOVER_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c")))

namespace flover::kernels {
namespace {

constexpr int kChunk = 64;           // values per inner step: two 32-value blocks
constexpr int kGroupChunks = 4;      // chunks per group: 256 values, 8 blocks
constexpr int kGroupBlocks = 8;
constexpr int kTileCols = 4;         // output columns per tile: two pairs
constexpr size_t kInputBlockBytes = 256 << 10;  // quantized input rows per pass over the weights
constexpr int kTileRows = 8;         // input rows run over each decoded chunk

// ---------------------------------------------------------------------------
// The packed layout (Prepare writes it, the tiles read it).
//
// Columns go in pairs, two pairs to a tile; a span's rows are padded with
// zero columns to whole tiles. A tile is, for each group of 256 values:
//   the header of pair 0, the header of pair 1 (the group's scales), then
//   for each of the group's chunks: pair 0's codes, pair 1's codes.
// A pair's chunk of codes decodes to two vectors of 64 u8 codes,
//   A = [column 0's block a (32), column 1's block a] and
//   B = [column 0's block b,      column 1's block b],
// so one u8 x s8 dot product against [x's block a, x's block a] gives
// lanes 0-7 for column 0 and 8-15 for column 1.
//
// Headers, per pair and group (h = column 0 or 1; blocks of 32 values):
//   Q8_0, Q4_0, Q5_0: f16 d[h][8]
//   Q4_1, Q5_1:       f16 d[h][8], f16 m[h][8]
//   Q4_K, Q5_K:       f16 d[2], f16 dmin[2], u8 sc[h][8], u8 m[h][8] (6-bit, unpacked)
//   Q6_K:             f16 d[2], s8 sc[h][16] (sub-blocks of 16)
// Codes, per pair and chunk:
//   Q8_0:  A, B as bytes (s8 + 128)
//   Q4_*:  64 bytes, A in the low nibbles, B in the high ones
//   Q5_*:  64 bytes of low nibbles as Q4_*, then A's fifth bits (64, bit i
//          of the 8 bytes for A[i]) and B's
//   Q6_K:  64 bytes of low nibbles as Q4_*, then 32 bytes of the 2 high bits:
//          byte i holds A[i], A[32 + i], B[i], B[32 + i] from bit 0 up.
// Bytes equal the file's for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and Q6_K; the
// K-quants with 6-bit scales take 8 more per pair of super-blocks (Q4_K:
// 296 for 288, Q5_K: 360 for 352), their 12 bytes of scales unpacked to 16.
// ---------------------------------------------------------------------------

// The K-quants take their inputs with one scale per 256 values (ggml's
// Q8_K), so a group's products need no input scale until the group ends.
constexpr bool PerGroupInput(BlockFormat f) {
  return f == BlockFormat::kQ4_K || f == BlockFormat::kQ5_K || f == BlockFormat::kQ6_K;
}

int HeaderBytes(BlockFormat f) {
  switch (f) {
    case BlockFormat::kQ8_0: return 32;
    case BlockFormat::kQ4_0: return 32;
    case BlockFormat::kQ4_1: return 64;
    case BlockFormat::kQ4_K: return 40;
    case BlockFormat::kQ6_K: return 36;
    case BlockFormat::kQ5_0: return 32;
    case BlockFormat::kQ5_1: return 64;
    case BlockFormat::kQ5_K: return 40;
  }
  return 0;
}

int CodeBytes(BlockFormat f) {
  switch (f) {
    case BlockFormat::kQ8_0: return 128;
    case BlockFormat::kQ6_K: return 96;
    case BlockFormat::kQ5_0:
    case BlockFormat::kQ5_1:
    case BlockFormat::kQ5_K: return 80;
    default: return 64;
  }
}

int64_t TileBytes(BlockFormat f, int K) {
  const int chunks = K / kChunk, groups = (chunks + kGroupChunks - 1) / kGroupChunks;
  return 2 * (static_cast<int64_t>(groups) * HeaderBytes(f) + static_cast<int64_t>(chunks) * CodeBytes(f));
}

class BlockWeight final : public Weight {
 public:
  int k() const override { return k_; }
  int n() const override { return n_; }

  int k_ = 0, n_ = 0;
  struct Span {
    BlockFormat format;
    int row_begin, rows;
    int64_t tile_bytes;
    const uint8_t* data;  // ceil(rows / 4) tiles
  };
  std::vector<Span> spans;
  std::shared_ptr<void> storage;
};

// ---------------------------------------------------------------------------
// Packing (at load; scalar).
// ---------------------------------------------------------------------------

uint16_t HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

void PutHalfAt(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }

// ggml's get_scale_min_k4: sub-block j's 6-bit scale and minimum.
void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// A row's K codes as the kernels take them: u8, the format's offset not yet
// taken out (Q8_0's s8 biased by 128; Q6_K's 6 bits unsigned).
void UnpackCodes(BlockFormat f, const uint8_t* row, int K, uint8_t* codes) {
  switch (f) {
    case BlockFormat::kQ8_0:
      for (int b = 0; b < K / 32; ++b) {
        for (int i = 0; i < 32; ++i) codes[32 * b + i] = static_cast<uint8_t>(row[34 * b + 2 + i] ^ 0x80);
      }
      break;
    case BlockFormat::kQ4_0:
    case BlockFormat::kQ4_1: {
      const int bytes = InfoOf(f).block_bytes, at = bytes - 16;
      for (int b = 0; b < K / 32; ++b) {
        const uint8_t* qs = row + bytes * b + at;
        for (int i = 0; i < 16; ++i) {
          codes[32 * b + i] = qs[i] & 0xF;
          codes[32 * b + 16 + i] = qs[i] >> 4;
        }
      }
      break;
    }
    case BlockFormat::kQ5_0:
    case BlockFormat::kQ5_1: {
      const int bytes = InfoOf(f).block_bytes, at = bytes - 16;
      for (int b = 0; b < K / 32; ++b) {
        const uint8_t* qs = row + bytes * b + at;
        uint32_t qh;
        std::memcpy(&qh, qs - 4, 4);
        for (int i = 0; i < 16; ++i) {
          codes[32 * b + i] = static_cast<uint8_t>((qs[i] & 0xF) | (((qh >> i) & 1) << 4));
          codes[32 * b + 16 + i] = static_cast<uint8_t>((qs[i] >> 4) | (((qh >> (16 + i)) & 1) << 4));
        }
      }
      break;
    }
    case BlockFormat::kQ5_K:
      for (int s = 0; s < K / 256; ++s) {
        const uint8_t* qh = row + 176 * s + 16;
        const uint8_t* qs = qh + 32;
        for (int j = 0; j < 4; ++j) {
          for (int l = 0; l < 32; ++l) {
            codes[256 * s + 64 * j + l] = static_cast<uint8_t>((qs[32 * j + l] & 0xF) | (((qh[l] >> (2 * j)) & 1) << 4));
            codes[256 * s + 64 * j + 32 + l] =
                static_cast<uint8_t>((qs[32 * j + l] >> 4) | (((qh[l] >> (2 * j + 1)) & 1) << 4));
          }
        }
      }
      break;
    case BlockFormat::kQ4_K:
      for (int s = 0; s < K / 256; ++s) {
        const uint8_t* qs = row + 144 * s + 16;
        for (int j = 0; j < 4; ++j) {
          for (int l = 0; l < 32; ++l) {
            codes[256 * s + 64 * j + l] = qs[32 * j + l] & 0xF;
            codes[256 * s + 64 * j + 32 + l] = qs[32 * j + l] >> 4;
          }
        }
      }
      break;
    case BlockFormat::kQ6_K:
      for (int s = 0; s < K / 256; ++s) {
        const uint8_t* blk = row + 210 * s;
        for (int half = 0; half < 2; ++half) {
          const uint8_t* ql = blk + 64 * half;
          const uint8_t* qh = blk + 128 + 32 * half;
          uint8_t* y = codes + 256 * s + 128 * half;
          for (int l = 0; l < 32; ++l) {
            y[l] = static_cast<uint8_t>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
            y[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
            y[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            y[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
          }
        }
      }
      break;
  }
}

// Pair header of group g from rows r[0], r[1] (nullptr: a padding column).
void PackHeader(BlockFormat f, const uint8_t* const r[2], int K, int g, uint8_t* out) {
  std::memset(out, 0, HeaderBytes(f));
  const int blocks = K / 32;
  for (int h = 0; h < 2; ++h) {
    if (r[h] == nullptr) continue;
    switch (f) {
      case BlockFormat::kQ8_0:
      case BlockFormat::kQ4_0:
      case BlockFormat::kQ4_1:
      case BlockFormat::kQ5_0:
      case BlockFormat::kQ5_1: {
        const int bytes = InfoOf(f).block_bytes;
        const bool min = f == BlockFormat::kQ4_1 || f == BlockFormat::kQ5_1;
        for (int j = 0; j < kGroupBlocks; ++j) {
          const int b = kGroupBlocks * g + j;
          if (b >= blocks) break;
          PutHalfAt(out + 2 * (8 * h + j), HalfAt(r[h] + bytes * b));
          if (min) PutHalfAt(out + 32 + 2 * (8 * h + j), HalfAt(r[h] + bytes * b + 2));
        }
        break;
      }
      case BlockFormat::kQ4_K:
      case BlockFormat::kQ5_K: {
        const uint8_t* s = r[h] + InfoOf(f).block_bytes * g;
        PutHalfAt(out + 2 * h, HalfAt(s));
        PutHalfAt(out + 4 + 2 * h, HalfAt(s + 2));
        for (int j = 0; j < 8; ++j) ScaleMinK4(j, s + 4, out + 8 + 8 * h + j, out + 24 + 8 * h + j);
        break;
      }
      case BlockFormat::kQ6_K: {
        const uint8_t* s = r[h] + 210 * g;
        PutHalfAt(out + 2 * h, HalfAt(s + 208));
        std::memcpy(out + 4 + 16 * h, s + 192, 16);
        break;
      }
    }
  }
}

// Pair codes of chunk c from unpacked codes u[0], u[1] (nullptr: padding).
void PackCodes(BlockFormat f, const uint8_t* const u[2], int c, uint8_t* out) {
  uint8_t a[64], b[64];
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < 32; ++i) {
      a[32 * h + i] = u[h] != nullptr ? u[h][kChunk * c + i] : 0;
      b[32 * h + i] = u[h] != nullptr ? u[h][kChunk * c + 32 + i] : 0;
    }
  }
  switch (f) {
    case BlockFormat::kQ8_0:
      std::memcpy(out, a, 64);
      std::memcpy(out + 64, b, 64);
      break;
    case BlockFormat::kQ5_0:
    case BlockFormat::kQ5_1:
    case BlockFormat::kQ5_K: {
      uint64_t fifth_a = 0, fifth_b = 0;
      for (int i = 0; i < 64; ++i) {
        fifth_a |= static_cast<uint64_t>((a[i] >> 4) & 1) << i;
        fifth_b |= static_cast<uint64_t>((b[i] >> 4) & 1) << i;
      }
      std::memcpy(out + 64, &fifth_a, 8);
      std::memcpy(out + 72, &fifth_b, 8);
      for (int i = 0; i < 64; ++i) out[i] = static_cast<uint8_t>((a[i] & 0xF) | ((b[i] & 0xF) << 4));
      break;
    }
    case BlockFormat::kQ6_K:
      for (int i = 0; i < 32; ++i) {
        out[64 + i] = static_cast<uint8_t>((a[i] >> 4) | ((a[32 + i] >> 4) << 2) | ((b[i] >> 4) << 4) |
                                           ((b[32 + i] >> 4) << 6));
      }
      [[fallthrough]];
    default:
      for (int i = 0; i < 64; ++i) out[i] = static_cast<uint8_t>((a[i] & 0xF) | ((b[i] & 0xF) << 4));
      break;
  }
}

// ---------------------------------------------------------------------------
// The kernels.
// ---------------------------------------------------------------------------

// Lanes 0-7 of v take a's lane `i`, lanes 8-15 b's lane `8 + i` (i < 8).
FLOVER_VNNI inline __m512i PairIndex(int i) {
  return _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(i), _mm512_set1_epi32(8 + i));
}

// One pair's group header decoded: per lane, the scale (and minimum) of the
// lane's column and block, for the group's 8 blocks (Q6_K: z0, z1 hold each
// column's 16 sub-block scales).
struct PairScales {
  __m512 z, zmin, z0, z1;
};

// The pair's codes of one chunk: A and B (see the layout).
struct PairCodes {
  __m512i a, b;
};

template <BlockFormat F>
struct Format;

template <>
struct Format<BlockFormat::kQ8_0> {
  static constexpr int kShift = 7;  // codes biased by 128
  static constexpr bool kMin = false;
  FLOVER_VNNI static PairScales Scales(const uint8_t* h) {
    return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h))), _mm512_setzero_ps(),
            _mm512_setzero_ps(), _mm512_setzero_ps()};
  }
  FLOVER_VNNI static PairCodes Codes(const uint8_t* p) {
    return {_mm512_loadu_si512(p), _mm512_loadu_si512(p + 64)};
  }
};

FLOVER_VNNI inline PairCodes Nibbles(const uint8_t* p) {
  const __m512i v = _mm512_loadu_si512(p);
  const __m512i mask = _mm512_set1_epi8(0x0F);
  return {_mm512_and_si512(v, mask), _mm512_and_si512(_mm512_srli_epi16(v, 4), mask)};
}

template <>
struct Format<BlockFormat::kQ4_0> {
  static constexpr int kShift = 3;  // codes - 8
  static constexpr bool kMin = false;
  FLOVER_VNNI static PairScales Scales(const uint8_t* h) { return Format<BlockFormat::kQ8_0>::Scales(h); }
  FLOVER_VNNI static PairCodes Codes(const uint8_t* p) { return Nibbles(p); }
};

template <>
struct Format<BlockFormat::kQ4_1> {
  static constexpr int kShift = -1;  // no offset: a minimum
  static constexpr bool kMin = true;
  FLOVER_VNNI static PairScales Scales(const uint8_t* h) {
    return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h))),
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + 32))), _mm512_setzero_ps(),
            _mm512_setzero_ps()};
  }
  FLOVER_VNNI static PairCodes Codes(const uint8_t* p) { return Nibbles(p); }
};

// The two f16 at p as floats.
FLOVER_VNNI inline __m128 TwoHalves(const uint8_t* p) {
  uint32_t two;
  std::memcpy(&two, p, 4);
  return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(two)));
}

// [v0 x 8, v1 x 8] from the first two lanes of v.
FLOVER_VNNI inline __m512 PerColumn(__m128 v) {
  const __m512i index = _mm512_mask_blend_epi32(0xFF00, _mm512_setzero_si512(), _mm512_set1_epi32(1));
  return _mm512_permutexvar_ps(index, _mm512_castps128_ps512(v));
}

template <>
struct Format<BlockFormat::kQ4_K> {
  static constexpr int kShift = -1;
  static constexpr bool kMin = true;
  FLOVER_VNNI static PairScales Scales(const uint8_t* h) {
    // As ggml: d1 = d * sc, m1 = dmin * m; w = d1 * q - m1.
    const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 8))));
    const __m512 m = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 24))));
    const __m512 dmin = _mm512_mul_ps(PerColumn(TwoHalves(h + 4)), m);
    return {_mm512_mul_ps(PerColumn(TwoHalves(h)), sc), _mm512_sub_ps(_mm512_setzero_ps(), dmin), _mm512_setzero_ps(),
            _mm512_setzero_ps()};
  }
  FLOVER_VNNI static PairCodes Codes(const uint8_t* p) { return Nibbles(p); }
};

// Q5_*: the low nibbles as Q4_*, plus 16 where the pair's fifth bits say.
FLOVER_VNNI inline PairCodes FiveBits(const uint8_t* p) {
  const PairCodes low = Nibbles(p);
  uint64_t fifth_a, fifth_b;
  std::memcpy(&fifth_a, p + 64, 8);
  std::memcpy(&fifth_b, p + 72, 8);
  const __m512i sixteen = _mm512_set1_epi8(16);
  return {_mm512_mask_add_epi8(low.a, _cvtu64_mask64(fifth_a), low.a, sixteen),
          _mm512_mask_add_epi8(low.b, _cvtu64_mask64(fifth_b), low.b, sixteen)};
}

template <>
struct Format<BlockFormat::kQ5_0> {
  static constexpr int kShift = 4;  // codes - 16
  static constexpr bool kMin = false;
  FLOVER_VNNI static PairScales Scales(const uint8_t* h) { return Format<BlockFormat::kQ8_0>::Scales(h); }
  FLOVER_VNNI static PairCodes Codes(const uint8_t* p) { return FiveBits(p); }
};

template <>
struct Format<BlockFormat::kQ5_1> {
  static constexpr int kShift = -1;
  static constexpr bool kMin = true;
  FLOVER_VNNI static PairScales Scales(const uint8_t* h) { return Format<BlockFormat::kQ4_1>::Scales(h); }
  FLOVER_VNNI static PairCodes Codes(const uint8_t* p) { return FiveBits(p); }
};

template <>
struct Format<BlockFormat::kQ5_K> {
  static constexpr int kShift = -1;
  static constexpr bool kMin = true;
  FLOVER_VNNI static PairScales Scales(const uint8_t* h) { return Format<BlockFormat::kQ4_K>::Scales(h); }
  FLOVER_VNNI static PairCodes Codes(const uint8_t* p) { return FiveBits(p); }
};

template <>
struct Format<BlockFormat::kQ6_K> {
  static constexpr int kShift = 5;  // codes - 32
  static constexpr bool kMin = false;
  FLOVER_VNNI static PairScales Scales(const uint8_t* h) {
    // As ggml: (d * sc) * q, the scale product in float32.
    const __m128 d = TwoHalves(h);
    const __m512 s0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 4))));
    const __m512 s1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 20))));
    return {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_mul_ps(_mm512_set1_ps(_mm_cvtss_f32(d)), s0),
            _mm512_mul_ps(_mm512_set1_ps(_mm_cvtss_f32(_mm_movehdup_ps(d))), s1)};
  }
  FLOVER_VNNI static PairCodes Codes(const uint8_t* p) {
    const PairCodes low = Nibbles(p);
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64));
    const __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 2), 1);
    const __m512i top = _mm512_set1_epi8(0x30);
    return {_mm512_or_si512(low.a, _mm512_and_si512(_mm512_slli_epi16(hh, 4), top)),
            _mm512_or_si512(low.b, _mm512_and_si512(hh, top))};
  }
};

// The per-lane scales of chunk c (of its group) for blocks a and b.
template <BlockFormat F>
FLOVER_VNNI inline void ChunkScales(const PairScales& s, int c, __m512* sa, __m512* sb) {
  if constexpr (F == BlockFormat::kQ6_K) {
    // Lanes 0-3 and 4-7 (column 0) take sub-blocks 4c and 4c + 1 of z0 for
    // block a, 4c + 2 and 4c + 3 for b; lanes 8-15 the same of z1.
    const __m512i quarter = _mm512_srli_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 2);
    const __m512i first = _mm512_add_epi32(_mm512_and_si512(quarter, _mm512_set1_epi32(1)),
                                           _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(4 * c),
                                                                   _mm512_set1_epi32(16 + 4 * c)));
    *sa = _mm512_permutex2var_ps(s.z0, first, s.z1);
    *sb = _mm512_permutex2var_ps(s.z0, _mm512_add_epi32(first, _mm512_set1_epi32(2)), s.z1);
  } else {
    *sa = _mm512_permutexvar_ps(PairIndex(2 * c), s.z);
    *sb = _mm512_permutexvar_ps(PairIndex(2 * c + 1), s.z);
  }
}

// Lanes 0-7 of v summed, in a fixed order.
FLOVER_VNNI inline float SumEight(__m256 v) {
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)));
}

// sums[r][j] of a tile's 4 columns for its rows [0, R).
template <BlockFormat F, int R>
FLOVER_VNNI void Tile(const BlockLinear::XChunk* const* xrows, const float* const* xsums, const uint8_t* tile,
                      int chunks, float* sums /* [R][4] */) {
  using Fmt = Format<F>;
  constexpr bool kOffset = Fmt::kShift >= 0;
  constexpr unsigned kShift = kOffset ? Fmt::kShift : 0;
  const int header = HeaderBytes(F), codes = CodeBytes(F);
  // acc[r][pair]: per group the minimum's products first, then each chunk's
  // block a and block b.
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < 2; ++p) acc[r][p] = _mm512_setzero_ps();
  }
  const uint8_t* at = tile;
  for (int c0 = 0; c0 < chunks; c0 += kGroupChunks) {
    const int group_chunks = std::min(kGroupChunks, chunks - c0);
    if constexpr (PerGroupInput(F)) {
      // The sums so far, from the last group's input scale to this one's.
      if (c0 > 0) {
        for (int r = 0; r < R; ++r) {
          const __m512 rescale = _mm512_set1_ps(xrows[r][c0].rescale);
          for (int p = 0; p < 2; ++p) acc[r][p] = _mm512_mul_ps(acc[r][p], rescale);
        }
      }
    }
    PairScales scales[2];
    for (int p = 0; p < 2; ++p) scales[p] = Fmt::Scales(at + p * header);
    at += 2 * header;
    if constexpr (Fmt::kMin) {
      for (int r = 0; r < R; ++r) {
        const __m512 xs = _mm512_loadu_ps(xsums[r] + 16 * (c0 / kGroupChunks));
        for (int p = 0; p < 2; ++p) acc[r][p] = _mm512_fmadd_ps(scales[p].zmin, xs, acc[r][p]);
      }
    }
    for (int c = 0; c < group_chunks; ++c) {
      PairCodes w[2];
      __m512 sa[2], sb[2];
      for (int p = 0; p < 2; ++p) {
        w[p] = Fmt::Codes(at + p * codes);
        ChunkScales<F>(scales[p], c, &sa[p], &sb[p]);
      }
      at += 2 * codes;
      for (int r = 0; r < R; ++r) {
        const BlockLinear::XChunk& x = xrows[r][c0 + c];
        const __m512i xa = _mm512_load_si512(x.a), xb = _mm512_load_si512(x.b);
        // The codes' offset out of the sum: -offset * (the lane's input codes).
        const __m512i ia = kOffset ? _mm512_slli_epi32(_mm512_load_si512(x.neg_a), kShift) : _mm512_setzero_si512();
        const __m512i ib = kOffset ? _mm512_slli_epi32(_mm512_load_si512(x.neg_b), kShift) : _mm512_setzero_si512();
        for (int p = 0; p < 2; ++p) {
          const __m512 da = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(ia, w[p].a, xa));
          const __m512 db = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(ib, w[p].b, xb));
          if constexpr (PerGroupInput(F)) {  // in units of the group's input scale
            acc[r][p] = _mm512_fmadd_ps(da, sa[p], acc[r][p]);
            acc[r][p] = _mm512_fmadd_ps(db, sb[p], acc[r][p]);
          } else {
            acc[r][p] = _mm512_fmadd_ps(da, _mm512_mul_ps(sa[p], _mm512_set1_ps(x.dx[0])), acc[r][p]);
            acc[r][p] = _mm512_fmadd_ps(db, _mm512_mul_ps(sb[p], _mm512_set1_ps(x.dx[1])), acc[r][p]);
          }
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < 2; ++p) {
      const __m512 v = acc[r][p];
      float lo = SumEight(_mm512_castps512_ps256(v));
      float hi = SumEight(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
      if constexpr (PerGroupInput(F)) {  // back from the last group's input scale
        lo = lo * xrows[r][chunks - 1].unit;
        hi = hi * xrows[r][chunks - 1].unit;
      }
      sums[r * kTileCols + 2 * p] = lo;
      sums[r * kTileCols + 2 * p + 1] = hi;
    }
  }
}

using TileFn = void (*)(const BlockLinear::XChunk* const*, const float* const*, const uint8_t*, int, float*);

template <BlockFormat F>
TileFn TileFor(int rows) {
  switch (rows) {
    case 1: return &Tile<F, 1>;
    case 2: return &Tile<F, 2>;
    case 3: return &Tile<F, 3>;
    case 4: return &Tile<F, 4>;
    case 5: return &Tile<F, 5>;
    case 6: return &Tile<F, 6>;
    case 7: return &Tile<F, 7>;
    default: return &Tile<F, 8>;
  }
}

TileFn TileFor(BlockFormat f, int rows) {
  switch (f) {
    case BlockFormat::kQ8_0: return TileFor<BlockFormat::kQ8_0>(rows);
    case BlockFormat::kQ4_0: return TileFor<BlockFormat::kQ4_0>(rows);
    case BlockFormat::kQ4_1: return TileFor<BlockFormat::kQ4_1>(rows);
    case BlockFormat::kQ4_K: return TileFor<BlockFormat::kQ4_K>(rows);
    case BlockFormat::kQ6_K: return TileFor<BlockFormat::kQ6_K>(rows);
    case BlockFormat::kQ5_0: return TileFor<BlockFormat::kQ5_0>(rows);
    case BlockFormat::kQ5_1: return TileFor<BlockFormat::kQ5_1>(rows);
    case BlockFormat::kQ5_K: return TileFor<BlockFormat::kQ5_K>(rows);
  }
  return nullptr;
}

inline void Finish(float sum, const float* bias, int n, Epilogue epilogue, float* out) {
  float v = sum;
  if (bias != nullptr) v = v + bias[n];
  switch (epilogue) {
    case Epilogue::kBias: out[n] = v; break;
    case Epilogue::kBiasGelu: out[n] = GeluNewF(v); break;
    case Epilogue::kBiasResidual: out[n] = out[n] + v; break;
  }
}

}  // namespace

absl::Status BlockLinear::CheckSupported() {
  const std::pair<const char*, bool> features[] = {
      {"avx512f", __builtin_cpu_supports("avx512f")},   {"avx512bw", __builtin_cpu_supports("avx512bw")},
      {"avx512vl", __builtin_cpu_supports("avx512vl")}, {"avx512vnni", __builtin_cpu_supports("avx512vnni")},
      {"f16c", __builtin_cpu_supports("f16c")}};
  for (const auto& [name, present] : features) {
    if (!present) {
      return absl::FailedPreconditionError(
          absl::StrCat("quantized blocks need ", name, ", which this CPU lacks"));
    }
  }
  return absl::OkStatus();
}

absl::Status BlockLinear::CheckShape(const HostValues& w, int K, int N, WeightLayout layout) {
  if (!w.is_blocks() || w.num_spans < 1) {
    return absl::InvalidArgumentError("BlockLinear: not quantized blocks");
  }
  if (layout != WeightLayout::kOutIn) {
    return absl::InvalidArgumentError("quantized blocks come one row per output ([N, K])");
  }
  int rows = 0;
  for (int i = 0; i < w.num_spans; ++i) {
    const BlockSpan& s = w.spans[i];
    const int unit = std::max(kChunk, InfoOf(s.format).block_values);
    if (K % unit != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          InfoOf(s.format).name, " rows of ", K, " values: the kernels take a multiple of ", unit));
    }
    if (s.rows < 0) return absl::InvalidArgumentError("BlockLinear: a span of negative rows");
    rows += s.rows;
  }
  if (rows != N) {
    return absl::InvalidArgumentError(
        absl::StrCat("BlockLinear: the spans hold ", rows, " rows; the weight has ", N));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Weight>> BlockLinear::Prepare(HostValues w, int K, int N,
                                                             WeightLayout layout) {
  if (absl::Status st = CheckShape(w, K, N, layout); !st.ok()) return st;
  auto out = std::make_unique<BlockWeight>();
  out->k_ = K;
  out->n_ = N;
  int64_t bytes = 0;
  for (int i = 0; i < w.num_spans; ++i) {
    bytes += (w.spans[i].rows + kTileCols - 1) / kTileCols * TileBytes(w.spans[i].format, K);
  }
  WeightArena::Block block = arena_.Allocate(static_cast<size_t>(bytes));
  if (block.data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes of weights"));
  }
  out->storage = block.owner;
  uint8_t* dst = static_cast<uint8_t*>(block.data);
  const uint8_t* src = static_cast<const uint8_t*>(w.data);
  const int chunks = K / kChunk;
  int row = 0;
  for (int i = 0; i < w.num_spans; ++i) {
    const BlockSpan& s = w.spans[i];
    const int64_t row_bytes = BlockRowBytes(s.format, K), tile_bytes = TileBytes(s.format, K);
    const int tiles = (s.rows + kTileCols - 1) / kTileCols;
    if (s.rows > 0) out->spans.push_back({s.format, row, s.rows, tile_bytes, dst});
    const int header = HeaderBytes(s.format), code_bytes = CodeBytes(s.format);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < tiles; ++t) {
      std::vector<uint8_t> unpacked(static_cast<size_t>(kTileCols) * K);
      const uint8_t* rows[kTileCols];
      const uint8_t* codes[kTileCols];
      for (int j = 0; j < kTileCols; ++j) {
        const int n = t * kTileCols + j;
        rows[j] = n < s.rows ? src + n * row_bytes : nullptr;
        codes[j] = nullptr;
        if (rows[j] != nullptr) {
          UnpackCodes(s.format, rows[j], K, unpacked.data() + static_cast<size_t>(j) * K);
          codes[j] = unpacked.data() + static_cast<size_t>(j) * K;
        }
      }
      uint8_t* at = dst + t * tile_bytes;
      for (int c0 = 0; c0 < chunks; c0 += kGroupChunks) {
        for (int p = 0; p < 2; ++p, at += header) PackHeader(s.format, rows + 2 * p, K, c0 / kGroupChunks, at);
        for (int c = c0; c < std::min(chunks, c0 + kGroupChunks); ++c) {
          for (int p = 0; p < 2; ++p, at += code_bytes) PackCodes(s.format, codes + 2 * p, c, at);
        }
      }
    }
    src += s.rows * row_bytes;
    dst += tiles * tile_bytes;
    row += s.rows;
  }
  return std::unique_ptr<Weight>(std::move(out));
}

bool BlockLinear::Holds(const Weight& w) { return dynamic_cast<const BlockWeight*>(&w) != nullptr; }

int BlockLinear::InputScaleValues(BlockFormat format) { return PerGroupInput(format) ? 256 : 32; }

FLOVER_VNNI void BlockLinear::QuantizeRow(const float* x, int K, XChunk* out, float* sums, int scale_values) {
  const __m512i ones = _mm512_set1_epi8(1), mag = _mm512_set1_epi32(0x7fffffff);
  const int chunks = K / kChunk, per_scale = scale_values / 32;
  std::fill(sums, sums + SumsPerRow(K), 0.0f);
  float unit = 1.0f;
  for (int s0 = 0; s0 < K / 32; s0 += per_scale) {
    // max |x| over the scale's blocks, on the bit patterns with the sign
    // cleared (a NaN input gives a NaN scale, so NaN results).
    __m512i top = _mm512_setzero_si512();
    for (int i = 32 * s0; i < 32 * (s0 + per_scale); i += 16) {
      top = _mm512_max_epu32(top, _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x + i)), mag));
    }
    const uint32_t bits = static_cast<uint32_t>(_mm512_reduce_max_epu32(top));
    float amax;
    std::memcpy(&amax, &bits, 4);
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    const float dx = amax / 127.0f;
    const float previous = unit;
    if (dx > 0.0f || std::isnan(dx)) unit = dx;  // a scale of 0 keeps the last (NaN: NaN results)
    const __m512 s = _mm512_set1_ps(inv);
    for (int block = s0; block < s0 + per_scale; ++block) {
      XChunk& ch = out[block / 2];
      const int b = block % 2;
      const float* v = x + 32 * block;
      const __m512i q0 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(v), s),
                                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512i q1 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(v + 16), s),
                                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512i lim = _mm512_set1_epi32(127);
      const __m512i c0 = _mm512_max_epi32(_mm512_min_epi32(q0, lim), _mm512_set1_epi32(-127));
      const __m512i c1 = _mm512_max_epi32(_mm512_min_epi32(q1, lim), _mm512_set1_epi32(-127));
      int8_t* q = b == 0 ? ch.a : ch.b;
      // The block's 32 codes twice: once per column of a pair.
      for (int copy = 0; copy < 2; ++copy) {
        _mm_store_si128(reinterpret_cast<__m128i*>(q + 32 * copy), _mm512_cvtepi32_epi8(c0));
        _mm_store_si128(reinterpret_cast<__m128i*>(q + 32 * copy + 16), _mm512_cvtepi32_epi8(c1));
      }
      ch.dx[b] = dx;
      ch.unit = unit;
      ch.rescale = previous / unit;
      const float sum = static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(c0, c1)));
      // The block's code sum (times d_x per 32 values), in both columns' lanes.
      const int group = block / kGroupBlocks, lane = block % kGroupBlocks;
      sums[16 * group + lane] = sums[16 * group + 8 + lane] = per_scale == 1 ? dx * sum : sum;
    }
  }
  const __m512i zero = _mm512_setzero_si512();
  for (int c = 0; c < chunks; ++c) {
    XChunk& ch = out[c];
    _mm512_store_si512(ch.neg_a, _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, ones, _mm512_load_si512(ch.a))));
    _mm512_store_si512(ch.neg_b, _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, ones, _mm512_load_si512(ch.b))));
  }
}

void BlockLinear::Run(const float* x, int M, const Weight& weight, const float* bias,
                      Epilogue epilogue, float* out) {
  const auto& w = static_cast<const BlockWeight&>(weight);
  const int K = w.k_, N = w.n_, chunks = K / kChunk;
  const int sums_per_row = SumsPerRow(K);
  // The inputs quantized as the spans' formats take them (both ways when a
  // weight stacks K-quants and others).
  bool per_32 = false, per_256 = false;
  for (const BlockWeight::Span& span : w.spans) (PerGroupInput(span.format) ? per_256 : per_32) = true;
  for (int scale_values : {32, 256}) {
    if (!(scale_values == 32 ? per_32 : per_256)) continue;
    std::vector<XChunk>& xv = scale_values == 32 ? x_ : x256_;
    std::vector<float>& sv = scale_values == 32 ? sums_ : sums256_;
    xv.resize(static_cast<size_t>(M) * chunks);
    sv.resize(static_cast<size_t>(M) * sums_per_row);
    // One row (decode at low load) needs no parallel region.
#pragma omp parallel for schedule(static) if (M > 1)
    for (int m = 0; m < M; ++m) {
      QuantizeRow(x + static_cast<int64_t>(m) * K, K, xv.data() + static_cast<int64_t>(m) * chunks,
                  sv.data() + static_cast<int64_t>(m) * sums_per_row, scale_values);
    }
  }

  // Rows go in blocks whose quantized inputs stay in L2 while every tile
  // runs over them (at a prefill's hundreds of rows they would not).
  const int rows_per_block =
      std::max(kTileRows, static_cast<int>(kInputBlockBytes / (chunks * sizeof(XChunk) * (per_32 && per_256 ? 2 : 1))) /
                              kTileRows * kTileRows);
#pragma omp parallel
  for (int mb = 0; mb < M; mb += rows_per_block) {
    const int m_end = std::min(M, mb + rows_per_block);
    for (const BlockWeight::Span& span : w.spans) {
      const int tiles = (span.rows + kTileCols - 1) / kTileCols;
      const bool group_input = PerGroupInput(span.format);
      const XChunk* xq = group_input ? x256_.data() : x_.data();
      const float* xs = group_input ? sums256_.data() : sums_.data();
#pragma omp for schedule(static)
      for (int t = 0; t < tiles; ++t) {
        const int n0 = t * kTileCols;
        const int cols = std::min(kTileCols, span.rows - n0);
        const uint8_t* tile = span.data + t * span.tile_bytes;
        for (int m0 = mb; m0 < m_end; m0 += kTileRows) {
          const int rows = std::min(kTileRows, m_end - m0);
          const XChunk* xrows[kTileRows];
          const float* xsums[kTileRows];
          for (int r = 0; r < rows; ++r) {
            xrows[r] = xq + static_cast<int64_t>(m0 + r) * chunks;
            xsums[r] = xs + static_cast<int64_t>(m0 + r) * sums_per_row;
          }
          float sums[kTileRows * kTileCols];
          TileFor(span.format, rows)(xrows, xsums, tile, chunks, sums);
          for (int r = 0; r < rows; ++r) {
            float* o = out + static_cast<int64_t>(m0 + r) * N;
            for (int j = 0; j < cols; ++j) Finish(sums[r * kTileCols + j], bias, span.row_begin + n0 + j, epilogue, o);
          }
        }
      }
    }
  }
}

}  // namespace flover::kernels
