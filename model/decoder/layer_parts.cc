#include "model/decoder/layer_parts.h"

#include "absl/strings/str_cat.h"
#include "model/weight_upload.h"
#include "util/status_macros.h"

namespace flover {

absl::Status LayerUploader::Values(std::vector<float>& host, int64_t rows, int64_t cols, kernels::Buffer* out) {
  return UploadF32Releasing(backend_, host, rows, cols, out);
}

absl::Status LayerUploader::Norm(std::vector<float>& g, std::vector<float>& b, kernels::Buffer* g_out,
                                 kernels::Buffer* b_out) {
  const bool layer_norm = spec_.norm == DecoderSpec::Norm::kLayerNorm;
  FLOVER_RETURN_IF_ERROR(Values(g, 1, spec_.hidden, g_out));
  if (layer_norm) FLOVER_RETURN_IF_ERROR(Values(b, 1, spec_.hidden, b_out));
  if (g_out->empty() || (layer_norm && b_out->empty())) {
    return absl::InvalidArgumentError("a norm of the model has no weights");
  }
  return absl::OkStatus();
}

absl::Status LayerUploader::Site(StoredValues& host, std::vector<float>& bias, int K, int N,
                                 kernels::Epilogue epilogue, LinearSite* out) {
  FLOVER_RETURN_IF_ERROR(PrepareMatrixReleasing(backend_, host, K, N, spec_.layout, &out->w));
  FLOVER_RETURN_IF_ERROR(Values(bias, 1, N, &out->bias));
  out->epilogue = epilogue;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TokenMixer>> MakeMixer(LayerUploader& up, const DecoderShard& shard, int layer,
                                                      DecoderLayerWeights& w) {
  const DecoderSpec& spec = up.spec();
  switch (spec.mixer(layer)) {
    case DecoderSpec::Mixer::kAttention:
      return MakeAttentionMixer(up, shard, layer, w);
    case DecoderSpec::Mixer::kGatedDeltaNet:
      return MakeGatedDeltaNetMixer(up, shard, spec.StateLayerOf(layer), w);
    case DecoderSpec::Mixer::kShortConv:
      return MakeShortConvMixer(up, shard, spec.StateLayerOf(layer), w);
    case DecoderSpec::Mixer::kMamba2:
      return MakeMamba2Mixer(up, shard, spec.StateLayerOf(layer), w);
  }
  return absl::InternalError(absl::StrCat("layer ", layer, " has a mixer of no known kind"));
}

}  // namespace flover
