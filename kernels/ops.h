// The op interface every compute backend implements (CPU now, CUDA later).
//
// This header compiles without nvcc and has no engine includes: the engine
// calls a backend only through `Ops`. All tensors are dense, row-major float32
// in the backend's memory; shapes are given in a comment on each argument.
#ifndef FLOVER_KERNELS_OPS_H_
#define FLOVER_KERNELS_OPS_H_

#include <cstdint>
#include <memory>
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

// How keys and values are stored. kBF16 halves the cache and the bytes
// attention reads per step; values are rounded to nearest even when written
// and every product and sum stays float32.
enum class KvDtype {
  kF32,
  kBF16,
};

inline const char* KvDtypeName(KvDtype dtype) { return dtype == KvDtype::kBF16 ? "bf16" : "f32"; }
inline int KvDtypeBytes(KvDtype dtype) { return dtype == KvDtype::kBF16 ? 2 : 4; }

// One layer's K and V arena; a slot's data is contiguous in both.
//   v: [slots, heads, padded_seq, head_dim]
//   k: [slots, heads, padded_seq / kKeyBlock, head_dim, kKeyBlock]
// Keys are transposed within blocks of kKeyBlock positions: a query's scores
// are vectorized multiply-adds over positions (no horizontal sums), and the
// keys of positions [0, n) are ceil(n / kKeyBlock) contiguous blocks whatever
// max_seq is (a [head_dim, max_seq] layout puts rows max_seq apart, which
// for max_seq = 1024 maps them onto the same cache sets).
struct KvLayer {
  static constexpr int kKeyBlock = 32;

  void* k = nullptr;  // elements of `dtype`: float, or bfloat16 bits (uint16_t)
  void* v = nullptr;
  int32_t slots = 0;
  int32_t heads = 0;
  int32_t max_seq = 0;  // positions per slot
  int32_t head_dim = 0;
  KvDtype dtype = KvDtype::kF32;

  // Offsets below count elements of `dtype`.

  static int64_t PaddedSeq(int64_t max_seq) {
    return (max_seq + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
  }
  int64_t padded_seq() const { return PaddedSeq(max_seq); }
  int64_t head_stride() const { return padded_seq() * head_dim; }
  int64_t slot_stride() const { return head_stride() * heads; }
  // Offset of key (dim d, position p) from its head's start in k.
  int64_t key_offset(int d, int p) const {
    return int64_t{p / kKeyBlock} * head_dim * kKeyBlock + int64_t{d} * kKeyBlock + p % kKeyBlock;
  }
};

// How a stored weight matrix is laid out in the caller's memory.
enum class WeightLayout {
  kInOut,  // [K, N]: inputs by outputs (Hugging Face Conv1D)
  kOutIn,  // [N, K]: one row per output (nn.Linear; wte used as the LM head)
};

// The precision Linear multiplies in. Inputs, outputs, biases and every other
// op stay float32; with kBF16 the weights are stored and the inputs rounded
// (to nearest even) to bfloat16, and products are summed in float32.
enum class MatmulDtype {
  kF32,
  kBF16,
};

inline const char* MatmulDtypeName(MatmulDtype dtype) {
  return dtype == MatmulDtype::kBF16 ? "bf16" : "f32";
}

// What Linear does with x @ W before storing it.
enum class Epilogue {
  kBias,          // out = x @ W + bias (bias may be null)
  kBiasGelu,      // out = gelu_new(x @ W + bias)
  kBiasResidual,  // out += x @ W + bias (the residual add, fused)
};

// A weight matrix prepared once, at load, in the backend's preferred layout.
class Weight {
 public:
  virtual ~Weight() = default;
  virtual int k() const = 0;  // inputs
  virtual int n() const = 0;  // outputs
};

// A backend's ops. Not thread-safe: one engine thread drives it (the ops
// themselves use every core).
//
// Batch invariance: every op computes a row's result with the same
// arithmetic whatever other rows or sequences share the call, so a sequence's
// output is bitwise independent of what it is batched with.
class Ops {
 public:
  virtual ~Ops() = default;
  virtual std::string_view name() const = 0;

  // out: [T, C] = wte_rows[tokens[t] - vocab_begin] (zero when the token is
  // outside [vocab_begin, vocab_end): another tensor-parallel rank holds it)
  // + wpe[positions[t]] (when wpe is not null).
  // tokens, positions: [T]; wte_rows: [vocab_end - vocab_begin, C]; wpe: [P, C].
  virtual void Embed(const int32_t* tokens, const int32_t* positions, int T,
                     const float* wte_rows, int vocab_begin, int vocab_end,
                     const float* wpe, int C, float* out) = 0;

  // out: [n] += x: [n].
  virtual void Add(const float* x, int64_t n, float* out) = 0;

  // out: [T, C] = (x - mean) / sqrt(var + eps) * gamma + beta, per row.
  // x: [T, C]; gamma, beta: [C]. out may alias x.
  virtual void LayerNorm(const float* x, int T, int C, const float* gamma,
                         const float* beta, float eps, float* out) = 0;

  // Prepares w: [K, N] or [N, K] per `layout` (copied; w may be freed after).
  virtual std::unique_ptr<Weight> PrepareWeight(const float* w, int K, int N,
                                                WeightLayout layout) = 0;

  // out: [M, N] = epilogue(x @ W + bias). x: [M, K]; bias: [N] or null.
  virtual void Linear(const float* x, int M, const Weight& w, const float* bias,
                      Epilogue epilogue, float* out) = 0;

  // Builds now what Linear on w (with or without a bias, with `epilogue`)
  // would otherwise build on first use for any M <= max_rows: compiled
  // kernels and scratch space. Afterwards such calls allocate nothing, so a
  // server pays this once at start instead of as latency spikes and memory
  // growth while it serves.
  virtual void PrepareLinear(const Weight& w, int max_rows, bool has_bias, Epilogue epilogue) {}

  // Causal self-attention over a ragged batch, one layer.
  // qkv: [T, 3 * H * D] (Q, K, V of the local heads); out: [T, H * D].
  // Writes each row's K and V into kv at (seq.slot, head, position) first,
  // then every row attends to positions [0, its position] of its own slot.
  virtual void Attention(const float* qkv, const SeqRows* seqs, int num_seqs,
                         const KvLayer& kv, float* out) = 0;

  // Copies positions [0, len) of every head from slot `from` to slot `to`
  // (values exactly; keys in the whole blocks that hold them).
  virtual void MoveKvSlot(const KvLayer& kv, int from, int to, int len) = 0;

  // The element type this backend's Attention and MoveKvSlot keep K and V in;
  // the KV cache is sized from it.
  virtual KvDtype kv_dtype() const { return KvDtype::kF32; }
};

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_OPS_H_
