#include "model/gpt2/gpt_model.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/status_macros.h"

namespace flover {

using kernels::Buffer;
using KDType = kernels::DType;
using kernels::Epilogue;
using kernels::Tensor;

namespace {

// Uploads a host vector as an f32 [rows, cols] buffer; an empty vector
// stays an empty buffer (no bias).
absl::StatusOr<Buffer> UploadF32(kernels::Backend& backend, const std::vector<float>& host,
                                 int64_t rows, int64_t cols) {
  if (host.empty()) return Buffer();
  if (static_cast<int64_t>(host.size()) != rows * cols) {
    return absl::InternalError(absl::StrCat("a weight of ", host.size(), " values does not fit [",
                                            rows, ", ", cols, "]"));
  }
  auto buf = backend.Allocate(KDType::kF32, rows, cols);
  if (!buf.ok()) return buf.status();
  FLOVER_RETURN_IF_ERROR(backend.Upload(host.data(), *buf));
  return buf;
}

const Tensor* OrNull(const Buffer& b) { return b.empty() ? nullptr : &b.tensor(); }

}  // namespace

GptModel::GptModel(const GptConfig& config, kernels::Backend& backend, Collectives* collectives)
    : config_(config), backend_(backend), collectives_(collectives) {
  if (collectives_ != nullptr) spec_ = {collectives_->world().tp_size, collectives_->world().tp_rank};
  shard_ = ShapeOf(config_, spec_);
  info_ = InfoOf(config_);
}

absl::StatusOr<std::unique_ptr<GptModel>> GptModel::Create(const GptConfig& config,
                                                           const GptWeights& weights,
                                                           kernels::Backend& backend,
                                                           Collectives* collectives) {
  FLOVER_RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<GptModel> model(new GptModel(config, backend, collectives));
  FLOVER_RETURN_IF_ERROR(model->Upload(weights));
  return model;
}

absl::Status GptModel::Upload(const GptWeights& w) {
  using kernels::WeightLayout;
  const int C = config_.n_embd, CL = shard_.heads * config_.head_dim(), FL = shard_.inner;
  const int VL = shard_.vocab_end - shard_.vocab_begin;
  if (static_cast<int>(w.layers.size()) != config_.n_layer) {
    return absl::InvalidArgumentError(absl::StrCat("the weights have ", w.layers.size(),
                                                   " layers, the config ", config_.n_layer));
  }
  auto upload = [&](const std::vector<float>& host, int64_t rows, int64_t cols, Buffer* out) {
    auto b = UploadF32(backend_, host, rows, cols);
    if (!b.ok()) return b.status();
    *out = std::move(*b);
    return absl::OkStatus();
  };
  auto prepare = [&](const std::vector<float>& host, int K, int N, WeightLayout layout,
                     std::unique_ptr<kernels::Weight>* out) {
    if (static_cast<int64_t>(host.size()) != int64_t{K} * N) {
      return absl::InternalError(absl::StrCat("a weight of ", host.size(), " values is not [", K,
                                              ", ", N, "]"));
    }
    auto p = backend_.PrepareWeight(host.data(), K, N, layout);
    if (!p.ok()) return p.status();
    *out = std::move(*p);
    return absl::OkStatus();
  };
  for (const LayerWeights& l : w.layers) {
    LayerParams p;
    FLOVER_RETURN_IF_ERROR(upload(l.ln_1_g, 1, C, &p.ln_1_g));
    FLOVER_RETURN_IF_ERROR(upload(l.ln_1_b, 1, C, &p.ln_1_b));
    FLOVER_RETURN_IF_ERROR(upload(l.ln_2_g, 1, C, &p.ln_2_g));
    FLOVER_RETURN_IF_ERROR(upload(l.ln_2_b, 1, C, &p.ln_2_b));
    FLOVER_RETURN_IF_ERROR(upload(l.attn_b, 1, 3 * CL, &p.attn_b));
    FLOVER_RETURN_IF_ERROR(upload(l.attn_proj_b, 1, C, &p.attn_proj_b));
    FLOVER_RETURN_IF_ERROR(upload(l.fc_b, 1, FL, &p.fc_b));
    FLOVER_RETURN_IF_ERROR(upload(l.mlp_proj_b, 1, C, &p.mlp_proj_b));
    FLOVER_RETURN_IF_ERROR(prepare(l.attn_w, C, 3 * CL, WeightLayout::kInOut, &p.attn));
    FLOVER_RETURN_IF_ERROR(prepare(l.attn_proj_w, CL, C, WeightLayout::kInOut, &p.attn_proj));
    FLOVER_RETURN_IF_ERROR(prepare(l.fc_w, C, FL, WeightLayout::kInOut, &p.fc));
    FLOVER_RETURN_IF_ERROR(prepare(l.mlp_proj_w, FL, C, WeightLayout::kInOut, &p.mlp_proj));
    if (p.ln_1_g.empty() || p.ln_1_b.empty() || p.ln_2_g.empty() || p.ln_2_b.empty()) {
      return absl::InvalidArgumentError("a layer has no layernorm parameters");
    }
    layers_.push_back(std::move(p));
  }
  // The LM head is [V_local, C]: lm_head when untied, else wte itself (this
  // rank's vocabulary rows), which also stays as the embedding table.
  if (static_cast<int64_t>(w.wte.size()) != int64_t{VL} * C) {
    return absl::InternalError("wte does not hold this rank's vocabulary rows");
  }
  FLOVER_RETURN_IF_ERROR(prepare(w.lm_head.empty() ? w.wte : w.lm_head, C, VL,
                                 WeightLayout::kOutIn, &lm_head_));
  FLOVER_RETURN_IF_ERROR(upload(w.wte, VL, C, &wte_));
  if (shard_.adds_replicated_bias) {
    FLOVER_RETURN_IF_ERROR(upload(w.wpe, config_.n_positions, C, &wpe_));
  }
  FLOVER_RETURN_IF_ERROR(upload(w.ln_f_g, 1, C, &ln_f_g_));
  FLOVER_RETURN_IF_ERROR(upload(w.ln_f_b, 1, C, &ln_f_b_));
  if (ln_f_g_.empty() || ln_f_b_.empty() || (shard_.adds_replicated_bias && wpe_.empty())) {
    return absl::InvalidArgumentError("the model has no wpe or final layernorm");
  }
  return absl::OkStatus();
}

KvCacheShape GptModel::CacheShape(int slots, int max_seq) const {
  return KvCacheShape{config_.n_layer, slots, shard_.heads, max_seq, config_.head_dim(),
                      backend_.kv_dtype()};
}

absl::Status GptModel::Validate(const ForwardBatch& b, const KvCache& cache) const {
  const KvCacheShape& cs = cache.shape();
  if (&cache.backend() != &backend_) {
    return absl::InvalidArgumentError("the KV cache belongs to another backend than the model");
  }
  if (cs.layers != config_.n_layer || cs.heads != shard_.heads ||
      cs.head_dim != config_.head_dim()) {
    return absl::InvalidArgumentError("KV cache shape does not match the model");
  }
  if (cs.dtype != backend_.kv_dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache holds ", kernels::KvDtypeName(cs.dtype), " but the backend keeps K/V in ",
        kernels::KvDtypeName(backend_.kv_dtype())));
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
    for (int i = 0; i < s.len; ++i) {
      if (b.positions[s.row + i] != s.pos + i) {
        return absl::InvalidArgumentError("batch positions do not follow their sequences");
      }
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

absl::Status GptModel::Reserve(int rows, int logit_rows) {
  if (rows <= act_.rows && logit_rows <= act_.logit_rows) return absl::OkStatus();
  // Grow to at least what was there, so alternating shapes never reallocate.
  rows = std::max(rows, act_.rows);
  logit_rows = std::max(logit_rows, act_.logit_rows);
  const int C = config_.n_embd, CL = shard_.heads * config_.head_dim(), FL = shard_.inner,
            VL = shard_.vocab_end - shard_.vocab_begin;
  const KDType act = backend_.activation_dtype();
  Activations a;
  a.rows = rows;
  a.logit_rows = logit_rows;
  auto alloc = [&](KDType dtype, int64_t r, int64_t c, Buffer* out) {
    auto b = backend_.Allocate(dtype, r, c);
    if (!b.ok()) return b.status();
    *out = std::move(*b);
    return absl::OkStatus();
  };
  act_ = Activations();  // free the old buffers first: the device may not hold both
  FLOVER_RETURN_IF_ERROR(alloc(KDType::kF32, rows, C, &a.x));
  FLOVER_RETURN_IF_ERROR(alloc(act, std::max(rows, logit_rows), C, &a.h));
  FLOVER_RETURN_IF_ERROR(alloc(KDType::kF32, rows, 3 * CL, &a.qkv));
  FLOVER_RETURN_IF_ERROR(alloc(act, rows, CL, &a.attn));
  FLOVER_RETURN_IF_ERROR(alloc(act, rows, FL, &a.fc));
  if (spec_.tp_size > 1) FLOVER_RETURN_IF_ERROR(alloc(KDType::kF32, rows, C, &a.partial));
  FLOVER_RETURN_IF_ERROR(alloc(KDType::kF32, logit_rows, C, &a.last));
  FLOVER_RETURN_IF_ERROR(alloc(KDType::kF32, std::max(rows, logit_rows), VL, &a.logits));
  FLOVER_RETURN_IF_ERROR(alloc(KDType::kI32, 1, 6 * int64_t{rows}, &a.step));
  act_ = std::move(a);
  return absl::OkStatus();
}

absl::Status GptModel::PrepareForBatches(int max_rows, int max_logit_rows) {
  if (max_rows < 1 || max_logit_rows < 1) {
    return absl::InvalidArgumentError("PrepareForBatches: row counts must be >= 1");
  }
  const int T = max_rows, R = max_logit_rows;
  // Every layer has the same shapes, so layer 0's weights stand for all
  // (backends cache per shape); the calls mirror Run's.
  const LayerParams& p = layers_[0];
  FLOVER_RETURN_IF_ERROR(backend_.PrepareLinear(*p.attn, T, !p.attn_b.empty(), Epilogue::kBias));
  FLOVER_RETURN_IF_ERROR(
      backend_.PrepareLinear(*p.attn_proj, T, !p.attn_proj_b.empty(), RowSplitEpilogue()));
  FLOVER_RETURN_IF_ERROR(backend_.PrepareLinear(*p.fc, T, !p.fc_b.empty(), Epilogue::kBiasGelu));
  FLOVER_RETURN_IF_ERROR(
      backend_.PrepareLinear(*p.mlp_proj, T, !p.mlp_proj_b.empty(), RowSplitEpilogue()));
  FLOVER_RETURN_IF_ERROR(backend_.PrepareLinear(*lm_head_, std::max(T, R), false, Epilogue::kBias));
  return Reserve(T, R);
}

absl::Status GptModel::MoveSlot(KvCache& cache, int from, int to, int len) {
  if (&cache.backend() != &backend_) {
    return absl::InvalidArgumentError("the KV cache belongs to another backend than the model");
  }
  return cache.MoveSlot(from, to, len);
}

absl::Status GptModel::RowSplitResidual(const Tensor& rows, const kernels::Weight& w,
                                        const Buffer& bias, const Tensor& x) {
  if (spec_.tp_size == 1) return backend_.Linear(rows, w, OrNull(bias), RowSplitEpilogue(), x);
  const Tensor partial = act_.partial.Rows(0, x.rows);
  FLOVER_RETURN_IF_ERROR(backend_.Linear(rows, w, OrNull(bias), RowSplitEpilogue(), partial));
  FLOVER_RETURN_IF_ERROR(collectives_->AllReduceSum(partial));
  return backend_.Add(partial, x);
}

absl::Status GptModel::Run(const ForwardBatch& b, KvCache& cache, LogitsFor which, int* R_out) {
  const int T = b.num_rows(), S = static_cast<int>(b.seqs.size());
  const int R = which == LogitsFor::kLastRowOfEachSequence ? S : T;
  FLOVER_RETURN_IF_ERROR(Reserve(T, R));

  // The step's only upload: tokens, positions and the sequence table.
  step_host_.clear();
  step_host_.insert(step_host_.end(), b.tokens.begin(), b.tokens.end());
  step_host_.insert(step_host_.end(), b.positions.begin(), b.positions.end());
  int max_context = 0;
  for (const kernels::SeqRows& s : b.seqs) {
    step_host_.insert(step_host_.end(), {s.slot, s.pos, s.len, s.row});
    max_context = std::max(max_context, s.pos + s.len);
  }
  const Tensor step = act_.step.tensor().View(0, 1, static_cast<int64_t>(step_host_.size()));
  FLOVER_RETURN_IF_ERROR(backend_.Upload(step_host_.data(), step));
  const Tensor tokens = step.View(0, 1, T), positions = step.View(T, 1, T);
  const kernels::SeqTable seqs{b.seqs.data(), S, step.View(2 * int64_t{T}, S, 4), T, max_context};

  const Tensor x = act_.x.Rows(0, T), h = act_.h.Rows(0, T), qkv = act_.qkv.Rows(0, T),
               attn = act_.attn.Rows(0, T), fc = act_.fc.Rows(0, T);
  // x: [T, C] is the residual stream, replicated on every rank.
  FLOVER_RETURN_IF_ERROR(
      backend_.Embed(tokens, positions, wte_, shard_.vocab_begin, OrNull(wpe_), x));
  if (spec_.tp_size > 1) FLOVER_RETURN_IF_ERROR(collectives_->AllReduceSum(x));
  const float eps = config_.layer_norm_epsilon;
  for (int l = 0; l < config_.n_layer; ++l) {
    const LayerParams& p = layers_[l];
    FLOVER_RETURN_IF_ERROR(backend_.LayerNorm(x, p.ln_1_g, p.ln_1_b, eps, h));
    FLOVER_RETURN_IF_ERROR(backend_.Linear(h, *p.attn, OrNull(p.attn_b), Epilogue::kBias, qkv));
    FLOVER_RETURN_IF_ERROR(backend_.Attention(qkv, seqs, cache.layer(l), attn));
    FLOVER_RETURN_IF_ERROR(RowSplitResidual(attn, *p.attn_proj, p.attn_proj_b, x));
    FLOVER_RETURN_IF_ERROR(backend_.LayerNorm(x, p.ln_2_g, p.ln_2_b, eps, h));
    FLOVER_RETURN_IF_ERROR(backend_.Linear(h, *p.fc, OrNull(p.fc_b), Epilogue::kBiasGelu, fc));
    FLOVER_RETURN_IF_ERROR(RowSplitResidual(fc, *p.mlp_proj, p.mlp_proj_b, x));
  }

  // Final layernorm and LM head only on the rows whose logits are wanted.
  Tensor rows = x;
  if (which == LogitsFor::kLastRowOfEachSequence) {
    rows = act_.last.Rows(0, S);
    FLOVER_RETURN_IF_ERROR(backend_.GatherLastRows(x, seqs, rows));
  }
  const Tensor hr = act_.h.Rows(0, R);
  FLOVER_RETURN_IF_ERROR(backend_.LayerNorm(rows, ln_f_g_, ln_f_b_, eps, hr));
  FLOVER_RETURN_IF_ERROR(
      backend_.Linear(hr, *lm_head_, nullptr, Epilogue::kBias, act_.logits.Rows(0, R)));
  *R_out = R;
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<float>> GptModel::HostLogits(int R) {
  const Tensor local = act_.logits.Rows(0, R);
  const int V = config_.vocab_size;
  if (spec_.tp_size == 1) {
    if (void* host = backend_.HostAddress(local); host != nullptr) {
      return absl::MakeSpan(static_cast<float*>(host), local.elements());
    }
    logits_host_.resize(local.elements());
    FLOVER_RETURN_IF_ERROR(backend_.Download(local, logits_host_.data()));
    return absl::MakeSpan(logits_host_);
  }
  // Each rank scores its vocabulary range; rank 0 stitches the columns.
  FLOVER_RETURN_IF_ERROR(collectives_->GatherToLeader(local, &gathered_));
  if (!collectives_->world().is_leader()) return absl::Span<float>();
  logits_host_.resize(size_t(R) * V);
  size_t offset = 0;
  for (int r = 0; r < spec_.tp_size; ++r) {
    const ShardShape other = ShapeOf(config_, {spec_.tp_size, r});
    const int n = other.vocab_end - other.vocab_begin;
    for (int row = 0; row < R; ++row) {
      std::memcpy(&logits_host_[size_t(row) * V + other.vocab_begin],
                  &gathered_[offset + size_t(row) * n], n * sizeof(float));
    }
    offset += size_t(R) * n;
  }
  return absl::MakeSpan(logits_host_);
}

absl::StatusOr<absl::Span<float>> GptModel::Forward(const ForwardBatch& b, KvCache& cache,
                                                    LogitsFor which) {
  FLOVER_RETURN_IF_ERROR(Validate(b, cache));
  int R = 0;
  absl::Status st = Run(b, cache, which, &R);
  // Whatever happened, wait for the device and report its own errors first:
  // a fault inside a kernel explains a failed op better than the op does.
  if (absl::Status sync = backend_.Synchronize(); !sync.ok()) return sync;
  if (!st.ok()) return st;
  return HostLogits(R);
}

}  // namespace flover
