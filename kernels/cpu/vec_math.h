// Scalar math written so that GCC vectorizes loops that call it (no libm
// calls): exp and the GPT-2 `gelu_new` activation, accurate to a few ulp.
// GCC if-converts the clamps, and so vectorizes such loops, only under
// -fno-trapping-math (kernels/cpu/BUILD.bazel sets it where these run hot).
#ifndef FLOVER_KERNELS_CPU_VEC_MATH_H_
#define FLOVER_KERNELS_CPU_VEC_MATH_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/backend.h"      // Epilogue
#include "kernels/host_values.h"  // Bf16ToFloat

namespace flover::kernels {

// float32 -> bfloat16 bits, rounded to nearest even (NaN stays NaN); a
// branch-free form GCC vectorizes.
inline uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>(nan ? (u >> 16) | 0x40u : rounded);
}

// e^x for x in [-87, 88] (inputs outside are clamped): Cody-Waite range
// reduction to r in [-ln2/2, ln2/2], a degree-6 polynomial, then 2^n.
inline float ExpF(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}

// gelu_new(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3),
// rewritten as x * sigmoid(2u) = x / (1 + e^(-2u)), which keeps full relative
// precision for negative x where 1 + tanh(u) would cancel.
inline float GeluNewF(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return x / (1.0f + ExpF(-2.0f * u));
}

// Output n of a row from its sum: + bias[n] (bias may be null), then stored,
// or gelu_new'd and stored, or added to the value there (the residual).
inline void FinishOutput(float sum, const float* bias, int n, Epilogue epilogue, float* out) {
  float v = sum;
  if (bias != nullptr) v = v + bias[n];
  switch (epilogue) {
    case Epilogue::kBias: out[n] = v; break;
    case Epilogue::kBiasGelu: out[n] = GeluNewF(v); break;
    case Epilogue::kBiasResidual: out[n] = out[n] + v; break;
  }
}

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_CPU_VEC_MATH_H_
