// Random rows of GGUF quantized blocks (kernels/block_format.h) with
// weights of a sensible size, and their values as ggml dequantizes them:
// for kernel tests, for the block benchmarks, and for built-in models whose
// linear layers are generated in blocks (model_benchmark --random_blocks), so
// native kernels can be timed on a host no GGUF file travels to.
#ifndef FLOVER_MODEL_LOADER_RANDOM_BLOCKS_H_
#define FLOVER_MODEL_LOADER_RANDOM_BLOCKS_H_

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "kernels/block_format.h"

namespace flover {

// `rows` random rows of K values (a whole number of blocks) in format f:
// random codes, and scales that give weights of roughly unit size /
// sqrt(K) (every 6-bit scale and minimum of the K-quants, every s8 scale of
// Q6_K: random bytes). The same seed gives the same bytes.
std::vector<uint8_t> RandomBlockRows(kernels::BlockFormat f, int rows, int K, uint32_t seed);

// The n rows' values, [n, K], as ggml dequantizes them.
std::vector<float> DequantizeBlockRows(kernels::BlockFormat f, const uint8_t* rows, int n, int K);

// The format named as llama.cpp prints it ("Q4_K", case-insensitive); false
// for another name.
bool BlockFormatByName(absl::string_view name, kernels::BlockFormat* out);

}  // namespace flover

#endif  // FLOVER_MODEL_LOADER_RANDOM_BLOCKS_H_
