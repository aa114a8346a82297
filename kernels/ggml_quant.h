// ggml's q8_0 and q4_0 quantization of one group of 32 float32 values, as
// ggml's reference code (quantize_row_q8_0_ref / quantize_row_q4_0_ref)
// defines it: the same float32 operations in the same order, never fused,
// the scale rounded to IEEE half to nearest even. gguf-py's quantizers give
// the same bits (kernels/ggml_quant_test checks them against its output).
// The KV cache's q8_0 and q4_0 formats store each key and value row so.
#ifndef FLOVER_KERNELS_GGML_QUANT_H_
#define FLOVER_KERNELS_GGML_QUANT_H_

#include <cstdint>

namespace flover::kernels {

// x[0, 32) as q8_0: d = max|x| / 127, codes[i] = round(x[i] / d) (half away
// from zero; 0 where d is 0); *scale = d's half bits.
void QuantizeQ8_0Group(const float* x, int8_t* codes, uint16_t* scale);

// x[0, 32) as q4_0: m = the x of largest magnitude (the first such), d =
// m / -8, codes: min(15, trunc(x[i] / d + 8.5)) in 4 bits; byte i holds
// value i in its low nibble and value 16 + i in its high one (i < 16).
void QuantizeQ4_0Group(const float* x, uint8_t* codes, uint16_t* scale);

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_GGML_QUANT_H_
