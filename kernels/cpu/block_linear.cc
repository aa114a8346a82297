#include "kernels/cpu/block_linear.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/vec_math.h"

// Compiled with -ffp-contract=off (BUILD.bazel): every multiply and add below
// is the one written, so the arithmetic is the header's, whatever the tile.

#define FLOVER_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c")))

namespace flover::kernels {
namespace {

constexpr int kBlock = 32;           // values per block (every format's sub-block, Q6_K's 2)
constexpr int kGroupBlocks = 8;      // blocks per group of 256 values (a K-quant super-block)
constexpr int kSteps = 8;            // dot products per block: 4 values of each column each
constexpr int kTileCols = 16;        // output columns per tile: one per lane
constexpr int kTileRows = 8;         // input rows run over each decoded block
constexpr size_t kInputBlockBytes = 256 << 10;  // quantized input rows per pass over the weights

// ---------------------------------------------------------------------------
// The packed layout (Prepare writes it, the tiles read it).
//
// A span's rows go in tiles of 16 columns (the last padded with zero
// columns); lane j of every vector below is column j. A tile is, per block of
// 32 values: for the K-quants at each group of 256, a group header; then the
// block's header; then its codes in 8 steps, step t holding each column's
// values 4t .. 4t + 3 (byte 4j + i: column j's value 4t + i), so that one
// u8 x s8 dot product against the input's 4 values, broadcast, gives lane j
// column j's 4 products. Eight of them sum the block in int32.
//
// Group headers (K-quants):  Q4_K, Q5_K: f16 d[16], f16 dmin[16];  Q6_K: f16 d[16]
// Block headers:  Q8_0, Q4_0, Q5_0: f16 d[16];  Q4_1, Q5_1: f16 d[16], f16 m[16]
//                 Q4_K, Q5_K: u8 sc[16], u8 m[16] (6 bits, unpacked)
//                 Q6_K: s8 sc[2][16] (its sub-blocks of 16 values)
// Codes (u8, the format's offset not taken out):
//   Q8_0:  8 steps of 64 bytes (s8 + 128)
//   Q4_*:  4 x 64 bytes: steps 2u and 2u + 1 in the low and high nibbles
//   Q5_*:  as Q4_*, then per step 8 bytes of fifth bits (bit i: byte i)
//   Q6_K:  as Q4_*, then 2 x 64 bytes of 2 high bits: steps 4v .. 4v + 3 in
//          bits 0-1, 2-3, 4-5, 6-7
// Bytes equal the file's for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and Q6_K; Q4_K and
// Q5_K take 4 more per 256 values, their 12 bytes of scales unpacked to 16.
// ---------------------------------------------------------------------------

// The K-quants take their inputs with one scale per 256 values (ggml's
// Q8_K), the others with one per 32 (its Q8_0).
constexpr bool PerGroupInput(BlockFormat f) {
  return f == BlockFormat::kQ4_K || f == BlockFormat::kQ5_K || f == BlockFormat::kQ6_K;
}

int GroupHeaderBytes(BlockFormat f) {
  switch (f) {
    case BlockFormat::kQ4_K:
    case BlockFormat::kQ5_K: return 64;
    case BlockFormat::kQ6_K: return 32;
    default: return 0;
  }
}

int BlockHeaderBytes(BlockFormat f) {
  switch (f) {
    case BlockFormat::kQ4_1:
    case BlockFormat::kQ5_1: return 64;
    default: return 32;
  }
}

int CodeBytes(BlockFormat f) {
  switch (f) {
    case BlockFormat::kQ8_0: return 512;
    case BlockFormat::kQ6_K: return 384;
    case BlockFormat::kQ5_0:
    case BlockFormat::kQ5_1:
    case BlockFormat::kQ5_K: return 320;
    default: return 256;
  }
}

int64_t TileBytes(BlockFormat f, int K) {
  const int blocks = K / kBlock, groups = PerGroupInput(f) ? blocks / kGroupBlocks : 0;
  return static_cast<int64_t>(groups) * GroupHeaderBytes(f) +
         static_cast<int64_t>(blocks) * (BlockHeaderBytes(f) + CodeBytes(f));
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
    const uint8_t* data;  // ceil(rows / 16) tiles
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

// Tile headers for block b from the rows of its columns (nullptr: padding):
// the group header (K-quants, at b % 8 == 0) into `group`, the block header
// into `block`.
void PackHeaders(BlockFormat f, const uint8_t* const* rows, int b, uint8_t* group, uint8_t* block) {
  const int bytes = InfoOf(f).block_bytes;
  for (int j = 0; j < kTileCols; ++j) {
    const uint8_t* r = rows[j];
    if (r == nullptr) continue;
    switch (f) {
      case BlockFormat::kQ8_0:
      case BlockFormat::kQ4_0:
      case BlockFormat::kQ5_0:
        PutHalfAt(block + 2 * j, HalfAt(r + bytes * b));
        break;
      case BlockFormat::kQ4_1:
      case BlockFormat::kQ5_1:
        PutHalfAt(block + 2 * j, HalfAt(r + bytes * b));
        PutHalfAt(block + 32 + 2 * j, HalfAt(r + bytes * b + 2));
        break;
      case BlockFormat::kQ4_K:
      case BlockFormat::kQ5_K: {
        const uint8_t* s = r + bytes * (b / kGroupBlocks);
        if (group != nullptr) {
          PutHalfAt(group + 2 * j, HalfAt(s));
          PutHalfAt(group + 32 + 2 * j, HalfAt(s + 2));
        }
        ScaleMinK4(b % kGroupBlocks, s + 4, block + j, block + 16 + j);
        break;
      }
      case BlockFormat::kQ6_K: {
        const uint8_t* s = r + bytes * (b / kGroupBlocks);
        if (group != nullptr) PutHalfAt(group + 2 * j, HalfAt(s + 208));
        block[j] = s[192 + 2 * (b % kGroupBlocks)];
        block[16 + j] = s[192 + 2 * (b % kGroupBlocks) + 1];
        break;
      }
    }
  }
}

// Tile codes of block b from the columns' unpacked codes (nullptr: padding).
void PackCodes(BlockFormat f, const uint8_t* const* codes, int b, uint8_t* out) {
  // step[t][4j + i]: column j's value 4t + i of the block.
  uint8_t step[kSteps][64] = {};
  for (int j = 0; j < kTileCols; ++j) {
    if (codes[j] == nullptr) continue;
    for (int t = 0; t < kSteps; ++t) {
      for (int i = 0; i < 4; ++i) step[t][4 * j + i] = codes[j][kBlock * b + 4 * t + i];
    }
  }
  if (f == BlockFormat::kQ8_0) {
    std::memcpy(out, step, sizeof(step));
    return;
  }
  for (int u = 0; u < kSteps / 2; ++u) {
    for (int l = 0; l < 64; ++l) out[64 * u + l] = static_cast<uint8_t>((step[2 * u][l] & 0xF) | ((step[2 * u + 1][l] & 0xF) << 4));
  }
  if (f == BlockFormat::kQ5_0 || f == BlockFormat::kQ5_1 || f == BlockFormat::kQ5_K) {
    for (int t = 0; t < kSteps; ++t) {
      uint64_t fifth = 0;
      for (int l = 0; l < 64; ++l) fifth |= static_cast<uint64_t>((step[t][l] >> 4) & 1) << l;
      std::memcpy(out + 256 + 8 * t, &fifth, 8);
    }
  } else if (f == BlockFormat::kQ6_K) {
    for (int v = 0; v < 2; ++v) {
      for (int l = 0; l < 64; ++l) {
        uint8_t high = 0;
        for (int i = 0; i < 4; ++i) high = static_cast<uint8_t>(high | (((step[4 * v + i][l] >> 4) & 3) << (2 * i)));
        out[256 + 64 * v + l] = high;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// The kernels.
// ---------------------------------------------------------------------------

// One block's weight scales per lane: the block's (Q6_K: its first 16
// values'), the second 16 values' (Q6_K), and the minimum's.
struct BlockScales {
  __m512 s0, s1, min;
};

// The group header's scales per lane (K-quants).
struct GroupScales {
  __m512 d, dmin;
};

FLOVER_VNNI inline __m512 Halves(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

FLOVER_VNNI inline __m512 Bytes(const uint8_t* p, bool is_signed) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm512_cvtepi32_ps(is_signed ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v));
}

// The low (T even) or high nibbles of the 64 bytes at p.
template <int T>
FLOVER_VNNI inline __m512i Nibbles(const uint8_t* p) {
  const __m512i v = _mm512_loadu_si512(p + 64 * (T / 2));
  return _mm512_and_si512(T % 2 == 0 ? v : _mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F));
}

template <BlockFormat F>
struct Format;

template <>
struct Format<BlockFormat::kQ8_0> {
  static constexpr int kShift = 7;  // codes biased by 128
  static constexpr bool kMin = false;
  FLOVER_VNNI static BlockScales Scales(const uint8_t* h, const GroupScales&) {
    return {Halves(h), _mm512_setzero_ps(), _mm512_setzero_ps()};
  }
  template <int T>
  FLOVER_VNNI static __m512i Step(const uint8_t* p) {
    return _mm512_loadu_si512(p + 64 * T);
  }
};

template <>
struct Format<BlockFormat::kQ4_0> {
  static constexpr int kShift = 3;  // codes - 8
  static constexpr bool kMin = false;
  FLOVER_VNNI static BlockScales Scales(const uint8_t* h, const GroupScales& g) {
    return Format<BlockFormat::kQ8_0>::Scales(h, g);
  }
  template <int T>
  FLOVER_VNNI static __m512i Step(const uint8_t* p) {
    return Nibbles<T>(p);
  }
};

template <>
struct Format<BlockFormat::kQ4_1> {
  static constexpr int kShift = -1;  // no offset: a minimum
  static constexpr bool kMin = true;
  FLOVER_VNNI static BlockScales Scales(const uint8_t* h, const GroupScales&) {
    return {Halves(h), _mm512_setzero_ps(), Halves(h + 32)};
  }
  template <int T>
  FLOVER_VNNI static __m512i Step(const uint8_t* p) {
    return Nibbles<T>(p);
  }
};

template <>
struct Format<BlockFormat::kQ4_K> {
  static constexpr int kShift = -1;
  static constexpr bool kMin = true;
  FLOVER_VNNI static GroupScales Group(const uint8_t* h) { return {Halves(h), Halves(h + 32)}; }
  // As ggml: d1 = d * sc, m1 = dmin * m; w = d1 * q - m1.
  FLOVER_VNNI static BlockScales Scales(const uint8_t* h, const GroupScales& g) {
    return {_mm512_mul_ps(g.d, Bytes(h, false)), _mm512_setzero_ps(),
            _mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(g.dmin, Bytes(h + 16, false)))};
  }
  template <int T>
  FLOVER_VNNI static __m512i Step(const uint8_t* p) {
    return Nibbles<T>(p);
  }
};

// Q5_*: the low nibbles as Q4_*, plus 16 where the step's fifth bits say.
template <int T>
FLOVER_VNNI inline __m512i FiveBits(const uint8_t* p) {
  uint64_t fifth;
  std::memcpy(&fifth, p + 256 + 8 * T, 8);
  const __m512i low = Nibbles<T>(p);
  return _mm512_mask_add_epi8(low, _cvtu64_mask64(fifth), low, _mm512_set1_epi8(16));
}

template <>
struct Format<BlockFormat::kQ5_0> {
  static constexpr int kShift = 4;  // codes - 16
  static constexpr bool kMin = false;
  FLOVER_VNNI static BlockScales Scales(const uint8_t* h, const GroupScales& g) {
    return Format<BlockFormat::kQ8_0>::Scales(h, g);
  }
  template <int T>
  FLOVER_VNNI static __m512i Step(const uint8_t* p) {
    return FiveBits<T>(p);
  }
};

template <>
struct Format<BlockFormat::kQ5_1> {
  static constexpr int kShift = -1;
  static constexpr bool kMin = true;
  FLOVER_VNNI static BlockScales Scales(const uint8_t* h, const GroupScales& g) {
    return Format<BlockFormat::kQ4_1>::Scales(h, g);
  }
  template <int T>
  FLOVER_VNNI static __m512i Step(const uint8_t* p) {
    return FiveBits<T>(p);
  }
};

template <>
struct Format<BlockFormat::kQ5_K> {
  static constexpr int kShift = -1;
  static constexpr bool kMin = true;
  FLOVER_VNNI static GroupScales Group(const uint8_t* h) { return Format<BlockFormat::kQ4_K>::Group(h); }
  FLOVER_VNNI static BlockScales Scales(const uint8_t* h, const GroupScales& g) {
    return Format<BlockFormat::kQ4_K>::Scales(h, g);
  }
  template <int T>
  FLOVER_VNNI static __m512i Step(const uint8_t* p) {
    return FiveBits<T>(p);
  }
};

template <>
struct Format<BlockFormat::kQ6_K> {
  static constexpr int kShift = 5;  // codes - 32
  static constexpr bool kMin = false;
  FLOVER_VNNI static GroupScales Group(const uint8_t* h) { return {Halves(h), _mm512_setzero_ps()}; }
  // As ggml: (d * sc) * q, the scale product in float32.
  FLOVER_VNNI static BlockScales Scales(const uint8_t* h, const GroupScales& g) {
    return {_mm512_mul_ps(g.d, Bytes(h, true)), _mm512_mul_ps(g.d, Bytes(h + 16, true)), _mm512_setzero_ps()};
  }
  template <int T>
  FLOVER_VNNI static __m512i Step(const uint8_t* p) {
    const __m512i high = _mm512_loadu_si512(p + 256 + 64 * (T / 4));
    constexpr int kUp = 4 - 2 * (T % 4);  // bits 2i, 2i + 1 to bits 4, 5
    const __m512i moved = kUp > 0 ? _mm512_slli_epi16(high, kUp > 0 ? kUp : 0)
                                  : _mm512_srli_epi16(high, kUp < 0 ? -kUp : 0);
    return _mm512_or_si512(Nibbles<T>(p), _mm512_and_si512(moved, _mm512_set1_epi8(0x30)));
  }
};

// 4 input codes read as one int32 (the input is int8; may_alias says so).
typedef int32_t __attribute__((may_alias)) FourCodes;

// dot[r] += steps [T0, T1) of the block at `codes` times row r's codes.
template <typename Fmt, int R, int T0, int T1>
FLOVER_VNNI inline void Steps(const uint8_t* codes, const int8_t* const* x, __m512i* dot) {
  if constexpr (T0 < T1) {
    const __m512i w = Fmt::template Step<T0>(codes);
    // The input's 4 codes broadcast from memory into vpdpbusd itself (GCC
    // 12 does not fold _mm512_set1_epi32 into it: a separate broadcast per
    // product, 3-5% slower measured).
    for (int r = 0; r < R; ++r) {
      asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(dot[r]) : "v"(w), "m"(*reinterpret_cast<const FourCodes*>(x[r] + 4 * T0)));
    }
    Steps<Fmt, R, T0 + 1, T1>(codes, x, dot);
  }
}

// sums[r][j] of a tile's 16 columns for its rows [0, R): per block, in
// order, acc += float(dot) * (w_scale * d_x), then acc += w_min * (d_x * s_x).
template <BlockFormat F, int R>
FLOVER_VNNI void Tile(const int8_t* const* xrows, const BlockLinear::InputBlock* const* xblocks, const uint8_t* tile,
                      int blocks, float* sums /* [R][16] */) {
  using Fmt = Format<F>;
  constexpr bool kOffset = Fmt::kShift >= 0;
  constexpr unsigned kShift = kOffset ? Fmt::kShift : 0;
  const int group_header = GroupHeaderBytes(F), block_header = BlockHeaderBytes(F), code_bytes = CodeBytes(F);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  GroupScales group{_mm512_setzero_ps(), _mm512_setzero_ps()};
  const uint8_t* at = tile;
  for (int b = 0; b < blocks; ++b) {
    if constexpr (PerGroupInput(F)) {
      if (b % kGroupBlocks == 0) {
        group = Fmt::Group(at);
        at += group_header;
      }
    }
    const BlockScales scales = Fmt::Scales(at, group);
    at += block_header;
    const int8_t* x[R];
    for (int r = 0; r < R; ++r) x[r] = xrows[r] + kBlock * b;
    __m512i dot[R];
    if constexpr (F == BlockFormat::kQ6_K) {
      // Two sub-blocks of 16 values (steps 0-3, 4-7), each with its scale.
      for (int r = 0; r < R; ++r) dot[r] = _mm512_set1_epi32(xblocks[r][b].neg[0] << kShift);
      Steps<Fmt, R, 0, 4>(at, x, dot);
      for (int r = 0; r < R; ++r) {
        const __m512 s = _mm512_mul_ps(scales.s0, _mm512_set1_ps(xblocks[r][b].dx));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r]), s, acc[r]);
        dot[r] = _mm512_set1_epi32(xblocks[r][b].neg[1] << kShift);
      }
      Steps<Fmt, R, 4, 8>(at, x, dot);
      for (int r = 0; r < R; ++r) {
        const __m512 s = _mm512_mul_ps(scales.s1, _mm512_set1_ps(xblocks[r][b].dx));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r]), s, acc[r]);
      }
    } else {
      // The codes' offset out of the sum: -offset * (the input codes' sum).
      for (int r = 0; r < R; ++r) {
        dot[r] = kOffset ? _mm512_set1_epi32((xblocks[r][b].neg[0] + xblocks[r][b].neg[1]) << kShift)
                         : _mm512_setzero_si512();
      }
      Steps<Fmt, R, 0, 8>(at, x, dot);
      for (int r = 0; r < R; ++r) {
        const __m512 s = _mm512_mul_ps(scales.s0, _mm512_set1_ps(xblocks[r][b].dx));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r]), s, acc[r]);
        if constexpr (Fmt::kMin) acc[r] = _mm512_fmadd_ps(scales.min, _mm512_set1_ps(xblocks[r][b].sum), acc[r]);
      }
    }
    at += code_bytes;
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(sums + kTileCols * r, acc[r]);
}

using TileFn = void (*)(const int8_t* const*, const BlockLinear::InputBlock* const*, const uint8_t*, int, float*);

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

}  // namespace

absl::Status BlockLinear::CheckSupported() {
  if (!CpuIsa().avx512_vnni) {
    return absl::FailedPreconditionError(absl::StrCat(
        "quantized blocks need AVX-512 VNNI, which isa ", CpuIsaName(), " lacks"));
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
    const int unit = std::max(64, InfoOf(s.format).block_values);
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
  const int blocks = K / kBlock;
  int row = 0;
  for (int i = 0; i < w.num_spans; ++i) {
    const BlockSpan& s = w.spans[i];
    const int64_t row_bytes = BlockRowBytes(s.format, K), tile_bytes = TileBytes(s.format, K);
    const int tiles = (s.rows + kTileCols - 1) / kTileCols;
    if (s.rows > 0) out->spans.push_back({s.format, row, s.rows, tile_bytes, dst});
    const int group_header = GroupHeaderBytes(s.format), block_header = BlockHeaderBytes(s.format);
    const int code_bytes = CodeBytes(s.format);
    const bool groups = PerGroupInput(s.format);
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
      std::memset(at, 0, tile_bytes);
      for (int b = 0; b < blocks; ++b) {
        uint8_t* group = nullptr;
        if (groups && b % kGroupBlocks == 0) {
          group = at;
          at += group_header;
        }
        PackHeaders(s.format, rows, b, group, at);
        at += block_header;
        PackCodes(s.format, codes, b, at);
        at += code_bytes;
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

FLOVER_VNNI void BlockLinear::QuantizeRow(const float* x, int K, int8_t* codes, InputBlock* blocks,
                                          int scale_values) {
  const __m512i mag = _mm512_set1_epi32(0x7fffffff);
  const int per_scale = scale_values / kBlock;
  for (int s0 = 0; s0 < K / kBlock; s0 += per_scale) {
    // max |x| over the scale's blocks, on the bit patterns with the sign
    // cleared (a NaN input gives a NaN scale, so NaN results).
    __m512i top = _mm512_setzero_si512();
    for (int i = kBlock * s0; i < kBlock * (s0 + per_scale); i += 16) {
      top = _mm512_max_epu32(top, _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x + i)), mag));
    }
    const uint32_t bits = static_cast<uint32_t>(_mm512_reduce_max_epu32(top));
    float amax;
    std::memcpy(&amax, &bits, 4);
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    const float dx = amax / 127.0f;
    const __m512 s = _mm512_set1_ps(inv);
    const __m512i lim = _mm512_set1_epi32(127);
    for (int b = s0; b < s0 + per_scale; ++b) {
      const float* v = x + kBlock * b;
      __m512i c[2];
      for (int h = 0; h < 2; ++h) {
        const __m512i q = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(v + 16 * h), s),
                                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        c[h] = _mm512_max_epi32(_mm512_min_epi32(q, lim), _mm512_set1_epi32(-127));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + kBlock * b + 16 * h), _mm512_cvtepi32_epi8(c[h]));
      }
      InputBlock& out = blocks[b];
      out.dx = dx;
      out.neg[0] = -_mm512_reduce_add_epi32(c[0]);
      out.neg[1] = -_mm512_reduce_add_epi32(c[1]);
      out.sum = dx * static_cast<float>(-(out.neg[0] + out.neg[1]));
    }
  }
}

void BlockLinear::Run(const float* x, int M, const Weight& weight, const float* bias,
                      Epilogue epilogue, float* out) {
  const auto& w = static_cast<const BlockWeight&>(weight);
  const int K = w.k_, N = w.n_, blocks = K / kBlock;
  // The inputs quantized as the spans' formats take them (both ways when a
  // weight stacks K-quants and others).
  bool per_32 = false, per_256 = false;
  for (const BlockWeight::Span& span : w.spans) (PerGroupInput(span.format) ? per_256 : per_32) = true;
  for (int scale_values : {32, 256}) {
    if (!(scale_values == 32 ? per_32 : per_256)) continue;
    Input& in = scale_values == 32 ? x32_ : x256_;
    in.codes.resize(static_cast<size_t>(M) * K);
    in.blocks.resize(static_cast<size_t>(M) * blocks);
    // One row (decode at low load) needs no parallel region.
#pragma omp parallel for schedule(static) if (M > 1)
    for (int m = 0; m < M; ++m) {
      QuantizeRow(x + static_cast<int64_t>(m) * K, K, in.codes.data() + static_cast<int64_t>(m) * K,
                  in.blocks.data() + static_cast<int64_t>(m) * blocks, scale_values);
    }
  }

  // Rows go in blocks whose quantized inputs stay in L2 while every tile
  // runs over them (at a prefill's hundreds of rows they would not).
  const size_t row_bytes = (K + blocks * sizeof(InputBlock)) * (per_32 && per_256 ? 2 : 1);
  const int rows_per_block =
      std::max(kTileRows, static_cast<int>(kInputBlockBytes / row_bytes) / kTileRows * kTileRows);
#pragma omp parallel
  for (int mb = 0; mb < M; mb += rows_per_block) {
    const int m_end = std::min(M, mb + rows_per_block);
    for (const BlockWeight::Span& span : w.spans) {
      const int tiles = (span.rows + kTileCols - 1) / kTileCols;
      const Input& in = PerGroupInput(span.format) ? x256_ : x32_;
#pragma omp for schedule(static)
      for (int t = 0; t < tiles; ++t) {
        const int n0 = t * kTileCols;
        const int cols = std::min(kTileCols, span.rows - n0);
        const uint8_t* tile = span.data + t * span.tile_bytes;
        for (int m0 = mb; m0 < m_end; m0 += kTileRows) {
          const int rows = std::min(kTileRows, m_end - m0);
          const int8_t* xrows[kTileRows];
          const InputBlock* xblocks[kTileRows];
          for (int r = 0; r < rows; ++r) {
            xrows[r] = in.codes.data() + static_cast<int64_t>(m0 + r) * K;
            xblocks[r] = in.blocks.data() + static_cast<int64_t>(m0 + r) * blocks;
          }
          alignas(64) float sums[kTileRows * kTileCols];
          TileFor(span.format, rows)(xrows, xblocks, tile, blocks, sums);
          for (int r = 0; r < rows; ++r) {
            float* o = out + static_cast<int64_t>(m0 + r) * N;
            for (int j = 0; j < cols; ++j) FinishOutput(sums[r * kTileCols + j], bias, span.row_begin + n0 + j, epilogue, o);
          }
        }
      }
    }
  }
}

}  // namespace flover::kernels
