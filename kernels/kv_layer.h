// The layout of one layer's KV cache and of a ragged batch's sequence
// table: plain data shared by every backend's host code and device kernels.
// No absl, no CUDA: nvcc and g++ both compile it.
#ifndef FLOVER_KERNELS_KV_LAYER_H_
#define FLOVER_KERNELS_KV_LAYER_H_

#include <cstdint>
#include <string>

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

// How keys (or values) are stored. kBF16 halves the cache and the bytes
// attention reads per step; values are rounded to nearest even when written
// and every product and sum stays float32. kQ8_0 and kQ4_0 quantize each
// row once, when it is written, exactly as ggml's q8_0 and q4_0 blocks do
// (a half-precision scale per 32 consecutive values of a head's row, int8
// or 4-bit codes), and attention reads the codes in place; they need head
// dims that are multiples of 32 (CPU). kFp8 (CUDA) stores each value as an
// OCP e4m3 float with a scale of 1, as vLLM's uncalibrated fp8 cache does:
// rounded to nearest even, magnitudes past 448 saturated.
enum class KvDtype {
  kF32,
  kBF16,
  kQ8_0,
  kQ4_0,
  kFp8,
};

// Values that share one scale in kQ8_0 and kQ4_0 (ggml's QK8_0 and QK4_0).
constexpr int kKvQuantGroup = 32;

inline const char* KvDtypeName(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kBF16: return "bf16";
    case KvDtype::kQ8_0: return "q8_0";
    case KvDtype::kQ4_0: return "q4_0";
    case KvDtype::kFp8: return "fp8";
    default: return "f32";
  }
}
inline bool KvDtypeQuantized(KvDtype dtype) { return dtype == KvDtype::kQ8_0 || dtype == KvDtype::kQ4_0; }
// Whether rows of head_dim values can be stored as dtype.
inline bool KvDtypeHolds(KvDtype dtype, int head_dim) {
  return head_dim > 0 && (!KvDtypeQuantized(dtype) || head_dim % kKvQuantGroup == 0);
}

// Keys' and values' storage: the same (one dtype converts to a format) or
// each its own (llama.cpp's -ctk / -ctv).
struct KvFormat {
  KvDtype k = KvDtype::kF32;
  KvDtype v = KvDtype::kF32;
  constexpr KvFormat() = default;
  constexpr KvFormat(KvDtype both) : k(both), v(both) {}  // NOLINT: one dtype for both, on purpose
  constexpr KvFormat(KvDtype keys, KvDtype values) : k(keys), v(values) {}
  bool operator==(const KvFormat& o) const { return k == o.k && v == o.v; }
  bool operator!=(const KvFormat& o) const { return !(*this == o); }
};

// "q8_0", or keys' and values' "q8_0,q4_0" where they differ (what
// --kv_dtype reads).
inline std::string KvFormatName(KvFormat f) {
  return f.k == f.v ? KvDtypeName(f.k) : std::string(KvDtypeName(f.k)) + "," + KvDtypeName(f.v);
}

// Bytes of `values` consecutive values in `dtype`, a quantized one's codes
// alone: where value n of a row-major head block starts, and (for all of a
// block's values) where a quantized block's scales start.
constexpr int64_t KvCodeBytes(KvDtype dtype, int64_t values) {
  switch (dtype) {
    case KvDtype::kBF16: return 2 * values;
    case KvDtype::kQ8_0: return values;
    case KvDtype::kQ4_0: return values / 2;
    case KvDtype::kFp8: return values;
    default: return 4 * values;
  }
}

// Bytes of one head's block (kBlockSize positions of head_dim values) in
// `dtype`. Quantized: the codes, then the scales (half bits), apart so both
// are read as aligned vectors: q8_0 32 + 2 bytes per 32 values, q4_0 16 + 2.
inline int64_t KvHeadBlockBytes(KvDtype dtype, int head_dim);

// One layer's K and V in the backend's memory: `num_blocks` blocks of
// kBlockSize positions for every (local) head, head-major so that one
// head's consecutive blocks are consecutive in memory (a sequence's blocks
// often are: block-major cost 5-9% of decode at batch 32 on the CPU,
// docs/performance.md).
//   k: [heads, num_blocks] head blocks, each [head_dim, kBlockSize] keys
//   v: [heads, num_blocks] head blocks, each [kBlockSize, head_dim] values
// A sequence owns a list of blocks (any blocks, in any order: a block table),
// so the cache holds as many sequences as their positions fill, not slots x
// the longest context. Keys are transposed within a block: a query's scores
// over the block's positions are multiply-adds over positions (vector lanes
// on a CPU, the threads of a warp on a GPU) with no horizontal sums.
//
// Quantized head blocks keep that arrangement for their codes, with each
// row's scales beside them (g: a group of 32 dims, j: a position):
//   q8_0 keys:   int8 codes [head_dim][kBlockSize], scales [head_dim / 32][kBlockSize]
//   q8_0 values: int8 codes [kBlockSize][head_dim], scales [kBlockSize][head_dim / 32]
//   q4_0 keys:   bytes [head_dim / 2][kBlockSize]: byte (g * 16 + i, j) holds dim
//                g * 32 + i in its low nibble and g * 32 + 16 + i in its high one
//                (ggml's pairing); scales as q8_0's
//   q4_0 values: bytes [kBlockSize][head_dim / 2], the same pairing along a
//                row (a row's bytes are its ggml q4_0 blocks' codes); scales as q8_0's
// A value is its scale times its code (q4_0: the nibble minus 8).
struct KvLayer {
  static constexpr int kBlockSize = 32;
  // A block table entry for positions no row of the step attends in any
  // layer (behind every layer's window: the engine gave the block back).
  // Kernels never read it; the checks refuse it wherever a row would.
  static constexpr int32_t kNoBlock = -1;

  void* k = nullptr;  // head blocks of format.k
  void* v = nullptr;  // head blocks of format.v
  int32_t num_blocks = 0;
  int32_t heads = 0;
  int32_t head_dim = 0;
  KvFormat format;

  int64_t key_block_bytes() const { return KvHeadBlockBytes(format.k, head_dim); }
  int64_t value_block_bytes() const { return KvHeadBlockBytes(format.v, head_dim); }
  // Byte offsets of head `head` of block `block` in k, and in v.
  int64_t key_block(int32_t block, int head) const {
    return (int64_t{head} * num_blocks + block) * key_block_bytes();
  }
  int64_t value_block(int32_t block, int head) const {
    return (int64_t{head} * num_blocks + block) * value_block_bytes();
  }
  // Bytes of k, and of v.
  int64_t key_bytes() const { return int64_t{num_blocks} * heads * key_block_bytes(); }
  int64_t value_bytes() const { return int64_t{num_blocks} * heads * value_block_bytes(); }
  // f32, bf16 and fp8 head blocks: the element index of key dim d at
  // position j (a value's is j * head_dim + d).
  static int64_t key_offset(int d, int j) { return int64_t{d} * kBlockSize + j; }
  static int64_t BlocksFor(int64_t positions) { return (positions + kBlockSize - 1) / kBlockSize; }
};

inline int64_t KvHeadBlockBytes(KvDtype dtype, int head_dim) {
  const int64_t values = int64_t{head_dim} * KvLayer::kBlockSize;
  return KvCodeBytes(dtype, values) + (KvDtypeQuantized(dtype) ? 2 * values / kKvQuantGroup : 0);
}

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
