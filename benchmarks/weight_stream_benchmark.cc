// Batch-1 weight streaming on the CPU: one pass of M-row matmuls over every
// weight matrix of a model's shapes, through oneDNN's matmul and through the
// panel kernels (kernels/cpu/panel_matmul.h; for int8, Int8Linear's row
// quantization and epilogue around either), beside a plain parallel sum
// over buffers of the same sizes in the same calls (the ceiling: a decode
// step at batch 1 can stream its weights no faster), and for f32 and bf16
// through FmaLinear (what the backend runs where oneDNN's kernels are not
// batch-invariant: bf16 without AVX-512 BF16, f32 without AVX-512; try it
// under FLOVER_CPU_ISA=avx512 or avx2). Alternates them, --rounds times, and
// prints best and median ms per pass.
//
//   .bazel-root/bin/benchmarks/weight_stream_benchmark [--shapes=gpt2-small|llama-1b]
//       [--dtype=f32|bf16|int8] [--rows=1] [--rounds=7] [--threads=2]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "benchmarks/parallel_sum.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/cpu_threads.h"
#include "kernels/cpu/fma_linear.h"
#include "kernels/cpu/int8_linear.h"
#include "kernels/cpu/onednn_linear.h"
#include "kernels/cpu/weight_arena.h"

ABSL_FLAG(std::string, shapes, "gpt2-small",
          "gpt2-small or llama-1b (whose weight matrices), or one KxN shape repeated: 5632x2048x22");
ABSL_FLAG(std::string, dtype, "f32", "f32, bf16 or int8 weights");
ABSL_FLAG(int, rows, 1, "rows per matmul (the panel kernels take 1 to 3)");
ABSL_FLAG(int, rounds, 7, "passes of each kind, alternating");
ABSL_FLAG(int, threads, 2, "OpenMP threads");

namespace flover {
namespace {

struct Shape {
  int K, N;
};

std::vector<Shape> ModelShapes(const std::string& name) {
  int k = 0, n = 0, count = 0;
  if (std::sscanf(name.c_str(), "%dx%dx%d", &k, &n, &count) == 3 && k > 0 && n > 0 && count > 0) {
    return std::vector<Shape>(count, Shape{k, n});
  }
  const bool llama = name == "llama-1b";
  // TinyLlama-1.1B: qkv, o, gate_up, down, then the LM head; GPT-2 124M: qkv,
  // attention projection, fc, MLP projection, then the LM head (tied to wte).
  const std::vector<Shape> layer =
      llama ? std::vector<Shape>{{2048, 2048 + 2 * 256}, {2048, 2048}, {2048, 2 * 5632}, {5632, 2048}}
            : std::vector<Shape>{{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
  const int layers = llama ? 22 : 12;
  std::vector<Shape> shapes;
  for (int l = 0; l < layers; ++l) shapes.insert(shapes.end(), layer.begin(), layer.end());
  shapes.push_back(llama ? Shape{2048, 32000} : Shape{768, 50257});
  return shapes;
}

double Seconds(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// OneDnnLinear (f32, bf16) or Int8Linear behind one face.
struct Linear {
  std::function<std::unique_ptr<kernels::Weight>(const float*, int, int)> prepare;
  std::function<void(const float*, int, const kernels::Weight&, float*)> run;
  std::function<void(bool)> set_panels;
  std::function<bool(const kernels::Weight&, int)> runs_on_panels;
};

int Main() {
  kernels::SetCpuThreads(absl::GetFlag(FLAGS_threads));
  const std::string name = absl::GetFlag(FLAGS_dtype);
  if (name != "f32" && name != "bf16" && name != "int8") {
    std::fprintf(stderr, "--dtype: f32, bf16 or int8\n");
    return 1;
  }
  const bool int8 = name == "int8";
  const auto dtype = int8 ? kernels::MatmulDtype::kInt8
                     : name == "bf16" ? kernels::MatmulDtype::kBF16 : kernels::MatmulDtype::kF32;
  const int elem = int8 ? 1 : dtype == kernels::MatmulDtype::kBF16 ? 2 : 4;
  if (absl::Status st = int8 ? kernels::Int8Linear::CheckSupported()
                             : kernels::OneDnnLinear::CheckSupported(dtype);
      !st.ok()) {
    std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
    return 1;
  }
  const int M = absl::GetFlag(FLAGS_rows);
  const std::vector<Shape> shapes = ModelShapes(absl::GetFlag(FLAGS_shapes));
  kernels::OneDnnLinear onednn(int8 ? kernels::MatmulDtype::kF32 : dtype);
  kernels::Int8Linear int8_linear;
  Linear linear;
  if (int8) {
    linear.prepare = [&](const float* w, int K, int N) {
      auto weight = int8_linear.Prepare(w, K, N, kernels::WeightLayout::kInOut);
      return weight.ok() ? std::move(*weight) : nullptr;
    };
    linear.run = [&](const float* x, int rows, const kernels::Weight& w, float* out) {
      int8_linear.Run(x, rows, w, nullptr, kernels::Epilogue::kBias, out);
    };
    linear.set_panels = [&](bool on) { int8_linear.set_panels_enabled(on); };
    linear.runs_on_panels = [&](const kernels::Weight& w, int rows) {
      return int8_linear.RunsOnPanels(w, rows);
    };
  } else {
    linear.prepare = [&](const float* w, int K, int N) {
      return onednn.Prepare(w, K, N, kernels::WeightLayout::kInOut);
    };
    linear.run = [&](const float* x, int rows, const kernels::Weight& w, float* out) {
      onednn.Run(x, rows, w, nullptr, kernels::Epilogue::kBias, out);
    };
    linear.set_panels = [&](bool on) { onednn.set_panels_enabled(on); };
    linear.runs_on_panels = [&](const kernels::Weight& w, int rows) {
      return onednn.RunsOnPanels(w, rows, false, kernels::Epilogue::kBias);
    };
  }
  kernels::FmaLinear fma(int8 ? kernels::MatmulDtype::kF32 : dtype);
  std::vector<std::unique_ptr<kernels::Weight>> weights, fma_weights;
  size_t bytes = 0;
  int max_k = 0, max_n = 0;
  uint32_t s = 1;
  for (const Shape& sh : shapes) {
    std::vector<float> w(size_t(sh.K) * sh.N);
    for (float& f : w) {
      s = s * 1664525u + 1013904223u;
      f = (static_cast<float>(s >> 8) / float(1u << 24) - 0.5f) * 0.1f;
    }
    weights.push_back(linear.prepare(w.data(), sh.K, sh.N));
    if (!int8) {
      auto f = fma.Prepare(w.data(), sh.K, sh.N, kernels::WeightLayout::kInOut);
      if (f.ok()) fma_weights.push_back(std::move(*f));
    }
    if (weights.back() == nullptr) {
      std::fprintf(stderr, "cannot prepare a %dx%d weight\n", sh.K, sh.N);
      return 1;
    }
    bytes += size_t(sh.K) * sh.N * elem;
    max_k = std::max(max_k, sh.K);
    max_n = std::max(max_n, sh.N);
  }
  // Set in a way set_panels(true) can undo.
  linear.set_panels(true);
  const bool panels = linear.runs_on_panels(*weights[0], M);
  // The ceiling's buffers: the same sizes, on the same kind of pages.
  kernels::WeightArena arena;
  std::vector<kernels::WeightArena::Block> plain;
  for (const Shape& sh : shapes) {
    const size_t n = size_t(sh.K) * sh.N * elem;
    plain.push_back(arena.Allocate(n));
    char* p = static_cast<char*>(plain.back().data);
    if (p == nullptr) {
      std::fprintf(stderr, "out of memory for %zu bytes\n", n);
      return 1;
    }
    std::fill_n(p, n, 1);
  }
  std::vector<float> x(size_t(M) * max_k, 0.01f), out(size_t(M) * max_n);
  auto pass = [&](bool use_panels) {
    linear.set_panels(use_panels);
    for (const auto& w : weights) linear.run(x.data(), M, *w, out.data());
  };
  volatile float sink = 0;
  auto plain_pass = [&] {
    for (size_t i = 0; i < shapes.size(); ++i) {
      const size_t n = size_t(shapes[i].K) * shapes[i].N * elem / sizeof(float);
      sink = ParallelSum(static_cast<const float*>(plain[i].data), n);
    }
  };
  auto fma_pass = [&] {
    for (const auto& w : fma_weights) fma.Run(x.data(), M, *w, nullptr, kernels::Epilogue::kBias, out.data());
  };
  pass(false);  // first touches, primitive compiles
  if (panels) pass(true);
  plain_pass();
  fma_pass();
  std::vector<double> t_onednn, t_panels, t_plain, t_fma;
  for (int r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {
    t_onednn.push_back(Seconds([&] { pass(false); }));
    if (!fma_weights.empty()) t_fma.push_back(Seconds(fma_pass));
    if (panels) t_panels.push_back(Seconds([&] { pass(true); }));
    t_plain.push_back(Seconds(plain_pass));
  }
  (void)sink;
  std::printf("%s shapes, %zu matrices, %.0f MB of %s weights, %d row(s), %d threads, %d rounds, isa %s\n\n",
              absl::GetFlag(FLAGS_shapes).c_str(), shapes.size(), bytes / 1e6,
              name.c_str(), M, kernels::CpuThreads(), absl::GetFlag(FLAGS_rounds),
              kernels::CpuIsaName().c_str());
  std::printf("| pass | best ms | median ms | GB/s (best) |\n|---|---:|---:|---:|\n");
  auto row = [&](const char* name, std::vector<double> t) {
    if (t.empty()) {
      std::printf("| %s | - | - | - |\n", name);
      return;
    }
    std::sort(t.begin(), t.end());
    std::printf("| %s | %.2f | %.2f | %.1f |\n", name, t.front() * 1e3, t[t.size() / 2] * 1e3,
                bytes / t.front() / 1e9);
  };
  row("oneDNN matmul", t_onednn);
  row(panels ? "panel kernels" : "panel kernels (not on this CPU)", t_panels);
  row(kernels::FmaLinear::Replaces(dtype) ? "FmaLinear (the backend's choice here)" : "FmaLinear", t_fma);
  row("plain sum of the same bytes (ceiling)", t_plain);
  return 0;
}

}  // namespace
}  // namespace flover

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return flover::Main();
}
