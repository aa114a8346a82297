#include "engine/kv_cache.h"

#include <new>

#include "absl/strings/str_cat.h"

namespace flover {

int64_t KvCacheShape::bytes() const {
  return int64_t{2} * layers * slots * heads * kernels::KvLayer::PaddedSeq(max_seq) * head_dim *
         kernels::KvDtypeBytes(dtype);
}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const KvCacheShape& s) {
  if (s.layers < 1 || s.slots < 1 || s.heads < 1 || s.max_seq < 1 || s.head_dim < 1) {
    return absl::InvalidArgumentError("KV cache shape must be positive in every dimension");
  }
  const int64_t floats = s.bytes() / int64_t{sizeof(float)};  // a whole number: elements pair up
  std::unique_ptr<float[]> data(new (std::nothrow) float[floats]);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate a KV cache of ", s.bytes() >> 20, " MiB"));
  }
  return std::unique_ptr<KvCache>(new KvCache(s, std::move(data)));
}

kernels::KvLayer KvCache::layer(int i) const {
  const int64_t per_tensor = int64_t{shape_.slots} * shape_.heads *
                             kernels::KvLayer::PaddedSeq(shape_.max_seq) * shape_.head_dim;
  char* base = reinterpret_cast<char*>(data_.get()) +
               2 * per_tensor * i * kernels::KvDtypeBytes(shape_.dtype);
  return kernels::KvLayer{base,
                          base + per_tensor * kernels::KvDtypeBytes(shape_.dtype),
                          shape_.slots,
                          shape_.heads,
                          shape_.max_seq,
                          shape_.head_dim,
                          shape_.dtype};
}

void KvCache::MoveSlot(kernels::Ops& ops, int from, int to, int len) {
  for (int l = 0; l < shape_.layers; ++l) ops.MoveKvSlot(layer(l), from, to, len);
}

}  // namespace flover
