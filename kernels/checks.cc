#include "kernels/checks.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/status_macros.h"

namespace flover::kernels {

absl::Status CheckTensor(const char* op, const char* name, const Tensor& t, int64_t rows,
                         int64_t cols, std::initializer_list<DType> dtypes) {
  auto bad = [&](auto&&... what) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " ", what...));
  };
  if (t.data == nullptr && t.elements() > 0) return bad("has no memory");
  if ((rows != kAnySize && t.rows != rows) || (cols != kAnySize && t.cols != cols)) {
    return bad("is [", t.rows, ", ", t.cols, "], expected [",
               rows == kAnySize ? "any" : absl::StrCat(rows), ", ",
               cols == kAnySize ? "any" : absl::StrCat(cols), "]");
  }
  for (DType d : dtypes) {
    if (t.dtype == d) return absl::OkStatus();
  }
  return bad("is ", DTypeName(t.dtype), ", expected ",
             absl::StrJoin(dtypes, " or ", [](std::string* out, DType d) {
               out->append(DTypeName(d));
             }));
}

absl::Status CheckSeqTable(const char* op, const SeqTable& seqs, const KvLayer* kv, int window) {
  auto bad = [&](auto&&... what) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what...));
  };
  if (seqs.num_seqs > 0 && seqs.host == nullptr) return bad("the sequence table has no host copy");
  if (absl::Status st = CheckTensor(op, "the sequence table", seqs.device, seqs.num_seqs, 4,
                                    {DType::kI32});
      !st.ok()) {
    return st;
  }
  if (kv != nullptr && (kv->k == nullptr || kv->v == nullptr)) return bad("the KV layer has no memory");
  if (kv != nullptr) {
    if (seqs.num_block_ids > 0 && seqs.block_ids == nullptr) return bad("the block table has no host copy");
    if (absl::Status st = CheckTensor(op, "the block table", seqs.block_ids_device, 1,
                                      seqs.num_block_ids, {DType::kI32});
        !st.ok()) {
      return st;
    }
  }
  int max_context = 0;
  for (int i = 0; i < seqs.num_seqs; ++i) {
    const SeqRows& s = seqs.host[i];
    if (s.len < 1 || s.row < 0 || int64_t{s.row} + s.len > seqs.num_rows || s.pos < 0) {
      return bad("sequence ", i, " has rows [", s.row, ", ", int64_t{s.row} + s.len,
                 ") outside the batch's ", seqs.num_rows, " rows");
    }
    if (kv != nullptr) {
      const int64_t n = KvLayer::BlocksFor(int64_t{s.pos} + s.len);
      if (s.blocks < 0 || s.blocks + n > seqs.num_block_ids) {
        return bad("sequence ", i, " needs ", n, " block ids from ", s.blocks,
                   ", outside the block table's ", seqs.num_block_ids);
      }
    }
    max_context = std::max(max_context, s.pos + s.len);
  }
  if (kv != nullptr) {
    // Every id of the table in range: one pass a compiler vectorizes (this
    // runs for every layer).
    int32_t lo = 0, hi = 0;
    for (int i = 0; i < seqs.num_block_ids; ++i) {
      lo = std::min(lo, seqs.block_ids[i]);
      hi = std::max(hi, seqs.block_ids[i]);
    }
    if (seqs.num_block_ids > 0 && hi >= kv->num_blocks) {
      return bad("the block table names KV block ", hi, ", outside the cache's ", kv->num_blocks, " blocks");
    }
    // KvLayer::kNoBlock only for blocks before every position the op reads
    // or writes (behind the first row's window); any other negative id, or
    // one a row would touch, is refused.
    for (int i = 0; lo < 0 && i < seqs.num_seqs; ++i) {
      const SeqRows& s = seqs.host[i];
      const int first = window == kAppendOnly ? s.pos : window > 0 ? std::max(0, s.pos + 1 - window) : 0;
      const int64_t n = KvLayer::BlocksFor(int64_t{s.pos} + s.len);
      for (int64_t k = 0; k < n; ++k) {
        const int32_t id = seqs.block_ids[s.blocks + k];
        if (id >= 0) continue;
        if (id != KvLayer::kNoBlock || k >= first / KvLayer::kBlockSize) {
          return bad("sequence ", i, "'s block ", k, " (positions [", k * KvLayer::kBlockSize, ", ",
                     (k + 1) * KvLayer::kBlockSize, ")) is ", id, ": its rows ",
                     window == kAppendOnly ? "write" : "attend", " positions ", first,
                     " on, and only blocks wholly before those may be kNoBlock (", KvLayer::kNoBlock, ")");
        }
      }
    }
  }
  if (max_context > seqs.max_context) {
    return bad("max_context is ", seqs.max_context, " but the sequences reach ", max_context);
  }
  // Horizons (for every op that takes the table, so a step's table is
  // checked the same way everywhere): each row's own position or past it,
  // within its sequence's rows of this call.
  if (seqs.horizon != nullptr || seqs.horizon_device.data != nullptr) {
    if (seqs.horizon == nullptr) return bad("the horizons have no host copy");
    FLOVER_RETURN_IF_ERROR(CheckTensor(op, "the horizons", seqs.horizon_device, 1, seqs.num_rows, {DType::kI32}));
    for (int i = 0; i < seqs.num_seqs; ++i) {
      const SeqRows& s = seqs.host[i];
      for (int r = 0; r < s.len; ++r) {
        const int32_t h = seqs.horizon[s.row + r];
        if (h < s.pos + r || h >= s.pos + s.len) {
          return bad("row ", s.row + r, " (position ", s.pos + r, ") has horizon ", h,
                     ": it must be within [its position, ", s.pos + s.len, ")");
        }
      }
    }
  }
  return absl::OkStatus();
}

namespace {

// Embed's and EmbedBlocks' arguments, for rows of C: wte_rows is Embed's
// table (null for EmbedBlocks, whose table has no tensor).
absl::Status CheckEmbedRows(const char* op, const Tensor& tokens, const Tensor& positions,
                            const Tensor* wte_rows, int64_t C, const Tensor* wpe, const Tensor& out) {
  const int64_t T = tokens.cols;
  FLOVER_RETURN_IF_ERROR(CheckTensor(op, "tokens", tokens, 1, kAnySize, {DType::kI32}));
  FLOVER_RETURN_IF_ERROR(CheckTensor(op, "positions", positions, 1, T, {DType::kI32}));
  if (wte_rows != nullptr) {
    FLOVER_RETURN_IF_ERROR(CheckTensor(op, "wte_rows", *wte_rows, kAnySize, kAnySize, {DType::kF32}));
  }
  FLOVER_RETURN_IF_ERROR(CheckTensor(op, "out", out, T, C, {DType::kF32}));
  if (wpe != nullptr) return CheckTensor(op, "wpe", *wpe, kAnySize, C, {DType::kF32});
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckEmbedArgs(const Tensor& tokens, const Tensor& positions, const Tensor& wte_rows,
                            const Tensor* wpe, const Tensor& out) {
  return CheckEmbedRows("Embed", tokens, positions, &wte_rows, wte_rows.cols, wpe, out);
}

absl::Status CheckArgmaxRowsArgs(const Tensor& x, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckTensor("ArgmaxRows", "x", x, kAnySize, kAnySize, {DType::kF32}));
  if (x.cols < 1) return absl::InvalidArgumentError("ArgmaxRows: rows of no values");
  return CheckTensor("ArgmaxRows", "out", out, 1, x.rows, {DType::kI32});
}

absl::Status CheckEmbedBlocksArgs(const Tensor& tokens, const Tensor& positions,
                                  const BlockRows& table, const Tensor* wpe, const Tensor& out) {
  return CheckEmbedRows("EmbedBlocks", tokens, positions, nullptr, table.cols(), wpe, out);
}

absl::Status CheckBlockRowsArgs(BlockFormat format, const uint8_t* bytes, int64_t rows, int cols) {
  const BlockFormatInfo info = InfoOf(format);
  if (rows < 0 || cols <= 0 || cols % info.block_values != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PrepareBlockRows: ", rows, " rows of ", cols, " values in ", info.name,
        ": a row must be a whole number of ", info.block_values, "-value blocks"));
  }
  if (rows > 0 && bytes == nullptr) return absl::InvalidArgumentError("PrepareBlockRows: no bytes");
  return absl::OkStatus();
}

absl::Status CheckAddArgs(const Tensor& x, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckTensor("Add", "out", out, kAnySize, kAnySize, {DType::kF32}));
  return CheckTensor("Add", "x", x, out.rows, out.cols, {DType::kF32});
}

absl::Status CheckLayerNormArgs(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                const Tensor& out, DType act) {
  const int64_t T = x.rows, C = x.cols;
  FLOVER_RETURN_IF_ERROR(CheckTensor("LayerNorm", "x", x, kAnySize, kAnySize, {DType::kF32}));
  FLOVER_RETURN_IF_ERROR(CheckTensor("LayerNorm", "gamma", gamma, 1, C, {DType::kF32}));
  FLOVER_RETURN_IF_ERROR(CheckTensor("LayerNorm", "beta", beta, 1, C, {DType::kF32}));
  return CheckTensor("LayerNorm", "out", out, T, C, {DType::kF32, act});
}

absl::Status CheckRmsNormArgs(const Tensor& x, const Tensor& gamma, const Tensor& out, DType act) {
  FLOVER_RETURN_IF_ERROR(CheckTensor("RmsNorm", "x", x, kAnySize, kAnySize, {DType::kF32}));
  FLOVER_RETURN_IF_ERROR(CheckTensor("RmsNorm", "gamma", gamma, 1, x.cols, {DType::kF32}));
  return CheckTensor("RmsNorm", "out", out, x.rows, x.cols, {DType::kF32, act});
}

absl::Status CheckRopeArgs(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq,
                           const RopeParams& p) {
  FLOVER_RETURN_IF_ERROR(CheckTensor("Rope", "inv_freq", inv_freq, 1, kAnySize, {DType::kF32}));
  const int64_t R = 2 * inv_freq.cols, D = p.head_dim;
  if (p.q_heads < 1 || p.kv_heads < 0 || R < 2 || R > D) {  // kv_heads 0: Q alone
    return absl::InvalidArgumentError(absl::StrCat("Rope: ", p.q_heads, " query heads, ", p.kv_heads,
                                                   " key/value heads of dim ", D, ", ", R,
                                                   " of them rotary"));
  }
  if (!(p.scale > 0 && p.scale < 1e30f)) {
    return absl::InvalidArgumentError(absl::StrCat("Rope: scale ", p.scale, " must be positive and finite"));
  }
  FLOVER_RETURN_IF_ERROR(CheckTensor("Rope", "qkv", qkv, kAnySize,
                                     (int64_t{p.q_heads} + 2 * p.kv_heads) * D, {DType::kF32}));
  if (positions.rows == 3) {  // multimodal: every frequency in a section
    const int64_t sum = int64_t{p.mrope_t} + p.mrope_h + p.mrope_w;
    if (p.mrope_t < 0 || p.mrope_h < 0 || p.mrope_w < 0 || sum == 0 ||
        (!p.mrope_interleaved && sum != inv_freq.cols)) {
      return absl::InvalidArgumentError(absl::StrCat("Rope: multimodal sections ", p.mrope_t, ", ", p.mrope_h, ", ",
                                                     p.mrope_w, " do not add up to the ", inv_freq.cols,
                                                     " rotary frequencies"));
    }
    return CheckTensor("Rope", "positions", positions, 3, qkv.rows, {DType::kI32});
  }
  return CheckTensor("Rope", "positions", positions, 1, qkv.rows, {DType::kI32});
}

absl::Status CheckGluArgs(const Tensor& gate_up, GluKind kind, const Tensor& out, DType act) {
  if (kind != GluKind::kSilu && kind != GluKind::kGeluTanh && kind != GluKind::kSwigluOai) {
    return absl::InvalidArgumentError(absl::StrCat("Glu: unknown kind ", static_cast<int>(kind)));
  }
  FLOVER_RETURN_IF_ERROR(CheckTensor("Glu", "gate_up", gate_up, kAnySize, kAnySize, {DType::kF32}));
  if (gate_up.cols % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Glu: gate_up has ", gate_up.cols, " columns, not gate and up halves"));
  }
  return CheckTensor("Glu", "out", out, gate_up.rows, gate_up.cols / 2, {DType::kF32, act});
}

absl::Status CheckSigmoidArgs(const Tensor& x) {
  return CheckTensor("Sigmoid", "x", x, kAnySize, kAnySize, {DType::kF32});
}

absl::Status CheckSoftCapArgs(const Tensor& x, float cap) {
  if (!(cap > 0 && cap < 1e30f)) {
    return absl::InvalidArgumentError(absl::StrCat("SoftCap: cap ", cap, " must be > 0 and finite"));
  }
  return CheckTensor("SoftCap", "x", x, kAnySize, kAnySize, {DType::kF32});
}

absl::Status CheckGroupRmsNormArgs(const Tensor& x, int first, int groups, const Tensor& gamma) {
  FLOVER_RETURN_IF_ERROR(CheckTensor("GroupRmsNorm", "x", x, kAnySize, kAnySize, {DType::kF32}));
  FLOVER_RETURN_IF_ERROR(CheckTensor("GroupRmsNorm", "gamma", gamma, 1, kAnySize, {DType::kF32}));
  if (first < 0 || groups < 1 || gamma.cols < 1 || first + int64_t{groups} * gamma.cols > x.cols) {
    return absl::InvalidArgumentError(absl::StrCat("GroupRmsNorm: ", groups, " groups of ", gamma.cols,
                                                   " columns from column ", first, " do not fit in ",
                                                   x.cols, " columns"));
  }
  return absl::OkStatus();
}

absl::Status CheckRouteArgs(const Tensor& logits, const RouterParams& p, const Tensor& ids,
                           const Tensor& weights) {
  FLOVER_RETURN_IF_ERROR(CheckTensor("Route", "logits", logits, kAnySize, kAnySize, {DType::kF32}));
  if (p.k < 1 || p.k > logits.cols || logits.cols > kMaxExperts) {
    return absl::InvalidArgumentError(
        absl::StrCat("Route: ", p.k, " of ", logits.cols, " experts (at most ", kMaxExperts, ")"));
  }
  FLOVER_RETURN_IF_ERROR(CheckTensor("Route", "ids", ids, logits.rows, p.k, {DType::kI32}));
  return CheckTensor("Route", "weights", weights, logits.rows, p.k, {DType::kF32});
}

absl::Status CheckLinearByIdArgs(const Tensor& x, absl::Span<const Weight* const> experts, const Tensor* bias,
                                 const Tensor& ids, const Tensor& out, DType act, const int32_t* host_ids) {
  if (experts.empty() || static_cast<int64_t>(experts.size()) > kMaxExperts) {
    return absl::InvalidArgumentError(absl::StrCat("LinearById: ", experts.size(), " experts"));
  }
  for (const Weight* w : experts) {
    if (w == nullptr || w->k() != experts[0]->k() || w->n() != experts[0]->n()) {
      return absl::InvalidArgumentError("LinearById: every expert needs a weight of the same shape");
    }
  }
  const int64_t K = experts[0]->k(), N = experts[0]->n(), T = ids.rows, k = ids.cols;
  FLOVER_RETURN_IF_ERROR(CheckTensor("LinearById", "ids", ids, kAnySize, kAnySize, {DType::kI32}));
  if (x.rows != T && x.rows != T * k) {
    return absl::InvalidArgumentError(
        absl::StrCat("LinearById: x has ", x.rows, " rows for ", T, " rows of ", k, " experts"));
  }
  FLOVER_RETURN_IF_ERROR(CheckTensor("LinearById", "x", x, x.rows, K, {DType::kF32, act}));
  FLOVER_RETURN_IF_ERROR(CheckTensor("LinearById", "out", out, T * k, N, {DType::kF32}));
  if (bias != nullptr) {
    FLOVER_RETURN_IF_ERROR(
        CheckTensor("LinearById", "bias", *bias, static_cast<int64_t>(experts.size()), N, {DType::kF32}));
  }
  if (host_ids != nullptr) {
    for (int64_t r = 0; r < T * k; ++r) {
      if (host_ids[r] < 0 || host_ids[r] >= static_cast<int64_t>(experts.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("LinearById: expert ", host_ids[r], " of ", experts.size()));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckWeightedRowSumArgs(const Tensor& y, const Tensor& weights, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckTensor("WeightedRowSum", "weights", weights, kAnySize, kAnySize, {DType::kF32}));
  FLOVER_RETURN_IF_ERROR(CheckTensor("WeightedRowSum", "out", out, weights.rows, kAnySize, {DType::kF32}));
  return CheckTensor("WeightedRowSum", "y", y, weights.rows * weights.cols, out.cols, {DType::kF32});
}

absl::Status CheckLinearArgs(const Tensor& x, const Weight& w, const Tensor* bias,
                             Epilogue epilogue, const Tensor& out, DType x_dtype, DType act) {
  FLOVER_RETURN_IF_ERROR(CheckTensor("Linear", "x", x, kAnySize, w.k(), {DType::kF32, x_dtype}));
  const DType out_dtype = epilogue == Epilogue::kBiasGelu ? act : DType::kF32;
  FLOVER_RETURN_IF_ERROR(CheckTensor("Linear", "out", out, x.rows, w.n(), {DType::kF32, out_dtype}));
  if (bias != nullptr) return CheckTensor("Linear", "bias", *bias, 1, w.n(), {DType::kF32});
  return absl::OkStatus();
}

int QueryHeads(const Tensor& qkv, const KvLayer& kv, bool q_only) {
  if (kv.head_dim < 1) return 0;
  return static_cast<int>(qkv.cols / kv.head_dim) - (q_only ? 0 : 2 * kv.heads);
}

namespace {

// qkv and the KV layer of an AppendKv or Attention call (`op`; the window
// as CheckSeqTable's).
absl::Status CheckQkvAndKv(const char* op, const Tensor& qkv, const SeqTable& seqs,
                           const KvLayer& kv, KvFormat kv_format, int window, bool q_only = false) {
  FLOVER_RETURN_IF_ERROR(CheckSeqTable(op, seqs, &kv, window));
  FLOVER_RETURN_IF_ERROR(
      CheckTensor(op, "qkv", qkv, seqs.num_rows, kAnySize, {DType::kF32}));
  const int q_heads = QueryHeads(qkv, kv, q_only);
  if (kv.heads < 1 || kv.head_dim < 1 || qkv.cols % kv.head_dim != 0 || q_heads < kv.heads ||
      q_heads % kv.heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": qkv has ", qkv.cols, " columns, not (q_heads", q_only ? "" : absl::StrCat(" + 2 x ", kv.heads),
        ") x head_dim ", kv.head_dim, " with q_heads a multiple of the ", kv.heads,
        " key/value heads"));
  }
  if (kv.format != kv_format) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": the KV layer holds ",
                                                   KvFormatName(kv.format), ", this backend keeps ",
                                                   KvFormatName(kv_format)));
  }
  if (!KvDtypeHolds(kv.format.k, kv.head_dim) || !KvDtypeHolds(kv.format.v, kv.head_dim)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", KvFormatName(kv.format),
                                                   " cannot hold heads of ", kv.head_dim,
                                                   " dims (quantized formats need multiples of ",
                                                   kKvQuantGroup, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckAppendKvArgs(const Tensor& qkv, const SeqTable& seqs, const KvLayer& kv,
                               KvFormat kv_format) {
  return CheckQkvAndKv("AppendKv", qkv, seqs, kv, kv_format, kAppendOnly);
}

absl::Status CheckAttentionArgs(const Tensor& qkv, const SeqTable& seqs, const KvLayer& kv,
                                const AttentionParams& p, const Tensor& out, KvFormat kv_format,
                                DType act) {
  if (!(p.scale >= 0 && p.scale < 1e30f) || !(p.softcap >= 0 && p.softcap < 1e30f) ||
      p.window < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Attention: scale ", p.scale, ", soft-cap ",
                                                   p.softcap, ", window ", p.window,
                                                   " (each must be >= 0 and finite)"));
  }
  FLOVER_RETURN_IF_ERROR(CheckQkvAndKv("Attention", qkv, seqs, kv, kv_format, p.window, p.q_only));
  return CheckTensor("Attention", "out", out, seqs.num_rows,
                     int64_t{QueryHeads(qkv, kv, p.q_only)} * kv.head_dim, {DType::kF32, act});
}

absl::Status CheckEncoderAttentionArgs(const Tensor& qkv, absl::Span<const int32_t> group_ends, int heads,
                                       float scale, const Tensor& out) {
  auto bad = [](auto&&... what) { return absl::InvalidArgumentError(absl::StrCat("EncoderAttention: ", what...)); };
  if (heads < 1 || qkv.cols % (3 * int64_t{heads}) != 0) {
    return bad("qkv's ", qkv.cols, " columns are not Q, K and V of ", heads, " heads");
  }
  if (!std::isfinite(scale) || scale < 0) return bad("scale ", scale, " must be finite and not negative");
  FLOVER_RETURN_IF_ERROR(CheckTensor("EncoderAttention", "qkv", qkv, kAnySize, qkv.cols, {DType::kF32}));
  FLOVER_RETURN_IF_ERROR(CheckTensor("EncoderAttention", "out", out, qkv.rows, qkv.cols / 3, {DType::kF32}));
  int64_t begin = 0;
  for (int32_t end : group_ends) {
    if (end <= begin) return bad("group ends must increase from 1, got ", end, " after ", begin);
    begin = end;
  }
  if (begin != qkv.rows) return bad("the groups end at row ", begin, ", not at the ", qkv.rows, " rows");
  return absl::OkStatus();
}

absl::Status CheckGatherLastRowsArgs(const Tensor& x, const SeqTable& seqs, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckSeqTable("GatherLastRows", seqs, nullptr));
  FLOVER_RETURN_IF_ERROR(
      CheckTensor("GatherLastRows", "x", x, seqs.num_rows, kAnySize, {DType::kF32}));
  return CheckTensor("GatherLastRows", "out", out, seqs.num_seqs, x.cols, {DType::kF32});
}

absl::Status CheckPrepareWeightArgs(const HostValues& w, int K, int N, bool takes_blocks) {
  if (w.data == nullptr || K < 1 || N < 1) {
    return absl::InvalidArgumentError(absl::StrCat("PrepareWeight: no data for [", K, ", ", N, "]"));
  }
  if (w.is_blocks() && takes_blocks) return absl::OkStatus();
  if (w.is_blocks()) {
    return absl::InvalidArgumentError(
        "PrepareWeight: quantized blocks are taken only with --dtype=native on a backend that "
        "runs them");
  }
  if (!w.is_float()) {
    return absl::InvalidArgumentError(
        absl::StrCat("PrepareWeight: weights must be f32, bf16 or f16, not ", DTypeName(w.dtype)));
  }
  return absl::OkStatus();
}

absl::Status CheckScaleArgs(const Tensor& x, float s) {
  FLOVER_RETURN_IF_ERROR(CheckTensor("Scale", "x", x, kAnySize, kAnySize, {DType::kF32}));
  if (!std::isfinite(s)) return absl::InvalidArgumentError(absl::StrCat("Scale: the factor ", s, " is not finite"));
  return absl::OkStatus();
}

absl::Status CheckCopyArgs(const Tensor& src, const Tensor& dst) {
  if (src.data == nullptr || dst.data == nullptr || src.dtype != dst.dtype || src.elements() != dst.elements()) {
    return absl::InvalidArgumentError("Copy: src and dst must have memory, one dtype and as many elements");
  }
  const char* a = static_cast<const char*>(src.data);
  const char* b = static_cast<const char*>(dst.data);
  if (a < b + dst.bytes() && b < a + src.bytes()) return absl::InvalidArgumentError("Copy: src and dst overlap");
  return absl::OkStatus();
}

absl::Status CheckGateArgs(const Tensor& x, const Tensor& gate, GateKind act, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckTensor("Gate", "x", x, kAnySize, kAnySize, {DType::kF32}));
  FLOVER_RETURN_IF_ERROR(CheckTensor("Gate", "gate", gate, x.rows, x.cols, {DType::kF32}));
  FLOVER_RETURN_IF_ERROR(CheckTensor("Gate", "out", out, x.rows, x.cols, {DType::kF32}));
  if (act != GateKind::kIdentity && act != GateKind::kSigmoid && act != GateKind::kSilu &&
      act != GateKind::kGeluTanh) {
    return absl::InvalidArgumentError("Gate: unknown activation");
  }
  return absl::OkStatus();
}

absl::Status CheckStateTable(const char* op, const SeqTable& seqs, const StateTable& states,
                             const StateLayer& layer) {
  auto bad = [&](auto&&... what) { return absl::InvalidArgumentError(absl::StrCat(op, ": ", what...)); };
  FLOVER_RETURN_IF_ERROR(CheckSeqTable(op, seqs, nullptr));
  if (layer.conv == nullptr || layer.slots < 1) return bad("the state layer has no memory");
  if (seqs.num_seqs > 0 && states.host == nullptr) return bad("the state table has no host copy");
  FLOVER_RETURN_IF_ERROR(CheckTensor(op, "the state table", states.device, seqs.num_seqs, 2, {DType::kI32}));
  int64_t next_row = 0;
  for (int i = 0; i < seqs.num_seqs; ++i) {
    const SeqRows& r = seqs.host[i];
    const SeqState& st = states.host[i];
    if (r.row != next_row) return bad("sequence ", i, "'s rows do not follow the one before");
    next_row = int64_t{r.row} + r.len;
    if (st.read < SeqState::kNoSlot || st.read >= layer.slots || st.write < 0 || st.write >= layer.slots) {
      return bad("sequence ", i, " names state slots (read ", st.read, ", write ", st.write, ") outside the ",
                 layer.slots, " slots");
    }
    if (st.read == SeqState::kNoSlot && r.pos != 0) {
      return bad("sequence ", i, " starts at position ", r.pos, " with no state to read");
    }
    for (int j = 0; j < i; ++j) {
      const SeqState& other = states.host[j];
      if (other.write == st.write || other.write == st.read || (other.read == st.write)) {
        return bad("sequences ", j, " and ", i, " share a state slot one of them writes");
      }
    }
  }
  if (next_row != seqs.num_rows) return bad("the sequences' rows do not cover the batch's ", seqs.num_rows);
  return absl::OkStatus();
}

absl::Status CheckCausalConvArgs(const Tensor& x, const SeqTable& seqs, const StateTable& states,
                                 const StateLayer& layer, const Tensor& w, const Tensor* bias, ConvActivation act,
                                 const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckTensor("CausalConv", "x", x, seqs.num_rows, kAnySize, {DType::kF32}));
  FLOVER_RETURN_IF_ERROR(CheckTensor("CausalConv", "w", w, x.cols, kAnySize, {DType::kF32}));
  if (bias != nullptr) FLOVER_RETURN_IF_ERROR(CheckTensor("CausalConv", "bias", *bias, 1, x.cols, {DType::kF32}));
  FLOVER_RETURN_IF_ERROR(CheckTensor("CausalConv", "out", out, x.rows, x.cols, {DType::kF32}));
  if (w.cols < 2 || w.cols > kMaxConvKernel) {
    return absl::InvalidArgumentError(
        absl::StrCat("CausalConv: a kernel of ", w.cols, " taps (2 to ", kMaxConvKernel, ")"));
  }
  if (out.data == x.data) return absl::InvalidArgumentError("CausalConv: out must not be x");
  if (act != ConvActivation::kNone && act != ConvActivation::kSilu) {
    return absl::InvalidArgumentError("CausalConv: unknown activation");
  }
  if (layer.conv_elems != (w.cols - 1) * x.cols) {
    return absl::InvalidArgumentError(absl::StrCat("CausalConv: a window of ", layer.conv_elems,
                                                   " values per slot for ", w.cols - 1, " inputs of ", x.cols,
                                                   " channels"));
  }
  return CheckStateTable("CausalConv", seqs, states, layer);
}

absl::Status CheckGatedDeltaRuleArgs(const Tensor& qkv, const Tensor& b, const Tensor& a, const Tensor& decay_a,
                                     const Tensor& dt_bias, const SeqTable& seqs, const StateTable& states,
                                     const StateLayer& layer, const DeltaRuleParams& p, const Tensor& out) {
  const char* op = "GatedDeltaRule";
  if (p.k_heads < 1 || p.v_heads < 1 || p.v_heads % p.k_heads != 0 || p.k_dim < 1 || p.v_dim < 1 ||
      p.k_dim > kMaxDeltaHeadDim || p.v_dim > kMaxDeltaHeadDim) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", p.v_heads, " value heads of ", p.v_dim, " over ",
                                                   p.k_heads, " key heads of ", p.k_dim, " (value heads a multiple "
                                                   "of key heads; head sizes 1 to ", kMaxDeltaHeadDim, ")"));
  }
  const int64_t T = seqs.num_rows, Hv = p.v_heads;
  FLOVER_RETURN_IF_ERROR(CheckTensor(op, "qkv", qkv, T, 2 * int64_t{p.k_heads} * p.k_dim + Hv * p.v_dim,
                                     {DType::kF32}));
  FLOVER_RETURN_IF_ERROR(CheckTensor(op, "b", b, T, Hv, {DType::kF32}));
  FLOVER_RETURN_IF_ERROR(CheckTensor(op, "a", a, T, Hv, {DType::kF32}));
  FLOVER_RETURN_IF_ERROR(CheckTensor(op, "decay_a", decay_a, 1, Hv, {DType::kF32}));
  FLOVER_RETURN_IF_ERROR(CheckTensor(op, "dt_bias", dt_bias, 1, Hv, {DType::kF32}));
  FLOVER_RETURN_IF_ERROR(CheckTensor(op, "out", out, T, Hv * p.v_dim, {DType::kF32}));
  if (layer.scan == nullptr || layer.scan_elems != Hv * p.k_dim * p.v_dim) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": a scan state of ", layer.scan_elems,
                                                   " values per slot for ", Hv, " heads of ", p.k_dim, " x ",
                                                   p.v_dim));
  }
  return CheckStateTable(op, seqs, states, layer);
}

absl::Status CheckSelectiveScanArgs(const Tensor& xbc, const Tensor& dt, const Tensor& a, const Tensor& d,
                                    const Tensor& dt_bias, const SeqTable& seqs, const StateTable& states,
                                    const StateLayer& layer, const ScanParams& p, const Tensor& out) {
  const char* op = "SelectiveScan";
  if (p.heads < 1 || p.groups < 1 || p.heads % p.groups != 0 || p.head_dim < 1 || p.state_size < 1 ||
      p.state_size > kMaxScanStateSize || !(p.dt_min >= 0) || !(p.dt_max >= p.dt_min)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", p.heads, " heads of ", p.head_dim, " in ", p.groups,
                                                   " groups, state size ", p.state_size, ", dt in [", p.dt_min, ", ",
                                                   p.dt_max, "] (heads a multiple of groups; state size 1 to ",
                                                   kMaxScanStateSize, ")"));
  }
  const int64_t T = seqs.num_rows, H = p.heads, HP = H * p.head_dim, GN = int64_t{p.groups} * p.state_size;
  FLOVER_RETURN_IF_ERROR(CheckTensor(op, "xbc", xbc, T, HP + 2 * GN, {DType::kF32}));
  FLOVER_RETURN_IF_ERROR(CheckTensor(op, "dt", dt, T, H, {DType::kF32}));
  for (auto [name, t] : {std::pair{"a", &a}, std::pair{"d", &d}, std::pair{"dt_bias", &dt_bias}}) {
    FLOVER_RETURN_IF_ERROR(CheckTensor(op, name, *t, 1, H, {DType::kF32}));
  }
  FLOVER_RETURN_IF_ERROR(CheckTensor(op, "out", out, T, HP, {DType::kF32}));
  if (layer.scan == nullptr || layer.scan_elems != HP * p.state_size) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": a scan state of ", layer.scan_elems, " values per slot for ",
                                                   H, " heads of ", p.head_dim, " x ", p.state_size));
  }
  return CheckStateTable(op, seqs, states, layer);
}

}  // namespace flover::kernels
