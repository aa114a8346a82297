// Resolves a model spec, "builtin:NAME" or a directory in Hugging Face GPT-2
// layout (config.json, model.safetensors, optional vocab.json + merges.txt),
// into config, float32 weights and tokenizer.
#ifndef FLOVER_ENGINE_MODEL_LOADER_H_
#define FLOVER_ENGINE_MODEL_LOADER_H_

#include <memory>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "engine/bpe_tokenizer.h"
#include "engine/gpt_config.h"
#include "engine/gpt_weights.h"

namespace flover {

struct LoadedModel {
  std::string spec;         // what was asked for
  std::string stored_dtype; // dtype of the weights on disk ("F32" for built-ins)
  GptConfig config;
  GptWeights weights;
  std::optional<BpeTokenizer> tokenizer;
};

// Built-in models, no files needed (seeded random weights; no pretrained
// weights can be shipped):
//   builtin:tiny        2 layers, 4 heads, 64 wide, 512 positions, vocab 512
//   builtin:gpt2-small  GPT-2 124M shapes: 12 layers, 12 heads, 768 wide,
//                       1024 positions, vocab 50257
absl::StatusOr<std::unique_ptr<LoadedModel>> LoadModel(absl::string_view spec);

// The config of a built-in model, or NotFound listing the names.
absl::StatusOr<GptConfig> BuiltinConfig(absl::string_view name);

}  // namespace flover

#endif  // FLOVER_ENGINE_MODEL_LOADER_H_
