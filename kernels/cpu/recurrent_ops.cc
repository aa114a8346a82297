// The CPU backend's recurrent-layer ops (backend.h): Gate, CausalConv and
// GatedDeltaRule. Each sequence's rows run one at a time in order of
// position, in one code path whatever their number, so a decode step and a
// prefill chunk compute a row with the same arithmetic (and a sequence's
// rows never depend on the other sequences of the call): the recurrent
// half of the batch-invariance promise. Sums run in index order; loops
// across the state's columns are vectorized, which changes no sum's order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/checks.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_threads.h"
#include "kernels/cpu/vec_math.h"
#include "util/status_macros.h"

namespace flover::kernels {
namespace {

inline float Silu(float x) { return x / (1.0f + ExpF(-x)); }

// torch's softplus (beta 1, threshold 20).
inline float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

}  // namespace

absl::Status CpuBackend::Gate(const Tensor& x, const Tensor& gate, GateKind act, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckGateArgs(x, gate, act, out));
  const int64_t n = x.rows * x.cols;
  const float* xs = x.as<float>();
  const float* g = gate.as<float>();
  float* o = out.as<float>();
  UseCpuThreadsHere();
  switch (act) {
    case GateKind::kIdentity:
#pragma omp parallel for simd schedule(static) if (n > 65536)
      for (int64_t i = 0; i < n; ++i) o[i] = xs[i] * g[i];
      break;
    case GateKind::kSigmoid:
#pragma omp parallel for simd schedule(static) if (n > 65536)
      for (int64_t i = 0; i < n; ++i) o[i] = xs[i] * (1.0f / (1.0f + ExpF(-g[i])));
      break;
    case GateKind::kSilu:
#pragma omp parallel for simd schedule(static) if (n > 65536)
      for (int64_t i = 0; i < n; ++i) o[i] = xs[i] * Silu(g[i]);
      break;
    case GateKind::kGeluTanh:
#pragma omp parallel for simd schedule(static) if (n > 65536)
      for (int64_t i = 0; i < n; ++i) o[i] = xs[i] * GeluNewF(g[i]);
      break;
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::CausalConv(const Tensor& x, const SeqTable& seqs, const StateTable& states,
                                    const StateLayer& layer, const Tensor& w, const Tensor* bias, ConvActivation act,
                                    const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckCausalConvArgs(x, seqs, states, layer, w, bias, act, out));
  const float* bs = bias != nullptr ? bias->as<float>() : nullptr;
  const int64_t C = x.cols;
  const int K = static_cast<int>(w.cols), W = K - 1;
  const float* xs = x.as<float>();
  const float* ws = w.as<float>();
  float* o = out.as<float>();
  // Channels in bands, so a long prompt and a wide decode batch both
  // spread over threads; each (sequence, band) is one task.
  constexpr int64_t kBand = 512;
  const int64_t bands = (C + kBand - 1) / kBand;
  const int64_t tasks = int64_t{seqs.num_seqs} * bands;
  UseCpuThreadsHere();
#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1)
  for (int64_t task = 0; task < tasks; ++task) {
    const SeqRows& s = seqs.host[task / bands];
    const SeqState& st = states.host[task / bands];
    const int64_t c0 = (task % bands) * kBand, c1 = std::min(C, c0 + kBand);
    const float* before = st.read == SeqState::kNoSlot ? nullptr : layer.conv + st.read * layer.conv_elems;
    // u[i] for i in [-W, len): the W inputs before the rows (the read
    // slot's window, or zeros), then the rows.
    auto u = [&](int i, int64_t c) -> float {
      if (i >= 0) return xs[(s.row + i) * C + c];
      return before == nullptr ? 0.0f : before[(W + i) * C + c];
    };
    static const float kZeros[kBand] = {};
    const int64_t n = c1 - c0;
    for (int t = 0; t < s.len; ++t) {
      // Tap j reads input t - W + j: a row, the window before, or zeros.
      float acc[kBand];
      std::fill(acc, acc + n, 0.0f);
      for (int j = 0; j < K; ++j) {
        const int i = t - W + j;
        const float* in = i >= 0 ? xs + (s.row + i) * C + c0
                                 : (before == nullptr ? kZeros : before + (W + i) * C + c0);
        const float* wj = ws + c0 * K + j;
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) acc[c] += wj[c * K] * in[c];
      }
      float* row = o + (s.row + t) * C + c0;
      if (bs != nullptr) {
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) acc[c] += bs[c0 + c];
      }
      if (act == ConvActivation::kSilu) {
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) row[c] = Silu(acc[c]);
      } else {
        std::copy(acc, acc + n, row);
      }
    }
    // The write slot's window: the last W inputs, oldest first. In place
    // (read == write) entry j takes entry len + j > j: ascending order reads
    // each old entry before it is overwritten.
    float* window = layer.conv + st.write * layer.conv_elems;
    for (int j = 0; j < W; ++j) {
      for (int64_t c = c0; c < c1; ++c) window[j * C + c] = u(s.len - W + j, c);
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::GatedDeltaRule(const Tensor& qkv, const Tensor& b, const Tensor& a,
                                        const Tensor& decay_a, const Tensor& dt_bias, const SeqTable& seqs,
                                        const StateTable& states, const StateLayer& layer,
                                        const DeltaRuleParams& p, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckGatedDeltaRuleArgs(qkv, b, a, decay_a, dt_bias, seqs, states, layer, p, out));
  const int Hk = p.k_heads, Hv = p.v_heads, dk = p.k_dim, dv = p.v_dim;
  const int64_t width = qkv.cols, k_at = int64_t{Hk} * dk, v_at = 2 * k_at, out_cols = out.cols;
  const float* in = qkv.as<float>();
  const float* bs = b.as<float>();
  const float* as = a.as<float>();
  const float* decay = decay_a.as<float>();
  const float* bias = dt_bias.as<float>();
  float* o = out.as<float>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  const int64_t tasks = int64_t{seqs.num_seqs} * Hv;
  UseCpuThreadsHere();
#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1)
  for (int64_t task = 0; task < tasks; ++task) {
    const SeqRows& s = seqs.host[task / Hv];
    const SeqState& st = states.host[task / Hv];
    const int h = static_cast<int>(task % Hv), g = p.key_head(h);
    // S: [dk, dv], this head's state, carried through the rows in the
    // write slot (which no other sequence of the call reads or writes).
    float* S = layer.scan + st.write * layer.scan_elems + int64_t{h} * dk * dv;
    if (st.read == SeqState::kNoSlot) {
      std::fill(S, S + size_t(dk) * dv, 0.0f);
    } else if (st.read != st.write) {
      const float* from = layer.scan + st.read * layer.scan_elems + int64_t{h} * dk * dv;
      std::copy(from, from + size_t(dk) * dv, S);
    }
    float q[kMaxDeltaHeadDim], k[kMaxDeltaHeadDim], kv_mem[kMaxDeltaHeadDim], delta[kMaxDeltaHeadDim];
    for (int t = 0; t < s.len; ++t) {
      const int64_t row = s.row + t;
      const float* qs = in + row * width + int64_t{g} * dk;
      const float* ks = in + row * width + k_at + int64_t{g} * dk;
      const float* vs = in + row * width + v_at + int64_t{h} * dv;
      float qq = 0.0f, kk = 0.0f;
      for (int i = 0; i < dk; ++i) {
        qq += qs[i] * qs[i];
        kk += ks[i] * ks[i];
      }
      const float q_inv = 1.0f / std::sqrt(qq + 1e-6f), k_inv = 1.0f / std::sqrt(kk + 1e-6f);
      for (int i = 0; i < dk; ++i) {
        q[i] = qs[i] * q_inv * scale;
        k[i] = ks[i] * k_inv;
      }
      const float beta = 1.0f / (1.0f + std::exp(-bs[row * Hv + h]));
      const float d = std::exp(decay[h] * Softplus(as[row * Hv + h] + bias[h]));
      // S *= decay; kv_mem = S^T k.
      std::fill(kv_mem, kv_mem + dv, 0.0f);
      for (int i = 0; i < dk; ++i) {
        float* Si = S + size_t(i) * dv;
        const float ki = k[i];
#pragma omp simd
        for (int j = 0; j < dv; ++j) {
          Si[j] *= d;
          kv_mem[j] += Si[j] * ki;
        }
      }
#pragma omp simd
      for (int j = 0; j < dv; ++j) delta[j] = (vs[j] - kv_mem[j]) * beta;
      // S += k delta^T; out = S^T q.
      float* out_row = o + row * out_cols + int64_t{h} * dv;
      std::fill(out_row, out_row + dv, 0.0f);
      for (int i = 0; i < dk; ++i) {
        float* Si = S + size_t(i) * dv;
        const float ki = k[i], qi = q[i];
#pragma omp simd
        for (int j = 0; j < dv; ++j) {
          Si[j] += ki * delta[j];
          out_row[j] += Si[j] * qi;
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::SelectiveScan(const Tensor& xbc, const Tensor& dt, const Tensor& a, const Tensor& d,
                                       const Tensor& dt_bias, const SeqTable& seqs, const StateTable& states,
                                       const StateLayer& layer, const ScanParams& p, const Tensor& out) {
  FLOVER_RETURN_IF_ERROR(CheckSelectiveScanArgs(xbc, dt, a, d, dt_bias, seqs, states, layer, p, out));
  const int H = p.heads, P = p.head_dim, N = p.state_size, per_group = p.heads / p.groups;
  const int64_t width = xbc.cols, b_at = int64_t{H} * P, c_at = b_at + int64_t{p.groups} * N, out_cols = out.cols;
  const float* in = xbc.as<float>();
  const float* dts = dt.as<float>();
  const float* as = a.as<float>();
  const float* ds = d.as<float>();
  const float* bias = dt_bias.as<float>();
  float* o = out.as<float>();
  const int64_t tasks = int64_t{seqs.num_seqs} * H;
  UseCpuThreadsHere();
#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1)
  for (int64_t task = 0; task < tasks; ++task) {
    const SeqRows& s = seqs.host[task / H];
    const SeqState& st = states.host[task / H];
    const int h = static_cast<int>(task % H), g = h / per_group;
    // S: [P, N], this head's state, carried through the rows in the write
    // slot (which no other sequence of the call reads or writes).
    float* S = layer.scan + st.write * layer.scan_elems + int64_t{h} * P * N;
    if (st.read == SeqState::kNoSlot) {
      std::fill(S, S + size_t(P) * N, 0.0f);
    } else if (st.read != st.write) {
      const float* from = layer.scan + st.read * layer.scan_elems + int64_t{h} * P * N;
      std::copy(from, from + size_t(P) * N, S);
    }
    float dtb[kMaxScanStateSize];
    for (int t = 0; t < s.len; ++t) {
      const int64_t row = s.row + t;
      const float* x = in + row * width + int64_t{h} * P;
      const float* B = in + row * width + b_at + int64_t{g} * N;
      const float* C = in + row * width + c_at + int64_t{g} * N;
      const float step = std::min(std::max(Softplus(dts[row * H + h] + bias[h]), p.dt_min), p.dt_max);
      const float decay = std::exp(step * as[h]);
#pragma omp simd
      for (int n = 0; n < N; ++n) dtb[n] = step * B[n];
      float* y = o + row * out_cols + int64_t{h} * P;
      for (int i = 0; i < P; ++i) {
        float* Si = S + size_t(i) * N;
        const float xi = x[i];
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int n = 0; n < N; ++n) {
          Si[n] = Si[n] * decay + dtb[n] * xi;
          sum += Si[n] * C[n];
        }
        y[i] = sum + ds[h] * xi;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace flover::kernels
