// ggml's tensor types, as GGUF files store them, and their conversion to
// float32. Each block format is dequantized value for value as ggml's
// reference code defines it (the same float32 operations in the same order,
// never fused: gguf-py's dequantize gives the same bits), so a model read
// here holds exactly the weights llama.cpp would compute with.
#ifndef FLOVER_MODEL_LOADER_GGUF_QUANTS_H_
#define FLOVER_MODEL_LOADER_GGUF_QUANTS_H_

#include <cstdint>
#include <string>

namespace flover {

// ggml_type ids (ggml.h) this code names; GgmlTypeOf knows every id a GGUF
// file may hold (its block size and bytes), converted or not.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kBF16 = 30,
};

struct GgmlTypeInfo {
  uint32_t id;
  const char* name;  // as ggml and llama.cpp print it: "Q4_K"
  int block_size;    // values per block
  int type_size;     // bytes per block
  bool dequantizes;  // GgmlDequantize converts it
};

// The type with id `type`, or null for an id ggml does not define.
const GgmlTypeInfo* GgmlTypeOf(uint32_t type);
// Its name, or "type N" for an unknown id.
std::string GgmlTypeName(uint32_t type);

// Converts `n` values (a whole number of blocks) of a type that
// dequantizes: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K. `src` holds n / block_size blocks; no alignment needed.
void GgmlDequantize(const GgmlTypeInfo& type, const uint8_t* src, int64_t n, float* dst);

}  // namespace flover

#endif  // FLOVER_MODEL_LOADER_GGUF_QUANTS_H_
