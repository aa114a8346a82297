// The layout of one layer's KV arena and of a ragged batch's sequence
// table: plain data shared by every backend's host code and device kernels.
// No absl, no CUDA: nvcc and g++ both compile it.
#ifndef FLOVER_KERNELS_KV_LAYER_H_
#define FLOVER_KERNELS_KV_LAYER_H_

#include <cstdint>

namespace flover::kernels {

// One sequence's rows in a ragged token batch: rows [row, row + len) of the
// batch are its tokens at positions [pos, pos + len), and its keys/values live
// in KV cache slot `slot`. Laid out as four int32, as SeqTable::device holds it.
struct SeqRows {
  int32_t slot = 0;
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

// One layer's K and V arena in the backend's memory; a slot's data is
// contiguous in both.
//   v: [slots, heads, padded_seq, head_dim]
//   k: [slots, heads, padded_seq / kKeyBlock, head_dim, kKeyBlock]
// Keys are transposed within blocks of kKeyBlock positions: a query's scores
// are multiply-adds over positions (vector lanes on a CPU, the threads of a
// warp on a GPU) with no horizontal sums, and the keys of positions [0, n)
// are ceil(n / kKeyBlock) contiguous blocks whatever max_seq is.
struct KvLayer {
  static constexpr int kKeyBlock = 32;

  void* k = nullptr;  // elements of `dtype`: float, or bfloat16 bits (uint16_t)
  void* v = nullptr;
  int32_t slots = 0;
  int32_t heads = 0;
  int32_t max_seq = 0;  // positions per slot
  int32_t head_dim = 0;
  KvDtype dtype = KvDtype::kF32;

  // Offsets below count elements of `dtype`.

  static int64_t PaddedSeq(int64_t max_seq) {
    return (max_seq + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
  }
  int64_t padded_seq() const { return PaddedSeq(max_seq); }
  int64_t head_stride() const { return padded_seq() * head_dim; }
  int64_t slot_stride() const { return head_stride() * heads; }
  // Offset of key (dim d, position p) from its head's start in k.
  int64_t key_offset(int d, int p) const {
    return int64_t{p / kKeyBlock} * head_dim * kKeyBlock + int64_t{d} * kKeyBlock + p % kKeyBlock;
  }
};

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_KV_LAYER_H_
