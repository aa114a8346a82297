// GPT-2 or GPT-J as read from a Hugging Face directory (config.json,
// model.safetensors or shards, with or without the "transformer." prefix,
// the tokenizer files)
// or generated for the built-ins. Loading checks every tensor's presence and
// shape but reads no weights: Instantiate reads this rank's regions of them
// (from the mapped files) and puts them on a backend.
#ifndef FLOVER_MODEL_GPT2_GPT2_CHECKPOINT_H_
#define FLOVER_MODEL_GPT2_GPT2_CHECKPOINT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/decoder/decoder_checkpoint.h"
#include "model/gpt2/gpt_config.h"
#include "model/gpt2/gpt_family.h"

namespace flover {

class Gpt2Checkpoint final : public DecoderCheckpoint {
 public:
  // A directory in Hugging Face GPT-2 layout; errors name the file.
  static absl::StatusOr<std::unique_ptr<Gpt2Checkpoint>> LoadDirectory(const std::string& dir);
  // A built-in model by name ("tiny", "gpt2-small"): seeded random weights.
  static absl::StatusOr<std::unique_ptr<Gpt2Checkpoint>> Builtin(absl::string_view name);
  // "builtin:NAME" or a directory.
  static absl::StatusOr<std::unique_ptr<Gpt2Checkpoint>> Load(absl::string_view spec);

  const GptConfig& config() const { return config_; }

 private:
  Gpt2Checkpoint() = default;
  void Describe();  // info_ from config_
  DecoderSpec Spec() const override { return GptDecoderSpec(config_); }
  DecoderRecipes Recipes() const override { return GptRecipes(config_); }

  GptConfig config_;
};

// The config of a built-in GPT-2 model, or NotFound:
//   tiny        2 layers, 4 heads, 64 wide, 512 positions, vocab 512
//   gpt2-small  GPT-2 124M shapes: 12 layers, 12 heads, 768 wide,
//               1024 positions, vocab 50257
//   gptj-1b     GPT-J's layout at ~1B parameters: 16 layers, 16 heads of 128
//               with rotary on 64 dims, 2048 wide, MLP 8192, vocab 50400, tied
absl::StatusOr<GptConfig> BuiltinGpt2Config(absl::string_view name);

}  // namespace flover

#endif  // FLOVER_MODEL_GPT2_GPT2_CHECKPOINT_H_
