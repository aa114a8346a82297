#include "kernels/cpu/cpu_ops.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/vec_math.h"

namespace flover::kernels {
namespace {

// Rows of one (sequence, head) pair handled by one task in Attention: few
// enough to balance a long causal prefill across threads.
constexpr int kAttentionRowBlock = 32;

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

// Scores of one query against one block of keys: s[j] = sum_d q[d] k[d][j],
// accumulated over d in order. The block's kKeyBlock scores stay in
// registers across the d loop, so each multiply-add loads only the key.
// block: [D, kKeyBlock]; scores: [kKeyBlock].
template <typename T>
void ScoreBlock(const float* q, const T* block, int D, const T* next, float* scores) {
  constexpr int kJ = KvLayer::kKeyBlock;
  float acc[kJ] = {};
  for (int d = 0; d < D; ++d) {
    const float qd = q[d];
    const T* kd = block + int64_t{d} * kJ;
    PrefetchRow(next + int64_t{d} * kJ, kJ);
#pragma omp simd
    for (int j = 0; j < kJ; ++j) acc[j] += qd * Load(kd[j]);
  }
  std::copy(acc, acc + kJ, scores);
}

// out[0, D) = sum_j w[j] v[j], accumulated over j in order, the D outputs
// kept in registers when D is the usual 64.
template <int kD, typename T>
void WeightedSum(const float* w, const T* v, int n, float* out) {
  constexpr int kAhead = 4096 / (kD * sizeof(T));  // rows: 4 KB ahead
  float acc[kD] = {};
  for (int j = 0; j < n; ++j) {
    const float wj = w[j];
    const T* vj = v + int64_t{j} * kD;
    if (j + kAhead < n) PrefetchRow(vj + kAhead * kD, kD);
#pragma omp simd
    for (int d = 0; d < kD; ++d) acc[d] += wj * Load(vj[d]);
  }
  std::copy(acc, acc + kD, out);
}

// One query row against positions [0, n) of one head's cache.
// q: [D] (already scaled); keys: the head's blocked keys (KvLayer); v: [n, D];
// scores: scratch [n rounded up to kKeyBlock]; out: [D]. Every row of every
// batch goes through this one function, which is what makes attention
// batch-invariant. The last block is scored whole; positions past n are
// never read back.
template <typename T>
void AttendRow(const float* q, const T* keys, const T* v, int n, int D, float* scores,
               float* out) {
  constexpr int kJ = KvLayer::kKeyBlock;
  for (int b = 0; b * kJ < n; ++b) {
    // While scoring a block, fetch the next one, or after the last the first
    // values (as many as a block's worth of lines).
    const T* next = (b + 1) * kJ < n ? keys + int64_t{b + 1} * D * kJ : v;
    ScoreBlock(q, keys + int64_t{b} * D * kJ, D, next, scores + int64_t{b} * kJ);
  }
  float max_score = -INFINITY;
  for (int j = 0; j < n; ++j) max_score = std::max(max_score, scores[j]);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < n; ++j) {
    scores[j] = ExpF(scores[j] - max_score);
    sum += scores[j];
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int j = 0; j < n; ++j) scores[j] *= inv;
  if (D == 64) {
    WeightedSum<64>(scores, v, n, out);
    return;
  }
  std::fill(out, out + D, 0.0f);
  for (int j = 0; j < n; ++j) {
    const T* vj = v + int64_t{j} * D;
#pragma omp simd
    for (int d = 0; d < D; ++d) out[d] += scores[j] * Load(vj[d]);
  }
}

// Attention with K and V stored as T (float or bfloat16 bits); see
// CpuOps::Attention.
template <typename T>
void AttentionOver(const float* qkv, const SeqRows* seqs, int num_seqs, const KvLayer& kv,
                   float* out) {
  const int H = kv.heads;
  const int D = kv.head_dim;
  const int64_t HD = int64_t{H} * D;
  const int64_t row_stride = 3 * HD;
  T* const keys = static_cast<T*>(kv.k);
  T* const values = static_cast<T*>(kv.v);

  // 1. Append this step's keys and values to each sequence's slot.
#pragma omp parallel for collapse(2) schedule(static)
  for (int s = 0; s < num_seqs; ++s) {
    for (int h = 0; h < H; ++h) {
      const SeqRows& seq = seqs[s];
      const int64_t base = seq.slot * kv.slot_stride() + h * kv.head_stride();
      for (int i = 0; i < seq.len; ++i) {
        const float* row = qkv + (int64_t{seq.row} + i) * row_stride;
        const int pos = seq.pos + i;
        const float* k = row + HD + int64_t{h} * D;
        const float* v = row + 2 * HD + int64_t{h} * D;
        for (int d = 0; d < D; ++d) Store(k[d], &keys[base + kv.key_offset(d, pos)]);
        T* v_to = values + base + int64_t{pos} * D;
        for (int d = 0; d < D; ++d) Store(v[d], &v_to[d]);
      }
    }
  }

  // 2. Tasks of (sequence, head, block of rows), so a long prompt spreads
  //    over threads as well as a wide decode batch does.
  struct Task {
    int seq, head, first_row, rows;
  };
  std::vector<Task> tasks;
  for (int s = 0; s < num_seqs; ++s) {
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < seqs[s].len; i += kAttentionRowBlock) {
        tasks.push_back({s, h, i, std::min(kAttentionRowBlock, seqs[s].len - i)});
      }
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int num_tasks = static_cast<int>(tasks.size());
#pragma omp parallel
  {
    std::vector<float> scores(kv.padded_seq());
    std::vector<float> q(D);
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < num_tasks; ++t) {
      const Task& task = tasks[t];
      const SeqRows& seq = seqs[task.seq];
      const int64_t base = seq.slot * kv.slot_stride() + task.head * kv.head_stride();
      const int64_t row = int64_t{seq.row} + task.first_row;
      const float* qr = qkv + row * row_stride + int64_t{task.head} * D;
      float* o = out + row * HD + int64_t{task.head} * D;
      // Every row goes through the same kernel, so a row's result never
      // depends on how the batch around it was formed.
      for (int i = 0; i < task.rows; ++i) {
        for (int d = 0; d < D; ++d) q[d] = qr[i * row_stride + d] * scale;
        AttendRow(q.data(), keys + base, values + base, seq.pos + task.first_row + i + 1, D,
                  scores.data(), o + i * HD);
      }
    }
  }
}

}  // namespace

void SetCpuThreads(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
}

int CpuThreads() { return omp_get_max_threads(); }

void CpuOps::Embed(const int32_t* tokens, const int32_t* positions, int T,
                   const float* wte_rows, int vocab_begin, int vocab_end,
                   const float* wpe, int C, float* out) {
#pragma omp parallel for schedule(static) if (T > 16)
  for (int t = 0; t < T; ++t) {
    float* o = out + int64_t{t} * C;
    const bool here = tokens[t] >= vocab_begin && tokens[t] < vocab_end;
    if (here) {
      const float* e = wte_rows + int64_t{tokens[t] - vocab_begin} * C;
      std::memcpy(o, e, C * sizeof(float));
    } else {
      std::fill(o, o + C, 0.0f);
    }
    if (wpe != nullptr) {
      const float* p = wpe + int64_t{positions[t]} * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] += p[c];
    }
  }
}

void CpuOps::Add(const float* x, int64_t n, float* out) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) out[i] += x[i];
}

void CpuOps::LayerNorm(const float* x, int T, int C, const float* gamma,
                       const float* beta, float eps, float* out) {
#pragma omp parallel for schedule(static) if (T > 8)
  for (int t = 0; t < T; ++t) {
    const float* xr = x + int64_t{t} * C;
    float* o = out + int64_t{t} * C;
    float mean = 0.0f;
#pragma omp simd reduction(+ : mean)
    for (int c = 0; c < C; ++c) mean += xr[c];
    mean /= C;
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int c = 0; c < C; ++c) var += (xr[c] - mean) * (xr[c] - mean);
    const float rstd = 1.0f / std::sqrt(var / C + eps);
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = (xr[c] - mean) * rstd * gamma[c] + beta[c];
  }
}

std::unique_ptr<Weight> CpuOps::PrepareWeight(const float* w, int K, int N,
                                              WeightLayout layout) {
  return linear_.Prepare(w, K, N, layout);
}

void CpuOps::Linear(const float* x, int M, const Weight& w, const float* bias,
                    Epilogue epilogue, float* out) {
  linear_.Run(x, M, w, bias, epilogue, out);
}

absl::StatusOr<MatmulDtype> ParseMatmulDtype(absl::string_view name) {
  MatmulDtype dtype;
  if (name == "f32") {
    dtype = MatmulDtype::kF32;
  } else if (name == "bf16") {
    dtype = MatmulDtype::kBF16;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype: must be f32 or bf16, got '", name, "'"));
  }
  if (absl::Status st = OneDnnLinear::CheckSupported(dtype); !st.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("--dtype=", name, ": ", st.message()));
  }
  return dtype;
}

absl::StatusOr<KvDtype> ParseKvDtype(absl::string_view name) {
  if (name == "f32") return KvDtype::kF32;
  if (name == "bf16") return KvDtype::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("--kv_dtype: must be f32 or bf16, got '", name, "'"));
}

void CpuOps::PrepareLinear(const Weight& w, int max_rows, bool has_bias, Epilogue epilogue) {
  linear_.PrepareRows(w, max_rows, has_bias, epilogue);
}

void CpuOps::Attention(const float* qkv, const SeqRows* seqs, int num_seqs,
                       const KvLayer& kv, float* out) {
  if (kv.dtype == KvDtype::kBF16) {
    AttentionOver<uint16_t>(qkv, seqs, num_seqs, kv, out);
  } else {
    AttentionOver<float>(qkv, seqs, num_seqs, kv, out);
  }
}

void CpuOps::MoveKvSlot(const KvLayer& kv, int from, int to, int len) {
  if (from == to || len <= 0) return;
  const int D = kv.head_dim;
  for (int h = 0; h < kv.heads; ++h) {
    const int64_t src = from * kv.slot_stride() + h * kv.head_stride();
    const int64_t dst = to * kv.slot_stride() + h * kv.head_stride();
    // Keys: the blocks holding positions [0, len), one contiguous run.
    const int64_t key_blocks = (len + KvLayer::kKeyBlock - 1) / KvLayer::kKeyBlock;
    const size_t e = KvDtypeBytes(kv.dtype);
    char* k = static_cast<char*>(kv.k);
    char* v = static_cast<char*>(kv.v);
    std::memcpy(k + dst * e, k + src * e, size_t(key_blocks) * D * KvLayer::kKeyBlock * e);
    std::memcpy(v + dst * e, v + src * e, size_t(len) * D * e);
  }
}

}  // namespace flover::kernels
