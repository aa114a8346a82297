// The vision tower's speed on this machine, with seeded random weights on
// the CPU backend (or --device=cuda): SmolVLM2-256M's SigLIP tower and connector (512-px
// tiles, patches of 16, 768 wide, 12 layers, 12 heads, pixel shuffle by 4
// into 576), encoding 1 and 4 tiles at a time; or (--model=qwen3vl)
// Qwen3-VL-2B's tower (patches of 16, 1024 wide, 24 layers, 16 heads, the
// merger and 3 deepstack mergers into 2048) on images of 448 x 448 and
// 1024 x 768 pixels; or (--model=gemma3) Gemma 3 4B's (SigLIP-So400m over
// one 896-px image: patches of 14, 1152 wide, 27 layers, 16 heads, pooled
// 4 x 4 into 256 rows of 2560), whole and a layer a unit (the engine's
// unit: its longest is how long running sequences wait). The time per tile or image, the GFLOP/s it reaches,
// where the time goes (attention against the products), and the backend's
// own product at the tower's MLP shape as the roofline, all in one run.
//
//   .bazel-root/bin/benchmarks/vision_benchmark [--model=smolvlm2|qwen3vl|gemma3] [--repeats=3] [--threads=N] [--bf16]
//       [--device=cpu|cuda]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "benchmarks/profiling_backend.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/cpu_threads.h"
#include "model/vision/qwen3_vl_vision.h"
#include "model/vision/vision_encoder.h"

ABSL_FLAG(int, repeats, 3, "Timed runs per size (the median is printed)");
ABSL_FLAG(int, threads, 0, "CPU threads (0: every core)");
ABSL_FLAG(bool, bf16, false, "The products in bf16 (as flover_server --dtype=bf16 runs the tower)");
ABSL_FLAG(std::string, device, "cpu", "The backend the tower runs on: cpu, or cuda (its EncoderAttention is compiled, never run on a GPU)");
ABSL_FLAG(std::string, model, "smolvlm2", "smolvlm2 (SmolVLM2-256M's tower), qwen3vl (Qwen3-VL-2B's) or gemma3 (Gemma 3 4B's)");

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
  options.device = absl::GetFlag(FLAGS_device);
  if (absl::GetFlag(FLAGS_bf16)) options.matmul = flover::kernels::MatmulDtype::kBF16;
  auto cpu = flover::kernels::CreateBackend(options);
  if (!cpu.ok()) {
    std::fprintf(stderr, "vision_benchmark: %s\n", std::string(cpu.status().message()).c_str());
    return 1;
  }
  flover::ProfilingBackend backend(**cpu);
  int mlp_rows = 1024, mlp_in = 768, mlp_out = 3072;  // the roofline's product: the tower's MLP
  if (absl::GetFlag(FLAGS_model) == "qwen3vl") {
    flover::Qwen3VlVisionInfo q;
    q.hidden = 1024;
    q.heads = 16;
    q.layers = 24;
    q.intermediate = 4096;
    q.positions_side = 48;
    q.out_width = 2048;
    q.deepstack = {5, 11, 17};
    auto tower = flover::Qwen3VlVision::Random(q, backend, 1);
    if (!tower.ok()) {
      std::fprintf(stderr, "vision_benchmark: %s\n", std::string(tower.status().message()).c_str());
      return 1;
    }
    std::printf("Qwen3-VL-2B's vision tower (random weights), %s\n\n", backend.Device().name.c_str());
    std::printf("| image | patches | tokens | GFLOP | s an image (median of %d) | GFLOP/s |\n|---|---:|---:|---:|---:|---:|\n",
                repeats);
    for (auto [w, h] : {std::pair{448, 448}, std::pair{1024, 768}}) {
      const int gh = h / q.patch, gw = w / q.patch;
      const double N = double(gh) * gw, D = q.hidden, F = q.intermediate, J = 4 * D;
      const double flop = 2 * N * q.patch_values() * D +
                          q.layers * (2 * N * D * 3 * D + 4 * N * N * D + 2 * N * D * D + 4 * N * D * F) +
                          (1 + q.deepstack.size()) * (2 * (N / 4) * J * J + 2 * (N / 4) * J * q.out_width);
      std::vector<float> patches(static_cast<size_t>(N) * q.patch_values());
      for (size_t i = 0; i < patches.size(); ++i) patches[i] = static_cast<float>((i * 7919) % 255) / 127.5f - 1.0f;
      (void)(*tower)->Run(patches, gh, gw);  // warm up
      const double s = MedianSeconds(repeats, [&] { (void)(*tower)->Run(patches, gh, gw); });
      std::printf("| %d x %d | %.0f | %.0f | %.1f | %.3f | %.0f |\n", w, h, N, N / 4, flop / 1e9, s, flop / s / 1e9);
    }
    mlp_rows = 1024, mlp_in = q.hidden, mlp_out = q.intermediate;
  } else if (absl::GetFlag(FLAGS_model) == "gemma3") {
    flover::VisionInfo info;
    info.tile = 896;
    info.patch = 14;
    info.hidden = 1152;
    info.heads = 16;
    info.layers = 27;
    info.intermediate = 4304;
    info.scale = 4;
    info.out_width = 2560;
    info.connector = flover::VisionInfo::Connector::kPoolNorm;
    auto encoder = flover::VisionEncoder::Random(info, backend, 1);
    if (!encoder.ok()) {
      std::fprintf(stderr, "vision_benchmark: %s\n", std::string(encoder.status().message()).c_str());
      return 1;
    }
    flover::VisionEncoder& e = **encoder;
    const double N = info.patches(), D = info.hidden, F = info.intermediate, P = 3.0 * info.patch * info.patch;
    const double flop = 2 * N * P * D + info.layers * (2 * N * D * 3 * D + 4 * N * N * D + 2 * N * D * D + 4 * N * D * F) +
                        2 * info.rows_per_tile() * D * info.out_width;
    std::printf("Gemma 3 4B's vision tower (random weights): %d-px image, %d patches, %.1f GFLOP; %s\n\n", info.tile,
                info.patches(), flop / 1e9, backend.Device().name.c_str());
    auto pixels = std::make_shared<std::vector<float>>(static_cast<size_t>(3) * info.tile * info.tile);
    for (size_t i = 0; i < pixels->size(); ++i) (*pixels)[i] = static_cast<float>((i * 7919) % 255) / 127.5f - 1.0f;
    const flover::PromptImage image{pixels, 1, 1};
    (void)e.Encode(*pixels, 1);  // warm up
    const double whole = MedianSeconds(repeats, [&] { (void)e.Encode(*pixels, 1); });
    double longest = 0;
    const int units = e.UnitsOf(image);
    for (int u = 0; u < units; ++u) {
      const auto start = Clock::now();
      (void)e.EncodeUnits(image, u, 1);
      longest = std::max(longest, std::chrono::duration<double>(Clock::now() - start).count());
    }
    std::printf("| image | s (median of %d) | GFLOP/s | units (a layer each) | longest unit, s |\n"
                "|---|---:|---:|---:|---:|\n| %d x %d | %.2f | %.0f | %d | %.2f |\n",
                repeats, info.tile, info.tile, whole, flop / whole / 1e9, units, longest);
    mlp_rows = 4096, mlp_in = info.hidden, mlp_out = info.intermediate;
  } else {
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
  }
  double total = 0;
  for (const auto& [op, seconds] : backend.seconds()) total += seconds;
  std::printf("\nWhere the time went (every call above):\n\n| op | share |\n|---|---:|\n");
  for (const auto& [op, seconds] : backend.seconds()) std::printf("| %s | %.1f%% |\n", op.c_str(), 100 * seconds / total);
  // Roofline: the backend's product at the tower's MLP shape.
  const int M = mlp_rows, K = mlp_in, Nn = mlp_out;
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
