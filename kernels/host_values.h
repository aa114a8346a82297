// Float values in host memory as a checkpoint stores them (float32, bfloat16
// or IEEE half), and their exact widening to float32. Header-only.
#ifndef FLOVER_KERNELS_HOST_VALUES_H_
#define FLOVER_KERNELS_HOST_VALUES_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/block_format.h"
#include "kernels/tensor.h"

namespace flover::kernels {

// IEEE half bits as float32 (every half is a float32: exact).
inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {  // inf / nan
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {  // normal
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {  // zero
    bits = sign;
  } else {  // subnormal: normalize
    exp = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// bfloat16 bits as float32 (exact).
inline float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Host values of a weight matrix in the dtype they were stored in: f32
// (float), bf16 or f16 (uint16_t bits). A float pointer converts to one,
// so float32 callers pass their data as before. Or quantized blocks
// (block_format.h): `data` holds the rows of every span, one after another,
// [N, K] (one row per output).
struct HostValues {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  const BlockSpan* spans = nullptr;  // blocks: the runs of rows, in order
  int num_spans = 0;
  HostValues(const float* f32) : data(f32), dtype(DType::kF32) {}  // NOLINT: implicit on purpose
  HostValues(const void* values, DType type) : data(values), dtype(type) {}
  HostValues(const void* blocks, const BlockSpan* block_spans, int count)
      : data(blocks), spans(block_spans), num_spans(count) {}
  bool is_blocks() const { return spans != nullptr; }
  bool is_float() const {
    return !is_blocks() &&
           (dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16);
  }
};

// n values widened to float32, exactly. `v` must be is_float().
inline std::vector<float> WidenToF32(const HostValues& v, int64_t n) {
  std::vector<float> out(n);
  if (v.dtype == DType::kF32) {
    if (n > 0) std::memcpy(out.data(), v.data, n * sizeof(float));
    return out;
  }
  const uint16_t* bits = static_cast<const uint16_t*>(v.data);
  if (v.dtype == DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(bits[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = HalfToFloat(bits[i]);
  }
  return out;
}

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_HOST_VALUES_H_
