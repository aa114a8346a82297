// A decoder layer's MLP strategies: the dense MLP (gelu or gated) and a
// mixture of experts.
#include <cmath>
#include <memory>
#include <optional>
#include <vector>

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
// rows grouped by expert), act(gate) * up, the down
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
  bool WaitsForDevice(const kernels::Backend& backend) const override {
    return backend.LinearByIdWaits(up_w_) || backend.LinearByIdWaits(down_w_);
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

// Each expert's gate/up [C -> 2 Fe] and down [Fe -> C] GEMMs (no biases:
// a mixture's biases are rows beside them), host weights released.
absl::Status UploadExperts(LayerUploader& up, DecoderLayerWeights& l, int FE, std::vector<LinearSite>* ups,
                           std::vector<LinearSite>* downs) {
  const int C = up.spec().hidden, E = static_cast<int>(l.expert_up.size());
  std::vector<float> none;
  ups->resize(E);
  downs->resize(E);
  for (int e = 0; e < E; ++e) {
    FLOVER_RETURN_IF_ERROR(up.Site(l.expert_up[e], none, C, 2 * FE, kernels::Epilogue::kBias, &(*ups)[e]));
    FLOVER_RETURN_IF_ERROR(up.Site(l.expert_down[e], none, FE, C, kernels::Epilogue::kBias, &(*downs)[e]));
  }
  return absl::OkStatus();
}

// Gemma 4's mixture beside a dense MLP (DecoderSpec::Moe::beside_dense):
//   f = dense_norm(dense(h)) + experts_norm(sum of w_e expert_e(pre_norm(x)))
//   x += post(f)
// the router's logits from rms(x) * router_scale * C^-1/2 (the norm's
// weight), its weights times the chosen experts' scales (Route). The dense
// and expert down GEMMs are row-split under tensor parallelism: each output
// is summed over ranks before its norm.
class DenseAndExpertsMlp final : public MlpStrategy {
 public:
  DenseAndExpertsMlp(LinearSite up, LinearSite down, LinearSite router, std::vector<LinearSite> experts_up,
                     std::vector<LinearSite> experts_down, Buffer router_norm, Buffer expert_scale, Buffer pre_norm,
                     Buffer dense_norm, Buffer experts_norm)
      : up_(std::move(up)), down_(std::move(down)), router_(std::move(router)), experts_up_(std::move(experts_up)),
        experts_down_(std::move(experts_down)), router_norm_(std::move(router_norm)),
        expert_scale_(std::move(expert_scale)), pre_norm_(std::move(pre_norm)), dense_norm_(std::move(dense_norm)),
        experts_norm_(std::move(experts_norm)) {
    for (const LinearSite& s : experts_up_) up_w_.push_back(s.w.get());
    for (const LinearSite& s : experts_down_) down_w_.push_back(s.w.get());
  }
  absl::Status Forward(LayerContext& m, const Tensor& h, const Buffer& post, int T) const override {
    const DecoderSpec& spec = m.spec();
    kernels::Backend& backend = m.backend();
    const float eps = spec.norm_eps;
    const int k = spec.moe.router.k;
    const Tensor x = m.buffer(kX, T), dense = m.buffer(kSharedOut, T), normed = m.buffer(kNormed, T),
                 sum = m.buffer(kBranch, T);
    // The dense MLP on h, summed over ranks, normed.
    const Tensor gate_up = m.buffer(kUp, T).View(0, T, up_.w->n());
    const Tensor act = m.buffer(kMlp, T).View(0, T, down_.w->k());
    FLOVER_RETURN_IF_ERROR(m.Apply(up_, h, gate_up));
    FLOVER_RETURN_IF_ERROR(backend.Glu(gate_up, spec.glu, act));
    FLOVER_RETURN_IF_ERROR(m.Apply(down_, act, dense));
    FLOVER_RETURN_IF_ERROR(m.AllReduce(dense));
    FLOVER_RETURN_IF_ERROR(backend.RmsNorm(dense, dense_norm_.tensor(), eps, normed));
    // The router, then the experts on their own norm of x (h is free now).
    const Tensor logits = m.buffer(kRouter, T), ids = m.buffer(kExpertIds, T), weights = m.buffer(kExpertWeights, T);
    const Tensor up = m.buffer(kExpertUp, T * k), expert_act = m.buffer(kExpertAct, T * k),
                 out = m.buffer(kExpertOut, T * k);
    FLOVER_RETURN_IF_ERROR(backend.RmsNorm(x, router_norm_.tensor(), eps, h));
    FLOVER_RETURN_IF_ERROR(m.Apply(router_, h, logits));
    kernels::RouterParams router = spec.moe.router;
    router.expert_scale = expert_scale_.tensor().as<float>();
    FLOVER_RETURN_IF_ERROR(backend.Route(logits, router, ids, weights));
    FLOVER_RETURN_IF_ERROR(backend.RmsNorm(x, pre_norm_.tensor(), eps, h));
    FLOVER_RETURN_IF_ERROR(backend.LinearById(h, up_w_, nullptr, ids, up));
    FLOVER_RETURN_IF_ERROR(backend.Glu(up, spec.glu, expert_act));
    FLOVER_RETURN_IF_ERROR(backend.LinearById(expert_act, down_w_, nullptr, ids, out));
    FLOVER_RETURN_IF_ERROR(m.AllReduce(out));
    FLOVER_RETURN_IF_ERROR(GrowZeros(backend, T));
    FLOVER_RETURN_IF_ERROR(backend.Copy(zeros_.tensor().Rows(0, T), sum));
    FLOVER_RETURN_IF_ERROR(backend.WeightedRowSum(out, weights, sum));
    // f = the two normed, then x += post(f).
    FLOVER_RETURN_IF_ERROR(backend.RmsNorm(sum, experts_norm_.tensor(), eps, dense));
    FLOVER_RETURN_IF_ERROR(backend.Add(normed, dense));
    FLOVER_RETURN_IF_ERROR(backend.RmsNorm(dense, post.tensor(), eps, normed));
    return backend.Add(normed, x);
  }
  absl::Status Prepare(kernels::Backend& backend, int T) const override {
    for (const LinearSite* s : {&up_, &down_, &router_}) {
      FLOVER_RETURN_IF_ERROR(backend.PrepareLinear(*s->w, T, false, s->epilogue));
    }
    for (const auto* sites : {&experts_up_, &experts_down_}) {
      for (const LinearSite& s : *sites) FLOVER_RETURN_IF_ERROR(backend.PrepareLinear(*s.w, T, false, s.epilogue));
    }
    return GrowZeros(backend, T);
  }

 private:
  LinearSite up_, down_, router_;
  std::vector<LinearSite> experts_up_, experts_down_;
  Buffer router_norm_, expert_scale_, pre_norm_, dense_norm_, experts_norm_;
  std::vector<const kernels::Weight*> up_w_, down_w_;
  mutable Buffer zeros_;  // f32 [T, C] of zeros: where the experts' sum starts

  // zeros_ of at least T rows (a MoE step is never recorded: Forward may
  // allocate).
  absl::Status GrowZeros(kernels::Backend& backend, int T) const {
    if (!zeros_.empty() && zeros_.tensor().rows >= T) return absl::OkStatus();
    const int C = static_cast<int>(router_.w->k());
    auto zeros = backend.Allocate(kernels::DType::kF32, T, C);
    if (!zeros.ok()) return zeros.status();
    const std::vector<float> host(static_cast<size_t>(T) * C, 0.0f);
    FLOVER_RETURN_IF_ERROR(backend.Upload(host.data(), zeros->tensor()));
    zeros_ = std::move(*zeros);
    return absl::OkStatus();
  }
};

// Gemma 4's: its dense MLP (l.up, l.down), router, experts and norms.
absl::StatusOr<std::unique_ptr<MlpStrategy>> MakeDenseAndExpertsMlp(LayerUploader& up, const DecoderShard& shard,
                                                                    int layer, DecoderLayerWeights& l) {
  const DecoderSpec& spec = up.spec();
  const int C = spec.hidden, E = spec.moe.experts, FE = shard.expert_inner, FL = shard.inner_of(spec, layer);
  const kernels::Epilogue plain = kernels::Epilogue::kBias;
  if (static_cast<int>(l.expert_up.size()) != E || static_cast<int>(l.expert_down.size()) != E ||
      static_cast<int>(l.moe_expert_scale.size()) != E) {
    return absl::InvalidArgumentError(absl::StrCat("layer ", layer, ": ", l.expert_up.size(), " experts' weights and ",
                                                   l.moe_expert_scale.size(), " scales for ", E, " experts"));
  }
  std::vector<float> none;
  LinearSite dense_up, dense_down, router;
  FLOVER_RETURN_IF_ERROR(up.Site(l.up, none, C, 2 * FL, plain, &dense_up));
  FLOVER_RETURN_IF_ERROR(up.Site(l.down, none, FL, C, plain, &dense_down));
  FLOVER_RETURN_IF_ERROR(up.Site(l.router, none, C, E, plain, &router));
  std::vector<LinearSite> ups, downs;
  FLOVER_RETURN_IF_ERROR(UploadExperts(up, l, FE, &ups, &downs));
  // The router's norm weight: router.scale times C^-1/2, in float32.
  const float inv_sqrt_c = 1.0f / std::sqrt(static_cast<float>(C));
  for (float& v : l.moe_router_norm) v *= inv_sqrt_c;
  Buffer router_norm, expert_scale, pre_norm, dense_norm, experts_norm, no_bias;
  FLOVER_RETURN_IF_ERROR(up.Norm(l.moe_router_norm, none, &router_norm, &no_bias));
  FLOVER_RETURN_IF_ERROR(up.Values(l.moe_expert_scale, 1, E, &expert_scale));
  FLOVER_RETURN_IF_ERROR(up.Norm(l.moe_pre_norm, none, &pre_norm, &no_bias));
  FLOVER_RETURN_IF_ERROR(up.Norm(l.moe_dense_norm, none, &dense_norm, &no_bias));
  FLOVER_RETURN_IF_ERROR(up.Norm(l.moe_experts_norm, none, &experts_norm, &no_bias));
  return std::make_unique<DenseAndExpertsMlp>(std::move(dense_up), std::move(dense_down), std::move(router),
                                              std::move(ups), std::move(downs), std::move(router_norm),
                                              std::move(expert_scale), std::move(pre_norm), std::move(dense_norm),
                                              std::move(experts_norm));
}

}  // namespace

absl::StatusOr<std::unique_ptr<MlpStrategy>> MakeMlp(LayerUploader& up, const DecoderShard& shard, int layer,
                                                     DecoderLayerWeights& l) {
  const DecoderSpec& spec = up.spec();
  const int C = spec.hidden;
  const kernels::Epilogue plain = kernels::Epilogue::kBias;
  if (spec.moe.sparse(layer) && spec.moe.beside_dense) return MakeDenseAndExpertsMlp(up, shard, layer, l);
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
    std::vector<LinearSite> ups, downs;
    FLOVER_RETURN_IF_ERROR(UploadExperts(up, l, FE, &ups, &downs));
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
