// ggml's block formats (GGUF's tensor types) converted to float32. Each
// format is dequantized value for value as ggml's reference code defines it
// (the same float32 operations in the same order, never fused: gguf-py's
// dequantize gives the same bits), so a model holds exactly the weights
// llama.cpp would compute with. The loader reads files with it; the CPU
// backend's EmbedBlocks looks rows up with it. Two types are also rewritten
// exactly as others that backends run (their stand-ins, below).
#ifndef FLOVER_KERNELS_GGML_DEQUANT_H_
#define FLOVER_KERNELS_GGML_DEQUANT_H_

#include <cstdint>

#include "kernels/ggml_types.h"

namespace flover::kernels {

// Converts `n` values (a whole number of blocks) of a type that
// dequantizes: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4. `src` holds n / block_size blocks; no
// alignment needed.
void GgmlDequantize(const GgmlTypeInfo& type, const uint8_t* src, int64_t n, float* dst);

// Rewrites `blocks` Q3_K super-blocks (110 bytes each) as Q6_K ones (210
// bytes each) holding the same values: Q3_K's value d * (sc - 32) * (q - 4),
// q of 3 bits, is Q6_K's d * sc' * (q' - 32) with sc' = sc - 32 and q' =
// q + 28, the same sub-blocks of 16 and the same f16 d, so each dequantizes
// to the same bits (the same float32 operations). Block kernels that run
// Q6_K run Q3_K so, at 6.6 bits a value instead of 3.4.
void GgmlQ3KAsQ6K(const uint8_t* src, int64_t blocks, uint8_t* dst);
// Rewrites IQ4_NL blocks (18 bytes: f16 d, 32 4-bit indices into a table
// of 16 int8 values) as Q8_0 ones (34 bytes) holding the same values: the
// table's value at each index is the Q8_0 code, d the same (d * v is
// v * d): 8.5 bits a value instead of 4.5.
void GgmlIQ4NLAsQ8_0(const uint8_t* src, int64_t blocks, uint8_t* dst);

// A block type backends run as another, which holds the same values block
// for block (same values per block): `rewrite` makes its blocks.
struct GgmlStandIn {
  GgmlType type;
  GgmlType as;
  void (*rewrite)(const uint8_t* src, int64_t blocks, uint8_t* dst);
};
// Q3_K's (as Q6_K) and IQ4_NL's (as Q8_0); null for other types.
const GgmlStandIn* GgmlStandInFor(uint32_t type);

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_GGML_DEQUANT_H_
