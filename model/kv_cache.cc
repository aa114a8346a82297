#include "model/kv_cache.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace flover {

std::vector<int32_t> BlockRange(int first, int count) {
  std::vector<int32_t> ids(count);
  std::iota(ids.begin(), ids.end(), first);
  return ids;
}

std::vector<int32_t> InterleavedBlocks(int seq, int seqs, int max_seq) {
  std::vector<int32_t> ids(KvCacheShape::BlocksFor(max_seq));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = seq + static_cast<int32_t>(i) * seqs;
  return ids;
}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(kernels::Backend& backend,
                                                         const KvCacheShape& s) {
  if (s.layers < 1 || s.heads < 1 || s.head_dim < 1 || s.num_blocks < 1 || s.max_seq < 1) {
    return absl::InvalidArgumentError("KV cache shape must be positive in every dimension");
  }
  if ((!s.layer_heads.empty() && static_cast<int>(s.layer_heads.size()) != s.layers) ||
      s.layer_heads.size() != s.layer_head_dim.size()) {
    return absl::InvalidArgumentError("per-layer KV heads and head sizes need one entry per layer each");
  }
  for (int l = 0; l < s.layers; ++l) {
    if (s.heads_of(l) < 1 || s.head_dim_of(l) < 1) {
      return absl::InvalidArgumentError("KV cache shape must be positive in every dimension");
    }
  }
  if (s.local_blocks < 0 || (s.local_blocks > 0 && (static_cast<int>(s.local_layers.size()) != s.layers ||
                                                    s.local_window < 1 || s.local_layer_count() < 1 ||
                                                    s.global_layer_count() < 1))) {
    return absl::InvalidArgumentError(
        "local KV blocks need local and global layers (one mark per layer) and a local window");
  }
  if (s.state_slots < 0 || s.state_layers < 0 || s.conv_state < 0 || s.scan_state < 0 ||
      (s.state_slots > 0) != (s.state_layers > 0) ||
      (s.state_layers > 0 && s.conv_state + s.scan_state < 1)) {
    return absl::InvalidArgumentError(
        "recurrent state needs slots, recurrent layers and a state size, each positive, or none of them");
  }
  if (s.format != backend.kv_format()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a KV cache of ", kernels::KvFormatName(s.format), " on a backend that keeps K/V in ",
        kernels::KvFormatName(backend.kv_format())));
  }
  for (int l = 0; l < s.layers; ++l) {
    if (!kernels::KvDtypeHolds(s.format.k, s.head_dim_of(l)) || !kernels::KvDtypeHolds(s.format.v, s.head_dim_of(l))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--kv_dtype=", kernels::KvFormatName(s.format), " cannot hold this model's heads of ", s.head_dim_of(l),
          " dims (layer ", l, "): q8_0 and q4_0 need head dims that are multiples of ", kernels::kKvQuantGroup));
    }
  }
  const kernels::DeviceInfo device = backend.Device();
  const double mib = static_cast<double>(s.bytes()) / (1 << 20);
  if (device.free_bytes > 0 && s.bytes() > device.free_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the KV cache (%d blocks of %d positions = %d tokens, %s) needs %.0f MiB but %s has %.0f "
        "MiB free; lower --kv_cache_memory",
        s.num_blocks, KvCacheShape::kBlockSize, s.tokens(), kernels::KvFormatName(s.format), mib,
        device.name, static_cast<double>(device.free_bytes) / (1 << 20)));
  }
  // Every head block is a whole number of floats (a head dim that
  // quantizes is a multiple of 32), so the cache is too.
  auto data = backend.Allocate(kernels::DType::kF32, 1, s.kv_bytes() / 4);
  kernels::Buffer states;
  if (data.ok() && s.state_slots > 0) {
    auto allocated = backend.Allocate(kernels::DType::kF32, 1, s.bytes_per_state_slot() / 4 * s.state_slots);
    if (!allocated.ok()) data = allocated.status();
    if (allocated.ok()) states = std::move(*allocated);
  }
  if (!data.ok()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cannot allocate a KV cache of %.0f MiB on %s: %s", mib, device.name,
        data.status().message()));
  }
  return std::unique_ptr<KvCache>(new KvCache(backend, s, std::move(*data), std::move(states)));
}

int KvCacheShape::local_layer_count() const {
  return local_blocks > 0 ? static_cast<int>(std::count(local_layers.begin(), local_layers.end(), true)) : 0;
}

kernels::KvLayer KvCache::layer(int i) const {
  // The global layers' K and V first, each [k | v] over num_blocks blocks;
  // then the local layers', over local_blocks.
  const bool local = shape_.local(i);
  const int64_t blocks = local ? shape_.local_blocks : shape_.num_blocks;
  int64_t offset = local ? shape_.bytes_per_block() * shape_.num_blocks : 0;
  for (int l = 0; l < i; ++l) {
    if (shape_.local(l) == local) offset += shape_.token_bytes_of(l) * KvCacheShape::kBlockSize * blocks;
  }
  kernels::KvLayer kv{nullptr, nullptr, static_cast<int>(blocks), shape_.heads_of(i), shape_.head_dim_of(i),
                      shape_.format};
  char* base = static_cast<char*>(data_.tensor().data) + offset;
  kv.k = base;
  kv.v = base + kv.key_bytes();
  return kv;
}

kernels::StateLayer KvCache::state(int i) const {
  const KvCacheShape& s = shape_;
  float* base = states_.tensor().as<float>() + int64_t{i} * s.state_slots * (s.conv_state + s.scan_state);
  return {base, s.scan_state > 0 ? base + int64_t{s.state_slots} * s.conv_state : nullptr, s.state_slots,
          s.conv_state, s.scan_state};
}

}  // namespace flover
