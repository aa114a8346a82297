// Putting host weights on a backend, checked against the shape the model
// expects (a mismatch is a bug in a loader or a shard, reported, not a
// fault).
#ifndef FLOVER_MODEL_WEIGHT_UPLOAD_H_
#define FLOVER_MODEL_WEIGHT_UPLOAD_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "model/loader/safetensors.h"
#include "model/loader/weight_source.h"

namespace flover {

// `host` as an f32 [rows, cols] buffer; an empty vector stays an empty
// buffer (an absent bias).
absl::StatusOr<kernels::Buffer> UploadF32(kernels::Backend& backend, const std::vector<float>& host,
                                          int64_t rows, int64_t cols);

// `size` host values ([K, N] or [N, K] per `layout`, in their stored dtype)
// prepared as a GEMM weight.
absl::StatusOr<std::unique_ptr<kernels::Weight>> PrepareMatrix(kernels::Backend& backend,
                                                               kernels::HostValues host,
                                                               int64_t size, int K, int N,
                                                               kernels::WeightLayout layout);

// The same into *out, then the host values freed: a model put on a backend
// part by part holds on the host only what is not there yet.
absl::Status UploadF32Releasing(kernels::Backend& backend, std::vector<float>& host, int64_t rows,
                                int64_t cols, kernels::Buffer* out);
absl::Status PrepareMatrixReleasing(kernels::Backend& backend, StoredValues& host, int K, int N,
                                    kernels::WeightLayout layout,
                                    std::unique_ptr<kernels::Weight>* out);

// A one-block row recipe (an embedding's vocabulary rows) as an f32
// [rows, cols] buffer, read and uploaded `chunk_rows` rows at a time: the
// host holds one block of rows, never a whole float32 copy beside the
// backend's. Each value is multiplied by `scale` (in float32) on the way.
absl::StatusOr<kernels::Buffer> UploadRowsF32(kernels::Backend& backend, const WeightSource& source,
                                              const WeightRecipe& recipe, int64_t cols,
                                              float scale = 1.0f, int64_t chunk_rows = 2048);

// A one-block row recipe [rows, bands * cols] split into `bands` tables
// [rows, cols] (band b: columns [b cols, (b + 1) cols); Gemma 4's per-layer
// embedding table, a band per layer), read `chunk_rows` rows at a time, so
// the file is read once. With `keep_blocks` and a tensor in blocks whose
// band is whole blocks the backend's block kernels take (BlockRowsFit), each
// band keeps the file's blocks (`blocks`): read in place from the mapped
// file where the source maps it and the backend reads host memory (the CPU:
// rows are paged in as tokens use them), else copied; otherwise each band is
// f32 (`f32`), times `scale`.
struct ColumnBands {
  std::vector<kernels::Buffer> f32;
  std::vector<std::unique_ptr<kernels::BlockRows>> blocks;
};
absl::StatusOr<ColumnBands> UploadColumnBands(kernels::Backend& backend, const WeightSource& source,
                                              const WeightRecipe& recipe, int bands, int64_t cols, float scale,
                                              bool keep_blocks, int64_t chunk_rows = 4096);

// The buffer as an op argument: null when empty (no bias).
inline const kernels::Tensor* OrNull(const kernels::Buffer& b) {
  return b.empty() ? nullptr : &b.tensor();
}

}  // namespace flover

#endif  // FLOVER_MODEL_WEIGHT_UPLOAD_H_
