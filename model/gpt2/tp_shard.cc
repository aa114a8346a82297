#include "model/gpt2/tp_shard.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_format.h"

namespace flover {
absl::Status ValidateShardSpec(const GptConfig& c, const ShardSpec& s) {
  if (s.tp_size < 1 || s.tp_rank < 0 || s.tp_rank >= s.tp_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tp rank %d of %d is out of range", s.tp_rank, s.tp_size));
  }
  if (c.n_head % s.tp_size != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--tp=%d does not divide the model's %d attention heads", s.tp_size, c.n_head));
  }
  if (c.n_inner % s.tp_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--tp=%d does not divide the MLP width %d", s.tp_size, c.n_inner));
  }
  if (c.vocab_size < s.tp_size) {
    return absl::InvalidArgumentError("--tp is larger than the vocabulary");
  }
  return absl::OkStatus();
}

ShardShape ShapeOf(const GptConfig& c, const ShardSpec& s) {
  ShardShape out;
  out.heads = c.n_head / s.tp_size;
  out.head_begin = s.tp_rank * out.heads;
  out.inner = c.n_inner / s.tp_size;
  out.inner_begin = s.tp_rank * out.inner;
  std::tie(out.vocab_begin, out.vocab_end) = VocabRange(c.vocab_size, s);
  out.adds_replicated_bias = s.tp_rank == 0;
  return out;
}

}  // namespace flover
