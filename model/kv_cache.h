// The KV cache: allocated once in the backend's memory, for every attention
// layer the K and V of `num_blocks` blocks of kernels::KvLayer::kBlockSize
// positions (kernels::KvLayer describes the layout) — or, with local
// blocks, the global layers' in those and the local layers' in
// `local_blocks` of their own — and for every recurrent layer (hybrid
// models) `state_slots` slots of per-sequence state (kernels::StateLayer).
// Which sequence a block or slot belongs to is the caller's business (the
// engine's cache manager): a forward names each sequence's blocks and state
// slots in its ForwardBatch.
#ifndef FLOVER_MODEL_KV_CACHE_H_
#define FLOVER_MODEL_KV_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace flover {

struct KvCacheShape {
  static constexpr int kBlockSize = kernels::KvLayer::kBlockSize;

  int layers = 0;
  int heads = 0;  // local heads (all of them without tensor parallelism)
  int head_dim = 0;
  // Each layer's where they differ (Gemma 4's global layers), `layers`
  // entries each, or empty: every layer's are heads and head_dim.
  std::vector<int> layer_heads, layer_head_dim;
  int heads_of(int l) const { return layer_heads.empty() ? heads : layer_heads[l]; }
  int head_dim_of(int l) const { return layer_head_dim.empty() ? head_dim : layer_head_dim[l]; }
  kernels::KvFormat format;  // keys' and values' dtypes
  int num_blocks = 0;
  // The most positions one sequence may reach: what a step's launches are
  // sized for when they must not depend on the batch (recorded steps).
  int max_seq = 0;
  // > 0: every layer attends only the last `window` positions (Mistral), so
  // a sequence's blocks wholly behind its next row's window are never read
  // again: the engine gives them back, naming them kernels::KvLayer::kNoBlock
  // in its block list. 0: some layer reads the whole context.
  int window = 0;
  // Local layers beside global ones (Gemma 2 and 3): the layers marked here
  // (`layers` entries, or empty) attend only the last local_window positions
  // while the others read the whole context.
  std::vector<bool> local_layers;
  int local_window = 0;
  // > 0: the local layers keep their K and V in blocks of their own, this
  // many, which ForwardBatch::local_block_ids names; a sequence gives back
  // those wholly behind its window while its global layers' blocks cover
  // its whole context. 0: every layer's K and V in the same blocks.
  int local_blocks = 0;

  // Recurrent layers (hybrid models) keep no K and V: each running
  // sequence keeps their state in a slot of its own instead (kernels::
  // StateLayer), conv_state + scan_state f32 values per layer, in
  // `state_layers` layers; state_slots slots in all (0: no recurrent layer).
  int state_layers = 0;
  int64_t conv_state = 0, scan_state = 0;
  int state_slots = 0;

  // Whether layer l keeps its K and V in the local blocks.
  bool local(int l) const { return local_blocks > 0 && local_layers[l]; }
  // Layers in the shared blocks (all of them without local blocks), and in
  // the local ones.
  int global_layer_count() const { return layers - local_layer_count(); }
  int local_layer_count() const;
  // K and V of one token in every layer of the shared blocks.
  int64_t bytes_per_token() const { return LayerBytes(false); }
  int64_t bytes_per_block() const { return bytes_per_token() * kBlockSize; }
  // One local block: K and V of kBlockSize positions in every local layer.
  int64_t bytes_per_local_block() const { return local_blocks > 0 ? LayerBytes(true) * kBlockSize : 0; }
  // One state slot: every recurrent layer's state.
  int64_t bytes_per_state_slot() const { return int64_t{4} * state_layers * (conv_state + scan_state); }
  // The K/V blocks' bytes, and with the state slots.
  int64_t kv_bytes() const { return bytes_per_block() * num_blocks + bytes_per_local_block() * local_blocks; }
  int64_t bytes() const { return kv_bytes() + bytes_per_state_slot() * state_slots; }
  int64_t tokens() const { return int64_t{num_blocks} * kBlockSize; }
  // K and V of one token in layer l: each head's share of a block.
  int64_t token_bytes_of(int l) const {
    return int64_t{heads_of(l)} *
           (kernels::KvHeadBlockBytes(format.k, head_dim_of(l)) + kernels::KvHeadBlockBytes(format.v, head_dim_of(l))) /
           kBlockSize;
  }
  // K and V of one token in the layers that are local (or not).
  int64_t LayerBytes(bool in_local) const {
    int64_t bytes = 0;
    for (int l = 0; l < layers; ++l) bytes += local(l) == in_local ? token_bytes_of(l) : 0;
    return bytes;
  }
  static int BlocksFor(int64_t positions) {
    return static_cast<int>(kernels::KvLayer::BlocksFor(positions));
  }
};

// Blocks [first, first + count): a block list for callers that give each
// sequence a fixed range (tests, a single sequence run alone).
std::vector<int32_t> BlockRange(int first, int count);
// Sequence `seq` of `seqs`, each of up to `max_seq` positions, in a cache
// of seqs * BlocksFor(max_seq) blocks handed out round robin: its blocks are
// seq, seq + seqs, seq + 2 * seqs, ... (none next to another of its own, as
// after a pool has churned; benchmarks and tests use it).
std::vector<int32_t> InterleavedBlocks(int seq, int seqs, int max_seq);

class KvCache {
 public:
  // Fails if the shape is empty, its dtype is not the backend's, or the
  // cache does not fit: on a device with a known amount of free memory the
  // error says how much the cache needs and how much is free.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(kernels::Backend& backend,
                                                         const KvCacheShape& shape);

  const KvCacheShape& shape() const { return shape_; }
  kernels::Backend& backend() const { return backend_; }
  kernels::KvLayer layer(int i) const;
  // Recurrent layer i's state slots (i < shape().state_layers).
  kernels::StateLayer state(int i) const;

 private:
  KvCache(kernels::Backend& backend, const KvCacheShape& shape, kernels::Buffer data, kernels::Buffer states)
      : backend_(backend), shape_(shape), data_(std::move(data)), states_(std::move(states)) {}

  kernels::Backend& backend_;
  KvCacheShape shape_;
  // Left uninitialized: positions are written before they are read (and on
  // the CPU, untouched pages of a large cache cost no memory).
  kernels::Buffer data_;
  // f32: each recurrent layer's [conv of every slot | scan of every slot].
  // Left uninitialized too: a sequence's first step reads zeros (kNoSlot)
  // and writes its slot.
  kernels::Buffer states_;
};

}  // namespace flover

#endif  // FLOVER_MODEL_KV_CACHE_H_
