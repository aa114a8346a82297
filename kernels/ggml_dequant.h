// ggml's block formats (GGUF's tensor types) converted to float32. Each
// format is dequantized value for value as ggml's reference code defines it
// (the same float32 operations in the same order, never fused: gguf-py's
// dequantize gives the same bits), so a model holds exactly the weights
// llama.cpp would compute with. The loader reads files with it; the CPU
// backend's EmbedBlocks looks rows up with it.
#ifndef FLOVER_KERNELS_GGML_DEQUANT_H_
#define FLOVER_KERNELS_GGML_DEQUANT_H_

#include <cstdint>

#include "kernels/ggml_types.h"

namespace flover::kernels {

// Converts `n` values (a whole number of blocks) of a type that
// dequantizes: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K. `src` holds n / block_size blocks; no alignment needed.
void GgmlDequantize(const GgmlTypeInfo& type, const uint8_t* src, int64_t n, float* dst);

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_GGML_DEQUANT_H_
