#include "kernels/ggml_quant.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

namespace flover::kernels {
namespace {

// f32 to IEEE half bits, to nearest even (ggml's GGML_FP32_TO_FP16 on x86).
__attribute__((target("f16c"))) uint16_t HalfBitsOf(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

}  // namespace

void QuantizeQ8_0Group(const float* x, int8_t* codes, uint16_t* scale) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  *scale = HalfBitsOf(d);
  for (int i = 0; i < 32; ++i) codes[i] = static_cast<int8_t>(std::roundf(x[i] * id));
}

void QuantizeQ4_0Group(const float* x, uint8_t* codes, uint16_t* scale) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < 32; ++i) {
    if (amax < std::fabs(x[i])) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  *scale = HalfBitsOf(d);
  for (int i = 0; i < 16; ++i) {
    const float x0 = x[i] * id, x1 = x[16 + i] * id;
    const uint8_t lo = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 8.5f))));
    const uint8_t hi = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 8.5f))));
    codes[i] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

}  // namespace flover::kernels
