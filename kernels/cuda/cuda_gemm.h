// The linear layers' GEMMs on cuBLASLt, batch-invariant: for each weight
// shape and epilogue ONE algorithm is chosen (cuBLASLt's heuristic at a
// fixed representative row count, split-K excluded, checked valid for every
// row count) and kept for every call, so a row's result never depends on how
// many rows share the call. cuBLASLt's own choice per row count (faster at
// some sizes) would switch tiles and K splits with M and break that.
//
// Where cuBLASLt has no such algorithm for a shape, our own GEMM kernel
// (LaunchFallbackGemm: slow, summation order fixed) runs it, so every shape
// works and stays invariant.
//
// FLOVER_CUDA_GEMM=mma (read at Create; the default is cublaslt) runs every
// bf16/f16 shape whose K is a multiple of 32 on our tensor-core GEMM
// (LaunchMmaGemm: order fixed by K; warps split K for the few rows of a
// decode step, where cuBLASLt's one algorithm chosen for 256 rows leaves
// most of the GPU idle). Chosen per shape, never per row count.
//
// Layout: weights are stored [N, K] row-major (one row per output) in their
// dtype; x is [M, K] row-major in the same dtype; out is f32 [M, N]. In
// cuBLAS's column-major terms out^T = W x^T with W transposed ("TN").
#ifndef FLOVER_KERNELS_CUDA_CUDA_GEMM_H_
#define FLOVER_KERNELS_CUDA_CUDA_GEMM_H_

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/tensor.h"

namespace flover::kernels::cuda {

absl::Status LtStatus(cublasStatus_t status, const char* what);

// Seconds per call of `enqueue` (which queues work on `stream`), timed with
// CUDA events over `calls` calls after a few untimed ones.
absl::StatusOr<double> SecondsPerCall(cudaStream_t stream, int calls,
                                      const std::function<absl::Status()>& enqueue);

class LtGemm {
 public:
  // Work space for the algorithms (no split-K reduction needs much).
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;
  // The row count algorithms are chosen for.
  static constexpr int kRepresentativeRows = 256;

  // Which GEMM runs the 16-bit shapes: FLOVER_CUDA_GEMM, "cublaslt" (the
  // default, also when unset) or "mma"; anything else is an error naming it.
  enum class Engine { kCublasLt, kMma };
  static absl::StatusOr<Engine> EngineFromEnvironment();

  static absl::StatusOr<std::unique_ptr<LtGemm>> Create(cudaStream_t stream, Engine engine);
  ~LtGemm();

  // out: f32 [M, N] (=|+=) x: [M, K] @ w^T + bias, with w: [N, K] and x in
  // `dtype` (f32, bf16 or f16), bias f32 [N] or null; `accumulate` adds to
  // what out holds (the fused residual). Chooses the algorithm on first use.
  absl::Status Run(const void* x, int M, const void* w, int N, int K, DType dtype,
                   const float* bias, bool accumulate, float* out);

  // Chooses (once) the algorithm for this shape, so Run never searches.
  absl::Status Prepare(int N, int K, DType dtype, bool has_bias);

  // One line per prepared shape: "[N, K] dtype (+ bias): cuBLASLt algorithm
  // <id>, tile <t>, ..." or the fallback kernel, and where the bias goes.
  std::vector<std::string> DescribePlans() const;

  // TFLOP/s of cuBLASLt's own heuristic choice at exactly [M, K] x [K, N]
  // (the library's speed, not ours), timed over repeated calls.
  absl::StatusOr<double> MeasureLibraryTflops(int M, int N, int K, DType dtype);

 private:
  using Key = std::tuple<int, int, DType, bool>;  // N, K, dtype, has_bias
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatmulAlgo_t algo{};
    // False when no algorithm takes the bias in its epilogue for this
    // shape: the bias is then added by our own kernel after the GEMM.
    bool bias_in_epilogue = false;
    // True when cuBLASLt has no algorithm that serves every row count
    // without split-K for this shape (odd leading dimensions, say): our own
    // fixed-order GEMM runs instead.
    bool fallback = false;
    // Our tensor-core GEMM runs this shape (Engine::kMma).
    bool mma = false;
  };

  LtGemm(cudaStream_t stream, cublasLtHandle_t handle, void* workspace, Engine engine)
      : stream_(stream), handle_(handle), workspace_(workspace), engine_(engine) {}
  absl::StatusOr<Plan*> PlanFor(int N, int K, DType dtype, bool has_bias);
  // An algorithm for (desc, shape) that serves every row count, or an error.
  absl::StatusOr<cublasLtMatmulAlgo_t> ChooseAlgorithm(cublasLtMatmulDesc_t desc, int N, int K,
                                                       DType dtype);

  cudaStream_t stream_;
  cublasLtHandle_t handle_;
  void* workspace_;
  Engine engine_;
  std::map<Key, Plan> plans_;
};

}  // namespace flover::kernels::cuda

#endif  // FLOVER_KERNELS_CUDA_CUDA_GEMM_H_
