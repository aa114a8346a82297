// Llama-family models from GGUF files (the architectures whose entry in
// llama_architecture.h says `gguf`), as llama.cpp's converter writes them:
// hyper-parameters from the `{arch}.*` metadata keys, and the weights under
// their Hugging Face names, so the family's recipe table, tensor-parallel
// slicing and forward pass are the ones a safetensors directory uses. A
// weight is read as float32, as its stored F16/BF16 values, or as whole rows
// of its quantized blocks for --dtype=native (weight_source.h).
//
// For its llama architecture (`gguf_permuted_qk`), llama.cpp's converter
// reorders the rows of each head of q_proj and k_proj for its own rotary
// kernel (interleaved pairs instead of halves); reading them here puts the
// rows back, so the weights are transformers' again. The other
// architectures keep them as they are.
#ifndef FLOVER_MODEL_LLAMA_LLAMA_GGUF_H_
#define FLOVER_MODEL_LLAMA_LLAMA_GGUF_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/llama/llama_config.h"
#include "model/loader/gguf.h"
#include "model/loader/gguf_source.h"
#include "model/loader/weight_source.h"

namespace flover {

// The config of a `llama` or `qwen2` GGUF file (the keys under that name):
// block_count, embedding_length,
// feed_forward_length, attention.head_count(_kv), attention.key_length,
// context_length, attention.layer_norm_rms_epsilon, rope.freq_base, rope
// scaling (linear, llama3 as a rope_freqs.weight tensor of factors, or
// yarn), the vocabulary from the embedding's rows; tied when there is no
// output.weight. What Flover cannot run (another rope scaling, per-layer
// shapes, another architecture) is refused by name. EOS and BOS ids are left to the
// tokenizer's metadata (gguf_tokenizer).
absl::StatusOr<LlamaConfig> LlamaConfigFromGguf(const GgufFile& file);

// The file's tensors under transformers' names ("model.layers.0.mlp.up_proj.
// weight" is "blk.0.ffn_up.weight"; model/loader/gguf_source.h reads them),
// Q and K rows un-permuted where `config`'s architecture says the converter
// permuted them.
std::unique_ptr<WeightSource> GgufLlamaSource(std::shared_ptr<const GgufFile> file,
                                              const LlamaConfig& config);

}  // namespace flover

#endif  // FLOVER_MODEL_LLAMA_LLAMA_GGUF_H_
