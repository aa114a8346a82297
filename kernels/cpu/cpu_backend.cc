#include "kernels/cpu/cpu_backend.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "oneapi/dnnl/dnnl.h"
#include "absl/strings/str_format.h"
#include "kernels/checks.h"
#include "kernels/ggml_dequant.h"
#include "kernels/ggml_quant.h"
#include "kernels/expert_groups.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/cpu_threads.h"
#include "util/status_macros.h"
#include "kernels/cpu/vec_math.h"

namespace flover::kernels {
namespace {

// Rows of one (sequence, head) pair handled by one task in Attention: few
// enough to balance a long causal prefill across threads.
constexpr int kAttentionRowBlock = 32;

// K/V elements a step appends below which AppendKv stays on one thread.
constexpr int64_t kParallelAppendElements = 1 << 16;

// Asks for the cache lines of elements [p, p + n) ahead of use. Keys and
// values are read as streams of 8-32 KB that start anew for every (sequence,
// head), and the hardware prefetchers stop at each 4 KB page; at batch 32
// that left attention at ~70% of the machine's read bandwidth.
template <typename T>
inline void PrefetchRow(const T* p, int n) {
  constexpr int kPerLine = 64 / sizeof(T);
  for (int i = 0; i < n; i += kPerLine) __builtin_prefetch(p + i);
}

// A cached key or value as float: float as is, bfloat16 bits widened.
inline float Load(float x) { return x; }
inline float Load(uint16_t x) { return Bf16ToFloat(x); }
inline void Store(float x, float* to) { *to = x; }
inline void Store(float x, uint16_t* to) { *to = ToBf16(x); }

// The element type of an f32 or bf16 head block.
template <KvDtype F>
using Elem = std::conditional_t<F == KvDtype::kBF16, uint16_t, float>;

// A quantized head block's scales (half bits), after its codes.
template <KvDtype F, typename Byte>
auto BlockScales(Byte* block, int D) {
  using Half = std::conditional_t<std::is_const_v<Byte>, const uint16_t, uint16_t>;
  return reinterpret_cast<Half*>(block + KvCodeBytes(F, int64_t{D} * KvLayer::kBlockSize));
}

// 32 half-precision scales as float (exact).
inline void ScalesOf(const uint16_t* h, float* out) {
  for (int i = 0; i < 32; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  }
}
inline float ScaleOf(uint16_t h) { return _cvtsh_ss(h); }

// A q4_0 code as its value before scaling: the nibble minus 8.
inline float Low(uint8_t b) { return static_cast<float>((b & 15) - 8); }
inline float High(uint8_t b) { return static_cast<float>((b >> 4) - 8); }

// One (sequence, key/value head)'s blocks in a layer: where position p's key
// and value are.
struct HeadBlocks {
  const uint8_t* keys;    // the layer's k
  const uint8_t* values;  // the layer's v
  const int32_t* blocks;  // the sequence's block list
  const KvLayer* kv;
  int head;

  const uint8_t* key_block(int b) const { return keys + kv->key_block(blocks[b], head); }
  const uint8_t* value_block(int b) const { return values + kv->value_block(blocks[b], head); }
};

// Attention reads each key and value from memory once for kG query heads
// of one key/value group (grouped-query attention; pairs of heads:
// HeadsTogether), and again from L1 for the second. Each head's sums are
// its own and in the same order whatever kG is: a head's result does not
// depend on the heads beside it.

// Scores of kG queries against one block of keys (stored as KF): s_g[j] =
// sum_d q_g[d] k[d][j], accumulated over d in order; for quantized keys,
// sum over each group of 32 dims of (sum_d q_g[d] code[d][j]) * scale[j].
// The block's scores stay in registers across the d loop, so each
// multiply-add loads only the key (from memory for the first query, from
// L1 for the second). q: [kG][D]; scores: kG rows of stride ld.
template <int kG, KvDtype KF>
void ScoreBlock(const float* q, const uint8_t* block, int D, const uint8_t* next, float* scores, int64_t ld) {
  constexpr int kJ = KvLayer::kBlockSize;
  float acc[kG][kJ] = {};
  if constexpr (KF == KvDtype::kF32 || KF == KvDtype::kBF16) {
    using T = Elem<KF>;
    const T* keys = reinterpret_cast<const T*>(block);
    const T* ahead = reinterpret_cast<const T*>(next);
    for (int d = 0; d < D; ++d) {
      const T* kd = keys + int64_t{d} * kJ;
      PrefetchRow(ahead + int64_t{d} * kJ, kJ);
      for (int g = 0; g < kG; ++g) {  // the row again from L1 for each query
        const float qd = q[int64_t{g} * D + d];
#pragma omp simd
        for (int j = 0; j < kJ; ++j) acc[g][j] += qd * Load(kd[j]);
      }
    }
  } else {
    const uint16_t* scales = BlockScales<KF>(block, D);
    PrefetchRow(BlockScales<KF>(next, D), D / kKvQuantGroup * kJ);
    for (int g0 = 0; g0 < D; g0 += kKvQuantGroup) {
      float part[kG][kJ] = {};
      if constexpr (KF == KvDtype::kQ8_0) {
        const int8_t* codes = reinterpret_cast<const int8_t*>(block);
        for (int d = g0; d < g0 + kKvQuantGroup; ++d) {
          const int8_t* kd = codes + int64_t{d} * kJ;
          PrefetchRow(next + int64_t{d} * kJ, kJ);
          for (int g = 0; g < kG; ++g) {
            const float qd = q[int64_t{g} * D + d];
#pragma omp simd
            for (int j = 0; j < kJ; ++j) part[g][j] += qd * static_cast<float>(kd[j]);
          }
        }
      } else {  // q4_0: byte row g0 / 2 + i holds dims g0 + i and g0 + 16 + i
        for (int i = 0; i < kKvQuantGroup / 2; ++i) {
          const uint8_t* kb = block + int64_t{g0 / 2 + i} * kJ;
          PrefetchRow(next + int64_t{g0 / 2 + i} * kJ, kJ);
          for (int g = 0; g < kG; ++g) {
            const float lo = q[int64_t{g} * D + g0 + i], hi = q[int64_t{g} * D + g0 + 16 + i];
#pragma omp simd
            for (int j = 0; j < kJ; ++j) part[g][j] += lo * Low(kb[j]) + hi * High(kb[j]);
          }
        }
      }
      float s[kJ];
      ScalesOf(scales + int64_t{g0 / kKvQuantGroup} * kJ, s);
      for (int g = 0; g < kG; ++g) {
#pragma omp simd
        for (int j = 0; j < kJ; ++j) acc[g][j] += part[g][j] * s[j];
      }
    }
  }
  for (int g = 0; g < kG; ++g) std::copy(acc[g], acc[g] + kJ, scores + g * ld);
}

// acc[g][0, n) += w[g] * value row `row`'s dims [d0, d0 + n) (stored as
// VF; n a multiple of 32 for quantized values, each group's weight times
// its scale first), for the kG weights w[g].
template <int kG, KvDtype VF>
inline void AddValueRow(const uint8_t* block, int D, int row, int d0, int n, const float* w, float* acc,
                        int64_t acc_stride) {
  if constexpr (VF == KvDtype::kF32 || VF == KvDtype::kBF16) {
    const Elem<VF>* v = reinterpret_cast<const Elem<VF>*>(block) + int64_t{row} * D + d0;
    for (int g = 0; g < kG; ++g) {
      float* a = acc + g * acc_stride;
#pragma omp simd
      for (int d = 0; d < n; ++d) a[d] += w[g] * Load(v[d]);
    }
  } else {
    const uint16_t* scales = BlockScales<VF>(block, D) + int64_t{row} * (D / kKvQuantGroup);
    for (int c = 0; c < n; c += kKvQuantGroup) {
      const float scale = ScaleOf(scales[(d0 + c) / kKvQuantGroup]);
      for (int g = 0; g < kG; ++g) {
        const float ws = w[g] * scale;
        float* a = acc + g * acc_stride + c;
        if constexpr (VF == KvDtype::kQ8_0) {
          const int8_t* v = reinterpret_cast<const int8_t*>(block) + int64_t{row} * D + d0 + c;
#pragma omp simd
          for (int d = 0; d < kKvQuantGroup; ++d) a[d] += ws * static_cast<float>(v[d]);
        } else {
          const uint8_t* v = block + (int64_t{row} * D + d0 + c) / 2;
#pragma omp simd
          for (int i = 0; i < kKvQuantGroup / 2; ++i) {
            a[i] += ws * Low(v[i]);
            a[16 + i] += ws * High(v[i]);
          }
        }
      }
    }
  }
}

// out_g[0, D) = sum_j w_g[j] v[j] over positions [first, n) of `h`, for
// the kG weight rows w_g (stride ld), accumulated over j in order (block
// after block); out_g at out + g * D. For D = 64 and 128 (kD) the sums live
// in a local array the compiler keeps in registers: 128 floats at a time
// (16 AVX2 registers), so kG > 1 walks the positions once per slice of
// 128 / kG dims, each slice's sums still in order of j; each block's rows
// are summed while the next block's are fetched. kD = 0 reads D and sums
// into `out` (128 that way took 12% of Qwen3-0.6B's batch-32 decode step
// more, 2026-11-27).
template <int kG, int kD, KvDtype VF>
void WeightedSum(const float* w, int64_t ld, const HeadBlocks& h, int first, int n, int D, float* out) {
  constexpr int kJ = KvLayer::kBlockSize;
  const int b0 = first / kJ, nb = static_cast<int>(KvLayer::BlocksFor(n));
  float wj[kG];
  if constexpr (kD > 0) {
    constexpr int kSlice = std::min(kD, 128 / kG);
    for (int d0 = 0; d0 < kD; d0 += kSlice) {
      float acc[kG][kSlice] = {};
      for (int b = b0; b < nb; ++b) {
        const uint8_t* v = h.value_block(b);
        const uint8_t* next = b + 1 < nb ? h.value_block(b + 1) : v;
        const int rows = std::min(kJ, n - b * kJ);
        for (int j = std::max(0, first - b * kJ); j < rows; ++j) {
          PrefetchRow(next + KvCodeBytes(VF, int64_t{j} * kD + d0), static_cast<int>(KvCodeBytes(VF, kSlice)));
          for (int g = 0; g < kG; ++g) wj[g] = w[g * ld + int64_t{b} * kJ + j];
          AddValueRow<kG, VF>(v, kD, j, d0, kSlice, wj, &acc[0][0], kSlice);
        }
      }
      for (int g = 0; g < kG; ++g) std::copy(acc[g], acc[g] + kSlice, out + int64_t{g} * kD + d0);
    }
  } else {
    std::fill(out, out + int64_t{kG} * D, 0.0f);
    for (int b = b0; b < nb; ++b) {
      const uint8_t* v = h.value_block(b);
      const int rows = std::min(kJ, n - b * kJ);
      for (int j = std::max(0, first - b * kJ); j < rows; ++j) {
        for (int g = 0; g < kG; ++g) wj[g] = w[g * ld + int64_t{b} * kJ + j];
        AddValueRow<kG, VF>(v, D, j, 0, D, wj, out, D);
      }
    }
  }
}

// kG query rows (of one position, kG heads of one group) against positions
// [first, n) of their key/value head's blocks. q: [kG][D] (already scaled);
// scores: scratch, kG rows of stride ld (n rounded up to kBlockSize),
// indexed by position; out: [kG][D]. Every row of every batch goes through
// this one function, in order of position whatever blocks hold them, which
// is what makes attention batch-invariant. Blocks are scored whole;
// positions outside [first, n) are never read back.
template <int kG, KvDtype KF, KvDtype VF>
void AttendRows(const float* q, const HeadBlocks& h, int first, int n, int D, float softcap,
                const float* sinks, float* scores, int64_t ld, float* out) {
  constexpr int kJ = KvLayer::kBlockSize;
  const int b0 = first / kJ, nb = static_cast<int>(KvLayer::BlocksFor(n));
  for (int b = b0; b < nb; ++b) {
    // While scoring a block, fetch the next one, or after the last the first
    // values (as many as a block's worth of lines).
    const uint8_t* next = b + 1 < nb ? h.key_block(b + 1) : h.value_block(b0);
    ScoreBlock<kG, KF>(q, h.key_block(b), D, next, scores + int64_t{b} * kJ, ld);
  }
  for (int g = 0; g < kG; ++g) {
    float* sg = scores + g * ld;
    if (softcap > 0) {  // as transformers: s / cap, tanh, * cap
      for (int j = first; j < n; ++j) sg[j] = std::tanh(sg[j] / softcap) * softcap;
    }
    // A sink joins the softmax as a score of its own (after the scores, as
    // transformers' eager attention concatenates it), with no value.
    float max_score = sinks != nullptr ? sinks[g] : -INFINITY;
    for (int j = first; j < n; ++j) max_score = std::max(max_score, sg[j]);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = first; j < n; ++j) {
      sg[j] = ExpF(sg[j] - max_score);
      sum += sg[j];
    }
    if (sinks != nullptr) sum += ExpF(sinks[g] - max_score);
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int j = first; j < n; ++j) sg[j] *= inv;
  }
  if (D == 64) {
    WeightedSum<kG, 64, VF>(scores, ld, h, first, n, D, out);
  } else if (D == 128) {
    WeightedSum<kG, 128, VF>(scores, ld, h, first, n, D, out);
  } else {
    WeightedSum<kG, 0, VF>(scores, ld, h, first, n, D, out);
  }
}

// How many query heads of a group attend together: 2 where the group is
// even. 4 at once measured slower on Llama-1B's shapes (their sums spill
// out of 16 AVX2 registers), 2 faster on Qwen3-0.6B's and Llama-1B's.
inline int HeadsTogether(int group) { return group % 2 == 0 ? 2 : 1; }

// One head's key row x[0, D) into position j of its block (stored as KF):
// quantized rows group by group as ggml quantizes them (kernels/ggml_quant).
template <KvDtype KF>
void StoreKey(const float* x, int D, int j, uint8_t* block) {
  constexpr int kJ = KvLayer::kBlockSize;
  if constexpr (KF == KvDtype::kF32 || KF == KvDtype::kBF16) {
    Elem<KF>* keys = reinterpret_cast<Elem<KF>*>(block);
    for (int d = 0; d < D; ++d) Store(x[d], &keys[KvLayer::key_offset(d, j)]);
  } else {
    uint16_t* scales = BlockScales<KF>(block, D);
    for (int g0 = 0; g0 < D; g0 += kKvQuantGroup) {
      uint16_t* scale = &scales[int64_t{g0 / kKvQuantGroup} * kJ + j];
      if constexpr (KF == KvDtype::kQ8_0) {
        int8_t codes[kKvQuantGroup];
        QuantizeQ8_0Group(x + g0, codes, scale);
        for (int d = 0; d < kKvQuantGroup; ++d) block[int64_t{g0 + d} * kJ + j] = static_cast<uint8_t>(codes[d]);
      } else {
        uint8_t codes[kKvQuantGroup / 2];
        QuantizeQ4_0Group(x + g0, codes, scale);
        for (int i = 0; i < kKvQuantGroup / 2; ++i) block[int64_t{g0 / 2 + i} * kJ + j] = codes[i];
      }
    }
  }
}

// One head's value row x[0, D) into row j of its block (stored as VF).
template <KvDtype VF>
void StoreValue(const float* x, int D, int j, uint8_t* block) {
  if constexpr (VF == KvDtype::kF32 || VF == KvDtype::kBF16) {
    Elem<VF>* to = reinterpret_cast<Elem<VF>*>(block) + int64_t{j} * D;
    for (int d = 0; d < D; ++d) Store(x[d], &to[d]);
  } else {
    uint16_t* scales = BlockScales<VF>(block, D) + int64_t{j} * (D / kKvQuantGroup);
    for (int g0 = 0; g0 < D; g0 += kKvQuantGroup) {
      if constexpr (VF == KvDtype::kQ8_0) {
        QuantizeQ8_0Group(x + g0, reinterpret_cast<int8_t*>(block) + int64_t{j} * D + g0, &scales[g0 / kKvQuantGroup]);
      } else {
        QuantizeQ4_0Group(x + g0, block + (int64_t{j} * D + g0) / 2, &scales[g0 / kKvQuantGroup]);
      }
    }
  }
}

// Writes each row's K and V (stored as KF and VF) into the block of its
// position; see CpuBackend::AppendKv.
template <KvDtype KF, KvDtype VF>
void AppendOver(const float* qkv, const SeqTable& table, const KvLayer& kv, int q_heads) {
  constexpr int kJ = KvLayer::kBlockSize;
  const SeqRows* seqs = table.host;
  const int H = kv.heads, D = kv.head_dim;
  const int64_t QD = int64_t{q_heads} * D, HD = int64_t{H} * D;
  const int64_t row_stride = QD + 2 * HD;  // [Q | K | V]
  uint8_t* const keys = static_cast<uint8_t*>(kv.k);
  uint8_t* const values = static_cast<uint8_t*>(kv.v);
  // A decode step's few rows are copied faster than threads wake up (at
  // batch 1 a parallel region per layer cost GPT-2 ~1% of a step).
  const bool parallel = int64_t{table.num_rows} * HD >= kParallelAppendElements;
  UseCpuThreadsHere();
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
  for (int s = 0; s < table.num_seqs; ++s) {
    for (int h = 0; h < H; ++h) {
      const SeqRows& seq = seqs[s];
      const int32_t* blocks = table.block_ids + seq.blocks;
      for (int i = 0; i < seq.len; ++i) {
        const float* row = qkv + (int64_t{seq.row} + i) * row_stride;
        const int pos = seq.pos + i;
        StoreKey<KF>(row + QD + int64_t{h} * D, D, pos % kJ, keys + kv.key_block(blocks[pos / kJ], h));
        StoreValue<VF>(row + QD + HD + int64_t{h} * D, D, pos % kJ, values + kv.value_block(blocks[pos / kJ], h));
      }
    }
  }
}

// Attention with K and V stored as KF and VF, `q_heads` query heads
// sharing the cache's kv.heads key/value heads in groups of q_heads /
// kv.heads (grouped-query attention; equal counts without it); see
// CpuBackend::Attention.
template <KvDtype KF, KvDtype VF>
void AttentionOver(const float* qkv, const SeqTable& table, const KvLayer& kv, int q_heads,
                   const AttentionParams& params, float* out) {
  constexpr int kJ = KvLayer::kBlockSize;
  const SeqRows* seqs = table.host;
  const int num_seqs = table.num_seqs;
  const int H = kv.heads;  // key/value heads
  const int D = kv.head_dim;
  const int group = q_heads / H;
  const int64_t QD = int64_t{q_heads} * D, HD = int64_t{H} * D;
  const int64_t row_stride = params.q_only ? QD : QD + 2 * HD;  // [Q | K | V], or Q alone
  const uint8_t* const keys = static_cast<const uint8_t*>(kv.k);
  const uint8_t* const values = static_cast<const uint8_t*>(kv.v);

  // Tasks of (sequence, kG query heads of one group, block of rows), so a
  // long prompt spreads over threads as well as a wide decode batch does.
  const int together = HeadsTogether(group);
  struct Task {
    int seq, head, first_row, rows;  // head: the first of `together`
  };
  std::vector<Task> tasks;
  for (int s = 0; s < num_seqs; ++s) {
    for (int h = 0; h < q_heads; h += together) {
      for (int i = 0; i < seqs[s].len; i += kAttentionRowBlock) {
        tasks.push_back({s, h, i, std::min(kAttentionRowBlock, seqs[s].len - i)});
      }
    }
  }
  const float scale = params.scale > 0 ? params.scale : 1.0f / std::sqrt(static_cast<float>(D));
  const int num_tasks = static_cast<int>(tasks.size());
  const int64_t ld = KvLayer::BlocksFor(table.max_context) * kJ;
  UseCpuThreadsHere();
#pragma omp parallel
  {
    std::vector<float> scores(together * ld);
    std::vector<float> q(int64_t{together} * D);
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < num_tasks; ++t) {
      const Task& task = tasks[t];
      const SeqRows& seq = seqs[task.seq];
      const HeadBlocks head{keys, values, table.block_ids + seq.blocks, &kv, task.head / group};
      const int64_t row = int64_t{seq.row} + task.first_row;
      // Every row goes through the same kernel, so a row's result never
      // depends on how the batch around it was formed.
      for (int i = 0; i < task.rows; ++i) {
        const float* qr = qkv + (row + i) * row_stride + int64_t{task.head} * D;
        for (int64_t d = 0; d < int64_t{together} * D; ++d) q[d] = qr[d] * scale;
        const int own = seq.pos + task.first_row + i + 1;
        const int first = params.window > 0 ? std::max(0, own - params.window) : 0;
        const int n = table.horizon != nullptr ? table.horizon[row + i] + 1 : own;
        float* to = out + (row + i) * QD + int64_t{task.head} * D;
        const float* sinks = params.sinks != nullptr ? params.sinks + task.head : nullptr;
        if (together == 2) {
          AttendRows<2, KF, VF>(q.data(), head, first, n, D, params.softcap, sinks, scores.data(), ld, to);
        } else {
          AttendRows<1, KF, VF>(q.data(), head, first, n, D, params.softcap, sinks, scores.data(), ld, to);
        }
      }
    }
  }
}

// Op<KF, VF>::fn for the format's dtypes: the kernels' instance for them.
template <template <KvDtype, KvDtype> class Op, KvDtype KF>
constexpr auto ForValueDtype(KvDtype v) {
  switch (v) {
    case KvDtype::kBF16: return Op<KF, KvDtype::kBF16>::fn;
    case KvDtype::kQ8_0: return Op<KF, KvDtype::kQ8_0>::fn;
    case KvDtype::kQ4_0: return Op<KF, KvDtype::kQ4_0>::fn;
    default: return Op<KF, KvDtype::kF32>::fn;
  }
}
template <template <KvDtype, KvDtype> class Op>
constexpr auto ForFormat(KvFormat f) {
  switch (f.k) {
    case KvDtype::kBF16: return ForValueDtype<Op, KvDtype::kBF16>(f.v);
    case KvDtype::kQ8_0: return ForValueDtype<Op, KvDtype::kQ8_0>(f.v);
    case KvDtype::kQ4_0: return ForValueDtype<Op, KvDtype::kQ4_0>(f.v);
    default: return ForValueDtype<Op, KvDtype::kF32>(f.v);
  }
}
template <KvDtype KF, KvDtype VF>
struct AppendOp {
  static constexpr auto fn = &AppendOver<KF, VF>;
};
template <KvDtype KF, KvDtype VF>
struct AttentionOp {
  static constexpr auto fn = &AttentionOver<KF, VF>;
};
// Host memory is aligned for the widest vector loads and for oneDNN.
constexpr size_t kAlignment = 64;

}  // namespace

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(MatmulDtype dtype,
                                                               KvFormat kv_format) {
  FLOVER_RETURN_IF_ERROR(CheckCpuIsa());
  const absl::Status supported =
      dtype == MatmulDtype::kInt8     ? Int8Linear::CheckSupported()
      : dtype == MatmulDtype::kNative ? BlockLinear::CheckSupported()
      : FmaLinear::Replaces(dtype)    ? absl::OkStatus()
                                      : OneDnnLinear::CheckSupported(dtype);
  if (absl::Status st = supported; !st.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--dtype=", MatmulDtypeName(dtype), ": ", st.message()));
  }
  if (kv_format.k == KvDtype::kFp8 || kv_format.v == KvDtype::kFp8) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--kv_dtype=", KvFormatName(kv_format), ": fp8 runs on CUDA only; the CPU keeps f32, bf16, q8_0 or q4_0"));
  }
  return std::unique_ptr<CpuBackend>(new CpuBackend(dtype, kv_format));
}

CpuBackend::CpuBackend(MatmulDtype dtype, KvFormat kv_format)
    : linear_(dtype == MatmulDtype::kInt8 || dtype == MatmulDtype::kNative ? MatmulDtype::kF32 : dtype),
      int8_(dtype == MatmulDtype::kInt8 ? std::make_unique<Int8Linear>() : nullptr),
      blocks_(dtype == MatmulDtype::kNative ? std::make_unique<BlockLinear>() : nullptr),
      kv_format_(kv_format) {
  if (FmaLinear::Replaces(linear_.dtype())) fma_ = std::make_unique<FmaLinear>(linear_.dtype());
}

DeviceInfo CpuBackend::Device() const {
  DeviceInfo info;
  info.kind = "cpu";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      info.name = line.substr(line.find(':') + 2);
      break;
    }
  }
  if (info.name.empty()) info.name = "CPU";
  absl::StrAppend(&info.name, ", ", CpuThreads(), " threads, isa ", CpuIsaName());
  return info;
}

absl::StatusOr<Buffer> CpuBackend::Allocate(DType dtype, int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Allocate: negative shape [", rows, ", ", cols, "]"));
  }
  const Tensor t{nullptr, dtype, rows, cols};
  const size_t bytes = (static_cast<size_t>(t.bytes()) + kAlignment - 1) / kAlignment * kAlignment;
  // Left uninitialized: untouched pages of a large arena cost no memory.
  void* data = std::aligned_alloc(kAlignment, std::max(bytes, kAlignment));
  if (data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cannot allocate %.1f MiB of host memory", static_cast<double>(bytes) / (1 << 20)));
  }
  return Buffer(this, Tensor{data, dtype, rows, cols});
}

void CpuBackend::Free(void* data) { std::free(data); }

absl::Status CpuBackend::Upload(const void* host, const Tensor& dst) {
  if (dst.data == nullptr && dst.bytes() > 0) return absl::InvalidArgumentError("Upload: no destination");
  std::memcpy(dst.data, host, dst.bytes());
  return absl::OkStatus();
}

absl::Status CpuBackend::Download(const Tensor& src, void* host) {
  if (src.data == nullptr && src.bytes() > 0) return absl::InvalidArgumentError("Download: no source");
  std::memcpy(host, src.data, src.bytes());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Weight>> CpuBackend::PrepareWeight(HostValues w, int K, int N,
                                                                  WeightLayout layout) {
  FLOVER_RETURN_IF_ERROR(CheckPrepareWeightArgs(w, K, N, blocks_ != nullptr));
  if (w.is_blocks()) return blocks_->Prepare(w, K, N, layout);
  // int8 quantizes the values where they are, whatever their dtype. oneDNN's
  // reorder takes f32 and bf16 values as they are (into f32 or bf16
  // weights); f16 ones are widened to float32 here (exactly), one matrix at
  // a time.
  if (int8_ != nullptr) return int8_->Prepare(w, K, N, layout);
  if (fma_ != nullptr) return fma_->Prepare(w, K, N, layout);
  std::vector<float> wide;
  if (w.dtype == DType::kF16) {
    wide = WidenToF32(w, int64_t{K} * N);
    w = HostValues(wide.data());
  }
  return linear_.Prepare(w, K, N, layout);
}

absl::Status CpuBackend::PrepareLinear(const Weight& w, int max_rows, bool has_bias,
                                       Epilogue epilogue) {
  if (BlockLinear::Holds(w) || FmaLinear::Holds(w)) return absl::OkStatus();  // nothing to build
  if (int8_ != nullptr) {
    int8_->PrepareRows(w, max_rows);
  } else {
    linear_.PrepareRows(w, max_rows, has_bias, epilogue);
  }
  return absl::OkStatus();
}

namespace {

// Embed's and EmbedBlocks' loop: positions checked against wpe first, then
// each row gets its token's row (`fill(local_row, o)`; zeros outside the
// rank's vocabulary range) and the position's row added.
template <typename FillRow>
absl::Status EmbedEach(const char* op, const Tensor& tokens, const Tensor& positions,
                       int64_t vocab_begin, int64_t vocab_rows, const Tensor* wpe, int64_t C,
                       const Tensor& out, FillRow fill) {
  const int64_t T = tokens.cols;
  const int32_t* tok = tokens.as<int32_t>();
  const int32_t* pos = positions.as<int32_t>();
  const float* pe = wpe != nullptr ? wpe->as<float>() : nullptr;
  const int64_t P = wpe != nullptr ? wpe->rows : 0;
  for (int64_t t = 0; t < T; ++t) {
    if (pe != nullptr && (pos[t] < 0 || pos[t] >= P)) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": position ", pos[t], " outside [0, ", P, ")"));
    }
  }
  float* o_all = out.as<float>();
  const int64_t vocab_end = vocab_begin + vocab_rows;
  UseCpuThreadsHere();
#pragma omp parallel for schedule(static) if (T > 16)
  for (int64_t t = 0; t < T; ++t) {
    float* o = o_all + t * C;
    if (tok[t] >= vocab_begin && tok[t] < vocab_end) {
      fill(tok[t] - vocab_begin, o);
    } else {
      std::fill(o, o + C, 0.0f);
    }
    if (pe != nullptr) {
      const float* p = pe + int64_t{pos[t]} * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] += p[c];
    }
  }
  return absl::OkStatus();
}

// The rows as stored, in host memory: a copy of its own, or memory another
// owner keeps (a mapped file's), each row `stride` bytes after the last.
class CpuBlockRows final : public BlockRows {
 public:
  CpuBlockRows(BlockFormat format, const uint8_t* bytes, int64_t rows, int cols)
      : format_(format), rows_(rows), cols_(cols), stride_(BlockRowBytes(format, cols)),
        bytes_(bytes, bytes + rows * stride_), base_(bytes_.data()) {}
  CpuBlockRows(BlockFormat format, const uint8_t* base, int64_t rows, int cols, int64_t stride,
               std::shared_ptr<const void> owner)
      : format_(format), rows_(rows), cols_(cols), stride_(stride), base_(base), owner_(std::move(owner)) {}
  BlockFormat format() const override { return format_; }
  int64_t rows() const override { return rows_; }
  int cols() const override { return cols_; }
  const uint8_t* row(int64_t r) const { return base_ + r * stride_; }

 private:
  BlockFormat format_;
  int64_t rows_;
  int cols_;
  int64_t stride_;
  std::vector<uint8_t> bytes_;  // empty for mapped rows
  const uint8_t* base_;
  std::shared_ptr<const void> owner_;
};

}  // namespace

absl::Status CpuBackend::Embed(const Tensor& tokens, const Tensor& positions,
                               const Tensor& wte_rows, int vocab_begin, const Tensor* wpe,
                               const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckEmbedArgs(tokens, positions, wte_rows, wpe, out));
  const int64_t C = wte_rows.cols;
  const float* rows = wte_rows.as<float>();
  return EmbedEach("Embed", tokens, positions, vocab_begin, wte_rows.rows, wpe, C, out,
                   [&](int64_t r, float* o) { std::memcpy(o, rows + r * C, C * sizeof(float)); });
}

absl::StatusOr<std::unique_ptr<BlockRows>> CpuBackend::PrepareBlockRows(BlockFormat format,
                                                                        const uint8_t* bytes,
                                                                        int64_t rows, int cols) {
  FLOVER_RETURN_IF_ERROR(CheckBlockRowsArgs(format, bytes, rows, cols));
  return std::unique_ptr<BlockRows>(new CpuBlockRows(format, bytes, rows, cols));
}

absl::StatusOr<std::unique_ptr<BlockRows>> CpuBackend::MapBlockRows(BlockFormat format, const uint8_t* base,
                                                                    int64_t rows, int cols, int64_t row_stride,
                                                                    std::shared_ptr<const void> owner) {
  FLOVER_RETURN_IF_ERROR(CheckBlockRowsArgs(format, base, rows, cols));
  if (row_stride < BlockRowBytes(format, cols)) {
    return absl::InvalidArgumentError(absl::StrCat("MapBlockRows: rows ", row_stride, " bytes apart hold ",
                                                   BlockRowBytes(format, cols), " bytes each"));
  }
  return std::unique_ptr<BlockRows>(new CpuBlockRows(format, base, rows, cols, row_stride, std::move(owner)));
}

absl::Status CpuBackend::EmbedBlocks(const Tensor& tokens, const Tensor& positions,
                                     const BlockRows& table, int vocab_begin, float scale,
                                     const Tensor* wpe, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckEmbedBlocksArgs(tokens, positions, table, wpe, out));
  const auto* rows = dynamic_cast<const CpuBlockRows*>(&table);
  if (rows == nullptr) return absl::InvalidArgumentError("EmbedBlocks: rows prepared by another backend");
  const GgmlTypeInfo& type = *GgmlTypeOf(InfoOf(table.format()).ggml_type);
  const int64_t C = table.cols();
  return EmbedEach("EmbedBlocks", tokens, positions, vocab_begin, table.rows(), wpe, C, out,
                   [&](int64_t r, float* o) {
                     GgmlDequantize(type, rows->row(r), C, o);
                     // Rounded after the dequantization, and the position
                     // added in a loop of its own: no multiply-add is fused
                     // (as the f32 table would hold it).
                     if (scale != 1.0f) {
                       for (int64_t c = 0; c < C; ++c) o[c] *= scale;
                     }
                   });
}

absl::Status CpuBackend::ArgmaxRows(const Tensor& x, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckArgmaxRowsArgs(x, out));
  const int64_t R = x.rows, V = x.cols;
  for (int64_t r = 0; r < R; ++r) {
    const float* row = x.as<float>() + r * V;
    out.as<int32_t>()[r] = static_cast<int32_t>(std::max_element(row, row + V) - row);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Add(const Tensor& x, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckAddArgs(x, out));
  const float* a = x.as<float>();
  float* o = out.as<float>();
  const int64_t n = out.elements();
  UseCpuThreadsHere();
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) o[i] += a[i];
  return absl::OkStatus();
}

absl::Status CpuBackend::Scale(const Tensor& x, float s) {
  FLOVER_RETURN_IF_ERROR(CheckScaleArgs(x, s));
  float* v = x.as<float>();
  const int64_t n = x.elements();
  UseCpuThreadsHere();
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) v[i] *= s;
  return absl::OkStatus();
}

absl::Status CpuBackend::Copy(const Tensor& src, const Tensor& dst) {
  FLOVER_RETURN_IF_ERROR(CheckCopyArgs(src, dst));
  std::memcpy(dst.data, src.data, src.bytes());
  return absl::OkStatus();
}

absl::Status CpuBackend::LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                   float eps, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckLayerNormArgs(x, gamma, beta, out, DType::kF32));
  const int64_t T = x.rows, C = x.cols;
  const float* xs = x.as<float>();
  const float* g = gamma.as<float>();
  const float* b = beta.as<float>();
  float* os = out.as<float>();
  UseCpuThreadsHere();
#pragma omp parallel for schedule(static) if (T > 8)
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = xs + t * C;
    float* o = os + t * C;
    float mean = 0.0f;
#pragma omp simd reduction(+ : mean)
    for (int64_t c = 0; c < C; ++c) mean += xr[c];
    mean /= C;
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int64_t c = 0; c < C; ++c) var += (xr[c] - mean) * (xr[c] - mean);
    const float rstd = 1.0f / std::sqrt(var / C + eps);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = (xr[c] - mean) * rstd * g[c] + b[c];
  }
  return absl::OkStatus();
}

namespace {

// out[0, n) = x / sqrt(mean(x^2) + eps) * g over n values; out may be x.
inline void RmsNormValues(const float* x, const float* g, int64_t n, float eps, float* out) {
  float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
  for (int64_t c = 0; c < n; ++c) ss += x[c] * x[c];
  const float rstd = 1.0f / std::sqrt(ss / n + eps);
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) out[c] = g[c] * (x[c] * rstd);
}

}  // namespace

absl::Status CpuBackend::RmsNorm(const Tensor& x, const Tensor& gamma, float eps,
                                 const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckRmsNormArgs(x, gamma, out, DType::kF32));
  const int64_t T = x.rows, C = x.cols;
  const float* xs = x.as<float>();
  const float* g = gamma.as<float>();
  float* os = out.as<float>();
  UseCpuThreadsHere();
#pragma omp parallel for schedule(static) if (T > 8)
  for (int64_t t = 0; t < T; ++t) RmsNormValues(xs + t * C, g, C, eps, os + t * C);
  return absl::OkStatus();
}

absl::Status CpuBackend::GroupRmsNorm(const Tensor& x, int first, int groups, const Tensor& gamma,
                                      float eps) {
  FLOVER_RETURN_IF_ERROR(CheckGroupRmsNormArgs(x, first, groups, gamma));
  const int64_t T = x.rows, W = x.cols, G = gamma.cols;
  const float* g = gamma.as<float>();
  float* xs = x.as<float>();
  UseCpuThreadsHere();
#pragma omp parallel for schedule(static) if (T > 8)
  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < groups; ++h) {
      float* v = xs + t * W + first + h * G;
      RmsNormValues(v, g, G, eps, v);
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Route(const Tensor& logits, const RouterParams& p, const Tensor& ids,
                               const Tensor& weights) {
  FLOVER_RETURN_IF_ERROR(CheckRouteArgs(logits, p, ids, weights));
  const int64_t T = logits.rows;
  const int E = static_cast<int>(logits.cols);
  for (int64_t t = 0; t < T; ++t) {
    RouteRow(logits.as<float>() + t * E, E, p, ids.as<int32_t>() + t * p.k, weights.as<float>() + t * p.k,
             [](float v) { return std::exp(v); });
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::LinearById(const Tensor& x, absl::Span<const Weight* const> experts, const Tensor* bias,
                                    const Tensor& ids, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckLinearByIdArgs(x, experts, bias, ids, out, activation_dtype(), ids.as<int32_t>()));
  const int64_t R = ids.rows * ids.cols, k = ids.cols, K = x.cols, N = out.cols;
  if (R == 0) return absl::OkStatus();
  const bool per_route = x.rows == R;
  const ExpertGroups g = GroupByExpert(ids.as<int32_t>(), R, static_cast<int>(experts.size()));
  // Each route's input row, gathered in group order; each expert's rows
  // then go through its Linear at once, and the results back to route order.
  FLOVER_ASSIGN_OR_RETURN(const Tensor in, Grown(&by_id_in_, x.dtype, R, K));
  FLOVER_ASSIGN_OR_RETURN(const Tensor res, Grown(&by_id_out_, DType::kF32, R, N));
  const int64_t in_row = K * DTypeBytes(x.dtype);
  for (int64_t i = 0; i < R; ++i) {
    const int64_t r = g.routes[i];
    std::memcpy(in.as<char>() + i * in_row, x.as<char>() + (per_route ? r : r / k) * in_row, in_row);
  }
  for (size_t e = 0; e < experts.size(); ++e) {
    const int64_t b = g.begin[e], n = g.begin[e + 1] - b;
    if (n == 0) continue;
    const Tensor expert_bias = bias != nullptr ? bias->Rows(e, 1) : Tensor{};
    FLOVER_RETURN_IF_ERROR(Linear(in.Rows(b, n), *experts[e], bias != nullptr ? &expert_bias : nullptr,
                                  Epilogue::kBias, res.Rows(b, n)));
  }
  for (int64_t i = 0; i < R; ++i) {
    std::memcpy(out.as<float>() + int64_t{g.routes[i]} * N, res.as<float>() + i * N, N * sizeof(float));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> CpuBackend::Grown(Buffer* buf, DType dtype, int64_t rows, int64_t cols) {
  const int64_t bytes = rows * cols * DTypeBytes(dtype);
  if (buf->empty() || buf->tensor().bytes() < bytes) {
    *buf = Buffer();  // the old one first: the peak is the new size alone
    FLOVER_ASSIGN_OR_RETURN(*buf, Allocate(DType::kF32, 1, (bytes + 3) / 4));
  }
  return Tensor{buf->tensor().data, dtype, rows, cols};
}

absl::Status CpuBackend::WeightedRowSum(const Tensor& y, const Tensor& weights, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckWeightedRowSumArgs(y, weights, out));
  const int64_t T = out.rows, C = out.cols, k = weights.cols;
  const float* ys = y.as<float>();
  const float* w = weights.as<float>();
  float* os = out.as<float>();
  UseCpuThreadsHere();
#pragma omp parallel for schedule(static) if (T > 8)
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      float sum = 0.0f;
      for (int64_t j = 0; j < k; ++j) sum += w[t * k + j] * ys[(t * k + j) * C + c];
      os[t * C + c] += sum;
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Rope(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq,
                              const RopeParams& p) {
  FLOVER_RETURN_IF_ERROR(CheckRopeArgs(qkv, positions, inv_freq, p));
  const int64_t T = qkv.rows, W = qkv.cols;
  const int D = p.head_dim, half = static_cast<int>(inv_freq.cols);
  const int rotated = p.q_heads + p.kv_heads;  // Q heads, then K heads
  // Dim pair i: (i, i + R/2) rotating half, (2i, 2i + 1) interleaved.
  const bool interleaved = p.style == RopeStyle::kInterleaved;
  const int a_step = interleaved ? 2 : 1, b_off = interleaved ? 1 : half;
  const float* freq = inv_freq.as<float>();
  const int32_t* pos = positions.as<int32_t>();
  const bool multimodal = positions.rows == 3;
  float* rows = qkv.as<float>();
  UseCpuThreadsHere();
#pragma omp parallel
  {
    std::vector<float> cs(half), sn(half);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      for (int i = 0; i < half; ++i) {
        // Multimodal: frequency i by its section's row of positions.
        const int32_t at = multimodal ? pos[MropeRow(p, i) * T + t] : pos[t];
        const float angle = static_cast<float>(at) * freq[i];
        cs[i] = std::cos(angle) * p.scale;
        sn[i] = std::sin(angle) * p.scale;
      }
      for (int h = 0; h < rotated; ++h) {
        float* v = rows + t * W + int64_t{h} * D;
        for (int i = 0; i < half; ++i) {
          float* x = v + i * a_step;
          const float a = x[0], b = x[b_off];
          x[0] = a * cs[i] - b * sn[i];
          x[b_off] = b * cs[i] + a * sn[i];
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Glu(const Tensor& gate_up, GluKind kind, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckGluArgs(gate_up, kind, out, DType::kF32));
  const int64_t T = out.rows, F = out.cols;
  const float* in = gate_up.as<float>();
  float* o = out.as<float>();
  UseCpuThreadsHere();
#pragma omp parallel for schedule(static) if (T > 8)
  for (int64_t t = 0; t < T; ++t) {
    const float* g = in + t * 2 * F;
    const float* u = g + F;
    if (kind == GluKind::kGeluTanh) {
#pragma omp simd
      for (int64_t f = 0; f < F; ++f) o[t * F + f] = GeluNewF(g[f]) * u[f];
    } else if (kind == GluKind::kSwigluOai) {
#pragma omp simd
      for (int64_t f = 0; f < F; ++f) {
        const float gc = std::min(g[f], kSwigluOaiLimit);
        const float uc = std::clamp(u[f], -kSwigluOaiLimit, kSwigluOaiLimit);
        o[t * F + f] = gc / (1.0f + ExpF(-kSwigluOaiAlpha * gc)) * (uc + 1.0f);
      }
    } else {
#pragma omp simd
      for (int64_t f = 0; f < F; ++f) o[t * F + f] = g[f] / (1.0f + ExpF(-g[f])) * u[f];
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::SoftCap(const Tensor& x, float cap) {
  FLOVER_RETURN_IF_ERROR(CheckSoftCapArgs(x, cap));
  float* v = x.as<float>();
  const int64_t n = x.rows * x.cols;
  UseCpuThreadsHere();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) v[i] = std::tanh(v[i] / cap) * cap;  // as transformers
  return absl::OkStatus();
}

absl::Status CpuBackend::Sigmoid(const Tensor& x) {
  FLOVER_RETURN_IF_ERROR(CheckSigmoidArgs(x));
  float* v = x.as<float>();
  const int64_t n = x.rows * x.cols;
  for (int64_t i = 0; i < n; ++i) v[i] = 1.0f / (1.0f + std::exp(-v[i]));
  return absl::OkStatus();
}

absl::Status CpuBackend::Linear(const Tensor& x, const Weight& w, const Tensor* bias,
                                Epilogue epilogue, const Tensor& out) {
  // Inputs and outputs stay f32 here: bf16 inputs are rounded inside.
  FLOVER_RETURN_IF_ERROR(CheckLinearArgs(x, w, bias, epilogue, out, DType::kF32, DType::kF32));
  if (x.rows == 0) return absl::OkStatus();
  const float* b = bias != nullptr ? bias->as<float>() : nullptr;
  if (BlockLinear::Holds(w)) {
    blocks_->Run(x.as<float>(), static_cast<int>(x.rows), w, b, epilogue, out.as<float>());
  } else if (int8_ != nullptr) {
    int8_->Run(x.as<float>(), static_cast<int>(x.rows), w, b, epilogue, out.as<float>());
  } else if (FmaLinear::Holds(w)) {
    fma_->Run(x.as<float>(), static_cast<int>(x.rows), w, b, epilogue, out.as<float>());
  } else {
    linear_.Run(x.as<float>(), static_cast<int>(x.rows), w, b, epilogue, out.as<float>());
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::AppendKv(const Tensor& qkv, const SeqTable& seqs, const KvLayer& kv) {
  FLOVER_RETURN_IF_ERROR(CheckAppendKvArgs(qkv, seqs, kv, kv_format_));
  ForFormat<AppendOp>(kv.format)(qkv.as<float>(), seqs, kv, QueryHeads(qkv, kv));
  return absl::OkStatus();
}

absl::Status CpuBackend::Attention(const Tensor& qkv, const SeqTable& seqs, const KvLayer& kv,
                                   const AttentionParams& p, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckAttentionArgs(qkv, seqs, kv, p, out, kv_format_, DType::kF32));
  ForFormat<AttentionOp>(kv.format)(qkv.as<float>(), seqs, kv, QueryHeads(qkv, kv, p.q_only), p,
                                    out.as<float>());
  return absl::OkStatus();
}

absl::Status CpuBackend::EncoderAttention(const Tensor& qkv, absl::Span<const int32_t> group_ends, int heads,
                                          float scale, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckEncoderAttentionArgs(qkv, group_ends, heads, scale, out));
  const int64_t H = heads, D = qkv.cols / (3 * H), W = qkv.cols;
  const float s = scale > 0 ? scale : 1.0f / std::sqrt(static_cast<float>(D));
  const float* x = qkv.as<float>();
  float* y = out.as<float>();
  UseCpuThreadsHere();
  // Per group and head, two oneDNN products over the rows in place (Q K^T,
  // then P V) and the softmax between them. Each group's products have its
  // own shapes and nothing else in them, so a row's result is the same in
  // any batch.
  std::vector<float> scores;
  int64_t begin = 0;
  for (int32_t end : group_ends) {
    const int64_t n = end - begin;
    scores.resize(n * n);
    for (int64_t h = 0; h < H; ++h) {
      const float* q = x + begin * W + h * D;
      const float* k = x + begin * W + (H + h) * D;
      const float* v = x + begin * W + (2 * H + h) * D;
      if (dnnl_sgemm('N', 'T', n, n, D, s, q, W, k, W, 0.0f, scores.data(), n) != dnnl_success) {
        return absl::InternalError("EncoderAttention: oneDNN's sgemm failed (scores)");
      }
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) {
        float* row = scores.data() + i * n;
        float top = -INFINITY;
        for (int64_t j = 0; j < n; ++j) top = std::max(top, row[j]);
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < n; ++j) {
          row[j] = ExpF(row[j] - top);
          sum += row[j];
        }
        const float inv = 1.0f / sum;
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) row[j] *= inv;
      }
      if (dnnl_sgemm('N', 'N', n, D, n, 1.0f, scores.data(), n, v, W, 0.0f, y + begin * H * D + h * D, H * D) !=
          dnnl_success) {
        return absl::InternalError("EncoderAttention: oneDNN's sgemm failed (values)");
      }
    }
    begin = end;
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::GatherLastRows(const Tensor& x, const SeqTable& seqs, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckGatherLastRowsArgs(x, seqs, out));
  const int64_t C = x.cols;
  for (int s = 0; s < seqs.num_seqs; ++s) {
    const int64_t row = seqs.host[s].row + seqs.host[s].len - 1;
    std::memcpy(out.as<float>() + s * C, x.as<float>() + row * C, C * sizeof(float));
  }
  return absl::OkStatus();
}

}  // namespace flover::kernels
