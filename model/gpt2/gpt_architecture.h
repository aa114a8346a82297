// One architecture of the GPT family (LayerNorms with biases, a gelu_new MLP
// with biases): its own config.json keys, its parameter count, its changes to
// the family's decoder spec and its layers' weight recipes. Each lives in a
// file of its own (arch_gpt2.cc here, model/gptj/arch_gptj.cc), listed in
// GptArchitectures(); nothing else names an architecture.
#ifndef FLOVER_MODEL_GPT2_GPT_ARCHITECTURE_H_
#define FLOVER_MODEL_GPT2_GPT_ARCHITECTURE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/struct.pb.h"
#include "model/decoder/decoder_spec.h"
#include "model/decoder/decoder_weights.h"
#include "model/gpt2/gpt_config.h"

namespace flover {

struct GptArchitecture {
  const char* model_type = "";
  // config.json keys of its own, read after the shared ones.
  absl::Status (*parse)(const google::protobuf::Struct& s, absl::string_view what, GptConfig* c) = nullptr;
  // A learned position table (wpe), a bias on the head.
  bool position_table = false;
  bool head_bias = false;
  // The head is the embedding unless the checkpoint stores lm_head.weight
  // (GPT-2); else tie_word_embeddings says (the config's, or its default).
  bool tied_unless_stored = false;
  // The weights of one layer, in parameters.
  int64_t (*layer_parameters)(const GptConfig& c) = nullptr;
  // Its changes to the family's spec: the block, the matrices' layout,
  // rotary embeddings.
  void (*spec)(const GptConfig& c, DecoderSpec* s) = nullptr;
  // Layer l's weights on a rank (Hugging Face names without
  // "transformer."); the family reads the embedding, the final norm and the
  // head.
  void (*layer)(const GptConfig& c, int l, const DecoderShard& sh, DecoderLayerWeights& L,
                const DecoderRecipes::Visit& visit) = nullptr;
};

const GptArchitecture& Gpt2Arch();  // arch_gpt2.cc
const GptArchitecture& GptJArch();  // model/gptj/arch_gptj.cc

const std::vector<const GptArchitecture*>& GptArchitectures();
// Null for a model_type no entry has.
const GptArchitecture* FindGptArchitecture(absl::string_view model_type);

}  // namespace flover

#endif  // FLOVER_MODEL_GPT2_GPT_ARCHITECTURE_H_
