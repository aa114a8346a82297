// Resolves a model spec — "builtin:NAME", a GGUF file or a Hugging Face
// directory — to the family that reads it (GGUF's general.architecture,
// config.json's model_type), and loads it.
#ifndef FLOVER_MODEL_MODEL_LOADER_H_
#define FLOVER_MODEL_MODEL_LOADER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/block_format.h"
#include "kernels/backend.h"
#include "model/loaded_model.h"

namespace flover {

// Built-in models need no files (seeded random weights; no pretrained
// weights can be shipped):
//   builtin:tiny        GPT-2 shaped: 2 layers, 4 heads, 64 wide, 512 positions, vocab 512
//   builtin:gpt2-small  GPT-2 124M shapes: 12 layers, 12 heads, 768 wide,
//                       1024 positions, vocab 50257
//   builtin:llama-tiny  Llama shaped: 2 layers, 64 wide, 4 heads (2 KV),
//                       MLP 128, vocab 512, 512 positions
//   builtin:llama-1b    TinyLlama-1.1B shapes: 22 layers, 2048 wide, 32 heads
//                       (4 KV), MLP 5632, vocab 32000, 2048 positions
//   builtin:qwen2-1b, builtin:phi3-1b, builtin:gemma2-1b
//                       llama-1b's shapes in those families' layouts
//   builtin:gptj-1b     GPT-J's layout at ~1B parameters (benchmarks)
// A file must be GGUF (its first bytes say so, whatever its name); a
// directory's config.json names its family (model_type). A family Flover
// does not serve is refused with a message naming it. Every file is
// untrusted.
absl::StatusOr<std::unique_ptr<LoadedModel>> LoadModel(absl::string_view spec);

// "builtin:NAME" of the Llama family (llama-tiny, llama-1b, qwen2-1b,
// phi3-1b, gemma2-1b) with every linear layer as random rows of blocks in
// `format` (model/loader/random_blocks.h): native kernels timed without a
// GGUF file. InvalidArgument for another spec.
absl::StatusOr<std::unique_ptr<LoadedModel>> LoadBuiltinInBlocks(absl::string_view spec,
                                                                 kernels::BlockFormat format);

// --dtype=auto's choice for `spec` on `device`: native on the CPU for a GGUF
// file with matrices in a block format the CPU kernels run as stored (Q8_0,
// Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; Q3_K as Q6_K, IQ4_NL as Q8_0) (every CPU the kernels start on); f32
// otherwise (CUDA's block kernels ran on an H100 but are slower than bf16
// there: docs/gpu.md), and for anything
// it cannot read (LoadModel reports that). A Hugging Face directory in
// MXFP4 (quantization_config's quant_method, gpt-oss's releases) is native
// on the CPU too: its experts stay in their blocks.
kernels::MatmulDtype AutoMatmulDtype(absl::string_view spec, absl::string_view device);

// With --dtype=native, the matrices of GGUF file `spec` that no block kernel
// runs (nor a stand-in for their type: Q2_K, IQ4_XS), which are widened to
// f32 at load: "131 of 156 matrices (IQ4_XS)"; "" when there are none or
// `spec` is no GGUF file.
std::string WidenedMatrices(absl::string_view spec);

}  // namespace flover

#endif  // FLOVER_MODEL_MODEL_LOADER_H_
