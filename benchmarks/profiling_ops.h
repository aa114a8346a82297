// An Ops decorator that times every call per op, to show where a forward
// pass spends its time. Benchmark-only: it adds a clock read per op call.
#ifndef FLOVER_BENCHMARKS_PROFILING_OPS_H_
#define FLOVER_BENCHMARKS_PROFILING_OPS_H_

#include <chrono>
#include <map>
#include <string>

#include "kernels/ops.h"

namespace flover {

class ProfilingOps final : public kernels::Ops {
 public:
  explicit ProfilingOps(kernels::Ops& inner) : inner_(inner) {}
  std::string_view name() const override { return inner_.name(); }

  // Seconds per op since the last Reset.
  const std::map<std::string, double>& seconds() const { return seconds_; }
  void Reset() { seconds_.clear(); }

  void Embed(const int32_t* tokens, const int32_t* positions, int T, const float* wte_rows,
             int vocab_begin, int vocab_end, const float* wpe, int C, float* out) override {
    Timed("embed", [&] {
      inner_.Embed(tokens, positions, T, wte_rows, vocab_begin, vocab_end, wpe, C, out);
    });
  }
  void Add(const float* x, int64_t n, float* out) override {
    Timed("add", [&] { inner_.Add(x, n, out); });
  }
  void LayerNorm(const float* x, int T, int C, const float* g, const float* b, float eps,
                 float* out) override {
    Timed("layernorm", [&] { inner_.LayerNorm(x, T, C, g, b, eps, out); });
  }
  std::unique_ptr<kernels::Weight> PrepareWeight(const float* w, int K, int N,
                                                 kernels::WeightLayout layout) override {
    return inner_.PrepareWeight(w, K, N, layout);
  }
  void Linear(const float* x, int M, const kernels::Weight& w, const float* bias,
              kernels::Epilogue epilogue, float* out) override {
    const int K = w.k(), N = w.n();
    const char* op = N == 3 * K                              ? "linear qkv"
                     : epilogue == kernels::Epilogue::kBiasGelu ? "linear fc+gelu"
                     : K > N                                  ? "linear mlp_proj"
                     : N == K                                 ? "linear attn_proj"
                                                              : "lm_head";
    Timed(op, [&] { inner_.Linear(x, M, w, bias, epilogue, out); });
  }
  kernels::KvDtype kv_dtype() const override { return inner_.kv_dtype(); }
  void PrepareLinear(const kernels::Weight& w, int max_rows, bool has_bias,
                     kernels::Epilogue epilogue) override {
    inner_.PrepareLinear(w, max_rows, has_bias, epilogue);
  }
  void Attention(const float* qkv, const kernels::SeqRows* seqs, int num_seqs,
                 const kernels::KvLayer& kv, float* out) override {
    Timed("attention", [&] { inner_.Attention(qkv, seqs, num_seqs, kv, out); });
  }
  void MoveKvSlot(const kernels::KvLayer& kv, int from, int to, int len) override {
    Timed("kv move", [&] { inner_.MoveKvSlot(kv, from, to, len); });
  }

 private:
  template <typename F>
  void Timed(const char* op, F&& f) {
    const auto start = std::chrono::steady_clock::now();
    f();
    seconds_[op] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  kernels::Ops& inner_;
  std::map<std::string, double> seconds_;
};

}  // namespace flover

#endif  // FLOVER_BENCHMARKS_PROFILING_OPS_H_
