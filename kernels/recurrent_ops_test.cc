// The recurrent-layer ops of the backend contract (Gate, CausalConv,
// GatedDeltaRule, SelectiveScan, and Copy for checkpoints) on every backend present: against naive double-precision
// references written here from the Hugging Face definitions, the CPU
// backend's results, and themselves. Each op's step form (one row) and chunk
// form (many rows) are one code path: a sequence run in one chunk, in
// chunks of any lengths and a row at a time, alone or beside other
// sequences, gives the same outputs and the same final state, bitwise. The
// state slots: reading kNoSlot is reading zeros; a step that reads one slot
// and writes another leaves the first as it was.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "testing/numerics.h"
#include "testing/op_harness.h"

namespace flover::kernels {
namespace {

using ::flover::testing::GeluRef;
using ::flover::testing::Random;
using ::flover::testing::RelErr;
using testing::Dev;
using testing::MakeDev;

double SiluD(double x) { return x / (1.0 + std::exp(-x)); }
double SigmoidD(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double SoftplusD(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

class RecurrentOpsTest : public ::testing::TestWithParam<const char*> {
 protected:
  std::string device() const { return GetParam(); }
};

TEST_P(RecurrentOpsTest, GateEachActivation) {
  for (const GateKind act : {GateKind::kIdentity, GateKind::kSigmoid, GateKind::kSilu, GateKind::kGeluTanh}) {
    RUN_OR_SKIP(device(), MatmulDtype::kF32, KvDtype::kF32, 1e-6, [act](Dev& d) {
      const int T = 5, C = 37;
      const auto x = Random(T * C, 1), g = Random(T * C, 2);
      const Tensor xt = d.Up(x, T, C), out = d.New(DType::kF32, T, C);
      EXPECT_TRUE(d->Gate(xt, d.Up(g, T, C), act, out).ok());
      const std::vector<float> got = d.Down(out);
      std::vector<float> want(T * C);
      for (int i = 0; i < T * C; ++i) {
        const double f = act == GateKind::kIdentity  ? g[i]
                         : act == GateKind::kSigmoid ? SigmoidD(g[i])
                         : act == GateKind::kSilu    ? SiluD(g[i])
                                                     : GeluRef(g[i]);
        want[i] = static_cast<float>(x[i] * f);
      }
      EXPECT_LT(RelErr(got, want), 1e-6);
      // In place (out = x) gives the same.
      EXPECT_TRUE(d->Gate(xt, d.Up(g, T, C), act, xt).ok());
      EXPECT_EQ(d.Down(xt), got);
      return got;
    });
  }
}

// A state arena of `slots` slots of one layer (conv window and scan state),
// filled with `fill` (so a read of a slot never written shows).
struct Arena {
  Arena(Dev& d, int slots, int64_t conv_elems, int64_t scan_elems, float fill) {
    const int64_t n = slots * (conv_elems + scan_elems);
    data = d.Up(std::vector<float>(n, fill), 1, n);
    layer.conv = data.as<float>();
    layer.scan = scan_elems > 0 ? data.as<float>() + slots * conv_elems : nullptr;
    layer.slots = slots;
    layer.conv_elems = conv_elems;
    layer.scan_elems = scan_elems;
  }
  std::vector<float> Conv(Dev& d, int slot) const {
    return d.Down(data.View(slot * layer.conv_elems, 1, layer.conv_elems));
  }
  std::vector<float> Scan(Dev& d, int slot) const {
    return d.Down(data.View(layer.slots * layer.conv_elems + slot * layer.scan_elems, 1, layer.scan_elems));
  }
  Tensor data;
  StateLayer layer;
};

// One call's sequences: (pos, len) of the sequence under test, optionally
// after another sequence of `other_len` rows at position 0.
struct Call {
  int pos, len;
};

// The sequence under test's rows through an op in calls of the given
// lengths, each beside another sequence or not, its state carried in slot 1
// (the other sequence in slot 3); returns its rows' outputs, then its final
// state (window and scan). `op` runs one call: (input rows, seqs, states).
using RunCall = std::function<Tensor(Dev&, const Tensor& in, const SeqTable&, const StateTable&, int T)>;

std::vector<float> RunInCalls(Dev& d, Arena& arena, const std::vector<float>& rows, int width, int out_width,
                              const std::vector<int>& lengths, bool beside_other, const RunCall& op) {
  std::vector<float> outputs;
  int pos = 0;
  for (int len : lengths) {
    std::vector<SeqRows> seqs;
    std::vector<int32_t> states;
    std::vector<float> in;
    if (beside_other) {
      const int n = 3;
      seqs.push_back({0, 0, n, 0});
      states.insert(states.end(), {SeqState::kNoSlot, 3});
      const auto other = Random(n * width, 90 + pos);
      in.insert(in.end(), other.begin(), other.end());
    }
    const int row = beside_other ? 3 : 0;
    seqs.push_back({0, pos, len, row});
    states.insert(states.end(), {pos == 0 ? SeqState::kNoSlot : 1, 1});
    in.insert(in.end(), rows.begin() + size_t(pos) * width, rows.begin() + size_t(pos + len) * width);
    const int T = row + len;
    const SeqTable table = d.Seqs(seqs, T);
    std::vector<SeqState> host_states;
    for (size_t i = 0; i < seqs.size(); ++i) host_states.push_back({states[2 * i], states[2 * i + 1]});
    auto kept = std::make_shared<std::vector<SeqState>>(host_states);
    const StateTable st{kept->data(), d.UpInts(states, int64_t(seqs.size()), 2)};
    const Tensor out = op(d, d.Up(in, T, width), table, st, T);
    const std::vector<float> o = d.Down(out);
    outputs.insert(outputs.end(), o.begin() + size_t(row) * out_width, o.end());
    pos += len;
  }
  const std::vector<float> conv = arena.Conv(d, 1);
  outputs.insert(outputs.end(), conv.begin(), conv.end());
  if (arena.layer.scan != nullptr) {
    const std::vector<float> scan = arena.Scan(d, 1);
    outputs.insert(outputs.end(), scan.begin(), scan.end());
  }
  return outputs;
}

// Every cut the engine may make of one sequence's rows: whole, a row at a
// time, and uneven chunks, alone and beside another sequence.
void ExpectTheSameInEveryCut(Dev& d, Arena& arena, const std::vector<float>& rows, int len, int width,
                             int out_width, const RunCall& op, const std::vector<float>& whole) {
  EXPECT_EQ(whole, RunInCalls(d, arena, rows, width, out_width, {len}, true, op));
  EXPECT_EQ(whole, RunInCalls(d, arena, rows, width, out_width, std::vector<int>(len, 1), false, op));
  EXPECT_EQ(whole, RunInCalls(d, arena, rows, width, out_width, {5, 11, len - 16}, true, op));
  EXPECT_EQ(whole, RunInCalls(d, arena, rows, width, out_width, {len - 1, 1}, true, op));
}

// Causal convolution, K taps, as transformers' causal_conv1d_fn: zeros
// before the first input, out[t] = act(sum_j w[j] x[t - (K - 1) + j]).
std::vector<float> ConvRef(const std::vector<float>& x, const std::vector<float>& w, int T, int C, int K, bool silu,
                           const std::vector<float>& bias = {}) {
  std::vector<float> out(size_t(T) * C);
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < C; ++c) {
      double sum = bias.empty() ? 0.0 : bias[c];
      for (int j = 0; j < K; ++j) {
        const int i = t - (K - 1) + j;
        if (i >= 0) sum += double(w[c * K + j]) * x[size_t(i) * C + c];
      }
      out[size_t(t) * C + c] = static_cast<float>(silu ? SiluD(sum) : sum);
    }
  }
  return out;
}

TEST_P(RecurrentOpsTest, CausalConvCarriesItsWindowAcrossEveryCut) {
  // With a bias (Mamba-2's) and without (the delta net's, LFM2's).
  for (const int K : {3, 4})
  for (const bool bias : {false, true}) {
    for (const ConvActivation act : {ConvActivation::kNone, ConvActivation::kSilu}) {
      RUN_OR_SKIP(device(), MatmulDtype::kF32, KvDtype::kF32, 1e-6, [K, act, bias](Dev& d) {
        const int len = 40, C = 700;  // two bands of channels on the CPU
        const auto x = Random(len * C, 11), w = Random(C * K, 12), b = Random(C, 13);
        const Tensor wt = d.Up(w, C, K), bt = d.Up(b, 1, C);
        Arena arena(d, 4, int64_t{K - 1} * C, 0, 7.0f);
        const RunCall op = [&](Dev& dev, const Tensor& in, const SeqTable& seqs, const StateTable& st, int T) {
          const Tensor out = dev.New(DType::kF32, T, C);
          EXPECT_TRUE(dev->CausalConv(in, seqs, st, arena.layer, wt, bias ? &bt : nullptr, act, out).ok());
          return out;
        };
        const std::vector<float> whole = RunInCalls(d, arena, x, C, C, {len}, false, op);
        const bool silu = act == ConvActivation::kSilu;
        const std::vector<float> want = ConvRef(x, w, len, C, K, silu, bias ? b : std::vector<float>{});
        EXPECT_LT(RelErr(std::vector<float>(whole.begin(), whole.begin() + len * C), want), 1e-6);
        // The window left behind: the last K - 1 inputs, oldest first.
        EXPECT_EQ(std::vector<float>(whole.begin() + len * C, whole.end()),
                  std::vector<float>(x.end() - (K - 1) * C, x.end()));
        ExpectTheSameInEveryCut(d, arena, x, len, C, C, op, whole);
        return whole;
      });
    }
  }
}

TEST_P(RecurrentOpsTest, CausalConvReadsOneSlotAndWritesAnother) {
  RUN_OR_SKIP(device(), MatmulDtype::kF32, KvDtype::kF32, 1e-6, [](Dev& d) {
    const int K = 4, C = 8, T = 3;
    const auto x = Random(T * C, 21), w = Random(C * K, 22), window = Random((K - 1) * C, 23);
    Arena arena(d, 3, (K - 1) * C, 0, 0.0f);
    EXPECT_TRUE(d->Upload(window.data(), arena.data.View(0, 1, (K - 1) * C)).ok());  // slot 0
    const std::vector<SeqRows> seqs = {{0, 5, T, 0}};
    const std::vector<SeqState> states = {{0, 2}};
    const Tensor out = d.New(DType::kF32, T, C);
    EXPECT_TRUE(d->CausalConv(d.Up(x, T, C), d.Seqs(seqs, T), {states.data(), d.UpInts({0, 2}, 1, 2)},
                              arena.layer, d.Up(w, C, K), nullptr, ConvActivation::kNone, out)
                    .ok());
    EXPECT_EQ(arena.Conv(d, 0), window);  // read, not written
    // The window's inputs come before the rows.
    std::vector<float> u(window);
    u.insert(u.end(), x.begin(), x.end());
    const std::vector<float> want = ConvRef(u, w, K - 1 + T, C, K, false);
    const std::vector<float> got = d.Down(out);
    EXPECT_LT(RelErr(got, std::vector<float>(want.begin() + (K - 1) * C, want.end())), 1e-6);
    EXPECT_EQ(arena.Conv(d, 2), std::vector<float>(u.end() - (K - 1) * C, u.end()));
    // Refused: a table naming slots outside the layer, or no state past 0.
    const std::vector<SeqState> outside = {{0, 3}};
    EXPECT_FALSE(d->CausalConv(d.Up(x, T, C), d.Seqs(seqs, T), {outside.data(), d.UpInts({0, 3}, 1, 2)},
                               arena.layer, d.Up(w, C, K), nullptr, ConvActivation::kNone, out)
                     .ok());
    const std::vector<SeqState> none = {{SeqState::kNoSlot, 1}};
    EXPECT_FALSE(d->CausalConv(d.Up(x, T, C), d.Seqs(seqs, T), {none.data(), d.UpInts({-1, 1}, 1, 2)},
                               arena.layer, d.Up(w, C, K), nullptr, ConvActivation::kNone, out)
                     .ok());
    return got;
  });
}

// The gated delta rule as transformers' torch_recurrent_gated_delta_rule
// computes it (in double): value head h reads key head g(h).
struct DeltaRef {
  int Hk, Hv, dk, dv;
  bool tiled;
  int key_head(int h) const { return tiled ? h % Hk : h / (Hv / Hk); }
  // Rows of qkv [T, 2 Hk dk + Hv dv], b and a [T, Hv]; S: [Hv, dk, dv], updated.
  std::vector<float> Run(const std::vector<float>& qkv, const std::vector<float>& b, const std::vector<float>& a,
                         const std::vector<float>& decay_a, const std::vector<float>& dt_bias, int T,
                         std::vector<double>* S) const {
    const int width = 2 * Hk * dk + Hv * dv;
    std::vector<float> out(size_t(T) * Hv * dv);
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < Hv; ++h) {
        const int g = key_head(h);
        const float* qs = &qkv[size_t(t) * width + g * dk];
        const float* ks = &qkv[size_t(t) * width + Hk * dk + g * dk];
        const float* vs = &qkv[size_t(t) * width + 2 * Hk * dk + h * dv];
        double qq = 0, kk = 0;
        for (int i = 0; i < dk; ++i) {
          qq += double(qs[i]) * qs[i];
          kk += double(ks[i]) * ks[i];
        }
        std::vector<double> q(dk), k(dk);
        for (int i = 0; i < dk; ++i) {
          q[i] = qs[i] / std::sqrt(qq + 1e-6) / std::sqrt(double(dk));
          k[i] = ks[i] / std::sqrt(kk + 1e-6);
        }
        const double beta = SigmoidD(b[size_t(t) * Hv + h]);
        const double decay = std::exp(decay_a[h] * SoftplusD(double(a[size_t(t) * Hv + h]) + dt_bias[h]));
        double* s = S->data() + size_t(h) * dk * dv;
        for (int j = 0; j < dv; ++j) {
          double mem = 0;
          for (int i = 0; i < dk; ++i) {
            s[i * dv + j] *= decay;
            mem += s[i * dv + j] * k[i];
          }
          const double delta = (vs[j] - mem) * beta;
          double o = 0;
          for (int i = 0; i < dk; ++i) {
            s[i * dv + j] += k[i] * delta;
            o += s[i * dv + j] * q[i];
          }
          out[size_t(t) * Hv * dv + h * dv + j] = static_cast<float>(o);
        }
      }
    }
    return out;
  }
};

TEST_P(RecurrentOpsTest, GatedDeltaRuleMatchesTheRecurrenceInEveryCut) {
  for (const bool tiled : {false, true}) {
    RUN_OR_SKIP(device(), MatmulDtype::kF32, KvDtype::kF32, 1e-5, [tiled](Dev& d) {
      // Two key heads shared by four value heads; dk and dv differ.
      const DeltaRuleParams p{2, 4, 16, 24, tiled};
      const int len = 40, width = 2 * p.k_heads * p.k_dim + p.v_heads * p.v_dim, out_width = p.v_heads * p.v_dim;
      const auto qkv = Random(len * width, 31), b = Random(len * p.v_heads, 32), a = Random(len * p.v_heads, 33);
      std::vector<float> decay_a = Random(p.v_heads, 34), dt_bias = Random(p.v_heads, 35);
      for (float& v : decay_a) v = -std::exp(v);  // -exp(A_log)
      const Tensor at = d.Up(decay_a, 1, p.v_heads), bt = d.Up(dt_bias, 1, p.v_heads);
      const int64_t scan = int64_t{p.v_heads} * p.k_dim * p.v_dim;
      Arena arena(d, 4, 1, scan, 5.0f);  // a one-value conv window: unused here
      const RunCall op = [&](Dev& dev, const Tensor& in, const SeqTable& seqs, const StateTable& st, int T) {
        // b and a rows for this call: the sequence's own, after the other's.
        const int row = seqs.num_seqs > 1 ? seqs.host[1].row : 0, pos = seqs.host[seqs.num_seqs - 1].pos;
        std::vector<float> bs(size_t(row) * p.v_heads, 0.5f), as(size_t(row) * p.v_heads, -0.5f);
        bs.insert(bs.end(), b.begin() + size_t(pos) * p.v_heads, b.begin() + size_t(pos + T - row) * p.v_heads);
        as.insert(as.end(), a.begin() + size_t(pos) * p.v_heads, a.begin() + size_t(pos + T - row) * p.v_heads);
        const Tensor out = dev.New(DType::kF32, T, out_width);
        EXPECT_TRUE(dev->GatedDeltaRule(in, dev.Up(bs, T, p.v_heads), dev.Up(as, T, p.v_heads), at, bt, seqs, st,
                                        arena.layer, p, out)
                        .ok());
        return out;
      };
      std::vector<float> whole = RunInCalls(d, arena, qkv, width, out_width, {len}, false, op);
      // The conv window's one value was never touched.
      whole.erase(whole.begin() + len * out_width);
      std::vector<double> S(scan, 0.0);
      const DeltaRef ref{p.k_heads, p.v_heads, p.k_dim, p.v_dim, tiled};
      const std::vector<float> want = ref.Run(qkv, b, a, decay_a, dt_bias, len, &S);
      EXPECT_LT(RelErr(std::vector<float>(whole.begin(), whole.begin() + len * out_width), want), 1e-5);
      EXPECT_LT(RelErr(std::vector<float>(whole.begin() + len * out_width, whole.end()),
                       std::vector<float>(S.begin(), S.end())),
                1e-5);
      whole.insert(whole.begin() + len * out_width, 5.0f);
      ExpectTheSameInEveryCut(d, arena, qkv, len, width, out_width, op, whole);
      return whole;
    });
  }
}

TEST_P(RecurrentOpsTest, GatedDeltaRuleReadsOneSlotAndWritesAnother) {
  RUN_OR_SKIP(device(), MatmulDtype::kF32, KvDtype::kF32, 1e-5, [](Dev& d) {
    const DeltaRuleParams p{1, 2, 8, 8, false};
    const int T = 2, width = 2 * 8 + 2 * 8;
    const int64_t scan = 2 * 8 * 8;
    const auto qkv = Random(T * width, 41), b = Random(T * 2, 42), a = Random(T * 2, 43), state = Random(scan, 44);
    const std::vector<float> decay_a = {-1.0f, -0.3f}, dt_bias = {0.1f, -0.2f};
    Arena arena(d, 3, 1, scan, 0.0f);
    EXPECT_TRUE(d->Upload(state.data(), arena.data.View(3, 1, scan)).ok());  // slot 0's scan
    const std::vector<SeqRows> seqs = {{0, 9, T, 0}};
    const std::vector<SeqState> states = {{0, 2}};
    const Tensor out = d.New(DType::kF32, T, 2 * 8);
    EXPECT_TRUE(d->GatedDeltaRule(d.Up(qkv, T, width), d.Up(b, T, 2), d.Up(a, T, 2), d.Up(decay_a, 1, 2),
                                  d.Up(dt_bias, 1, 2), d.Seqs(seqs, T), {states.data(), d.UpInts({0, 2}, 1, 2)},
                                  arena.layer, p, out)
                    .ok());
    EXPECT_EQ(arena.Scan(d, 0), state);  // read, not written
    std::vector<double> S(state.begin(), state.end());
    const DeltaRef ref{1, 2, 8, 8, false};
    const std::vector<float> want = ref.Run(qkv, b, a, decay_a, dt_bias, T, &S);
    const std::vector<float> got = d.Down(out);
    EXPECT_LT(RelErr(got, want), 1e-5);
    EXPECT_LT(RelErr(arena.Scan(d, 2), std::vector<float>(S.begin(), S.end())), 1e-5);
    // Refused: key heads that do not divide the value heads.
    EXPECT_FALSE(d->GatedDeltaRule(d.Up(qkv, T, width), d.Up(b, T, 2), d.Up(a, T, 2), d.Up(decay_a, 1, 2),
                                   d.Up(dt_bias, 1, 2), d.Seqs(seqs, T), {states.data(), d.UpInts({0, 2}, 1, 2)},
                                   arena.layer, DeltaRuleParams{3, 2, 8, 8, false}, out)
                     .ok());
    return got;
  });
}

// Mamba-2's selective scan as transformers' mamba2_selective_state_update
// computes it (in double): head h reads group h / (H / G).
struct ScanRef {
  ScanParams p;
  std::vector<float> Run(const std::vector<float>& xbc, const std::vector<float>& dt, const std::vector<float>& a,
                         const std::vector<float>& d, const std::vector<float>& dt_bias, int T,
                         std::vector<double>* S) const {
    const int H = p.heads, P = p.head_dim, N = p.state_size, width = H * P + 2 * p.groups * N;
    std::vector<float> out(size_t(T) * H * P);
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < H; ++h) {
        const int g = h / (H / p.groups);
        const float* x = &xbc[size_t(t) * width + h * P];
        const float* B = &xbc[size_t(t) * width + H * P + g * N];
        const float* C = &xbc[size_t(t) * width + H * P + p.groups * N + g * N];
        const double step = std::min<double>(std::max<double>(SoftplusD(double(dt[t * H + h]) + dt_bias[h]), p.dt_min),
                                              p.dt_max);
        const double decay = std::exp(step * a[h]);
        for (int i = 0; i < P; ++i) {
          double y = 0;
          for (int n = 0; n < N; ++n) {
            double& s = (*S)[(size_t(h) * P + i) * N + n];
            s = s * decay + step * B[n] * x[i];
            y += s * C[n];
          }
          out[size_t(t) * H * P + h * P + i] = static_cast<float>(y + double(d[h]) * x[i]);
        }
      }
    }
    return out;
  }
};

TEST_P(RecurrentOpsTest, SelectiveScanMatchesTheRecurrenceInEveryCut) {
  RUN_OR_SKIP(device(), MatmulDtype::kF32, KvDtype::kF32, 1e-5, [](Dev& d) {
    // Four heads of 6 in two groups, state 12; dt clamped above.
    const ScanParams p{4, 6, 2, 12, 0.0f, 2.0f};
    const int len = 40, width = p.heads * p.head_dim + 2 * p.groups * p.state_size, out_width = p.heads * p.head_dim;
    const auto xbc = Random(len * width, 61), dt = Random(len * p.heads, 62);
    std::vector<float> a = Random(p.heads, 63), dd = Random(p.heads, 64), dt_bias = Random(p.heads, 65);
    for (float& v : a) v = -std::exp(v);
    for (float& v : dt_bias) v += 1.5f;  // so that some steps reach the clamp
    const Tensor at = d.Up(a, 1, p.heads), dtt = d.Up(dd, 1, p.heads), bt = d.Up(dt_bias, 1, p.heads);
    const int64_t scan = int64_t{p.heads} * p.head_dim * p.state_size;
    Arena arena(d, 4, 1, scan, 3.0f);
    const RunCall op = [&](Dev& dev, const Tensor& in, const SeqTable& seqs, const StateTable& st, int T) {
      const int row = seqs.num_seqs > 1 ? seqs.host[1].row : 0, pos = seqs.host[seqs.num_seqs - 1].pos;
      std::vector<float> dts(size_t(row) * p.heads, 0.25f);
      dts.insert(dts.end(), dt.begin() + size_t(pos) * p.heads, dt.begin() + size_t(pos + T - row) * p.heads);
      const Tensor out = dev.New(DType::kF32, T, out_width);
      EXPECT_TRUE(dev->SelectiveScan(in, dev.Up(dts, T, p.heads), at, dtt, bt, seqs, st, arena.layer, p, out).ok());
      return out;
    };
    std::vector<float> whole = RunInCalls(d, arena, xbc, width, out_width, {len}, false, op);
    whole.erase(whole.begin() + len * out_width);  // the unused one-value window
    std::vector<double> S(scan, 0.0);
    const std::vector<float> want = ScanRef{p}.Run(xbc, dt, a, dd, dt_bias, len, &S);
    EXPECT_LT(RelErr(std::vector<float>(whole.begin(), whole.begin() + len * out_width), want), 1e-5);
    EXPECT_LT(RelErr(std::vector<float>(whole.begin() + len * out_width, whole.end()),
                     std::vector<float>(S.begin(), S.end())),
              1e-5);
    whole.insert(whole.begin() + len * out_width, 3.0f);
    ExpectTheSameInEveryCut(d, arena, xbc, len, width, out_width, op, whole);
    // Refused: groups that do not divide the heads.
    const Tensor out = d.New(DType::kF32, len, out_width);
    const std::vector<SeqRows> seqs = {{0, 0, len, 0}};
    const std::vector<SeqState> states = {{SeqState::kNoSlot, 0}};
    EXPECT_FALSE(d->SelectiveScan(d.Up(xbc, len, width), d.Up(dt, len, p.heads), at, dtt, bt, d.Seqs(seqs, len),
                                  {states.data(), d.UpInts({-1, 0}, 1, 2)}, arena.layer,
                                  ScanParams{4, 6, 3, 12, 0.0f, 2.0f}, out)
                     .ok());
    return whole;
  });
}

// Copy (a state slot kept as a prefix checkpoint): the bytes as they are;
// overlapping or mismatched tensors refused.
TEST_P(RecurrentOpsTest, CopyKeepsASlot) {
  RUN_OR_SKIP(device(), MatmulDtype::kF32, KvDtype::kF32, 0, [](Dev& d) {
    const auto values = Random(2 * 50, 51);
    const Tensor all = d.Up(values, 1, 100);
    EXPECT_TRUE(d->Copy(all.View(0, 1, 50), all.View(50, 1, 50)).ok());
    const std::vector<float> got = d.Down(all);
    EXPECT_EQ(std::vector<float>(got.begin() + 50, got.end()), std::vector<float>(values.begin(), values.begin() + 50));
    EXPECT_FALSE(d->Copy(all.View(0, 1, 50), all.View(25, 1, 50)).ok());
    EXPECT_FALSE(d->Copy(all.View(0, 1, 50), all.View(50, 1, 40)).ok());
    return got;
  });
}

INSTANTIATE_TEST_SUITE_P(Devices, RecurrentOpsTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace flover::kernels
