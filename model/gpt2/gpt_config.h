// GPT-2 and GPT-J model hyper-parameters, parsed from a Hugging Face
// config.json (model_type gpt2 or gptj) or given by a built-in model, and
// checked before any memory is sized from them.
#ifndef FLOVER_MODEL_GPT2_GPT_CONFIG_H_
#define FLOVER_MODEL_GPT2_GPT_CONFIG_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/model_info.h"

namespace flover {

struct GptArchitecture;

struct GptConfig {
  std::string architecture = "gpt2";  // model_type: one of GptArchitectures() (gpt_architecture.h)
  // GPT-J: rotary embeddings turn the first rotary_dim dims of each head
  // (0: all of them).
  int rotary_dim = 0;
  // The head is the embedding (GPT-2 unless the checkpoint has lm_head).
  bool tie_word_embeddings = true;
  int n_layer = 0;
  int n_head = 0;
  int n_embd = 0;
  int n_positions = 0;
  int vocab_size = 0;
  int n_inner = 0;  // MLP width; 4 * n_embd in GPT-2.
  float layer_norm_epsilon = 1e-5f;
  int eos_token_id = -1;  // -1: the model has no EOS token.

  int head_dim() const { return n_embd / n_head; }
  // The entry of `architecture` (GPT-2's for a name not in the table).
  const GptArchitecture& arch() const;
  // Weights of the whole model, in parameters.
  int64_t num_parameters() const;
  absl::Status Validate() const;
};

// The family-independent description of a GPT-2 or GPT-J model.
ModelInfo InfoOf(const GptConfig& config);

// `what` names the file in errors.
absl::StatusOr<GptConfig> ParseGptConfig(absl::string_view json,
                                         absl::string_view what);

}  // namespace flover

#endif  // FLOVER_MODEL_GPT2_GPT_CONFIG_H_
