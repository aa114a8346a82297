// Random rows of GGUF quantized blocks for kernel tests, and their values as
// ggml dequantizes them (model/loader/gguf_quants, bitwise gguf-py's): the
// generator lives in model/loader/random_blocks, where built-in models in
// blocks use it too.
#ifndef FLOVER_TESTING_RANDOM_BLOCKS_H_
#define FLOVER_TESTING_RANDOM_BLOCKS_H_

#include "model/loader/random_blocks.h"

namespace flover::testing {

using ::flover::DequantizeBlockRows;
using ::flover::RandomBlockRows;

}  // namespace flover::testing

#endif  // FLOVER_TESTING_RANDOM_BLOCKS_H_
