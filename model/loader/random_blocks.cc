#include "model/loader/random_blocks.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/match.h"
#include "model/loader/gguf_quants.h"

namespace flover {
namespace {

// f32 to IEEE half bits, to nearest even.
__attribute__((target("f16c"))) uint16_t ToHalfBits(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, 0));
}

}  // namespace

std::vector<uint8_t> RandomBlockRows(kernels::BlockFormat f, int rows, int K, uint32_t seed) {
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
      case BlockFormat::kMXFP4:
        // e8m0: values 2^(e - 128) * (up to 12), about unit / 4 per code.
        blk[0] = static_cast<uint8_t>(std::lround(128.0 + std::log2(scale(rng) * unit / 4)));
        break;
    }
  }
  return out;
}

std::vector<float> DequantizeBlockRows(kernels::BlockFormat f, const uint8_t* rows, int n, int K) {
  std::vector<float> w(static_cast<size_t>(n) * K);
  GgmlDequantize(*GgmlTypeOf(kernels::InfoOf(f).ggml_type), rows, static_cast<int64_t>(w.size()),
                 w.data());
  return w;
}

bool BlockFormatByName(absl::string_view name, kernels::BlockFormat* out) {
  for (kernels::BlockFormat f : kernels::kAllBlockFormats) {
    if (absl::EqualsIgnoreCase(name, kernels::InfoOf(f).name)) {
      *out = f;
      return true;
    }
  }
  return false;
}

}  // namespace flover
