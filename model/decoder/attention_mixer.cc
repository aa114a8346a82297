// Attention as a layer's token mixer: the fused q/k/v GEMM, Q/K norms where
// the spec has them, rotary embeddings, the KV append and attention over
// the paged cache, an output gate where the spec has one (Qwen3.5), and the
// output projection into the residual stream.
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

class AttentionMixer final : public TokenMixer {
 public:
  // `kv_layer`: the layer's K and V in the cache (its index among the
  // attention layers).
  AttentionMixer(LinearSite qkv, LinearSite o, std::optional<LinearSite> gate, Buffer q_norm, Buffer k_norm,
                 Buffer v_norm, Buffer sinks, int kv_layer)
      : qkv_(std::move(qkv)), o_(std::move(o)), gate_(std::move(gate)), q_norm_(std::move(q_norm)),
        k_norm_(std::move(k_norm)), v_norm_(std::move(v_norm)), sinks_(std::move(sinks)), kv_layer_(kv_layer) {}

  absl::Status Forward(LayerContext& m, const Tensor& h, const LayerStep& s, const Buffer& post) const override {
    const DecoderSpec& spec = m.spec();
    const DecoderShard& shard = m.shard();
    kernels::Backend& backend = m.backend();
    const int l = s.layer, D = spec.head_dim_of(l);
    // A layer that reads another's K and V projects Q alone.
    const bool owns_kv = spec.kv_owner(l) == l;
    const int kv_heads = owns_kv ? shard.kv_heads_of(spec, l) : 0;
    const Tensor qkv = m.buffer(kQkv, s.T).View(0, s.T, (shard.q_heads + 2 * kv_heads) * D);
    const Tensor attn = m.buffer(kAttn, s.T).View(0, s.T, shard.q_heads * D);
    FLOVER_RETURN_IF_ERROR(m.Apply(qkv_, h, qkv));
    if (spec.qk_norm) {  // each head of Q, then of K, on its own; or all of Q, then all of K
      const int groups_q = spec.qk_norm_whole ? 1 : shard.q_heads;
      const int groups_k = spec.qk_norm_whole ? 1 : kv_heads;
      FLOVER_RETURN_IF_ERROR(backend.GroupRmsNorm(qkv, 0, groups_q, q_norm_, spec.norm_eps));
      if (owns_kv) {
        FLOVER_RETURN_IF_ERROR(backend.GroupRmsNorm(qkv, shard.q_heads * D, groups_k, k_norm_, spec.norm_eps));
      }
    }
    if (!v_norm_.empty()) {  // each head of V, without a weight (ones)
      FLOVER_RETURN_IF_ERROR(
          backend.GroupRmsNorm(qkv, (shard.q_heads + kv_heads) * D, kv_heads, v_norm_, spec.norm_eps));
    }
    if (!m.inv_freq(false).empty() && (spec.rope_layers.empty() || spec.rope_layers[l])) {
      const bool local = !spec.local_rope.empty() && spec.local_rope[l];
      kernels::RopeParams rope{shard.q_heads, kv_heads, D, spec.rope_style, spec.rope_scale};
      rope.mrope_t = spec.mrope_t;
      rope.mrope_h = spec.mrope_h;
      rope.mrope_w = spec.mrope_w;
      rope.mrope_interleaved = spec.mrope_interleaved;
      FLOVER_RETURN_IF_ERROR(backend.Rope(qkv, s.step.rope_positions, m.inv_freq(local).tensor(), rope));
    }
    // A local layer reads its own blocks where the cache keeps them apart.
    const kernels::SeqTable& table = s.cache.shape().local(kv_layer_) ? s.step.local_seqs : s.step.seqs;
    const kernels::KvLayer kv = s.cache.layer(kv_layer_);
    if (owns_kv) FLOVER_RETURN_IF_ERROR(backend.AppendKv(qkv, table, kv));
    kernels::AttentionParams params = spec.attention[l];
    params.q_only = !owns_kv;
    if (!sinks_.empty()) params.sinks = sinks_.tensor().as<float>();
    if (!gate_.has_value()) {
      FLOVER_RETURN_IF_ERROR(backend.Attention(qkv, table, kv, params, attn));
      return m.Residual(o_, attn, post, s.T);
    }
    // Gated: attention's output (f32) times sigmoid(h @ gate), in place.
    const Tensor gated = m.buffer(kGated, s.T).View(0, s.T, shard.q_heads * D);
    const Tensor gate = m.buffer(kGateIn, s.T).View(0, s.T, shard.q_heads * D);
    FLOVER_RETURN_IF_ERROR(backend.Attention(qkv, table, kv, params, gated));
    FLOVER_RETURN_IF_ERROR(m.Apply(*gate_, h, gate));
    FLOVER_RETURN_IF_ERROR(backend.Gate(gated, gate, kernels::GateKind::kSigmoid, gated));
    return m.Residual(o_, gated, post, s.T);
  }

  absl::Status Prepare(kernels::Backend& backend, int T) const override {
    for (const LinearSite* s : {&qkv_, &o_}) {
      FLOVER_RETURN_IF_ERROR(backend.PrepareLinear(*s->w, T, !s->bias.empty(), s->epilogue));
    }
    if (gate_.has_value()) FLOVER_RETURN_IF_ERROR(backend.PrepareLinear(*gate_->w, T, false, gate_->epilogue));
    return absl::OkStatus();
  }

 private:
  LinearSite qkv_, o_;
  std::optional<LinearSite> gate_;  // spec.attn_output_gate
  Buffer q_norm_, k_norm_;  // spec.qk_norm
  Buffer v_norm_;           // spec.v_norm (a layer that keeps K and V): ones [D]
  Buffer sinks_;            // spec.attention_sinks: this rank's query heads'
  int kv_layer_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TokenMixer>> MakeAttentionMixer(LayerUploader& up, const DecoderShard& shard,
                                                               int layer, DecoderLayerWeights& l) {
  const DecoderSpec& spec = up.spec();
  const bool owns_kv = spec.kv_owner(layer) == layer;
  const int kv_heads = owns_kv ? shard.kv_heads_of(spec, layer) : 0;
  const int C = spec.hidden, D = spec.head_dim_of(layer), QL = shard.q_heads * D,
            W = (shard.q_heads + 2 * kv_heads) * D;
  Buffer q_norm, k_norm;
  if (spec.qk_norm) {  // per head: [D]; whole (one rank): [Hq * D] and [Hkv * D]
    const int qn = spec.qk_norm_whole ? QL : D, kn = !owns_kv ? 0 : spec.qk_norm_whole ? kv_heads * D : D;
    if (static_cast<int>(l.q_norm.size()) != qn || static_cast<int>(l.k_norm.size()) != kn) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", layer, "'s Q/K norms need weights of ", qn, " and ", kn, " values"));
    }
    FLOVER_RETURN_IF_ERROR(up.Values(l.q_norm, 1, qn, &q_norm));
    if (owns_kv) FLOVER_RETURN_IF_ERROR(up.Values(l.k_norm, 1, kn, &k_norm));
  }
  Buffer v_norm;
  if (spec.v_norm && owns_kv) {
    std::vector<float> ones(D, 1.0f);
    FLOVER_RETURN_IF_ERROR(up.Values(ones, 1, D, &v_norm));
  }
  Buffer sinks;
  if (spec.attention_sinks) {
    if (static_cast<int>(l.sinks.size()) != shard.q_heads) {
      return absl::InvalidArgumentError(absl::StrCat("attention sinks: ", l.sinks.size(), " values for ",
                                                     shard.q_heads, " query heads"));
    }
    FLOVER_RETURN_IF_ERROR(up.Values(l.sinks, 1, shard.q_heads, &sinks));
  }
  LinearSite qkv, o;
  FLOVER_RETURN_IF_ERROR(up.Site(l.qkv, l.qkv_b, C, W, kernels::Epilogue::kBias, &qkv));
  FLOVER_RETURN_IF_ERROR(up.Site(l.o, l.o_b, QL, C, up.into_x(), &o));
  std::optional<LinearSite> gate;
  if (spec.attn_output_gate) {
    std::vector<float> none;
    FLOVER_RETURN_IF_ERROR(up.Site(l.attn_gate, none, C, QL, kernels::Epilogue::kBias, &gate.emplace()));
  }
  return std::make_unique<AttentionMixer>(std::move(qkv), std::move(o), std::move(gate), std::move(q_norm),
                                          std::move(k_norm), std::move(v_norm), std::move(sinks),
                                          spec.KvLayerOf(layer));
}

}  // namespace flover
