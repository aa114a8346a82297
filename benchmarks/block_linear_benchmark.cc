// BlockLinear (--dtype=native's CPU kernels) per GGUF block format at one
// weight shape and several row counts, beside this CPU's ceilings measured
// in the same run: the u8 x s8 dot product's peak (independent vpdpbusd,
// 64 multiply-adds each) and the read bandwidth over the weight's bytes.
// The formats alternate, --rounds times; medians are printed.
//
//   .bazel-root/bin/benchmarks/block_linear_benchmark [--shape=576x1536]
//       [--rows=1,4,32,512] [--formats=Q8_0,Q4_0,Q4_1,Q4_K,Q6_K] [--rounds=7]
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "benchmarks/parallel_sum.h"
#include "kernels/block_format.h"
#include "kernels/cpu/block_linear.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/cpu_threads.h"
#include "testing/random_blocks.h"

ABSL_FLAG(std::string, shape, "576x1536", "KxN: input values per row x outputs (SmolLM2's gate/up)");
ABSL_FLAG(std::string, rows, "1,4,32,512", "input rows per call");
ABSL_FLAG(std::string, formats, "Q8_0,Q4_0,Q4_1,Q5_0,Q5_1,Q4_K,Q5_K,Q6_K,MXFP4", "block formats");
ABSL_FLAG(int, rounds, 7, "timed calls of each, alternating");
ABSL_FLAG(int, threads, 2, "OpenMP threads");

namespace flover {
namespace {

using Clock = std::chrono::steady_clock;
using kernels::BlockFormat;

// Multiply-adds per second of independent vpdpbusd on every thread (16
// chains, more than latency x throughput on the cores seen; nothing else in
// the loop).
__attribute__((target("avx512f,avx512bw,avx512vnni"))) double VnniPeak() {
  constexpr int kIters = 1 << 22, kChains = 16;
  const auto start = Clock::now();
  int sink = 0;
#pragma omp parallel reduction(+ : sink)
  {
    __m512i acc[kChains];
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_epi32(i);
    const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(5);
    for (int it = 0; it < kIters; ++it) {
#pragma GCC unroll 16
      for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
    }
    for (int i = 0; i < kChains; ++i) sink += _mm512_reduce_add_epi32(acc[i]);
  }
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  if (sink == 42) std::printf(" ");
  return 64.0 * kChains * kIters * omp_get_max_threads() / s;
}

int Run(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  kernels::SetCpuThreads(absl::GetFlag(FLAGS_threads));
  int K = 0, N = 0;
  if (std::sscanf(absl::GetFlag(FLAGS_shape).c_str(), "%dx%d", &K, &N) != 2 || K <= 0 || N <= 0) {
    std::fprintf(stderr, "--shape: want KxN, got %s\n", absl::GetFlag(FLAGS_shape).c_str());
    return 2;
  }
  std::vector<int> rows;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_rows), ',')) {
    int m = 0;
    if (!absl::SimpleAtoi(s, &m) || m < 1) {
      std::fprintf(stderr, "--rows: %s is not a row count\n", std::string(s).c_str());
      return 2;
    }
    rows.push_back(m);
  }
  if (absl::Status st = kernels::BlockLinear::CheckSupported(); !st.ok()) {
    std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
    return 1;
  }
  struct Entry {
    std::string name;
    int64_t bytes;
    kernels::BlockLinear linear;
    std::unique_ptr<kernels::Weight> weight;
  };
  std::vector<Entry> entries;
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_formats), ',')) {
    BlockFormat f{};
    bool found = false;
    for (BlockFormat g : kernels::kAllBlockFormats) {
      if (name == kernels::InfoOf(g).name) f = g, found = true;
    }
    if (!found) {
      std::fprintf(stderr, "--formats: %s is not one of Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4\n",
                   std::string(name).c_str());
      return 2;
    }
    if (!kernels::BlockRowsFit(f, K)) {
      std::printf("(%s skipped: rows of %d values are not whole blocks for its kernels)\n", std::string(name).c_str(), K);
      continue;
    }
    const std::vector<uint8_t> bytes = testing::RandomBlockRows(f, N, K, 1);
    const kernels::BlockSpan span{f, N};
    entries.push_back({std::string(name), static_cast<int64_t>(bytes.size()), {}, nullptr});
    auto w = entries.back().linear.Prepare(kernels::HostValues(bytes.data(), &span, 1), K, N,
                                           kernels::WeightLayout::kOutIn);
    if (!w.ok()) {
      std::fprintf(stderr, "%s\n", std::string(w.status().message()).c_str());
      return 1;
    }
    entries.back().weight = std::move(*w);
  }
  const int max_rows = *std::max_element(rows.begin(), rows.end());
  std::vector<float> x(static_cast<size_t>(max_rows) * K), out(static_cast<size_t>(max_rows) * N);
  std::mt19937 rng(2);
  std::normal_distribution<float> normal;
  for (float& v : x) v = normal(rng);

  // The vpdpbusd peak where the tiles in use run on it (AVX-512 VNNI); the
  // AVX2 tiles are measured against the read bandwidth alone.
  const bool vnni = kernels::CpuIsa().avx512_vnni;
  const double peak = vnni ? VnniPeak() : 0.0, bandwidth = ReadBandwidthGBs(5) * 1e9;
  std::printf("BlockLinear [M,%d] x [%d,%d]^T, %d threads, isa %s\n", K, N, K, omp_get_max_threads(),
              kernels::CpuIsaName().c_str());
  std::printf("ceilings, same run: vpdpbusd %.0f GMAC/s%s; read bandwidth %.1f GB/s\n\n", peak / 1e9,
              vnni ? "" : " (not in use)", bandwidth / 1e9);
  std::printf("| format | weight MB | M | us per call | GMAC/s | of vpdpbusd peak | GB/s of weights |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  const int rounds = absl::GetFlag(FLAGS_rounds);
  for (int m : rows) {
    std::vector<std::vector<double>> times(entries.size());
    for (Entry& e : entries) {  // warm
      e.linear.Run(x.data(), m, *e.weight, nullptr, kernels::Epilogue::kBias, out.data());
    }
    const int calls = std::max(1, 4096 / m);
    for (int r = 0; r < rounds; ++r) {
      for (size_t i = 0; i < entries.size(); ++i) {
        const auto start = Clock::now();
        for (int c = 0; c < calls; ++c) {
          entries[i].linear.Run(x.data(), m, *entries[i].weight, nullptr, kernels::Epilogue::kBias, out.data());
        }
        times[i].push_back(std::chrono::duration<double>(Clock::now() - start).count() / calls);
      }
    }
    for (size_t i = 0; i < entries.size(); ++i) {
      std::sort(times[i].begin(), times[i].end());
      const double t = times[i][times[i].size() / 2];
      const double macs = static_cast<double>(m) * K * N;
      // No share of a peak where the tiles do not run on vpdpbusd.
      const std::string of_peak = peak > 0 ? absl::StrFormat("%.0f%%", 100 * macs / t / peak) : "n/a";
      std::printf("| %s | %.2f | %d | %.1f | %.1f | %s | %.1f |\n", entries[i].name.c_str(),
                  entries[i].bytes / 1e6, m, t * 1e6, macs / t / 1e9, of_peak.c_str(),
                  entries[i].bytes / t / 1e9);
    }
  }
  return 0;
}

}  // namespace
}  // namespace flover

int main(int argc, char** argv) { return flover::Run(argc, argv); }
