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

namespace flover {

// `host` as an f32 [rows, cols] buffer; an empty vector stays an empty
// buffer (an absent bias).
absl::StatusOr<kernels::Buffer> UploadF32(kernels::Backend& backend, const std::vector<float>& host,
                                          int64_t rows, int64_t cols);

// `host` ([K, N] or [N, K] per `layout`) prepared as a GEMM weight.
absl::StatusOr<std::unique_ptr<kernels::Weight>> PrepareMatrix(kernels::Backend& backend,
                                                               const std::vector<float>& host,
                                                               int K, int N,
                                                               kernels::WeightLayout layout);

// The buffer as an op argument: null when empty (no bias).
inline const kernels::Tensor* OrNull(const kernels::Buffer& b) {
  return b.empty() ? nullptr : &b.tensor();
}

}  // namespace flover

#endif  // FLOVER_MODEL_WEIGHT_UPLOAD_H_
