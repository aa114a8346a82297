#include "kernels/cpu/cpu_ops.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/vec_math.h"
#include "oneapi/dnnl/dnnl.h"

namespace flover::kernels {
namespace {

// Rows of one (sequence, head) pair handled by one task in Attention; small
// enough to balance a long causal prefill across threads.
constexpr int kAttentionRowBlock = 16;

void Sgemm(char trans_b, int M, int N, int K, const float* a, const float* b,
           float beta, float* c) {
  const int ldb = trans_b == 'T' ? K : N;
  // Arguments are validated by the callers' shapes; a failure here is a bug.
  const dnnl_status_t st =
      dnnl_sgemm('N', trans_b, M, N, K, 1.0f, a, K, b, ldb, beta, c, N);
  if (st != dnnl_success) std::abort();
}

// One query row against positions [0, n) of one head's cache.
// q: [D] (already scaled); k, v: [n, D]; scores: scratch [n]; out: [D].
void AttendRow(const float* q, const float* k, const float* v, int n, int D,
               float* scores, float* out) {
  float max_score = -INFINITY;
  for (int j = 0; j < n; ++j) {
    const float* kj = k + int64_t{j} * D;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int d = 0; d < D; ++d) s += q[d] * kj[d];
    scores[j] = s;
    max_score = std::max(max_score, s);
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < n; ++j) {
    scores[j] = ExpF(scores[j] - max_score);
    sum += scores[j];
  }
  const float inv = 1.0f / sum;
  std::fill(out, out + D, 0.0f);
  for (int j = 0; j < n; ++j) {
    const float w = scores[j] * inv;
    const float* vj = v + int64_t{j} * D;
#pragma omp simd
    for (int d = 0; d < D; ++d) out[d] += w * vj[d];
  }
}

}  // namespace

void SetCpuThreads(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
}

int CpuThreads() { return omp_get_max_threads(); }

void CpuOps::Embed(const int32_t* tokens, const int32_t* positions, int T,
                   const float* wte, const float* wpe, int C, float* out) {
#pragma omp parallel for schedule(static) if (T > 16)
  for (int t = 0; t < T; ++t) {
    const float* e = wte + int64_t{tokens[t]} * C;
    const float* p = wpe + int64_t{positions[t]} * C;
    float* o = out + int64_t{t} * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
  }
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

void CpuOps::Linear(const float* x, int M, int K, const float* w, int N,
                    const float* bias, bool accumulate, float* out) {
  Sgemm('N', M, N, K, x, w, accumulate ? 1.0f : 0.0f, out);
  if (bias == nullptr) return;
#pragma omp parallel for schedule(static) if (int64_t{M} * N > 65536)
  for (int m = 0; m < M; ++m) {
    float* o = out + int64_t{m} * N;
#pragma omp simd
    for (int n = 0; n < N; ++n) o[n] += bias[n];
  }
}

void CpuOps::LinearGelu(const float* x, int M, int K, const float* w, int N,
                        const float* bias, float* out) {
  Sgemm('N', M, N, K, x, w, 0.0f, out);
#pragma omp parallel for schedule(static) if (int64_t{M} * N > 16384)
  for (int m = 0; m < M; ++m) {
    float* o = out + int64_t{m} * N;
#pragma omp simd
    for (int n = 0; n < N; ++n) o[n] = GeluNewF(o[n] + bias[n]);
  }
}

void CpuOps::LinearTransposed(const float* x, int M, int K, const float* w,
                              int N, float* out) {
  Sgemm('T', M, N, K, x, w, 0.0f, out);
}

void CpuOps::Attention(const float* qkv, const SeqRows* seqs, int num_seqs,
                       const KvLayer& kv, float* out) {
  const int H = kv.heads;
  const int D = kv.head_dim;
  const int64_t HD = int64_t{H} * D;
  const int64_t row_stride = 3 * HD;

  // 1. Append this step's keys and values to each sequence's slot.
#pragma omp parallel for collapse(2) schedule(static)
  for (int s = 0; s < num_seqs; ++s) {
    for (int h = 0; h < H; ++h) {
      const SeqRows& seq = seqs[s];
      const int64_t base = seq.slot * kv.slot_stride() + h * kv.head_stride();
      for (int i = 0; i < seq.len; ++i) {
        const float* row = qkv + (int64_t{seq.row} + i) * row_stride;
        const int64_t dst = base + int64_t{seq.pos + i} * D;
        std::memcpy(kv.k + dst, row + HD + int64_t{h} * D, D * sizeof(float));
        std::memcpy(kv.v + dst, row + 2 * HD + int64_t{h} * D,
                    D * sizeof(float));
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
    std::vector<float> scores(kv.max_seq);
    std::vector<float> q(D);
#pragma omp for schedule(dynamic, 4)
    for (int t = 0; t < num_tasks; ++t) {
      const Task& task = tasks[t];
      const SeqRows& seq = seqs[task.seq];
      const int64_t base =
          seq.slot * kv.slot_stride() + task.head * kv.head_stride();
      for (int i = task.first_row; i < task.first_row + task.rows; ++i) {
        const int64_t row = int64_t{seq.row} + i;
        const float* qr = qkv + row * row_stride + int64_t{task.head} * D;
        for (int d = 0; d < D; ++d) q[d] = qr[d] * scale;
        AttendRow(q.data(), kv.k + base, kv.v + base, seq.pos + i + 1, D,
                  scores.data(), out + row * HD + int64_t{task.head} * D);
      }
    }
  }
}

void CpuOps::MoveKvSlot(const KvLayer& kv, int from, int to, int len) {
  if (from == to || len <= 0) return;
  const size_t bytes = size_t(len) * kv.head_dim * sizeof(float);
  for (int h = 0; h < kv.heads; ++h) {
    const int64_t src = from * kv.slot_stride() + h * kv.head_stride();
    const int64_t dst = to * kv.slot_stride() + h * kv.head_stride();
    std::memcpy(kv.k + dst, kv.k + src, bytes);
    std::memcpy(kv.v + dst, kv.v + src, bytes);
  }
}

}  // namespace flover::kernels
