// ggml's tensor types as GGUF files store them: the one table of their ids,
// names, block sizes and bytes (gguf-py's GGML_QUANT_SIZES), which the GGUF
// reader, the loader's dequantizer and the backends' block formats
// (block_format.h) all read. Header-only, no absl: nvcc sees it.
#ifndef FLOVER_KERNELS_GGML_TYPES_H_
#define FLOVER_KERNELS_GGML_TYPES_H_

#include <cstdint>

namespace flover::kernels {

// ggml_type ids (ggml.h) this code names; GgmlTypeOf knows every id a GGUF
// file may hold.
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
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kBF16 = 30,
  kMXFP4 = 39,
};

struct GgmlTypeInfo {
  uint32_t id;
  const char* name;  // as ggml and llama.cpp print it: "Q4_K"
  int block_size;    // values per block
  int type_size;     // bytes per block
  bool dequantizes;  // converted to float32 by GgmlDequantize (ggml_dequant.h)
};

inline constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "F32", 1, 4, true},         {1, "F16", 1, 2, true},
    {2, "Q4_0", 32, 18, true},      {3, "Q4_1", 32, 20, true},
    {6, "Q5_0", 32, 22, true},      {7, "Q5_1", 32, 24, true},
    {8, "Q8_0", 32, 34, true},      {9, "Q8_1", 32, 40, false},
    {10, "Q2_K", 256, 84, true},    {11, "Q3_K", 256, 110, true},
    {12, "Q4_K", 256, 144, true},   {13, "Q5_K", 256, 176, true},
    {14, "Q6_K", 256, 210, true},   {15, "Q8_K", 256, 292, false},
    {16, "IQ2_XXS", 256, 66, false}, {17, "IQ2_XS", 256, 74, false},
    {18, "IQ3_XXS", 256, 98, false}, {19, "IQ1_S", 256, 50, false},
    {20, "IQ4_NL", 32, 18, true},   {21, "IQ3_S", 256, 110, false},
    {22, "IQ2_S", 256, 82, false},  {23, "IQ4_XS", 256, 136, true},
    {24, "I8", 1, 1, false},        {25, "I16", 1, 2, false},
    {26, "I32", 1, 4, false},       {27, "I64", 1, 8, false},
    {28, "F64", 1, 8, false},       {29, "IQ1_M", 256, 56, false},
    {30, "BF16", 1, 2, true},       {34, "TQ1_0", 256, 54, false},
    {35, "TQ2_0", 256, 66, false},  {39, "MXFP4", 32, 17, true},
};

// The type with id `type`, or null for an id ggml does not define.
constexpr const GgmlTypeInfo* GgmlTypeOf(uint32_t type) {
  for (const GgmlTypeInfo& t : kGgmlTypes) {
    if (t.id == type) return &t;
  }
  return nullptr;
}

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_GGML_TYPES_H_
