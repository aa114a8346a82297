// Linear layers on the CPU through oneDNN's matmul primitive: weights are
// reordered once into the layout oneDNN's kernels prefer (so no call re-packs
// them), bias, gelu_new and the residual add run as fused post-ops, and
// primitives are cached per (rows, shape, epilogue).
//
// One path for every row count on purpose: oneDNN's matmul over packed
// weights gives bitwise the same result for a row whatever M is (checked by
// cpu_ops_test), which the engine's batch invariance relies on. A faster GEMV
// for few rows would break that.
#ifndef FLOVER_KERNELS_CPU_ONEDNN_LINEAR_H_
#define FLOVER_KERNELS_CPU_ONEDNN_LINEAR_H_

#include <map>
#include <memory>
#include <tuple>

#include "kernels/ops.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace flover::kernels {

class OneDnnLinear {
 public:
  OneDnnLinear();

  std::unique_ptr<Weight> Prepare(const float* w, int K, int N, WeightLayout layout);
  void Run(const float* x, int M, const Weight& w, const float* bias, Epilogue epilogue,
           float* out);

 private:
  // (M, K, N, has_bias, epilogue)
  using Key = std::tuple<int, int, int, bool, Epilogue>;
  dnnl::matmul& Primitive(const Key& key, const dnnl::memory::desc& weights);

  dnnl::engine engine_;
  dnnl::stream stream_;
  // Bounded in practice: M never exceeds the engine's per-step token budget.
  std::map<Key, dnnl::matmul> primitives_;
};

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_CPU_ONEDNN_LINEAR_H_
