#include "kernels/cuda/cuda_gemm.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_kernels.h"
#include "util/status_macros.h"

namespace flover::kernels::cuda {
namespace {

cudaDataType_t CudaType(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

// Row counts an algorithm must accept before it is kept: around every power
// of two up to 8192 (validity depends on shape classes, not single values;
// alignment does not depend on M, whose stride is K or N).
const std::vector<int>& RowsToCheck() {
  static const std::vector<int> rows = [] {
    std::vector<int> r = {1, 2, 3, 5, 7};
    for (int p = 8; p <= 8192; p *= 2) r.insert(r.end(), {p - 1, p, p + 1});
    return r;
  }();
  return rows;
}

// The three layouts of one call: A = W^T (K x N, ld K), B = x^T (K x M,
// ld K), C = D = out^T (N x M, ld N, f32), column-major.
class Layouts {
 public:
  ~Layouts() {
    for (cublasLtMatrixLayout_t l : {a, b, c}) {
      if (l != nullptr) cublasLtMatrixLayoutDestroy(l);
    }
  }
  absl::Status Init(int M, int N, int K, DType dtype) {
    FLOVER_RETURN_IF_ERROR(LtStatus(cublasLtMatrixLayoutCreate(&a, CudaType(dtype), K, N, K), "layout A"));
    FLOVER_RETURN_IF_ERROR(LtStatus(cublasLtMatrixLayoutCreate(&b, CudaType(dtype), K, M, K), "layout B"));
    return LtStatus(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, N, M, N), "layout C");
  }
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
};

absl::StatusOr<cublasLtMatmulDesc_t> MakeDesc(bool has_bias) {
  cublasLtMatmulDesc_t desc = nullptr;
  // f32 sums whatever the inputs; with f32 inputs this is plain FP32 (TF32
  // only with CUBLAS_COMPUTE_32F_FAST_TF32, which we never ask for).
  FLOVER_RETURN_IF_ERROR(
      LtStatus(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc"));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  absl::Status st = LtStatus(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "TRANSA");
  if (st.ok()) {
    st = LtStatus(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)),
                  "TRANSB");
  }
  if (st.ok()) {
    st = LtStatus(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                 sizeof(epilogue)),
                  "EPILOGUE");
  }
  if (st.ok() && has_bias) {
    const int32_t bias_type = CUDA_R_32F;
    st = LtStatus(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                 &bias_type, sizeof(bias_type)),
                  "BIAS_DATA_TYPE");
  }
  if (!st.ok()) {
    cublasLtMatmulDescDestroy(desc);
    return st;
  }
  return desc;
}

}  // namespace

absl::Status LtStatus(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string msg = absl::StrCat("cuBLASLt ", what, ": ", cublasLtGetStatusName(status), " (",
                                       cublasLtGetStatusString(status), ")");
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

absl::StatusOr<double> SecondsPerCall(cudaStream_t stream, int calls,
                                      const std::function<absl::Status()>& enqueue) {
  for (int i = 0; i < 3; ++i) FLOVER_RETURN_IF_ERROR(enqueue());
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, stream);
  absl::Status st;
  for (int i = 0; i < calls && st.ok(); ++i) st = enqueue();
  cudaEventRecord(stop, stream);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  FLOVER_RETURN_IF_ERROR(st);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("timing: ", cudaGetErrorString(e)));
  }
  return ms / 1e3 / calls;
}

absl::StatusOr<LtGemm::Engine> LtGemm::EngineFromEnvironment() {
  const char* value = std::getenv("FLOVER_CUDA_GEMM");
  const std::string name = value != nullptr ? value : "";
  if (name.empty() || name == "cublaslt") return Engine::kCublasLt;
  if (name == "mma") return Engine::kMma;
  return absl::InvalidArgumentError(
      absl::StrCat("FLOVER_CUDA_GEMM=", name, ": expected cublaslt (the default) or mma"));
}

absl::StatusOr<std::unique_ptr<LtGemm>> LtGemm::Create(cudaStream_t stream, Engine engine) {
  cublasLtHandle_t handle = nullptr;
  FLOVER_RETURN_IF_ERROR(LtStatus(cublasLtCreate(&handle), "create"));
  void* workspace = nullptr;
  if (cudaError_t e = cudaMalloc(&workspace, kWorkspaceBytes); e != cudaSuccess) {
    cublasLtDestroy(handle);
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate cuBLASLt's work space: ", cudaGetErrorString(e)));
  }
  return std::unique_ptr<LtGemm>(new LtGemm(stream, handle, workspace, engine));
}

LtGemm::~LtGemm() {
  for (auto& [key, plan] : plans_) {
    if (plan.desc != nullptr) cublasLtMatmulDescDestroy(plan.desc);
  }
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

absl::StatusOr<cublasLtMatmulAlgo_t> LtGemm::ChooseAlgorithm(cublasLtMatmulDesc_t desc, int N,
                                                             int K, DType dtype) {
  Layouts rep;
  FLOVER_RETURN_IF_ERROR(rep.Init(kRepresentativeRows, N, K, dtype));
  cublasLtMatmulPreference_t pref = nullptr;
  FLOVER_RETURN_IF_ERROR(LtStatus(cublasLtMatmulPreferenceCreate(&pref), "preference"));
  const uint64_t workspace = kWorkspaceBytes;
  // No split-K: a K split (and its reduction) chosen per shape would change
  // the summation order of a row with the number of rows.
  const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                       sizeof(workspace));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction,
                                       sizeof(reduction));
  constexpr int kCandidates = 16;
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int found = 0;
  const absl::Status heuristic = LtStatus(
      cublasLtMatmulAlgoGetHeuristic(handle_, desc, rep.a, rep.b, rep.c, rep.c, pref, kCandidates,
                                     results, &found),
      "heuristic");
  cublasLtMatmulPreferenceDestroy(pref);
  // NOT_SUPPORTED: no algorithm at all for this combination.
  if (!heuristic.ok() && found > 0) return heuristic;
  for (int i = 0; i < found; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    int32_t splits = 1;
    size_t written = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                         sizeof(splits), &written);
    if (splits > 1) continue;
    bool every_m = true;
    for (int M : RowsToCheck()) {
      Layouts l;
      cublasLtMatmulHeuristicResult_t check{};
      if (!l.Init(M, N, K, dtype).ok() ||
          cublasLtMatmulAlgoCheck(handle_, desc, l.a, l.b, l.c, l.c, &results[i].algo, &check) !=
              CUBLAS_STATUS_SUCCESS ||
          check.workspaceSize > kWorkspaceBytes) {
        every_m = false;
        break;
      }
    }
    if (every_m) return results[i].algo;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "cuBLASLt offers no algorithm for a [", N, ", ", K, "] ", DTypeName(dtype),
      " weight that runs every row count without split-K (", found, " candidates)"));
}

absl::StatusOr<LtGemm::Plan*> LtGemm::PlanFor(int N, int K, DType dtype, bool has_bias) {
  const Key key{N, K, dtype, has_bias};
  if (auto it = plans_.find(key); it != plans_.end()) return &it->second;
  if (engine_ == Engine::kMma && MmaGemmTakes(dtype, K)) {
    Plan plan;
    plan.mma = true;
    return &plans_.emplace(key, plan).first->second;
  }
  // The bias in cuBLASLt's epilogue when some algorithm takes it, else a
  // plain cuBLASLt GEMM and our bias kernel, else our own GEMM.
  const std::vector<bool> epilogues = has_bias ? std::vector<bool>{true, false} : std::vector<bool>{false};
  for (bool epilogue : epilogues) {
    auto desc = MakeDesc(epilogue);
    if (!desc.ok()) return desc.status();
    auto algo = ChooseAlgorithm(*desc, N, K, dtype);
    if (algo.ok()) {
      Plan plan;
      plan.desc = *desc;
      plan.algo = *algo;
      plan.bias_in_epilogue = epilogue;
      return &plans_.emplace(key, plan).first->second;
    }
    cublasLtMatmulDescDestroy(*desc);
    if (algo.status().code() != absl::StatusCode::kFailedPrecondition) return algo.status();
  }
  Plan plan;
  plan.fallback = true;
  return &plans_.emplace(key, plan).first->second;
}

std::vector<std::string> LtGemm::DescribePlans() const {
  std::vector<std::string> lines;
  for (const auto& [key, plan] : plans_) {
    const auto& [N, K, dtype, has_bias] = key;
    std::string line = absl::StrCat("[", N, ", ", K, "] ", DTypeName(dtype), has_bias ? " + bias" : "", ": ");
    if (plan.mma) {
      absl::StrAppend(&line, "our fixed-order tensor-core GEMM (mma.sync, K in ", MmaGemmSegments(K),
                      " segments)", has_bias ? ", bias in its epilogue" : "");
    } else if (plan.fallback) {
      absl::StrAppend(&line, "our fixed-order fallback GEMM (cuBLASLt has no algorithm without "
                             "split-K for every row count)");
    } else {
      int32_t id = -1, tile = -1, stages = -1;
      size_t written = 0;
      cublasLtMatmulAlgoConfigGetAttribute(&plan.algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &written);
      cublasLtMatmulAlgoConfigGetAttribute(&plan.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile),
                                           &written);
      cublasLtMatmulAlgoConfigGetAttribute(&plan.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                           sizeof(stages), &written);
      absl::StrAppend(&line, "cuBLASLt plan (algorithm ", id, ", tile id ", tile, ", stages id ", stages,
                      ")", has_bias ? (plan.bias_in_epilogue ? ", bias in its epilogue"
                                                             : ", bias by our kernel after it")
                                    : "");
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

absl::Status LtGemm::Prepare(int N, int K, DType dtype, bool has_bias) {
  auto plan = PlanFor(N, K, dtype, has_bias);
  return plan.ok() ? absl::OkStatus() : plan.status();
}

absl::Status LtGemm::Run(const void* x, int M, const void* w, int N, int K, DType dtype,
                         const float* bias, bool accumulate, float* out) {
  if (M == 0) return absl::OkStatus();
  auto plan = PlanFor(N, K, dtype, bias != nullptr);
  if (!plan.ok()) return plan.status();
  if ((*plan)->mma) {
    if (cudaError_t e = LaunchMmaGemm(x, w, dtype, bias, accumulate, M, N, K, out, stream_);
        e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("tensor-core GEMM: ", cudaGetErrorString(e)));
    }
    return absl::OkStatus();
  }
  if ((*plan)->fallback) {
    if (cudaError_t e = LaunchFallbackGemm(x, w, dtype, bias, accumulate, M, N, K, out, stream_);
        e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("fallback GEMM: ", cudaGetErrorString(e)));
    }
    return absl::OkStatus();
  }
  if (bias != nullptr && (*plan)->bias_in_epilogue) {
    FLOVER_RETURN_IF_ERROR(LtStatus(cublasLtMatmulDescSetAttribute((*plan)->desc,
                                                                   CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                                   &bias, sizeof(bias)),
                                    "BIAS_POINTER"));
  }
  Layouts l;
  FLOVER_RETURN_IF_ERROR(l.Init(M, N, K, dtype));
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  FLOVER_RETURN_IF_ERROR(LtStatus(cublasLtMatmul(handle_, (*plan)->desc, &alpha, w, l.a, x, l.b,
                                                 &beta, out, l.c, out, l.c, &(*plan)->algo,
                                                 workspace_, kWorkspaceBytes, stream_),
                                  "matmul"));
  if (bias != nullptr && !(*plan)->bias_in_epilogue) {
    if (cudaError_t e = LaunchAddBias(bias, M, N, out, stream_); e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("bias: ", cudaGetErrorString(e)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<double> LtGemm::MeasureLibraryTflops(int M, int N, int K, DType dtype) {
  const size_t elem = DTypeBytes(dtype);
  void *x = nullptr, *w = nullptr, *out = nullptr;
  auto free_all = [&] {
    cudaFree(x);
    cudaFree(w);
    cudaFree(out);
  };
  if (cudaMalloc(&x, size_t(M) * K * elem) != cudaSuccess ||
      cudaMalloc(&w, size_t(N) * K * elem) != cudaSuccess ||
      cudaMalloc(&out, size_t(M) * N * sizeof(float)) != cudaSuccess) {
    free_all();
    return absl::ResourceExhaustedError("no device memory for the GEMM roofline");
  }
  cudaMemsetAsync(x, 0, size_t(M) * K * elem, stream_);
  cudaMemsetAsync(w, 0, size_t(N) * K * elem, stream_);
  auto desc = MakeDesc(false);
  if (!desc.ok()) {
    free_all();
    return desc.status();
  }
  Layouts l;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulHeuristicResult_t best{};
  int found = 0;
  absl::Status st = l.Init(M, N, K, dtype);
  if (st.ok()) st = LtStatus(cublasLtMatmulPreferenceCreate(&pref), "preference");
  if (st.ok()) {
    const uint64_t workspace = kWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                         &workspace, sizeof(workspace));
    st = LtStatus(cublasLtMatmulAlgoGetHeuristic(handle_, *desc, l.a, l.b, l.c, l.c, pref, 1, &best,
                                                 &found),
                  "heuristic");
    if (st.ok() && found == 0) st = absl::NotFoundError("cuBLASLt found no algorithm");
  }
  double seconds = 0;
  constexpr int kIterations = 50;
  if (st.ok()) {
    const float alpha = 1.0f, beta = 0.0f;
    auto run = [&] {
      return cublasLtMatmul(handle_, *desc, &alpha, w, l.a, x, l.b, &beta, out, l.c, out, l.c,
                            &best.algo, workspace_, kWorkspaceBytes, stream_);
    };
    auto s = SecondsPerCall(stream_, kIterations, [&] { return LtStatus(run(), "matmul"); });
    if (s.ok()) {
      seconds = *s;
    } else {
      st = s.status();
    }
  }
  if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatmulDescDestroy(*desc);
  free_all();
  if (!st.ok()) return st;
  return 2.0 * M * N * K / seconds / 1e12;
}

}  // namespace flover::kernels::cuda
