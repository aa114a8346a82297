// A GGUF file's tensors as a WeightSource under Hugging Face's names, for
// any family: the family says how its names map to llama.cpp's (GgufNaming);
// this reads them as float32 a region at a time, as stored F16/BF16 values
// (ReadStored), or as whole rows of quantized blocks for --dtype=native;
// puts back the rows llama.cpp's converter permuted per head; and sees an
// expert's matrix inside the 3-D tensor llama.cpp merges a layer's experts
// into ([experts, rows, cols]).
#ifndef FLOVER_MODEL_LOADER_GGUF_SOURCE_H_
#define FLOVER_MODEL_LOADER_GGUF_SOURCE_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "model/loader/gguf.h"
#include "model/loader/weight_source.h"

namespace flover {

struct GgufNaming {
  // The GGUF tensor of a transformers name ("" for none); for an expert's
  // matrix, the layer's merged tensor with *expert = its index (else -1).
  std::function<std::string(absl::string_view hf, int* expert)> name;
  // For an expert's matrix in a tensor that fuses two per expert (Gemma 4's
  // ffn_gate_up_exps: gate rows, then up rows): 0 for the first half of its
  // rows, 1 for the second; -1 (or no function) for all of them.
  std::function<int(absl::string_view hf)> half;
  // Tensors whose rows (a bias's elements) the converter permuted within
  // each head, for its rotary kernel's interleaved pairs: name -> heads.
  std::map<std::string, int, std::less<>> permuted_heads;
  // Names ending so whose 1-D tensors are one-row matrices to transformers.
  std::vector<std::string> one_row;
  // Names ending so whose [a, b] tensors are [a, 1, b] to transformers (a
  // depthwise convolution's kernel, squeezed by llama.cpp's converter).
  std::vector<std::string> middle_one;
  // Names ending so whose tensors are 1-D to transformers, all their values
  // in order (Mamba-2's A and D, [1, H] in llama.cpp's files; its norm,
  // [G, D / G]).
  std::vector<std::string> flat;
};

std::unique_ptr<WeightSource> GgufWeightSource(std::shared_ptr<const GgufFile> file, GgufNaming naming);

// The type most of the file's matrices have ("Q4_K"), for ModelInfo.
std::string GgufStoredType(const GgufFile& file);

// The block format rows of a tensor of ggml type `type` come in for
// --dtype=native (ReadBlockRows): the type's own where backends run it as
// stored, its stand-in's for Q3_K (Q6_K) and IQ4_NL (Q8_0)
// (kernels::GgmlStandInFor: the same values); false for the others (read
// as float32).
bool GgufRowsFormat(uint32_t type, kernels::BlockFormat* format);

}  // namespace flover

#endif  // FLOVER_MODEL_LOADER_GGUF_SOURCE_H_
