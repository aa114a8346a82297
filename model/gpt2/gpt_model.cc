#include "model/gpt2/gpt_model.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/status_macros.h"
#include "model/weight_upload.h"

namespace flover {

using kernels::Buffer;
using KDType = kernels::DType;
using kernels::Epilogue;
using kernels::Tensor;

GptModel::GptModel(const GptConfig& config, kernels::Backend& backend, Collectives* collectives)
    : config_(config),
      info_(InfoOf(config)),
      backend_(backend),
      spec_(SpecOf(collectives)),
      shard_(ShapeOf(config, spec_)),
      runtime_(
          backend, collectives, config.vocab_size, config.n_positions, config.n_embd,
          [this](int T, int R) {
            const int C = config_.n_embd, CL = shard_.heads * config_.head_dim(),
                      FL = shard_.inner, VL = shard_.vocab_end - shard_.vocab_begin;
            const KDType act = backend_.activation_dtype(), f32 = KDType::kF32;
            std::vector<ForwardRuntime::BufferSpec> b(kLogits + 1);
            b[kX] = {f32, T, C};
            b[kH] = {act, std::max(T, R), C};
            b[kQkv] = {f32, T, 3 * CL};
            b[kAttn] = {act, T, CL};
            b[kFc] = {act, T, FL};
            b[kLast] = {f32, R, C};
            b[kLogits] = {f32, std::max(T, R), VL};
            return b;
          },
          [this](int rank) {
            const ShardShape s = ShapeOf(config_, {spec_.tp_size, rank});
            return std::pair{s.vocab_begin, s.vocab_end};
          }) {}

absl::StatusOr<std::unique_ptr<GptModel>> GptModel::Create(const GptConfig& config,
                                                           const WeightSource& source,
                                                           kernels::Backend& backend,
                                                           Collectives* collectives) {
  FLOVER_RETURN_IF_ERROR(config.Validate());
  const ShardSpec spec = SpecOf(collectives);
  std::unique_ptr<GptModel> model(new GptModel(config, backend, collectives));
  for (int l = 0; l <= config.n_layer; ++l) {
    // Layer by layer, then wpe, the final layernorm, the head and wte.
    const bool globals = l == config.n_layer;
    const WeightPart part = globals ? WeightPart{0, 0, true, false} : WeightPart{l, l + 1, false};
    auto weights = LoadGptWeights(source, config, spec, part);
    if (!weights.ok()) return weights.status();
    FLOVER_RETURN_IF_ERROR(model->Upload(*weights, source, globals));
  }
  return model;
}

absl::Status GptModel::Upload(GptWeights& w, const WeightSource& source, bool globals) {
  using kernels::WeightLayout;
  const int C = config_.n_embd, CL = shard_.heads * config_.head_dim(), FL = shard_.inner;
  const int VL = shard_.vocab_end - shard_.vocab_begin;
  if (layers_.size() + w.layers.size() > static_cast<size_t>(config_.n_layer)) {
    return absl::InvalidArgumentError(absl::StrCat("more than the config's ", config_.n_layer,
                                                   " layers uploaded"));
  }
  // Each host tensor is released once it is on the backend, so the host
  // copy shrinks as the backend's grows.
  auto upload = [&](std::vector<float>& host, int64_t rows, int64_t cols, Buffer* out) {
    return UploadF32Releasing(backend_, host, rows, cols, out);
  };
  auto prepare = [&](StoredValues& host, int K, int N, WeightLayout layout,
                     std::unique_ptr<kernels::Weight>* out) {
    return PrepareMatrixReleasing(backend_, host, K, N, layout, out);
  };
  for (LayerWeights& l : w.layers) {
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
  if (!globals) return absl::OkStatus();
  if (static_cast<int>(layers_.size()) != config_.n_layer) {
    return absl::InternalError("the globals must come after every layer");
  }
  // The LM head is [V_local, C]: lm_head when untied, else wte itself (this
  // rank's vocabulary rows, as stored), which also stays as the embedding
  // table (float32, put on the backend a block of rows at a time).
  const WeightRecipe wte = GptEmbeddingRecipe(config_, spec_);
  if (w.lm_head.empty()) {
    auto rows = ReadRecipeStored(source, wte);
    if (!rows.ok()) return rows.status();
    FLOVER_RETURN_IF_ERROR(prepare(*rows, C, VL, WeightLayout::kOutIn, &lm_head_));
  } else {
    FLOVER_RETURN_IF_ERROR(prepare(w.lm_head, C, VL, WeightLayout::kOutIn, &lm_head_));
  }
  auto table = UploadRowsF32(backend_, source, wte, C);
  if (!table.ok()) return table.status();
  wte_ = std::move(*table);
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

KvCacheShape GptModel::CacheShape(int num_blocks, int max_seq) const {
  KvCacheShape shape;
  shape.layers = config_.n_layer;
  shape.heads = shard_.heads;
  shape.head_dim = config_.head_dim();
  shape.dtype = backend_.kv_dtype();
  shape.num_blocks = num_blocks;
  shape.max_seq = max_seq;
  return shape;
}

absl::Status GptModel::PrepareForBatches(int max_rows, int max_logit_rows) {
  if (max_rows < 1 || max_logit_rows < 1) {
    return absl::InvalidArgumentError("PrepareForBatches: row counts must be >= 1");
  }
  const int T = max_rows, R = max_logit_rows;
  // Every layer has the same shapes, so layer 0's weights stand for all
  // (backends cache per shape); the calls mirror Run's.
  const LayerParams& p = layers_[0];
  const Epilogue row_split = runtime_.row_split_epilogue();
  FLOVER_RETURN_IF_ERROR(backend_.PrepareLinear(*p.attn, T, !p.attn_b.empty(), Epilogue::kBias));
  FLOVER_RETURN_IF_ERROR(backend_.PrepareLinear(*p.attn_proj, T, !p.attn_proj_b.empty(), row_split));
  FLOVER_RETURN_IF_ERROR(backend_.PrepareLinear(*p.fc, T, !p.fc_b.empty(), Epilogue::kBiasGelu));
  FLOVER_RETURN_IF_ERROR(backend_.PrepareLinear(*p.mlp_proj, T, !p.mlp_proj_b.empty(), row_split));
  FLOVER_RETURN_IF_ERROR(backend_.PrepareLinear(*lm_head_, std::max(T, R), false, Epilogue::kBias));
  return runtime_.Reserve(T, R);
}

absl::Status GptModel::Run(const ForwardBatch& b, KvCache& cache, LogitsFor which, int* R_out) {
  const int T = b.num_rows(), S = static_cast<int>(b.seqs.size());
  const int R = which == LogitsFor::kLastRowOfEachSequence ? S : T;
  FLOVER_RETURN_IF_ERROR(runtime_.Reserve(T, R));
  auto step = runtime_.UploadStep(b);
  if (!step.ok()) return step.status();
  *R_out = R;
  // Everything after the upload: replayed from a recording for decode steps
  // where the backend records (ForwardRuntime::RunOps).
  return runtime_.RunOps(&*step, cache, static_cast<int>(which), [&]() -> absl::Status {
    const kernels::SeqTable& seqs = step->seqs;
    auto buf = [&](Activation id, int rows) { return runtime_.buffer(id).Rows(0, rows); };
    const Tensor x = buf(kX, T), h = buf(kH, T), qkv = buf(kQkv, T), attn = buf(kAttn, T),
                 fc = buf(kFc, T);

    // x: [T, C] is the residual stream, replicated on every rank.
    FLOVER_RETURN_IF_ERROR(
        backend_.Embed(step->tokens, step->positions, wte_, shard_.vocab_begin, OrNull(wpe_), x));
    FLOVER_RETURN_IF_ERROR(runtime_.AllReduce(x));
    const float eps = config_.layer_norm_epsilon;
    for (int l = 0; l < config_.n_layer; ++l) {
      const LayerParams& p = layers_[l];
      FLOVER_RETURN_IF_ERROR(backend_.LayerNorm(x, p.ln_1_g, p.ln_1_b, eps, h));
      FLOVER_RETURN_IF_ERROR(backend_.Linear(h, *p.attn, OrNull(p.attn_b), Epilogue::kBias, qkv));
      FLOVER_RETURN_IF_ERROR(backend_.AppendKv(qkv, seqs, cache.layer(l)));
      FLOVER_RETURN_IF_ERROR(backend_.Attention(qkv, seqs, cache.layer(l), {}, attn));
      FLOVER_RETURN_IF_ERROR(runtime_.RowSplitResidual(attn, *p.attn_proj, OrNull(p.attn_proj_b), x));
      FLOVER_RETURN_IF_ERROR(backend_.LayerNorm(x, p.ln_2_g, p.ln_2_b, eps, h));
      FLOVER_RETURN_IF_ERROR(backend_.Linear(h, *p.fc, OrNull(p.fc_b), Epilogue::kBiasGelu, fc));
      FLOVER_RETURN_IF_ERROR(runtime_.RowSplitResidual(fc, *p.mlp_proj, OrNull(p.mlp_proj_b), x));
    }

    // Final layernorm and LM head only on the rows whose logits are wanted.
    Tensor rows = x;
    if (which == LogitsFor::kLastRowOfEachSequence) {
      rows = buf(kLast, S);
      FLOVER_RETURN_IF_ERROR(backend_.GatherLastRows(x, seqs, rows));
    }
    const Tensor hr = buf(kH, R);
    FLOVER_RETURN_IF_ERROR(backend_.LayerNorm(rows, ln_f_g_, ln_f_b_, eps, hr));
    FLOVER_RETURN_IF_ERROR(backend_.Linear(hr, *lm_head_, nullptr, Epilogue::kBias, buf(kLogits, R)));
    return absl::OkStatus();
  });
}

absl::StatusOr<absl::Span<float>> GptModel::Forward(const ForwardBatch& b, KvCache& cache,
                                                    LogitsFor which) {
  FLOVER_RETURN_IF_ERROR(runtime_.CheckBatch(b, cache, CacheShape(1, 1)));
  int R = 0;
  const absl::Status run = Run(b, cache, which, &R);
  return runtime_.Finish(run, runtime_.buffer(kLogits), R);
}

}  // namespace flover
