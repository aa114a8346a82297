#include "kernels/cpu/fma_linear.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/cpu_threads.h"
#include "kernels/cpu/vec_math.h"

// The tree is built for AVX2 with FMA (x86-64-v3); the wide tiles alone use
// AVX-512, and run only where CpuIsa() allows it.
#define FLOVER_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

namespace flover::kernels {
namespace {

constexpr int kCols = 16;  // columns per panel
// Tiles: AVX-512 runs up to 8 rows over 3 panels (24 accumulators), AVX2 up
// to 6 rows over one panel (12); either way each lane sums as the header says.
constexpr int kWideRows = 8, kWidePanels = 3;
constexpr int kNarrowRows = 6;
constexpr int kMaxTile = kWideRows * kWidePanels * kCols;

class FmaWeight final : public Weight {
 public:
  int k() const override { return k_; }
  int n() const override { return n_; }
  int panels() const { return (n_ + kCols - 1) / kCols; }

  int k_ = 0, n_ = 0;
  bool bf16 = false;
  const void* data = nullptr;  // panels() panels of [k_][16]
  std::shared_ptr<void> storage;
};

// 16 or 8 consecutive panel values as float32 (bf16: shifted into the top half).
FLOVER_AVX512 inline __m512 Load16(const float* p) { return _mm512_loadu_ps(p); }
FLOVER_AVX512 inline __m512 Load16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// sums[r][16 p + j] = the sum over k of x[r][k] * (panel p's column j), for
// rows r < R and panels p < P; panel p starts at w + p * panel_stride.
template <typename T, int R, int P>
FLOVER_AVX512 void WideTile(const float* x, int64_t ldx, const T* w, int64_t panel_stride, int K,
                            float* sums) {
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  }
  for (int k = 0; k < K; ++k) {
    __m512 wv[P];
    for (int p = 0; p < P; ++p) wv[p] = Load16(w + p * panel_stride + int64_t{k} * kCols);
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_set1_ps(x[r * ldx + k]);
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(xv, wv[p], acc[r][p]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < P; ++p) _mm512_storeu_ps(sums + (r * P + p) * kCols, acc[r][p]);
  }
}

// The same sums for one panel, eight lanes at a time.
// (Named accumulators, not an array: GCC 12 kept an array of them in memory
// as well, storing all twelve every k.)
template <typename T, int R>
void NarrowTile(const float* x, int64_t ldx, const T* w, int64_t, int K, float* sums) {
  static_assert(R >= 1 && R <= 6, "six rows at most: 12 accumulators + 3 of 16 registers");
  __m256 l0 = _mm256_setzero_ps(), h0 = l0, l1 = l0, h1 = l0, l2 = l0, h2 = l0, l3 = l0, h3 = l0,
         l4 = l0, h4 = l0, l5 = l0, h5 = l0;
  for (int k = 0; k < K; ++k) {
    const __m256 w0 = Load8(w + int64_t{k} * kCols), w1 = Load8(w + int64_t{k} * kCols + 8);
#define FLOVER_ROW(i)                                                  \
  if constexpr (R > i) {                                               \
    const __m256 xv = _mm256_broadcast_ss(x + i * ldx + k);           \
    l##i = _mm256_fmadd_ps(xv, w0, l##i);                              \
    h##i = _mm256_fmadd_ps(xv, w1, h##i);                              \
  }
    FLOVER_ROW(0) FLOVER_ROW(1) FLOVER_ROW(2) FLOVER_ROW(3) FLOVER_ROW(4) FLOVER_ROW(5)
#undef FLOVER_ROW
  }
  const __m256 lo[6] = {l0, l1, l2, l3, l4, l5}, hi[6] = {h0, h1, h2, h3, h4, h5};
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(sums + r * kCols, lo[r]);
    _mm256_storeu_ps(sums + r * kCols + 8, hi[r]);
  }
}

template <typename T>
using TileFn = void (*)(const float*, int64_t, const T*, int64_t, int, float*);

template <typename T, int P>
TileFn<T> WideTileFor(int rows) {
  switch (rows) {
    case 1: return &WideTile<T, 1, P>;
    case 2: return &WideTile<T, 2, P>;
    case 3: return &WideTile<T, 3, P>;
    case 4: return &WideTile<T, 4, P>;
    case 5: return &WideTile<T, 5, P>;
    case 6: return &WideTile<T, 6, P>;
    case 7: return &WideTile<T, 7, P>;
    default: return &WideTile<T, 8, P>;
  }
}

template <typename T>
TileFn<T> TileFor(bool wide, int rows, int panels) {
  if (wide) {
    switch (panels) {
      case 1: return WideTileFor<T, 1>(rows);
      case 2: return WideTileFor<T, 2>(rows);
      default: return WideTileFor<T, 3>(rows);
    }
  }
  switch (rows) {
    case 1: return &NarrowTile<T, 1>;
    case 2: return &NarrowTile<T, 2>;
    case 3: return &NarrowTile<T, 3>;
    case 4: return &NarrowTile<T, 4>;
    case 5: return &NarrowTile<T, 5>;
    default: return &NarrowTile<T, 6>;
  }
}

// out = epilogue(x @ W + bias) over the weight's panels, split over threads
// by groups of panels; each group runs every row, a tile of rows at a time.
template <typename T>
void RunPanels(bool wide, const float* x, int M, const FmaWeight& w, const float* bias,
               Epilogue epilogue, float* out) {
  const int K = w.k_, N = w.n_, panels = w.panels();
  const int group = wide ? kWidePanels : 1, tile_rows = wide ? kWideRows : kNarrowRows;
  const int groups = (panels + group - 1) / group;
  const int64_t panel_stride = int64_t{K} * kCols;
  const T* data = static_cast<const T*>(w.data);
#pragma omp parallel for schedule(static) if (groups > 1)
  for (int g = 0; g < groups; ++g) {
    const int p0 = g * group, np = std::min(group, panels - p0);
    alignas(64) float sums[kMaxTile];
    for (int m0 = 0; m0 < M; m0 += tile_rows) {
      const int rows = std::min(tile_rows, M - m0);
      TileFor<T>(wide, rows, np)(x + int64_t{m0} * K, K, data + p0 * panel_stride, panel_stride, K, sums);
      for (int r = 0; r < rows; ++r) {
        float* o = out + int64_t{m0 + r} * N;
        for (int j = 0; j < np * kCols; ++j) {
          const int n = p0 * kCols + j;
          if (n < N) FinishOutput(sums[r * np * kCols + j], bias, n, epilogue, o);
        }
      }
    }
  }
}

// Value (k, n) of w as float32, whatever it was stored in.
inline float ValueAt(const HostValues& w, int64_t i) {
  if (w.dtype == DType::kF32) return static_cast<const float*>(w.data)[i];
  const uint16_t bits = static_cast<const uint16_t*>(w.data)[i];
  return w.dtype == DType::kBF16 ? Bf16ToFloat(bits) : HalfToFloat(bits);
}

}  // namespace

FmaLinear::FmaLinear(MatmulDtype dtype) : dtype_(dtype), wide_(CpuIsa().avx512) {}

bool FmaLinear::Replaces(MatmulDtype dtype) {
  const CpuFeatures& f = CpuIsa();
  if (dtype == MatmulDtype::kBF16) return !f.avx512_bf16;
  if (dtype == MatmulDtype::kF32) return !f.avx512;
  return false;
}

absl::StatusOr<std::unique_ptr<Weight>> FmaLinear::Prepare(HostValues w, int K, int N,
                                                           WeightLayout layout) {
  if (!w.is_float()) return absl::InvalidArgumentError("FmaLinear: not float values");
  if (K <= 0 || N <= 0) return absl::InvalidArgumentError(absl::StrCat("FmaLinear: shape [", K, ", ", N, "]"));
  auto out = std::make_unique<FmaWeight>();
  out->k_ = K;
  out->n_ = N;
  out->bf16 = dtype_ == MatmulDtype::kBF16;
  const int panels = out->panels();
  const size_t values = size_t(panels) * K * kCols;
  const size_t bytes = values * (out->bf16 ? sizeof(uint16_t) : sizeof(float));
  WeightArena::Block block = arena_.Allocate(bytes);
  if (block.data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes of weights"));
  }
  out->storage = block.owner;
  out->data = block.data;
  const bool in_out = layout == WeightLayout::kInOut;
  const bool bf16_bits = out->bf16 && w.dtype == DType::kBF16;
  UseCpuThreadsHere();
#pragma omp parallel for schedule(static)
  for (int p = 0; p < panels; ++p) {
    for (int k = 0; k < K; ++k) {
      const size_t at = (size_t(p) * K + k) * kCols;
      for (int j = 0; j < kCols; ++j) {
        const int n = p * kCols + j;
        const int64_t i = in_out ? int64_t{k} * N + n : int64_t{n} * K + k;
        if (out->bf16) {
          // bf16 values are kept as they are; others rounded to nearest even.
          uint16_t v = 0;
          if (n < N) v = bf16_bits ? static_cast<const uint16_t*>(w.data)[i] : ToBf16(ValueAt(w, i));
          static_cast<uint16_t*>(block.data)[at + j] = v;
        } else {
          static_cast<float*>(block.data)[at + j] = n < N ? ValueAt(w, i) : 0.0f;
        }
      }
    }
  }
  return std::unique_ptr<Weight>(std::move(out));
}

bool FmaLinear::Holds(const Weight& w) { return dynamic_cast<const FmaWeight*>(&w) != nullptr; }

void FmaLinear::Run(const float* x, int M, const Weight& weight, const float* bias,
                    Epilogue epilogue, float* out) {
  UseCpuThreadsHere();
  const auto& w = static_cast<const FmaWeight&>(weight);
  if (!w.bf16) {
    RunPanels<float>(wide_, x, M, w, bias, epilogue, out);
    return;
  }
  const int64_t n = int64_t{M} * w.k_;
  if (rounded_.size() < size_t(n)) rounded_.resize(n);
  float* r = rounded_.data();
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) r[i] = Bf16ToFloat(ToBf16(x[i]));
  RunPanels<uint16_t>(wide_, r, M, w, bias, epilogue, out);
}

}  // namespace flover::kernels
