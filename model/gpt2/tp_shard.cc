#include "model/gpt2/tp_shard.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_format.h"
#include "model/host_matrix.h"

namespace flover {
namespace {

// Rows [r0, r1) of a row-major [rows, cols] matrix.
std::vector<float> Rows(const std::vector<float>& m, int64_t cols, int64_t r0, int64_t r1) {
  return std::vector<float>(m.begin() + r0 * cols, m.begin() + r1 * cols);
}

std::vector<float> Slice(const std::vector<float>& v, int64_t b, int64_t e) {
  return std::vector<float>(v.begin() + b, v.begin() + e);
}

}  // namespace

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

GptWeights ShardGptWeights(const GptWeights& full, const GptConfig& c, const ShardSpec& spec) {
  const ShardShape sh = ShapeOf(c, spec);
  const int64_t C = c.n_embd, D = c.head_dim(), F = c.n_inner;
  const int64_t q0 = sh.head_begin * D, q1 = q0 + sh.heads * D;  // this rank's head columns
  const int64_t f0 = sh.inner_begin, f1 = f0 + sh.inner;
  GptWeights w;
  w.wte = Rows(full.wte, C, sh.vocab_begin, sh.vocab_end);
  if (!full.lm_head.empty()) w.lm_head = Rows(full.lm_head, C, sh.vocab_begin, sh.vocab_end);
  w.wpe = full.wpe;
  w.ln_f_g = full.ln_f_g;
  w.ln_f_b = full.ln_f_b;
  for (const LayerWeights& l : full.layers) {
    LayerWeights s;
    s.ln_1_g = l.ln_1_g;
    s.ln_1_b = l.ln_1_b;
    s.ln_2_g = l.ln_2_g;
    s.ln_2_b = l.ln_2_b;
    // [C, 3C] -> [C, 3 * C_local]: this rank's heads of Q, then K, then V.
    for (int part = 0; part < 3; ++part) {
      std::vector<float> cols = Cols(l.attn_w, C, 3 * C, part * C + q0, part * C + q1);
      std::vector<float> merged;
      if (part == 0) {
        s.attn_w = std::move(cols);
      } else {
        // Interleave per row: row r = [Q_r | K_r | V_r].
        const int64_t have = s.attn_w.size() / C, add = q1 - q0;
        merged.reserve(C * (have + add));
        for (int64_t r = 0; r < C; ++r) {
          merged.insert(merged.end(), s.attn_w.begin() + r * have, s.attn_w.begin() + (r + 1) * have);
          merged.insert(merged.end(), cols.begin() + r * add, cols.begin() + (r + 1) * add);
        }
        s.attn_w = std::move(merged);
      }
      const std::vector<float> b = Slice(l.attn_b, part * C + q0, part * C + q1);
      s.attn_b.insert(s.attn_b.end(), b.begin(), b.end());
    }
    s.attn_proj_w = Rows(l.attn_proj_w, C, q0, q1);  // [C_local, C]
    s.attn_proj_b = sh.adds_replicated_bias ? l.attn_proj_b : std::vector<float>(C, 0.0f);
    s.fc_w = Cols(l.fc_w, C, F, f0, f1);  // [C, F_local]
    s.fc_b = Slice(l.fc_b, f0, f1);
    s.mlp_proj_w = Rows(l.mlp_proj_w, C, f0, f1);  // [F_local, C]
    s.mlp_proj_b = sh.adds_replicated_bias ? l.mlp_proj_b : std::vector<float>(C, 0.0f);
    w.layers.push_back(std::move(s));
  }
  return w;
}

}  // namespace flover
