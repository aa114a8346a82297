// The recurrent token mixers of hybrid models: Qwen3.5's gated delta net,
// LFM2's short convolution and Mamba-2 (Granite 4.0-H). Each keeps a state per sequence in the cache's
// slots (the convolution's window; the delta rule's matrix), read and
// written as the step's state table says, instead of K and V in blocks.
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "model/decoder/layer_parts.h"
#include "util/status_macros.h"

namespace flover {
namespace {

using kernels::Buffer;
using kernels::Tensor;

// Prepares each site's GEMM for steps of up to T rows.
absl::Status PrepareSites(kernels::Backend& backend, int T, std::initializer_list<const LinearSite*> sites) {
  for (const LinearSite* s : sites) {
    FLOVER_RETURN_IF_ERROR(backend.PrepareLinear(*s->w, T, !s->bias.empty(), s->epilogue));
  }
  return absl::OkStatus();
}

// Qwen3.5's linear attention on this rank's heads: q, k and v through the
// causal convolution and SiLU, the gated delta rule, each value head's
// output RMS-normed and times silu(z), then the output projection.
class GatedDeltaNetMixer final : public TokenMixer {
 public:
  struct Parts {
    LinearSite qkv, z, b, a, out;
    Buffer conv, decay_a, dt_bias, norm;
  };
  GatedDeltaNetMixer(Parts p, int state_layer) : p_(std::move(p)), state_layer_(state_layer) {}

  absl::Status Forward(LayerContext& m, const Tensor& h, const LayerStep& s, const Buffer& post) const override {
    const DecoderSpec::Recurrent& r = m.spec().recurrent;
    const DecoderShard& shard = m.shard();
    kernels::Backend& backend = m.backend();
    const int T = s.T;
    const int Hv = shard.dn_v_heads, Ch = shard.conv_channels;
    const Tensor in = m.buffer(kRecIn, T).View(0, T, Ch), conv = m.buffer(kRecConv, T).View(0, T, Ch);
    const Tensor z = m.buffer(kRecGate, T).View(0, T, Hv * r.v_dim);
    const Tensor b = m.buffer(kRecB, T).View(0, T, Hv), a = m.buffer(kRecA, T).View(0, T, Hv);
    const Tensor out = m.buffer(kRecOut, T).View(0, T, Hv * r.v_dim);
    const kernels::StateLayer state = s.cache.state(state_layer_);
    const kernels::StateTable states = s.states();
    FLOVER_RETURN_IF_ERROR(m.Apply(p_.qkv, h, in));
    FLOVER_RETURN_IF_ERROR(backend.CausalConv(in, s.step.seqs, states, state, p_.conv, nullptr, kernels::ConvActivation::kSilu,
                                              conv));
    FLOVER_RETURN_IF_ERROR(m.Apply(p_.b, h, b));
    FLOVER_RETURN_IF_ERROR(m.Apply(p_.a, h, a));
    const kernels::DeltaRuleParams params{shard.dn_k_heads, Hv, r.k_dim, r.v_dim, r.tiled};
    FLOVER_RETURN_IF_ERROR(backend.GatedDeltaRule(conv, b, a, p_.decay_a, p_.dt_bias, s.step.seqs, states, state,
                                                  params, out));
    FLOVER_RETURN_IF_ERROR(m.Apply(p_.z, h, z));
    FLOVER_RETURN_IF_ERROR(backend.GroupRmsNorm(out, 0, Hv, p_.norm, m.spec().norm_eps));
    FLOVER_RETURN_IF_ERROR(backend.Gate(out, z, kernels::GateKind::kSilu, out));
    return m.Residual(p_.out, out, post, T);
  }

  absl::Status Prepare(kernels::Backend& backend, int T) const override {
    return PrepareSites(backend, T, {&p_.qkv, &p_.z, &p_.b, &p_.a, &p_.out});
  }

 private:
  Parts p_;
  int state_layer_;
};

// LFM2's short convolution on this rank's band of channels: B, C and x
// projections, y = C * conv(B * x) (no activation), the output projection.
class ShortConvMixer final : public TokenMixer {
 public:
  struct Parts {
    LinearSite b, c, x, out;
    Buffer conv;
  };
  ShortConvMixer(Parts p, int state_layer) : p_(std::move(p)), state_layer_(state_layer) {}

  absl::Status Forward(LayerContext& m, const Tensor& h, const LayerStep& s, const Buffer& post) const override {
    kernels::Backend& backend = m.backend();
    const int T = s.T, Ch = m.shard().conv_channels;
    const Tensor x = m.buffer(kRecIn, T).View(0, T, Ch), y = m.buffer(kRecConv, T).View(0, T, Ch);
    const Tensor b = m.buffer(kRecB, T).View(0, T, Ch), c = m.buffer(kRecGate, T).View(0, T, Ch);
    FLOVER_RETURN_IF_ERROR(m.Apply(p_.x, h, x));
    FLOVER_RETURN_IF_ERROR(m.Apply(p_.b, h, b));
    FLOVER_RETURN_IF_ERROR(backend.Gate(x, b, kernels::GateKind::kIdentity, x));
    FLOVER_RETURN_IF_ERROR(backend.CausalConv(x, s.step.seqs, s.states(), s.cache.state(state_layer_), p_.conv,
                                              nullptr, kernels::ConvActivation::kNone, y));
    FLOVER_RETURN_IF_ERROR(m.Apply(p_.c, h, c));
    FLOVER_RETURN_IF_ERROR(backend.Gate(y, c, kernels::GateKind::kIdentity, y));
    return m.Residual(p_.out, y, post, T);
  }

  absl::Status Prepare(kernels::Backend& backend, int T) const override {
    return PrepareSites(backend, T, {&p_.b, &p_.c, &p_.x, &p_.out});
  }

 private:
  Parts p_;
  int state_layer_;
};

// Mamba-2 on this rank's groups and their heads: x, B and C through the
// causal convolution (with its bias) and SiLU, the selective scan, times
// silu(z), an RMSNorm over each group's channels (weights of its own), the
// output projection.
class Mamba2Mixer final : public TokenMixer {
 public:
  struct Parts {
    LinearSite xbc, z, dt, out;
    Buffer conv, conv_b, a, d, dt_bias, norm;
  };
  Mamba2Mixer(Parts p, int state_layer) : p_(std::move(p)), state_layer_(state_layer) {}

  absl::Status Forward(LayerContext& m, const Tensor& h, const LayerStep& s, const Buffer& post) const override {
    const DecoderSpec::Recurrent& r = m.spec().recurrent;
    const DecoderShard& shard = m.shard();
    kernels::Backend& backend = m.backend();
    const int T = s.T, H = shard.mamba_heads, G = shard.mamba_groups, Ch = shard.conv_channels,
              inner = H * r.head_dim;
    const Tensor in = m.buffer(kRecIn, T).View(0, T, Ch), conv = m.buffer(kRecConv, T).View(0, T, Ch);
    const Tensor z = m.buffer(kRecGate, T).View(0, T, inner), dt = m.buffer(kRecA, T).View(0, T, H);
    const Tensor y = m.buffer(kRecOut, T).View(0, T, inner);
    const kernels::StateLayer state = s.cache.state(state_layer_);
    const kernels::StateTable states = s.states();
    FLOVER_RETURN_IF_ERROR(m.Apply(p_.xbc, h, in));
    FLOVER_RETURN_IF_ERROR(backend.CausalConv(in, s.step.seqs, states, state, p_.conv, OrNullTensor(p_.conv_b),
                                              kernels::ConvActivation::kSilu, conv));
    FLOVER_RETURN_IF_ERROR(m.Apply(p_.dt, h, dt));
    const kernels::ScanParams params{H, r.head_dim, G, r.state_size, r.dt_min, r.dt_max};
    FLOVER_RETURN_IF_ERROR(backend.SelectiveScan(conv, dt, p_.a, p_.d, p_.dt_bias, s.step.seqs, states, state, params,
                                                 y));
    FLOVER_RETURN_IF_ERROR(m.Apply(p_.z, h, z));
    FLOVER_RETURN_IF_ERROR(backend.Gate(y, z, kernels::GateKind::kSilu, y));
    // Each group's channels normed with its own weights.
    const int group = inner / G;
    for (int g = 0; g < G; ++g) {
      FLOVER_RETURN_IF_ERROR(
          backend.GroupRmsNorm(y, g * group, 1, p_.norm.tensor().View(g * group, 1, group), m.spec().norm_eps));
    }
    return m.Residual(p_.out, y, post, T);
  }

  absl::Status Prepare(kernels::Backend& backend, int T) const override {
    return PrepareSites(backend, T, {&p_.xbc, &p_.z, &p_.dt, &p_.out});
  }

 private:
  static const Tensor* OrNullTensor(const Buffer& b) { return b.empty() ? nullptr : &b.tensor(); }
  Parts p_;
  int state_layer_;
};

// A vector of exactly n values (an empty one is a missing parameter).
absl::Status Vector(LayerUploader& up, std::vector<float>& host, int64_t n, const char* what, Buffer* out) {
  if (static_cast<int64_t>(host.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("a recurrent layer's ", what, " has ", host.size(),
                                                   " values, not ", n));
  }
  return up.Values(host, 1, n, out);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenMixer>> MakeMamba2Mixer(LayerUploader& up, const DecoderShard& shard,
                                                            int state_layer, DecoderLayerWeights& l) {
  const DecoderSpec& spec = up.spec();
  const DecoderSpec::Recurrent& r = spec.recurrent;
  const int C = spec.hidden, H = shard.mamba_heads, Ch = shard.conv_channels, K = r.conv_kernel,
            inner = H * r.head_dim;
  const kernels::Epilogue plain = kernels::Epilogue::kBias;
  Mamba2Mixer::Parts p;
  std::vector<float> none;
  FLOVER_RETURN_IF_ERROR(up.Site(l.in_x, none, C, Ch, plain, &p.xbc));
  FLOVER_RETURN_IF_ERROR(up.Site(l.in_gate, none, C, inner, plain, &p.z));
  FLOVER_RETURN_IF_ERROR(up.Site(l.in_a, none, C, H, plain, &p.dt));
  FLOVER_RETURN_IF_ERROR(up.Site(l.o, l.o_b, inner, C, up.into_x(), &p.out));
  if (static_cast<int64_t>(l.conv.size()) != int64_t{Ch} * K) {
    return absl::InvalidArgumentError(absl::StrCat("a Mamba-2 convolution has ", l.conv.size(), " weights, not ", Ch,
                                                   " channels x ", K, " taps"));
  }
  FLOVER_RETURN_IF_ERROR(up.Values(l.conv, Ch, K, &p.conv));
  if (r.conv_bias) FLOVER_RETURN_IF_ERROR(Vector(up, l.conv_b, Ch, "conv1d.bias", &p.conv_b));
  if (r.a_log) {
    for (float& v : l.decay_a) v = -std::exp(v);
  }
  FLOVER_RETURN_IF_ERROR(Vector(up, l.decay_a, H, "A_log", &p.a));
  FLOVER_RETURN_IF_ERROR(Vector(up, l.d_skip, H, "D", &p.d));
  FLOVER_RETURN_IF_ERROR(Vector(up, l.dt_bias, H, "dt_bias", &p.dt_bias));
  FLOVER_RETURN_IF_ERROR(Vector(up, l.mixer_norm, inner, "norm", &p.norm));
  return std::make_unique<Mamba2Mixer>(std::move(p), state_layer);
}

absl::StatusOr<std::unique_ptr<TokenMixer>> MakeGatedDeltaNetMixer(LayerUploader& up, const DecoderShard& shard,
                                                                   int state_layer, DecoderLayerWeights& l) {
  const DecoderSpec& spec = up.spec();
  const DecoderSpec::Recurrent& r = spec.recurrent;
  const int C = spec.hidden, Hv = shard.dn_v_heads, Ch = shard.conv_channels, K = r.conv_kernel;
  const kernels::Epilogue plain = kernels::Epilogue::kBias;
  GatedDeltaNetMixer::Parts p;
  std::vector<float> none;
  FLOVER_RETURN_IF_ERROR(up.Site(l.in_x, none, C, Ch, plain, &p.qkv));
  FLOVER_RETURN_IF_ERROR(up.Site(l.in_gate, none, C, Hv * r.v_dim, plain, &p.z));
  FLOVER_RETURN_IF_ERROR(up.Site(l.in_b, none, C, Hv, plain, &p.b));
  FLOVER_RETURN_IF_ERROR(up.Site(l.in_a, none, C, Hv, plain, &p.a));
  FLOVER_RETURN_IF_ERROR(up.Site(l.o, l.o_b, Hv * r.v_dim, C, up.into_x(), &p.out));
  if (static_cast<int64_t>(l.conv.size()) != int64_t{Ch} * K) {
    return absl::InvalidArgumentError(absl::StrCat("a gated delta net's convolution has ", l.conv.size(),
                                                   " weights, not ", Ch, " channels x ", K, " taps"));
  }
  FLOVER_RETURN_IF_ERROR(up.Values(l.conv, Ch, K, &p.conv));
  if (r.a_log) {
    for (float& v : l.decay_a) v = -std::exp(v);
  }
  FLOVER_RETURN_IF_ERROR(Vector(up, l.decay_a, Hv, "A_log", &p.decay_a));
  FLOVER_RETURN_IF_ERROR(Vector(up, l.dt_bias, Hv, "dt_bias", &p.dt_bias));
  FLOVER_RETURN_IF_ERROR(Vector(up, l.mixer_norm, r.v_dim, "norm", &p.norm));
  return std::make_unique<GatedDeltaNetMixer>(std::move(p), state_layer);
}

absl::StatusOr<std::unique_ptr<TokenMixer>> MakeShortConvMixer(LayerUploader& up, const DecoderShard& shard,
                                                               int state_layer, DecoderLayerWeights& l) {
  const DecoderSpec& spec = up.spec();
  const int C = spec.hidden, Ch = shard.conv_channels, K = spec.recurrent.conv_kernel;
  const kernels::Epilogue plain = kernels::Epilogue::kBias;
  ShortConvMixer::Parts p;
  std::vector<float> none;
  FLOVER_RETURN_IF_ERROR(up.Site(l.in_b, none, C, Ch, plain, &p.b));
  FLOVER_RETURN_IF_ERROR(up.Site(l.in_gate, none, C, Ch, plain, &p.c));
  FLOVER_RETURN_IF_ERROR(up.Site(l.in_x, none, C, Ch, plain, &p.x));
  FLOVER_RETURN_IF_ERROR(up.Site(l.o, l.o_b, Ch, C, up.into_x(), &p.out));
  if (static_cast<int64_t>(l.conv.size()) != int64_t{Ch} * K) {
    return absl::InvalidArgumentError(absl::StrCat("a short convolution has ", l.conv.size(), " weights, not ", Ch,
                                                   " channels x ", K, " taps"));
  }
  FLOVER_RETURN_IF_ERROR(up.Values(l.conv, Ch, K, &p.conv));
  return std::make_unique<ShortConvMixer>(std::move(p), state_layer);
}

}  // namespace flover
