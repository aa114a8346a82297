#include "model/decoder/decoder_spec.h"

#include <algorithm>
#include <cmath>

#include <tuple>

#include "absl/strings/str_cat.h"

namespace flover {

int DecoderSpec::KvWindow() const {
  int window = 0;
  for (int l = 0; l < static_cast<int>(attention.size()); ++l) {
    if (mixer(l) != Mixer::kAttention) continue;
    if (attention[l].window <= 0) return 0;
    window = std::max(window, attention[l].window);
  }
  return window;
}

DecoderSpec::Mixer DecoderSpec::RecurrentKind() const {
  for (Mixer m : mixers) {
    if (m != Mixer::kAttention) return m;
  }
  return Mixer::kAttention;
}

int DecoderSpec::Recurrent::conv_channels(int hidden) const {
  if (heads > 0) return heads * head_dim + 2 * groups * state_size;
  return k_heads > 0 ? 2 * k_heads * k_dim + v_heads * v_dim : hidden;
}

int DecoderSpec::KvLayerCount() const {
  if (mixers.empty()) return n_layer;
  return static_cast<int>(std::count(mixers.begin(), mixers.end(), Mixer::kAttention));
}

int DecoderSpec::KvLayerOf(int l) const {
  if (mixers.empty()) return l;
  return static_cast<int>(std::count(mixers.begin(), mixers.begin() + l, Mixer::kAttention));
}

absl::Status DecoderSpec::Validate() const {
  auto bad = [](auto&&... m) { return absl::InvalidArgumentError(absl::StrCat(m...)); };
  if (n_layer < 1 || hidden < 1 || n_head < 1 || n_kv_head < 1 || head_dim < 1 ||
      intermediate < 1 || vocab_size < 1 || max_positions < 1) {
    return bad("a decoder's shapes must be positive");
  }
  if (n_head % n_kv_head != 0) {
    return bad(n_head, " query heads are not a multiple of ", n_kv_head, " key/value heads");
  }
  if (static_cast<int>(attention.size()) != n_layer) {
    return bad(attention.size(), " attention settings for ", n_layer, " layers");
  }
  if (!mixers.empty() && static_cast<int>(mixers.size()) != n_layer) {
    return bad(mixers.size(), " layer kinds (mixers) for ", n_layer, " layers");
  }
  if (KvLayerCount() < 1) return bad("a decoder needs at least one attention layer");
  const Mixer recurrent_kind = RecurrentKind();
  for (Mixer m : mixers) {
    if (m != Mixer::kAttention && m != recurrent_kind) {
      return bad("a model's recurrent layers are all of one kind (gated delta net or short convolution)");
    }
  }
  const Recurrent& r = recurrent;
  if (recurrent_kind != Mixer::kAttention &&
      (r.conv_kernel < 2 || r.conv_kernel > kernels::kMaxConvKernel)) {
    return bad("the recurrent layers' convolution has ", r.conv_kernel, " taps (2 to ", kernels::kMaxConvKernel, ")");
  }
  if (recurrent_kind == Mixer::kGatedDeltaNet) {
    if (r.k_heads < 1 || r.v_heads < 1 || r.v_heads % r.k_heads != 0) {
      return bad("the gated delta net's ", r.v_heads, " value heads are not a multiple of its ", r.k_heads,
                 " key heads");
    }
    if (r.k_dim < 1 || r.v_dim < 1 || r.k_dim > kernels::kMaxDeltaHeadDim || r.v_dim > kernels::kMaxDeltaHeadDim) {
      return bad("the gated delta net's head sizes (key ", r.k_dim, ", value ", r.v_dim, ") must be in [1, ",
                 kernels::kMaxDeltaHeadDim, "]");
    }
  }
  if (recurrent_kind == Mixer::kMamba2) {
    if (r.heads < 1 || r.groups < 1 || r.heads % r.groups != 0 || r.head_dim < 1 || r.state_size < 1 ||
        r.state_size > kernels::kMaxScanStateSize) {
      return bad("Mamba-2's ", r.heads, " heads of ", r.head_dim, " in ", r.groups, " groups with states of ",
                 r.state_size, " (heads a multiple of groups; state size 1 to ", kernels::kMaxScanStateSize, ")");
    }
    if (!(r.dt_min >= 0) || !(r.dt_max >= r.dt_min)) {
      return bad("Mamba-2's time step limits [", r.dt_min, ", ", r.dt_max, "] are not a range");
    }
  }
  if (!(residual_scale > 0) || !std::isfinite(residual_scale)) return bad("the residual scale must be > 0");
  if (residual_scale != 1.0f && block == Block::kSandwich) {
    return bad("a residual scale with sandwich norms is not built");
  }
  if (attn_output_gate && qk_norm_whole) return bad("an attention output gate with whole-Q/K norms is not built");
  if (2 * inv_freq.size() > static_cast<size_t>(head_dim)) {
    return bad("rotary embeddings turn ", 2 * inv_freq.size(), " dims of a ", head_dim,
               "-dim head");
  }
  if (!local_rope.empty() &&
      (static_cast<int>(local_rope.size()) != n_layer || inv_freq_local.size() != inv_freq.size())) {
    return bad("a second rotary table needs a mark per layer and as many frequencies as the first");
  }
  if (!rope_layers.empty() && static_cast<int>(rope_layers.size()) != n_layer) {
    return bad(rope_layers.size(), " rotary marks for ", n_layer, " layers");
  }
  if (qk_norm && norm != Norm::kRmsNorm) return bad("Q/K norms are RMSNorms, in a model of RMSNorms");
  if (qk_norm_whole && !qk_norm) return bad("qk_norm_whole is a kind of Q/K norm: set qk_norm too");
  if (moe.experts < 0 || moe.experts > kernels::kMaxExperts) {
    return bad("a mixture of ", moe.experts, " experts (at most ", kernels::kMaxExperts, ")");
  }
  if (moe.experts > 0) {
    if (moe.router.k < 1 || moe.router.k > moe.experts) {
      return bad("each row takes ", moe.router.k, " of ", moe.experts, " experts");
    }
    if (moe.intermediate < 1) return bad("the experts' MLP width must be positive");
    if (moe.shared_intermediate < 0) return bad("the shared expert's MLP width must be >= 0");
    if (mlp != Mlp::kGlu) return bad("experts are gated MLPs: a mixture of experts needs Mlp::kGlu");
    if (block != Block::kSequential) return bad("a mixture of experts runs in sequential blocks only");
    if (!moe.layers.empty() && static_cast<int>(moe.layers.size()) != n_layer) {
      return bad(moe.layers.size(), " mixture-of-experts marks for ", n_layer, " layers");
    }
  }
  if (block == Block::kSandwich && norm != Norm::kRmsNorm) {
    return bad("post-attention and post-MLP norms are RMSNorms");
  }
  return absl::OkStatus();
}

absl::Status ValidateDecoderShard(const DecoderSpec& c, const ShardSpec& s) {
  if (s.tp_size < 1 || s.tp_rank < 0 || s.tp_rank >= s.tp_size) {
    return absl::InvalidArgumentError(absl::StrCat("tp rank ", s.tp_rank, " of ", s.tp_size,
                                                   " is out of range"));
  }
  if (c.n_kv_head % s.tp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tp=", s.tp_size, " does not divide the model's ", c.n_kv_head,
        c.n_kv_head == c.n_head ? " attention heads" : " key/value heads"));
  }
  if (c.intermediate % s.tp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tp=", s.tp_size, " does not divide the MLP width ", c.intermediate));
  }
  if (c.moe.experts > 0 && c.moe.intermediate % s.tp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tp=", s.tp_size, " does not divide the experts' MLP width ", c.moe.intermediate));
  }
  if (c.moe.shared_intermediate % s.tp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tp=", s.tp_size, " does not divide the shared expert's MLP width ", c.moe.shared_intermediate));
  }
  if (c.RecurrentKind() == DecoderSpec::Mixer::kGatedDeltaNet && c.recurrent.k_heads % s.tp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tp=", s.tp_size, " does not divide the gated delta net's ", c.recurrent.k_heads, " key heads"));
  }
  if (c.RecurrentKind() == DecoderSpec::Mixer::kShortConv && c.hidden % s.tp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tp=", s.tp_size, " does not divide the short convolution's ", c.hidden, " channels"));
  }
  if (c.RecurrentKind() == DecoderSpec::Mixer::kMamba2 && c.recurrent.groups % s.tp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tp=", s.tp_size, " does not divide Mamba-2's ", c.recurrent.groups,
        " groups (each rank takes whole groups, the heads that share their B and C); run it with --tp=1"));
  }
  if (c.qk_norm_whole && s.tp_size > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tp=", s.tp_size, ": this model norms Q and K across all heads at once (OLMoE), which "
        "needs every head on one rank; run it with --tp=1"));
  }
  if (c.vocab_size < s.tp_size) return absl::InvalidArgumentError("--tp is larger than the vocabulary");
  return absl::OkStatus();
}

DecoderShard DecoderShardOf(const DecoderSpec& c, const ShardSpec& s) {
  DecoderShard out;
  out.kv_heads = c.n_kv_head / s.tp_size;
  out.kv_head_begin = s.tp_rank * out.kv_heads;
  out.q_heads = c.n_head / s.tp_size;  // whole groups: n_head is a multiple of n_kv_head
  out.q_head_begin = s.tp_rank * out.q_heads;
  out.inner = c.intermediate / s.tp_size;
  out.inner_begin = s.tp_rank * out.inner;
  out.expert_inner = c.moe.intermediate / s.tp_size;
  out.expert_inner_begin = s.tp_rank * out.expert_inner;
  out.shared_inner = c.moe.shared_intermediate / s.tp_size;
  out.shared_inner_begin = s.tp_rank * out.shared_inner;
  std::tie(out.vocab_begin, out.vocab_end) = VocabRange(c.vocab_size, s);
  out.adds_replicated_bias = s.tp_rank == 0;
  if (c.RecurrentKind() == DecoderSpec::Mixer::kGatedDeltaNet) {
    out.dn_k_heads = c.recurrent.k_heads / s.tp_size;
    out.dn_k_head_begin = s.tp_rank * out.dn_k_heads;
    out.dn_v_heads = c.recurrent.v_heads / s.tp_size;
    out.dn_v_head_begin = s.tp_rank * out.dn_v_heads;
    out.conv_channels = 2 * out.dn_k_heads * c.recurrent.k_dim + out.dn_v_heads * c.recurrent.v_dim;
  } else if (c.RecurrentKind() == DecoderSpec::Mixer::kShortConv) {
    out.conv_channels = c.hidden / s.tp_size;
    out.conv_channel_begin = s.tp_rank * out.conv_channels;
  } else if (c.RecurrentKind() == DecoderSpec::Mixer::kMamba2) {
    const DecoderSpec::Recurrent& r = c.recurrent;
    out.mamba_groups = r.groups / s.tp_size;
    out.mamba_group_begin = s.tp_rank * out.mamba_groups;
    out.mamba_heads = r.heads / s.tp_size;
    out.mamba_head_begin = s.tp_rank * out.mamba_heads;
    out.conv_channels = out.mamba_heads * r.head_dim + 2 * out.mamba_groups * r.state_size;
  }
  return out;
}

}  // namespace flover
