// The op interface every compute backend implements (CPU now, CUDA later).
//
// This header compiles without nvcc and has no engine includes: the engine
// calls a backend only through `Ops`. All tensors are dense, row-major float32
// in the backend's memory; shapes are given in a comment on each argument.
#ifndef FLOVER_KERNELS_OPS_H_
#define FLOVER_KERNELS_OPS_H_

#include <cstdint>
#include <string_view>

namespace flover::kernels {

// One sequence's rows in a ragged token batch: rows [row, row + len) of the
// batch are its tokens at positions [pos, pos + len), and its keys/values live
// in KV cache slot `slot`.
struct SeqRows {
  int32_t slot = 0;
  int32_t pos = 0;
  int32_t len = 0;
  int32_t row = 0;
};

// One layer's K and V arena. Layout of each: [slots, heads, max_seq, head_dim],
// so a slot's data is contiguous and a head's positions are contiguous.
struct KvLayer {
  float* k = nullptr;
  float* v = nullptr;
  int32_t slots = 0;
  int32_t heads = 0;
  int32_t max_seq = 0;
  int32_t head_dim = 0;

  int64_t head_stride() const { return int64_t{max_seq} * head_dim; }
  int64_t slot_stride() const { return head_stride() * heads; }
};

class Ops {
 public:
  virtual ~Ops() = default;
  virtual std::string_view name() const = 0;

  // out: [T, C] = wte[tokens[t]] + wpe[positions[t]].
  // tokens, positions: [T]; wte: [V, C]; wpe: [P, C]. Ids are pre-validated.
  virtual void Embed(const int32_t* tokens, const int32_t* positions, int T,
                     const float* wte, const float* wpe, int C,
                     float* out) = 0;

  // out: [T, C] = (x - mean) / sqrt(var + eps) * gamma + beta, per row.
  // x: [T, C]; gamma, beta: [C]. out may alias x.
  virtual void LayerNorm(const float* x, int T, int C, const float* gamma,
                         const float* beta, float eps, float* out) = 0;

  // out: [M, N] = x @ w + bias (+ out when accumulate).
  // x: [M, K]; w: [K, N]; bias: [N] or null.
  virtual void Linear(const float* x, int M, int K, const float* w, int N,
                      const float* bias, bool accumulate, float* out) = 0;

  // out: [M, N] = gelu_new(x @ w + bias). x: [M, K]; w: [K, N]; bias: [N].
  virtual void LinearGelu(const float* x, int M, int K, const float* w, int N,
                          const float* bias, float* out) = 0;

  // out: [M, N] = x @ w^T. x: [M, K]; w: [N, K] (an LM head tied to wte).
  virtual void LinearTransposed(const float* x, int M, int K, const float* w,
                                int N, float* out) = 0;

  // Causal self-attention over a ragged batch, one layer.
  // qkv: [T, 3 * H * D] (Q, K, V of the local heads); out: [T, H * D].
  // Writes each row's K and V into kv at (seq.slot, head, position) first,
  // then every row attends to positions [0, its position] of its own slot.
  virtual void Attention(const float* qkv, const SeqRows* seqs, int num_seqs,
                         const KvLayer& kv, float* out) = 0;

  // Copies positions [0, len) of every head from slot `from` to slot `to`.
  virtual void MoveKvSlot(const KvLayer& kv, int from, int to, int len) = 0;
};

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_OPS_H_
