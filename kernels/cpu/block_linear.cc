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
// is the one written, so the arithmetic is the header's, whatever the tile
// or instruction set.

#define FLOVER_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

namespace flover::kernels {
namespace {

constexpr int kBlock = 32;           // values per block (every format's sub-block, Q6_K's 2)
constexpr int kGroupBlocks = 8;      // blocks per group of 256 values (a K-quant super-block)
constexpr int kSteps = 8;            // dot products per block: 4 values of each column each
constexpr int kTileCols = 16;        // output columns per tile: one per lane
constexpr int kTileRows = 8;         // input rows run over each decoded block (at most)
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
//                 MXFP4: u8 e[16] (e8m0)
//                 Q4_K, Q5_K: u8 sc[16], u8 m[16] (6 bits, unpacked)
//                 Q6_K: s8 sc[2][16] (its sub-blocks of 16 values)
// Codes (u8, the format's offset not taken out):
//   Q8_0:  8 steps of 64 bytes (s8 + 128)
//   Q4_*:  4 x 64 bytes: steps 2u and 2u + 1 in the low and high nibbles
//   MXFP4: as Q4_*, the nibbles the file's e2m1 codes (the tiles look their
//          values up, biased by 16: 4 .. 28)
//   Q5_*:  as Q4_*, then per step 8 bytes of fifth bits (bit i: byte i)
//   Q6_K:  as Q4_*, then 2 x 64 bytes of 2 high bits: steps 4v .. 4v + 3 in
//          bits 0-1, 2-3, 4-5, 6-7
// Bytes equal the file's for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q6_K and MXFP4; Q4_K and
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
    case BlockFormat::kMXFP4: return 16;
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
    case BlockFormat::kQ4_1:
    case BlockFormat::kMXFP4: {
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
      case BlockFormat::kMXFP4:
        block[j] = r[bytes * b];
        break;
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
// The kernels: block_linear_tiles.inc, once per instruction set, over 16
// lanes as one AVX-512 register or two AVX2 ones.
// ---------------------------------------------------------------------------

using TileFn = void (*)(const int8_t* const*, const BlockLinear::InputBlock* const*, const uint8_t*, int, float*);

// 4 input codes read as one int32 (the input is int8; may_alias says so).
typedef int32_t __attribute__((may_alias)) FourCodes;

// For a V whose dot products are VNNI's (exact in int32, Q8_0's biased codes
// included): the members the tiles' AVX2 path names, never called here (the
// V still says `using P = I`).
struct VnniDots {
  static constexpr bool kExactQ8 = true;
  static constexpr bool kPairSums = false;
  template <typename I>
  static I Unbiased(I w) { return w; }
  template <typename I>
  static I DotSigned(I dot, I, const int8_t*) { return dot; }
  template <typename I>
  static I Pairs(I w, const int8_t*) { return w; }
  template <typename I>
  static I PairsSigned(I w, const int8_t*) { return w; }
  template <typename I>
  static I AddPairs(I a, I) { return a; }
  template <typename I>
  static I Widen(I dot, I) { return dot; }
};

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")
namespace avx512_vnni {

struct V : VnniDots {
  using F = __m512;
  using I = __m512i;
  using P = I;
  static F Zero() { return _mm512_setzero_ps(); }
  static F Set1(float v) { return _mm512_set1_ps(v); }
  static I Set1I(int32_t v) { return _mm512_set1_epi32(v); }
  static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F Sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F Fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F ToFloat(I v) { return _mm512_cvtepi32_ps(v); }
  static void Store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F Halves(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static F Bytes(const uint8_t* p, bool is_signed) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm512_cvtepi32_ps(is_signed ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v));
  }
  // MXFP4: 16 e8m0 scales as ggml_e8m0_to_fp32_half makes them (the bits
  // 0x00200000 << e below e = 2, else (e - 1) << 23).
  static F E8m0Half(const uint8_t* p) {
    const I e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const I normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const I tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __mmask16 low = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(low, normal, tiny));
  }
  // MXFP4: each byte's value in a table of 16 (the nibbles index it).
  static I Lookup(I nibbles, const int8_t* table) {
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(table));
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(t), nibbles);
  }
  static I Load(const uint8_t* p) { return _mm512_loadu_si512(p); }
  // The low (T even) or high nibbles of the 64 bytes of step pair T / 2.
  template <int T>
  static I Nibbles(const uint8_t* p) {
    const I v = Load(p + 64 * (T / 2));
    return _mm512_and_si512(T % 2 == 0 ? v : _mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F));
  }
  // Q5_*: the low nibbles, plus 16 where the step's fifth bits say.
  template <int T>
  static I FiveBits(const uint8_t* p) {
    uint64_t fifth;
    std::memcpy(&fifth, p + 256 + 8 * T, 8);
    const I low = Nibbles<T>(p);
    return _mm512_mask_add_epi8(low, _cvtu64_mask64(fifth), low, _mm512_set1_epi8(16));
  }
  // Q6_K: the low nibbles, or'd with the step's 2 high bits moved to bits 4-5.
  template <int T>
  static I SixBits(const uint8_t* p) {
    const I high = Load(p + 256 + 64 * (T / 4));
    constexpr int kUp = 4 - 2 * (T % 4);  // bits 2i, 2i + 1 to bits 4, 5
    const I moved = kUp > 0 ? _mm512_slli_epi16(high, kUp > 0 ? kUp : 0)
                            : _mm512_srli_epi16(high, kUp < 0 ? -kUp : 0);
    return _mm512_or_si512(Nibbles<T>(p), _mm512_and_si512(moved, _mm512_set1_epi8(0x30)));
  }
  static I Dot(I dot, I w, const int8_t* x) {
    // The input's 4 codes broadcast from memory into vpdpbusd itself (GCC
    // 12 does not fold _mm512_set1_epi32 into it: a separate broadcast per
    // product, 3-5% slower measured).
    asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(dot) : "v"(w), "m"(*reinterpret_cast<const FourCodes*>(x)));
    return dot;
  }
};

#include "kernels/cpu/block_linear_tiles.inc"

}  // namespace avx512_vnni
#pragma GCC pop_options

// AVX2 (the tree's baseline, x86-64-v3): a tile's 16 lanes as two halves of
// 8 (columns 0-7, then 8-15), each run over the whole row on its own, with
// R accumulators and R pair sums in registers (one 16-lane pass over two
// registers spilled at 4 rows; measured ~10% slower).
template <int kHalf>
struct V8Base {
  static constexpr int kRows = 6;
  using F = __m256;
  using I = __m256i;
  static F Zero() { return _mm256_setzero_ps(); }
  static F Set1(float v) { return _mm256_set1_ps(v); }
  static I Set1I(int32_t v) { return _mm256_set1_epi32(v); }
  static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F Sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F Fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F ToFloat(I v) { return _mm256_cvtepi32_ps(v); }
  static void Store(float* p, F v) { _mm256_storeu_ps(p + 8 * kHalf, v); }
  static F Halves(const uint8_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * kHalf)));
  }
  static F Bytes(const uint8_t* p, bool is_signed) {
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * kHalf));
    return _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v));
  }
  static F E8m0Half(const uint8_t* p) {
    const I e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * kHalf)));
    const I normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const I tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const I low = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, low));
  }
  static I Lookup(I nibbles, const int8_t* table) {
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(table));
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(t), nibbles);
  }
  static I Load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * kHalf)); }
  template <int T>
  static I Nibbles(const uint8_t* p) {
    const I v = Load(p + 64 * (T / 2));
    return _mm256_and_si256(T % 2 == 0 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
  }
  // 32 bits to 32 bytes: 0xFF where the bit is set (byte i: bit i).
  static __m256i BitsToBytes(uint32_t bits) {
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int32_t>(bits)),
        _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
    return _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
  }
  template <int T>
  static I FiveBits(const uint8_t* p) {
    uint64_t fifth;
    std::memcpy(&fifth, p + 256 + 8 * T, 8);
    const __m256i set = BitsToBytes(static_cast<uint32_t>(fifth >> (32 * kHalf)));
    return _mm256_add_epi8(Nibbles<T>(p), _mm256_and_si256(set, _mm256_set1_epi8(16)));
  }
  template <int T>
  static I SixBits(const uint8_t* p) {
    const I high = Load(p + 256 + 64 * (T / 4));
    constexpr int kUp = 4 - 2 * (T % 4);
    I moved = high;
    if constexpr (kUp > 0) moved = _mm256_slli_epi16(high, kUp);
    if constexpr (kUp < 0) moved = _mm256_srli_epi16(high, -kUp);
    return _mm256_or_si256(Nibbles<T>(p), _mm256_and_si256(moved, _mm256_set1_epi8(0x30)));
  }
  static __m256i Four(const int8_t* x) { return _mm256_set1_epi32(*reinterpret_cast<const FourCodes*>(x)); }
  // Q8_0's codes as s8 (they are stored biased by 128).
  static I Unbiased(I w) { return _mm256_xor_si256(w, _mm256_set1_epi8(static_cast<char>(0x80))); }
};

// u8 x s8 through 16-bit pair sums (vpmaddubsw), exact for codes below 64
// (2 * 63 * 127 < 2^15), added up over a run of steps while they stay
// below 2^15 (block_linear_tiles.inc, kRunSteps), then pairs of pairs into
// int32 (vpmaddwd).
template <int kHalf>
struct V8 : V8Base<kHalf> {
  using I = __m256i;
  using P = __m256i;  // 16 int16 pair sums
  static constexpr bool kExactQ8 = false;
  static constexpr bool kPairSums = true;
  static P Pairs(I w, const int8_t* x) { return _mm256_maddubs_epi16(w, V8Base<kHalf>::Four(x)); }
  // s8 x s8 as |w| x (x with w's sign): 2 * 128 * 127 < 2^15, exact.
  static P PairsSigned(I w, const int8_t* x) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(V8Base<kHalf>::Four(x), w));
  }
  // The empty asm keeps each sum where it is written: left free, GCC
  // reassociates a run's adds into a tree that holds every step's pair sums
  // at once, and spilled them (135 stack accesses in a 6-row Q4_K tile;
  // with it 43, and Q4_K 159 -> 215 GMAC/s at 512 rows).
  static P AddPairs(P a, P b) {
    P sum = _mm256_add_epi16(a, b);
    asm("" : "+x"(sum));
    return sum;
  }
  static I Widen(I dot, P p) {
    I sum = _mm256_add_epi32(dot, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
    asm("" : "+x"(sum));  // as AddPairs: one run after another
    return sum;
  }
  static I Dot(I dot, I, const int8_t*) { return dot; }        // never called: kPairSums
  static I DotSigned(I dot, I, const int8_t*) { return dot; }  // never called: kPairSums
};

namespace avx2_lo {
using V = V8<0>;
#include "kernels/cpu/block_linear_tiles.inc"
}  // namespace avx2_lo

namespace avx2_hi {
using V = V8<1>;
#include "kernels/cpu/block_linear_tiles.inc"
}  // namespace avx2_hi

// A tile's 16 lanes as two AVX2 registers (V8Base's halves), for the tiles
// that run one pass over both: the element-wise ops, half by half.
struct TwoHalves {
  using L = V8Base<0>;
  using H = V8Base<1>;
  struct F {
    __m256 lo, hi;
  };
  struct I {
    __m256i lo, hi;
  };
  static F Zero() { return {L::Zero(), L::Zero()}; }
  static F Set1(float v) { return {L::Set1(v), L::Set1(v)}; }
  static I Set1I(int32_t v) { return {L::Set1I(v), L::Set1I(v)}; }
  static F Mul(F a, F b) { return {L::Mul(a.lo, b.lo), L::Mul(a.hi, b.hi)}; }
  static F Sub(F a, F b) { return {L::Sub(a.lo, b.lo), L::Sub(a.hi, b.hi)}; }
  static F Fmadd(F a, F b, F c) { return {L::Fmadd(a.lo, b.lo, c.lo), L::Fmadd(a.hi, b.hi, c.hi)}; }
  static F ToFloat(I v) { return {L::ToFloat(v.lo), L::ToFloat(v.hi)}; }
  static void Store(float* p, F v) {
    L::Store(p, v.lo);
    H::Store(p, v.hi);
  }
  static F Halves(const uint8_t* p) { return {L::Halves(p), H::Halves(p)}; }
  static F Bytes(const uint8_t* p, bool is_signed) { return {L::Bytes(p, is_signed), H::Bytes(p, is_signed)}; }
  static F E8m0Half(const uint8_t* p) { return {L::E8m0Half(p), H::E8m0Half(p)}; }
  static I Lookup(I nibbles, const int8_t* table) {
    return {L::Lookup(nibbles.lo, table), H::Lookup(nibbles.hi, table)};
  }
  static I Load(const uint8_t* p) { return {L::Load(p), H::Load(p)}; }
  template <int T>
  static I Nibbles(const uint8_t* p) { return {L::Nibbles<T>(p), H::Nibbles<T>(p)}; }
  template <int T>
  static I FiveBits(const uint8_t* p) { return {L::FiveBits<T>(p), H::FiveBits<T>(p)}; }
  template <int T>
  static I SixBits(const uint8_t* p) { return {L::SixBits<T>(p), H::SixBits<T>(p)}; }
};

// AVX2 for one or two rows: one pass of 16 lanes over two registers, as
// AVX-VNNI's tiles run, so each step's codes are decoded and each input
// broadcast once for both halves (from 4 rows on it spilled, so more rows
// take the two passes above). Same lanes, same order: bitwise the same sums.
struct V16Pairs : TwoHalves {
  // The rows up to which one pass beat two (block_linear_benchmark, 2048x8192,
  // µs at 1 / 2 rows, two passes -> one): Q4_K 117 -> 104 / 170 -> 200, Q6_K
  // 186 -> 168 / 253 -> 238, Q8_0 171 -> 144 / 235 -> 222, Q4_0 and Q4_1
  // ~107 -> 93 at 1 row; the 5-bit formats lost (Q5_K 211 -> 247: two
  // halves' fifth bits spread at once).
  static int OnePassRows(BlockFormat f) {
    switch (f) {
      case BlockFormat::kQ5_0:
      case BlockFormat::kQ5_1:
      case BlockFormat::kQ5_K: return 0;
      case BlockFormat::kQ6_K:
      case BlockFormat::kQ8_0: return 2;
      default: return 1;
    }
  }
  using W = V8<0>;  // the pair sums' ops, lane for lane
  static constexpr int kRows = 2;
  static constexpr bool kExactQ8 = false;
  static constexpr bool kPairSums = true;
  using P = I;
  static I Unbiased(I w) { return {W::Unbiased(w.lo), W::Unbiased(w.hi)}; }
  static P Pairs(I w, const int8_t* x) {
    const __m256i four = L::Four(x);
    return {_mm256_maddubs_epi16(w.lo, four), _mm256_maddubs_epi16(w.hi, four)};
  }
  static P PairsSigned(I w, const int8_t* x) { return {W::PairsSigned(w.lo, x), W::PairsSigned(w.hi, x)}; }
  static P AddPairs(P a, P b) { return {W::AddPairs(a.lo, b.lo), W::AddPairs(a.hi, b.hi)}; }
  static I Widen(I dot, P p) { return {W::Widen(dot.lo, p.lo), W::Widen(dot.hi, p.hi)}; }
  static I Dot(I dot, I, const int8_t*) { return dot; }        // never called: kPairSums
  static I DotSigned(I dot, I, const int8_t*) { return dot; }  // never called: kPairSums
};

namespace avx2_one_pass {
using V = V16Pairs;
#include "kernels/cpu/block_linear_tiles.inc"
}  // namespace avx2_one_pass

#pragma GCC push_options
#pragma GCC target("avxvnni")

// AVX-VNNI: one pass of 16 lanes over two registers (V8Base's halves), so
// each step's codes are decoded and each input broadcast once for both
// halves (measured: 290 GMAC/s against 250 as two passes of 8, Q4_0).
struct V16Vnni : TwoHalves, VnniDots {
  static constexpr int kRows = 4;
  using P = I;
  static I Dot(I dot, I w, const int8_t* x) {
    const __m256i four = L::Four(x);
    return {_mm256_dpbusd_avx_epi32(dot.lo, w.lo, four), _mm256_dpbusd_avx_epi32(dot.hi, w.hi, four)};
  }
};

namespace avx2_vnni {
using V = V16Vnni;
#include "kernels/cpu/block_linear_tiles.inc"
}  // namespace avx2_vnni

#pragma GCC pop_options

// Rows per tile: as many as keep the sums and dot products in registers
// (AVX2 has 16, AVX-512 32).
int TileRows(BlockLinear::Tiles tiles) {
  switch (tiles) {
    case BlockLinear::Tiles::kAvx512Vnni: return kTileRows;
    case BlockLinear::Tiles::kAvx2Vnni: return V16Vnni::kRows;
    case BlockLinear::Tiles::kAvx2: break;
  }
  return V8Base<0>::kRows;
}

// A tile's kernels: one for all 16 columns, or one per half of 8.
struct TileFns {
  TileFn first, second;  // second: null, or the columns 8-15
};

TileFns TileFor(BlockLinear::Tiles tiles, BlockFormat f, int rows) {
  switch (tiles) {
    case BlockLinear::Tiles::kAvx512Vnni: return {avx512_vnni::TileFor(f, rows), nullptr};
    case BlockLinear::Tiles::kAvx2Vnni: return {avx2_vnni::TileFor(f, rows), nullptr};
    case BlockLinear::Tiles::kAvx2: break;
  }
  if (rows <= V16Pairs::OnePassRows(f)) return {avx2_one_pass::TileFor(f, rows), nullptr};
  return {avx2_lo::TileFor(f, rows), avx2_hi::TileFor(f, rows)};
}

}  // namespace

absl::Status BlockLinear::CheckSupported() {
  // Every instruction set the kernels start on has tiles (cpu_isa.h).
  return CheckCpuIsa();
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

namespace {

// QuantizeRow with AVX-512.
FLOVER_AVX512 void QuantizeRowWide(const float* x, int K, int8_t* codes, BlockLinear::InputBlock* blocks,
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
      BlockLinear::InputBlock& out = blocks[b];
      out.dx = dx;
      out.neg[0] = -_mm512_reduce_add_epi32(c[0]);
      out.neg[1] = -_mm512_reduce_add_epi32(c[1]);
      out.sum = dx * static_cast<float>(-(out.neg[0] + out.neg[1]));
    }
  }
}

// QuantizeRow one value at a time, with the same operations: the same codes
// and scales bit for bit (cvtss2si rounds to nearest even, as the vector
// conversion does, and turns NaN into INT32_MIN, clamped to -127 the same).
void QuantizeRowNarrow(const float* x, int K, int8_t* codes, BlockLinear::InputBlock* blocks, int scale_values) {
  const int per_scale = scale_values / kBlock;
  for (int s0 = 0; s0 < K / kBlock; s0 += per_scale) {
    uint32_t bits = 0;
    for (int i = kBlock * s0; i < kBlock * (s0 + per_scale); ++i) {
      uint32_t u;
      std::memcpy(&u, x + i, 4);
      bits = std::max(bits, u & 0x7fffffffu);
    }
    float amax;
    std::memcpy(&amax, &bits, 4);
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    const float dx = amax / 127.0f;
    for (int b = s0; b < s0 + per_scale; ++b) {
      int32_t sum[2] = {0, 0};
      for (int i = 0; i < kBlock; ++i) {
        const int32_t q = std::clamp(_mm_cvtss_si32(_mm_set_ss(x[kBlock * b + i] * inv)), -127, 127);
        codes[kBlock * b + i] = static_cast<int8_t>(q);
        sum[i / 16] += q;
      }
      BlockLinear::InputBlock& out = blocks[b];
      out.dx = dx;
      out.neg[0] = -sum[0];
      out.neg[1] = -sum[1];
      out.sum = dx * static_cast<float>(-(out.neg[0] + out.neg[1]));
    }
  }
}

}  // namespace

bool BlockLinear::Runs(Tiles tiles) {
  switch (tiles) {
    case Tiles::kAvx512Vnni: return CpuIsa().avx512_vnni;
    case Tiles::kAvx2Vnni: return CpuIsa().avx_vnni;
    case Tiles::kAvx2: return CpuIsa().avx2;
  }
  return false;
}

void BlockLinear::QuantizeRow(const float* x, int K, int8_t* codes, InputBlock* blocks, int scale_values) {
  if (CpuIsa().avx512) {
    QuantizeRowWide(x, K, codes, blocks, scale_values);
  } else {
    QuantizeRowNarrow(x, K, codes, blocks, scale_values);
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
      (tiles_ == Tiles::kAvx512Vnni ? QuantizeRowWide : QuantizeRowNarrow)(
          x + static_cast<int64_t>(m) * K, K, in.codes.data() + static_cast<int64_t>(m) * K,
          in.blocks.data() + static_cast<int64_t>(m) * blocks, scale_values);
    }
  }

  // Rows go in blocks whose quantized inputs stay in L2 while every tile
  // runs over them (at a prefill's hundreds of rows they would not).
  const size_t row_bytes = (K + blocks * sizeof(InputBlock)) * (per_32 && per_256 ? 2 : 1);
  const int rows_per_block =
      std::max(kTileRows, static_cast<int>(kInputBlockBytes / row_bytes) / kTileRows * kTileRows);
  const int tile_rows = TileRows(tiles_);
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
        for (int m0 = mb; m0 < m_end; m0 += tile_rows) {
          const int rows = std::min(tile_rows, m_end - m0);
          const int8_t* xrows[kTileRows];
          const InputBlock* xblocks[kTileRows];
          for (int r = 0; r < rows; ++r) {
            xrows[r] = in.codes.data() + static_cast<int64_t>(m0 + r) * K;
            xblocks[r] = in.blocks.data() + static_cast<int64_t>(m0 + r) * blocks;
          }
          alignas(64) float sums[kTileRows * kTileCols];
          const TileFns fns = TileFor(tiles_, span.format, rows);
          fns.first(xrows, xblocks, tile, blocks, sums);
          if (fns.second != nullptr) fns.second(xrows, xblocks, tile, blocks, sums);
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
