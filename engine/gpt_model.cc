#include "engine/gpt_model.h"

#include <cstring>

#include "absl/strings/str_format.h"

namespace flover {

void ForwardBatch::AddSequence(int32_t slot, int32_t pos,
                               absl::Span<const int32_t> new_tokens) {
  seqs.push_back({slot, pos, static_cast<int32_t>(new_tokens.size()),
                  static_cast<int32_t>(tokens.size())});
  for (size_t i = 0; i < new_tokens.size(); ++i) {
    tokens.push_back(new_tokens[i]);
    positions.push_back(pos + static_cast<int32_t>(i));
  }
}

void ForwardBatch::Clear() {
  tokens.clear();
  positions.clear();
  seqs.clear();
}

namespace {

// Frees a vector's memory (clear() keeps the capacity).
void Release(std::vector<float>& v) { std::vector<float>().swap(v); }

}  // namespace

GptModel::GptModel(const GptConfig& config, GptWeights weights, kernels::Ops& ops)
    : config_(config), weights_(std::move(weights)), ops_(ops) {
  using kernels::WeightLayout;
  const int C = config_.n_embd, F = config_.n_inner;
  for (LayerWeights& l : weights_.layers) {
    PreparedLayer p;
    p.attn = ops_.PrepareWeight(l.attn_w.data(), C, 3 * C, WeightLayout::kInOut);
    p.attn_proj = ops_.PrepareWeight(l.attn_proj_w.data(), C, C, WeightLayout::kInOut);
    p.fc = ops_.PrepareWeight(l.fc_w.data(), C, F, WeightLayout::kInOut);
    p.mlp_proj = ops_.PrepareWeight(l.mlp_proj_w.data(), F, C, WeightLayout::kInOut);
    Release(l.attn_w);
    Release(l.attn_proj_w);
    Release(l.fc_w);
    Release(l.mlp_proj_w);
    layers_.push_back(std::move(p));
  }
  // The tied LM head is wte itself, [V, C]; wte stays for the embeddings.
  lm_head_ = ops_.PrepareWeight(weights_.lm_head_data(), C, config_.vocab_size,
                                WeightLayout::kOutIn);
}

KvCacheShape GptModel::CacheShape(int slots, int max_seq) const {
  return KvCacheShape{config_.n_layer, slots, config_.n_head, max_seq, config_.head_dim()};
}

absl::Status GptModel::Validate(const ForwardBatch& b, const KvCache& cache) const {
  const KvCacheShape& cs = cache.shape();
  if (cs.layers != config_.n_layer || cs.heads != config_.n_head ||
      cs.head_dim != config_.head_dim()) {
    return absl::InvalidArgumentError("KV cache shape does not match the model");
  }
  if (b.seqs.empty()) return absl::InvalidArgumentError("empty batch");
  if (b.positions.size() != b.tokens.size()) {
    return absl::InvalidArgumentError("batch positions and tokens differ in length");
  }
  std::vector<bool> slot_used(cs.slots, false);
  int32_t next_row = 0;
  for (const kernels::SeqRows& s : b.seqs) {
    if (s.slot < 0 || s.slot >= cs.slots) {
      return absl::InvalidArgumentError(absl::StrFormat("slot %d is outside the cache (%d slots)", s.slot, cs.slots));
    }
    if (slot_used[s.slot]) {
      return absl::InvalidArgumentError(absl::StrFormat("slot %d appears twice in one batch", s.slot));
    }
    slot_used[s.slot] = true;
    if (s.len < 1 || s.row != next_row) {
      return absl::InvalidArgumentError("sequence rows must be non-empty and consecutive");
    }
    next_row += s.len;
    if (s.pos < 0 || int64_t{s.pos} + s.len > std::min(cs.max_seq, config_.n_positions)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "positions [%d, %d) exceed the limit of %d", s.pos, s.pos + s.len,
          std::min(cs.max_seq, config_.n_positions)));
    }
  }
  if (next_row != b.num_rows()) {
    return absl::InvalidArgumentError("sequences do not cover the batch rows");
  }
  for (int32_t t : b.tokens) {
    if (t < 0 || t >= config_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrFormat("token id %d is outside the vocabulary (%d)", t, config_.vocab_size));
    }
  }
  return absl::OkStatus();
}

absl::Status GptModel::Forward(const ForwardBatch& b, KvCache& cache, LogitsFor which,
                               std::vector<float>* logits) {
  if (absl::Status st = Validate(b, cache); !st.ok()) return st;
  const int T = b.num_rows(), C = config_.n_embd, F = config_.n_inner,
            V = config_.vocab_size;
  const int S = static_cast<int>(b.seqs.size());
  x_.resize(size_t(T) * C);
  h_.resize(size_t(T) * C);
  qkv_.resize(size_t(T) * 3 * C);
  attn_.resize(size_t(T) * C);
  fc_.resize(size_t(T) * F);

  // x: [T, C] is the residual stream.
  ops_.Embed(b.tokens.data(), b.positions.data(), T, weights_.wte.data(),
             weights_.wpe.data(), C, x_.data());
  using kernels::Epilogue;
  for (int l = 0; l < config_.n_layer; ++l) {
    const LayerWeights& w = weights_.layers[l];
    const PreparedLayer& p = layers_[l];
    ops_.LayerNorm(x_.data(), T, C, w.ln_1_g.data(), w.ln_1_b.data(),
                   config_.layer_norm_epsilon, h_.data());
    ops_.Linear(h_.data(), T, *p.attn, w.attn_b.data(), Epilogue::kBias, qkv_.data());
    ops_.Attention(qkv_.data(), b.seqs.data(), S, cache.layer(l), attn_.data());
    ops_.Linear(attn_.data(), T, *p.attn_proj, w.attn_proj_b.data(), Epilogue::kBiasResidual,
                x_.data());
    ops_.LayerNorm(x_.data(), T, C, w.ln_2_g.data(), w.ln_2_b.data(),
                   config_.layer_norm_epsilon, h_.data());
    ops_.Linear(h_.data(), T, *p.fc, w.fc_b.data(), Epilogue::kBiasGelu, fc_.data());
    ops_.Linear(fc_.data(), T, *p.mlp_proj, w.mlp_proj_b.data(), Epilogue::kBiasResidual,
                x_.data());
  }

  // Final layernorm and LM head only on the rows whose logits are wanted.
  const float* rows = x_.data();
  int R = T;
  if (which == LogitsFor::kLastRowOfEachSequence) {
    R = S;
    last_.resize(size_t(S) * C);
    for (int s = 0; s < S; ++s) {
      const int row = b.seqs[s].row + b.seqs[s].len - 1;
      std::memcpy(&last_[size_t(s) * C], &x_[size_t(row) * C], C * sizeof(float));
    }
    rows = last_.data();
  }
  h_.resize(size_t(R) * C);
  ops_.LayerNorm(rows, R, C, weights_.ln_f_g.data(), weights_.ln_f_b.data(),
                 config_.layer_norm_epsilon, h_.data());
  logits->resize(size_t(R) * V);
  ops_.Linear(h_.data(), R, *lm_head_, nullptr, kernels::Epilogue::kBias, logits->data());
  return absl::OkStatus();
}

}  // namespace flover
