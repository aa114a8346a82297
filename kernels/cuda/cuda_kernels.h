// The CUDA kernels of the backend, behind plain launch functions (in the
// manner of FasterTransformer's invokeX(..., stream)): each enqueues its work
// on `stream` and returns the launch's error. Shapes are in comments; every
// pointer is device memory. Compiled by nvcc (cuda_kernels.cu); this header
// is plain C++ for the backend's host code.
//
// Batch invariance: every kernel computes a row's result with a reduction
// order fixed by that row's own sizes (C, D, its context length), never by
// the batch around it, and no reduction uses atomics.
#ifndef FLOVER_KERNELS_CUDA_CUDA_KERNELS_H_
#define FLOVER_KERNELS_CUDA_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/block_format.h"
#include "kernels/expert_groups.h"
#include "kernels/kv_layer.h"
#include "kernels/op_params.h"
#include "kernels/tensor.h"

namespace flover::kernels::cuda {

// Positions one attention block scores before its context is split into
// chunks that are merged afterwards (flash-decoding style). Fixed, so where
// a row's context splits depends only on its length.
inline constexpr int kAttentionChunk = 1024;
// The largest head dim the attention kernel takes (any size up to it; a
// lane of a warp holds dims lane, lane + 32, ...): Gemma 4's global layers'.
inline constexpr int kMaxHeadDim = 512;

// Programmatic dependent launch (FLOVER_CUDA_PDL; Hopper and newer): each
// kernel is launched while the one before it in the stream still runs, and
// waits in its prologue until that one has finished and its writes are
// visible, so only the launch latency between kernels is hidden; results
// are the same bits. Supported where the device runs this module's sm_90
// code. One setting per process: the backend sets it at Create.
bool ProgrammaticLaunchSupported();
void SetProgrammaticLaunch(bool on);
bool ProgrammaticLaunchOn();

// out: f32 [T, C] = wte[tokens[t] - vocab_begin] (zero outside
// [vocab_begin, vocab_begin + vocab_rows)) + wpe[positions[t]] (if wpe).
cudaError_t LaunchEmbed(const int32_t* tokens, const int32_t* positions, int T, const float* wte,
                        int vocab_begin, int vocab_rows, const float* wpe, int C, float* out,
                        cudaStream_t stream);

// out: f32 [T, C] = scale * row (tokens[t] - vocab_begin) of `table` (rows
// of blocks of `format`, BlockRowBytes(format, C) bytes each) dequantized,
// zero outside [0, vocab_rows), + wpe[positions[t]] (if wpe). C % 32 == 0.
cudaError_t LaunchEmbedBlocks(BlockFormat format, const int32_t* tokens, const int32_t* positions,
                              int T, const uint8_t* table, int64_t vocab_rows, int vocab_begin,
                              float scale, const float* wpe, int C, float* out,
                              cudaStream_t stream);

// out[r]: the index of row r's largest value (the first of equal ones,
// NaNs passed over; 0 for a row starting with a NaN), as std::max_element.
cudaError_t LaunchArgmaxRows(const float* x, int R, int64_t V, int32_t* out, cudaStream_t stream);

// out: f32 [n] += x: f32 [n].
cudaError_t LaunchAdd(const float* x, int64_t n, float* out, cudaStream_t stream);

// out: [T, C] of out_dtype (f32, bf16 or f16) = layernorm of x: f32 [T, C].
cudaError_t LaunchLayerNorm(const float* x, int T, int C, const float* gamma, const float* beta,
                            float eps, void* out, DType out_dtype, cudaStream_t stream);

// --dtype=native: out: f32 [M, N], columns [row_begin, row_begin + rows),
// (+)= (gelu of) x: f32 [M, K] @ w^T + bias, w being `rows` rows of K values
// in GGUF blocks of `format` as the file stores them (kernels/block_format.h;
// K a whole number of sub-blocks of 32). Dequantized in registers exactly as
// ggml does, f32 inputs (no input quantization, unlike the CPU's kernels),
// one warp per output; each output's sum order depends only on K, so a row's
// result never depends on M.
cudaError_t LaunchBlockLinear(BlockFormat format, const float* x, int M, int K, const uint8_t* w,
                              int rows, int row_begin, int N, const float* bias, bool gelu,
                              bool accumulate, float* out, cudaStream_t stream);

// out: f32 [M, N] += bias: f32 [N] on every row (for GEMMs whose library
// kernel cannot add the bias itself).
cudaError_t LaunchAddBias(const float* bias, int M, int N, float* out, cudaStream_t stream);

// Our tensor-core GEMM (FLOVER_CUDA_GEMM=mma): out: f32 [M, N] (=|+=)
// x: [M, K] @ w^T + bias for bf16/f16 x and w: [N, K] (16-byte aligned,
// K a multiple of 32: MmaGemmTakes), f32 sums in an order fixed by K (its
// MmaGemmSegments(K) segments, each in chunk order, then added in order),
// so a row's result never depends on M. Few rows: one warp per segment,
// streaming the weights; many rows: tiles of 64 x 128 per block through
// shared memory.
bool MmaGemmTakes(DType dtype, int K);
int MmaGemmSegments(int K);
cudaError_t LaunchMmaGemm(const void* x, const void* w, DType dtype, const float* bias,
                          bool accumulate, int M, int N, int K, float* out, cudaStream_t stream);

// A vision encoder's bidirectional attention (Backend::EncoderAttention):
// qkv: f32 [T, 3 H D]; group_ends: `groups` end rows, increasing, the last
// T, in device memory; out: f32 [T, H D]; scale > 0. Each row's softmax runs
// over its group's rows in order (online, f32), so its result depends on its
// group alone. D up to EncoderAttentionMaxHeadDim().
int EncoderAttentionMaxHeadDim();
cudaError_t LaunchEncoderAttention(const float* qkv, const int32_t* group_ends, int groups, int T, int H, int D,
                                   float scale, float* out, cudaStream_t stream);

// LinearById's rows grouped on the device (expert_groups.h's phases, in one
// block): ids: i32 [R] (route r = token r / k's choice r % k) -> routes: the
// routes grouped by expert, each group in route order, the out-of-range
// ids' group last; sources: each grouped row's row of x (its token where x
// has a row per token, else its route); tiles: tile_bound (at least
// ExpertTileBound(R, E, tile_rows)) ExpertTiles. All in device memory.
cudaError_t LaunchGroupExperts(const int32_t* ids, int R, int E, int k, bool per_token, int tile_rows,
                               int64_t tile_bound, int32_t* sources, int32_t* routes, ExpertTile* tiles,
                               cudaStream_t stream);
// Every tile's GEMM in one launch: out rows [t.row, t.row + t.rows) = x's
// same rows (grouped, bf16/f16, [R, K], 16-byte aligned) @ experts[t.expert]^T
// (+ row t.expert of bias: f32 [E, N], or null), in LaunchMmaGemm's
// arithmetic, so a row's result is LaunchMmaGemm's on the row alone; tiles
// of group E give zero rows. experts: device memory, E weight pointers
// ([N, K] each, 16-byte aligned); tile_rows 16, 32 or 64 (LaunchGroupExperts').
cudaError_t LaunchMmaGemmGrouped(const void* x, const void* const* experts, int E, DType dtype,
                                 const ExpertTile* tiles, int64_t tile_bound, int tile_rows, const float* bias,
                                 int N, int K, float* out, cudaStream_t stream);

// out: f32 [M, N] (=|+=) x: [M, K] @ w^T (+ bias), w: [N, K], x and w of
// `dtype` (f32, bf16 or f16), f32 sums in k order. Our own GEMM, for shapes
// cuBLASLt has no batch-invariant algorithm for: each output's sum runs in
// one thread, so it never depends on M (slow; correct).
cudaError_t LaunchFallbackGemm(const void* x, const void* w, DType dtype, const float* bias,
                               bool accumulate, int M, int N, int K, float* out,
                               cudaStream_t stream);

// out: [T, C] of out_dtype = x * rsqrt(mean(x^2) + eps) * gamma, per row.
cudaError_t LaunchRmsNorm(const float* x, int T, int C, const float* gamma, float eps, void* out,
                          DType out_dtype, cudaStream_t stream);

// Rotary embeddings in place on the first (q_heads + kv_heads) * D columns
// of each row of qkv: f32 [T, (q_heads + 2 * kv_heads) * D]; the first
// 2 * rotary_half dims of each head turn, as halves or interleaved pairs,
// by cos and sin times `scale`. `mrope`: null, or {t, h, w, interleaved}
// of a multimodal rotary whose positions are [3, T] (RopeParams::mrope_t).
cudaError_t LaunchRope(float* qkv, const int32_t* positions, const float* inv_freq, int T,
                       int q_heads, int kv_heads, int head_dim, int rotary_half, bool interleaved,
                       float scale, const int* mrope, cudaStream_t stream);

// out: [T, F] of out_dtype = act(gate_up[:, :F]) * gate_up[:, F:], act
// silu or (gelu) gelu's tanh form.
cudaError_t LaunchGlu(const float* gate_up, int T, int F, GluKind kind, void* out, DType out_dtype,
                      cudaStream_t stream);

// x: f32 [T, W]: each of `groups` groups of G columns from column `first`
// RMS-normalised over itself and scaled by gamma: f32 [G], in place.
cudaError_t LaunchGroupRmsNorm(float* x, int T, int W, int first, int groups, int G, const float* gamma,
                               float eps, cudaStream_t stream);

// ids: i32 [T, p.k], weights: f32 [T, p.k] = RouteRow of each row of
// logits: f32 [T, E].
cudaError_t LaunchRoute(const float* logits, int T, int E, const RouterParams& p, int32_t* ids, float* weights,
                        cudaStream_t stream);

// Row i of dst (or row dst_rows[i]) = row i of src (or row src_rows[i]),
// for i < n; rows of row_bytes bytes; a null index is the identity.
cudaError_t LaunchCopyRows(const void* src, const int32_t* src_rows, void* dst, const int32_t* dst_rows, int n,
                           int64_t row_bytes, cudaStream_t stream);

// out: f32 [T, C] += sum over j < k, in order, of weights[t, j] * y[t * k + j].
cudaError_t LaunchWeightedRowSum(const float* y, const float* weights, int T, int k, int C, float* out,
                                 cudaStream_t stream);

// x: f32 [n] = tanh(x / cap) * cap, in place.
cudaError_t LaunchSoftCap(float* x, int64_t n, float cap, cudaStream_t stream);
// x: f32 [n] = 1 / (1 + exp(-x)), in place.
cudaError_t LaunchSigmoid(float* x, int64_t n, cudaStream_t stream);
// x: f32 [n] *= s, in place.
cudaError_t LaunchScale(float* x, int64_t n, float s, cudaStream_t stream);

// out: [n] of out_dtype = x: f32 [n], rounded to nearest even.
cudaError_t LaunchConvert(const float* x, int64_t n, void* out, DType out_dtype,
                          cudaStream_t stream);

// out: [n] of out_dtype = gelu_new(x: f32 [n]) (tanh form), rounded to
// nearest even.
cudaError_t LaunchGelu(const float* x, int64_t n, void* out, DType out_dtype, cudaStream_t stream);

// Writes the K and V of every row of qkv: f32 [T, (q_heads + 2 * Hkv) *
// D] (Q, then K and V of the Hkv = kv.heads key/value heads) into `kv` at
// (the block of its position in its sequence's block list, kv head).
// seqs: i32 [num_seqs, 4] (blocks, pos, len, row), ordered by row;
// block_ids: the step's block table in device memory.
cudaError_t LaunchKvAppend(const float* qkv, const int32_t* seqs, const int32_t* block_ids,
                           int num_seqs, int T, int q_heads, const KvLayer& kv, cudaStream_t stream);

// Floats of work space LaunchAttention needs for T rows of `q_heads` query
// heads whose longest context is max_context (partials of split contexts).
int64_t AttentionWorkspaceFloats(int T, int q_heads, int head_dim, int max_context);

// Causal attention of every row and query head of qkv over positions
// [0, its position] of its sequence's blocks (the last params.window of them
// with a window; up to horizon[row] where horizon is not null: SeqTable's,
// on the device; after LaunchKvAppend); query head h reads key/value head
// h / (q_heads / kv.heads); scores scaled and soft-capped per `params`.
// out: [T, q_heads * D] of out_dtype. workspace:
// AttentionWorkspaceFloats(...) floats.
cudaError_t LaunchAttention(const float* qkv, const int32_t* seqs, const int32_t* block_ids, const int32_t* horizon,
                            int num_seqs, int T, int max_context, int q_heads, const KvLayer& kv,
                            const AttentionParams& params, void* out, DType out_dtype,
                            float* workspace, cudaStream_t stream);

// out: f32 [S, C] = x row (row + len - 1) of each sequence. x: f32 [T, C].
cudaError_t LaunchGatherLastRows(const float* x, const int32_t* seqs, int S, int C, float* out,
                                 cudaStream_t stream);

// out: f32 [n] = x * act(gate), elementwise (act: identity, sigmoid, silu).
cudaError_t LaunchGate(const float* x, const float* gate, GateKind act, float* out, int64_t n, cudaStream_t stream);

// The depthwise causal convolution of each sequence's rows of x: f32 [T, C]
// (seqs: i32 [num_seqs, 4]) after the K - 1 inputs its read slot's window
// holds (states: i32 [num_seqs, 2], read and write; read < 0: zeros), into
// out, plus bias (null: none), with SiLU where `silu`; the write slot's window becomes its last
// K - 1 inputs. conv: [slots, conv_elems = (K - 1) * C]; w: f32 [C, K].
cudaError_t LaunchCausalConv(const float* x, const int32_t* seqs, const int32_t* states, int num_seqs, int64_t C,
                             int K, const float* w, const float* bias, bool silu, float* conv, int64_t conv_elems,
                             float* out, cudaStream_t stream);

// The gated delta rule (backend.h's GatedDeltaRule) of each sequence's
// rows: qkv: f32 [T, width], b, a: f32 [T, Hv], decay_a, dt_bias: f32 [Hv];
// scan: [slots, scan_elems = Hv * dk * dv]; out: f32 [T, out_cols].
cudaError_t LaunchGatedDeltaRule(const float* qkv, int64_t width, const float* b, const float* a,
                                 const float* decay_a, const float* dt_bias, const int32_t* seqs,
                                 const int32_t* states, int num_seqs, const DeltaRuleParams& p, float* scan,
                                 int64_t scan_elems, float* out, int64_t out_cols, cudaStream_t stream);

// Mamba-2's selective scan (backend.h's SelectiveScan) of each sequence's
// rows: xbc: f32 [T, width] (x, B, C), dt: f32 [T, H], a, d, dt_bias: f32
// [H]; scan: [slots, scan_elems = H * P * N]; out: f32 [T, out_cols].
cudaError_t LaunchSelectiveScan(const float* xbc, int64_t width, const float* dt, const float* a, const float* d,
                                const float* dt_bias, const int32_t* seqs, const int32_t* states, int num_seqs,
                                const ScanParams& p, float* scan, int64_t scan_elems, float* out, int64_t out_cols,
                                cudaStream_t stream);

}  // namespace flover::kernels::cuda

#endif  // FLOVER_KERNELS_CUDA_CUDA_KERNELS_H_
