#include "kernels/cuda/cuda_gemm.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/status_macros.h"

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

absl::StatusOr<std::unique_ptr<LtGemm>> LtGemm::Create(cudaStream_t stream) {
  cublasLtHandle_t handle = nullptr;
  FLOVER_RETURN_IF_ERROR(LtStatus(cublasLtCreate(&handle), "create"));
  void* workspace = nullptr;
  if (cudaError_t e = cudaMalloc(&workspace, kWorkspaceBytes); e != cudaSuccess) {
    cublasLtDestroy(handle);
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate cuBLASLt's work space: ", cudaGetErrorString(e)));
  }
  return std::unique_ptr<LtGemm>(new LtGemm(stream, handle, workspace));
}

LtGemm::~LtGemm() {
  for (auto& [key, plan] : plans_) cublasLtMatmulDescDestroy(plan.desc);
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

absl::StatusOr<LtGemm::Plan*> LtGemm::PlanFor(int N, int K, DType dtype, bool has_bias) {
  const Key key{N, K, dtype, has_bias};
  if (auto it = plans_.find(key); it != plans_.end()) return &it->second;
  auto desc = MakeDesc(has_bias);
  if (!desc.ok()) return desc.status();
  Plan plan;
  plan.desc = *desc;
  auto fail = [&](absl::Status st) {
    cublasLtMatmulDescDestroy(plan.desc);
    return st;
  };

  Layouts rep;
  if (absl::Status st = rep.Init(kRepresentativeRows, N, K, dtype); !st.ok()) return fail(st);
  cublasLtMatmulPreference_t pref = nullptr;
  if (absl::Status st = LtStatus(cublasLtMatmulPreferenceCreate(&pref), "preference"); !st.ok()) {
    return fail(st);
  }
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
  const absl::Status heuristic =
      LtStatus(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, rep.a, rep.b, rep.c, rep.c, pref,
                                              kCandidates, results, &found),
               "heuristic");
  cublasLtMatmulPreferenceDestroy(pref);
  if (!heuristic.ok()) return fail(heuristic);

  bool chosen = false;
  for (int i = 0; i < found && !chosen; ++i) {
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
          cublasLtMatmulAlgoCheck(handle_, plan.desc, l.a, l.b, l.c, l.c, &results[i].algo, &check) !=
              CUBLAS_STATUS_SUCCESS ||
          check.workspaceSize > kWorkspaceBytes) {
        every_m = false;
        break;
      }
    }
    if (every_m) {
      plan.algo = results[i].algo;
      chosen = true;
    }
  }
  if (!chosen) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "cuBLASLt offers no algorithm for a [", N, ", ", K, "] ", DTypeName(dtype),
        " weight that runs every row count without split-K (", found, " candidates)")));
  }
  return &plans_.emplace(key, plan).first->second;
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
  if (bias != nullptr) {
    FLOVER_RETURN_IF_ERROR(LtStatus(cublasLtMatmulDescSetAttribute((*plan)->desc,
                                                                   CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                                   &bias, sizeof(bias)),
                                    "BIAS_POINTER"));
  }
  Layouts l;
  FLOVER_RETURN_IF_ERROR(l.Init(M, N, K, dtype));
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  return LtStatus(cublasLtMatmul(handle_, (*plan)->desc, &alpha, w, l.a, x, l.b, &beta, out, l.c,
                                 out, l.c, &(*plan)->algo, workspace_, kWorkspaceBytes, stream_),
                  "matmul");
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
    for (int i = 0; i < 5 && st.ok(); ++i) st = LtStatus(run(), "matmul");
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventRecord(start, stream_);
    for (int i = 0; i < kIterations && st.ok(); ++i) st = LtStatus(run(), "matmul");
    cudaEventRecord(stop, stream_);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    seconds = ms / 1e3 / kIterations;
  }
  if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatmulDescDestroy(*desc);
  free_all();
  if (!st.ok()) return st;
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    return absl::InternalError(cudaGetErrorString(e));
  }
  return 2.0 * M * N * K / seconds / 1e12;
}

}  // namespace flover::kernels::cuda
