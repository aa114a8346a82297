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
  int count = 0;
  for (int l = 0; l < n_layer; ++l) count += mixer(l) == Mixer::kAttention && kv_owner(l) == l;
  return count;
}

int DecoderSpec::KvLayerOf(int l) const {
  const int owner = kv_owner(l);
  int index = 0;
  for (int i = 0; i < owner; ++i) index += mixer(i) == Mixer::kAttention && kv_owner(i) == i;
  return index;
}

int DecoderSpec::StateLayerCount() const { return StateLayerOf(n_layer); }

int DecoderSpec::StateLayerOf(int l) const {
  int index = 0;
  for (int i = 0; i < l; ++i) index += mixer(i) != Mixer::kAttention;
  return index;
}

int DecoderSpec::MaxHeadDim() const {
  int d = head_dim;
  for (const LayerAttention& a : layer_attention) d = std::max(d, a.head_dim);
  return d;
}

int DecoderSpec::MaxQkvWidth(int q_heads, int tp_size) const {
  auto width = [&](int kv_heads, int dim) {
    return (q_heads + 2 * DecoderShard::KvBand(kv_heads, tp_size, 0).count) * dim;
  };
  int w = width(n_kv_head, head_dim);
  for (const LayerAttention& a : layer_attention) w = std::max(w, width(a.kv_heads, a.head_dim));
  return w;
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
  if (!layer_attention.empty()) {
    if (static_cast<int>(layer_attention.size()) != n_layer) {
      return bad(layer_attention.size(), " layer attention shapes for ", n_layer, " layers");
    }
    for (int l = 0; l < n_layer; ++l) {
      const LayerAttention& a = layer_attention[l];
      if (a.kv_heads < 1 || a.head_dim < 1 || n_head % a.kv_heads != 0) {
        return bad("layer ", l, ": ", n_head, " query heads over ", a.kv_heads, " key/value heads of ", a.head_dim,
                   " (key/value heads must be positive and divide the query heads)");
      }
      if (a.kv_from >= 0) {
        if (a.kv_from >= l || mixer(a.kv_from) != Mixer::kAttention || layer_attention[a.kv_from].kv_from >= 0 ||
            mixer(l) != Mixer::kAttention) {
          return bad("layer ", l, " reads the K and V of layer ", a.kv_from,
                     ", which must be an earlier attention layer that writes its own");
        }
        const LayerAttention& o = layer_attention[a.kv_from];
        if (o.kv_heads != a.kv_heads || o.head_dim != a.head_dim || attention[a.kv_from].window != attention[l].window) {
          return bad("layer ", l, " reads the K and V of layer ", a.kv_from, ", whose heads or window differ");
        }
      }
    }
  }
  if (!layer_intermediate.empty()) {
    if (static_cast<int>(layer_intermediate.size()) != n_layer) {
      return bad(layer_intermediate.size(), " MLP widths for ", n_layer, " layers");
    }
    for (int f : layer_intermediate) {
      if (f < 1) return bad("an MLP width of ", f);
    }
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
  if (!local_rope.empty() && (static_cast<int>(local_rope.size()) != n_layer || inv_freq_local.empty())) {
    return bad("a second rotary table needs a mark per layer and frequencies");
  }
  for (int l = 0; l < n_layer && !inv_freq.empty(); ++l) {
    if (mixer(l) != Mixer::kAttention) continue;
    const size_t turned = 2 * (!local_rope.empty() && local_rope[l] ? inv_freq_local : inv_freq).size();
    if (turned > static_cast<size_t>(head_dim_of(l))) {
      return bad("rotary embeddings turn ", turned, " dims of layer ", l, "'s ", head_dim_of(l), "-dim heads");
    }
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
    if (block != (moe.beside_dense ? Block::kSandwich : Block::kSequential)) {
      return bad("a mixture of experts runs in sequential blocks only (beside a dense MLP: sandwich blocks)");
    }
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
  // Key/value heads split by rank, or (fewer than ranks) each kept whole on
  // the ranks whose query heads read it.
  auto splits = [&](int kv) { return kv % s.tp_size == 0 || (kv < s.tp_size && s.tp_size % kv == 0); };
  if (c.n_head % s.tp_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tp=", s.tp_size, " does not divide the model's ", c.n_head, " attention heads"));
  }
  if (!splits(c.n_kv_head)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tp=", s.tp_size, " does not divide the model's ", c.n_kv_head,
        c.n_kv_head == c.n_head ? " attention heads" : " key/value heads"));
  }
  for (int l = 0; l < c.n_layer; ++l) {
    if (!splits(c.kv_heads_of(l))) {
      return absl::InvalidArgumentError(absl::StrCat("--tp=", s.tp_size, " does not divide layer ", l, "'s ",
                                                     c.kv_heads_of(l), " key/value heads, nor do they divide it"));
    }
    if (c.intermediate_of(l) % s.tp_size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tp=", s.tp_size, " does not divide the MLP width ", c.intermediate_of(l)));
    }
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
  out.tp_size = s.tp_size;
  out.tp_rank = s.tp_rank;
  const DecoderShard::Band kv = DecoderShard::KvBand(c.n_kv_head, s.tp_size, s.tp_rank);
  out.kv_heads = kv.count;
  out.kv_head_begin = kv.begin;
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
