// The vision tower's speed on this machine: SmolVLM2-256M's SigLIP tower and
// connector (512-px tiles, patches of 16, 768 wide, 12 layers, 12 heads,
// pixel shuffle by 4 into 576) with seeded random weights, encoding 1 and 4
// tiles at a time on the CPU backend; the time per tile, the GFLOP/s it
// reaches, where the time goes (attention against the products), and the
// backend's own product at the tower's widest shape as the roofline, all
// in one run.
//
//   .bazel-root/bin/benchmarks/vision_benchmark [--repeats=3] [--threads=N] [--bf16]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "benchmarks/profiling_backend.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/cpu_threads.h"
#include "model/vision/vision_encoder.h"

ABSL_FLAG(int, repeats, 3, "Timed runs per size (the median is printed)");
ABSL_FLAG(int, threads, 0, "CPU threads (0: every core)");
ABSL_FLAG(bool, bf16, false, "The products in bf16 (as flover_server --dtype=bf16 runs the tower)");

namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double MedianSeconds(int repeats, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_threads) > 0) flover::kernels::SetCpuThreads(absl::GetFlag(FLAGS_threads));
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  flover::kernels::BackendOptions options;
  if (absl::GetFlag(FLAGS_bf16)) options.matmul = flover::kernels::MatmulDtype::kBF16;
  auto cpu = flover::kernels::CreateBackend(options);
  if (!cpu.ok()) {
    std::fprintf(stderr, "vision_benchmark: %s\n", std::string(cpu.status().message()).c_str());
    return 1;
  }
  flover::ProfilingBackend backend(**cpu);
  flover::VisionInfo info;
  info.tile = 512;
  info.patch = 16;
  info.hidden = 768;
  info.heads = 12;
  info.layers = 12;
  info.intermediate = 3072;
  info.scale = 4;
  info.out_width = 576;
  auto encoder = flover::VisionEncoder::Random(info, backend, 1);
  if (!encoder.ok()) {
    std::fprintf(stderr, "vision_benchmark: %s\n", std::string(encoder.status().message()).c_str());
    return 1;
  }
  const double N = info.patches(), D = info.hidden, F = info.intermediate, P = 3.0 * info.patch * info.patch;
  const double flop_per_tile = 2 * N * P * D +
                               info.layers * (2 * N * D * 3 * D + 4 * N * N * D + 2 * N * D * D + 4 * N * D * F) +
                               2 * (N / (info.scale * info.scale)) * D * info.scale * info.scale * info.out_width;
  std::printf("SmolVLM2-256M's vision tower (random weights): %d-px tiles, %d patches, %.1f GFLOP a tile; %s\n\n",
              info.tile, info.patches(), flop_per_tile / 1e9, backend.Device().name.c_str());
  std::printf("| tiles a call | s a call (median of %d) | ms a tile | GFLOP/s |\n|---:|---:|---:|---:|\n", repeats);
  for (int n : {1, 4}) {
    std::vector<float> tiles(static_cast<size_t>(n) * 3 * info.tile * info.tile);
    for (size_t i = 0; i < tiles.size(); ++i) tiles[i] = static_cast<float>((i * 7919) % 255) / 127.5f - 1.0f;
    (void)(*encoder)->Encode(tiles, n);  // warm up
    const double s = MedianSeconds(repeats, [&] { (void)(*encoder)->Encode(tiles, n); });
    std::printf("| %d | %.3f | %.0f | %.0f |\n", n, s, 1e3 * s / n, n * flop_per_tile / s / 1e9);
  }
  double total = 0;
  for (const auto& [op, seconds] : backend.seconds()) total += seconds;
  std::printf("\nWhere the time went (every call above):\n\n| op | share |\n|---|---:|\n");
  for (const auto& [op, seconds] : backend.seconds()) std::printf("| %s | %.1f%% |\n", op.c_str(), 100 * seconds / total);
  // Roofline: the backend's product at the MLP's shape, [1024, 768] x [768, 3072].
  const int M = info.patches(), K = info.hidden, Nn = info.intermediate;
  std::vector<float> w(static_cast<size_t>(K) * Nn, 0.01f), a(static_cast<size_t>(M) * K, 0.02f);
  auto weight = (*cpu)->PrepareWeight(w.data(), K, Nn, flover::kernels::WeightLayout::kInOut);
  auto in = (*cpu)->Allocate(flover::kernels::DType::kF32, M, K);
  auto out = (*cpu)->Allocate(flover::kernels::DType::kF32, M, Nn);
  if (weight.ok() && in.ok() && out.ok()) {
    (void)(*cpu)->Upload(a.data(), in->tensor());
    const double s = MedianSeconds(std::max(3, repeats), [&] {
      (void)(*cpu)->Linear(in->tensor(), **weight, nullptr, flover::kernels::Epilogue::kBias, out->tensor());
    });
    std::printf("\nRoofline, same run: the backend's %s product [%d,%d]x[%d,%d]: %.0f GFLOP/s\n",
                flover::kernels::MatmulDtypeName(options.matmul), M, K, K, Nn,
                2.0 * M * K * Nn / s / 1e9);
  }
  return 0;
}
