#include "model/decoder/decoder_checkpoint.h"

#include "absl/strings/str_cat.h"
#include "model/decoder/decoder_model.h"

namespace flover {

absl::Status DecoderCheckpoint::CheckTensorParallel(int tp) const {
  return ValidateDecoderShard(Spec(), ShardSpec{tp, 0});
}

absl::StatusOr<std::unique_ptr<CausalLm>> DecoderCheckpoint::Instantiate(kernels::Backend& backend,
                                                                         Collectives* collectives) const {
  auto model = DecoderModel::Create(Spec(), Recipes(), info_, *source_, backend, collectives);
  if (!model.ok()) return model.status();
  return std::unique_ptr<CausalLm>(std::move(*model));
}

absl::StatusOr<std::unique_ptr<CausalLm>> DecoderCheckpoint::InstantiateMtp(const CausalLm& main) const {
  if (!HasMtp()) return LoadedModel::InstantiateMtp(main);
  auto model = DecoderModel::CreateMtp(MtpSpec(), MtpRecipes(), info_, *source_, main);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat(spec_, ": its multi-token-prediction layer: ", model.status().message()));
  }
  return std::unique_ptr<CausalLm>(std::move(*model));
}

absl::Status DecoderCheckpoint::CheckWeights() const { return CheckDecoderWeights(*source_, Spec(), Recipes()); }

}  // namespace flover
