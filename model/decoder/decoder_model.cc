#include "model/decoder/decoder_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/weight_upload.h"
#include "util/status_macros.h"

namespace flover {

using kernels::Buffer;
using KDType = kernels::DType;
using kernels::Epilogue;
using kernels::Tensor;
using kernels::WeightLayout;
using Block = DecoderSpec::Block;

// The dense MLP: up -> gelu_new (in the epilogue) -> down, or act(gate) * up
// -> down, gate and up one GEMM.
class DecoderModel::DenseMlp final : public DecoderModel::MlpStrategy {
 public:
  DenseMlp(LinearSite up, LinearSite down) : up_(std::move(up)), down_(std::move(down)) {}
  absl::Status Forward(DecoderModel& m, const Tensor& h, const Buffer& post, int T) const override {
    // kUp and kMlp fit the widest MLP of the model (a dense layer's or a
    // shared expert's): this one's width of them.
    const Tensor mlp = m.runtime_.buffer(kMlp).View(0, T, down_.w->k());
    if (m.spec_.mlp == DecoderSpec::Mlp::kGlu) {
      const Tensor up = m.runtime_.buffer(kUp).View(0, T, up_.w->n());
      FLOVER_RETURN_IF_ERROR(m.Apply(up_, h, up));
      FLOVER_RETURN_IF_ERROR(m.backend_.Glu(up, m.spec_.glu, mlp));
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
// rows grouped by expert, one GEMM per expert), act(gate) * up, the down
// GEMMs the same way, then x += the routes' outputs weighted by the router
// (WeightedRowSum). With tensor parallelism each expert's down GEMM is
// row-split: the routes' outputs are summed over ranks before the join. A
// shared expert (its gate/up and down in shared_up/shared_down) adds
// sigmoid(h . shared_gate) times its output the same way.
class DecoderModel::MoeMlp final : public DecoderModel::MlpStrategy {
 public:
  struct Shared {
    LinearSite up, down, gate;
  };
  MoeMlp(LinearSite router, std::vector<LinearSite> up, std::vector<LinearSite> down,
         std::optional<Shared> shared)
      : router_(std::move(router)), up_(std::move(up)), down_(std::move(down)), shared_(std::move(shared)) {
    for (const LinearSite& s : up_) up_w_.push_back(s.w.get());
    for (const LinearSite& s : down_) down_w_.push_back(s.w.get());
  }
  absl::Status Forward(DecoderModel& m, const Tensor& h, const Buffer&, int T) const override {
    const int k = m.spec_.moe.router.k;
    auto buf = [&](Activation id, int rows) { return m.runtime_.buffer(id).Rows(0, rows); };
    const Tensor logits = buf(kRouter, T), ids = buf(kExpertIds, T), weights = buf(kExpertWeights, T);
    const Tensor up = buf(kExpertUp, T * k), act = buf(kExpertAct, T * k), out = buf(kExpertOut, T * k);
    FLOVER_RETURN_IF_ERROR(m.Apply(router_, h, logits));
    FLOVER_RETURN_IF_ERROR(m.backend_.Route(logits, m.spec_.moe.router, ids, weights));
    FLOVER_RETURN_IF_ERROR(m.backend_.LinearById(h, up_w_, ids, up));
    FLOVER_RETURN_IF_ERROR(m.backend_.Glu(up, m.spec_.glu, act));
    FLOVER_RETURN_IF_ERROR(m.backend_.LinearById(act, down_w_, ids, out));
    FLOVER_RETURN_IF_ERROR(m.runtime_.AllReduce(out));
    FLOVER_RETURN_IF_ERROR(m.backend_.WeightedRowSum(out, weights, buf(kX, T)));
    if (!shared_.has_value()) return absl::OkStatus();
    const Tensor gate_up = m.runtime_.buffer(kUp).View(0, T, shared_->up.w->n());
    const Tensor mlp = m.runtime_.buffer(kMlp).View(0, T, shared_->down.w->k());
    const Tensor sout = buf(kSharedOut, T), gate = buf(kSharedGate, T);
    FLOVER_RETURN_IF_ERROR(m.Apply(shared_->up, h, gate_up));
    FLOVER_RETURN_IF_ERROR(m.backend_.Glu(gate_up, m.spec_.glu, mlp));
    FLOVER_RETURN_IF_ERROR(m.Apply(shared_->down, mlp, sout));
    FLOVER_RETURN_IF_ERROR(m.runtime_.AllReduce(sout));
    FLOVER_RETURN_IF_ERROR(m.Apply(shared_->gate, h, gate));
    FLOVER_RETURN_IF_ERROR(m.backend_.Sigmoid(gate));
    return m.backend_.WeightedRowSum(sout, gate, buf(kX, T));
  }
  absl::Status Prepare(kernels::Backend& backend, int T) const override {
    // An expert sees at most T rows: a row's k experts are distinct.
    FLOVER_RETURN_IF_ERROR(backend.PrepareLinear(*router_.w, T, false, router_.epilogue));
    for (const auto* sites : {&up_, &down_}) {
      for (const LinearSite& s : *sites) {
        FLOVER_RETURN_IF_ERROR(backend.PrepareLinear(*s.w, T, false, kernels::Epilogue::kBias));
      }
    }
    if (shared_.has_value()) {
      for (const LinearSite* s : {&shared_->up, &shared_->down, &shared_->gate}) {
        FLOVER_RETURN_IF_ERROR(backend.PrepareLinear(*s->w, T, false, kernels::Epilogue::kBias));
      }
    }
    return absl::OkStatus();
  }

 private:
  LinearSite router_;
  std::vector<LinearSite> up_, down_;
  std::optional<Shared> shared_;
  std::vector<const kernels::Weight*> up_w_, down_w_;
};

DecoderModel::DecoderModel(const DecoderSpec& spec, const ModelInfo& info,
                           kernels::Backend& backend, Collectives* collectives)
    : spec_(spec),
      info_(info),
      backend_(backend),
      shard_spec_(SpecOf(collectives)),
      shard_(DecoderShardOf(spec, shard_spec_)),
      runtime_(
          backend, collectives, spec.vocab_size, spec.max_positions, spec.hidden,
          [this](int T, int R) {
            const int C = spec_.hidden, D = spec_.head_dim,
                      W = (shard_.q_heads + 2 * shard_.kv_heads) * D, FL = shard_.inner,
                      VL = shard_.vocab_end - shard_.vocab_begin;
            const bool glu = spec_.mlp == DecoderSpec::Mlp::kGlu;
            const bool sandwich = spec_.block == Block::kSandwich;
            const KDType act = backend_.activation_dtype(), f32 = KDType::kF32;
            std::vector<ForwardRuntime::BufferSpec> b(kNumActivations);
            b[kX] = {f32, T, C};
            b[kH] = {act, std::max(T, R), C};
            b[kQkv] = {f32, T, W};
            b[kAttn] = {act, T, shard_.q_heads * D};
            // Dense layers' MLP, or a shared expert's.
            const int F = std::max(FL, shard_.shared_inner);
            b[kUp] = glu ? ForwardRuntime::BufferSpec{f32, T, 2 * F}
                         : ForwardRuntime::BufferSpec{f32, 1, 1};
            b[kMlp] = {act, T, F};
            b[kBranch] = sandwich ? ForwardRuntime::BufferSpec{f32, T, C}
                                  : ForwardRuntime::BufferSpec{f32, 1, 1};
            b[kNormed] = b[kBranch];
            b[kLast] = {f32, R, C};
            b[kLogits] = {f32, std::max(T, R), VL};
            const int E = spec_.moe.experts, k = E > 0 ? spec_.moe.router.k : 1,
                      FE = std::max(shard_.expert_inner, 1), TE = E > 0 ? T : 1;
            b[kRouter] = {f32, TE, std::max(E, 1)};
            b[kExpertIds] = {KDType::kI32, TE, k};
            b[kExpertWeights] = {f32, TE, k};
            b[kExpertUp] = {f32, TE * k, 2 * FE};
            b[kExpertAct] = {act, TE * k, FE};
            b[kExpertOut] = {f32, TE * k, E > 0 ? C : 1};
            const bool shared = spec_.moe.shared_intermediate > 0;
            b[kSharedOut] = {f32, shared ? T : 1, shared ? C : 1};
            b[kSharedGate] = {f32, shared ? T : 1, 1};
            return b;
          },
          [this](int rank) { return VocabRange(spec_.vocab_size, {shard_spec_.tp_size, rank}); }) {}

absl::StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::Create(
    const DecoderSpec& spec, const DecoderRecipes& recipes, const ModelInfo& info,
    const WeightSource& source, kernels::Backend& backend, Collectives* collectives) {
  FLOVER_RETURN_IF_ERROR(spec.Validate());
  const ShardSpec shard_spec = SpecOf(collectives);
  FLOVER_RETURN_IF_ERROR(ValidateDecoderShard(spec, shard_spec));
  std::unique_ptr<DecoderModel> model(new DecoderModel(spec, info, backend, collectives));
  // LinearById groups a step's rows by expert on the host, midway.
  if (spec.moe.experts > 0) model->runtime_.DisableRecording();
  const WeightRecipe embed = recipes.embedding(model->shard_);
  for (int l = 0; l <= spec.n_layer; ++l) {
    // Layer by layer, then the globals, then the embedding a block of rows
    // at a time.
    const bool globals = l == spec.n_layer;
    WeightPart part = globals ? WeightPart{0, 0, true, false} : WeightPart{l, l + 1, false};
    part.keep_blocks = backend.matmul_dtype() == kernels::MatmulDtype::kNative;
    auto weights = LoadDecoderWeights(source, spec, recipes, shard_spec, part);
    if (!weights.ok()) return weights.status();
    FLOVER_RETURN_IF_ERROR(model->Upload(*weights, source, embed, globals));
  }
  return model;
}

absl::Status DecoderModel::Upload(DecoderWeights& w, const WeightSource& source,
                                  const WeightRecipe& embed, bool globals) {
  const int C = spec_.hidden, D = spec_.head_dim, QL = shard_.q_heads * D,
            W = (shard_.q_heads + 2 * shard_.kv_heads) * D, FL = shard_.inner,
            VL = shard_.vocab_end - shard_.vocab_begin;
  const bool glu = spec_.mlp == DecoderSpec::Mlp::kGlu;
  const bool layer_norm = spec_.norm == DecoderSpec::Norm::kLayerNorm;
  if (layers_.size() + w.layers.size() > static_cast<size_t>(spec_.n_layer)) {
    return absl::InvalidArgumentError(absl::StrCat("more than the model's ", spec_.n_layer,
                                                   " layers uploaded"));
  }
  // Each host tensor is released once it is on the backend, so the host
  // copy shrinks as the backend's grows.
  auto upload = [&](std::vector<float>& host, int64_t rows, int64_t cols, Buffer* out) {
    return UploadF32Releasing(backend_, host, rows, cols, out);
  };
  auto norm = [&](std::vector<float>& g, std::vector<float>& b, Buffer* g_out,
                  Buffer* b_out) -> absl::Status {
    FLOVER_RETURN_IF_ERROR(upload(g, 1, C, g_out));
    if (layer_norm) FLOVER_RETURN_IF_ERROR(upload(b, 1, C, b_out));
    if (g_out->empty() || (layer_norm && b_out->empty())) {
      return absl::InvalidArgumentError("a norm of the model has no weights");
    }
    return absl::OkStatus();
  };
  auto site = [&](StoredValues& host, std::vector<float>& bias, int K, int N, WeightLayout layout,
                  Epilogue epilogue, LinearSite* out) -> absl::Status {
    FLOVER_RETURN_IF_ERROR(PrepareMatrixReleasing(backend_, host, K, N, layout, &out->w));
    FLOVER_RETURN_IF_ERROR(upload(bias, 1, N, &out->bias));
    out->epilogue = epilogue;
    return absl::OkStatus();
  };
  // Row-split GEMMs add into the residual stream in their epilogue (one
  // rank), unless a norm comes between (kSandwich).
  const Epilogue into_x =
      spec_.block == Block::kSandwich ? Epilogue::kBias : runtime_.row_split_epilogue();
  const WeightLayout layout = spec_.layout;
  for (DecoderLayerWeights& l : w.layers) {
    LayerParams p;
    std::vector<float> none;  // the post-norms are RMSNorms (Validate): no bias
    Buffer no_bias;
    FLOVER_RETURN_IF_ERROR(norm(l.norm1, l.norm1_b, &p.norm1, &p.norm1_b));
    if (spec_.block != Block::kParallel) {
      FLOVER_RETURN_IF_ERROR(norm(l.norm2, l.norm2_b, &p.norm2, &p.norm2_b));
    }
    if (spec_.block == Block::kSandwich) {
      FLOVER_RETURN_IF_ERROR(norm(l.post_attn_norm, none, &p.post_attn_norm, &no_bias));
      FLOVER_RETURN_IF_ERROR(norm(l.post_mlp_norm, none, &p.post_mlp_norm, &no_bias));
    }
    if (spec_.qk_norm) {  // per head: [D]; whole (one rank): [Hq * D] and [Hkv * D]
      const int qn = spec_.qk_norm_whole ? QL : D, kn = spec_.qk_norm_whole ? shard_.kv_heads * D : D;
      if (static_cast<int>(l.q_norm.size()) != qn || static_cast<int>(l.k_norm.size()) != kn) {
        return absl::InvalidArgumentError(absl::StrCat("the model's Q/K norms need weights of ", qn, " and ",
                                                       kn, " values"));
      }
      FLOVER_RETURN_IF_ERROR(upload(l.q_norm, 1, qn, &p.q_norm));
      FLOVER_RETURN_IF_ERROR(upload(l.k_norm, 1, kn, &p.k_norm));
    }
    FLOVER_RETURN_IF_ERROR(site(l.qkv, l.qkv_b, C, W, layout, Epilogue::kBias, &p.qkv));
    FLOVER_RETURN_IF_ERROR(site(l.o, l.o_b, QL, C, layout, into_x, &p.o));
    if (spec_.moe.sparse(static_cast<int>(layers_.size()))) {
      const int E = spec_.moe.experts, FE = shard_.expert_inner;
      if (static_cast<int>(l.expert_up.size()) != E || static_cast<int>(l.expert_down.size()) != E) {
        return absl::InvalidArgumentError(absl::StrCat("a mixture-of-experts layer with ", l.expert_up.size(),
                                                       " experts' weights for ", E, " experts"));
      }
      std::vector<float> none_b;
      LinearSite router;
      FLOVER_RETURN_IF_ERROR(site(l.router, none_b, C, E, layout, Epilogue::kBias, &router));
      std::vector<LinearSite> up(E), down(E);
      for (int e = 0; e < E; ++e) {
        FLOVER_RETURN_IF_ERROR(site(l.expert_up[e], none_b, C, 2 * FE, layout, Epilogue::kBias, &up[e]));
        FLOVER_RETURN_IF_ERROR(site(l.expert_down[e], none_b, FE, C, layout, Epilogue::kBias, &down[e]));
      }
      std::optional<MoeMlp::Shared> shared;
      if (spec_.moe.shared_intermediate > 0) {
        const int FS = shard_.shared_inner;
        shared.emplace();
        FLOVER_RETURN_IF_ERROR(site(l.up, none_b, C, 2 * FS, layout, Epilogue::kBias, &shared->up));
        FLOVER_RETURN_IF_ERROR(site(l.down, none_b, FS, C, layout, Epilogue::kBias, &shared->down));
        FLOVER_RETURN_IF_ERROR(site(l.shared_gate, none_b, C, 1, layout, Epilogue::kBias, &shared->gate));
      }
      p.mlp = std::make_unique<MoeMlp>(std::move(router), std::move(up), std::move(down), std::move(shared));
    } else {
      LinearSite up, down;
      FLOVER_RETURN_IF_ERROR(site(l.up, l.up_b, C, glu ? 2 * FL : FL, layout,
                                  glu ? Epilogue::kBias : Epilogue::kBiasGelu, &up));
      FLOVER_RETURN_IF_ERROR(site(l.down, l.down_b, FL, C, layout, into_x, &down));
      p.mlp = std::make_unique<DenseMlp>(std::move(up), std::move(down));
    }
    layers_.push_back(std::move(p));
  }
  if (!globals) return absl::OkStatus();
  if (static_cast<int>(layers_.size()) != spec_.n_layer) {
    return absl::InternalError("the globals must come after every layer");
  }
  const bool native = backend_.matmul_dtype() == kernels::MatmulDtype::kNative;
  // Native: the embedding as the file stores it, when it is blocks of one
  // format, is kept so on the backend (the file's bytes instead of 4 per
  // value; EmbedBlocks dequantizes the rows a step looks up, exactly as the
  // f32 table would hold them).
  auto keep_embed_blocks = [&](const StoredValues& rows) -> absl::Status {
    if (!rows.is_blocks() || rows.spans.size() != 1) return absl::OkStatus();
    const kernels::BlockFormat format = rows.spans[0].format;
    const int64_t count = static_cast<int64_t>(rows.blocks.size()) / kernels::BlockRowBytes(format, C);
    auto table = backend_.PrepareBlockRows(format, rows.blocks.data(), count, C);
    if (!table.ok()) return table.status();
    embed_rows_ = std::move(*table);
    return absl::OkStatus();
  };
  // The head: lm_head when the checkpoint has one, else the embedding's
  // rows as stored (tied), read once for both uses.
  const bool tied = w.lm_head.empty();
  if (tied) {
    auto rows = ReadRecipeStored(source, embed, /*keep_blocks=*/native);
    if (!rows.ok()) return rows.status();
    w.lm_head = std::move(*rows);
    if (native) FLOVER_RETURN_IF_ERROR(keep_embed_blocks(w.lm_head));
  }
  FLOVER_RETURN_IF_ERROR(site(w.lm_head, w.lm_head_b, C, VL, WeightLayout::kOutIn,
                              Epilogue::kBias, &head_));
  if (native && !tied) {
    auto rows = ReadRecipeStored(source, embed, /*keep_blocks=*/true);
    if (!rows.ok()) return rows.status();
    FLOVER_RETURN_IF_ERROR(keep_embed_blocks(*rows));
  }
  if (embed_rows_ == nullptr) {
    auto table = UploadRowsF32(backend_, source, embed, C, spec_.embed_scale);
    if (!table.ok()) return table.status();
    embed_ = std::move(*table);
  }
  if (spec_.position_table && shard_.adds_replicated_bias) {
    FLOVER_RETURN_IF_ERROR(upload(w.position_table, spec_.max_positions, C, &positions_));
    if (positions_.empty()) return absl::InvalidArgumentError("the model has no position table");
  }
  FLOVER_RETURN_IF_ERROR(norm(w.norm, w.norm_b, &norm_, &norm_b_));
  if (!spec_.inv_freq.empty()) {
    std::vector<float> inv_freq = spec_.inv_freq;
    FLOVER_RETURN_IF_ERROR(upload(inv_freq, 1, static_cast<int64_t>(inv_freq.size()), &inv_freq_));
  }
  if (!spec_.local_rope.empty()) {
    std::vector<float> local = spec_.inv_freq_local;
    FLOVER_RETURN_IF_ERROR(upload(local, 1, static_cast<int64_t>(local.size()), &inv_freq_local_));
  }
  return absl::OkStatus();
}

KvCacheShape DecoderModel::CacheShape(int num_blocks, int max_seq) const {
  KvCacheShape shape;
  shape.layers = spec_.n_layer;
  shape.heads = shard_.kv_heads;
  shape.head_dim = spec_.head_dim;
  shape.dtype = backend_.kv_dtype();
  shape.num_blocks = num_blocks;
  shape.max_seq = max_seq;
  shape.window = spec_.KvWindow();
  // Local layers of one window beside global ones (Gemma 2 and 3) may keep
  // blocks of their own (the engine's choice: local_blocks).
  if (shape.window == 0) {
    for (const kernels::AttentionParams& a : spec_.attention) {
      if (a.window > 0 && shape.local_window > 0 && a.window != shape.local_window) {
        shape.local_layers.clear();
        shape.local_window = 0;
        break;
      }
      shape.local_layers.push_back(a.window > 0);
      if (a.window > 0) shape.local_window = a.window;
    }
    if (shape.local_window == 0) shape.local_layers.clear();
  }
  return shape;
}

absl::Status DecoderModel::PrepareForBatches(int max_rows, int max_logit_rows) {
  if (max_rows < 1 || max_logit_rows < 1) {
    return absl::InvalidArgumentError("PrepareForBatches: row counts must be >= 1");
  }
  const int T = max_rows, R = max_logit_rows;
  auto prepare = [&](const LinearSite& s, int rows) {
    return backend_.PrepareLinear(*s.w, rows, !s.bias.empty(), s.epilogue);
  };
  // Every layer's attention sites have the same shapes and epilogues:
  // layer 0's stand for all (backends cache per shape). MLPs may differ by
  // layer (dense and mixture-of-experts layers in one model).
  const LayerParams& p = layers_[0];
  for (const LinearSite* s : {&p.qkv, &p.o}) FLOVER_RETURN_IF_ERROR(prepare(*s, T));
  for (const LayerParams& l : layers_) FLOVER_RETURN_IF_ERROR(l.mlp->Prepare(backend_, T));
  FLOVER_RETURN_IF_ERROR(prepare(head_, std::max(T, R)));
  return runtime_.Reserve(T, R);
}

absl::Status DecoderModel::Norm(const Tensor& x, const Buffer& g, const Buffer& b,
                                const Tensor& out) {
  if (spec_.norm == DecoderSpec::Norm::kLayerNorm) {
    return backend_.LayerNorm(x, g.tensor(), b.tensor(), spec_.norm_eps, out);
  }
  return backend_.RmsNorm(x, g.tensor(), spec_.norm_eps, out);
}

absl::Status DecoderModel::Apply(const LinearSite& s, const Tensor& in, const Tensor& out) {
  return backend_.Linear(in, *s.w, OrNull(s.bias), s.epilogue, out);
}

absl::Status DecoderModel::Residual(const LinearSite& s, const Tensor& in, const Buffer& post,
                                    int T) {
  const Tensor x = runtime_.buffer(kX).Rows(0, T);
  if (spec_.block != Block::kSandwich) return runtime_.RowSplitResidual(in, *s.w, OrNull(s.bias), x);
  const Tensor branch = runtime_.buffer(kBranch).Rows(0, T);
  const Tensor normed = runtime_.buffer(kNormed).Rows(0, T);
  FLOVER_RETURN_IF_ERROR(Apply(s, in, branch));
  FLOVER_RETURN_IF_ERROR(runtime_.AllReduce(branch));
  FLOVER_RETURN_IF_ERROR(backend_.RmsNorm(branch, post.tensor(), spec_.norm_eps, normed));
  return backend_.Add(normed, x);
}

absl::Status DecoderModel::Run(const ForwardBatch& b, KvCache& cache, LogitsFor which,
                               int* R_out) {
  const int T = b.num_rows();
  const int R = which == LogitsFor::kLastRowsOfEachSequence ? b.num_logit_rows() : T;
  FLOVER_RETURN_IF_ERROR(runtime_.Reserve(T, R));
  auto step = runtime_.UploadStep(b);
  if (!step.ok()) return step.status();
  *R_out = R;
  // Everything after the upload: replayed from a recording for decode steps
  // where the backend records (ForwardRuntime::RunOps).
  return runtime_.RunOps(&*step, cache, static_cast<int>(which), [&]() -> absl::Status {
    const kernels::SeqTable& seqs = step->seqs;
    auto buf = [&](Activation id, int rows) { return runtime_.buffer(id).Rows(0, rows); };
    const Tensor x = buf(kX, T), h = buf(kH, T), qkv = buf(kQkv, T), attn = buf(kAttn, T);

    // x: [T, C] is the residual stream, replicated on every rank.
    if (embed_rows_ == nullptr) {
      FLOVER_RETURN_IF_ERROR(backend_.Embed(step->tokens, step->positions, embed_.tensor(),
                                            shard_.vocab_begin, OrNull(positions_), x));
    } else {
      FLOVER_RETURN_IF_ERROR(backend_.EmbedBlocks(step->tokens, step->positions, *embed_rows_,
                                                  shard_.vocab_begin, spec_.embed_scale,
                                                  OrNull(positions_), x));
    }
    FLOVER_RETURN_IF_ERROR(runtime_.AllReduce(x));
    const kernels::RopeParams rope{shard_.q_heads, shard_.kv_heads, spec_.head_dim,
                                   spec_.rope_style, spec_.rope_scale};
    for (int l = 0; l < spec_.n_layer; ++l) {
      const LayerParams& p = layers_[l];
      FLOVER_RETURN_IF_ERROR(Norm(x, p.norm1, p.norm1_b, h));
      FLOVER_RETURN_IF_ERROR(Apply(p.qkv, h, qkv));
      if (spec_.qk_norm) {  // each head of Q, then of K, on its own; or all of Q, then all of K
        const int groups_q = spec_.qk_norm_whole ? 1 : shard_.q_heads;
        const int groups_k = spec_.qk_norm_whole ? 1 : shard_.kv_heads;
        FLOVER_RETURN_IF_ERROR(backend_.GroupRmsNorm(qkv, 0, groups_q, p.q_norm, spec_.norm_eps));
        FLOVER_RETURN_IF_ERROR(backend_.GroupRmsNorm(qkv, shard_.q_heads * spec_.head_dim, groups_k,
                                                     p.k_norm, spec_.norm_eps));
      }
      if (!inv_freq_.empty() && (spec_.rope_layers.empty() || spec_.rope_layers[l])) {
        const bool local = !spec_.local_rope.empty() && spec_.local_rope[l];
        FLOVER_RETURN_IF_ERROR(
            backend_.Rope(qkv, step->positions, (local ? inv_freq_local_ : inv_freq_).tensor(), rope));
      }
      // A local layer reads its own blocks where the cache keeps them apart.
      const kernels::SeqTable& table = cache.shape().local(l) ? step->local_seqs : seqs;
      FLOVER_RETURN_IF_ERROR(backend_.AppendKv(qkv, table, cache.layer(l)));
      FLOVER_RETURN_IF_ERROR(backend_.Attention(qkv, table, cache.layer(l), spec_.attention[l], attn));
      if (spec_.block == Block::kParallel) {
        // attention and MLP both read norm1(x), still in h.
        FLOVER_RETURN_IF_ERROR(Residual(p.o, attn, p.post_attn_norm, T));
        FLOVER_RETURN_IF_ERROR(p.mlp->Forward(*this, h, p.post_mlp_norm, T));
        continue;
      }
      FLOVER_RETURN_IF_ERROR(Residual(p.o, attn, p.post_attn_norm, T));
      FLOVER_RETURN_IF_ERROR(Norm(x, p.norm2, p.norm2_b, h));
      FLOVER_RETURN_IF_ERROR(p.mlp->Forward(*this, h, p.post_mlp_norm, T));
    }

    // The final norm and head only on the rows whose logits are wanted.
    Tensor rows = x;
    if (which == LogitsFor::kLastRowsOfEachSequence) {
      rows = buf(kLast, R);
      FLOVER_RETURN_IF_ERROR(backend_.GatherLastRows(x, step->gather, rows));
    }
    const Tensor hr = buf(kH, R), logits = buf(kLogits, R);
    FLOVER_RETURN_IF_ERROR(Norm(rows, norm_, norm_b_, hr));
    FLOVER_RETURN_IF_ERROR(Apply(head_, hr, logits));
    if (spec_.final_softcap > 0) FLOVER_RETURN_IF_ERROR(backend_.SoftCap(logits, spec_.final_softcap));
    return absl::OkStatus();
  });
}

absl::StatusOr<absl::Span<float>> DecoderModel::Forward(const ForwardBatch& b, KvCache& cache,
                                                        LogitsFor which) {
  FLOVER_RETURN_IF_ERROR(runtime_.CheckBatch(b, cache, CacheShape(1, 1)));
  int R = 0;
  const absl::Status run = Run(b, cache, which, &R);
  return runtime_.Finish(run, runtime_.buffer(kLogits), R);
}

absl::StatusOr<absl::Span<const int32_t>> DecoderModel::ForwardGreedy(const ForwardBatch& b,
                                                                      KvCache& cache) {
  FLOVER_RETURN_IF_ERROR(runtime_.CheckBatch(b, cache, CacheShape(1, 1)));
  int R = 0;
  const absl::Status run = Run(b, cache, LogitsFor::kLastRowsOfEachSequence, &R);
  return runtime_.FinishGreedy(run, runtime_.buffer(kLogits), R);
}

}  // namespace flover
