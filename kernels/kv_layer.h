// The layout of one layer's KV cache and of a ragged batch's sequence
// table: plain data shared by every backend's host code and device kernels.
// No absl, no CUDA: nvcc and g++ both compile it.
#ifndef FLOVER_KERNELS_KV_LAYER_H_
#define FLOVER_KERNELS_KV_LAYER_H_

#include <cstdint>

namespace flover::kernels {

// One sequence's rows in a ragged token batch: rows [row, row + len) of the
// batch are its tokens at positions [pos, pos + len). Its keys and values
// live in KV blocks: position p in block block_ids[blocks + p / kBlockSize]
// of the batch's block table (SeqTable), at p % kBlockSize (KvLayer::kNoBlock
// for blocks wholly behind a window, which nothing reads). Laid out as four
// int32, as SeqTable::device holds it.
struct SeqRows {
  int32_t blocks = 0;  // offset of the sequence's block list in the block table
  int32_t pos = 0;
  int32_t len = 0;
  int32_t row = 0;
};
static_assert(sizeof(SeqRows) == 4 * sizeof(int32_t), "SeqRows is uploaded as int32[4]");

// How keys and values are stored. kBF16 halves the cache and the bytes
// attention reads per step; values are rounded to nearest even when written
// and every product and sum stays float32.
enum class KvDtype {
  kF32,
  kBF16,
};

inline const char* KvDtypeName(KvDtype dtype) { return dtype == KvDtype::kBF16 ? "bf16" : "f32"; }
inline int KvDtypeBytes(KvDtype dtype) { return dtype == KvDtype::kBF16 ? 2 : 4; }

// One layer's K and V in the backend's memory: `num_blocks` blocks of
// kBlockSize positions for every (local) head, head-major so that one
// head's consecutive blocks are consecutive in memory (a sequence's blocks
// often are: block-major cost 5-9% of decode at batch 32 on the CPU,
// docs/performance.md).
//   k: [heads, num_blocks, head_dim, kBlockSize]
//   v: [heads, num_blocks, kBlockSize, head_dim]
// A sequence owns a list of blocks (any blocks, in any order: a block table),
// so the cache holds as many sequences as their positions fill, not slots x
// the longest context. Keys are transposed within a block: a query's scores
// over the block's positions are multiply-adds over positions (vector lanes
// on a CPU, the threads of a warp on a GPU) with no horizontal sums.
struct KvLayer {
  static constexpr int kBlockSize = 32;
  // A block table entry for positions no row of the step attends in any
  // layer (behind every layer's window: the engine gave the block back).
  // Kernels never read it; the checks refuse it wherever a row would.
  static constexpr int32_t kNoBlock = -1;

  void* k = nullptr;  // elements of `dtype`: float, or bfloat16 bits (uint16_t)
  void* v = nullptr;
  int32_t num_blocks = 0;
  int32_t heads = 0;
  int32_t head_dim = 0;
  KvDtype dtype = KvDtype::kF32;

  // Offsets below count elements of `dtype`, the same in k and v.

  // Head `head` of block `block`: [head_dim, kBlockSize] keys, or
  // [kBlockSize, head_dim] values.
  int64_t head_block(int32_t block, int head) const {
    return (int64_t{head} * num_blocks + block) * head_dim * kBlockSize;
  }
  // Elements of k (and of v).
  int64_t elements() const { return int64_t{num_blocks} * heads * head_dim * kBlockSize; }
  static int64_t key_offset(int d, int j) { return int64_t{d} * kBlockSize + j; }
  int64_t value_offset(int j, int d) const { return int64_t{j} * head_dim + d; }
  static int64_t BlocksFor(int64_t positions) { return (positions + kBlockSize - 1) / kBlockSize; }
};

// One recurrent layer's per-sequence state in the backend's memory (the
// short convolutions and scans of hybrid models): `slots` slots, each the
// window of the layer's causal convolution (conv_elems f32: its last K - 1
// inputs, [K - 1, channels], oldest first) and its scan's state (scan_elems
// f32; e.g. the gated delta rule's [heads, dk, dv]). Not blocks: a state
// has the same size at every position.
struct StateLayer {
  float* conv = nullptr;  // [slots, conv_elems]
  float* scan = nullptr;  // [slots, scan_elems]; null where the layer has none
  int32_t slots = 0;
  int64_t conv_elems = 0;
  int64_t scan_elems = 0;
};

// Where one sequence's recurrent state comes from and goes to in a step:
// its rows start from slot `read` (kNoSlot: from zeros, at position 0) and
// its state after its last row is written to slot `write` (the same slot,
// or another: a verify step keeps the state before it, a prefix hit starts
// from a cached checkpoint). Laid out as two int32 per sequence.
struct SeqState {
  static constexpr int32_t kNoSlot = -1;
  int32_t read = kNoSlot;
  int32_t write = 0;
};
static_assert(sizeof(SeqState) == 2 * sizeof(int32_t), "SeqState is uploaded as int32[2]");

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_KV_LAYER_H_
