// A Llama-family model (any architecture of llama_architecture.h) as read
// from a Hugging Face directory (config.json, model.safetensors or shards
// with model.safetensors.index.json, the tokenizer files), from a GGUF file
// (llama_gguf.h), or generated for the built-ins. Loading checks every
// tensor's presence and shape but reads no weights: Instantiate reads this
// rank's regions of them (from the mapped files) and puts them on a backend.
#ifndef FLOVER_MODEL_LLAMA_LLAMA_CHECKPOINT_H_
#define FLOVER_MODEL_LLAMA_LLAMA_CHECKPOINT_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/decoder/decoder_checkpoint.h"
#include "model/llama/llama_config.h"
#include "model/llama/llama_family.h"

namespace flover {

class LlamaCheckpoint final : public DecoderCheckpoint {
 public:
  static absl::StatusOr<std::unique_ptr<LlamaCheckpoint>> LoadDirectory(const std::string& dir);
  // A GGUF file of architecture llama (llama_gguf.h): its tokenizer, stop
  // ids and chat template from the file's metadata.
  static absl::StatusOr<std::unique_ptr<LlamaCheckpoint>> LoadGguf(const std::string& path);
  // "llama-tiny" (tests), "llama-1b" (TinyLlama-1.1B shapes) or its
  // Qwen2 / Phi-3 / Gemma 2 variants: seeded random weights; NotFound for
  // another name.
  // With `blocks`, every linear layer is random rows of blocks in that format
  // (model/loader/random_blocks.h), for --dtype=native without a GGUF file.
  static absl::StatusOr<std::unique_ptr<LlamaCheckpoint>> Builtin(
      absl::string_view name, std::optional<kernels::BlockFormat> blocks = std::nullopt);
  // "builtin:NAME", a .gguf file or a directory.
  static absl::StatusOr<std::unique_ptr<LlamaCheckpoint>> Load(absl::string_view spec);

  const LlamaConfig& config() const { return config_; }
  void ServeContext(int positions) override;

 private:
  LlamaCheckpoint() = default;
  DecoderSpec Spec() const override { return LlamaDecoderSpec(config_); }
  DecoderRecipes Recipes() const override { return LlamaRecipes(config_); }
  bool HasMtp() const override { return config_.mtp_layers > 0; }
  DecoderSpec MtpSpec() const override { return LlamaMtpSpec(config_); }
  DecoderRecipes MtpRecipes() const override { return LlamaMtpRecipes(config_); }

  LlamaConfig config_;
};

// The config of a built-in Llama model, or NotFound:
//   llama-tiny  2 layers, 64 wide, 4 heads (2 KV heads) of 16, MLP 128,
//               vocab 512, 512 positions
//   llama-1b    TinyLlama-1.1B: 22 layers, 2048 wide, 32 heads (4 KV heads)
//               of 64, MLP 5632, vocab 32000, 2048 positions
//   qwen2-1b, phi3-1b, gemma2-1b
//               llama-1b's shapes as Qwen2 (q/k/v biases, tied), Phi-3
//               (fused q/k/v and gate/up) and Gemma 2 (sandwich norms,
//               GeGLU-tanh, soft-caps 50 and 30, window 4096, tied)
//   qwen3.5-tiny, qwen3.5-0.8b, lfm2-tiny, lfm2-1.2b
//               hybrids: Qwen3.5 (three gated delta net layers to one
//               attention layer) and LFM2 (short convolutions beside
//               attention), tiny or at the real model's shapes
absl::StatusOr<LlamaConfig> BuiltinLlamaConfig(absl::string_view name);
// The built-in Llama-family models' names, as "builtin:<name>, ..." for
// messages.
std::string BuiltinLlamaNames();

// Where a checkpoint directory of `config`'s architecture holds the tensor
// the recipes call `name` (Llama's names): its own names (LFM2's
// operator_norm for input_layernorm, ...) under its text prefix (Qwen3.5's
// image-text checkpoints: model.language_model.).
std::string StoredLlamaName(const LlamaConfig& config, absl::string_view name);

}  // namespace flover

#endif  // FLOVER_MODEL_LLAMA_LLAMA_CHECKPOINT_H_
