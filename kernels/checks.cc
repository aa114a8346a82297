#include "kernels/checks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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

absl::Status CheckSeqTable(const char* op, const SeqTable& seqs, const KvLayer* kv) {
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
  int max_context = 0;
  for (int i = 0; i < seqs.num_seqs; ++i) {
    const SeqRows& s = seqs.host[i];
    if (s.len < 1 || s.row < 0 || int64_t{s.row} + s.len > seqs.num_rows || s.pos < 0) {
      return bad("sequence ", i, " has rows [", s.row, ", ", int64_t{s.row} + s.len,
                 ") outside the batch's ", seqs.num_rows, " rows");
    }
    if (kv != nullptr && (s.slot < 0 || s.slot >= kv->slots || int64_t{s.pos} + s.len > kv->max_seq)) {
      return bad("sequence ", i, " (slot ", s.slot, ", positions [", s.pos, ", ",
                 int64_t{s.pos} + s.len, ")) does not fit the KV cache (", kv->slots, " slots x ",
                 kv->max_seq, " positions)");
    }
    max_context = std::max(max_context, s.pos + s.len);
  }
  if (max_context != seqs.max_context) {
    return bad("max_context is ", seqs.max_context, " but the sequences reach ", max_context);
  }
  return absl::OkStatus();
}

absl::Status CheckKvMove(const KvLayer& kv, int from, int to, int len) {
  if (from < 0 || to < 0 || from >= kv.slots || to >= kv.slots || len < 0 || len > kv.max_seq) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MoveKvSlot: moving ", len, " positions from slot ", from, " to slot ", to,
        " does not fit the KV cache (", kv.slots, " slots x ", kv.max_seq, " positions)"));
  }
  return absl::OkStatus();
}

}  // namespace flover::kernels
