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

constexpr int kChunk = 64;    // values per inner step: two 32-value input blocks
constexpr int kTileCols = 4;  // output columns decoded together
constexpr int kTileRows = 4;  // input rows run over each decoded chunk

class BlockWeight final : public Weight {
 public:
  int k() const override { return k_; }
  int n() const override { return n_; }

  int k_ = 0, n_ = 0;
  struct Span {
    BlockFormat format;
    int row_begin, rows;
    int64_t row_bytes;
    const uint8_t* data;  // rows * row_bytes
  };
  std::vector<Span> spans;
  std::shared_ptr<void> storage;
};

FLOVER_VNNI inline float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// One column's chunk of 64 weights: integer codes as u8, and per int32 lane
// the scale (and minimum) of the sub-block its 4 values belong to.
struct WChunk {
  __m512i u8;
  __m512 scale;
  __m512 min;
};

FLOVER_VNNI inline __m512 Halves(float lo, float hi) {
  return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(lo), _mm512_set1_ps(hi));
}

// [lo nibbles of 16 bytes a, hi nibbles of a, lo of b, hi of b]: two 32-value
// blocks of Q4_0 / Q4_1 in value order.
FLOVER_VNNI inline __m512i TwoNibbleBlocks(const uint8_t* a, const uint8_t* b) {
  const __m256i n = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
  const __m256i mask = _mm256_set1_epi8(0x0F);
  const __m256i lo = _mm256_and_si256(n, mask);                         // [lo a, lo b]
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(n, 4), mask);   // [hi a, hi b]
  const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
}

template <BlockFormat F>
struct Format;

template <>
struct Format<BlockFormat::kQ8_0> {
  static constexpr int kShift = 7;  // codes biased by 128
  static constexpr bool kMin = false;
  FLOVER_VNNI static WChunk Decode(const uint8_t* row, int c) {
    const uint8_t* a = row + (2 * c) * 34;
    const uint8_t* b = a + 34;
    const __m512i q = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 2))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)), 1);
    return {_mm512_xor_si512(q, _mm512_set1_epi8(static_cast<char>(0x80))), Halves(Half(a), Half(b)),
            _mm512_setzero_ps()};
  }
};

template <>
struct Format<BlockFormat::kQ4_0> {
  static constexpr int kShift = 3;  // codes - 8
  static constexpr bool kMin = false;
  FLOVER_VNNI static WChunk Decode(const uint8_t* row, int c) {
    const uint8_t* a = row + (2 * c) * 18;
    const uint8_t* b = a + 18;
    return {TwoNibbleBlocks(a + 2, b + 2), Halves(Half(a), Half(b)), _mm512_setzero_ps()};
  }
};

template <>
struct Format<BlockFormat::kQ4_1> {
  static constexpr int kShift = -1;  // no offset: a minimum
  static constexpr bool kMin = true;
  FLOVER_VNNI static WChunk Decode(const uint8_t* row, int c) {
    const uint8_t* a = row + (2 * c) * 20;
    const uint8_t* b = a + 20;
    return {TwoNibbleBlocks(a + 4, b + 4), Halves(Half(a), Half(b)),
            Halves(Half(a + 2), Half(b + 2))};
  }
};

// ggml's get_scale_min_k4: sub-block j's 6-bit scale and minimum.
inline void ScaleMinK4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

template <>
struct Format<BlockFormat::kQ4_K> {
  static constexpr int kShift = -1;
  static constexpr bool kMin = true;
  FLOVER_VNNI static WChunk Decode(const uint8_t* row, int c) {
    const uint8_t* s = row + (c >> 2) * 144;
    const int j = c & 3;
    const float d = Half(s), dmin = Half(s + 2);
    const __m256i n = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 16 + 32 * j));
    const __m256i mask = _mm256_set1_epi8(0x0F);
    const __m512i u8 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(n, mask)),
                                          _mm256_and_si256(_mm256_srli_epi16(n, 4), mask), 1);
    int sc0, m0, sc1, m1;
    ScaleMinK4(2 * j, s + 4, &sc0, &m0);
    ScaleMinK4(2 * j + 1, s + 4, &sc1, &m1);
    // As ggml: d1 = d * sc, m1 = dmin * m; w = d1 * q - m1.
    const float d0f = d * static_cast<float>(sc0), d1f = d * static_cast<float>(sc1);
    const float m0f = dmin * static_cast<float>(m0), m1f = dmin * static_cast<float>(m1);
    return {u8, Halves(d0f, d1f), Halves(-m0f, -m1f)};
  }
};

template <>
struct Format<BlockFormat::kQ6_K> {
  static constexpr int kShift = 5;  // codes - 32
  static constexpr bool kMin = false;
  FLOVER_VNNI static WChunk Decode(const uint8_t* row, int c) {
    const uint8_t* s = row + (c >> 2) * 210;
    const int half = (c >> 1) & 1, sub = c & 1;
    const __m512i ql = _mm512_loadu_si512(s + 64 * half);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 128 + 32 * half));
    const __m512i low = sub == 0 ? _mm512_and_si512(ql, _mm512_set1_epi8(0x0F))
                                 : _mm512_and_si512(_mm512_srli_epi16(ql, 4), _mm512_set1_epi8(0x0F));
    const int shift = 4 * sub;
    const __m512i h = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_srli_epi16(qh, shift)), _mm256_srli_epi16(qh, shift + 2), 1);
    const __m512i high = _mm512_slli_epi16(_mm512_and_si512(h, _mm512_set1_epi8(0x03)), 4);
    const float d = Half(s + 208);
    const int8_t* sc = reinterpret_cast<const int8_t*>(s + 192 + 8 * half + 4 * sub);
    // As ggml: (d * sc) * q, the scale product in float32.
    const __m128 four = _mm_set_ps(d * sc[3], d * sc[2], d * sc[1], d * sc[0]);
    const __m512 scale = _mm512_permutexvar_ps(
        _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0), _mm512_castps128_ps512(four));
    return {_mm512_or_si512(low, high), scale, _mm512_setzero_ps()};
  }
};

// acc[r][j] over every chunk for rows [0, R) and columns [0, C) of a tile.
template <BlockFormat F, int R, int C>
FLOVER_VNNI void Tile(const BlockLinear::XChunk* const* xrows, const uint8_t* const* wrows, int chunks,
                      float* sums /* [R][C] */) {
  using Fmt = Format<F>;
  constexpr bool kOffset = Fmt::kShift >= 0;
  constexpr unsigned kShift = kOffset ? Fmt::kShift : 0;
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) acc[r][j] = _mm512_setzero_ps();
  }
  for (int c = 0; c < chunks; ++c) {
    WChunk w[C];
    for (int j = 0; j < C; ++j) w[j] = Fmt::Decode(wrows[j], c);
    for (int r = 0; r < R; ++r) {
      const BlockLinear::XChunk& x = xrows[r][c];
      const __m512i xq = _mm512_load_si512(x.q);
      // The codes' offset out of the sum: -offset * (the lane's input codes).
      const __m512i init = kOffset ? _mm512_slli_epi32(_mm512_load_si512(x.neg_lanes), kShift)
                                   : _mm512_setzero_si512();
      const __m512 dx = _mm512_load_ps(x.dx);
      for (int j = 0; j < C; ++j) {
        const __m512 dot = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(init, w[j].u8, xq));
        acc[r][j] = _mm512_fmadd_ps(dot, _mm512_mul_ps(w[j].scale, dx), acc[r][j]);
        if (Fmt::kMin) acc[r][j] = _mm512_fmadd_ps(w[j].min, _mm512_load_ps(x.xs), acc[r][j]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) sums[r * C + j] = _mm512_reduce_add_ps(acc[r][j]);
  }
}

using TileFn = void (*)(const BlockLinear::XChunk* const*, const uint8_t* const*, int, float*);

template <BlockFormat F, int C>
TileFn TileFor(int rows) {
  switch (rows) {
    case 1: return &Tile<F, 1, C>;
    case 2: return &Tile<F, 2, C>;
    case 3: return &Tile<F, 3, C>;
    default: return &Tile<F, 4, C>;
  }
}

template <int C>
TileFn TileFor(BlockFormat f, int rows) {
  switch (f) {
    case BlockFormat::kQ8_0: return TileFor<BlockFormat::kQ8_0, C>(rows);
    case BlockFormat::kQ4_0: return TileFor<BlockFormat::kQ4_0, C>(rows);
    case BlockFormat::kQ4_1: return TileFor<BlockFormat::kQ4_1, C>(rows);
    case BlockFormat::kQ4_K: return TileFor<BlockFormat::kQ4_K, C>(rows);
    case BlockFormat::kQ6_K: return TileFor<BlockFormat::kQ6_K, C>(rows);
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
  for (int i = 0; i < w.num_spans; ++i) bytes += w.spans[i].rows * BlockRowBytes(w.spans[i].format, K);
  WeightArena::Block block = arena_.Allocate(static_cast<size_t>(bytes));
  if (block.data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes of weights"));
  }
  std::memcpy(block.data, w.data, static_cast<size_t>(bytes));
  out->storage = block.owner;
  const uint8_t* p = static_cast<const uint8_t*>(block.data);
  int row = 0;
  for (int i = 0; i < w.num_spans; ++i) {
    const BlockSpan& s = w.spans[i];
    const int64_t row_bytes = BlockRowBytes(s.format, K);
    if (s.rows > 0) out->spans.push_back({s.format, row, s.rows, row_bytes, p});
    p += s.rows * row_bytes;
    row += s.rows;
  }
  return std::unique_ptr<Weight>(std::move(out));
}

bool BlockLinear::Holds(const Weight& w) { return dynamic_cast<const BlockWeight*>(&w) != nullptr; }

FLOVER_VNNI void BlockLinear::QuantizeRow(const float* x, int K, XChunk* out) {
  const __m512i ones = _mm512_set1_epi8(1);
  for (int c = 0; c < K / kChunk; ++c) {
    XChunk& ch = out[c];
    float d[2], dsum[2];
    for (int b = 0; b < 2; ++b) {
      const float* v = x + c * kChunk + 32 * b;
      const __m512 v0 = _mm512_loadu_ps(v), v1 = _mm512_loadu_ps(v + 16);
      // max |x| over the bit patterns with the sign cleared (a NaN input gives
      // a NaN scale, so NaN results).
      const __m512i mag = _mm512_set1_epi32(0x7fffffff);
      const uint32_t top = static_cast<uint32_t>(_mm512_reduce_max_epu32(
          _mm512_max_epu32(_mm512_and_si512(_mm512_castps_si512(v0), mag),
                           _mm512_and_si512(_mm512_castps_si512(v1), mag))));
      float amax;
      std::memcpy(&amax, &top, 4);
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      const __m512 s = _mm512_set1_ps(inv);
      const __m512i q0 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v0, s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512i q1 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v1, s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512i lim = _mm512_set1_epi32(127);
      const __m512i c0 = _mm512_max_epi32(_mm512_min_epi32(q0, lim), _mm512_set1_epi32(-127));
      const __m512i c1 = _mm512_max_epi32(_mm512_min_epi32(q1, lim), _mm512_set1_epi32(-127));
      _mm_store_si128(reinterpret_cast<__m128i*>(ch.q + 32 * b), _mm512_cvtepi32_epi8(c0));
      _mm_store_si128(reinterpret_cast<__m128i*>(ch.q + 32 * b + 16), _mm512_cvtepi32_epi8(c1));
      d[b] = amax / 127.0f;
      const int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(c0, c1));
      dsum[b] = d[b] * static_cast<float>(sum) * 0.125f;
    }
    _mm512_store_ps(ch.dx, Halves(d[0], d[1]));
    _mm512_store_ps(ch.xs, Halves(dsum[0], dsum[1]));
    const __m512i lanes = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_load_si512(ch.q));
    _mm512_store_si512(ch.neg_lanes, _mm512_sub_epi32(_mm512_setzero_si512(), lanes));
  }
}

void BlockLinear::Run(const float* x, int M, const Weight& weight, const float* bias,
                      Epilogue epilogue, float* out) {
  const auto& w = static_cast<const BlockWeight&>(weight);
  const int K = w.k_, N = w.n_, chunks = K / kChunk;
  x_.resize(static_cast<size_t>(M) * chunks);
  XChunk* xq = x_.data();
  // One row (decode at low load) needs no parallel region.
#pragma omp parallel for schedule(static) if (M > 1)
  for (int m = 0; m < M; ++m) QuantizeRow(x + static_cast<int64_t>(m) * K, K, xq + static_cast<int64_t>(m) * chunks);

  for (const BlockWeight::Span& span : w.spans) {
    const int tiles = (span.rows + kTileCols - 1) / kTileCols;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < tiles; ++t) {
      const int n0 = t * kTileCols;
      const int cols = std::min(kTileCols, span.rows - n0);
      const uint8_t* wrows[kTileCols];
      for (int j = 0; j < cols; ++j) wrows[j] = span.data + (n0 + j) * span.row_bytes;
      for (int m0 = 0; m0 < M; m0 += kTileRows) {
        const int rows = std::min(kTileRows, M - m0);
        const XChunk* xrows[kTileRows];
        for (int r = 0; r < rows; ++r) xrows[r] = xq + static_cast<int64_t>(m0 + r) * chunks;
        float sums[kTileRows * kTileCols];
        if (cols == kTileCols) {
          TileFor<kTileCols>(span.format, rows)(xrows, wrows, chunks, sums);
          for (int r = 0; r < rows; ++r) {
            float* o = out + static_cast<int64_t>(m0 + r) * N;
            for (int j = 0; j < cols; ++j) Finish(sums[r * kTileCols + j], bias, span.row_begin + n0 + j, epilogue, o);
          }
        } else {
          // The last columns one at a time: the same arithmetic per column.
          for (int j = 0; j < cols; ++j) {
            TileFor<1>(span.format, rows)(xrows, wrows + j, chunks, sums);
            for (int r = 0; r < rows; ++r) {
              Finish(sums[r], bias, span.row_begin + n0 + j, epilogue, out + static_cast<int64_t>(m0 + r) * N);
            }
          }
        }
      }
    }
  }
}

}  // namespace flover::kernels
