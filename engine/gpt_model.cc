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

GptModel::GptModel(const GptConfig& config, GptWeights weights, kernels::Ops& ops,
                   Communicator* comm)
    : config_(config), weights_(std::move(weights)), ops_(ops), comm_(comm) {
  using kernels::WeightLayout;
  if (comm_ != nullptr) spec_ = {comm_->world().tp_size, comm_->world().tp_rank};
  shard_ = ShapeOf(config_, spec_);
  const int C = config_.n_embd, CL = shard_.heads * config_.head_dim(), FL = shard_.inner;
  for (LayerWeights& l : weights_.layers) {
    PreparedLayer p;
    p.attn = ops_.PrepareWeight(l.attn_w.data(), C, 3 * CL, WeightLayout::kInOut);
    p.attn_proj = ops_.PrepareWeight(l.attn_proj_w.data(), CL, C, WeightLayout::kInOut);
    p.fc = ops_.PrepareWeight(l.fc_w.data(), C, FL, WeightLayout::kInOut);
    p.mlp_proj = ops_.PrepareWeight(l.mlp_proj_w.data(), FL, C, WeightLayout::kInOut);
    Release(l.attn_w);
    Release(l.attn_proj_w);
    Release(l.fc_w);
    Release(l.mlp_proj_w);
    layers_.push_back(std::move(p));
  }
  // The tied LM head is wte itself (this rank's vocabulary rows), [V_local, C];
  // wte stays for the embeddings.
  lm_head_ = ops_.PrepareWeight(weights_.lm_head_data(), C,
                                shard_.vocab_end - shard_.vocab_begin, WeightLayout::kOutIn);
}

KvCacheShape GptModel::CacheShape(int slots, int max_seq) const {
  return KvCacheShape{config_.n_layer, slots, shard_.heads, max_seq, config_.head_dim(),
                      ops_.kv_dtype()};
}

absl::Status GptModel::Validate(const ForwardBatch& b, const KvCache& cache) const {
  const KvCacheShape& cs = cache.shape();
  if (cs.layers != config_.n_layer || cs.heads != shard_.heads ||
      cs.head_dim != config_.head_dim()) {
    return absl::InvalidArgumentError("KV cache shape does not match the model");
  }
  if (cs.dtype != ops_.kv_dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache holds ", kernels::KvDtypeName(cs.dtype), " but the ops keep K/V in ",
        kernels::KvDtypeName(ops_.kv_dtype())));
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

absl::Status GptModel::RowSplitResidual(const float* rows, int T, const kernels::Weight& w,
                                        const float* bias, float* x) {
  const int C = config_.n_embd;
  if (spec_.tp_size == 1) {
    ops_.Linear(rows, T, w, bias, RowSplitEpilogue(), x);
    return absl::OkStatus();
  }
  partial_.resize(size_t(T) * C);
  ops_.Linear(rows, T, w, bias, RowSplitEpilogue(), partial_.data());
  if (absl::Status st = comm_->AllReduceSum(partial_.data(), partial_.size()); !st.ok()) return st;
  ops_.Add(partial_.data(), int64_t{T} * C, x);
  return absl::OkStatus();
}

void GptModel::PrepareForBatches(int max_rows, int max_logit_rows) {
  using kernels::Epilogue;
  const int T = max_rows, R = max_logit_rows, C = config_.n_embd,
            CL = shard_.heads * config_.head_dim(), FL = shard_.inner,
            VL = shard_.vocab_end - shard_.vocab_begin;
  // Every layer has the same shapes, so layer 0's weights stand for all
  // (the ops cache per shape); the calls mirror Forward's.
  const LayerWeights& w = weights_.layers[0];
  const PreparedLayer& p = layers_[0];
  auto has = [](const std::vector<float>& bias) { return !bias.empty(); };
  ops_.PrepareLinear(*p.attn, T, has(w.attn_b), Epilogue::kBias);
  ops_.PrepareLinear(*p.attn_proj, T, has(w.attn_proj_b), RowSplitEpilogue());
  ops_.PrepareLinear(*p.fc, T, has(w.fc_b), Epilogue::kBiasGelu);
  ops_.PrepareLinear(*p.mlp_proj, T, has(w.mlp_proj_b), RowSplitEpilogue());
  ops_.PrepareLinear(*lm_head_, R, false, Epilogue::kBias);
  x_.reserve(size_t(T) * C);
  h_.reserve(size_t(std::max(T, R)) * C);
  qkv_.reserve(size_t(T) * 3 * CL);
  attn_.reserve(size_t(T) * CL);
  fc_.reserve(size_t(T) * FL);
  last_.reserve(size_t(R) * C);
  if (spec_.tp_size > 1) partial_.reserve(std::max(size_t(T) * C, size_t(R) * VL));
}

absl::Status GptModel::Forward(const ForwardBatch& b, KvCache& cache, LogitsFor which,
                               std::vector<float>* logits) {
  if (absl::Status st = Validate(b, cache); !st.ok()) return st;
  const int T = b.num_rows(), C = config_.n_embd, CL = shard_.heads * config_.head_dim(),
            FL = shard_.inner, V = config_.vocab_size;
  const int S = static_cast<int>(b.seqs.size());
  x_.resize(size_t(T) * C);
  h_.resize(size_t(T) * C);
  qkv_.resize(size_t(T) * 3 * CL);
  attn_.resize(size_t(T) * CL);
  fc_.resize(size_t(T) * FL);

  // x: [T, C] is the residual stream, replicated on every rank.
  ops_.Embed(b.tokens.data(), b.positions.data(), T, weights_.wte.data(), shard_.vocab_begin,
             shard_.vocab_end, shard_.adds_replicated_bias ? weights_.wpe.data() : nullptr, C,
             x_.data());
  if (spec_.tp_size > 1) {
    if (absl::Status st = comm_->AllReduceSum(x_.data(), x_.size()); !st.ok()) return st;
  }
  using kernels::Epilogue;
  for (int l = 0; l < config_.n_layer; ++l) {
    const LayerWeights& w = weights_.layers[l];
    const PreparedLayer& p = layers_[l];
    ops_.LayerNorm(x_.data(), T, C, w.ln_1_g.data(), w.ln_1_b.data(),
                   config_.layer_norm_epsilon, h_.data());
    ops_.Linear(h_.data(), T, *p.attn, w.attn_b.data(), Epilogue::kBias, qkv_.data());
    ops_.Attention(qkv_.data(), b.seqs.data(), S, cache.layer(l), attn_.data());
    if (absl::Status st = RowSplitResidual(attn_.data(), T, *p.attn_proj, w.attn_proj_b.data(), x_.data());
        !st.ok()) {
      return st;
    }
    ops_.LayerNorm(x_.data(), T, C, w.ln_2_g.data(), w.ln_2_b.data(),
                   config_.layer_norm_epsilon, h_.data());
    ops_.Linear(h_.data(), T, *p.fc, w.fc_b.data(), Epilogue::kBiasGelu, fc_.data());
    if (absl::Status st = RowSplitResidual(fc_.data(), T, *p.mlp_proj, w.mlp_proj_b.data(), x_.data());
        !st.ok()) {
      return st;
    }
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
  if (spec_.tp_size == 1) {
    logits->resize(size_t(R) * V);
    ops_.Linear(h_.data(), R, *lm_head_, nullptr, Epilogue::kBias, logits->data());
    return absl::OkStatus();
  }
  // Each rank scores its vocabulary range; rank 0 stitches the columns.
  const int VL = shard_.vocab_end - shard_.vocab_begin;
  partial_.resize(size_t(R) * VL);
  ops_.Linear(h_.data(), R, *lm_head_, nullptr, Epilogue::kBias, partial_.data());
  if (absl::Status st = comm_->GatherToLeader(partial_.data(), partial_.size(), &gathered_);
      !st.ok()) {
    return st;
  }
  if (!comm_->world().is_leader()) {
    logits->clear();
    return absl::OkStatus();
  }
  logits->resize(size_t(R) * V);
  size_t offset = 0;
  for (int r = 0; r < spec_.tp_size; ++r) {
    const ShardShape other = ShapeOf(config_, {spec_.tp_size, r});
    const int n = other.vocab_end - other.vocab_begin;
    for (int row = 0; row < R; ++row) {
      std::memcpy(&(*logits)[size_t(row) * V + other.vocab_begin], &gathered_[offset + size_t(row) * n],
                  n * sizeof(float));
    }
    offset += size_t(R) * n;
  }
  return absl::OkStatus();
}

}  // namespace flover
