// Random rows of GGUF quantized blocks for kernel tests, and their values as
// ggml dequantizes them (model/loader/gguf_quants, bitwise gguf-py's).
#ifndef FLOVER_TESTING_RANDOM_BLOCKS_H_
#define FLOVER_TESTING_RANDOM_BLOCKS_H_

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/block_format.h"
#include "model/loader/gguf_quants.h"

namespace flover::testing {

// f32 to IEEE half bits, to nearest even.
__attribute__((target("f16c"))) inline uint16_t ToHalfBits(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, 0));
}

// `rows` random rows of K values in format f: random codes, and scales that
// give weights of roughly unit size / sqrt(K) (every 6-bit scale and minimum
// of Q4_K, every s8 scale of Q6_K: random bytes).
inline std::vector<uint8_t> RandomBlockRows(kernels::BlockFormat f, int rows, int K, uint32_t seed) {
  using kernels::BlockFormat;
  const kernels::BlockFormatInfo& info = kernels::InfoOf(f);
  std::vector<uint8_t> out(static_cast<size_t>(rows) * kernels::BlockRowBytes(f, K));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.5f, 1.5f);
  for (uint8_t& b : out) b = static_cast<uint8_t>(byte(rng));
  const float unit = 1.0f / std::sqrt(static_cast<float>(K));
  auto put = [](uint8_t* p, float v) {
    const uint16_t h = ToHalfBits(v);
    std::memcpy(p, &h, 2);
  };
  for (size_t at = 0; at < out.size(); at += info.block_bytes) {
    uint8_t* blk = out.data() + at;
    switch (f) {
      case BlockFormat::kQ8_0: put(blk, scale(rng) * unit / 64); break;
      case BlockFormat::kQ4_0: put(blk, scale(rng) * unit / 4); break;
      case BlockFormat::kQ5_0: put(blk, scale(rng) * unit / 8); break;
      case BlockFormat::kQ5_1:
        put(blk, scale(rng) * unit / 8);
        put(blk + 2, -scale(rng) * unit * 2);
        break;
      case BlockFormat::kQ5_K:
        put(blk, scale(rng) * unit / 256);
        put(blk + 2, scale(rng) * unit / 64);
        break;
      case BlockFormat::kQ4_1:
        put(blk, scale(rng) * unit / 4);
        put(blk + 2, -scale(rng) * unit * 2);
        break;
      case BlockFormat::kQ4_K:
        put(blk, scale(rng) * unit / 128);
        put(blk + 2, scale(rng) * unit / 64);
        break;
      case BlockFormat::kQ6_K: put(blk + 208, scale(rng) * unit / 1024); break;
    }
  }
  return out;
}

// The n rows' values, [n, K], as ggml dequantizes them.
inline std::vector<float> DequantizeBlockRows(kernels::BlockFormat f, const uint8_t* rows, int n, int K) {
  std::vector<float> w(static_cast<size_t>(n) * K);
  GgmlDequantize(*GgmlTypeOf(kernels::InfoOf(f).ggml_type), rows, static_cast<int64_t>(w.size()), w.data());
  return w;
}

}  // namespace flover::testing

#endif  // FLOVER_TESTING_RANDOM_BLOCKS_H_
