// Quantized weight blocks as GGUF files store them (ggml's layouts), which
// a backend may take as they are (--dtype=native) instead of float values.
// A row of K values is K / block_values blocks; a weight is N such rows (one
// per output), possibly in runs of different formats (llama.cpp's Q4_K_M
// mixes Q4_K and Q6_K, Q5_K_M Q5_K, Q5_1, Q6_K and Q8_0, and Q/K/V rows are
// stacked). Header-only; nvcc sees it.
#ifndef FLOVER_KERNELS_BLOCK_FORMAT_H_
#define FLOVER_KERNELS_BLOCK_FORMAT_H_

#include <cstdint>

#include "kernels/ggml_types.h"

namespace flover::kernels {

enum class BlockFormat : uint8_t {
  kQ8_0,  // 32 values: f16 d, 32 x s8 q;                     w = d * q
  kQ4_0,  // 32 values: f16 d, 16 bytes of nibbles;           w = d * (q - 8)
  kQ4_1,  // 32 values: f16 d, f16 m, 16 bytes of nibbles;    w = d * q + m
  kQ4_K,  // 256 values: f16 d, f16 dmin, 12 bytes of 6-bit (scale, min) for
          // 8 sub-blocks of 32, 128 bytes of nibbles;         w = d*sc * q - dmin*m
  kQ6_K,  // 256 values: 128 bytes low nibbles, 64 bytes high 2 bits, 16 s8
          // scales (sub-blocks of 16), f16 d;                 w = d*sc * (q - 32)
  kQ5_0,  // 32 values: f16 d, 4 bytes of 5th bits, 16 bytes of nibbles; w = d * (q - 16)
  kQ5_1,  // 32 values: f16 d, f16 m, 4 bytes of 5th bits, 16 of nibbles; w = d * q + m
  kQ5_K,  // 256 values: f16 d, f16 dmin, 12 bytes of 6-bit (scale, min), 32
          // bytes of 5th bits, 128 bytes of nibbles;          w = d*sc * q - dmin*m
  kMXFP4,  // 32 values: e8m0 e, 16 bytes of nibbles (OCP microscaling, gpt-oss's
           // experts); w = 2^(e - 128) * kvalues[q], kvalues the e2m1 values
           // doubled: 0, 1, 2, 3, 4, 6, 8, 12 and their negatives
};

struct BlockFormatInfo {
  const char* name;  // as llama.cpp prints it
  int block_values;
  int block_bytes;
  uint32_t ggml_type;  // ggml_type id in a GGUF file
};

// The format's ggml type (ggml_types.h holds its name and sizes).
constexpr GgmlType GgmlTypeOfFormat(BlockFormat f) {
  constexpr GgmlType kType[] = {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ4_K,
                                GgmlType::kQ6_K, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ5_K,
                                GgmlType::kMXFP4};
  return kType[static_cast<int>(f)];
}

// Its entry of the ggml types' table.
constexpr BlockFormatInfo InfoOf(BlockFormat f) {
  const GgmlTypeInfo* t = GgmlTypeOf(static_cast<uint32_t>(GgmlTypeOfFormat(f)));
  return BlockFormatInfo{t->name, t->block_size, t->type_size, t->id};
}

inline constexpr BlockFormat kAllBlockFormats[] = {
    BlockFormat::kQ8_0, BlockFormat::kQ4_0, BlockFormat::kQ4_1, BlockFormat::kQ4_K,
    BlockFormat::kQ6_K, BlockFormat::kQ5_0, BlockFormat::kQ5_1, BlockFormat::kQ5_K,
    BlockFormat::kMXFP4};

// The format with ggml type id `type`; false when it has none here.
inline bool BlockFormatOfGgmlType(uint32_t type, BlockFormat* out) {
  for (BlockFormat f : kAllBlockFormats) {
    if (InfoOf(f).ggml_type == type) {
      *out = f;
      return true;
    }
  }
  return false;
}

// Bytes of one row of K values (K a whole number of blocks).
inline int64_t BlockRowBytes(BlockFormat f, int64_t K) {
  return K / InfoOf(f).block_values * InfoOf(f).block_bytes;
}

// Whether rows of K values in format f are what backends' block kernels
// take: a whole number of 64 values (two input blocks of 32 per step), and
// of 256 for the K-quants' super-blocks.
inline bool BlockRowsFit(BlockFormat f, int64_t K) {
  const int unit = InfoOf(f).block_values > 64 ? InfoOf(f).block_values : 64;
  return K > 0 && K % unit == 0;
}

// `rows` consecutive output rows in format `format`.
struct BlockSpan {
  BlockFormat format;
  int rows;
};

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_BLOCK_FORMAT_H_
