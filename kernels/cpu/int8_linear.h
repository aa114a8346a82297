// Linear layers with int8 weights on the CPU (--dtype=int8): weights
// quantized once at load, symmetric, one scale per output column; inputs
// quantized per row on the fly, symmetric, one scale per row; products
// summed in int32 by VNNI dot products (u8 x s8); then, per element,
//
//   out = float(sum) * (row_scale * column_scale) + bias   (gelu_new / + residual)
//
// Why per column and per row (measured, docs/performance.md): the integer
// sum over all of K is exact, so the int32 result is the same whatever
// kernel, blocking or row count computes it, and batch invariance holds by
// construction rather than by matching one library's summation order. Finer
// scales (per group of k, as llama.cpp's Q8_0 has) would need a float sum of
// the groups' partial sums inside the kernel.
//
// The input rows are offset by 128 to be unsigned (VNNI multiplies u8 by s8);
// each column's sum of weights times 128, kept from load, takes it back out
// exactly. Exactness needs |sum| < 2^31: K <= 65536 (255 * 127 * K), which
// Prepare checks.
//
// One to kPanelMaxRows rows run on our own VNNI kernel over oneDNN's packed
// weights (panel_matmul.h), more on oneDNN's int8 matmul (brgemm, VNNI), both
// into int32; the dequantizing epilogue is one function for every row count.
#ifndef FLOVER_KERNELS_CPU_INT8_LINEAR_H_
#define FLOVER_KERNELS_CPU_INT8_LINEAR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/cpu/panel_matmul.h"
#include "kernels/cpu/weight_arena.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace flover::kernels {

class Int8Linear {
 public:
  Int8Linear();

  // OK where oneDNN has a VNNI int8 matmul on this CPU (exact int32 sums; the
  // AVX-512 kernels without VNNI saturate 16-bit pair sums) and our panel
  // kernels run; FailedPrecondition naming what is missing otherwise.
  static absl::Status CheckSupported();

  // The largest K whose int32 sums cannot overflow.
  static constexpr int kMaxK = 65536;

  // Quantizes w ([K, N] or [N, K]; f32, bf16 or f16 values as a file
  // stores them, read in place: no float32 copy) per output column and
  // packs it. InvalidArgument for K > kMaxK or another dtype.
  absl::StatusOr<std::unique_ptr<Weight>> Prepare(HostValues w, int K, int N,
                                                  WeightLayout layout);
  void Run(const float* x, int M, const Weight& w, const float* bias, Epilogue epilogue,
           float* out);
  // Compiles oneDNN's primitives and sizes the scratch for every M <= max_rows.
  void PrepareRows(const Weight& w, int max_rows);

  // Whether a call of M rows runs on the panel kernel (1 <= M <= kPanelMaxRows
  // where the CPU has VNNI and the weight's shape passed the check at Prepare).
  bool RunsOnPanels(const Weight& w, int M) const;
  void set_panels_enabled(bool on) { panels_enabled_ = on; }

  // The quantized weight as integers and scales, for tests: q [K, N]
  // row-major and scale [N], with w[k, n] ~ q[k, n] * scale[n].
  static void Quantized(const Weight& w, std::vector<int8_t>* q, std::vector<float>* scale);
  // Row quantization as Run does it, for tests: q [K] (signed) and the row's scale.
  static float QuantizeRow(const float* x, int K, int8_t* q);

 private:
  using Key = std::tuple<int, int, int>;  // (bucket rows, K, N)
  dnnl::matmul& Primitive(int rows, int K, int N, const dnnl::memory::desc& weights);
  void Reserve(int rows, int K, int N);
  // Rows of x as u8 (quantized + 128) in xq_ with row stride XStride(K),
  // their scales in row_scale_; rows M..rows-1 are zeros.
  void QuantizeRows(const float* x, int M, int rows, int K);
  static int XStride(int K) { return (K + 63) / 64 * 64; }
  // Made-up rows through oneDNN and the panel kernel: equal int32 sums?
  bool PanelsMatch(const Weight& w, const Int8PanelView& view);

  bool panels_enabled_ = true;
  WeightArena arena_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::map<Key, dnnl::matmul> primitives_;
  // Weight shapes (K, N) whose panel results matched oneDNN's.
  std::set<std::pair<int, int>> panel_shapes_;
  std::vector<uint8_t> xq_;
  std::vector<float> row_scale_;
  std::vector<int32_t> acc_;
};

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_CPU_INT8_LINEAR_H_
