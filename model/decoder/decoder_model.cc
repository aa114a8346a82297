#include "model/decoder/decoder_model.h"

#include <algorithm>
#include <cmath>

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
            const int C = spec_.hidden, D = spec_.MaxHeadDim(),
                      W = spec_.MaxQkvWidth(shard_.q_heads, shard_.tp_size), FL = MaxInner(),
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
            const int P = spec_.per_layer_input;
            // Also where given rows take additions after layers (their
            // rows go up through it between layers).
            b[kBranch] = sandwich || spec_.residual_scale != 1.0f || P > 0 || spec_.given_layers > 0
                             ? ForwardRuntime::BufferSpec{f32, T, C}
                             : ForwardRuntime::BufferSpec{f32, 1, 1};
            b[kNormed] = sandwich || P > 0 ? b[kBranch] : ForwardRuntime::BufferSpec{f32, 1, 1};
            const ForwardRuntime::BufferSpec ple{f32, P > 0 ? T : 1, std::max(P, 1)};
            b[kEmbed0] = P > 0 ? ForwardRuntime::BufferSpec{f32, T, C} : ForwardRuntime::BufferSpec{f32, 1, 1};
            b[kPleIn] = b[kPleTok] = b[kPleGate] = ple;
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
            const bool shared = spec_.moe.shared_intermediate > 0 || spec_.moe.beside_dense;
            b[kSharedOut] = {f32, shared ? T : 1, shared ? C : 1};
            b[kSharedGate] = {f32, shared ? T : 1, 1};
            const int QL = spec_.attn_output_gate ? shard_.q_heads * D : 1, TG = spec_.attn_output_gate ? T : 1;
            b[kGateIn] = {f32, TG, QL};
            b[kGated] = {f32, TG, QL};
            // Recurrent layers: the convolution's channels; the delta net's
            // value heads (the short convolution's channels in their place).
            const bool recurrent = spec_.StateLayerCount() > 0;
            const int TR = recurrent ? T : 1, Ch = std::max(shard_.conv_channels, 1);
            const DecoderSpec::Mixer kind = spec_.RecurrentKind();
            const bool delta = kind == DecoderSpec::Mixer::kGatedDeltaNet, mamba = kind == DecoderSpec::Mixer::kMamba2;
            const int H = delta ? shard_.dn_v_heads : mamba ? shard_.mamba_heads : Ch;
            const int Vd = delta   ? shard_.dn_v_heads * spec_.recurrent.v_dim
                           : mamba ? shard_.mamba_heads * spec_.recurrent.head_dim
                                   : Ch;
            b[kRecIn] = {f32, TR, Ch};
            b[kRecConv] = {f32, TR, Ch};
            b[kRecGate] = {f32, TR, Vd};
            b[kRecB] = {f32, TR, H};
            b[kRecA] = {f32, TR, delta || mamba ? H : 1};
            b[kRecOut] = {f32, TR, delta || mamba ? Vd : 1};
            b[kHiddenIn] = spec_.mtp_input ? ForwardRuntime::BufferSpec{f32, T, C} : ForwardRuntime::BufferSpec{f32, 1, 1};
            b[kHiddenOut] = keep_hidden_ ? ForwardRuntime::BufferSpec{f32, T, C} : ForwardRuntime::BufferSpec{f32, 1, 1};
            return b;
          },
          [this](int rank) { return VocabRange(spec_.vocab_size, {shard_spec_.tp_size, rank}); }) {}

absl::StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::CreateMtp(const DecoderSpec& spec,
                                                                     const DecoderRecipes& recipes,
                                                                     const ModelInfo& info,
                                                                     const WeightSource& source,
                                                                     const CausalLm& main) {
  const auto* m = dynamic_cast<const DecoderModel*>(&main);
  if (m == nullptr || !spec.mtp_input) {
    return absl::InvalidArgumentError("a multi-token-prediction layer needs a decoder main model and spec");
  }
  if (m->shard_spec_.tp_size != 1) {
    return absl::InvalidArgumentError("a multi-token-prediction layer shares a main model of one rank");
  }
  if (spec.hidden != m->spec_.hidden || spec.vocab_size != m->spec_.vocab_size) {
    return absl::InvalidArgumentError("the multi-token-prediction layer's width or vocabulary is not its model's");
  }
  return Build(spec, recipes, info, source, m->backend_, nullptr, m->tables_);
}

absl::StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::Create(
    const DecoderSpec& spec, const DecoderRecipes& recipes, const ModelInfo& info,
    const WeightSource& source, kernels::Backend& backend, Collectives* collectives) {
  return Build(spec, recipes, info, source, backend, collectives, nullptr);
}

absl::StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::Build(
    const DecoderSpec& spec, const DecoderRecipes& recipes, const ModelInfo& info, const WeightSource& source,
    kernels::Backend& backend, Collectives* collectives, std::shared_ptr<Tables> shared) {
  FLOVER_RETURN_IF_ERROR(spec.Validate());
  const ShardSpec shard_spec = SpecOf(collectives);
  FLOVER_RETURN_IF_ERROR(ValidateDecoderShard(spec, shard_spec));
  std::unique_ptr<DecoderModel> model(new DecoderModel(spec, info, backend, collectives));
  if (shared != nullptr) {
    model->tables_ = std::move(shared);
    model->shared_tables_ = true;
  }
  const WeightRecipe embed = recipes.embedding(model->shard_);
  if (spec.per_layer_input > 0) {  // the per-layer table, a band per layer, read once
    if (!recipes.per_layer_table) return absl::InvalidArgumentError("the model has no per-layer embedding table");
    auto bands = UploadColumnBands(backend, source, recipes.per_layer_table(), spec.n_layer, spec.per_layer_input,
                                   std::sqrt(static_cast<float>(spec.per_layer_input)),
                                   backend.matmul_dtype() == kernels::MatmulDtype::kNative);
    if (!bands.ok()) return bands.status();
    model->ple_tables_ = std::move(*bands);
  }
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
  // A mixture of experts whose rows are grouped on the host waits midway.
  for (const LayerParams& l : model->layers_) {
    if (l.mlp->WaitsForDevice(backend)) model->runtime_.DisableRecording();
  }
  return model;
}

absl::Status DecoderModel::Upload(DecoderWeights& w, const WeightSource& source,
                                  const WeightRecipe& embed, bool globals) {
  const int C = spec_.hidden, VL = shard_.vocab_end - shard_.vocab_begin;
  if (layers_.size() + w.layers.size() > static_cast<size_t>(spec_.n_layer)) {
    return absl::InvalidArgumentError(absl::StrCat("more than the model's ", spec_.n_layer,
                                                   " layers uploaded"));
  }
  // Row-split GEMMs add into the residual stream in their epilogue (one
  // rank), unless a norm comes between (kSandwich).
  LayerUploader up(backend_, spec_,
                   spec_.block == Block::kSandwich || spec_.residual_scale != 1.0f ? Epilogue::kBias
                                                                                  : runtime_.row_split_epilogue());
  for (DecoderLayerWeights& l : w.layers) {
    const int index = static_cast<int>(layers_.size());
    LayerParams p;
    std::vector<float> none;  // the post-norms are RMSNorms (Validate): no bias
    Buffer no_bias;
    FLOVER_RETURN_IF_ERROR(up.Norm(l.norm1, l.norm1_b, &p.norm1, &p.norm1_b));
    if (spec_.block != Block::kParallel) {
      FLOVER_RETURN_IF_ERROR(up.Norm(l.norm2, l.norm2_b, &p.norm2, &p.norm2_b));
    }
    if (spec_.block == Block::kSandwich) {
      FLOVER_RETURN_IF_ERROR(up.Norm(l.post_attn_norm, none, &p.post_attn_norm, &no_bias));
      FLOVER_RETURN_IF_ERROR(up.Norm(l.post_mlp_norm, none, &p.post_mlp_norm, &no_bias));
    }
    auto mixer = MakeMixer(up, shard_, index, l);
    if (!mixer.ok()) return mixer.status();
    p.mixer = std::move(*mixer);
    auto mlp = MakeMlp(up, shard_, index, l);
    if (!mlp.ok()) return mlp.status();
    p.mlp = std::move(*mlp);
    if (spec_.per_layer_input > 0) {
      const bool native = !ple_tables_.blocks.empty();
      if (index >= static_cast<int>(native ? ple_tables_.blocks.size() : ple_tables_.f32.size())) {
        return absl::InternalError("the per-layer tables are not read");
      }
      auto ple = MakePerLayerInput(up, index, l, native ? kernels::Buffer() : std::move(ple_tables_.f32[index]),
                                   native ? std::move(ple_tables_.blocks[index]) : nullptr);
      if (!ple.ok()) return ple.status();
      p.ple = std::move(*ple);
    }
    if (spec_.layer_scale) {
      if (l.layer_scale.size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat("layer ", index, "'s output scale has ", l.layer_scale.size(),
                                                       " values, not 1"));
      }
      p.scale = l.layer_scale[0];
    }
    layers_.push_back(std::move(p));
  }
  if (!globals) return absl::OkStatus();
  if (static_cast<int>(layers_.size()) != spec_.n_layer) {
    return absl::InternalError("the globals must come after every layer");
  }
  if (spec_.mtp_input) {
    std::vector<float> none;
    Buffer no_bias;
    FLOVER_RETURN_IF_ERROR(up.Norm(w.mtp_enorm, none, &mtp_enorm_, &no_bias));
    FLOVER_RETURN_IF_ERROR(up.Norm(w.mtp_hnorm, none, &mtp_hnorm_, &no_bias));
    FLOVER_RETURN_IF_ERROR(up.Site(w.mtp_eh_e, none, C, C, Epilogue::kBias, &mtp_eh_e_));
    // The hidden's half adds into the embedding's.
    FLOVER_RETURN_IF_ERROR(up.Site(w.mtp_eh_h, none, C, C, Epilogue::kBiasResidual, &mtp_eh_h_));
  }
  FLOVER_RETURN_IF_ERROR(up.Norm(w.norm, w.norm_b, &norm_, &norm_b_));
  if (spec_.position_table && shard_.adds_replicated_bias) {
    FLOVER_RETURN_IF_ERROR(up.Values(w.position_table, spec_.max_positions, C, &positions_));
    if (positions_.empty()) return absl::InvalidArgumentError("the model has no position table");
  }
  if (!spec_.inv_freq.empty()) {
    std::vector<float> inv_freq = spec_.inv_freq;
    FLOVER_RETURN_IF_ERROR(up.Values(inv_freq, 1, static_cast<int64_t>(inv_freq.size()), &inv_freq_));
  }
  if (!spec_.local_rope.empty()) {
    std::vector<float> local = spec_.inv_freq_local;
    FLOVER_RETURN_IF_ERROR(up.Values(local, 1, static_cast<int64_t>(local.size()), &inv_freq_local_));
  }
  if (shared_tables_) return absl::OkStatus();  // the main model's embedding and head
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
    tables_->embed_rows = std::move(*table);
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
  FLOVER_RETURN_IF_ERROR(PrepareMatrixReleasing(backend_, w.lm_head, C, VL, WeightLayout::kOutIn, &tables_->head.w));
  FLOVER_RETURN_IF_ERROR(up.Values(w.lm_head_b, 1, VL, &tables_->head.bias));
  if (native && !tied) {
    auto rows = ReadRecipeStored(source, embed, /*keep_blocks=*/true);
    if (!rows.ok()) return rows.status();
    FLOVER_RETURN_IF_ERROR(keep_embed_blocks(*rows));
  }
  if (tables_->embed_rows == nullptr) {
    auto table = UploadRowsF32(backend_, source, embed, C, spec_.embed_scale);
    if (!table.ok()) return table.status();
    tables_->embed = std::move(*table);
  }
  return absl::OkStatus();
}

KvCacheShape DecoderModel::CacheShape(int num_blocks, int max_seq, int state_slots) const {
  KvCacheShape shape;
  shape.layers = spec_.KvLayerCount();
  // Recurrent layers: a slot per sequence holds each one's convolution
  // window (K - 1 inputs of this rank's channels) and, for the delta net,
  // its [Hv_local, dk, dv] matrix.
  shape.state_layers = spec_.StateLayerCount();
  if (shape.state_layers > 0) {
    shape.state_slots = state_slots;
    const DecoderSpec::Recurrent& r = spec_.recurrent;
    shape.conv_state = int64_t{r.conv_kernel - 1} * shard_.conv_channels;
    if (spec_.RecurrentKind() == DecoderSpec::Mixer::kGatedDeltaNet) {
      shape.scan_state = int64_t{shard_.dn_v_heads} * r.k_dim * r.v_dim;
    } else if (spec_.RecurrentKind() == DecoderSpec::Mixer::kMamba2) {
      shape.scan_state = int64_t{shard_.mamba_heads} * r.head_dim * r.state_size;
    }
  }
  shape.heads = shard_.kv_heads;
  shape.head_dim = spec_.head_dim;
  if (!spec_.layer_attention.empty()) {  // the layers that keep K and V, in order
    for (int l = 0; l < spec_.n_layer; ++l) {
      if (spec_.mixer(l) != DecoderSpec::Mixer::kAttention || spec_.kv_owner(l) != l) continue;
      shape.layer_heads.push_back(shard_.kv_heads_of(spec_, l));
      shape.layer_head_dim.push_back(spec_.head_dim_of(l));
    }
  }
  shape.format = backend_.kv_format();
  shape.num_blocks = num_blocks;
  shape.max_seq = max_seq;
  shape.window = spec_.KvWindow();
  // Local layers of one window beside global ones (Gemma 2 and 3) may keep
  // blocks of their own (the engine's choice: local_blocks).
  if (shape.window == 0) {
    for (int l = 0; l < spec_.n_layer; ++l) {
      if (spec_.mixer(l) != DecoderSpec::Mixer::kAttention || spec_.kv_owner(l) != l) continue;
      const kernels::AttentionParams& a = spec_.attention[l];
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

int DecoderModel::MaxInner() const {
  int inner = shard_.inner;
  for (int l = 0; l < spec_.n_layer; ++l) inner = std::max(inner, shard_.inner_of(spec_, l));
  return inner;
}

absl::Status DecoderModel::PrepareForBatches(int max_rows, int max_logit_rows) {
  if (max_rows < 1 || max_logit_rows < 1) {
    return absl::InvalidArgumentError("PrepareForBatches: row counts must be >= 1");
  }
  const int T = max_rows, R = max_logit_rows;
  auto prepare = [&](const LinearSite& s, int rows) {
    return backend_.PrepareLinear(*s.w, rows, !s.bias.empty(), s.epilogue);
  };
  for (const LayerParams& l : layers_) {
    FLOVER_RETURN_IF_ERROR(l.mixer->Prepare(backend_, T));
    FLOVER_RETURN_IF_ERROR(l.mlp->Prepare(backend_, T));
    if (l.ple != nullptr) FLOVER_RETURN_IF_ERROR(l.ple->Prepare(backend_, T));
  }
  FLOVER_RETURN_IF_ERROR(prepare(tables_->head, std::max(T, R)));
  if (spec_.mtp_input) {
    FLOVER_RETURN_IF_ERROR(prepare(mtp_eh_e_, T));
    FLOVER_RETURN_IF_ERROR(prepare(mtp_eh_h_, T));
  }
  return runtime_.Reserve(T, R);
}

absl::Status DecoderModel::KeepFinalHidden(bool on) {
  if (on == keep_hidden_) return absl::OkStatus();
  keep_hidden_ = on;
  hidden_ = {};
  return runtime_.Relayout();  // kHiddenOut's rows
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
  if (spec_.block != Block::kSandwich && spec_.residual_scale == 1.0f) {
    return runtime_.RowSplitResidual(in, *s.w, OrNull(s.bias), x);
  }
  // The branch apart: normed (kSandwich) or scaled (residual_scale), then added.
  const Tensor branch = runtime_.buffer(kBranch).Rows(0, T);
  FLOVER_RETURN_IF_ERROR(Apply(s, in, branch));
  FLOVER_RETURN_IF_ERROR(runtime_.AllReduce(branch));
  if (spec_.block != Block::kSandwich) {
    FLOVER_RETURN_IF_ERROR(backend_.Scale(branch, spec_.residual_scale));
    return backend_.Add(branch, x);
  }
  const Tensor normed = runtime_.buffer(kNormed).Rows(0, T);
  FLOVER_RETURN_IF_ERROR(backend_.RmsNorm(branch, post.tensor(), spec_.norm_eps, normed));
  return backend_.Add(normed, x);
}

namespace {

// The batch's given rows (ForwardBatch::given) lie within it, in order and
// apart, with hidden values each.
absl::Status CheckGivenRows(const ForwardBatch& b, int hidden, int given_layers) {
  int64_t next = 0, rows = 0;
  for (const ForwardBatch::GivenRows& g : b.given) {
    if (g.count < 1 || g.row < next || int64_t{g.row} + g.count > b.num_rows()) {
      return absl::InvalidArgumentError(absl::StrCat("given input rows ", g.row, "..", int64_t{g.row} + g.count - 1,
                                                     " are out of order or outside the batch's ", b.num_rows(),
                                                     " rows"));
    }
    next = int64_t{g.row} + g.count;
    rows += g.count;
  }
  if (b.embeds.size() != static_cast<size_t>(rows) * hidden) {
    return absl::InvalidArgumentError(absl::StrCat("given input rows need ", rows, " x ", hidden, " values, got ",
                                                   b.embeds.size()));
  }
  if (b.given_layers.size() > static_cast<size_t>(given_layers)) {
    return absl::InvalidArgumentError(absl::StrCat("given rows' additions after ", b.given_layers.size(),
                                                   " layers, of a model that takes them after ", given_layers));
  }
  for (size_t l = 0; l < b.given_layers.size(); ++l) {
    if (b.given_layers[l].size() != b.embeds.size()) {
      return absl::InvalidArgumentError(absl::StrCat("given rows' addition after layer ", l, " has ",
                                                     b.given_layers[l].size(), " values, not ", b.embeds.size()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DecoderModel::Run(const ForwardBatch& b, KvCache& cache, LogitsFor which,
                               int* R_out) {
  const int T = b.num_rows();
  const int R = which == LogitsFor::kLastRowsOfEachSequence ? b.num_logit_rows() : T;
  FLOVER_RETURN_IF_ERROR(runtime_.Reserve(T, R));
  auto step = runtime_.UploadStep(b);
  if (!step.ok()) return step.status();
  *R_out = R;
  if (spec_.mtp_input) {  // the main model's hidden rows beside the tokens
    if (b.hidden.size() != static_cast<size_t>(T) * spec_.hidden) {
      return absl::InvalidArgumentError(absl::StrCat("a multi-token-prediction step needs ", T, " x ", spec_.hidden,
                                                     " hidden values, got ", b.hidden.size()));
    }
    FLOVER_RETURN_IF_ERROR(backend_.Upload(b.hidden.data(), runtime_.buffer(kHiddenIn).Rows(0, T)));
  }
  FLOVER_RETURN_IF_ERROR(CheckGivenRows(b, spec_.hidden, spec_.given_layers));
  if (!b.rope_positions.empty() && spec_.mrope_t + spec_.mrope_h + spec_.mrope_w == 0) {
    return absl::InvalidArgumentError("the batch gives multimodal rotary positions to a model without them");
  }
  // Prefix checkpoints first (never part of a recorded step).
  for (const auto& [from, to] : b.state_copies) {
    for (int i = 0; i < cache.shape().state_layers; ++i) {
      const kernels::StateLayer s = cache.state(i);
      for (auto [base, elems] : {std::pair{s.conv, s.conv_elems}, std::pair{s.scan, s.scan_elems}}) {
        if (base == nullptr) continue;
        const Tensor src{base + from * elems, kernels::DType::kF32, 1, elems};
        const Tensor dst{base + to * elems, kernels::DType::kF32, 1, elems};
        FLOVER_RETURN_IF_ERROR(backend_.Copy(src, dst));
      }
    }
  }
  // Everything after the upload: replayed from a recording for decode steps
  // where the backend records (ForwardRuntime::RunOps).
  const int variant = static_cast<int>(which) + (keep_hidden_ ? 2 : 0);
  const auto ops = [&]() -> absl::Status {
    auto buf = [&](Activation id, int rows) { return runtime_.buffer(id).Rows(0, rows); };
    const Tensor x = buf(kX, T), h = buf(kH, T);

    // x: [T, C] is the residual stream, replicated on every rank.
    const Tables& t = *tables_;
    if (t.embed_rows == nullptr) {
      FLOVER_RETURN_IF_ERROR(backend_.Embed(step->tokens, step->positions, t.embed.tensor(),
                                            shard_.vocab_begin, OrNull(positions_), x));
    } else {
      FLOVER_RETURN_IF_ERROR(backend_.EmbedBlocks(step->tokens, step->positions, *t.embed_rows,
                                                  shard_.vocab_begin, spec_.embed_scale,
                                                  OrNull(positions_), x));
    }
    FLOVER_RETURN_IF_ERROR(runtime_.AllReduce(x));
    // Given rows over the table's (every rank holds them whole).
    size_t given_at = 0;
    for (const ForwardBatch::GivenRows& g : b.given) {
      FLOVER_RETURN_IF_ERROR(backend_.Upload(b.embeds.data() + given_at, x.Rows(g.row, g.count)));
      given_at += static_cast<size_t>(g.count) * spec_.hidden;
    }
    // The embedding as the per-layer inputs read it.
    if (spec_.per_layer_input > 0) FLOVER_RETURN_IF_ERROR(backend_.Copy(x, buf(kEmbed0, T)));
    if (spec_.mtp_input) {  // x = eh_e enorm(x) + eh_h hnorm(hidden)
      FLOVER_RETURN_IF_ERROR(backend_.RmsNorm(x, mtp_enorm_.tensor(), spec_.norm_eps, h));
      FLOVER_RETURN_IF_ERROR(Apply(mtp_eh_e_, h, x));
      FLOVER_RETURN_IF_ERROR(backend_.RmsNorm(buf(kHiddenIn, T), mtp_hnorm_.tensor(), spec_.norm_eps, h));
      FLOVER_RETURN_IF_ERROR(Apply(mtp_eh_h_, h, x));
    }
    for (int l = 0; l < spec_.n_layer; ++l) {
      const LayerParams& p = layers_[l];
      FLOVER_RETURN_IF_ERROR(Norm(x, p.norm1, p.norm1_b, h));
      FLOVER_RETURN_IF_ERROR(p.mixer->Forward(*this, h, LayerStep{*step, cache, l, T}, p.post_attn_norm));
      // kParallel: the MLP reads norm1(x) too, still in h.
      if (spec_.block != Block::kParallel) FLOVER_RETURN_IF_ERROR(Norm(x, p.norm2, p.norm2_b, h));
      FLOVER_RETURN_IF_ERROR(p.mlp->Forward(*this, h, p.post_mlp_norm, T));
      if (p.ple != nullptr) FLOVER_RETURN_IF_ERROR(p.ple->Forward(*this, step->tokens, step->positions, T));
      if (spec_.layer_scale) FLOVER_RETURN_IF_ERROR(backend_.Scale(x, p.scale));
      // The given rows' addition after this layer (deepstack).
      if (static_cast<size_t>(l) < b.given_layers.size()) {
        size_t at = 0;
        for (const ForwardBatch::GivenRows& g : b.given) {
          const Tensor add = buf(kBranch, T).Rows(g.row, g.count);
          FLOVER_RETURN_IF_ERROR(backend_.Upload(b.given_layers[l].data() + at, add));
          FLOVER_RETURN_IF_ERROR(backend_.Add(add, x.Rows(g.row, g.count)));
          at += static_cast<size_t>(g.count) * spec_.hidden;
        }
      }
    }

    // Every row's final hidden state, where kept (the norm is row by row:
    // the same values as the head's rows below).
    if (keep_hidden_) FLOVER_RETURN_IF_ERROR(Norm(x, norm_, norm_b_, buf(kHiddenOut, T)));
    // The final norm and head only on the rows whose logits are wanted.
    Tensor rows = x;
    if (which == LogitsFor::kLastRowsOfEachSequence) {
      rows = buf(kLast, R);
      FLOVER_RETURN_IF_ERROR(backend_.GatherLastRows(x, step->gather, rows));
    }
    const Tensor hr = buf(kH, R), logits = buf(kLogits, R);
    FLOVER_RETURN_IF_ERROR(Norm(rows, norm_, norm_b_, hr));
    FLOVER_RETURN_IF_ERROR(Apply(t.head, hr, logits));
    if (spec_.final_softcap > 0) FLOVER_RETURN_IF_ERROR(backend_.SoftCap(logits, spec_.final_softcap));
    return absl::OkStatus();
  };
  // Given rows go up midway: such a step is never recorded.
  return b.given.empty() ? runtime_.RunOps(&*step, cache, variant, ops) : ops();
}

absl::StatusOr<absl::Span<float>> DecoderModel::Forward(const ForwardBatch& b, KvCache& cache,
                                                        LogitsFor which) {
  FLOVER_RETURN_IF_ERROR(runtime_.CheckBatch(b, cache, CacheShape(1, 1)));
  int R = 0;
  const absl::Status run = Run(b, cache, which, &R);
  auto logits = runtime_.Finish(run, runtime_.buffer(kLogits), R);
  if (logits.ok()) FLOVER_RETURN_IF_ERROR(FetchHidden(b.num_rows()));
  return logits;
}

absl::Status DecoderModel::FetchHidden(int T) {
  hidden_ = {};
  if (!keep_hidden_ || T == 0) return absl::OkStatus();
  const Tensor rows = runtime_.buffer(kHiddenOut).Rows(0, T);
  const size_t n = static_cast<size_t>(T) * spec_.hidden;
  if (const void* host = backend_.HostAddress(rows); host != nullptr) {
    hidden_ = absl::MakeConstSpan(static_cast<const float*>(host), n);
    return absl::OkStatus();
  }
  hidden_host_.resize(n);
  FLOVER_RETURN_IF_ERROR(backend_.Download(rows, hidden_host_.data()));
  hidden_ = absl::MakeConstSpan(hidden_host_);
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<const int32_t>> DecoderModel::ForwardGreedy(const ForwardBatch& b,
                                                                      KvCache& cache) {
  FLOVER_RETURN_IF_ERROR(runtime_.CheckBatch(b, cache, CacheShape(1, 1)));
  int R = 0;
  const absl::Status run = Run(b, cache, LogitsFor::kLastRowsOfEachSequence, &R);
  auto best = runtime_.FinishGreedy(run, runtime_.buffer(kLogits), R);
  if (best.ok()) FLOVER_RETURN_IF_ERROR(FetchHidden(b.num_rows()));
  return best;
}

}  // namespace flover
