// A decoder layer's MLP strategies: the dense MLP (gelu or gated) and a
// mixture of experts.
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "model/decoder/layer_parts.h"
#include "model/weight_upload.h"
#include "util/status_macros.h"

namespace flover {
namespace {

using kernels::Buffer;
using kernels::Tensor;

// The dense MLP: up -> gelu_new (in the epilogue) -> down, or act(gate) * up
// -> down, gate and up one GEMM.
class DenseMlp final : public MlpStrategy {
 public:
  DenseMlp(LinearSite up, LinearSite down) : up_(std::move(up)), down_(std::move(down)) {}
  absl::Status Forward(LayerContext& m, const Tensor& h, const Buffer& post, int T) const override {
    // kUp and kMlp fit the widest MLP of the model (a dense layer's or a
    // shared expert's): this one's width of them.
    const Tensor mlp = m.buffer(kMlp, T).View(0, T, down_.w->k());
    if (m.spec().mlp == DecoderSpec::Mlp::kGlu) {
      const Tensor up = m.buffer(kUp, T).View(0, T, up_.w->n());
      FLOVER_RETURN_IF_ERROR(m.Apply(up_, h, up));
      FLOVER_RETURN_IF_ERROR(m.backend().Glu(up, m.spec().glu, mlp));
    } else {
      FLOVER_RETURN_IF_ERROR(m.Apply(up_, h, mlp));  // gelu_new in the epilogue
    }
    return m.Residual(down_, mlp, post, T);
  }
  absl::Status Prepare(kernels::Backend& backend, int T) const override {
    for (const LinearSite* s : {&up_, &down_}) {
      FLOVER_RETURN_IF_ERROR(backend.PrepareLinear(*s->w, T, !s->bias.empty(), s->epilogue));
    }
    return absl::OkStatus();
  }

 private:
  LinearSite up_, down_;
};

// A mixture of experts: the router's logits, the k experts of each row
// (Route), each route's gate and up through its expert's GEMM (LinearById:
// rows grouped by expert, one GEMM per expert), act(gate) * up, the down
// GEMMs the same way, then x += the routes' outputs weighted by the router
// (WeightedRowSum; the weights times the spec's residual scale). With
// tensor parallelism each expert's down GEMM is row-split: the routes'
// outputs are summed over ranks before the join. A shared expert (its
// gate/up and down in shared_up/shared_down) adds sigmoid(h . shared_gate)
// times its output the same way, or (not gated: Granite's shared MLP) its
// output as a dense MLP does.
class MoeMlp final : public MlpStrategy {
 public:
  struct Shared {
    LinearSite up, down, gate;
  };
  // up_b, down_b: the experts' biases ([E, 2 Fe_local], [E, C]; empty: none).
  MoeMlp(LinearSite router, std::vector<LinearSite> up, std::vector<LinearSite> down, Buffer up_b, Buffer down_b,
         std::optional<Shared> shared)
      : router_(std::move(router)), up_(std::move(up)), down_(std::move(down)), up_b_(std::move(up_b)),
        down_b_(std::move(down_b)), shared_(std::move(shared)) {
    for (const LinearSite& s : up_) up_w_.push_back(s.w.get());
    for (const LinearSite& s : down_) down_w_.push_back(s.w.get());
  }
  absl::Status Forward(LayerContext& m, const Tensor& h, const Buffer&, int T) const override {
    const DecoderSpec& spec = m.spec();
    kernels::Backend& backend = m.backend();
    const int k = spec.moe.router.k;
    const Tensor logits = m.buffer(kRouter, T), ids = m.buffer(kExpertIds, T),
                 weights = m.buffer(kExpertWeights, T);
    const Tensor up = m.buffer(kExpertUp, T * k), act = m.buffer(kExpertAct, T * k),
                 out = m.buffer(kExpertOut, T * k);
    FLOVER_RETURN_IF_ERROR(m.Apply(router_, h, logits));
    FLOVER_RETURN_IF_ERROR(backend.Route(logits, spec.moe.router, ids, weights));
    const Tensor up_b = up_b_.empty() ? Tensor{} : up_b_.tensor(), down_b = down_b_.empty() ? Tensor{} : down_b_.tensor();
    FLOVER_RETURN_IF_ERROR(backend.LinearById(h, up_w_, up_b_.empty() ? nullptr : &up_b, ids, up));
    FLOVER_RETURN_IF_ERROR(backend.Glu(up, spec.glu, act));
    FLOVER_RETURN_IF_ERROR(backend.LinearById(act, down_w_, down_b_.empty() ? nullptr : &down_b, ids, out));
    FLOVER_RETURN_IF_ERROR(m.AllReduce(out));
    const float scale = spec.residual_scale;
    if (scale != 1.0f) FLOVER_RETURN_IF_ERROR(backend.Scale(weights, scale));
    FLOVER_RETURN_IF_ERROR(backend.WeightedRowSum(out, weights, m.buffer(kX, T)));
    if (!shared_.has_value()) return absl::OkStatus();
    const Tensor gate_up = m.buffer(kUp, T).View(0, T, shared_->up.w->n());
    const Tensor mlp = m.buffer(kMlp, T).View(0, T, shared_->down.w->k());
    FLOVER_RETURN_IF_ERROR(m.Apply(shared_->up, h, gate_up));
    FLOVER_RETURN_IF_ERROR(backend.Glu(gate_up, spec.glu, mlp));
    if (!spec.moe.shared_gated) return m.Residual(shared_->down, mlp, Buffer(), T);
    const Tensor sout = m.buffer(kSharedOut, T), gate = m.buffer(kSharedGate, T);
    FLOVER_RETURN_IF_ERROR(m.Apply(shared_->down, mlp, sout));
    FLOVER_RETURN_IF_ERROR(m.AllReduce(sout));
    FLOVER_RETURN_IF_ERROR(m.Apply(shared_->gate, h, gate));
    FLOVER_RETURN_IF_ERROR(backend.Sigmoid(gate));
    if (scale != 1.0f) FLOVER_RETURN_IF_ERROR(backend.Scale(gate, scale));
    return backend.WeightedRowSum(sout, gate, m.buffer(kX, T));
  }
  absl::Status Prepare(kernels::Backend& backend, int T) const override {
    // An expert sees at most T rows: a row's k experts are distinct.
    FLOVER_RETURN_IF_ERROR(backend.PrepareLinear(*router_.w, T, !router_.bias.empty(), router_.epilogue));
    for (const auto* sites : {&up_, &down_}) {
      const bool bias = !(sites == &up_ ? up_b_ : down_b_).empty();
      for (const LinearSite& s : *sites) {
        FLOVER_RETURN_IF_ERROR(backend.PrepareLinear(*s.w, T, bias, kernels::Epilogue::kBias));
      }
    }
    if (shared_.has_value()) {
      for (const LinearSite* s : {&shared_->up, &shared_->down, &shared_->gate}) {
        if (s->w != nullptr) FLOVER_RETURN_IF_ERROR(backend.PrepareLinear(*s->w, T, false, s->epilogue));
      }
    }
    return absl::OkStatus();
  }

 private:
  LinearSite router_;
  std::vector<LinearSite> up_, down_;
  Buffer up_b_, down_b_;
  std::optional<Shared> shared_;
  std::vector<const kernels::Weight*> up_w_, down_w_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MlpStrategy>> MakeMlp(LayerUploader& up, const DecoderShard& shard, int layer,
                                                     DecoderLayerWeights& l) {
  const DecoderSpec& spec = up.spec();
  const int C = spec.hidden;
  const kernels::Epilogue plain = kernels::Epilogue::kBias;
  if (spec.moe.sparse(layer)) {
    const int E = spec.moe.experts, FE = shard.expert_inner;
    if (static_cast<int>(l.expert_up.size()) != E || static_cast<int>(l.expert_down.size()) != E) {
      return absl::InvalidArgumentError(absl::StrCat("a mixture-of-experts layer with ", l.expert_up.size(),
                                                     " experts' weights for ", E, " experts"));
    }
    std::vector<float> none;
    LinearSite router;
    FLOVER_RETURN_IF_ERROR(up.Site(l.router, l.router_b, C, E, plain, &router));
    Buffer up_b, down_b;
    if (spec.moe.biases) {
      if (static_cast<int64_t>(l.expert_up_b.size()) != int64_t{E} * 2 * FE ||
          static_cast<int64_t>(l.expert_down_b.size()) != int64_t{E} * C) {
        return absl::InvalidArgumentError(absl::StrCat("the experts' biases: ", l.expert_up_b.size(), " and ",
                                                       l.expert_down_b.size(), " values for ", E, " experts"));
      }
      FLOVER_RETURN_IF_ERROR(up.Values(l.expert_up_b, E, 2 * FE, &up_b));
      FLOVER_RETURN_IF_ERROR(up.Values(l.expert_down_b, E, C, &down_b));
    }
    std::vector<LinearSite> ups(E), downs(E);
    for (int e = 0; e < E; ++e) {
      FLOVER_RETURN_IF_ERROR(up.Site(l.expert_up[e], none, C, 2 * FE, plain, &ups[e]));
      FLOVER_RETURN_IF_ERROR(up.Site(l.expert_down[e], none, FE, C, plain, &downs[e]));
    }
    std::optional<MoeMlp::Shared> shared;
    if (spec.moe.shared_intermediate > 0) {
      const int FS = shard.shared_inner;
      shared.emplace();
      FLOVER_RETURN_IF_ERROR(up.Site(l.up, none, C, 2 * FS, plain, &shared->up));
      if (spec.moe.shared_gated) {
        FLOVER_RETURN_IF_ERROR(up.Site(l.down, none, FS, C, plain, &shared->down));
        FLOVER_RETURN_IF_ERROR(up.Site(l.shared_gate, none, C, 1, plain, &shared->gate));
      } else {  // into the residual stream as a dense MLP's down GEMM
        FLOVER_RETURN_IF_ERROR(up.Site(l.down, none, FS, C, up.into_x(), &shared->down));
      }
    }
    return std::make_unique<MoeMlp>(std::move(router), std::move(ups), std::move(downs), std::move(up_b),
                                    std::move(down_b), std::move(shared));
  }
  const bool glu = spec.mlp == DecoderSpec::Mlp::kGlu;
  const int FL = shard.inner_of(spec, layer);
  LinearSite ups, downs;
  FLOVER_RETURN_IF_ERROR(
      up.Site(l.up, l.up_b, C, glu ? 2 * FL : FL, glu ? plain : kernels::Epilogue::kBiasGelu, &ups));
  FLOVER_RETURN_IF_ERROR(up.Site(l.down, l.down_b, FL, C, up.into_x(), &downs));
  return std::make_unique<DenseMlp>(std::move(ups), std::move(downs));
}

}  // namespace flover
