// Linear layers on the CPU through oneDNN's matmul primitive: weights are
// reordered once into the layout oneDNN's kernels prefer (so no call re-packs
// them), bias, gelu_new and the residual add run as fused post-ops, and
// primitives are cached per (row bucket, shape, epilogue).
//
// A primitive is compiled for a fixed row count, and compiling one costs
// ~0.3 ms and ~120 KB of JIT code (gpt2-small shapes, this machine). One per
// distinct M grows with the token budget (1,056 primitives and 126 MB for a
// budget of 256), so row counts above 32 round up to a bucket (16 per power
// of two: under 6.25% padded rows), which run through scratch space.
// PrepareRows compiles every bucket up front (352 primitives, ~40 MB, ~0.1 s
// for the server's defaults).
//
// oneDNN's matmul over packed weights gives bitwise the same result for a row
// whatever M is (checked by cpu_backend_test), which the engine's batch
// invariance relies on. Calls of 1 to kPanelMaxRows rows run instead on our
// panel kernels (panel_matmul.h), which stream the same packed weights at
// full read bandwidth and sum in oneDNN's order: the first Prepare of a shape
// and PrepareRows of an epilogue compare the two bitwise, and only a (shape,
// epilogue) whose results matched takes that path.
#ifndef FLOVER_KERNELS_CPU_ONEDNN_LINEAR_H_
#define FLOVER_KERNELS_CPU_ONEDNN_LINEAR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "kernels/backend.h"
#include "kernels/cpu/panel_matmul.h"
#include "kernels/cpu/weight_arena.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace flover::kernels {

class OneDnnLinear {
 public:
  explicit OneDnnLinear(MatmulDtype dtype = MatmulDtype::kF32);

  // OK when oneDNN has an optimized kernel for `dtype` on this CPU (bf16
  // needs AVX-512; its reference fallback would be ~100x slower; f16 is
  // CUDA's), else
  // FailedPrecondition naming the reason.
  static absl::Status CheckSupported(MatmulDtype dtype);
  MatmulDtype dtype() const { return dtype_; }

  // `w`: f32 or bf16 values (the CPU backend widens f16 first).
  std::unique_ptr<Weight> Prepare(HostValues w, int K, int N, WeightLayout layout);
  void Run(const float* x, int M, const Weight& w, const float* bias, Epilogue epilogue,
           float* out);
  // Compiles the primitives and sizes the scratch for every M <= max_rows.
  void PrepareRows(const Weight& w, int max_rows, bool has_bias, Epilogue epilogue);

  // The row count a call with M rows runs at: M itself up to kExactRows,
  // then the next multiple of (the power of two at or below M) / kBucketsPerOctave.
  static constexpr int kExactRows = 32;
  static constexpr int kBucketsPerOctave = 16;
  static int RowBucket(int M);
  size_t num_primitives() const { return primitives_.size(); }

  // Whether a call of M rows with this weight and epilogue runs on the panel
  // kernels (it does where the CPU has AVX-512 and the bitwise comparisons
  // for the weight's shape at Prepare and the epilogue's at PrepareRows
  // passed; a model calls PrepareRows for one weight of each shape).
  bool RunsOnPanels(const Weight& w, int M, bool has_bias, Epilogue epilogue) const;
  // Off: every call runs on oneDNN (for benchmarks comparing the two).
  void set_panels_enabled(bool on) { panels_enabled_ = on; }

  // The padded K of a packed weight laid out as 64-column panels of
  // [k_padded / k_group][64][k_group] (oneDNN's BA16a64b for k_group 1,
  // BA16a64b2a for 2, BA16a64b4a for 4: what the panel kernels read), or
  // nullopt for any other layout.
  static std::optional<int> PanelKPadded(const dnnl::memory& packed, int k_group);

 private:
  // (bucket rows, K, N, has_bias, epilogue)
  using Key = std::tuple<int, int, int, bool, Epilogue>;
  dnnl::matmul MakePrimitive(const Key& key, const dnnl::memory::desc& weights);
  dnnl::matmul& Primitive(const Key& key, const dnnl::memory::desc& weights);
  void ReserveScratch(int rows, int K, int N);
  // x's M rows rounded to bf16, then zero rows up to `rows`, in src_bf16_.
  const uint16_t* RoundRows(const float* x, int M, int rows, int K);
  void RunOneDnn(dnnl::matmul& mm, const float* x, int M, const Weight& w, const float* bias,
                 Epilogue epilogue, float* out);
  void RunPanels(const PanelView& view, const float* x, int M, const float* bias,
                 Epilogue epilogue, float* out);
  // The weight's packed layout as panels, with its shape's K chunking under
  // which the panel kernels match oneDNN bitwise; nullopt where none does.
  std::optional<PanelView> FindPanels(const Weight& w);
  // Runs kPanelMaxRows + 1 made-up rows through oneDNN and through the panel
  // kernels and compares the results bit for bit.
  bool PanelsMatch(const Weight& w, const PanelView& view, bool has_bias, Epilogue epilogue);
  dnnl::eltwise_forward& Gelu(int M, int N);

  MatmulDtype dtype_;
  bool panels_enabled_ = true;
  WeightArena arena_;  // the packed weights' memory (huge pages)
  dnnl::memory::data_type weight_type_;  // and the inputs' type
  dnnl::engine engine_;
  dnnl::stream stream_;
  // Bounded by the buckets up to the largest M seen: 16 per power of two.
  std::map<Key, dnnl::matmul> primitives_;
  // Per weight shape (K, N): the K chunking the panel kernels sum in (0:
  // none matched oneDNN) and the epilogues (bits) whose results matched.
  struct PanelShape {
    int k_chunk = 0;
    unsigned epilogues = 0;
  };
  std::map<std::pair<int, int>, PanelShape> panel_shapes_;
  // gelu_new over M x N for the panel path (the same JIT code as the fused post-op).
  std::map<std::pair<int, int>, dnnl::eltwise_forward> gelu_;
  // Padded copies of x (in the weights' type) and out, for row counts that
  // are not a bucket and for bf16 inputs.
  std::vector<float> src_scratch_, dst_scratch_;
  std::vector<uint16_t> src_bf16_;
};

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_CPU_ONEDNN_LINEAR_H_
