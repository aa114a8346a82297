#include "model/llama/llama_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"
#include "model/weight_upload.h"

namespace flover {

using KDType = kernels::DType;
using kernels::Epilogue;
using kernels::Tensor;
using kernels::WeightLayout;

LlamaModel::LlamaModel(const LlamaConfig& config, kernels::Backend& backend,
                       Collectives* collectives)
    : config_(config),
      info_(InfoOf(config)),
      backend_(backend),
      spec_(SpecOf(collectives)),
      shard_(LlamaShapeOf(config, spec_)),
      runtime_(
          backend, collectives, config.vocab_size, config.max_positions, config.hidden,
          [this](int T, int R) {
            const int C = config_.hidden, D = config_.head_dim,
                      W = (shard_.q_heads + 2 * shard_.kv_heads) * D, FL = shard_.inner,
                      VL = shard_.vocab_end - shard_.vocab_begin;
            const KDType act = backend_.activation_dtype(), f32 = KDType::kF32;
            std::vector<ForwardRuntime::BufferSpec> b(kLogits + 1);
            b[kX] = {f32, T, C};
            b[kH] = {act, std::max(T, R), C};
            b[kQkv] = {f32, T, W};
            b[kAttn] = {act, T, shard_.q_heads * D};
            b[kGateUp] = {f32, T, 2 * FL};
            b[kMlp] = {act, T, FL};
            b[kLast] = {f32, R, C};
            b[kLogits] = {f32, std::max(T, R), VL};
            return b;
          },
          [this](int rank) { return VocabRange(config_.vocab_size, {spec_.tp_size, rank}); }) {}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(const LlamaConfig& config,
                                                               const WeightSource& source,
                                                               kernels::Backend& backend,
                                                               Collectives* collectives) {
  FLOVER_RETURN_IF_ERROR(config.Validate());
  const ShardSpec spec = SpecOf(collectives);
  FLOVER_RETURN_IF_ERROR(ValidateLlamaShard(config, spec));
  std::unique_ptr<LlamaModel> model(new LlamaModel(config, backend, collectives));
  for (int l = 0; l <= config.n_layer; ++l) {
    // Layer by layer, then the final norm, head and embedding.
    const bool globals = l == config.n_layer;
    const WeightPart part = globals ? WeightPart{0, 0, true, false} : WeightPart{l, l + 1, false};
    auto weights = LoadLlamaWeights(source, config, spec, part);
    if (!weights.ok()) return weights.status();
    FLOVER_RETURN_IF_ERROR(model->Upload(*weights, source, globals));
  }
  return model;
}

absl::Status LlamaModel::Upload(LlamaWeights& w, const WeightSource& source, bool globals) {
  const int C = config_.hidden, D = config_.head_dim, QL = shard_.q_heads * D,
            W = (shard_.q_heads + 2 * shard_.kv_heads) * D, FL = shard_.inner,
            VL = shard_.vocab_end - shard_.vocab_begin;
  if (layers_.size() + w.layers.size() > static_cast<size_t>(config_.n_layer)) {
    return absl::InvalidArgumentError(absl::StrCat("more than the config's ", config_.n_layer,
                                                   " layers uploaded"));
  }
  // Each host tensor is released once it is on the backend, so the host
  // copy shrinks as the backend's grows.
  auto upload = [&](std::vector<float>& host, int64_t rows, int64_t cols, kernels::Buffer* out) {
    FLOVER_RETURN_IF_ERROR(UploadF32Releasing(backend_, host, rows, cols, out));
    if (out->empty()) return absl::InternalError("a Llama norm has no weights");
    return absl::OkStatus();
  };
  // nn.Linear weights are [out, in]: K = in, N = out.
  auto prepare = [&](StoredValues& host, int K, int N, std::unique_ptr<kernels::Weight>* out) {
    return PrepareMatrixReleasing(backend_, host, K, N, WeightLayout::kOutIn, out);
  };
  for (LlamaLayerWeights& l : w.layers) {
    LayerParams p;
    FLOVER_RETURN_IF_ERROR(upload(l.attn_norm, 1, C, &p.attn_norm));
    FLOVER_RETURN_IF_ERROR(upload(l.mlp_norm, 1, C, &p.mlp_norm));
    if (!l.qkv_bias.empty()) {
      FLOVER_RETURN_IF_ERROR(UploadF32Releasing(backend_, l.qkv_bias, 1, W, &p.qkv_b));
    }
    FLOVER_RETURN_IF_ERROR(prepare(l.qkv, C, W, &p.qkv));
    FLOVER_RETURN_IF_ERROR(prepare(l.o, QL, C, &p.o));
    FLOVER_RETURN_IF_ERROR(prepare(l.gate_up, C, 2 * FL, &p.gate_up));
    FLOVER_RETURN_IF_ERROR(prepare(l.down, FL, C, &p.down));
    layers_.push_back(std::move(p));
  }
  if (!globals) return absl::OkStatus();
  if (static_cast<int>(layers_.size()) != config_.n_layer) {
    return absl::InternalError("the globals must come after every layer");
  }
  const WeightRecipe embed = LlamaEmbeddingRecipe(config_, spec_);
  if (w.lm_head.empty()) {  // tied: the embedding's rows, as stored, are the head too
    auto rows = ReadRecipeStored(source, embed);
    if (!rows.ok()) return rows.status();
    FLOVER_RETURN_IF_ERROR(prepare(*rows, C, VL, &lm_head_));
  } else {
    FLOVER_RETURN_IF_ERROR(prepare(w.lm_head, C, VL, &lm_head_));
  }
  auto table = UploadRowsF32(backend_, source, embed, C);
  if (!table.ok()) return table.status();
  embed_ = std::move(*table);
  FLOVER_RETURN_IF_ERROR(upload(w.norm, 1, C, &norm_));
  std::vector<float> inv_freq = RopeInvFreq(config_);
  FLOVER_RETURN_IF_ERROR(upload(inv_freq, 1, D / 2, &inv_freq_));
  return absl::OkStatus();
}

KvCacheShape LlamaModel::CacheShape(int num_blocks, int max_seq) const {
  KvCacheShape shape;
  shape.layers = config_.n_layer;
  shape.heads = shard_.kv_heads;
  shape.head_dim = config_.head_dim;
  shape.dtype = backend_.kv_dtype();
  shape.num_blocks = num_blocks;
  shape.max_seq = max_seq;
  return shape;
}

absl::Status LlamaModel::PrepareForBatches(int max_rows, int max_logit_rows) {
  if (max_rows < 1 || max_logit_rows < 1) {
    return absl::InvalidArgumentError("PrepareForBatches: row counts must be >= 1");
  }
  const int T = max_rows, R = max_logit_rows;
  // Every layer has the same shapes: layer 0's weights stand for all.
  const LayerParams& p = layers_[0];
  const Epilogue row_split = runtime_.row_split_epilogue();
  FLOVER_RETURN_IF_ERROR(backend_.PrepareLinear(*p.qkv, T, !p.qkv_b.empty(), Epilogue::kBias));
  FLOVER_RETURN_IF_ERROR(backend_.PrepareLinear(*p.o, T, false, row_split));
  FLOVER_RETURN_IF_ERROR(backend_.PrepareLinear(*p.gate_up, T, false, Epilogue::kBias));
  FLOVER_RETURN_IF_ERROR(backend_.PrepareLinear(*p.down, T, false, row_split));
  FLOVER_RETURN_IF_ERROR(backend_.PrepareLinear(*lm_head_, std::max(T, R), false, Epilogue::kBias));
  return runtime_.Reserve(T, R);
}

absl::Status LlamaModel::Run(const ForwardBatch& b, KvCache& cache, LogitsFor which, int* R_out) {
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
                 gate_up = buf(kGateUp, T), mlp = buf(kMlp, T);

    FLOVER_RETURN_IF_ERROR(
        backend_.Embed(step->tokens, step->positions, embed_, shard_.vocab_begin, nullptr, x));
    FLOVER_RETURN_IF_ERROR(runtime_.AllReduce(x));
    const float eps = config_.rms_norm_eps;
    const kernels::RopeParams rope{shard_.q_heads, shard_.kv_heads, config_.head_dim};
    kernels::AttentionParams attention;
    attention.window = config_.sliding_window;
    for (int l = 0; l < config_.n_layer; ++l) {
      const LayerParams& p = layers_[l];
      FLOVER_RETURN_IF_ERROR(backend_.RmsNorm(x, p.attn_norm, eps, h));
      FLOVER_RETURN_IF_ERROR(backend_.Linear(h, *p.qkv, OrNull(p.qkv_b), Epilogue::kBias, qkv));
      FLOVER_RETURN_IF_ERROR(backend_.Rope(qkv, step->positions, inv_freq_, rope));
      FLOVER_RETURN_IF_ERROR(backend_.AppendKv(qkv, seqs, cache.layer(l)));
      FLOVER_RETURN_IF_ERROR(backend_.Attention(qkv, seqs, cache.layer(l), attention, attn));
      FLOVER_RETURN_IF_ERROR(runtime_.RowSplitResidual(attn, *p.o, nullptr, x));
      FLOVER_RETURN_IF_ERROR(backend_.RmsNorm(x, p.mlp_norm, eps, h));
      FLOVER_RETURN_IF_ERROR(backend_.Linear(h, *p.gate_up, nullptr, Epilogue::kBias, gate_up));
      FLOVER_RETURN_IF_ERROR(backend_.Glu(gate_up, kernels::GluKind::kSilu, mlp));
      FLOVER_RETURN_IF_ERROR(runtime_.RowSplitResidual(mlp, *p.down, nullptr, x));
    }

    // Final norm and LM head only on the rows whose logits are wanted.
    Tensor rows = x;
    if (which == LogitsFor::kLastRowOfEachSequence) {
      rows = buf(kLast, S);
      FLOVER_RETURN_IF_ERROR(backend_.GatherLastRows(x, seqs, rows));
    }
    const Tensor hr = buf(kH, R);
    FLOVER_RETURN_IF_ERROR(backend_.RmsNorm(rows, norm_, eps, hr));
    FLOVER_RETURN_IF_ERROR(backend_.Linear(hr, *lm_head_, nullptr, Epilogue::kBias, buf(kLogits, R)));
    return absl::OkStatus();
  });
}

absl::StatusOr<absl::Span<float>> LlamaModel::Forward(const ForwardBatch& b, KvCache& cache,
                                                      LogitsFor which) {
  FLOVER_RETURN_IF_ERROR(runtime_.CheckBatch(b, cache, CacheShape(1, 1)));
  int R = 0;
  const absl::Status run = Run(b, cache, which, &R);
  return runtime_.Finish(run, runtime_.buffer(kLogits), R);
}

}  // namespace flover
