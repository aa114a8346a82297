#include "model/llama/llama_shard.h"

#include <tuple>

#include "absl/strings/str_cat.h"
#include "model/host_matrix.h"

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

LlamaWeights ShardLlamaWeights(const LlamaWeights& full, const LlamaConfig& c,
                               const ShardSpec& spec) {
  const LlamaShard sh = LlamaShapeOf(c, spec);
  const int64_t C = c.hidden, D = c.head_dim, F = c.intermediate, Q = c.q_dim(), KV = c.kv_dim();
  const int64_t q0 = sh.q_head_begin * D, q1 = q0 + sh.q_heads * D;
  const int64_t k0 = sh.kv_head_begin * D, k1 = k0 + sh.kv_heads * D;
  const int64_t f0 = sh.inner_begin, f1 = f0 + sh.inner;
  LlamaWeights w;
  AppendRows(full.embed, C, sh.vocab_begin, sh.vocab_end, &w.embed);
  if (!full.lm_head.empty()) AppendRows(full.lm_head, C, sh.vocab_begin, sh.vocab_end, &w.lm_head);
  w.norm = full.norm;
  for (const LlamaLayerWeights& l : full.layers) {
    LlamaLayerWeights s;
    s.attn_norm = l.attn_norm;
    s.mlp_norm = l.mlp_norm;
    // qkv: [Q + 2 KV, C] -> this rank's Q rows, then K rows, then V rows.
    AppendRows(l.qkv, C, q0, q1, &s.qkv);
    AppendRows(l.qkv, C, Q + k0, Q + k1, &s.qkv);
    AppendRows(l.qkv, C, Q + KV + k0, Q + KV + k1, &s.qkv);
    s.o = Cols(l.o, C, Q, q0, q1);  // [C, Q_local]
    // gate_up: [2F, C] -> this rank's gate rows, then its up rows.
    AppendRows(l.gate_up, C, f0, f1, &s.gate_up);
    AppendRows(l.gate_up, C, F + f0, F + f1, &s.gate_up);
    s.down = Cols(l.down, C, F, f0, f1);  // [C, F_local]
    w.layers.push_back(std::move(s));
  }
  return w;
}

}  // namespace flover
