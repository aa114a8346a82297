#include "model/llama/llama_shard.h"

#include <tuple>

#include "absl/strings/str_cat.h"

namespace flover {

absl::Status ValidateLlamaShard(const LlamaConfig& c, const ShardSpec& s) {
  if (s.tp_size < 1 || s.tp_rank < 0 || s.tp_rank >= s.tp_size) {
    return absl::InvalidArgumentError(absl::StrCat("tp rank ", s.tp_rank, " of ", s.tp_size,
                                                   " is out of range"));
  }
  if (c.n_kv_head % s.tp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tp=", s.tp_size, " does not divide the model's ", c.n_kv_head, " key/value heads"));
  }
  if (c.intermediate % s.tp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tp=", s.tp_size, " does not divide the MLP width ", c.intermediate));
  }
  if (c.vocab_size < s.tp_size) return absl::InvalidArgumentError("--tp is larger than the vocabulary");
  return absl::OkStatus();
}

LlamaShard LlamaShapeOf(const LlamaConfig& c, const ShardSpec& s) {
  LlamaShard out;
  out.kv_heads = c.n_kv_head / s.tp_size;
  out.kv_head_begin = s.tp_rank * out.kv_heads;
  out.q_heads = c.n_head / s.tp_size;  // whole groups: n_head is a multiple of n_kv_head
  out.q_head_begin = s.tp_rank * out.q_heads;
  out.inner = c.intermediate / s.tp_size;
  out.inner_begin = s.tp_rank * out.inner;
  std::tie(out.vocab_begin, out.vocab_end) = VocabRange(c.vocab_size, s);
  return out;
}

}  // namespace flover
