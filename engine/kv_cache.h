// The KV cache arena: allocated once, for every layer the K and V of
// `slots` sequences x `max_seq` positions x heads x head_dim, each slot's data
// contiguous (kernels::KvLayer describes the layout).
#ifndef FLOVER_ENGINE_KV_CACHE_H_
#define FLOVER_ENGINE_KV_CACHE_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/ops.h"

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
  // Fails if the shape is empty or the arena cannot be allocated.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const KvCacheShape& shape);

  const KvCacheShape& shape() const { return shape_; }
  kernels::KvLayer layer(int i) const;

  // Copies positions [0, len) of slot `from` to slot `to` in every layer.
  void MoveSlot(kernels::Ops& ops, int from, int to, int len);

 private:
  explicit KvCache(const KvCacheShape& shape, std::unique_ptr<float[]> data)
      : shape_(shape), data_(std::move(data)) {}

  KvCacheShape shape_;
  // Left uninitialized: positions are written before they are read, and
  // untouched pages of a large arena cost no memory.
  std::unique_ptr<float[]> data_;
};

}  // namespace flover

#endif  // FLOVER_ENGINE_KV_CACHE_H_
