// Matmuls of one to three rows (decode at low load), read straight from the
// weights oneDNN packed, summing in oneDNN's order so a row's result is
// bitwise what oneDNN gives it at any other row count.
//
// oneDNN's matmul for few rows streams weights at ~75% of this machine's read
// bandwidth; at one row a decode step is nothing but that stream. These
// kernels walk each 64-column panel of the packed weights front to back (one
// sequential read per thread) and reach the bandwidth of a plain read loop.
//
// Batch invariance is kept by construction and checked, never assumed: each
// output lane sums x[k] * w[k] one k at a time with one fused multiply-add
// (f32) or one bf16 pair-dot (bf16) per step, in partial sums over `k_chunk`
// consecutive k that are then added in order, the bias added last and the
// residual after it: what oneDNN 2.6's brgemm matmul does. OneDnnLinear
// compares the two bitwise on every weight before it uses these kernels for
// it (so another oneDNN version or CPU that sums differently just keeps
// oneDNN for every row count).
#ifndef FLOVER_KERNELS_CPU_PANEL_MATMUL_H_
#define FLOVER_KERNELS_CPU_PANEL_MATMUL_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace flover::kernels {

// oneDNN's packed layout for a [K, N] weight (f32 `BA16a64b`, bf16
// `BA16a64b2a`): N is cut into panels of 64 columns, one after another, each
// holding every (padded) k: f32 as [k_padded][64], bf16 as
// [k_padded / 2][64][2] (the pairs a bf16 dot product takes).
struct PanelView {
  const void* data = nullptr;
  bool bf16 = false;
  int k = 0;
  int n = 0;
  int k_padded = 0;
  int k_chunk = 0;  // sums run over this many consecutive k, then add up
};

inline constexpr int kPanelColumns = 64;
inline constexpr int kPanelMaxRows = 3;

// Made-up inputs for comparing the panel kernels with oneDNN before use:
// values in [-1, 1) from a fixed generator (every bit reproducible).
std::vector<float> PanelProbeValues(size_t n, uint32_t seed);

// Whether the kernels run (cpu_isa.h): AVX-512, and AVX-512 BF16 for bf16.
bool PanelKernelsRun(bool bf16);

// out[m, :] = x[m, :] @ W + bias (bias may be null), or out[m, :] += that
// when `accumulate`, for m < M, 1 <= M <= kPanelMaxRows; x holds M rows of K
// f32 values, or of K bf16 values when w.bf16. Panels are split evenly over
// the OpenMP threads. Callers check PanelKernelsRun first.
void PanelMatmul(const PanelView& w, const void* x, int M, const float* bias, bool accumulate,
                 float* out);

// int8 (int8_linear.h): oneDNN's packed s8 layout `BA16a64b4a` for a [K, N]
// weight is, per 64-column panel, [k_padded / 4][64][4]: four k of a column
// side by side, the operand of one VNNI u8 x s8 dot product. Integer sums are
// exact, so any order gives the same result: no chunking to match.
struct Int8PanelView {
  const int8_t* data = nullptr;
  int k = 0;
  int n = 0;
  int k_padded = 0;
};

// Whether PanelMatmulInt8 runs (cpu_isa.h): AVX-512 with VNNI.
bool Int8PanelKernelsRun();

// out[m, n] = sum over k < K of x[m, k] * W[k, n] in int32, for m < M <= kPanelMaxRows;
// row m of x starts at x + m * x_stride (x_stride >= K rounded up to 4, the
// bytes past K read but multiplied by zero weights).
void PanelMatmulInt8(const Int8PanelView& w, const uint8_t* x, int x_stride, int M, int32_t* out);

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_CPU_PANEL_MATMUL_H_
