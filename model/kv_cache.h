// The KV cache arena: allocated once in the backend's memory, for every
// layer the K and V of `slots` sequences x `max_seq` positions x heads x
// head_dim, each slot's data contiguous (kernels::KvLayer describes the
// layout).
#ifndef FLOVER_MODEL_KV_CACHE_H_
#define FLOVER_MODEL_KV_CACHE_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace flover {

struct KvCacheShape {
  int layers = 0;
  int slots = 0;
  int heads = 0;  // local heads (all of them without tensor parallelism)
  int max_seq = 0;
  int head_dim = 0;
  kernels::KvDtype dtype = kernels::KvDtype::kF32;

  int64_t bytes() const;
  // K and V of one token in every layer.
  int64_t bytes_per_token() const {
    return int64_t{2} * layers * heads * head_dim * kernels::KvDtypeBytes(dtype);
  }
};

class KvCache {
 public:
  // Fails if the shape is empty, its dtype is not the backend's, or the
  // arena does not fit: on a device with a known amount of free memory the
  // error says how much the cache needs and how much is free.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(kernels::Backend& backend,
                                                         const KvCacheShape& shape);

  const KvCacheShape& shape() const { return shape_; }
  kernels::Backend& backend() const { return backend_; }
  kernels::KvLayer layer(int i) const;

  // Copies positions [0, len) of slot `from` to slot `to` in every layer,
  // within the backend's memory.
  absl::Status MoveSlot(int from, int to, int len);

 private:
  KvCache(kernels::Backend& backend, const KvCacheShape& shape, kernels::Buffer data)
      : backend_(backend), shape_(shape), data_(std::move(data)) {}

  kernels::Backend& backend_;
  KvCacheShape shape_;
  // Left uninitialized: positions are written before they are read (and on
  // the CPU, untouched pages of a large arena cost no memory).
  kernels::Buffer data_;
};

}  // namespace flover

#endif  // FLOVER_MODEL_KV_CACHE_H_
