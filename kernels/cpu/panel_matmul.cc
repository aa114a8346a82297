#include "kernels/cpu/panel_matmul.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_isa.h"

// The rest of the tree is built for x86-64-v3 (AVX2); these functions alone
// use AVX-512, and only run where PanelKernelsRun says the CPU has it. The
// templates shared by both element types carry the bf16 target; their f32
// instances emit no bf16 instruction, so they run on AVX-512F alone.
#define FLOVER_AVX512 __attribute__((target("avx512f")))
#define FLOVER_AVX512_BF16 __attribute__((target("avx512f,avx512bf16")))

namespace flover::kernels {
namespace {

constexpr int kVectors = kPanelColumns / 16;  // __m512 registers per panel row

// One output row's panel: the sum, then + bias, then + the old value (the
// residual), in that order, masked where the panel runs past N.
FLOVER_AVX512 inline void StoreRow(const __m512 (&sum)[kVectors], int col0, int N,
                                   const float* bias, bool accumulate, float* out_row) {
  for (int i = 0; i < kVectors; ++i) {
    const int n = col0 + 16 * i;
    if (n >= N) return;
    const __mmask16 mask = N - n >= 16 ? __mmask16(0xffff) : __mmask16((1u << (N - n)) - 1);
    __m512 v = sum[i];
    if (bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, bias + n));
    if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, out_row + n));
    _mm512_mask_storeu_ps(out_row + n, mask, v);
  }
}

// The two element types: how one step over k loads a panel row, broadcasts
// x and accumulates. f32: one k per step, one fused multiply-add per
// register; bf16: a pair of k per step, one vdpbf16ps per register.
struct F32Dot {
  using T = float;
  using WVec = __m512;
  static constexpr int kStep = 1;
  FLOVER_AVX512 static WVec Load(const T* p) { return _mm512_loadu_ps(p); }
  FLOVER_AVX512 static WVec Broadcast(const T* x) { return _mm512_set1_ps(*x); }
  FLOVER_AVX512 static __m512 Acc(__m512 acc, WVec x, WVec w) { return _mm512_fmadd_ps(x, w, acc); }
};

struct Bf16Dot {
  using T = uint16_t;
  using WVec = __m512bh;
  static constexpr int kStep = 2;
  FLOVER_AVX512_BF16 static WVec Load(const T* p) { return (__m512bh)_mm512_loadu_si512(p); }
  FLOVER_AVX512_BF16 static WVec Broadcast(const T* x) {
    int32_t pair;
    std::memcpy(&pair, x, sizeof(pair));
    return (__m512bh)_mm512_set1_epi32(pair);
  }
  FLOVER_AVX512_BF16 static __m512 Acc(__m512 acc, WVec x, WVec w) {
    return _mm512_dpbf16_ps(acc, x, w);
  }
};

// part[m] = the sums of x[m][k] * w[k] over k in [k0, k1), from zero, k in order.
template <class Dot, int M>
FLOVER_AVX512_BF16 void Chunk(const typename Dot::T* panel, const typename Dot::T* x, int K,
                              int k0, int k1, __m512 (&part)[M][kVectors]) {
  constexpr int kLanes = 16 * Dot::kStep;  // elements of T per register
  for (int m = 0; m < M; ++m) {
    for (int i = 0; i < kVectors; ++i) part[m][i] = _mm512_setzero_ps();
  }
  for (int k = k0; k < k1; k += Dot::kStep) {
    const typename Dot::T* wk = panel + size_t(k) * kPanelColumns;
    typename Dot::WVec wv[kVectors];
    for (int i = 0; i < kVectors; ++i) wv[i] = Dot::Load(wk + kLanes * i);
    for (int m = 0; m < M; ++m) {
      const typename Dot::WVec xb = Dot::Broadcast(x + size_t(m) * K + k);
      for (int i = 0; i < kVectors; ++i) part[m][i] = Dot::Acc(part[m][i], xb, wv[i]);
    }
  }
}

// Panels [p0, p1): chunk sums added in order, then stored.
template <class Dot, int M>
FLOVER_AVX512_BF16 void PanelsOf(const PanelView& w, const typename Dot::T* x, const float* bias,
                                 bool accumulate, int p0, int p1, float* out) {
  const int K = w.k;
  for (int p = p0; p < p1; ++p) {
    const typename Dot::T* panel =
        static_cast<const typename Dot::T*>(w.data) + size_t(p) * w.k_padded * kPanelColumns;
    __m512 sum[M][kVectors];
    Chunk<Dot, M>(panel, x, K, 0, std::min(K, w.k_chunk), sum);
    for (int k0 = w.k_chunk; k0 < K; k0 += w.k_chunk) {
      __m512 part[M][kVectors];
      Chunk<Dot, M>(panel, x, K, k0, std::min(K, k0 + w.k_chunk), part);
      for (int m = 0; m < M; ++m) {
        for (int i = 0; i < kVectors; ++i) sum[m][i] = _mm512_add_ps(sum[m][i], part[m][i]);
      }
    }
    for (int m = 0; m < M; ++m) {
      StoreRow(sum[m], p * kPanelColumns, w.n, bias, accumulate, out + size_t(m) * w.n);
    }
  }
}

template <int M>
void Panels(const PanelView& w, const void* x, const float* bias, bool accumulate, int p0, int p1,
            float* out) {
  if (w.bf16) {
    PanelsOf<Bf16Dot, M>(w, static_cast<const uint16_t*>(x), bias, accumulate, p0, p1, out);
  } else {
    PanelsOf<F32Dot, M>(w, static_cast<const float*>(x), bias, accumulate, p0, p1, out);
  }
}

// int8: per group of four k, four 64-byte loads (16 columns x 4 k each) and
// one VNNI dot product per register and row.
template <int M>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void Int8Panels(
    const Int8PanelView& w, const uint8_t* x, int x_stride, int p0, int p1, int32_t* out) {
  const int groups = (w.k + 3) / 4;
  for (int p = p0; p < p1; ++p) {
    const int8_t* panel = w.data + size_t(p) * w.k_padded * kPanelColumns;
    __m512i sum[M][kVectors];
    for (int m = 0; m < M; ++m) {
      for (int i = 0; i < kVectors; ++i) sum[m][i] = _mm512_setzero_si512();
    }
    for (int g = 0; g < groups; ++g) {
      const int8_t* wg = panel + size_t(g) * 4 * kPanelColumns;
      __m512i wv[kVectors];
      for (int i = 0; i < kVectors; ++i) wv[i] = _mm512_loadu_si512(wg + 64 * i);
      for (int m = 0; m < M; ++m) {
        int32_t quad;
        std::memcpy(&quad, x + size_t(m) * x_stride + 4 * g, sizeof(quad));
        const __m512i xb = _mm512_set1_epi32(quad);
        for (int i = 0; i < kVectors; ++i) sum[m][i] = _mm512_dpbusd_epi32(sum[m][i], xb, wv[i]);
      }
    }
    for (int m = 0; m < M; ++m) {
      for (int i = 0; i < kVectors; ++i) {
        const int n = p * kPanelColumns + 16 * i;
        if (n >= w.n) break;
        const __mmask16 mask =
            w.n - n >= 16 ? __mmask16(0xffff) : __mmask16((1u << (w.n - n)) - 1);
        _mm512_mask_storeu_epi32(out + size_t(m) * w.n + n, mask, sum[m][i]);
      }
    }
  }
}

// Splits the panels of N columns over the OpenMP threads, each taking one
// contiguous run (one sequential stream of weights), and calls run(p0, p1)
// on each.
template <class Run>
void ForEachThreadsPanels(int N, const Run& run) {
  const int panels = (N + kPanelColumns - 1) / kPanelColumns;
#pragma omp parallel if (panels > 1)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    run(int(int64_t{panels} * t / T), int(int64_t{panels} * (t + 1) / T));
  }
}

}  // namespace

std::vector<float> PanelProbeValues(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (float& f : v) {
    s = s * 1664525u + 1013904223u;
    f = static_cast<float>(s >> 8) / float(1u << 23) - 1.0f;
  }
  return v;
}

bool Int8PanelKernelsRun() { return CpuIsa().avx512_vnni; }

void PanelMatmulInt8(const Int8PanelView& w, const uint8_t* x, int x_stride, int M,
                     int32_t* out) {
  ForEachThreadsPanels(w.n, [&](int p0, int p1) {
    switch (M) {
      case 1: Int8Panels<1>(w, x, x_stride, p0, p1, out); break;
      case 2: Int8Panels<2>(w, x, x_stride, p0, p1, out); break;
      default: Int8Panels<3>(w, x, x_stride, p0, p1, out); break;
    }
  });
}

bool PanelKernelsRun(bool bf16) { return bf16 ? CpuIsa().avx512_bf16 : CpuIsa().avx512; }

void PanelMatmul(const PanelView& w, const void* x, int M, const float* bias, bool accumulate,
                 float* out) {
  ForEachThreadsPanels(w.n, [&](int p0, int p1) {
    switch (M) {
      case 1: Panels<1>(w, x, bias, accumulate, p0, p1, out); break;
      case 2: Panels<2>(w, x, bias, accumulate, p0, p1, out); break;
      default: Panels<3>(w, x, bias, accumulate, p0, p1, out); break;
    }
  });
}

}  // namespace flover::kernels
