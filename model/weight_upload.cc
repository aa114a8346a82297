#include "model/weight_upload.h"

#include <algorithm>
#include <cstring>

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

absl::StatusOr<ColumnBands> UploadColumnBands(kernels::Backend& backend, const WeightSource& source,
                                              const WeightRecipe& recipe, int bands, int64_t cols, float scale,
                                              bool keep_blocks, int64_t chunk_rows) {
  if (recipe.blocks.size() != 1 || recipe.axis != WeightRecipe::kRows || !recipe.exact() || bands < 1 ||
      chunk_rows < 1) {
    return absl::InternalError("UploadColumnBands takes the rows of one tensor");
  }
  const WeightBlock& block = recipe.blocks[0];
  const TensorRegion& all = block.region;
  if (all.cols() != bands * cols || all.rows() < 1 || all.col_begin != 0) {
    return absl::InvalidArgumentError(absl::StrCat("rows of '", block.tensor, "' are ", all.cols(), " wide, not ",
                                                   bands, " bands of ", cols));
  }
  const int64_t R = all.rows();
  ColumnBands out;
  kernels::BlockFormat format;
  if (keep_blocks && source.BlockFormatOf(block.tensor, &format) && kernels::BlockRowsFit(format, cols) &&
      cols % kernels::InfoOf(format).block_values == 0) {
    const int64_t row_bytes = kernels::BlockRowBytes(format, bands * cols), band_bytes = kernels::BlockRowBytes(format, cols);
    // Read in place where the source maps the whole tensor and the backend
    // reads host memory: each band the file's own bytes, paged in as rows
    // are used.
    auto mapped = all.row_begin == 0 && R == block.shape[0] ? source.MapBlockRows(block.tensor, block.shape)
                                                            : absl::UnimplementedError("some rows");
    if (mapped.ok() && mapped->format == format && mapped->rows == R) {
      for (int b = 0; b < bands; ++b) {
        auto table = backend.MapBlockRows(format, mapped->data + b * band_bytes, R, static_cast<int>(cols),
                                          mapped->row_bytes, mapped->owner);
        if (!table.ok()) break;
        out.blocks.push_back(std::move(*table));
      }
      if (static_cast<int>(out.blocks.size()) == bands) return out;
      out.blocks.clear();
    }
    // Otherwise each band's blocks copied, row by row, then on the backend
    // one band at a time.
    std::vector<std::vector<uint8_t>> host(bands, std::vector<uint8_t>(static_cast<size_t>(R * band_bytes)));
    for (int64_t r = 0; r < R; r += chunk_rows) {
      const int64_t n = std::min(chunk_rows, R - r);
      auto rows = source.ReadBlockRows(block.tensor, block.shape, all.row_begin + r, all.row_begin + r + n);
      if (!rows.ok()) return rows.status();
      if (static_cast<int64_t>(rows->size()) != n * row_bytes) {
        return absl::InternalError(absl::StrCat("'", block.tensor, "': ", rows->size(), " bytes for ", n, " rows"));
      }
      for (int64_t i = 0; i < n; ++i) {
        for (int b = 0; b < bands; ++b) {
          std::memcpy(host[b].data() + (r + i) * band_bytes, rows->data() + i * row_bytes + b * band_bytes, band_bytes);
        }
      }
    }
    for (int b = 0; b < bands; ++b) {
      auto table = backend.PrepareBlockRows(format, host[b].data(), R, static_cast<int>(cols));
      if (!table.ok()) return table.status();
      out.blocks.push_back(std::move(*table));
      std::vector<uint8_t>().swap(host[b]);
    }
    return out;
  }
  for (int b = 0; b < bands; ++b) {
    auto buf = backend.Allocate(kernels::DType::kF32, R, cols);
    if (!buf.ok()) return buf.status();
    out.f32.push_back(std::move(*buf));
  }
  std::vector<float> band;
  for (int64_t r = 0; r < R; r += chunk_rows) {
    const int64_t n = std::min(chunk_rows, R - r);
    TensorRegion part = all;
    part.row_begin = all.row_begin + r;
    part.row_end = part.row_begin + n;
    auto rows = source.Read(block.tensor, block.shape, part);
    if (!rows.ok()) return rows.status();
    band.resize(static_cast<size_t>(n * cols));
    for (int b = 0; b < bands; ++b) {
      for (int64_t i = 0; i < n; ++i) {
        const float* from = rows->data() + (i * bands + b) * cols;
        for (int64_t j = 0; j < cols; ++j) band[i * cols + j] = from[j] * scale;
      }
      FLOVER_RETURN_IF_ERROR(backend.Upload(band.data(), out.f32[b].tensor().Rows(r, n)));
    }
  }
  return out;
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
