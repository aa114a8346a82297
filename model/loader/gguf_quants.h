// ggml's tensor types, as GGUF files store them, and their conversion to
// float32. Each block format is dequantized value for value as ggml's
// reference code defines it (the same float32 operations in the same order,
// never fused: gguf-py's dequantize gives the same bits), so a model read
// here holds exactly the weights llama.cpp would compute with.
#ifndef FLOVER_MODEL_LOADER_GGUF_QUANTS_H_
#define FLOVER_MODEL_LOADER_GGUF_QUANTS_H_

#include <cstdint>
#include <string>

#include "kernels/ggml_types.h"

namespace flover {

// The types' one table lives in kernels/ggml_types.h.
using kernels::GgmlType;
using kernels::GgmlTypeInfo;
using kernels::GgmlTypeOf;

// A type's name, or "type N" for an unknown id.
std::string GgmlTypeName(uint32_t type);

// Converts `n` values (a whole number of blocks) of a type that
// dequantizes: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K. `src` holds n / block_size blocks; no alignment needed.
void GgmlDequantize(const GgmlTypeInfo& type, const uint8_t* src, int64_t n, float* dst);

}  // namespace flover

#endif  // FLOVER_MODEL_LOADER_GGUF_QUANTS_H_
