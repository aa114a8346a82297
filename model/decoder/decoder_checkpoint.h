// A family's model on the decoder skeleton as read from disk (or generated
// for the built-ins), before it is on a backend: the family's checkpoint
// class (model/gpt2, model/llama) reads its config, weight source, tokenizer
// and chat template and says its spec and recipes; this checks the tensor-
// parallel split and puts this rank's part on a backend, the same for every
// family.
#ifndef FLOVER_MODEL_DECODER_DECODER_CHECKPOINT_H_
#define FLOVER_MODEL_DECODER_DECODER_CHECKPOINT_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/decoder/decoder_spec.h"
#include "model/decoder/decoder_weights.h"
#include "model/loaded_model.h"
#include "model/loader/weight_source.h"

namespace flover {

class DecoderCheckpoint : public LoadedModel {
 public:
  // Where the weights come from (the checkpoint, or the built-in generator).
  const WeightSource& source() const { return *source_; }

  // ValidateDecoderShard of the spec.
  absl::Status CheckTensorParallel(int tp) const final;
  // Only this rank's regions of each tensor are read, a layer at a time.
  absl::StatusOr<std::unique_ptr<CausalLm>> Instantiate(
      kernels::Backend& backend, Collectives* collectives = nullptr) const final;
  absl::StatusOr<std::unique_ptr<CausalLm>> InstantiateMtp(const CausalLm& main) const final;

 protected:
  virtual DecoderSpec Spec() const = 0;
  virtual DecoderRecipes Recipes() const = 0;
  // The multi-token-prediction layer's (DecoderSpec::mtp_input), where the
  // model has one.
  virtual bool HasMtp() const { return false; }
  virtual DecoderSpec MtpSpec() const { return {}; }
  virtual DecoderRecipes MtpRecipes() const { return {}; }

  // Every tensor the recipes name is in source_ with its shape (the data is
  // read when a rank needs it).
  absl::Status CheckWeights() const;

  std::unique_ptr<WeightSource> source_;
};

}  // namespace flover

#endif  // FLOVER_MODEL_DECODER_DECODER_CHECKPOINT_H_
