// Gemma 4's per-layer input (DecoderSpec::per_layer_input): each layer's own
// embedding of the row's token, mixed with a projection of the model's
// embedding, gated by the residual stream and added back through a norm.
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "model/decoder/layer_parts.h"
#include "model/weight_upload.h"
#include "util/status_macros.h"

namespace flover {
namespace {

using kernels::Buffer;
using kernels::Tensor;

class PleInput final : public PerLayerInput {
 public:
  PleInput(Buffer table, std::unique_ptr<kernels::BlockRows> table_blocks, LinearSite model_proj, Buffer proj_norm,
           LinearSite gate, LinearSite proj, Buffer post_norm)
      : table_(std::move(table)), table_blocks_(std::move(table_blocks)), model_proj_(std::move(model_proj)),
        proj_norm_(std::move(proj_norm)), gate_(std::move(gate)), proj_(std::move(proj)),
        post_norm_(std::move(post_norm)) {}

  absl::Status Forward(LayerContext& m, const Tensor& tokens, const Tensor& positions, int T) const override {
    kernels::Backend& backend = m.backend();
    const DecoderSpec& spec = m.spec();
    const int P = spec.per_layer_input;
    const Tensor in = m.buffer(kPleIn, T), tok = m.buffer(kPleTok, T), gate = m.buffer(kPleGate, T);
    const Tensor x = m.buffer(kX, T), branch = m.buffer(kBranch, T), normed = m.buffer(kNormed, T);
    // in = (rms(e0 model_proj * C^-1/2) + table[token] * sqrt(P)) * 2^-1/2
    if (table_blocks_ != nullptr) {
      FLOVER_RETURN_IF_ERROR(backend.EmbedBlocks(tokens, positions, *table_blocks_, 0,
                                                 std::sqrt(static_cast<float>(P)), nullptr, tok));
    } else {
      FLOVER_RETURN_IF_ERROR(backend.Embed(tokens, positions, table_.tensor(), 0, nullptr, tok));
    }
    FLOVER_RETURN_IF_ERROR(m.Apply(model_proj_, m.buffer(kEmbed0, T), in));
    FLOVER_RETURN_IF_ERROR(backend.Scale(in, 1.0f / std::sqrt(static_cast<float>(spec.hidden))));
    FLOVER_RETURN_IF_ERROR(backend.GroupRmsNorm(in, 0, 1, proj_norm_.tensor(), spec.norm_eps));
    FLOVER_RETURN_IF_ERROR(backend.Add(tok, in));
    FLOVER_RETURN_IF_ERROR(backend.Scale(in, static_cast<float>(1.0 / std::sqrt(2.0))));
    // x += post_norm(proj(gelu_tanh(x gate) * in)), the same on every rank.
    FLOVER_RETURN_IF_ERROR(m.Apply(gate_, x, gate));
    FLOVER_RETURN_IF_ERROR(backend.Gate(in, gate, kernels::GateKind::kGeluTanh, in));
    FLOVER_RETURN_IF_ERROR(m.Apply(proj_, in, branch));
    FLOVER_RETURN_IF_ERROR(backend.RmsNorm(branch, post_norm_.tensor(), spec.norm_eps, normed));
    return backend.Add(normed, x);
  }

  absl::Status Prepare(kernels::Backend& backend, int T) const override {
    for (const LinearSite* s : {&model_proj_, &gate_, &proj_}) {
      FLOVER_RETURN_IF_ERROR(backend.PrepareLinear(*s->w, T, false, s->epilogue));
    }
    return absl::OkStatus();
  }

 private:
  Buffer table_;  // f32 [V_ple, P], times sqrt(P); empty with:
  std::unique_ptr<kernels::BlockRows> table_blocks_;  // the file's blocks (--dtype=native)
  LinearSite model_proj_;
  Buffer proj_norm_;
  LinearSite gate_, proj_;
  Buffer post_norm_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PerLayerInput>> MakePerLayerInput(LayerUploader& up, int layer,
                                                                  DecoderLayerWeights& l, kernels::Buffer table,
                                                                  std::unique_ptr<kernels::BlockRows> blocks) {
  const DecoderSpec& spec = up.spec();
  const int C = spec.hidden, P = spec.per_layer_input;
  if (table.empty() == (blocks == nullptr)) {
    return absl::InternalError(absl::StrCat("layer ", layer, " has no per-layer input table"));
  }
  if (static_cast<int>(l.ple_proj_norm.size()) != P) {
    return absl::InvalidArgumentError(absl::StrCat("layer ", layer, "'s per-layer projection norm has ",
                                                   l.ple_proj_norm.size(), " values for ", P));
  }
  Buffer proj_norm, post_norm, no_bias;
  std::vector<float> none;
  FLOVER_RETURN_IF_ERROR(up.Values(l.ple_proj_norm, 1, P, &proj_norm));
  FLOVER_RETURN_IF_ERROR(up.Norm(l.ple_post_norm, none, &post_norm, &no_bias));
  LinearSite model_proj, gate, proj;
  const kernels::Epilogue plain = kernels::Epilogue::kBias;
  FLOVER_RETURN_IF_ERROR(up.Site(l.ple_model_proj, none, C, P, plain, &model_proj));
  FLOVER_RETURN_IF_ERROR(up.Site(l.ple_gate, none, C, P, plain, &gate));
  FLOVER_RETURN_IF_ERROR(up.Site(l.ple_proj, none, P, C, plain, &proj));
  return std::make_unique<PleInput>(std::move(table), std::move(blocks), std::move(model_proj), std::move(proj_norm),
                                    std::move(gate), std::move(proj), std::move(post_norm));
}

}  // namespace flover
