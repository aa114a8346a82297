#include "model/weight_upload.h"

#include <algorithm>

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

absl::StatusOr<kernels::Buffer> UploadRowsF32(kernels::Backend& backend, const WeightSource& source,
                                              const WeightRecipe& recipe, int64_t cols,
                                              float scale, int64_t chunk_rows) {
  if (recipe.blocks.size() != 1 || recipe.axis != WeightRecipe::kRows || chunk_rows < 1) {
    return absl::InternalError("UploadRowsF32 takes the rows of one tensor");
  }
  const WeightBlock& block = recipe.blocks[0];
  const TensorRegion& all = block.region;
  if (all.cols() != cols || all.rows() < 1) {
    return absl::InternalError(absl::StrCat("rows of '", block.tensor, "' are ", all.cols(),
                                            " wide, not ", cols));
  }
  auto buf = backend.Allocate(kernels::DType::kF32, all.rows(), cols);
  if (!buf.ok()) return buf.status();
  for (int64_t r = 0; r < all.rows(); r += chunk_rows) {
    const int64_t n = std::min(chunk_rows, all.rows() - r);
    TensorRegion part = all;
    part.row_begin = all.row_begin + r;
    part.row_end = part.row_begin + n;
    auto rows = source.Read(block.tensor, block.shape, part);
    if (!rows.ok()) return rows.status();
    if (scale != 1.0f) {
      for (float& v : *rows) v *= scale;
    }
    FLOVER_RETURN_IF_ERROR(backend.Upload(rows->data(), buf->tensor().Rows(r, n)));
  }
  return buf;
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
