#include "model/weight_upload.h"

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace flover {

absl::StatusOr<kernels::Buffer> UploadF32(kernels::Backend& backend, const std::vector<float>& host,
                                          int64_t rows, int64_t cols) {
  if (host.empty()) return kernels::Buffer();
  if (static_cast<int64_t>(host.size()) != rows * cols) {
    return absl::InternalError(absl::StrCat("a weight of ", host.size(), " values does not fit [",
                                            rows, ", ", cols, "]"));
  }
  auto buf = backend.Allocate(kernels::DType::kF32, rows, cols);
  if (!buf.ok()) return buf.status();
  FLOVER_RETURN_IF_ERROR(backend.Upload(host.data(), *buf));
  return buf;
}

absl::StatusOr<std::unique_ptr<kernels::Weight>> PrepareMatrix(kernels::Backend& backend,
                                                               kernels::HostValues host,
                                                               int64_t size, int K, int N,
                                                               kernels::WeightLayout layout) {
  if (size != int64_t{K} * N) {
    return absl::InternalError(absl::StrCat("a weight of ", size, " values is not [", K, ", ", N,
                                            "]"));
  }
  return backend.PrepareWeight(host, K, N, layout);
}

absl::Status UploadF32Releasing(kernels::Backend& backend, std::vector<float>& host, int64_t rows,
                                int64_t cols, kernels::Buffer* out) {
  auto b = UploadF32(backend, host, rows, cols);
  if (!b.ok()) return b.status();
  *out = std::move(*b);
  std::vector<float>().swap(host);
  return absl::OkStatus();
}

absl::Status PrepareMatrixReleasing(kernels::Backend& backend, StoredValues& host, int K, int N,
                                    kernels::WeightLayout layout,
                                    std::unique_ptr<kernels::Weight>* out) {
  auto p = PrepareMatrix(backend, host.view(), host.size(), K, N, layout);
  if (!p.ok()) return p.status();
  *out = std::move(*p);
  host.Release();
  return absl::OkStatus();
}

}  // namespace flover
