// The contract every compute backend keeps (CPU in kernels/cpu, CUDA in
// kernels/cuda), in the manner of ggml-backend:
//
// - The backend owns its memory. Parameters, activations, the KV arena and
//   work space are Buffers it allocates; callers hold Tensors (addresses in
//   the backend's memory) and never dereference them. Host data goes in and
//   out only through Upload and Download.
// - Ops are enqueued in order on the backend's one stream. Errors known at
//   once (a bad shape, a library call that fails) come back from the op;
//   errors of asynchronous execution come back from Synchronize (and from
//   Download, which synchronizes).
// - Batch invariance: every op computes a row's result with the same
//   arithmetic whatever other rows or sequences share the call, so a
//   sequence's output is bitwise independent of what it is batched with.
//
// Not thread-safe: one engine thread drives a backend. This header compiles
// without nvcc and has no engine includes.
#ifndef FLOVER_KERNELS_BACKEND_H_
#define FLOVER_KERNELS_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/host_values.h"
#include "kernels/kv_layer.h"
#include "kernels/op_params.h"
#include "kernels/tensor.h"

namespace flover::kernels {

// The most experts a router may choose among.
inline constexpr int kMaxExperts = 1024;

// Bumped whenever this header changes in a way that breaks a backend module
// built against an older copy (kernels/backend_factory checks it on load).
inline constexpr int kBackendAbiVersion = 16;

// The sequences of one forward call, in host memory for the host side of an
// op and in the backend's memory for its kernels (uploaded once per step).
struct SeqTable {
  const SeqRows* host = nullptr;  // [num_seqs]
  int num_seqs = 0;
  Tensor device;                  // i32 [num_seqs, 4]: the same rows
  int num_rows = 0;               // T: sum of len
  // At least the max over sequences of pos + len: what the launches are
  // sized for. Every row still reads only its own positions, so a larger
  // bound (a recorded step claims the longest context a sequence may have)
  // costs idle work, never a different result.
  int max_context = 0;
  // The block table: each sequence's KV block ids, one list after another
  // (SeqRows::blocks is where a sequence's starts); it covers positions
  // [0, pos + len) of each.
  const int32_t* block_ids = nullptr;  // [num_block_ids]
  int num_block_ids = 0;
  Tensor block_ids_device;             // i32 [1, num_block_ids]: the same ids
  // Null (causal), or each row's last attended position, host [num_rows]
  // and i32 [1, num_rows] in the backend's memory: its own position or
  // past it, within its sequence's rows of this call, where a prompt's
  // rows attend to each other both ways (Gemma 3's images: each row of an
  // image sees the whole image). A window still counts back from the
  // row's own position.
  const int32_t* horizon = nullptr;
  Tensor horizon_device;
};

// Each sequence's recurrent state slots in a step (ForwardBatch::states),
// in host memory for an op's host side and in the backend's memory for its
// kernels (uploaded once per step).
struct StateTable {
  const SeqState* host = nullptr;  // [num_seqs] of the step's SeqTable
  Tensor device;                   // i32 [num_seqs, 2]: the same slots
};

// How a stored weight matrix is laid out in host memory.
enum class WeightLayout {
  kInOut,  // [K, N]: inputs by outputs (Hugging Face Conv1D)
  kOutIn,  // [N, K]: one row per output (nn.Linear; wte used as the LM head)
};

// The precision Linear multiplies in. Biases, the residual stream and every
// other op stay float32; with kBF16 / kF16 the weights are stored and the
// inputs rounded (to nearest even) to that type, and products are summed in
// float32. kInt8 (CPU only, kernels/cpu/int8_linear.h) stores weights as int8
// with a scale per output column and quantizes the inputs per row, summing in
// int32. kNative keeps a GGUF file's quantized blocks as they are
// (kernels/block_format.h; the CPU's kernels are kernels/cpu/block_linear.h)
// and runs float weights in f32. The CPU backend runs f32, bf16, int8 and
// native; CUDA f32, bf16 and f16.
enum class MatmulDtype {
  kF32,
  kBF16,
  kF16,
  kInt8,
  kNative,
};

inline const char* MatmulDtypeName(MatmulDtype dtype) {
  switch (dtype) {
    case MatmulDtype::kF32: return "f32";
    case MatmulDtype::kBF16: return "bf16";
    case MatmulDtype::kF16: return "f16";
    case MatmulDtype::kInt8: return "int8";
    case MatmulDtype::kNative: return "native";
  }
  return "?";
}

inline DType ToDType(MatmulDtype dtype) {
  switch (dtype) {
    case MatmulDtype::kF32: return DType::kF32;
    case MatmulDtype::kBF16: return DType::kBF16;
    case MatmulDtype::kF16: return DType::kF16;
    case MatmulDtype::kInt8: return DType::kF32;  // int8 inputs are quantized inside Linear
    case MatmulDtype::kNative: return DType::kF32;
  }
  return DType::kF32;
}

// What Linear does with x @ W before storing it.
enum class Epilogue {
  kBias,          // out = x @ W + bias (bias may be null)
  kBiasGelu,      // out = gelu_new(x @ W + bias)
  kBiasResidual,  // out += x @ W + bias (the residual add, fused)
};

// A weight matrix prepared once, at load, in the backend's memory and
// preferred layout.
class Weight {
 public:
  virtual ~Weight() = default;
  virtual int k() const = 0;  // inputs
  virtual int n() const = 0;  // outputs
};

// Rows of quantized blocks of one format (block_format.h) kept as a GGUF
// file stores them, for EmbedBlocks: a --dtype=native model's embedding,
// looked up row by row as ggml's get_rows does instead of dequantized whole.
class BlockRows {
 public:
  virtual ~BlockRows() = default;
  virtual BlockFormat format() const = 0;
  virtual int64_t rows() const = 0;
  virtual int cols() const = 0;  // values per row
};

// What a backend runs on, for start-up lines and GetModelInfo.
struct DeviceInfo {
  std::string kind;         // "cpu" or "cuda"
  std::string name;         // e.g. "NVIDIA H100 80GB HBM3", or the CPU's model name
  int ordinal = 0;          // which GPU of this host
  int64_t total_bytes = 0;  // device memory; 0 when not applicable (CPU)
  int64_t free_bytes = 0;
};

// What a backend is created for (kernels/backend_factory).
struct BackendOptions {
  std::string device = "cpu";  // "cpu", "cuda" or "cuda:N" (the Nth GPU of this host)
  MatmulDtype matmul = MatmulDtype::kF32;
  KvFormat kv;  // keys' and values' dtypes (--kv_dtype)
  // Replay recorded steps (CUDA graphs) where the backend can (--cuda_graphs).
  bool record_steps = true;
};

// A device's own peak figures, measured on demand, for benchmarks to print
// beside their results (a roofline from the same run). Optional.
class Roofline {
 public:
  virtual ~Roofline() = default;
  // TFLOP/s of the vendor library's GEMM, with its own choice of algorithm,
  // at [M, K] x [K, N] in `dtype` with float32 sums.
  virtual absl::StatusOr<double> GemmTflops(int M, int N, int K, MatmulDtype dtype) = 0;
  // Device-to-device copy: bytes copied per second, in GB/s.
  virtual absl::StatusOr<double> CopyGBs(int64_t bytes) = 0;
  // One line per GEMM shape prepared so far: which kernel runs it (the
  // vendor library's chosen algorithm, or a fallback), so a benchmark shows
  // where a slow shape comes from.
  virtual std::vector<std::string> GemmPlans() const { return {}; }
};

class Backend : public Allocator {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;  // "cpu" or "cuda"
  virtual DeviceInfo Device() const = 0;
  virtual MatmulDtype matmul_dtype() const = 0;
  // How Attention keeps K and V (each its dtype); the KV cache is sized
  // from it.
  virtual KvFormat kv_format() const = 0;
  // The dtype callers should keep Linear's inputs in (LayerNorm, Attention
  // and gelu outputs): f32 on the CPU (which rounds inside Linear), the
  // matmul dtype on CUDA. Either way a row sees the same rounding.
  virtual DType activation_dtype() const { return DType::kF32; }

  // ---- Memory -------------------------------------------------------------
  // Uninitialized memory for [rows, cols] of `dtype`; ResourceExhausted,
  // naming the size and the device, when there is not enough.
  virtual absl::StatusOr<Buffer> Allocate(DType dtype, int64_t rows, int64_t cols) = 0;
  // dst.bytes() bytes from host memory (laid out as dst's dtype). The host
  // memory may be reused when this returns.
  virtual absl::Status Upload(const void* host, const Tensor& dst) = 0;
  // src.bytes() bytes into host memory; waits for the work that writes src.
  virtual absl::Status Download(const Tensor& src, void* host) = 0;
  // A host address for t when the backend's memory is host memory (the CPU),
  // so results can be read without a copy; nullptr otherwise.
  virtual void* HostAddress(const Tensor& t) { return nullptr; }
  // Waits for every op enqueued so far; returns the first error any of them
  // met while running (a kernel fault, a failed library call).
  virtual absl::Status Synchronize() = 0;
  // The stream ops run on (a cudaStream_t on CUDA; null on the CPU), for
  // device collectives that must run in order with them.
  virtual void* stream() { return nullptr; }
  // The device's peak figures, where the backend can measure them (CUDA).
  virtual Roofline* roofline() { return nullptr; }
  // Host memory that Download fills fastest (page-locked on CUDA), or null
  // where plain memory serves as well (the default). Freed by FreeStaging.
  virtual void* AllocateStaging(size_t bytes) { return nullptr; }
  virtual void FreeStaging(void* host) {}

  // ---- Recorded steps -----------------------------------------------------
  // Runs `enqueue`, which only enqueues ops of this backend. A backend that
  // can record work (CUDA graphs) records what `enqueue` enqueues the second
  // time it meets `key` (the first call runs plainly, so work space is grown
  // and algorithms chosen outside a recording) and from then on replays the
  // recording instead of calling `enqueue`. The caller promises that every
  // call with one key enqueues the same ops, on the same memory, with the
  // same host-side arguments: only the contents of device memory may
  // differ. Where a recording cannot be made, `enqueue` runs plainly.
  virtual absl::Status RunRecorded(const std::string& key,
                                   const std::function<absl::Status()>& enqueue) {
    return enqueue();
  }
  // Drops every recording: callers call it before freeing memory that a key
  // of theirs refers to (the backend drops them itself when its own work
  // space moves).
  virtual void ForgetRecorded() {}
  // Steps replayed from recordings so far (0 where nothing is recorded).
  virtual int64_t replays() const { return 0; }

  // ---- Weights ------------------------------------------------------------
  // Prepares w: [K, N] or [N, K] per `layout`, host values in the dtype
  // the checkpoint stored them in (f32, bf16 or f16; copied, w may be freed
  // after), in the matmul dtype. The result is the same as for w widened to
  // float32 first; a backend that keeps the stored dtype (bf16 weights for
  // bf16 matmuls) takes them as they are. Quantized blocks (w.is_blocks(),
  // [N, K] only) are taken by a backend created with kNative that runs their
  // format; InvalidArgument otherwise, and for another dtype.
  virtual absl::StatusOr<std::unique_ptr<Weight>> PrepareWeight(HostValues w, int K, int N,
                                                                WeightLayout layout) = 0;
  // Builds now what Linear on w (with or without a bias, with `epilogue`)
  // would otherwise build on first use for any M <= max_rows: compiled
  // kernels, chosen algorithms, scratch space. Afterwards such calls
  // allocate nothing, so a server pays this once at start.
  virtual absl::Status PrepareLinear(const Weight& w, int max_rows, bool has_bias,
                                     Epilogue epilogue) {
    return absl::OkStatus();
  }

  // Copies `rows` rows of `cols` values in `format` (BlockRowBytes(format,
  // cols) bytes each, one after another) into this backend's memory. cols is
  // a whole number of blocks.
  virtual absl::StatusOr<std::unique_ptr<BlockRows>> PrepareBlockRows(BlockFormat format,
                                                                      const uint8_t* bytes,
                                                                      int64_t rows, int cols) = 0;

  // Rows of host memory read in place (a mapped file's): row r of `rows`,
  // `cols` values in `format`, at base + r * row_stride; `owner` keeps the
  // memory alive as long as the rows. Unimplemented where the backend cannot
  // read host memory (CUDA): callers copy with PrepareBlockRows instead.
  virtual absl::StatusOr<std::unique_ptr<BlockRows>> MapBlockRows(BlockFormat format, const uint8_t* base,
                                                                  int64_t rows, int cols, int64_t row_stride,
                                                                  std::shared_ptr<const void> owner) {
    return absl::UnimplementedError("this backend does not read host memory in place");
  }

  // ---- Ops ----------------------------------------------------------------
  // out: f32 [T, C] = wte_rows[tokens[t] - vocab_begin] (zero when the token
  // is outside [vocab_begin, vocab_begin + wte_rows.rows): another tensor-
  // parallel rank holds it) + wpe[positions[t]] (when wpe is not null).
  // tokens, positions: i32 [1, T]; wte_rows: f32 [V_local, C]; wpe: f32 [P, C].
  virtual absl::Status Embed(const Tensor& tokens, const Tensor& positions,
                             const Tensor& wte_rows, int vocab_begin, const Tensor* wpe,
                             const Tensor& out) = 0;

  // Embed with the rows in blocks: out: f32 [T, C] = scale * row
  // tokens[t] - vocab_begin of `table` dequantized as ggml does
  // (kernels/ggml_dequant.h; zero outside [vocab_begin, vocab_begin +
  // table.rows())) + wpe[positions[t]] (when wpe is not null). C is
  // table.cols(); the other arguments as Embed's.
  virtual absl::Status EmbedBlocks(const Tensor& tokens, const Tensor& positions,
                                   const BlockRows& table, int vocab_begin, float scale,
                                   const Tensor* wpe, const Tensor& out) = 0;

  // out: i32 [1, R]: for each row of x (f32 [R, V]) the index of its
  // largest value, the first of equal ones, as std::max_element over the
  // row picks it: NaNs are passed over, except that a row starting with a
  // NaN gives 0. Greedy decoding where the logits are: only ids come back.
  virtual absl::Status ArgmaxRows(const Tensor& x, const Tensor& out) = 0;

  // out: f32 [R, C] += x: f32 [R, C].
  virtual absl::Status Add(const Tensor& x, const Tensor& out) = 0;

  // dst = src, bytes as they are (the same dtype and element count, not
  // overlapping): a recurrent state slot kept as a prefix checkpoint.
  virtual absl::Status Copy(const Tensor& src, const Tensor& dst) = 0;

  // out: [T, C] = (x - mean) / sqrt(var + eps) * gamma + beta, per row.
  // x: f32 [T, C]; gamma, beta: f32 [1, C]; out: f32 or activation_dtype().
  virtual absl::Status LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 float eps, const Tensor& out) = 0;

  // out: [T, C] = x / sqrt(mean(x^2) + eps) * gamma, per row (RMSNorm).
  // x: f32 [T, C]; gamma: f32 [1, C]; out: f32 or activation_dtype().
  virtual absl::Status RmsNorm(const Tensor& x, const Tensor& gamma, float eps,
                               const Tensor& out) = 0;

  // RMSNorm of groups of columns, in place: in every row of x: f32 [T, W],
  // each of `groups` consecutive groups of G = gamma.cols columns, starting
  // at column `first`, becomes v / sqrt(mean(v^2) + eps) * gamma over that
  // group alone. gamma: f32 [1, G]; first + groups * G <= W. Q/K norms:
  // Qwen3's and Gemma 3's (a group per head of Q, then of K, in qkv), or
  // OLMoE's (one group of all of Q).
  virtual absl::Status GroupRmsNorm(const Tensor& x, int first, int groups, const Tensor& gamma,
                                    float eps) = 0;

  // Rotary position embeddings, in place on the Q and K parts of qkv: f32
  // [T, (q_heads + 2 * kv_heads) * head_dim] (V untouched; kv_heads 0: Q alone). In every head,
  // dim pair i (per p.style) turns by the angle positions[t] * inv_freq[i]
  // (f32 product); dims past 2 * inv_freq.cols stay as they are.
  // positions: i32 [1, T]; inv_freq: f32 [1, R/2] with R <= head_dim.
  virtual absl::Status Rope(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq,
                            const RopeParams& p) = 0;

  // out: [T, F] = act(gate) * up (SwiGLU for kSilu, GeGLU for kGeluTanh),
  // where gate_up: f32 [T, 2F] holds gate in its first F columns and up in
  // the rest; out: f32 or activation_dtype().
  virtual absl::Status Glu(const Tensor& gate_up, GluKind kind, const Tensor& out) = 0;

  // x: f32 [R, C] = tanh(x / cap) * cap, in place (Gemma 2's final logit
  // soft-capping). cap > 0.
  virtual absl::Status SoftCap(const Tensor& x, float cap) = 0;

  // x: f32 [R, C] = 1 / (1 + exp(-x)), in place (Qwen2-MoE's gate on its
  // shared expert).
  virtual absl::Status Sigmoid(const Tensor& x) = 0;

  // x: f32 [R, C] *= s, in place (Granite's residual multiplier on a
  // branch, or on a mixture's router weights).
  virtual absl::Status Scale(const Tensor& x, float s) = 0;

  // out: [M, N] = epilogue(x @ W + bias). x: [M, K], f32 or
  // activation_dtype(); bias: f32 [1, N] or null; out: f32 (kBiasGelu may
  // also write activation_dtype()).
  virtual absl::Status Linear(const Tensor& x, const Weight& w, const Tensor* bias,
                              Epilogue epilogue, const Tensor& out) = 0;

  // Writes each row's K and V (qkv: f32 [T, (Hq + 2 * Hkv) * D], a row
  // being Q of Hq query heads, then K and V of the Hkv = kv.heads key/value
  // heads) into the block of its position (the sequence's block table).
  // Attention reads them from there: a step appends before it attends.
  virtual absl::Status AppendKv(const Tensor& qkv, const SeqTable& seqs, const KvLayer& kv) = 0;

  // Causal self-attention over a ragged batch, one layer, of Q in qkv (as
  // for AppendKv; Hq = Hkv without grouped-query attention, else query head
  // h reads key/value head h / (Hq / Hkv)) against the cached keys and
  // values. out: [T, Hq * D], f32 or activation_dtype(). Every row attends to
  // positions [0, its position] of its own sequence (the last p.window of
  // them with a window; up to its seqs.horizon where that is given), in
  // order of position whatever blocks hold them.
  virtual absl::Status Attention(const Tensor& qkv, const SeqTable& seqs, const KvLayer& kv,
                                 const AttentionParams& p, const Tensor& out) = 0;

  // Bidirectional self-attention within groups of rows (a vision encoder's
  // images): qkv: f32 [T, 3 * heads * D], a row being Q, K and V of `heads`
  // heads each; group_ends: host memory, each group's end row, increasing,
  // the last T (group g is rows [end of g - 1, end of g)). Every row attends
  // to every row of its group, scores scaled by `scale` (0: 1 / sqrt(D)),
  // softmax in f32 in order of row, so a row's result is the same in any
  // batch. out: f32 [T, heads * D].
  virtual absl::Status EncoderAttention(const Tensor& qkv, absl::Span<const int32_t> group_ends, int heads,
                                        float scale, const Tensor& out) = 0;

  // ---- Mixture of experts ---------------------------------------------------
  // A router's choice for each row of logits: f32 [T, E]: ids: i32 [T, p.k],
  // the k experts of largest score (in decreasing order; of equal scores
  // the lower id first), and weights: f32 [T, p.k], theirs per p.scoring,
  // computed in f32 in a fixed order (a row's result is the same in any
  // batch). 1 <= k <= E <= kMaxExperts.
  virtual absl::Status Route(const Tensor& logits, const RouterParams& p, const Tensor& ids,
                             const Tensor& weights) = 0;

  // out: f32 [T * k, N], row t * k + j = x_r @ experts[ids[t, j]] (+ row
  // ids[t, j] of bias: f32 [E, N], gpt-oss's expert biases; null: none), where
  // x_r is row t of x: [T, K] or row t * k + j of x: [T * k, K] (f32 or
  // activation_dtype()); ids: i32 [T, k] as Route writes them, each below
  // experts.size(); every expert's k() = K and n() = N. The rows are
  // grouped by expert (ggml's mul_mat_id), and each row's result is
  // independent of the other rows and of which experts they chose: bitwise
  // that of Linear on the row alone where each expert's rows run through
  // Linear (the CPU; CUDA grouping on the host), or of the one grouped GEMM's
  // fixed arithmetic (CUDA grouping on the device: LinearByIdWaits false).
  // Where the ids are read on the host an id out of range is refused; the
  // device grouping cannot refuse it and gives its route a zero row.
  virtual absl::Status LinearById(const Tensor& x, absl::Span<const Weight* const> experts,
                                  const Tensor* bias, const Tensor& ids, const Tensor& out) = 0;
  // Whether LinearById over these experts waits for the device midway (the
  // ids come down to be grouped on the host): a step with such a call is not
  // recorded. False where nothing waits (the CPU; CUDA's device grouping).
  virtual bool LinearByIdWaits(absl::Span<const Weight* const> experts) const { return false; }

  // out: f32 [T, C] += the sum over j = 0, 1, ..., k - 1 (in that order) of
  // weights[t, j] * y[t * k + j]: the experts' outputs joined with their
  // router weights. y: f32 [T * k, C]; weights: f32 [T, k].
  virtual absl::Status WeightedRowSum(const Tensor& y, const Tensor& weights, const Tensor& out) = 0;

  // ---- Recurrent layers (hybrid models) -------------------------------------
  // Each sequence's rows run in order of position from the state its read
  // slot holds (zeros with SeqState::kNoSlot), and its state after its last
  // row is written to its write slot (which may be the read slot); a row's
  // result never depends on other sequences, nor on how a sequence's rows
  // were cut into calls: a step of one row (decode) and a chunk of many
  // (prefill) are one code path, a row at a time, in the same arithmetic.

  // out: f32 [T, C] = x * act(gate), elementwise. x, gate: f32 [T, C]; out
  // may be x.
  virtual absl::Status Gate(const Tensor& x, const Tensor& gate, GateKind act, const Tensor& out) = 0;

  // A depthwise causal convolution over each sequence's inputs u (its rows
  // of x: f32 [T, C], after the K - 1 inputs before them, which the state's
  // conv window holds, oldest first: layer.conv_elems = (K - 1) * C):
  // out[t, c] = act(sum over j = 0 .. K - 1, in order, of w[c, j] *
  // u[t - (K - 1) + j, c], + bias[c] where there is one); its write slot's
  // window then holds its last K - 1 inputs. w: f32 [C, K], 2 <= K <=
  // kMaxConvKernel; bias: f32 [1, C] or null; out: f32 [T, C], not x.
  virtual absl::Status CausalConv(const Tensor& x, const SeqTable& seqs, const StateTable& states,
                                  const StateLayer& layer, const Tensor& w, const Tensor* bias,
                                  ConvActivation act, const Tensor& out) = 0;

  // The gated delta rule (Gated DeltaNet: Qwen3.5, Qwen3-Next) over each
  // sequence's rows, its state S: [Hv, dk, dv] per slot (layer.scan_elems).
  // For row t and value head h (key head g = p.key_head(h)):
  //   q = q_g / sqrt(|q_g|^2 + 1e-6) / sqrt(dk), k = k_g / sqrt(|k_g|^2 + 1e-6)
  //   beta = sigmoid(b[t, h]), decay = exp(decay_a[h] * softplus(a[t, h] + dt_bias[h]))
  //   S_h = decay * S_h; S_h += k (beta (v_h - S_h^T k))^T; out[t, h] = S_h^T q
  // with sums over dk in index order. qkv: f32 [T, 2 Hk dk + Hv dv] (Q's key
  // heads, K's, then V's value heads: the convolution's output); b, a: f32
  // [T, Hv]; decay_a (= -exp(A_log)), dt_bias: f32 [1, Hv]; out: f32 [T, Hv dv].
  // dk, dv <= kMaxDeltaHeadDim.
  virtual absl::Status GatedDeltaRule(const Tensor& qkv, const Tensor& b, const Tensor& a,
                                      const Tensor& decay_a, const Tensor& dt_bias, const SeqTable& seqs,
                                      const StateTable& states, const StateLayer& layer,
                                      const DeltaRuleParams& p, const Tensor& out) = 0;

  // Mamba-2's selective scan (Granite 4.0-H, Nemotron-H) over each
  // sequence's rows, its state S: [H, P, N] per slot (layer.scan_elems).
  // For row t and head h (group g = h / (H / G)):
  //   dt = clamp(softplus(dt[t, h] + dt_bias[h]), dt_min, dt_max)
  //   S_h = exp(dt a[h]) S_h + (dt B_g) x_h^T   (S_h[p][n] += (dt B_g[n]) x_h[p])
  //   out[t, h][p] = sum over n of S_h[p][n] C_g[n] (in an order fixed by
  //   N alone), + d[h] x_h[p]
  // xbc: f32 [T, H P + 2 G N] (x's heads, then B's groups, then C's: the
  // convolution's output); dt: f32 [T, H]; a (= -exp(A_log)), d, dt_bias:
  // f32 [1, H]; out: f32 [T, H P]. N <= kMaxScanStateSize.
  virtual absl::Status SelectiveScan(const Tensor& xbc, const Tensor& dt, const Tensor& a, const Tensor& d,
                                     const Tensor& dt_bias, const SeqTable& seqs, const StateTable& states,
                                     const StateLayer& layer, const ScanParams& p, const Tensor& out) = 0;

  // out: f32 [S, C] = row (row + len - 1) of x: f32 [T, C] for each sequence:
  // the rows whose logits generation needs. A table of one-row entries
  // ({row r, len 1}) gathers any rows (a draft's rows being verified).
  virtual absl::Status GatherLastRows(const Tensor& x, const SeqTable& seqs,
                                      const Tensor& out) = 0;
};

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_BACKEND_H_
