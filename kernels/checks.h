// Argument checks every backend runs at the top of an op, so a caller's
// mistake is an InvalidArgument naming the op, the tensor and what is wrong
// (never a fault inside a kernel). Host code only; compiles without nvcc.
#ifndef FLOVER_KERNELS_CHECKS_H_
#define FLOVER_KERNELS_CHECKS_H_

#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"
#include "kernels/backend.h"

namespace flover::kernels {

// Any number of rows or columns.
inline constexpr int64_t kAnySize = -1;

// OK when t has memory, `rows` x `cols` elements (kAnySize matches any) and
// one of `dtypes`; otherwise InvalidArgument "<op>: <name> is ...".
absl::Status CheckTensor(const char* op, const char* name, const Tensor& t, int64_t rows,
                         int64_t cols, std::initializer_list<DType> dtypes);

// OK when every sequence of `seqs` has rows inside [0, num_rows) and
// positions under max_context, and, with `kv` (which must have memory), a
// block list inside the block table covering its positions with ids of
// blocks of `kv`, or KvLayer::kNoBlock for blocks before every position the
// op touches: an AppendKv (`window` kAppendOnly) writes [pos, pos + len), an
// Attention reads from the first row's window on (from 0 with `window` 0).
inline constexpr int kAppendOnly = -1;
absl::Status CheckSeqTable(const char* op, const SeqTable& seqs, const KvLayer* kv, int window = 0);

// PrepareWeight's: values, a float dtype (f32, bf16, f16), K and N >= 1.
// Quantized blocks pass only where the backend `takes_blocks` (--dtype=native).
absl::Status CheckPrepareWeightArgs(const HostValues& w, int K, int N, bool takes_blocks = false);

// Each op's arguments as backend.h states them; `act` is the backend's
// activation dtype (outputs that feed Linear may also take it).
absl::Status CheckEmbedArgs(const Tensor& tokens, const Tensor& positions, const Tensor& wte_rows,
                            const Tensor* wpe, const Tensor& out);
// ArgmaxRows: x f32 [R, V >= 1], out i32 [1, R].
absl::Status CheckArgmaxRowsArgs(const Tensor& x, const Tensor& out);
// EmbedBlocks: as Embed's, with C = table.cols().
absl::Status CheckEmbedBlocksArgs(const Tensor& tokens, const Tensor& positions,
                                  const BlockRows& table, const Tensor* wpe, const Tensor& out);
// PrepareBlockRows: a whole number of blocks per row, no negative sizes.
absl::Status CheckBlockRowsArgs(BlockFormat format, const uint8_t* bytes, int64_t rows, int cols);
absl::Status CheckAddArgs(const Tensor& x, const Tensor& out);
absl::Status CheckCopyArgs(const Tensor& src, const Tensor& dst);
absl::Status CheckLayerNormArgs(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                const Tensor& out, DType act);
absl::Status CheckRmsNormArgs(const Tensor& x, const Tensor& gamma, const Tensor& out, DType act);
absl::Status CheckRopeArgs(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq,
                           const RopeParams& p);
absl::Status CheckGluArgs(const Tensor& gate_up, GluKind kind, const Tensor& out, DType act);
absl::Status CheckSoftCapArgs(const Tensor& x, float cap);
absl::Status CheckSigmoidArgs(const Tensor& x);
absl::Status CheckScaleArgs(const Tensor& x, float s);
absl::Status CheckGroupRmsNormArgs(const Tensor& x, int first, int groups, const Tensor& gamma);
absl::Status CheckRouteArgs(const Tensor& logits, const RouterParams& p, const Tensor& ids, const Tensor& weights);
// `host_ids`: the ids, where the caller has them on the host (each is then
// checked against experts.size()), or null.
absl::Status CheckLinearByIdArgs(const Tensor& x, absl::Span<const Weight* const> experts, const Tensor* bias,
                                 const Tensor& ids,
                                 const Tensor& out, DType act, const int32_t* host_ids);
absl::Status CheckWeightedRowSumArgs(const Tensor& y, const Tensor& weights, const Tensor& out);
// x: [M, w.k()] of f32 or `x_dtype`; out: [M, w.n()] f32 (or `act` for
// kBiasGelu); bias: f32 [1, w.n()] or null.
absl::Status CheckLinearArgs(const Tensor& x, const Weight& w, const Tensor* bias,
                             Epilogue epilogue, const Tensor& out, DType x_dtype, DType act);
// The query heads of an attention call: qkv is [T, (q_heads + 2 *
// kv.heads) * head_dim], or [T, q_heads * head_dim] where q_only
// (CheckAttentionArgs checks it).
int QueryHeads(const Tensor& qkv, const KvLayer& kv, bool q_only = false);

// Also that kv holds `kv_format`, the format the backend keeps, and
// that the query heads are a whole multiple of the key/value heads.
absl::Status CheckAppendKvArgs(const Tensor& qkv, const SeqTable& seqs, const KvLayer& kv,
                               KvFormat kv_format);
// As CheckAppendKvArgs, and out's shape and the params (a finite scale and
// soft-cap, neither negative; a window of 0 or more).
absl::Status CheckAttentionArgs(const Tensor& qkv, const SeqTable& seqs, const KvLayer& kv,
                                const AttentionParams& p, const Tensor& out, KvFormat kv_format,
                                DType act);
// The recurrent ops' (backend.h): tensors as stated there, a sequence table
// whose rows cover the batch, a state table of one read and one write slot
// per sequence inside the layer's slots (read kNoSlot only at position 0;
// no slot written twice, nor written by one sequence and read by another),
// and the layer's state sizes as the op's shapes make them.
absl::Status CheckGateArgs(const Tensor& x, const Tensor& gate, GateKind act, const Tensor& out);
absl::Status CheckStateTable(const char* op, const SeqTable& seqs, const StateTable& states, const StateLayer& layer);
absl::Status CheckCausalConvArgs(const Tensor& x, const SeqTable& seqs, const StateTable& states,
                                 const StateLayer& layer, const Tensor& w, const Tensor* bias, ConvActivation act,
                                 const Tensor& out);
absl::Status CheckGatedDeltaRuleArgs(const Tensor& qkv, const Tensor& b, const Tensor& a, const Tensor& decay_a,
                                     const Tensor& dt_bias, const SeqTable& seqs, const StateTable& states,
                                     const StateLayer& layer, const DeltaRuleParams& p, const Tensor& out);
absl::Status CheckSelectiveScanArgs(const Tensor& xbc, const Tensor& dt, const Tensor& a, const Tensor& d,
                                    const Tensor& dt_bias, const SeqTable& seqs, const StateTable& states,
                                    const StateLayer& layer, const ScanParams& p, const Tensor& out);
// qkv [T, 3 * heads * D], out [T, heads * D], both f32; groups ending at
// increasing rows, the last T; a finite scale of 0 or more.
absl::Status CheckEncoderAttentionArgs(const Tensor& qkv, absl::Span<const int32_t> group_ends, int heads,
                                       float scale, const Tensor& out);
absl::Status CheckGatherLastRowsArgs(const Tensor& x, const SeqTable& seqs, const Tensor& out);

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_CHECKS_H_
