// A Backend decorator that times every op, to show where a forward pass
// spends its time. Benchmark-only: it synchronizes after each op (so a
// device's asynchronous work is charged to the op that queued it) and adds a
// clock read per call.
#ifndef FLOVER_BENCHMARKS_PROFILING_BACKEND_H_
#define FLOVER_BENCHMARKS_PROFILING_BACKEND_H_

#include <chrono>
#include <map>
#include <string>

#include "kernels/backend.h"

namespace flover {

class ProfilingBackend final : public kernels::Backend {
 public:
  explicit ProfilingBackend(kernels::Backend& inner) : inner_(inner) {}

  // Seconds per op since the last Reset.
  const std::map<std::string, double>& seconds() const { return seconds_; }
  void Reset() { seconds_.clear(); }

  std::string_view name() const override { return inner_.name(); }
  kernels::DeviceInfo Device() const override { return inner_.Device(); }
  kernels::MatmulDtype matmul_dtype() const override { return inner_.matmul_dtype(); }
  kernels::KvFormat kv_format() const override { return inner_.kv_format(); }
  kernels::DType activation_dtype() const override { return inner_.activation_dtype(); }

  // Memory belongs to the inner backend (its Buffers free themselves there).
  absl::StatusOr<kernels::Buffer> Allocate(kernels::DType dtype, int64_t rows,
                                           int64_t cols) override {
    return inner_.Allocate(dtype, rows, cols);
  }
  void Free(void* data) override { inner_.Free(data); }
  absl::Status Upload(const void* host, const kernels::Tensor& dst) override {
    return Timed("upload", [&] { return inner_.Upload(host, dst); });
  }
  absl::Status Download(const kernels::Tensor& src, void* host) override {
    return Timed("download", [&] { return inner_.Download(src, host); });
  }
  void* HostAddress(const kernels::Tensor& t) override { return inner_.HostAddress(t); }
  absl::Status Synchronize() override { return inner_.Synchronize(); }
  void* stream() override { return inner_.stream(); }

  absl::StatusOr<std::unique_ptr<kernels::Weight>> PrepareWeight(
      kernels::HostValues w, int K, int N, kernels::WeightLayout layout) override {
    return inner_.PrepareWeight(w, K, N, layout);
  }
  absl::Status PrepareLinear(const kernels::Weight& w, int max_rows, bool has_bias,
                             kernels::Epilogue epilogue) override {
    return inner_.PrepareLinear(w, max_rows, has_bias, epilogue);
  }

  absl::Status Embed(const kernels::Tensor& tokens, const kernels::Tensor& positions,
                     const kernels::Tensor& wte_rows, int vocab_begin,
                     const kernels::Tensor* wpe, const kernels::Tensor& out) override {
    return Timed("embed", [&] {
      return inner_.Embed(tokens, positions, wte_rows, vocab_begin, wpe, out);
    });
  }
  absl::StatusOr<std::unique_ptr<kernels::BlockRows>> PrepareBlockRows(kernels::BlockFormat format,
                                                                       const uint8_t* bytes,
                                                                       int64_t rows, int cols) override {
    return inner_.PrepareBlockRows(format, bytes, rows, cols);
  }
  absl::Status EmbedBlocks(const kernels::Tensor& tokens, const kernels::Tensor& positions,
                           const kernels::BlockRows& table, int vocab_begin, float scale,
                           const kernels::Tensor* wpe, const kernels::Tensor& out) override {
    return Timed("embed", [&] {
      return inner_.EmbedBlocks(tokens, positions, table, vocab_begin, scale, wpe, out);
    });
  }
  absl::Status ArgmaxRows(const kernels::Tensor& x, const kernels::Tensor& out) override {
    return Timed("argmax", [&] { return inner_.ArgmaxRows(x, out); });
  }
  absl::Status Add(const kernels::Tensor& x, const kernels::Tensor& out) override {
    return Timed("add", [&] { return inner_.Add(x, out); });
  }
  absl::Status LayerNorm(const kernels::Tensor& x, const kernels::Tensor& g,
                         const kernels::Tensor& b, float eps,
                         const kernels::Tensor& out) override {
    return Timed("layernorm", [&] { return inner_.LayerNorm(x, g, b, eps, out); });
  }
  absl::Status RmsNorm(const kernels::Tensor& x, const kernels::Tensor& g, float eps,
                       const kernels::Tensor& out) override {
    return Timed("rmsnorm", [&] { return inner_.RmsNorm(x, g, eps, out); });
  }
  absl::Status Rope(const kernels::Tensor& qkv, const kernels::Tensor& positions,
                    const kernels::Tensor& inv_freq, const kernels::RopeParams& p) override {
    return Timed("rope", [&] { return inner_.Rope(qkv, positions, inv_freq, p); });
  }
  absl::Status Glu(const kernels::Tensor& gate_up, kernels::GluKind kind,
                   const kernels::Tensor& out) override {
    return Timed("act(gate)*up", [&] { return inner_.Glu(gate_up, kind, out); });
  }
  absl::Status GroupRmsNorm(const kernels::Tensor& x, int first, int groups, const kernels::Tensor& gamma,
                            float eps) override {
    return Timed("group_rmsnorm", [&] { return inner_.GroupRmsNorm(x, first, groups, gamma, eps); });
  }
  absl::Status Route(const kernels::Tensor& logits, const kernels::RouterParams& p, const kernels::Tensor& ids,
                     const kernels::Tensor& weights) override {
    return Timed("route", [&] { return inner_.Route(logits, p, ids, weights); });
  }
  absl::Status LinearById(const kernels::Tensor& x, absl::Span<const kernels::Weight* const> experts,
                          const kernels::Tensor* bias, const kernels::Tensor& ids,
                          const kernels::Tensor& out) override {
    return Timed("linear_by_id", [&] { return inner_.LinearById(x, experts, bias, ids, out); });
  }
  bool LinearByIdWaits(absl::Span<const kernels::Weight* const> experts) const override {
    return inner_.LinearByIdWaits(experts);
  }
  absl::Status WeightedRowSum(const kernels::Tensor& y, const kernels::Tensor& weights,
                              const kernels::Tensor& out) override {
    return Timed("weighted_row_sum", [&] { return inner_.WeightedRowSum(y, weights, out); });
  }
  absl::Status Sigmoid(const kernels::Tensor& x) override {
    return Timed("sigmoid", [&] { return inner_.Sigmoid(x); });
  }
  absl::Status Scale(const kernels::Tensor& x, float s) override {
    return Timed("scale", [&] { return inner_.Scale(x, s); });
  }
  absl::Status SoftCap(const kernels::Tensor& x, float cap) override {
    return Timed("softcap", [&] { return inner_.SoftCap(x, cap); });
  }
  absl::Status Linear(const kernels::Tensor& x, const kernels::Weight& w,
                      const kernels::Tensor* bias, kernels::Epilogue epilogue,
                      const kernels::Tensor& out) override {
    // GPT-2's layers by name; any other shape as "linear KxN" (Llama's
    // qkv, o, gate_up and down each have one), and a vocabulary-wide
    // output is the LM head.
    const int K = w.k(), N = w.n();
    const std::string op = N == 3 * K                                 ? "linear qkv"
                           : epilogue == kernels::Epilogue::kBiasGelu ? "linear fc+gelu"
                           : N >= 8 * K                               ? "lm_head"
                           : K == 4 * N                               ? "linear mlp_proj"
                           : N == K && K <= 1024                      ? "linear attn_proj"
                                                                      : "linear " + std::to_string(K) + "x" + std::to_string(N);
    return Timed(op, [&] { return inner_.Linear(x, w, bias, epilogue, out); });
  }
  absl::Status AppendKv(const kernels::Tensor& qkv, const kernels::SeqTable& seqs,
                        const kernels::KvLayer& kv) override {
    return Timed("kv append", [&] { return inner_.AppendKv(qkv, seqs, kv); });
  }
  absl::Status Attention(const kernels::Tensor& qkv, const kernels::SeqTable& seqs,
                         const kernels::KvLayer& kv, const kernels::AttentionParams& p,
                         const kernels::Tensor& out) override {
    return Timed("attention", [&] { return inner_.Attention(qkv, seqs, kv, p, out); });
  }
  absl::Status EncoderAttention(const kernels::Tensor& qkv, absl::Span<const int32_t> group_ends, int heads,
                                float scale, const kernels::Tensor& out) override {
    return Timed("encoder attention", [&] { return inner_.EncoderAttention(qkv, group_ends, heads, scale, out); });
  }
  absl::Status GatherLastRows(const kernels::Tensor& x, const kernels::SeqTable& seqs,
                              const kernels::Tensor& out) override {
    return Timed("gather rows", [&] { return inner_.GatherLastRows(x, seqs, out); });
  }
  absl::Status Copy(const kernels::Tensor& src, const kernels::Tensor& dst) override {
    return Timed("copy", [&] { return inner_.Copy(src, dst); });
  }
  absl::Status Gate(const kernels::Tensor& x, const kernels::Tensor& gate, kernels::GateKind act,
                    const kernels::Tensor& out) override {
    return Timed("gate", [&] { return inner_.Gate(x, gate, act, out); });
  }
  absl::Status CausalConv(const kernels::Tensor& x, const kernels::SeqTable& seqs, const kernels::StateTable& states,
                          const kernels::StateLayer& layer, const kernels::Tensor& w, const kernels::Tensor* bias,
                          kernels::ConvActivation act, const kernels::Tensor& out) override {
    return Timed("causal conv", [&] { return inner_.CausalConv(x, seqs, states, layer, w, bias, act, out); });
  }
  absl::Status GatedDeltaRule(const kernels::Tensor& qkv, const kernels::Tensor& b, const kernels::Tensor& a,
                              const kernels::Tensor& decay_a, const kernels::Tensor& dt_bias,
                              const kernels::SeqTable& seqs, const kernels::StateTable& states,
                              const kernels::StateLayer& layer, const kernels::DeltaRuleParams& p,
                              const kernels::Tensor& out) override {
    return Timed("gated delta rule",
                 [&] { return inner_.GatedDeltaRule(qkv, b, a, decay_a, dt_bias, seqs, states, layer, p, out); });
  }
  absl::Status SelectiveScan(const kernels::Tensor& xbc, const kernels::Tensor& dt, const kernels::Tensor& a,
                             const kernels::Tensor& d, const kernels::Tensor& dt_bias, const kernels::SeqTable& seqs,
                             const kernels::StateTable& states, const kernels::StateLayer& layer,
                             const kernels::ScanParams& p, const kernels::Tensor& out) override {
    return Timed("selective scan",
                 [&] { return inner_.SelectiveScan(xbc, dt, a, d, dt_bias, seqs, states, layer, p, out); });
  }

 private:
  template <typename F>
  absl::Status Timed(const std::string& op, F&& f) {
    const auto start = std::chrono::steady_clock::now();
    absl::Status st = f();
    if (st.ok()) st = inner_.Synchronize();
    seconds_[op] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return st;
  }

  kernels::Backend& inner_;
  std::map<std::string, double> seconds_;
};

}  // namespace flover

#endif  // FLOVER_BENCHMARKS_PROFILING_BACKEND_H_
